//! kennel.stats() counts exactly when nothing else runs: live blocks per
//! class, bytes in blocks, huge blocks, requested bytes (when counted),
//! across remote frees and threads that end holding blocks.
const std = @import("std");
const builtin = @import("builtin");
const kennel = @import("kennel");
const util = @import("util.zig");

const gpa = kennel.allocator;
const size_class_of_24 = 2; // 8, 16, 24: word classes

test "stats: live blocks, bytes in blocks and requested bytes, exactly" {
    const before = kennel.stats();
    try std.testing.expectEqual(@as(usize, 24), before.classes[size_class_of_24].block_size);
    var blocks: [1000]*[24]u8 = undefined;
    for (&blocks) |*b| b.* = try gpa.create([24]u8);
    const after = kennel.stats();
    try std.testing.expectEqual(before.classes[size_class_of_24].blocks_live + 1000, after.classes[size_class_of_24].blocks_live);
    try std.testing.expectEqual(before.blocksLive() + 1000, after.blocksLive());
    try std.testing.expectEqual(before.block_bytes + 1000 * 24, after.block_bytes);
    try std.testing.expect(after.classes[size_class_of_24].pages >= 1);
    try std.testing.expect(after.committed_bytes >= after.block_bytes);
    try std.testing.expect(after.mapped_bytes >= after.committed_bytes);
    if (kennel.config.count_requested) {
        try std.testing.expectEqual(before.requested_bytes.? + 1000 * 24, after.requested_bytes.?);
    } else try std.testing.expectEqual(@as(?usize, null), after.requested_bytes);

    // Requested bytes follow resizes; blocks stay where they are.
    var list = try gpa.alloc(u8, 100);
    list = try gpa.realloc(list, 3000);
    list = try gpa.realloc(list, 50);
    const resized = kennel.stats();
    if (kennel.config.count_requested) try std.testing.expectEqual(after.requested_bytes.? + 50, resized.requested_bytes.?);
    try std.testing.expectEqual(after.blocksLive() + 1, resized.blocksLive());
    gpa.free(list);

    // All but the last: its page stays in use, so the blocks freed there
    // are free blocks of the class whatever happens to pages that empty.
    // (Counting all 1000 failed in 2 of 3 make test runs on 2026-11-27,
    // aarch64 under qemu right after the crowd test; a page emptied whole
    // may leave the class at once.)
    const kept = blocks[blocks.len - 1];
    const small_page_bytes = kennel.layout.small_page_bytes;
    var sharing: usize = 0;
    for (blocks[0 .. blocks.len - 1]) |b| {
        if (@intFromPtr(b) / small_page_bytes == @intFromPtr(kept) / small_page_bytes) sharing += 1;
        gpa.destroy(b);
    }
    const freed = kennel.stats();
    try std.testing.expectEqual(before.blocksLive() + 1, freed.blocksLive());
    try std.testing.expectEqual(before.block_bytes + 24, freed.block_bytes);
    try std.testing.expect(sharing > 0);
    try std.testing.expect(freed.classes[size_class_of_24].blocks_free >= sharing);
    if (kennel.config.count_requested) try std.testing.expectEqual(before.requested_bytes.? + 24, freed.requested_bytes.?);
    gpa.destroy(kept);
    const emptied = kennel.stats();
    try std.testing.expectEqual(before.blocksLive(), emptied.blocksLive());
    try std.testing.expectEqual(before.block_bytes, emptied.block_bytes);
}

test "stats: huge blocks" {
    const before = kennel.stats();
    const huge = try gpa.alloc(u8, 5 << 20);
    const during = kennel.stats();
    try std.testing.expectEqual(before.huge_count + 1, during.huge_count);
    try std.testing.expect(during.huge_bytes >= before.huge_bytes + (5 << 20));
    try std.testing.expectEqual(before.block_bytes + (during.huge_bytes - before.huge_bytes), during.block_bytes);
    gpa.free(huge);
    const after = kennel.stats();
    try std.testing.expectEqual(before.huge_count, after.huge_count);
    try std.testing.expectEqual(before.block_bytes, after.block_bytes);
}

const thread_count = 4;
const per_thread = 2000;

fn allocateAndEnd(out: *[per_thread]*[200]u8) void {
    for (out) |*b| b.* = gpa.create([200]u8) catch @panic("out of memory");
}

