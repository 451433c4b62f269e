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

test "a block of 2 GiB or more on a 32-bit system is served or refused, and freed" {
    // Half the address space: a size as isize went negative (a panic in
    // safe builds, where the mapping had already been made).
    if (@bitSizeOf(usize) != 32) return error.SkipZigTest;
    const a = kennel.allocator;
    const gib: usize = 1 << 30;
    if (a.rawAlloc(2 * gib + 1, .@"1", @returnAddress())) |block| {
        block[0] = 1;
        block[2 * gib] = 2;
        a.rawFree(block[0 .. 2 * gib + 1], .@"1", @returnAddress());
    }
    // Grown past it.
    const block = a.rawAlloc(gib, .@"1", @returnAddress()) orelse return;
    const grown_len = 2 * gib + 256 * 1024 * 1024;
    if (a.rawRemap(block[0..gib], .@"1", grown_len, @returnAddress())) |grown| {
        grown[grown_len - 1] = 3;
        a.rawFree(grown[0..grown_len], .@"1", @returnAddress());
    } else a.rawFree(block[0..gib], .@"1", @returnAddress());
}
