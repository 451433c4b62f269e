//! MPSC: four producers allocate, one consumer frees, through a small queue.
//! A sampler reads the resident set every 0.5 s; the reported slope must be
//! about zero for an allocator whose memory plateaus.
const std = @import("std");
const common = @import("../common.zig");

const producer_count = 4;
const Queue = common.Queue([]u8, 256);

const Shared = struct {
    gpa: std.mem.Allocator,
    queue: Queue = .{},
    per_producer: usize,
    done: std.atomic.Value(bool) = .init(false),
    samples: [4096]f64 = undefined,
    sample_count: usize = 0,

    fn produce(s: *Shared, id: usize) void {
        var prng = std.Random.DefaultPrng.init(id);
        const random = prng.random();
        for (0..s.per_producer) |_| {
            const len = random.intRangeAtMost(usize, 16, 256);
            const block = s.gpa.alloc(u8, len) catch common.oom();
            block[0] = @truncate(len);
            block[len - 1] = 0xa5;
            s.queue.push(block);
        }
    }

    fn consume(s: *Shared) void {
        var received: usize = 0;
        var spins: usize = 0;
        while (received < producer_count * s.per_producer) {
            const block = s.queue.tryPop() orelse {
                common.backoff(&spins);
                continue;
            };
            common.check(block[0] == @as(u8, @truncate(block.len)) and block[block.len - 1] == 0xa5, "mpsc: block intact");
            s.gpa.free(block);
            received += 1;
        }
        // Monotonic: a stop flag for the sampler.
        s.done.store(true, .monotonic);
    }

    fn sample(s: *Shared) void {
        // Monotonic: a stop flag.
        while (!s.done.load(.monotonic) and s.sample_count < s.samples.len) {
            s.samples[s.sample_count] = @floatFromInt(common.residentBytes());
            s.sample_count += 1;
            var slept: u64 = 0;
            while (slept < 500 and !s.done.load(.monotonic)) : (slept += 10) common.sleepMilliseconds(10);
        }
    }
};

/// Least-squares slope of y against sample index (0.5 s apart), in MB/s.
fn slopeMegabytesPerSecond(ys: []const f64) f64 {
    if (ys.len < 2) return 0;
    const n: f64 = @floatFromInt(ys.len);
    var sx: f64 = 0;
    var sy: f64 = 0;
    var sxx: f64 = 0;
    var sxy: f64 = 0;
    for (ys, 0..) |y, i| {
        const x = @as(f64, @floatFromInt(i)) * 0.5;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    const slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    return slope / 1e6;
}

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const shared = std.heap.page_allocator.create(Shared) catch common.oom();
    defer std.heap.page_allocator.destroy(shared);
    shared.* = .{ .gpa = gpa, .per_producer = o.scaled(1_500_000) };
    const sampler = common.spawn(Shared.sample, .{shared});
    var producers: [producer_count]std.Thread = undefined;
    for (&producers, 0..) |*t, i| t.* = common.spawn(Shared.produce, .{ shared, i });
    shared.consume();
    for (producers) |t| t.join();
    sampler.join();
    // The second half of the run, after warm-up.
    const samples = shared.samples[0..shared.sample_count];
    common.metric("rss_slope", slopeMegabytesPerSecond(samples[samples.len / 2 ..]), "MB/s");
    var last: f64 = 0;
    for (samples) |y| last = @max(last, y);
    common.metric("rss_sampled_max", last / 1e6, "MB");
}
