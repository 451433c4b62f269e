//! Multi-threaded tests: cross-thread frees, thread exit without any call,
//! heap reuse, and memory that must plateau or go back.
const std = @import("std");
const builtin = @import("builtin");
const kennel = @import("kennel");
const util = @import("util.zig");

const gpa = kennel.allocator;

const Message = struct {
    block: []u8,
    seed: u64,
};

/// A bounded multi-producer queue of blocks in flight between threads.
const Inbox = struct {
    lock: util.SpinLock = .{},
    items: [256]Message = undefined,
    len: usize = 0,

    fn tryPut(inbox: *Inbox, message: Message) bool {
        inbox.lock.lock();
        defer inbox.lock.unlock();
        if (inbox.len == inbox.items.len) return false;
        inbox.items[inbox.len] = message;
        inbox.len += 1;
        return true;
    }

    /// Moves everything out into `out`; returns how many.
    fn takeAll(inbox: *Inbox, out: []Message) usize {
        inbox.lock.lock();
        defer inbox.lock.unlock();
        const n = inbox.len;
        @memcpy(out[0..n], inbox.items[0..n]);
        inbox.len = 0;
        return n;
    }
};

fn receive(inbox: *Inbox) !usize {
    var buffer: [256]Message = undefined;
    const n = inbox.takeAll(&buffer);
    for (buffer[0..n]) |m| {
        try util.check(m.block, m.block.len, m.seed);
        gpa.free(m.block);
    }
    return n;
}

const Stress = struct {
    inboxes: []Inbox,
    ops_per_thread: usize,
    failed: std.atomic.Value(bool) = .init(false),

    fn worker(s: *Stress, id: usize) void {
        s.work(id) catch |err| {
            std.debug.print("stress worker {d}: {s}\n", .{ id, @errorName(err) });
            s.failed.store(true, .monotonic);
        };
    }

    fn work(s: *Stress, id: usize) !void {
        var prng = std.Random.DefaultPrng.init(id + 1);
        const random = prng.random();
        // A few blocks stay with their allocating thread for a while, so
        // local and remote frees interleave on the same pages.
        var keep: [64]?Message = @splat(null);
        for (0..s.ops_per_thread) |i| {
            const len = if (random.uintLessThan(u32, 1000) == 0)
                util.randomSize(random, 3 << 20)
            else
                random.intRangeAtMost(usize, 1, if (i % 8 == 0) 20_000 else 512);
            const block = try gpa.alloc(u8, len);
            const seed = random.int(u64);
            util.fill(block, seed);
            const message: Message = .{ .block = block, .seed = seed };
            if (random.uintLessThan(u32, 8) == 0) {
                const slot = &keep[random.uintLessThan(usize, keep.len)];
                if (slot.*) |old| {
                    try util.check(old.block, old.block.len, old.seed);
                    gpa.free(old.block);
                }
                slot.* = message;
            } else {
                // Mostly to another thread: most frees are cross-thread.
                var target = random.uintLessThan(usize, s.inboxes.len);
                while (!s.inboxes[target].tryPut(message)) {
                    _ = try receive(&s.inboxes[id]);
                    target = random.uintLessThan(usize, s.inboxes.len);
                }
            }
            if (i % 16 == 0) _ = try receive(&s.inboxes[id]);
        }
        for (&keep) |*slot| if (slot.*) |m| {
            try util.check(m.block, m.block.len, m.seed);
            gpa.free(m.block);
        };
    }
};

test "stress: more threads than cores pass blocks to each other" {
    if (builtin.single_threaded) return error.SkipZigTest;
    const thread_count = 8;
    var inboxes: [thread_count]Inbox = @splat(.{});
    var stress: Stress = .{
        .inboxes = &inboxes,
        .ops_per_thread = util.scaled(if (util.slow_build) 60_000 else 400_000),
    };
    var threads: [thread_count]std.Thread = undefined;
    for (&threads, 0..) |*t, id| t.* = try std.Thread.spawn(.{}, Stress.worker, .{ &stress, id });
    for (threads) |t| t.join();
    for (&inboxes) |*inbox| _ = try receive(inbox);
    try std.testing.expect(!stress.failed.load(.monotonic));
}

