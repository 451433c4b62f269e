//! The standard library's own allocator tests, against kennel.allocator.
const std = @import("std");
const kennel = @import("kennel");

test "std.heap.testAllocator" {
    try std.heap.testAllocator(kennel.allocator);
}

test "std.heap.testAllocatorAligned" {
    try std.heap.testAllocatorAligned(kennel.allocator);
}

test "std.heap.testAllocatorLargeAlignment" {
    try std.heap.testAllocatorLargeAlignment(kennel.allocator);
}

test "std.heap.testAllocatorAlignedShrink" {
    try std.heap.testAllocatorAlignedShrink(kennel.allocator);
}

test "zero-sized and tiny requests" {
    const a = kennel.allocator;
    const empty = try a.alloc(u8, 0);
    a.free(empty);
    const one = try a.create(u8);
    one.* = 1;
    a.destroy(one);
    const words = try a.alloc(u64, 3);
    try std.testing.expect(@intFromPtr(words.ptr) % 8 == 0);
    a.free(words);
}
