//! Everything kennel asks of the operating system: mapping and unmapping
//! address space, giving physical memory back (purging), resizing huge
//! mappings in place or by moving their pages, and the thread/process ids
//! that thread ownership is built on.
//!
//! Every function here reports failure by returning null or false; none of
//! them panics, so an out-of-memory condition travels up to the caller of
//! `alloc` as a null pointer and the allocator's state stays consistent.
//!
//! The count of bytes currently mapped (`mappedBytes`) is kept here, next to
//! the only calls that change it, so it is exact by construction.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const assert = std.debug.assert;

comptime {
    if (builtin.os.tag != .linux) {
        @compileError("kennel supports Linux only (x86_64 and aarch64); " ++
            "on other systems use std.heap.smp_allocator or std.heap.c_allocator");
    }
    switch (builtin.cpu.arch) {
        .x86_64, .aarch64 => {},
        else => @compileError("kennel supports x86_64 and aarch64 only"),
    }
}

/// The smallest page size the kernel may use on the target. Layout decisions
/// (block alignment, segment header size) are made against this; the real
/// page size, which may be larger on aarch64, is asked for at run time.
pub const page_size_min_bytes = std.heap.page_size_min;

/// Kennel's page size limits are designed for kernels whose pages are at
/// most 64 KiB (x86_64: 4 KiB; aarch64: 4, 16 or 64 KiB).
pub const page_size_max_bytes = 64 * 1024;

comptime {
    assert(std.heap.page_size_max <= page_size_max_bytes);
}

/// Bytes currently mapped by kennel: segments, huge allocations, heap
/// metadata. Changed only by `map`, `unmap` and the huge remap functions.
var mapped_bytes: std.atomic.Value(usize) = .init(0);
/// High-water mark of `mapped_bytes`.
var mapped_bytes_peak: std.atomic.Value(usize) = .init(0);

pub fn mappedBytes() usize {
    // Monotonic: a statistic, read without ordering against other memory.
    return mapped_bytes.load(.monotonic);
}

pub fn mappedBytesPeak() usize {
    // Monotonic: a statistic, as above.
    return mapped_bytes_peak.load(.monotonic);
}

fn accountMapped(delta: isize) void {
    if (builtin.single_threaded) {
        mapped_bytes.raw +%= @bitCast(delta);
        mapped_bytes_peak.raw = @max(mapped_bytes_peak.raw, mapped_bytes.raw);
        return;
    }
    // Monotonic: counters order nothing; they only need to be exact in sum.
    const before = mapped_bytes.fetchAdd(@bitCast(delta), .monotonic);
    const after = before +% @as(usize, @bitCast(delta));
    // Monotonic: a high-water mark, as above.
    if (delta > 0) _ = mapped_bytes_peak.fetchMax(after, .monotonic);
}

/// The kernel's page size, queried once.
pub fn pageSize() usize {
    return std.heap.pageSize();
}

/// Rounds up to whole kernel pages; null if that overflows.
pub fn pageAlignForward(len: usize) ?usize {
    const page = pageSize();
    if (len > std.math.maxInt(usize) - page) return null;
    return std.mem.alignForward(usize, len, page);
}

/// Maps `len` bytes of fresh, zeroed, read-write memory such that
/// `result + offset` is a multiple of `alignment`. `len` is rounded up to the
/// page size. The mapping starts at `result`. Returns null when the kernel
/// refuses (out of memory, address space limit).
pub fn map(len: usize, alignment: usize, offset: usize) ?[*]align(page_size_min_bytes) u8 {
    const page = pageSize();
    assert(std.math.isPowerOfTwo(alignment));
    assert(offset % page == 0);
    const len_aligned = pageAlignForward(len) orelse return null;
    if (alignment > page) {
        // The kernel tends to place a mapping right below the previous one,
        // so after the first aligned segment a plain mmap is often aligned
        // already: one system call instead of three.
        const rc = linux.mmap(null, len_aligned, .{ .READ = true, .WRITE = true }, .{ .TYPE = .PRIVATE, .ANONYMOUS = true, .NORESERVE = true }, -1, 0);
        if (linux.errno(rc) != .SUCCESS) return null;
        if ((rc + offset) % alignment == 0) {
            accountMapped(@intCast(len_aligned));
            return @ptrFromInt(rc);
        }
        unmapRaw(rc, len_aligned);
    }
    // Over-map by the alignment so that an aligned start exists inside, then
    // trim both ends. Alignments up to the page size need no trimming.
    const slack = if (alignment > page) alignment else 0;
    const request = std.math.add(usize, len_aligned, slack) catch return null;
    const rc = linux.mmap(null, request, .{ .READ = true, .WRITE = true }, .{ .TYPE = .PRIVATE, .ANONYMOUS = true, .NORESERVE = true }, -1, 0);
    if (linux.errno(rc) != .SUCCESS) {
        warn("out of memory: the kernel refused a mapping of {d} bytes ({s})", .{ request, @tagName(linux.errno(rc)) });
        return null;
    }
    const raw = rc;
    const start = std.mem.alignForward(usize, raw + offset, @max(alignment, page)) - offset;
    assert(start >= raw);
    assert(start + len_aligned <= raw + request);
    if (start > raw) unmapRaw(raw, start - raw);
    const tail = raw + request - (start + len_aligned);
    if (tail > 0) unmapRaw(start + len_aligned, tail);
    accountMapped(@intCast(len_aligned));
    return @ptrFromInt(start);
}

