//! WebAssembly (wasm32-wasi, wasm32-freestanding): one linear memory that
//! only grows, in 64 KiB pages, and no threads (without shared memory a
//! wasm module is single-threaded).
//!
//! What differs, and what kennel does instead:
//! - Nothing can be unmapped, reserved or protected. Memory comes from
//!   memory.grow; "unmapping" puts the range on a free list kept here (in
//!   the free ranges themselves, sorted and merged), and `map` takes from it
//!   first, zeroing what it reuses. So a program that frees memory reuses
//!   it, but the module's memory never shrinks.
//! - Purging does nothing (no memory can go back to the host), and there
//!   are no guard pages (`can_protect` is false).
//! - Growing in place takes the free range right after a mapping, or grows
//!   the memory when the mapping ends it. Pages cannot move.
//! - wasm32-freestanding has no clock: decay periods never end, and free
//!   memory goes back (to the free list) under the budget alone; no stderr:
//!   messages are dropped.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("../os.zig");

comptime {
    if (!builtin.single_threaded) @compileError("kennel on wasm needs a single-threaded build: " ++
        "wasm threads give no notice of thread exit");
}

pub const can_move = false;
pub const can_protect = false;
pub const purge_needs_commit = false;
pub const purge_zeroes = false;
pub const thread_exit_callback = false;
pub const can_probe_threads = false;

const wasm_page_bytes = 64 * 1024;

comptime {
    // Every length and address kennel passes here is a whole wasm page.
    assert(std.heap.page_size_min == wasm_page_bytes and std.heap.page_size_max == wasm_page_bytes);
}

/// A free range, described at its own start.
const FreeRange = struct {
    len: usize,
    next: ?*FreeRange,

    fn start(range: *const FreeRange) usize {
        return @intFromPtr(range);
    }

    fn end(range: *const FreeRange) usize {
        return @intFromPtr(range) + range.len;
    }
};

/// Free ranges, sorted by address, never adjacent (merged when freed).
var free_list: ?*FreeRange = null;

fn memoryEnd() usize {
    return @wasmMemorySize(0) * wasm_page_bytes;
}

/// Grows the memory so that it ends at `new_end`; false if the host refuses.
fn growTo(new_end: usize) bool {
    const end = memoryEnd();
    assert(new_end > end and new_end % wasm_page_bytes == 0);
    return @wasmMemoryGrow(0, (new_end - end) / wasm_page_bytes) >= 0;
}

/// Puts [start, start+len) on the free list, merging with its neighbours.
fn release(start: usize, len: usize) void {
    assert(start % wasm_page_bytes == 0 and len % wasm_page_bytes == 0 and len > 0);
    var prev: ?*FreeRange = null;
    var next = free_list;
    // Bounded by the list's length.
    while (next) |range| {
        if (range.start() > start) break;
        assert(range.end() <= start);
        prev = range;
        next = range.next;
    }
    var range: *FreeRange = @ptrFromInt(start);
    range.* = .{ .len = len, .next = next };
    if (next) |n| if (range.end() == n.start()) {
        assert(range.end() <= n.start());
        range.len += n.len;
        range.next = n.next;
    };
    if (prev) |p| {
        assert(p.end() <= start);
        if (p.end() == start) {
            p.len += range.len;
            p.next = range.next;
        } else p.next = range;
    } else free_list = range;
}

/// Takes [start, start+len) out of the free range `range` (found through
/// `link`), returning the pieces before and after it to the list.
fn carve(link: *?*FreeRange, range: *FreeRange, start: usize, len: usize) void {
    const range_start = range.start();
    const range_end = range.end();
    assert(start >= range_start and start + len <= range_end);
    link.* = range.next;
    if (start > range_start) release(range_start, start - range_start);
    if (range_end > start + len) release(start + len, range_end - (start + len));
}

fn zero(start: usize, len: usize) void {
    @memset(@as([*]u8, @ptrFromInt(start))[0..len], 0);
}

fn alignedStart(base: usize, alignment: usize, offset: usize) ?usize {
    const shifted = std.math.add(usize, base, offset) catch return null;
    if (shifted > std.math.maxInt(usize) - alignment) return null;
    return std.mem.alignForward(usize, shifted, alignment) - offset;
}

