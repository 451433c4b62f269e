//! Size classes: the block sizes kennel hands out, and the O(1) map from a
//! requested size to the smallest class that holds it.
//!
//! - 8 to 128 bytes: one class per 8-byte word (8, 16, 24, ..., 128). Exact in
//!   words, so a 24-byte struct costs 24 bytes.
//! - Above 128 bytes: eight classes per power of two, i.e. the sizes
//!   2^k + j * 2^(k-3) for j = 1..8. A request just above a class boundary
//!   wastes less than 2^(k-3) / 2^k = 12.5% of its block.
//! - The last class is `block_size_max_bytes` (2 MiB, half a segment: the
//!   largest block that leaves its segment room for other pages). Larger
//!   requests are huge allocations and get their own mapping (huge.zig).
//!
//! Every class above 128 bytes is the request rounded up to a power-of-two
//! step 2^(k-3); hence rounding a request up to a power-of-two alignment A
//! before choosing the class always yields a block size that is a multiple
//! of A. The allocator relies on this to serve aligned requests without
//! extra work (see the alignment test below).
const std = @import("std");
const assert = std.debug.assert;

pub const Class = u8;

pub const word_bytes = 8;
/// Largest size served by the word-granular classes.
pub const word_class_max_bytes = 128;
pub const word_class_count = word_class_max_bytes / word_bytes;
/// Classes per power of two above `word_class_max_bytes`.
pub const classes_per_doubling = 8;
/// Largest block size; anything bigger is a huge allocation. Blocks up to
/// here share segments, so the memory a program frees serves its next
/// requests of any size up to here without a fault: a vector doubling to
/// 2 MiB and the buffers around it reuse one another's slices, where a
/// separate mapping for its last step went back to the OS and came anew.
pub const block_size_max_bytes = 2 << 20;

const word_class_max_log2: usize = std.math.log2_int(usize, word_class_max_bytes);
const block_size_max_log2: usize = std.math.log2_int(usize, block_size_max_bytes);

pub const class_count = word_class_count + (block_size_max_log2 - word_class_max_log2) * classes_per_doubling;

/// Block size of each class, in bytes.
const block_size_table: [class_count]u32 = table: {
    var table: [class_count]u32 = undefined;
    for (0..word_class_count) |c| table[c] = (c + 1) * word_bytes;
    for (word_class_max_log2..block_size_max_log2) |k| {
        for (1..classes_per_doubling + 1) |j| {
            const c = word_class_count + (k - word_class_max_log2) * classes_per_doubling + j - 1;
            table[c] = (1 << k) + j * (1 << (k - 3));
        }
    }
    break :table table;
};

comptime {
    assert(class_count == 128);
    assert(block_size_table[class_count - 1] == block_size_max_bytes);
    assert(class_count <= std.math.maxInt(Class));
}

/// The smallest class whose blocks hold `size` bytes, 1 <= size <= 2 MiB.
/// Constant time: one comparison, a count of leading zeros and shifts.
pub inline fn ofSize(size: usize) Class {
    assert(size >= 1 and size <= block_size_max_bytes);
    if (size <= word_class_max_bytes) return @intCast((size - 1) / word_bytes);
    // size - 1 lies in [2^k, 2^(k+1)); j picks the 2^(k-3)-wide step inside.
    const k: usize = std.math.log2_int(usize, size - 1);
    const j = ((size - 1) >> @intCast(k - 3)) & (classes_per_doubling - 1);
    return @intCast(word_class_count + (k - word_class_max_log2) * classes_per_doubling + j);
}

pub inline fn blockSize(class: Class) usize {
    return block_size_table[class];
}

/// Offsets inside a page stay below this (the largest page is a segment).
pub const offset_limit_bytes = 4 * 1024 * 1024;

/// ceil(2^43 / block size) per class: `offset * r >> 43` is then exactly
/// `offset / block size` for every offset below 2^22 and size up to 2^21
/// (offset * (r * size - 2^43) < 2^22 * 2^21 keeps the error below one
/// block's 1 / size), without a divide; r < 2^40, so the product fits.
const reciprocal_shift = 43;
const reciprocal_table: [class_count]u64 = table: {
    var table: [class_count]u64 = undefined;
    for (&table, block_size_table) |*r, size| r.* = ((@as(u64, 1) << reciprocal_shift) + size - 1) / size;
    break :table table;
};

/// `offset / blockSize(class)` for offset < offset_limit_bytes.
pub inline fn blockIndex(class: Class, offset: usize) usize {
    assert(offset < offset_limit_bytes);
    // In 64 bits on 32-bit targets too: the product exceeds 2^32.
    return @intCast((@as(u64, offset) * reciprocal_table[class]) >> reciprocal_shift);
}