/// Returns a mapping made by `map` (or resized by `remap*`) to the kernel.
pub fn unmap(ptr: [*]align(page_size_min_bytes) u8, len: usize) void {
    const len_aligned = std.mem.alignForward(usize, len, pageSize());
    unmapRaw(@intFromPtr(ptr), len_aligned);
    accountMapped(-@as(isize, @intCast(len_aligned)));
}

fn unmapRaw(addr: usize, len: usize) void {
    const rc = linux.munmap(@ptrFromInt(addr), len);
    // munmap fails only for invalid arguments, which would be a kennel bug.
    assert(linux.errno(rc) == .SUCCESS);
}

/// Tells the kernel that the contents of [ptr, ptr+len) are no longer needed:
/// the physical pages are released now and read back as zeroes. The range is
/// shrunk inward to whole kernel pages; the mapping itself stays.
pub fn purge(ptr: [*]u8, len: usize) void {
    const page = pageSize();
    const start = std.mem.alignForward(usize, @intFromPtr(ptr), page);
    const end = std.mem.alignBackward(usize, @intFromPtr(ptr) + len, page);
    if (end <= start) return;
    // MADV_DONTNEED rather than MADV_FREE: the resident set drops at once, so
    // RSS follows the live set in the measurements users make. A failure only
    // means the memory stays resident, which is harmless.
    _ = linux.madvise(@ptrFromInt(start), end - start, linux.MADV.DONTNEED);
}

/// Asks the kernel to back [ptr, ptr+len) with transparent huge pages
/// where it can (whole aligned 2 MiB ranges on x86_64): one fault and one
/// zeroing per huge page instead of one per kernel page. A hint: kernels
/// with transparent huge pages off ignore it.
pub fn adviseHugePages(ptr: [*]u8, len: usize) void {
    _ = linux.madvise(@alignCast(ptr), len, linux.MADV.HUGEPAGE);
}

/// Makes [ptr, ptr+len) inaccessible (a guard page); false if the kernel
/// refuses (out of memory for the split mapping).
pub fn protectNone(ptr: [*]u8, len: usize) bool {
    assert(@intFromPtr(ptr) % pageSize() == 0 and len % pageSize() == 0);
    return linux.errno(linux.mprotect(ptr, len, .{})) == .SUCCESS;
}

/// Grows or shrinks the mapping [ptr, ptr+old_len) to new_len without
/// moving it. Returns false when the neighbouring address space is taken.
pub fn remapInPlace(ptr: [*]align(page_size_min_bytes) u8, old_len: usize, new_len: usize) bool {
    const page = pageSize();
    const old_aligned = std.mem.alignForward(usize, old_len, page);
    const new_aligned = pageAlignForward(new_len) orelse return false;
    if (new_aligned == old_aligned) return true;
    if (new_aligned < old_aligned) {
        unmapRaw(@intFromPtr(ptr) + new_aligned, old_aligned - new_aligned);
    } else {
        const rc = linux.mremap(ptr, old_aligned, new_aligned, .{}, null);
        if (linux.errno(rc) != .SUCCESS) return false;
        assert(rc == @intFromPtr(ptr));
    }
    accountMapped(@as(isize, @intCast(new_aligned)) - @as(isize, @intCast(old_aligned)));
    return true;
}

/// Moves the pages of [ptr, ptr+old_len) onto `dest`, a mapping of new_len
/// bytes made by `map`, without copying; `dest`'s own pages are replaced.
/// Returns false (both mappings untouched) when the kernel refuses.
pub fn moveInto(ptr: [*]align(page_size_min_bytes) u8, old_len: usize, dest: [*]align(page_size_min_bytes) u8, new_len: usize) bool {
    const old_aligned = std.mem.alignForward(usize, old_len, pageSize());
    const new_aligned = std.mem.alignForward(usize, new_len, pageSize());
    const rc = linux.mremap(ptr, old_aligned, new_aligned, .{ .MAYMOVE = true, .FIXED = true }, dest);
    if (linux.errno(rc) != .SUCCESS) return false;
    assert(rc == @intFromPtr(dest));
    // `dest` was counted by `map`; the old range no longer exists.
    accountMapped(-@as(isize, @intCast(old_aligned)));
    return true;
}

