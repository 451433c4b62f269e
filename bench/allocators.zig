//! The allocators the benchmark compares, chosen at compile time (one
//! workload binary per allocator, because mimalloc, jemalloc and tcmalloc
//! replace malloc in any process that links them). Each peer is called
//! through the entry points a C program uses, so the suite measures what
//! a program gets from it, not a slower path of our choosing.
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
else if (std.mem.eql(u8, name, "jemalloc") or std.mem.eql(u8, name, "tcmalloc"))
    .{ .ptr = undefined, .vtable = &libc_names.vtable }
else if (std.mem.eql(u8, name, "std-default"))
    std_default.allocator()
else
    @compileError("unknown allocator " ++ name);

/// What `std.process.Init.gpa` is in a single-threaded ReleaseFast build
/// without libc (see std/start.zig): a SafeAllocator over page_allocator.
var std_default: std.heap.SafeAllocator = .init(std.heap.page_allocator, .{});

/// A peer reached the way a C program reaches it: plain malloc, free and
/// realloc for every alignment malloc guarantees (16 bytes on the 64-bit
/// targets), the aligned entry point only above that, and in-place resize
/// by comparing with the usable size, as std.heap.c_allocator does with
/// glibc. `E` names the peer's entry points.
fn CStyle(comptime E: type) type {
    return struct {
        const vtable: Allocator.VTable = .{ .alloc = alloc, .resize = resize, .remap = remap, .free = free };

        /// malloc's guarantee: any object type that fits, so 16-byte
        /// alignment for a size that is a multiple of 16.
        const malloc_alignment: Alignment = .@"16";

        /// The size to ask malloc for: with an alignment of 16, a size that
        /// is not a multiple of 16 could hold no 16-byte-aligned C object,
        /// so malloc may return an 8-byte-aligned block (mimalloc does).
        fn mallocLen(len: usize, a: Alignment) usize {
            return if (a == malloc_alignment) malloc_alignment.forward(len) else len;
        }

        fn alloc(_: *anyopaque, len: usize, a: Alignment, _: usize) ?[*]u8 {
            if (a.compare(.lte, malloc_alignment)) return @ptrCast(E.malloc(mallocLen(len, a)));
            return @ptrCast(E.alignedAlloc(a.toByteUnits(), len));
        }
        fn resize(_: *anyopaque, memory: []u8, _: Alignment, new_len: usize, _: usize) bool {
            return new_len <= memory.len or new_len <= E.usableSize(memory.ptr);
        }
        fn remap(ctx: *anyopaque, memory: []u8, a: Alignment, new_len: usize, ra: usize) ?[*]u8 {
            if (resize(ctx, memory, a, new_len, ra)) return memory.ptr;
            if (a.compare(.lte, malloc_alignment)) return @ptrCast(E.realloc(memory.ptr, mallocLen(new_len, a)));
            // realloc keeps only malloc's alignment; a peer without an
            // aligned realloc makes the caller allocate, copy and free.
            if (!@hasDecl(E, "reallocAligned")) return null;
            return @ptrCast(E.reallocAligned(memory.ptr, new_len, a.toByteUnits()));
        }
        fn free(_: *anyopaque, memory: []u8, _: Alignment, _: usize) void {
            E.free(memory.ptr);
        }
    };
}

/// mimalloc's own names (the library also exports malloc, but a program
/// built for mimalloc calls these).
const mimalloc = CStyle(struct {
    extern fn mi_malloc(size: usize) ?*anyopaque;
    extern fn mi_malloc_aligned(size: usize, alignment: usize) ?*anyopaque;
    extern fn mi_realloc(p: ?*anyopaque, newsize: usize) ?*anyopaque;
    extern fn mi_realloc_aligned(p: ?*anyopaque, newsize: usize, alignment: usize) ?*anyopaque;
    extern fn mi_usable_size(p: ?*const anyopaque) usize;
    extern fn mi_free(p: ?*anyopaque) void;

    const malloc = mi_malloc;
    const realloc = mi_realloc;
    const usableSize = mi_usable_size;
    const free = mi_free;
    fn alignedAlloc(alignment: usize, size: usize) ?*anyopaque {
        return mi_malloc_aligned(size, alignment);
    }
    const reallocAligned = mi_realloc_aligned;
});

/// The C library's names, which jemalloc and tcmalloc replace in any
/// process that links them (run.py checks that they do).
const libc_names = CStyle(struct {
    extern fn malloc(size: usize) ?*anyopaque;
    extern fn realloc(p: ?*anyopaque, size: usize) ?*anyopaque;
    extern fn free(p: ?*anyopaque) void;
    extern fn malloc_usable_size(p: ?*const anyopaque) usize;
    extern fn posix_memalign(out: *?*anyopaque, alignment: usize, size: usize) c_int;

    const usableSize = malloc_usable_size;
    fn alignedAlloc(alignment: usize, size: usize) ?*anyopaque {
        var p: ?*anyopaque = null;
        return if (posix_memalign(&p, alignment, size) == 0) p else null;
    }
});