pub fn map(len: usize, alignment: usize, offset: usize) ?usize {
    // First fit among the free ranges. Bounded by the list's length.
    var link: *?*FreeRange = &free_list;
    while (link.*) |range| : (link = &range.next) {
        const start = alignedStart(range.start(), alignment, offset) orelse continue;
        if (start > range.end() or range.end() - start < len) continue;
        carve(link, range, start, len);
        zero(start, len);
        return start;
    }
    // Grow the memory, starting in the free range that ends it, if any.
    const end = memoryEnd();
    var base = end;
    link = &free_list;
    while (link.*) |range| : (link = &range.next) {
        if (range.end() == end) {
            base = range.start();
            break;
        }
    }
    const start = alignedStart(base, alignment, offset) orelse return null;
    const new_end = std.math.add(usize, start, len) catch return null;
    assert(new_end > end);
    if (!growTo(new_end)) return null;
    if (base < end) {
        // The top free range is part of the mapping (and perhaps of the gap).
        const top = link.*.?;
        link.* = top.next;
        if (start < end) zero(start, end - start);
    }
    // The gap left for the alignment serves smaller mappings later.
    if (start > base) release(base, start - base);
    return start;
}

pub fn unmap(address: usize, len: usize) void {
    release(address, len);
}

pub fn purge(address: usize, len: usize) void {
    // Linear memory cannot be given back to the host.
    _ = address;
    _ = len;
}

pub fn discard(address: usize, len: usize) void {
    @memset(@as([*]u8, @ptrFromInt(address))[0..len], 0);
}

pub fn commit(address: usize, len: usize) bool {
    _ = .{ address, len };
    comptime unreachable; // purge_needs_commit is false
}

pub fn adviseHugePages(address: usize, len: usize) void {
    _ = address;
    _ = len;
}

pub fn protectNone(address: usize, len: usize) bool {
    _ = .{ address, len };
    comptime unreachable; // can_protect is false
}

pub fn protectReadWrite(address: usize, len: usize) bool {
    _ = .{ address, len };
    comptime unreachable; // can_protect is false
}

/// Takes the free range right after the mapping, growing the memory when
/// the mapping (or that range) ends it.
pub fn growInPlace(address: usize, old_len: usize, new_len: usize) bool {
    const want_start = address + old_len;
    const want_end = std.math.add(usize, address, new_len) catch return false;
    const end = memoryEnd();
    if (want_start == end) {
        return growTo(want_end);
    }
    var link: *?*FreeRange = &free_list;
    while (link.*) |range| : (link = &range.next) {
        if (range.start() > want_start) return false;
        if (range.start() != want_start) continue;
        if (range.end() >= want_end) {
            carve(link, range, want_start, want_end - want_start);
            zero(want_start, want_end - want_start);
            return true;
        }
        if (range.end() != end or !growTo(want_end)) return false;
        link.* = range.next;
        zero(want_start, end - want_start);
        return true;
    }
    return false;
}

pub fn shrinkInPlace(address: usize, old_len: usize, new_len: usize) void {
    release(address + new_len, old_len - new_len);
}

pub fn moveInto(address: usize, old_len: usize, dest: usize, new_len: usize) bool {
    _ = .{ address, old_len, dest, new_len };
    comptime unreachable; // can_move is false
}

pub fn nowNanoseconds() u64 {
    if (builtin.os.tag != .wasi) return 0;
    var now: std.os.wasi.timestamp_t = 0;
    if (std.os.wasi.clock_time_get(.MONOTONIC, std.time.ns_per_ms, &now) != .SUCCESS) return 0;
    return now;
}

/// WASI's random_get; wasm32-freestanding has none.
pub fn fillRandom(bytes: []u8) bool {
    if (builtin.os.tag != .wasi) return false;
    return std.os.wasi.random_get(bytes.ptr, bytes.len) == .SUCCESS;
}

pub const Pid = i32;

/// One process, one thread.
pub fn currentPid() Pid {
    return 1;
}

pub fn currentTid() os.Tid {
    return 1;
}

pub fn yieldThread() void {}

pub fn threadIsAlive(pid: Pid, tid: os.Tid) bool {
    _ = .{ pid, tid };
    comptime unreachable; // can_probe_threads is false
}

pub fn writeStderr(bytes: []const u8) void {
    if (builtin.os.tag != .wasi) return;
    var written_total: usize = 0;
    while (written_total < bytes.len) {
        const iov: std.os.wasi.ciovec_t = .{ .base = bytes.ptr + written_total, .len = bytes.len - written_total };
        var written: usize = 0;
        if (std.os.wasi.fd_write(2, @ptrCast(&iov), 1, &written) != .SUCCESS or written == 0) return;
        written_total += written;
    }
}

pub fn abort() noreturn {
    @trap();
}

/// Tests: all memory below the end is accessible.
pub fn access(address: usize) os.Access {
    return if (address < memoryEnd()) .read_write else .unmapped;
}