/// A block size d = m * 2^k (m odd), as the fast C free tests an offset
/// against it: `exactIndex(offset)` is offset / d when d divides the
/// offset, and above (2^32 - 1) / d when it does not. Multiplying by the
/// inverse of m modulo 2^32 and rotating right by k are both one-to-one on
/// u32 and take q * d to q, so every other offset lands past the largest
/// such q: one compare of the result with a block count asks "the start of
/// one of the first `count` blocks" without a divide.
pub const Divisor = struct {
    inverse: u32,
    shift: u5,

    pub fn of(size: u32) Divisor {
        assert(size > 0);
        const shift: u5 = @intCast(@ctz(size));
        const odd = size >> shift;
        // Newton's step x' = x * (2 - m * x) doubles the correct low bits;
        // an odd m is its own inverse modulo 8, so four steps give 48 >= 32.
        var inverse: u32 = odd;
        for (0..4) |_| inverse *%= 2 -% odd *% inverse;
        assert(odd *% inverse == 1);
        return .{ .inverse = inverse, .shift = shift };
    }

    pub inline fn exactIndex(d: Divisor, offset: u32) u32 {
        return std.math.rotr(u32, offset *% d.inverse, d.shift);
    }
};

pub fn divisor(class: Class) Divisor {
    return Divisor.of(block_size_table[class]);
}

test "every size maps to the smallest class that holds it" {
    var size: usize = 1;
    while (size <= block_size_max_bytes) : (size += if (size < 70_000) 1 else 61) {
        const c = ofSize(size);
        try std.testing.expect(blockSize(c) >= size);
        if (c > 0) try std.testing.expect(blockSize(c - 1) < size);
    }
    try std.testing.expectEqual(@as(Class, class_count - 1), ofSize(block_size_max_bytes));
}

test "classes are word-exact up to 128 bytes, then waste at most 12.5%" {
    for (0..class_count) |c| {
        const b = blockSize(@intCast(c));
        try std.testing.expect(b % word_bytes == 0);
        if (c > 0) try std.testing.expect(b > blockSize(@intCast(c - 1)));
        if (b <= word_class_max_bytes) {
            try std.testing.expectEqual((c + 1) * word_bytes, b);
        } else {
            // Worst case: a request one byte above the previous class.
            const smallest = blockSize(@intCast(c - 1)) + 1;
            try std.testing.expect((b - smallest) * 8 < smallest);
        }
    }
}

test "blockIndex divides exactly for every class and every offset that matters" {
    // offset < 2^22 and size <= 2^21: offset * error < 2^43.
    comptime assert(offset_limit_bytes <= 1 << 22 and block_size_max_bytes <= 1 << 21);
    for (0..class_count) |c| {
        const class: Class = @intCast(c);
        const size = blockSize(class);
        var block: usize = 0;
        while (block * size < offset_limit_bytes) : (block += 1) {
            const start = block * size;
            // The start of each block, its last byte, and one past.
            try std.testing.expectEqual(block, blockIndex(class, start));
            if (start + size - 1 < offset_limit_bytes) try std.testing.expectEqual(block, blockIndex(class, start + size - 1));
            if (start + size < offset_limit_bytes) try std.testing.expectEqual(block + 1, blockIndex(class, start + size));
        }
    }
}

test "rounding a request up to its alignment gives a block that is a multiple of it" {
    var alignment: usize = 1;
    while (alignment <= 4096) : (alignment *= 2) {
        var len: usize = 1;
        while (len <= block_size_max_bytes) : (len += if (len < 9000) 1 else 509) {
            const size = std.mem.alignForward(usize, len, alignment);
            if (size > block_size_max_bytes) break;
            try std.testing.expect(blockSize(ofSize(size)) % alignment == 0);
        }
    }
}

test "exactIndex finds the block starts of a page, and only them" {
    for (0..class_count) |c| {
        const size: u32 = @intCast(blockSize(@intCast(c)));
        const d = divisor(@intCast(c));
        // A page holds at most offset_limit_bytes / size blocks.
        const count: u32 = offset_limit_bytes / size;
        // Every offset of the first 64 KiB.
        var offset: u32 = 0;
        while (offset < 64 * 1024) : (offset += 1) {
            const index = d.exactIndex(offset);
            if (offset % size == 0) {
                try std.testing.expectEqual(offset / size, index);
            } else try std.testing.expect(index >= count);
        }
        // Then each block start of the largest page, and offsets inside.
        var start: u32 = 64 * 1024 / size * size;
        while (start < offset_limit_bytes) : (start += size) {
            try std.testing.expectEqual(start / size, d.exactIndex(start));
            for ([_]u32{ 1, 8, size / 2, size - 8, size - 1 }) |inside| {
                if (inside % size != 0) try std.testing.expect(d.exactIndex(start + inside) >= count);
            }
        }
        // Offsets below a page's area wrap to 2^32 minus less than a
        // segment: never a block.
        var below: u32 = 1;
        while (below <= offset_limit_bytes) : (below += if (below < 64 * 1024) 1 else 89) {
            try std.testing.expect(d.exactIndex(0 -% below) >= count);
        }
    }
}
