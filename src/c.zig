//! The C ABI: the malloc family under its standard names (and with a kn_
//! prefix), built into libkennel.so and libkennel.a. The behaviour of each
//! function, where C leaves a choice, is documented in include/kennel.h.
//!
//! The Zig allocator knows each block's size and alignment at free; C does
//! not, and C programs free pointers kennel never returned. So every free()
//! and realloc() here checks its pointer first, cheaply:
//! - the segment map (segment.zig) must list the pointer's segment header,
//!   so a foreign pointer is rejected before anything behind it is read;
//! - the pointer must be a block start (by a multiply, not a divide), or
//!   lie in a page that hands out over-aligned blocks;
//! - the block's second word must not hold `freed_mark`, which free() writes
//!   and allocation clears: a block freed twice while still free is caught.
//! A failed check prints one line naming the pointer and aborts.
const std = @import("std");
const builtin = @import("builtin");
const os = @import("os.zig");
const heap_mod = @import("heap.zig");
const Heap = heap_mod.Heap;
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const size_class = @import("size_class.zig");
const huge = @import("huge.zig");
const thread = @import("thread.zig");

/// Makes this compilation the C library (see config.zig).
pub const kennel_c_library = true;

/// A library inside a C program must not unwind or print Zig traces: say
/// what broke and abort, like the C library would.
pub const panic = std.debug.FullPanic(onPanic);

fn onPanic(message: []const u8, _: ?usize) noreturn {
    os.fatal("internal error: {s}", .{message});
}

/// alignof(max_align_t) on x86_64 and aarch64 Linux.
const max_align_bytes = 16;

/// Written into the second word of every block free() takes, cleared by
/// every allocation. Blocks of C allocations are at least 16 bytes.
const freed_mark: usize = 0x4b656e6e656c2046; // "Kennel F"

const Word2 = [2]usize;

// ---- Exports ------------------------------------------------------------

comptime {
    exportBoth("malloc", &malloc);
    exportBoth("free", &free);
    exportBoth("calloc", &calloc);
    exportBoth("realloc", &realloc);
    exportBoth("reallocarray", &reallocarray);
    exportBoth("aligned_alloc", &aligned_alloc);
    exportBoth("posix_memalign", &posix_memalign);
    exportBoth("memalign", &memalign);
    exportBoth("valloc", &valloc);
    exportBoth("pvalloc", &pvalloc);
    exportBoth("malloc_usable_size", &malloc_usable_size);
    exportBoth("free_sized", &free_sized);
    exportBoth("free_aligned_sized", &free_aligned_sized);
    @export(&kn_stats, .{ .name = "kn_stats" });
    @export(&kn_release_thread_memory, .{ .name = "kn_release_thread_memory" });
    // Run at load and at exit (KENNEL_SHOW_STATS); hidden, not exported.
    @export(&init_entry, .{ .name = "kennel_init_entry", .section = ".init_array", .visibility = .hidden });
    @export(&fini_entry, .{ .name = "kennel_fini_entry", .section = ".fini_array", .visibility = .hidden });
}

/// Exports `function` under its standard name and with the kn_ prefix.
fn exportBoth(comptime name: []const u8, comptime function: anytype) void {
    @export(function, .{ .name = name });
    @export(function, .{ .name = "kn_" ++ name });
}

fn malloc(size: usize) callconv(.c) ?*anyopaque {
    const ptr = Heap.alloc(size, max_align_bytes) orelse return outOfMemory();
    markAllocated(ptr, max_align_bytes);
    return ptr;
}

fn free(ptr: ?*anyopaque) callconv(.c) void {
    const p: [*]u8 = @ptrCast(ptr orelse return);
    const block = checked(p, "free");
    markFreed(p, block);
    Heap.free(p);
}

fn calloc(count: usize, size: usize) callconv(.c) ?*anyopaque {
    const len = std.math.mul(usize, count, size) catch return outOfMemory();
    const ptr = Heap.allocZeroed(len, max_align_bytes) orelse return outOfMemory();
    markAllocated(ptr, max_align_bytes);
    return ptr;
}