/// A cheap clock for decay periods: the coarse monotonic clock, with a
/// resolution of a few milliseconds, which is all a period needs, read
/// through the vDSO without a system call. With libc, through libc: std's
/// own vDSO lookup reads the auxiliary vector that Zig's start code saves,
/// and in a library loaded into a C program that code never ran, so std
/// would make a real system call every time.
pub fn nowNanoseconds() u64 {
    var ts: linux.timespec = undefined;
    if (builtin.link_libc) {
        if (std.c.clock_gettime(.MONOTONIC_COARSE, &ts) != 0) return 0;
    } else {
        if (linux.errno(linux.clock_gettime(.MONOTONIC_COARSE, &ts)) != .SUCCESS) return 0;
    }
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

pub const Pid = linux.pid_t;

pub fn currentPid() Pid {
    return linux.getpid();
}

pub fn currentTid() Pid {
    return linux.gettid();
}

/// Lets another thread run (used only while waiting for a one-time setup).
pub fn yieldThread() void {
    _ = linux.sched_yield();
}

/// Whether thread `tid` of process `pid` still exists. Signal 0 performs the
/// permission and existence checks of tgkill without sending anything; ESRCH
/// means no such thread in that thread group.
pub fn threadIsAlive(pid: Pid, tid: Pid) bool {
    const rc = linux.tgkill(pid, tid, @fromBackingInt(@intCast(0)));
    return linux.errno(rc) != .SRCH;
}

/// KENNEL_VERBOSE (C library): print `note`s and `warn`ings on stderr.
pub var verbose = false;

/// One line on stderr, "kennel: ..." (without allocating).
fn writeLine(comptime fmt: []const u8, args: anytype) void {
    var buf: [512]u8 = undefined;
    const msg = std.fmt.bufPrint(&buf, "kennel: " ++ fmt ++ "\n", args) catch buf[0..];
    var written: usize = 0;
    while (written < msg.len) {
        const rc = linux.write(2, msg.ptr + written, msg.len - written);
        if (linux.errno(rc) != .SUCCESS) break;
        written += rc;
    }
}

/// A line of information, when verbose.
pub fn note(comptime fmt: []const u8, args: anytype) void {
    if (verbose) writeLine(fmt, args);
}

/// Something the user may want to know went wrong, when verbose.
pub fn warn(comptime fmt: []const u8, args: anytype) void {
    if (verbose) writeLine("warning: " ++ fmt, args);
}

/// Writes a message to stderr without allocating and aborts the process.
/// Used for misuse that must not be survived silently (invalid frees).
pub fn fatal(comptime fmt: []const u8, args: anytype) noreturn {
    writeLine(fmt, args);
    if (builtin.link_libc) std.c.abort();
    // Without libc: raise SIGABRT on ourselves, then make sure we end.
    _ = linux.tgkill(linux.getpid(), linux.gettid(), .ABRT);
    linux.exit_group(134);
}

test "map honours alignment and offset, and counts bytes" {
    const before = mappedBytes();
    const p = map(100, 1 << 22, 0).?;
    try std.testing.expect(@intFromPtr(p) % (1 << 22) == 0);
    try std.testing.expectEqual(before + pageSize(), mappedBytes());
    p[0] = 1;
    p[99] = 2;
    unmap(p, 100);
    const q = map(3 * pageSize(), 1 << 22, pageSize()).?;
    try std.testing.expect((@intFromPtr(q) + pageSize()) % (1 << 22) == 0);
    unmap(q, 3 * pageSize());
    try std.testing.expectEqual(before, mappedBytes());
}

test "remap in place and by moving keeps contents" {
    const before = mappedBytes();
    const page = pageSize();
    var p = map(4 * page, page, 0).?;
    p[0] = 7;
    p[4 * page - 1] = 9;
    if (!remapInPlace(p, 4 * page, 8 * page)) {
        const dest = map(8 * page, 1 << 22, 0).?;
        try std.testing.expect(moveInto(p, 4 * page, dest, 8 * page));
        p = dest;
        try std.testing.expect(@intFromPtr(p) % (1 << 22) == 0);
    }
    try std.testing.expectEqual(@as(u8, 7), p[0]);
    try std.testing.expectEqual(@as(u8, 9), p[4 * page - 1]);
    p[8 * page - 1] = 3;
    try std.testing.expect(remapInPlace(p, 8 * page, 2 * page));
    try std.testing.expectEqual(before + 2 * page, mappedBytes());
    unmap(p, 2 * page);
    try std.testing.expectEqual(before, mappedBytes());
}

test "thread liveness probe" {
    try std.testing.expect(threadIsAlive(currentPid(), currentTid()));
}
