//! kennel: a general-purpose memory allocator.
//!
//! `kennel.allocator` is a global, thread-safe `std.mem.Allocator`: any
//! thread may use it at any time, with no init, no deinit and no per-thread
//! calls. It is a drop-in for `std.heap.smp_allocator` and also fits
//! single-threaded builds (`-fsingle-threaded`), where its thread machinery
//! compiles away.
//!
//! Design, by file:
//! - size_class.zig  request size -> block size class, in O(1)
//! - page.zig        a page of equal blocks; its free lists
//! - segment.zig     4 MiB aligned regions of pages; metadata by masking
//! - heap.zig        a thread's pages; the alloc and free fast paths
//! - thread.zig      heap ownership, thread exit, adoption, fork
//! - pool.zig        empty segments shared by all heaps
//! - huge.zig        allocations above 2 MiB, one mapping each; their cache
//! - secure.zig, check.zig, quarantine.zig  the hardened configuration
//! - purge.zig       when free memory goes back to the OS
//! - os.zig          mmap, munmap, madvise, mremap; mapped-byte counts
const std = @import("std");
const builtin = @import("builtin");
const Alignment = std.mem.Alignment;
const Allocator = std.mem.Allocator;

const os = @import("os.zig");
const heap = @import("heap.zig");
const thread = @import("thread.zig");
const check = @import("check.zig");
const secure = @import("secure.zig");
const quarantine = @import("quarantine.zig");
const stats_mod = @import("stats.zig");
const Heap = heap.Heap;

/// This build's configuration: `config.secure` says whether it is the
/// hardened allocator (build option -Dsecure), `config.hardening` which
/// features are on.
pub const config = @import("config.zig");

pub const allocator: Allocator = .{
    .ptr = undefined,
    .vtable = &vtable,
};

pub const vtable: Allocator.VTable = .{
    .alloc = alloc,
    .resize = resize,
    .remap = remap,
    .free = free,
};

/// Whether alloc and free do more than the heap's paths: the hardened
/// checks, or counting requested bytes. Off in the fast configuration.
const hooked = config.validate_frees or config.hardening.canary or config.hardening.zero_freed or
    config.hardening.quarantine or config.hardening.guard_freed_large or
    config.fill_freed_available or config.count_requested or config.valgrind;

/// The length asked of the heap: hardened, at least the two words a freed
/// block's link and mark need (check.zig).
inline fn blockLen(len: usize) usize {
    return if (config.hardening.check_frees) @max(len, check.block_bytes_min) else len;
}

fn alloc(context: *anyopaque, len: usize, alignment: Alignment, return_address: usize) ?[*]u8 {
    _ = context;
    _ = return_address;
    const ptr = Heap.alloc(blockLen(len), alignment.toByteUnits()) orelse return null;
    if (hooked) {
        if (!check.afterAlloc(ptr, len, alignment.toByteUnits(), false)) return null;
        countRequested(len, 0);
    }
    return ptr;
}

fn resize(context: *anyopaque, memory: []u8, alignment: Alignment, new_len: usize, return_address: usize) bool {
    _ = context;
    _ = return_address;
    if (!Heap.resizeInPlace(memory.ptr, alignment.toByteUnits(), blockLen(new_len), .to_class)) return false;
    if (hooked) resized(memory.ptr, memory.len, memory.ptr, new_len);
    return true;
}

fn remap(context: *anyopaque, memory: []u8, alignment: Alignment, new_len: usize, return_address: usize) ?[*]u8 {
    const ptr = Heap.remap(memory.ptr, alignment.toByteUnits(), blockLen(new_len), .to_class) orelse {
        // A large block that cannot grow in place moves by its kernel
        // pages, and the old one is freed as any block: the caller would
        // otherwise copy it. moveLarge runs only where alloc and free hook
        // nothing but the count of requested bytes.
        const moved = Heap.moveLarge(memory.ptr, alignment.toByteUnits(), blockLen(new_len)) orelse return null;
        if (hooked) countRequested(new_len, 0);
        free(context, memory, alignment, return_address);
        return moved;
    };
    if (hooked) resized(memory.ptr, memory.len, ptr, new_len);
    return ptr;
}

