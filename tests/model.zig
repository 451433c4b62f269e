//! Randomized model test: long seeded sequences of alloc, resize, remap and
//! free over every size class and huge sizes, with alignments from 1 byte
//! to 1 MiB. The model tracks every live block; after each step the new or
//! changed block must be aligned, must not overlap any other live block,
//! and every block keeps its pattern until it is freed.
const std = @import("std");
const kennel = @import("kennel");
const util = @import("util.zig");
const Alignment = std.mem.Alignment;

const gpa = kennel.allocator;
/// The model's own bookkeeping must not come from the allocator under test,
/// nor from std.heap.page_allocator: under qemu with 64 KiB pages, its
/// mappings (placed at an address hint) now and then fail with ENOMEM once
/// kennel has mapped and unmapped a few hundred MB. A fixed array instead,
/// room for more live blocks than any run keeps.
const model_capacity = 4096;
var model_storage: [model_capacity]Live = undefined;

const Live = struct {
    ptr: [*]u8,
    len: usize,
    alignment: Alignment,
    seed: u64,

    fn slice(l: Live) []u8 {
        return l.ptr[0..l.len];
    }

    fn end(l: Live) usize {
        return @intFromPtr(l.ptr) + l.len;
    }
};

/// Live blocks, sorted by address, so overlap checks are a binary search.
const Model = struct {
    blocks: std.ArrayList(Live) = .initBuffer(&model_storage),

    fn position(m: *const Model, addr: usize) usize {
        var lo: usize = 0;
        var hi: usize = m.blocks.items.len;
        while (lo < hi) {
            const mid = (lo + hi) / 2;
            if (@intFromPtr(m.blocks.items[mid].ptr) < addr) lo = mid + 1 else hi = mid;
        }
        return lo;
    }

    fn insert(m: *Model, block: Live) !void {
        if (!block.alignment.check(@intFromPtr(block.ptr))) {
            std.debug.print("{*} is not aligned to {d}\n", .{ block.ptr, block.alignment.toByteUnits() });
            return error.TestMisaligned;
        }
        const at = m.position(@intFromPtr(block.ptr));
        if (at > 0 and m.blocks.items[at - 1].end() > @intFromPtr(block.ptr)) return error.TestOverlap;
        if (at < m.blocks.items.len and @intFromPtr(m.blocks.items[at].ptr) < block.end()) return error.TestOverlap;
        try m.blocks.insertBounded(at, block);
    }

    fn removeAt(m: *Model, index: usize) Live {
        return m.blocks.orderedRemove(index);
    }
};

fn run(seed: u64, steps: usize, live_target: usize, huge_max_bytes: usize) !void {
    var prng = std.Random.DefaultPrng.init(seed);
    const random = prng.random();
    std.debug.assert(live_target < model_capacity);
    var model: Model = .{};
    var next_seed: u64 = seed *% 1000;

    for (0..steps) |_| {
        const live = model.blocks.items.len;
        const roll = random.uintLessThan(u32, 100);
        if (live == 0 or (roll < 50 and live < live_target)) {
            // Allocate.
            const len = util.randomSize(random, huge_max_bytes);
            const alignment = util.randomAlignment(random);
            const ptr = gpa.rawAlloc(len, alignment, @returnAddress()) orelse return error.TestUnexpectedOutOfMemory;
            next_seed +%= 1;
            const block: Live = .{ .ptr = ptr, .len = len, .alignment = alignment, .seed = next_seed };
            util.fill(block.slice(), block.seed);
            try model.insert(block);
            continue;
        }
        const index = random.uintLessThan(usize, live);
        const block = model.blocks.items[index];
        try util.check(block.slice(), block.len, block.seed);
        if (roll < 80) {
            // Free.
            _ = model.removeAt(index);
            gpa.rawFree(block.slice(), block.alignment, @returnAddress());
            continue;
        }
        // Change the size: mostly nearby (in place is likely), sometimes far.
        const new_len = if (random.boolean())
            @max(1, (block.len + random.intRangeAtMost(usize, 0, 64)) -| 32)
        else
            util.randomSize(random, huge_max_bytes);
        _ = model.removeAt(index);
        var moved = block;
        moved.len = new_len;
        if (roll < 90) {
            if (!gpa.rawResize(block.slice(), block.alignment, new_len, @returnAddress())) {
                try model.insert(block);
                continue;
            }
        } else if (gpa.rawRemap(block.slice(), block.alignment, new_len, @returnAddress())) |ptr| {
            moved.ptr = ptr;
        } else {
            // What Allocator.realloc does when remap says no.
            const ptr = gpa.rawAlloc(new_len, block.alignment, @returnAddress()) orelse return error.TestUnexpectedOutOfMemory;
            @memcpy(ptr[0..@min(block.len, new_len)], block.ptr[0..@min(block.len, new_len)]);
            gpa.rawFree(block.slice(), block.alignment, @returnAddress());
            moved.ptr = ptr;
        }
        // The kept prefix still holds the old pattern.
        try util.check(moved.ptr[0..@min(block.len, new_len)], block.len, block.seed);
        next_seed +%= 1;
        moved.seed = next_seed;
        util.fill(moved.slice(), moved.seed);
        try model.insert(moved);
    }

    for (model.blocks.items) |block| {
        try util.check(block.slice(), block.len, block.seed);
        gpa.rawFree(block.slice(), block.alignment, @returnAddress());
    }
}

