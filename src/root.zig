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
//! - huge.zig        allocations above 1 MiB, one mapping each
//! - os.zig          mmap, munmap, madvise, mremap; mapped-byte counts
const std = @import("std");
const builtin = @import("builtin");
const Alignment = std.mem.Alignment;
const Allocator = std.mem.Allocator;

const os = @import("os.zig");
const heap = @import("heap.zig");
const thread = @import("thread.zig");
const Heap = heap.Heap;

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

fn alloc(context: *anyopaque, len: usize, alignment: Alignment, return_address: usize) ?[*]u8 {
    _ = context;
    _ = return_address;
    return Heap.alloc(len, alignment.toByteUnits());
}

fn resize(context: *anyopaque, memory: []u8, alignment: Alignment, new_len: usize, return_address: usize) bool {
    _ = context;
    _ = return_address;
    return Heap.resizeInPlace(memory.ptr, alignment.toByteUnits(), new_len);
}

fn remap(context: *anyopaque, memory: []u8, alignment: Alignment, new_len: usize, return_address: usize) ?[*]u8 {
    _ = context;
    _ = return_address;
    return Heap.remap(memory.ptr, alignment.toByteUnits(), new_len);
}

fn free(context: *anyopaque, memory: []u8, alignment: Alignment, return_address: usize) void {
    _ = context;
    _ = alignment;
    _ = return_address;
    Heap.free(memory.ptr);
}

/// Process-wide figures.
pub const Stats = struct {
    /// Bytes currently mapped from the OS (segments, huge blocks, heaps).
    mapped_bytes: usize,
    /// Highest `mapped_bytes` so far.
    mapped_bytes_peak: usize,
    /// Heaps created; heaps of ended threads are reused, so this is bounded
    /// by the number of threads alive at the same time.
    heap_count: usize,
};

pub fn stats() Stats {
    return .{
        .mapped_bytes = os.mappedBytes(),
        .mapped_bytes_peak = os.mappedBytesPeak(),
        .heap_count = thread.heapCount(),
    };
}

/// Gives the calling thread's unused memory back now and hands its heap to
/// the next thread. Never required (a thread's heap is reclaimed when the
/// thread ends), but useful before a thread goes idle for a long time.
pub fn releaseThreadMemory() void {
    thread.abandonCurrent();
}

test {
    _ = @import("size_class.zig");
    _ = @import("page.zig");
    _ = @import("segment.zig");
    _ = os;
}