fn freeAll(blocks: *[thread_count][per_thread]*[200]u8, from: usize, step: usize) void {
    var t: usize = 0;
    while (t < thread_count) : (t += 1) {
        var i = from;
        while (i < per_thread) : (i += step) gpa.destroy(blocks[t][i]);
    }
}

test "stats: threads that end holding blocks, and frees from other threads" {
    if (builtin.single_threaded) return error.SkipZigTest;
    const before = kennel.stats();
    var blocks: [thread_count][per_thread]*[200]u8 = undefined;
    var threads: [thread_count]std.Thread = undefined;
    for (&threads, &blocks) |*t, *out| t.* = try std.Thread.spawn(.{}, allocateAndEnd, .{out});
    for (threads) |t| t.join();
    const after = kennel.stats();
    try std.testing.expectEqual(before.blocksLive() + thread_count * per_thread, after.blocksLive());
    // 200 bytes live in blocks of 208 (128 + 5 * 16).
    try std.testing.expectEqual(before.block_bytes + thread_count * per_thread * 208, after.block_bytes);
    // Their threads are gone: with libc the heaps were given up at exit,
    // without it the ended threads are found by probing.
    try std.testing.expect(after.abandoned_heaps >= 1);
    try std.testing.expect(after.abandoned_pages >= 1);
    if (kennel.config.count_requested) try std.testing.expectEqual(before.requested_bytes.? + thread_count * per_thread * 200, after.requested_bytes.?);

    // Half freed by another thread, half by this one.
    const helper = try std.Thread.spawn(.{}, freeAll, .{ &blocks, 0, 2 });
    helper.join();
    const half = kennel.stats();
    try std.testing.expectEqual(before.blocksLive() + thread_count * per_thread / 2, half.blocksLive());
    freeAll(&blocks, 1, 2);
    const done = kennel.stats();
    try std.testing.expectEqual(before.blocksLive(), done.blocksLive());
    try std.testing.expectEqual(before.block_bytes, done.block_bytes);
    // Known gap on Windows (seen under wine, without libc): one page of an
    // ended thread's heap still counts as abandoned here; its blocks are
    // all freed (checked above), the page waits for the heap's next owner.
    // Hardened with a quarantine, the blocks this thread freed last still
    // wait in it (counted as free above) and keep their pages in use.
    // Compared with `before`: blocks that earlier tests' ended threads left
    // live (as the live count does) may keep a page of theirs counted.
    if (builtin.os.tag != .windows and !kennel.config.hardening.quarantine) try std.testing.expect(done.abandoned_pages <= before.abandoned_pages);
    if (kennel.config.count_requested) try std.testing.expectEqual(before.requested_bytes.?, done.requested_bytes.?);
}

const Churn = struct {
    stop: std.atomic.Value(bool) = .init(false),

    /// Blocks of two classes in turn, 64 at a time, until told to stop.
    fn run(c: *Churn) void {
        var blocks: [64][]u8 = undefined;
        // Monotonic: a stop flag.
        while (!c.stop.load(.monotonic)) {
            for ([_]usize{ 1000, 2000 }) |len| {
                for (&blocks) |*b| b.* = gpa.alloc(u8, len) catch @panic("out of memory");
                for (blocks) |b| gpa.free(b);
            }
        }
    }
};

test "stats: while another thread allocates, the totals are the sums of the classes" {
    // (The figures themselves are a snapshot then.) Hardened, blocks
    // waiting in the quarantine are taken off each class, at most what
    // the class had: taken off the total in full, a snapshot in ten
    // disagreed with its own classes on a loaded machine (one thread
    // churning); on an idle one the race is rarer, and the arithmetic is
    // checked on its own in stats.zig.
    if (builtin.single_threaded) return error.SkipZigTest;
    var churn: Churn = .{};
    const t = try std.Thread.spawn(.{}, Churn.run, .{&churn});
    defer t.join();
    // Monotonic: a stop flag.
    defer churn.stop.store(true, .monotonic);
    // 2,000 snapshots, or 100 and 200 ms: alone, a snapshot takes
    // microseconds; after the crowd test it walks 20,000 heaps,
    // milliseconds (2,000 of them took 10 to 50 s of the suite).
    const start = util.nowNanoseconds();
    var snapshots: usize = 0;
    while (snapshots < 2000 and (snapshots < 100 or util.nowNanoseconds() - start < 200 * std.time.ns_per_ms)) : (snapshots += 1) {
        const s = kennel.stats();
        var sum: usize = 0;
        for (s.classes) |c| sum += c.blocks_live * c.block_size;
        try std.testing.expectEqual(s.block_bytes, sum + s.huge_bytes);
    }
}