fn realloc(ptr: ?*anyopaque, size: usize) callconv(.c) ?*anyopaque {
    const p: [*]u8 = @ptrCast(ptr orelse return malloc(size));
    if (size == 0) {
        free(ptr);
        return null;
    }
    _ = checked(p, "realloc");
    if (Heap.remap(p, max_align_bytes, size)) |moved| return moved;
    const fresh: [*]u8 = @ptrCast(malloc(size) orelse return null);
    const old_size = Heap.usableSize(p);
    @memcpy(fresh[0..@min(old_size, size)], p[0..@min(old_size, size)]);
    free(p);
    return fresh;
}

fn reallocarray(ptr: ?*anyopaque, count: usize, size: usize) callconv(.c) ?*anyopaque {
    const len = std.math.mul(usize, count, size) catch return outOfMemory();
    return realloc(ptr, len);
}

fn aligned_alloc(alignment: usize, size: usize) callconv(.c) ?*anyopaque {
    if (!isPowerOfTwo(alignment)) return failWith(.INVAL);
    return allocAligned(@max(alignment, max_align_bytes), size);
}

fn posix_memalign(result: *?*anyopaque, alignment: usize, size: usize) callconv(.c) c_int {
    if (!isPowerOfTwo(alignment) or alignment % @sizeOf(*anyopaque) != 0) return @backingInt(std.c.E.INVAL);
    const a = @max(alignment, max_align_bytes);
    const ptr = Heap.alloc(size, a) orelse return @backingInt(std.c.E.NOMEM);
    markAllocated(ptr, a);
    result.* = ptr;
    return 0;
}

fn memalign(alignment: usize, size: usize) callconv(.c) ?*anyopaque {
    // glibc rounds an alignment that is not a power of two up to one.
    if (alignment > std.math.maxInt(usize) / 2 + 1) return failWith(.INVAL);
    const a = std.math.ceilPowerOfTwo(usize, @max(alignment, max_align_bytes)) catch return failWith(.INVAL);
    return allocAligned(a, size);
}

fn valloc(size: usize) callconv(.c) ?*anyopaque {
    return allocAligned(os.pageSize(), size);
}

fn pvalloc(size: usize) callconv(.c) ?*anyopaque {
    const rounded = os.pageAlignForward(@max(size, 1)) orelse return outOfMemory();
    return allocAligned(os.pageSize(), rounded);
}

fn malloc_usable_size(ptr: ?*anyopaque) callconv(.c) usize {
    const p: [*]u8 = @ptrCast(ptr orelse return 0);
    _ = checked(p, "malloc_usable_size");
    return Heap.usableSize(p);
}

fn free_sized(ptr: ?*anyopaque, size: usize) callconv(.c) void {
    _ = size;
    free(ptr);
}

fn free_aligned_sized(ptr: ?*anyopaque, alignment: usize, size: usize) callconv(.c) void {
    _ = alignment;
    _ = size;
    free(ptr);
}

const Stats = extern struct {
    mapped_bytes: usize,
    mapped_bytes_peak: usize,
    heap_count: usize,
};

fn kn_stats(stats: *Stats) callconv(.c) void {
    stats.* = .{
        .mapped_bytes = os.mappedBytes(),
        .mapped_bytes_peak = os.mappedBytesPeak(),
        .heap_count = thread.heapCount(),
    };
}

fn kn_release_thread_memory() callconv(.c) void {
    thread.abandonCurrent();
}

// ---- Helpers ------------------------------------------------------------

/// Like std.math.isPowerOfTwo, but 0 (a caller's mistake here, not ours)
/// is simply not a power of two.
fn isPowerOfTwo(x: usize) bool {
    return x != 0 and x & (x - 1) == 0;
}

fn allocAligned(alignment: usize, size: usize) ?*anyopaque {
    const ptr = Heap.alloc(size, alignment) orelse return outOfMemory();
    markAllocated(ptr, alignment);
    return ptr;
}

fn failWith(e: std.c.E) ?*anyopaque {
    std.c._errno().* = @backingInt(e);
    return null;
}