fn free(context: *anyopaque, memory: []u8, alignment: Alignment, return_address: usize) void {
    _ = context;
    _ = alignment;
    _ = return_address;
    const found = if (hooked) check.beforeFree(memory.ptr, memory.len, "free") else null;
    if (hooked) countRequested(0, memory.len);
    if (config.hardening.quarantine) quarantine.hold(memory.ptr, found) else Heap.free(memory.ptr);
}

/// A block kept its place (or moved as a whole) with a new length.
fn resized(old: [*]u8, old_len: usize, new: [*]u8, new_len: usize) void {
    check.afterResize(old, old_len, new, new_len);
    countRequested(new_len, old_len);
}

/// Requested bytes, per heap: the calling thread's heap counts what its
/// thread allocates and frees (even another thread's blocks), so only the
/// sum over heaps means something. See `stats`.
inline fn countRequested(added: usize, removed: usize) void {
    if (!config.count_requested) return;
    const h = thread.current();
    // A thread that frees before it ever allocated gets a heap now, so the
    // count does not land in the shared `Heap.empty`.
    const counted = if (h == &Heap.empty) thread.initCurrent() orelse return else h;
    counted.requested_bytes +%= added -% removed;
}

pub const Stats = stats_mod.Stats;
pub const ClassStats = stats_mod.ClassStats;

/// What kennel holds now, process-wide: live blocks per size class, bytes
/// in blocks, committed and mapped, heaps, abandoned pages. Computed on
/// demand from the pages' own metadata (nothing is counted on the fast
/// paths), so it costs a walk over every segment: call it to look, not in
/// a loop. Exact when other threads are quiet, a close snapshot otherwise.
pub fn stats() Stats {
    return stats_mod.collect();
}

/// Writes `stats()` as text, one line per figure and one per size class in
/// use, in the form KENNEL_SHOW_STATS prints.
pub fn printStats(writer: *std.Io.Writer) std.Io.Writer.Error!void {
    const s = stats();
    const Sink = struct {
        writer: *std.Io.Writer,
        failed: bool = false,
        fn write(sink: *@This(), bytes: []const u8) void {
            sink.writer.writeAll(bytes) catch {
                sink.failed = true;
            };
        }
    };
    var sink: Sink = .{ .writer = writer };
    stats_mod.print(&s, &sink, Sink.write);
    if (sink.failed) return error.WriteFailed;
}

/// kennel's address layout, for code that reasons about where blocks lie
/// (its tests, debuggers, tools reading statistics): segments are
/// `segment_bytes` regions aligned to their size, cut into slices of
/// `slice_bytes` (a small page is one slice), and a heap keeps up to
/// `spare_segments_max` empty segments mapped for reuse.
pub const layout = struct {
    pub const segment_bytes = @import("segment.zig").segment_size_bytes;
    pub const slice_bytes = @import("segment.zig").slice_bytes;
    pub const small_page_bytes = @import("segment.zig").small_page_bytes;
    pub const spare_segments_max = heap.spare_count_max;
};

/// How long the heap of a thread that ended is left for a new thread to
/// take whole, before running threads that free into it absorb it.
pub const orphan_grace_ms = thread.orphan_grace_ns / std.time.ns_per_ms;

/// Gives the calling thread's unused memory back now, with the empty
/// segments other threads left for reuse and the heap of an ended thread
/// it freed into (without waiting for `orphan_grace_ms`), and hands its
/// heap to the next thread. Never required (a thread's heap is reclaimed when the thread
/// ends), but useful before a thread goes idle for a long time.
pub fn releaseThreadMemory() void {
    thread.releaseCurrent();
}

test {
    _ = @import("size_class.zig");
    _ = @import("page.zig");
    _ = @import("segment.zig");
    _ = os;
    _ = secure;
    _ = quarantine;
    _ = @import("purge.zig");
    _ = @import("pool.zig");
    _ = heap;
    _ = thread;
    _ = @import("huge.zig");
    _ = @import("stats.zig");
}