test "stats: printed form" {
    var buffer: [16 * 1024]u8 = undefined;
    var writer: std.Io.Writer = .fixed(&buffer);
    try kennel.printStats(&writer);
    const text = writer.buffered();
    try std.testing.expect(std.mem.indexOf(u8, text, "bytes mapped, peak") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "live blocks") != null);
}

test "stats: a large block shrunk in place gives back the rest of its last slice" {
    // Hardened, large blocks do not shrink in place; on Windows a purge
    // decommits, and slices are purged whole; with 64 KiB kernel pages
    // nothing past the block is a whole kernel page.
    if (kennel.config.secure or builtin.os.tag == .windows or std.heap.pageSize() >= 64 * 1024) return error.SkipZigTest;
    // Free memory from earlier tests goes back first, so the budget has no
    // reason to purge anything during the shrink.
    kennel.releaseThreadMemory();
    // Three slices (64 KiB each), touched to the end of the last.
    var block = try gpa.alloc(u8, 190_000);
    @memset(block, 7);
    const before = kennel.stats();
    // 70,000 bytes: a block of 72 KiB, two slices. The third slice becomes
    // free memory (resident, still in the footprint); the second one is
    // used to 72 KiB - 64 KiB = 8 KiB, and what lies past that goes back.
    try std.testing.expect(gpa.resize(block, 70_000));
    block = block[0..70_000];
    defer gpa.free(block);
    const after = kennel.stats();
    try std.testing.expectEqual(after.footprint_bytes, after.footprint_counted_bytes);
    const page = std.heap.pageSize();
    const tail = kennel.layout.slice_bytes - std.mem.alignForward(usize, 8 * 1024, page);
    try std.testing.expect(after.footprint_bytes + tail <= before.footprint_bytes);
    // The block still holds what was written to its first 70,000 bytes.
    for (block) |b| try std.testing.expectEqual(@as(u8, 7), b);
}

test "stats: the purge policy's footprint is counted exactly" {
    // Every way residency changes: pages first touched and purged, huge
    // blocks made, grown and shrunk in place or moved, cached, reused for
    // another size, and given back.
    const s0 = kennel.stats();
    try std.testing.expectEqual(s0.footprint_bytes, s0.footprint_counted_bytes);
    var small: [3000]*[48]u8 = undefined;
    for (&small) |*b| b.* = try gpa.create([48]u8);
    const medium = try gpa.alloc(u8, 300 << 10);
    @memset(medium, 1);
    var huge = try gpa.alloc(u8, 3 << 20);
    @memset(huge, 2);
    const s1 = kennel.stats();
    try std.testing.expectEqual(s1.footprint_bytes, s1.footprint_counted_bytes);
    try std.testing.expect(s1.footprint_bytes >= (3 << 20) + (300 << 10));
    huge = try gpa.realloc(huge, 9 << 20);
    @memset(huge, 3);
    huge = try gpa.realloc(huge, 5 << 20);
    const s2 = kennel.stats();
    try std.testing.expectEqual(s2.footprint_bytes, s2.footprint_counted_bytes);
    gpa.free(huge);
    const other = try gpa.alloc(u8, 7 << 20);
    @memset(other, 4);
    gpa.free(other);
    gpa.free(medium);
    // Pages freed beside pages in use: their slices are purged, not unmapped.
    var spread: [2048]*[2000]u8 = undefined;
    for (&spread) |*b| {
        b.* = try gpa.create([2000]u8);
        @memset(b.*, 5);
    }
    for (spread, 0..) |b, i| if (i % 256 != 0) gpa.destroy(b);
    const s3 = kennel.stats();
    try std.testing.expectEqual(s3.footprint_bytes, s3.footprint_counted_bytes);
    kennel.releaseThreadMemory();
    const s4 = kennel.stats();
    try std.testing.expectEqual(s4.footprint_bytes, s4.footprint_counted_bytes);
    try std.testing.expect(s4.footprint_bytes < s3.footprint_bytes);
    for (small) |b| gpa.destroy(b);
    for (spread, 0..) |b, i| if (i % 256 == 0) gpa.destroy(b);
    kennel.releaseThreadMemory();
    const s5 = kennel.stats();
    try std.testing.expectEqual(s5.footprint_bytes, s5.footprint_counted_bytes);
}