test "model: random alloc/resize/remap/free over all classes, huge sizes and alignments" {
    // Hardened, every huge block is a fresh mapping faulted in whole (freed
    // ones go back to the OS at once): 45 s of the suite at the full count.
    const steps = util.scaled(if (util.slow_build or kennel.config.secure) 60_000 else 150_000);
    const before = util.residentBytes();
    var peak: usize = 0;
    for (0..3) |round| {
        try run(@as(u64, 0x6b656e6e656c) + round, steps, 2000, 6 << 20);
        peak = @max(peak, kennel.stats().mapped_bytes_peak);
    }
    // Everything was freed: once the thread gives its unused memory back,
    // the resident set must be back near where it started.
    kennel.releaseThreadMemory();
    // Where the system tells the resident set (Linux, Windows).
    const after = util.residentBytes() orelse return;
    // The test cycles hundreds of MB; a leak would show as tens of MB.
    if (after > before.? + 8 * 1024 * 1024) {
        std.debug.print("resident bytes: {d} before, {d} after freeing everything (mapped {d} now, peak {d})\n", .{ before.?, after, kennel.stats().mapped_bytes, peak });
        return error.TestMemoryNotReturned;
    }
}

test "model: many small blocks cycle pages (free list and full queue)" {
    const steps = util.scaled(if (util.slow_build) 200_000 else 2_000_000);
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    var ring: [4096]?[]u8 = @splat(null);
    for (0..steps) |i| {
        const slot = &ring[random.uintLessThan(usize, ring.len)];
        if (slot.*) |block| {
            try util.check(block, block.len, @intFromPtr(block.ptr));
            gpa.free(block);
        }
        const len = random.intRangeAtMost(usize, 1, if (i % 16 == 0) 9000 else 300);
        const block = try gpa.alloc(u8, len);
        util.fill(block, @intFromPtr(block.ptr));
        slot.* = block;
    }
    for (&ring) |*slot| if (slot.*) |block| gpa.free(block);
}

test "alignment: every power of two up to 1 MiB, at several sizes" {
    var log2: u8 = 0;
    while (log2 <= 20) : (log2 += 1) {
        const alignment: Alignment = @fromBackingInt(@intCast(log2));
        for ([_]usize{ 1, 7, 64, 1000, 5000, 70_000, 600_000, 3 << 20 }) |len| {
            const ptr = gpa.rawAlloc(len, alignment, 0) orelse return error.TestUnexpectedOutOfMemory;
            try std.testing.expect(alignment.check(@intFromPtr(ptr)));
            util.fill(ptr[0..len], len);
            try util.check(ptr[0..len], len, len);
            gpa.rawFree(ptr[0..len], alignment, 0);
        }
    }
}

test "huge: remap grows and shrinks, in place or moving, keeping contents" {
    var list: std.ArrayList(u64) = .empty;
    defer list.deinit(gpa);
    // Grows by appending through 100 MB (10 MB reduced): exercises remap of
    // huge blocks.
    var i: u64 = 0;
    while (i < util.scaled(12_500_000)) : (i += 1) try list.append(gpa, i);
    for (list.items, 0..) |v, j| {
        if (v != j) return error.TestContentsLost;
    }
    list.shrinkAndFree(gpa, 1000);
    for (list.items, 0..) |v, j| {
        if (v != j) return error.TestContentsLost;
    }
}