/// Blocks left behind by ended threads for later threads to free.
const Leftovers = struct {
    lock: util.SpinLock = .{},
    items: [512]Message = undefined,
    len: usize = 0,

    fn swapOne(l: *Leftovers, random: std.Random, message: Message) ?Message {
        l.lock.lock();
        defer l.lock.unlock();
        if (l.len < l.items.len) {
            l.items[l.len] = message;
            l.len += 1;
            return null;
        }
        const i = random.uintLessThan(usize, l.len);
        const old = l.items[i];
        l.items[i] = message;
        return old;
    }
};

const Churn = struct {
    leftovers: Leftovers = .{},
    failed: std.atomic.Value(bool) = .init(false),

    fn worker(c: *Churn, id: usize) void {
        c.work(id) catch |err| {
            std.debug.print("churn thread {d}: {s}\n", .{ id, @errorName(err) });
            c.failed.store(true, .monotonic);
        };
    }

    fn work(c: *Churn, id: usize) !void {
        var prng = std.Random.DefaultPrng.init(id);
        const random = prng.random();
        var mine: [32]Message = undefined;
        for (&mine) |*m| {
            const block = try gpa.alloc(u8, random.intRangeAtMost(usize, 1, if (random.boolean()) 256 else 40_000));
            m.* = .{ .block = block, .seed = random.int(u64) };
            util.fill(block, m.seed);
        }
        // Free some here, leave some for other threads; free what earlier,
        // now ended, threads left. Then end without any call.
        for (mine, 0..) |m, i| {
            if (i % 4 == 0) {
                if (c.leftovers.swapOne(random, m)) |old| {
                    try util.check(old.block, old.block.len, old.seed);
                    gpa.free(old.block);
                }
            } else {
                try util.check(m.block, m.block.len, m.seed);
                gpa.free(m.block);
            }
        }
    }
};

test "churn: 10,000 short-lived threads; memory of ended threads is reused" {
    if (builtin.single_threaded) return error.SkipZigTest;
    const thread_total = util.scaled(10_000);
    const wave = 4;
    var churn: Churn = .{};
    const before = kennel.stats();
    // Without reuse, every thread's heap would map at least one 4 MiB
    // segment: 40 GB over the run. With reuse, mapped memory is the live set
    // (512 blocks, which may pin up to 512 pages) plus a handful of heaps'
    // segments and spares, independent of how many threads have run.
    const bound_bytes = before.mapped_bytes + 768 * 1024 * 1024;
    var spawned: usize = 0;
    var peak_first_tenth: usize = 0;
    var peak: usize = 0;
    while (spawned < thread_total) : (spawned += wave) {
        var threads: [wave]std.Thread = undefined;
        for (&threads, 0..) |*t, i| t.* = try std.Thread.spawn(.{ .stack_size = 256 * 1024 }, Churn.worker, .{ &churn, spawned + i });
        for (threads) |t| t.join();
        const mapped = kennel.stats().mapped_bytes;
        peak = @max(peak, mapped);
        if (spawned < thread_total / 10) peak_first_tenth = peak;
        if (mapped > bound_bytes) {
            std.debug.print("after {d} threads: {d} bytes mapped, bound {d}\n", .{ spawned + wave, mapped, bound_bytes });
            return error.TestMemoryGrows;
        }
    }
    try std.testing.expect(!churn.failed.load(.monotonic));
    const after = kennel.stats();
    // Heaps are bounded by threads alive at once, not by threads ever run.
    if (after.heap_count > before.heap_count + 4 * wave) {
        std.debug.print("heaps: {d} before, {d} after\n", .{ before.heap_count, after.heap_count });
        return error.TestHeapsGrow;
    }
    for (churn.leftovers.items[0..churn.leftovers.len]) |m| {
        try util.check(m.block, m.block.len, m.seed);
        gpa.free(m.block);
    }
    std.debug.print("churn: {d} threads, mapped peak {d} MiB after 1,000 threads, {d} MiB overall, {d} heaps, {d} MiB resident\n", .{
        thread_total, peak_first_tenth >> 20, peak >> 20, after.heap_count, (util.residentBytes() orelse 0) >> 20,
    });
}