fn outOfMemory() ?*anyopaque {
    return failWith(.NOMEM);
}

/// The block containing `ptr` (its start, where the mark lives).
fn blockOf(ptr: [*]u8, alignment: usize) *Word2 {
    if (alignment <= segment_mod.block_align_max_bytes) return @ptrCast(@alignCast(ptr));
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) return @ptrCast(@alignCast(ptr));
    return @ptrCast(segment.pageOf(ptr).blockStart(ptr));
}

fn markAllocated(ptr: [*]u8, alignment: usize) void {
    blockOf(ptr, alignment)[1] = 0;
}

fn markFreed(ptr: [*]u8, block: *Word2) void {
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) {
        // A huge block is its own mapping: `used` says whether it is live.
        // AcqRel: two threads freeing it at once see each other.
        if (@cmpxchgStrong(u32, &segment.pages[0].used, 1, 0, .acq_rel, .monotonic) != null) doubleFree(ptr);
        return;
    }
    block[1] = freed_mark;
}

/// Validates a pointer passed to free(), realloc() or malloc_usable_size();
/// returns its block. Aborts, naming the pointer, when it is not a live
/// block kennel returned.
fn checked(ptr: [*]u8, comptime function: []const u8) *Word2 {
    const address = @intFromPtr(ptr);
    // The map first, on the address alone: nothing behind a foreign
    // pointer may be read (and its segment address may even be 0).
    if (!segment_mod.segment_map.contains((address -% 1) & ~@as(usize, segment_mod.segment_size_bytes - 1)))
        invalid(function, ptr, "not allocated by kennel");
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) {
        if (ptr != segment.pages[0].area) invalid(function, ptr, "points into the middle of a block");
        // Monotonic: a racing free is caught by the CAS in markFreed.
        if (@atomicLoad(u32, &segment.pages[0].used, .monotonic) != 1) doubleFree(ptr);
        return @ptrCast(@alignCast(ptr));
    }
    const page = segment.pageOf(ptr);
    // Monotonic: the page of a live block was set up before the block was
    // handed out, which happened before the caller got the pointer.
    const free_pages = @atomicLoad(u64, &segment.free_mask, .monotonic);
    if (free_pages & (@as(u64, 1) << @intCast(page.index)) != 0) invalid(function, ptr, "in memory kennel does not use (freed twice?)");
    const offset = address -% @intFromPtr(page.area);
    if (offset >= @as(usize, page.reserved) * page.block_size) invalid(function, ptr, "not the start of a block");
    const start = size_class.blockIndex(page.class, offset) * page.block_size;
    if (start != offset and !page.loadFlags().has_aligned) invalid(function, ptr, "points into the middle of a block");
    const block: *Word2 = @ptrCast(@alignCast(page.area + start));
    if (block[1] == freed_mark) doubleFree(ptr);
    return block;
}

fn invalid(comptime function: []const u8, ptr: [*]u8, comptime why: []const u8) noreturn {
    os.fatal(function ++ "(): invalid pointer 0x{x}: " ++ why, .{@intFromPtr(ptr)});
}

fn doubleFree(ptr: [*]u8) noreturn {
    os.fatal("free(): double free of 0x{x}", .{@intFromPtr(ptr)});
}

// ---- Start and exit -----------------------------------------------------

const InitFn = *const fn () callconv(.c) void;
const init_entry: InitFn = &onLoad;
const fini_entry: InitFn = &onExit;

var show_stats = false;

fn onLoad() callconv(.c) void {
    // getenv does not allocate.
    if (std.c.getenv("KENNEL_SHOW_STATS")) |value| show_stats = value[0] == '1';
}

fn onExit() callconv(.c) void {
    if (!show_stats) return;
    var buf: [256]u8 = undefined;
    const line = std.fmt.bufPrint(&buf, "kennel: {d} bytes mapped, peak {d} bytes, {d} heaps\n", .{
        os.mappedBytes(), os.mappedBytesPeak(), thread.heapCount(),
    }) catch return;
    _ = std.c.write(2, line.ptr, line.len);
}
