//! Larson-style server: threads repeatedly replace random slots of a shared
//! table of blocks of random sizes, so most blocks are freed by a thread
//! other than the one that allocated them.
const std = @import("std");
const common = @import("../common.zig");

const slot_count = 20_000;

const Table = struct {
    gpa: std.mem.Allocator,
    slots: [slot_count]std.atomic.Value(?[*]u8) = @splat(.init(null)),
    rounds: usize,

    /// Blocks carry their length in the first word (Zig's free needs it).
    fn release(t: *Table, block: [*]u8) void {
        const len = std.mem.readInt(usize, block[0..8], .little);
        common.check(len >= 16 and len <= 1024 and block[len - 1] == @as(u8, @truncate(len)), "larson: block intact");
        t.gpa.free(block[0..len]);
    }

    fn worker(t: *Table, id: usize) void {
        var prng = std.Random.DefaultPrng.init(id + 1);
        const random = prng.random();
        for (0..t.rounds) |_| {
            const len = random.intRangeAtMost(usize, 16, 1024);
            const block = t.gpa.alloc(u8, len) catch common.oom();
            std.mem.writeInt(usize, block[0..8], len, .little);
            block[len - 1] = @truncate(len);
            // AcqRel: publishes our block, takes ownership of the old one.
            const old = t.slots[random.uintLessThan(usize, slot_count)].swap(block.ptr, .acq_rel);
            if (old) |o| t.release(o);
        }
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const table = std.heap.page_allocator.create(Table) catch common.oom();
    defer std.heap.page_allocator.destroy(table);
    const thread_count = @max(2, 2 * o.threads);
    table.* = .{ .gpa = gpa, .rounds = o.scaled(4_000_000) / thread_count };
    var threads: [128]std.Thread = undefined;
    for (threads[0..thread_count], 0..) |*t, i| t.* = common.spawn(Table.worker, .{ table, i });
    for (threads[0..thread_count]) |t| t.join();
    for (&table.slots) |*slot| if (slot.raw) |b| table.release(b);
}