const Pipe = struct {
    lock: util.SpinLock = .{},
    ring: [1024][]u8 = undefined,
    head: usize = 0,
    tail: usize = 0,
    done: std.atomic.Value(bool) = .init(false),

    fn put(p: *Pipe, block: []u8) void {
        while (true) {
            p.lock.lock();
            if (p.tail - p.head < p.ring.len) {
                p.ring[p.tail % p.ring.len] = block;
                p.tail += 1;
                p.lock.unlock();
                return;
            }
            p.lock.unlock();
            std.atomic.spinLoopHint();
        }
    }

    fn get(p: *Pipe) ?[]u8 {
        p.lock.lock();
        defer p.lock.unlock();
        if (p.head == p.tail) return null;
        const block = p.ring[p.head % p.ring.len];
        p.head += 1;
        return block;
    }

    fn consumer(p: *Pipe) void {
        while (true) {
            if (p.get()) |block| {
                if (block[0] != @as(u8, @truncate(block.len))) @panic("consumer: block corrupted");
                gpa.free(block);
                // Monotonic: the lock orders the queue; this is a stop flag.
            } else if (p.done.load(.monotonic)) {
                if (p.get() == null) return;
            } else std.atomic.spinLoopHint();
        }
    }
};

test "producer/consumer: blocks freed by another thread are reused; memory plateaus" {
    if (builtin.single_threaded) return error.SkipZigTest;
    var pipe: Pipe = .{};
    const consumer = try std.Thread.spawn(.{}, Pipe.consumer, .{&pipe});
    // At least a few rounds after the warm-up (round 2) in a reduced run.
    const rounds = @max(4, util.scaled(if (util.slow_build) 10 else 40));
    const per_round = 200_000;
    var prng = std.Random.DefaultPrng.init(3);
    const random = prng.random();
    var after_warmup: usize = 0;
    for (0..rounds) |round| {
        for (0..per_round) |_| {
            const block = try gpa.alloc(u8, random.intRangeAtMost(usize, 16, 200));
            block[0] = @truncate(block.len);
            pipe.put(block);
        }
        if (round == 2) after_warmup = kennel.stats().mapped_bytes;
    }
    pipe.done.store(true, .monotonic);
    consumer.join();
    const end = kennel.stats().mapped_bytes;
    // SmpAllocator-style migration grows by the bytes passed through
    // (hundreds of MB here); kennel stays within a few segments.
    if (end > after_warmup + 16 * 1024 * 1024) {
        std.debug.print("mapped after warm-up {d}, at end {d}\n", .{ after_warmup, end });
        return error.TestMemoryGrows;
    }
}

const Orphan = struct {
    blocks: [20_000][]u8 = undefined,

    fn fill(o: *Orphan) void {
        for (&o.blocks, 0..) |*b, i| {
            b.* = gpa.alloc(u8, 16 + i % 2000) catch @panic("out of memory");
            @memset(b.*, @truncate(i));
        }
    }
};

test "orphans: blocks of an ended thread, freed elsewhere, return their memory" {
    if (builtin.single_threaded) return error.SkipZigTest;
    // Where the system tells the resident set (Linux, Windows).
    const before = util.residentBytes() orelse return error.SkipZigTest;
    const orphan = try std.heap.page_allocator.create(Orphan);
    defer std.heap.page_allocator.destroy(orphan);
    const t = try std.Thread.spawn(.{}, Orphan.fill, .{orphan});
    t.join();
    const full = util.residentBytes().?;
    const last = orphan.blocks.len - 1;
    for (orphan.blocks[0..last], 0..) |b, i| {
        for (b) |byte| if (byte != @as(u8, @truncate(i))) return error.TestContentsLost;
        gpa.free(b);
    }
    // An ended thread's heap is left to new threads for a moment; after
    // that, the next free into it makes this thread absorb it, and the
    // memory of its emptied pages goes back with this thread's.
    util.sleepMilliseconds(2 * kennel.orphan_grace_ms);
    gpa.free(orphan.blocks[last]);
    const probe = try gpa.alloc(u8, 100);
    gpa.free(probe);
    kennel.releaseThreadMemory();
    const after = util.residentBytes().?;
    if (after > before + 4 * 1024 * 1024) {
        std.debug.print("resident: {d} before, {d} full, {d} after\n", .{ before, full, after });
        return error.TestMemoryNotReturned;
    }
}
