//! The allocators the benchmark compares, chosen at compile time (one
//! workload binary per allocator, because mimalloc and jemalloc replace
//! malloc in any process that links them).
const std = @import("std");
const builtin = @import("builtin");
const options = @import("bench_options");
const Alignment = std.mem.Alignment;
const Allocator = std.mem.Allocator;

pub const name = options.allocator;

pub const allocator: Allocator = if (std.mem.eql(u8, name, "kennel"))
    @import("kennel").allocator
else if (std.mem.eql(u8, name, "smp"))
    std.heap.smp_allocator
else if (std.mem.eql(u8, name, "glibc"))
    std.heap.c_allocator
else if (std.mem.eql(u8, name, "mimalloc"))
    .{ .ptr = undefined, .vtable = &mimalloc.vtable }
else if (std.mem.eql(u8, name, "jemalloc"))
    .{ .ptr = undefined, .vtable = &jemalloc.vtable }
else if (std.mem.eql(u8, name, "std-default"))
    std_default.allocator()
else
    @compileError("unknown allocator " ++ name);

/// What `std.process.Init.gpa` is in a single-threaded ReleaseFast build
/// without libc (see std/start.zig): a SafeAllocator over page_allocator.
var std_default: std.heap.SafeAllocator = .init(std.heap.page_allocator, .{});

/// mimalloc's own aligned, sized and in-place entry points.
const mimalloc = struct {
    extern fn mi_malloc_aligned(size: usize, alignment: usize) ?[*]u8;
    extern fn mi_free_size_aligned(p: ?*anyopaque, size: usize, alignment: usize) void;
    extern fn mi_expand(p: ?*anyopaque, newsize: usize) ?*anyopaque;
    extern fn mi_realloc_aligned(p: ?*anyopaque, newsize: usize, alignment: usize) ?[*]u8;

    const vtable: Allocator.VTable = .{ .alloc = alloc, .resize = resize, .remap = remap, .free = free };

    fn alloc(_: *anyopaque, len: usize, a: Alignment, _: usize) ?[*]u8 {
        return mi_malloc_aligned(len, a.toByteUnits());
    }
    fn resize(_: *anyopaque, memory: []u8, _: Alignment, new_len: usize, _: usize) bool {
        return mi_expand(memory.ptr, new_len) != null;
    }
    fn remap(_: *anyopaque, memory: []u8, a: Alignment, new_len: usize, _: usize) ?[*]u8 {
        return mi_realloc_aligned(memory.ptr, new_len, a.toByteUnits());
    }
    fn free(_: *anyopaque, memory: []u8, a: Alignment, _: usize) void {
        mi_free_size_aligned(memory.ptr, memory.len, a.toByteUnits());
    }
};

/// jemalloc's extended API: alignment flags, sized free, in-place resize.
const jemalloc = struct {
    extern fn mallocx(size: usize, flags: c_int) ?[*]u8;
    extern fn sdallocx(p: *anyopaque, size: usize, flags: c_int) void;
    extern fn xallocx(p: *anyopaque, size: usize, extra: usize, flags: c_int) usize;
    extern fn rallocx(p: *anyopaque, size: usize, flags: c_int) ?[*]u8;

    /// MALLOCX_LG_ALIGN; 0 (no constraint) where the default suffices.
    fn flags(a: Alignment) c_int {
        return if (a.toByteUnits() <= 16) 0 else @intCast(@backingInt(a));
    }

    const vtable: Allocator.VTable = .{ .alloc = alloc, .resize = resize, .remap = remap, .free = free };

    fn alloc(_: *anyopaque, len: usize, a: Alignment, _: usize) ?[*]u8 {
        return mallocx(len, flags(a));
    }
    fn resize(_: *anyopaque, memory: []u8, a: Alignment, new_len: usize, _: usize) bool {
        return xallocx(memory.ptr, new_len, 0, flags(a)) >= new_len;
    }
    fn remap(_: *anyopaque, memory: []u8, a: Alignment, new_len: usize, _: usize) ?[*]u8 {
        return rallocx(memory.ptr, new_len, flags(a));
    }
    fn free(_: *anyopaque, memory: []u8, a: Alignment, _: usize) void {
        sdallocx(memory.ptr, memory.len, flags(a));
    }
};
