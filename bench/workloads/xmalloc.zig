//! xmalloc-style: producer threads allocate blocks in batches, consumer
//! threads free whole batches.
const std = @import("std");
const common = @import("../common.zig");

const batch_len = 256;
const Batch = struct { blocks: [batch_len][]u8 };
const Queue = common.Queue(*Batch, 64);

const Shared = struct {
    gpa: std.mem.Allocator,
    queue: Queue = .{},
    batches_per_producer: usize,
    total_batches: usize,
    consumed: std.atomic.Value(usize) = .init(0),

    fn produce(s: *Shared, id: usize) void {
        var prng = std.Random.DefaultPrng.init(id + 7);
        const random = prng.random();
        for (0..s.batches_per_producer) |_| {
            const batch = s.gpa.create(Batch) catch common.oom();
            for (&batch.blocks) |*b| {
                b.* = s.gpa.alloc(u8, random.intRangeAtMost(usize, 16, 512)) catch common.oom();
                b.*[0] = 0x5a;
            }
            s.queue.push(batch);
        }
    }

    fn consume(s: *Shared) void {
        var spins: usize = 0;
        // Monotonic: a shared work count; the queue's lock orders the data.
        while (s.consumed.load(.monotonic) < s.total_batches) {
            const batch = s.queue.tryPop() orelse {
                common.backoff(&spins);
                continue;
            };
            for (batch.blocks) |b| {
                common.check(b[0] == 0x5a, "xmalloc: block intact");
                s.gpa.free(b);
            }
            s.gpa.destroy(batch);
            _ = s.consumed.fetchAdd(1, .monotonic);
        }
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const producers = @max(1, o.threads);
    const consumers = @max(1, o.threads);
    const per_producer = o.scaled(12_000) / producers;
    var shared: Shared = .{ .gpa = gpa, .batches_per_producer = per_producer, .total_batches = per_producer * producers };
    var threads: [128]std.Thread = undefined;
    for (0..producers) |i| threads[i] = common.spawn(Shared.produce, .{ &shared, i });
    for (0..consumers) |i| threads[producers + i] = common.spawn(Shared.consume, .{&shared});
    for (threads[0 .. producers + consumers]) |t| t.join();
    common.check(shared.consumed.load(.monotonic) == shared.total_batches, "xmalloc: all batches freed");
}
