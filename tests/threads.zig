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

/// Blocks in flight from one producer to one consumer, handed over a batch
/// at a time: each block still goes to the other thread, but the lock is
/// taken once per batch. Block by block, the two threads spent the test's
/// time on the lock, 40 to 70 s of it per configuration while the suite's
/// other binaries shared the two cores, against 8 s alone.
const Pipe = struct {
    const batch_len = 256;
    const Batch = struct {
        blocks: [batch_len][]u8 = undefined,
        len: usize = 0,
    };

    lock: util.SpinLock = .{},
    ring: [8]Batch = undefined,
    head: usize = 0,
    tail: usize = 0,
    done: std.atomic.Value(bool) = .init(false),

    fn put(p: *Pipe, batch: *Batch) void {
        var spins: usize = 0;
        while (true) : (spins += 1) {
            p.lock.lock();
            if (p.tail - p.head < p.ring.len) {
                p.ring[p.tail % p.ring.len] = batch.*;
                p.tail += 1;
                p.lock.unlock();
                batch.len = 0;
                return;
            }
            p.lock.unlock();
            util.backOff(spins);
        }
    }

    fn get(p: *Pipe, batch: *Batch) bool {
        p.lock.lock();
        defer p.lock.unlock();
        if (p.head == p.tail) return false;
        batch.* = p.ring[p.head % p.ring.len];
        p.head += 1;
        return true;
    }

    fn consumer(p: *Pipe) void {
        var batch: Batch = .{};
        var spins: usize = 0;
        while (true) : (spins += 1) {
            // Acquire, read before the queue: done means every batch was
            // put before it (the producer's release store).
            const done = p.done.load(.acquire);
            if (p.get(&batch)) {
                for (batch.blocks[0..batch.len]) |block| {
                    if (block[0] != @as(u8, @truncate(block.len))) @panic("consumer: block corrupted");
                    gpa.free(block);
                }
            } else if (done) return else util.backOff(spins);
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
    var batch: Pipe.Batch = .{};
    for (0..rounds) |round| {
        for (0..per_round) |_| {
            const block = try gpa.alloc(u8, random.intRangeAtMost(usize, 16, 200));
            block[0] = @truncate(block.len);
            batch.blocks[batch.len] = block;
            batch.len += 1;
            if (batch.len == Pipe.batch_len) pipe.put(&batch);
        }
        if (round == 2) after_warmup = kennel.stats().mapped_bytes;
    }
    if (batch.len > 0) pipe.put(&batch);
    // Release: publishes the puts before it (see Pipe.consumer).
    pipe.done.store(true, .release);
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

/// Not from std.heap.page_allocator (see the crowd test).
var orphan_storage: Orphan = undefined;

/// The orphan tests' end: the resident set is back within 4 MiB of where
/// it was before the orphan filled its 20 MB (`full`: at its end).
fn expectOrphanMemoryReturned(before: usize, full: usize) !void {
    const after = util.residentBytes().?;
    if (after > before + 4 * 1024 * 1024) {
        std.debug.print("resident: {d} before, {d} full, {d} after\n", .{ before, full, after });
        return error.TestMemoryNotReturned;
    }
}

test "orphans: blocks of an ended thread, freed elsewhere, return their memory" {
    if (builtin.single_threaded) return error.SkipZigTest;
    // Where the system tells the resident set (Linux, Windows).
    const before = util.residentBytes() orelse return error.SkipZigTest;
    const orphan = &orphan_storage;
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
    try expectOrphanMemoryReturned(before, full);
}

test "orphans: blocks all freed within the grace after their thread ended still return their memory" {
    if (builtin.single_threaded) return error.SkipZigTest;
    // The grace applies where thread ends are announced (libc's thread
    // exit callbacks); without, an ended thread's heap is found by probes.
    if (!builtin.link_libc) return error.SkipZigTest;
    const before = util.residentBytes() orelse return error.SkipZigTest;
    // This thread has a heap, so that it frees into the orphan rather than
    // taking it over whole.
    gpa.free(try gpa.alloc(u8, 100));
    const orphan = &orphan_storage;
    const t = try std.Thread.spawn(.{}, Orphan.fill, .{orphan});
    t.join();
    const full = util.residentBytes().?;
    // Every free lands within the grace that leaves an ended thread's heap
    // to a new thread: this thread notes the heap, and absorbs it once the
    // grace is over (here when it gives its own heap up). Before, nothing
    // looked at the orphan again, and its 20 MB stayed resident.
    for (orphan.blocks, 0..) |b, i| {
        for (b) |byte| if (byte != @as(u8, @truncate(i))) return error.TestContentsLost;
        gpa.free(b);
    }
    util.sleepMilliseconds(2 * kennel.orphan_grace_ms);
    kennel.releaseThreadMemory();
    try expectOrphanMemoryReturned(before, full);
}

/// A thread that frees another's blocks and never allocates.
fn consumeOrphan(o: *Orphan) void {
    util.sleepMilliseconds(2 * kennel.orphan_grace_ms);
    for (o.blocks) |b| gpa.free(b);
    kennel.releaseThreadMemory();
}

test "orphans: a thread that never allocated frees an ended thread's blocks, and their memory returns" {
    if (builtin.single_threaded) return error.SkipZigTest;
    const before = util.residentBytes() orelse return error.SkipZigTest;
    const orphan = &orphan_storage;
    const producer = try std.Thread.spawn(.{}, Orphan.fill, .{orphan});
    producer.join();
    const full = util.residentBytes().?;
    // Before, a thread with no heap left every block on the ended heap's
    // pages, and gave nothing back: it had nothing to give.
    const consumer = try std.Thread.spawn(.{}, consumeOrphan, .{orphan});
    consumer.join();
    try expectOrphanMemoryReturned(before, full);
}

/// Threads alive at once in the crowd test: more than the 16,384 heaps
/// kennel's registry once held at most.
const crowd_thread_count = 20_000;
var crowd_blocks: [crowd_thread_count][]u8 = undefined;
var crowd_threads: [crowd_thread_count]std.Thread = undefined;
/// Small stacks keep 20,000 threads within a few GiB of address space.
const crowd_stack_bytes = 64 * 1024;

/// Threads that each allocate, wait at a gate until every thread has
/// (so that all are alive at once), then free another thread's block.
const Crowd = struct {
    blocks: [][]u8,
    /// Threads past their allocation.
    arrived: std.atomic.Value(u32) = .init(0),
    /// 0 until every thread has arrived; a futex word.
    open: std.atomic.Value(u32) = .init(0),
    /// Threads started; set before the gate opens.
    count: usize = 0,
    failures: std.atomic.Value(u32) = .init(0),
    corrupted: std.atomic.Value(u32) = .init(0),

    const io = std.Io.Threaded.global_single_threaded.io();

    fn sizeOf(id: usize) usize {
        return 16 + (id % 64) * 8;
    }

    fn worker(c: *Crowd, id: usize) void {
        if (gpa.alloc(u8, sizeOf(id))) |block| {
            @memset(block, @truncate(id));
            c.blocks[id] = block;
        } else |_| {
            c.blocks[id] = &.{};
            // Monotonic: read after every thread is joined.
            _ = c.failures.fetchAdd(1, .monotonic);
        }
        // Release: the main thread and the thread that frees our block see it.
        _ = c.arrived.fetchAdd(1, .release);
        // Acquire: pairs with the release store that opens the gate (count).
        while (c.open.load(.acquire) == 0) io.futexWaitUncancelable(u32, &c.open.raw, 0);
        // Free another thread's block (that thread may have ended already).
        const other = (id + 1) % c.count;
        const block = c.blocks[other];
        if (block.len == 0) return;
        for (block) |byte| if (byte != @as(u8, @truncate(other))) {
            // Monotonic: as above.
            _ = c.corrupted.fetchAdd(1, .monotonic);
            break;
        };
        gpa.free(block);
    }

    /// Starts `blocks.len` threads (fewer if the OS refuses one: the error
    /// is returned with the count), lets them all arrive, opens the gate
    /// and joins them.
    fn run(c: *Crowd, threads: []std.Thread) struct { count: usize, refusal: ?anyerror, start_ns: u64, resident_bytes: usize } {
        c.arrived.store(0, .monotonic);
        c.open.store(0, .monotonic);
        c.failures.store(0, .monotonic);
        c.corrupted.store(0, .monotonic);
        const resident_before = util.residentBytes();
        const threads_before = util.threadCount();
        const start = util.nowNanoseconds();
        var count: usize = 0;
        var refusal: ?anyerror = null;
        while (count < threads.len) : (count += 1) {
            threads[count] = std.Thread.spawn(.{ .stack_size = crowd_stack_bytes }, worker, .{ c, count }) catch |err| {
                refusal = err;
                break;
            };
        }
        // Acquire: pairs with the workers' release increments.
        while (c.arrived.load(.acquire) < count) util.sleepMilliseconds(1);
        const start_ns = util.nowNanoseconds() - start;
        const resident_bytes = (util.residentBytes() orelse 0) -| (resident_before orelse 0);
        c.count = count;
        // Release: the workers see `count` and every block.
        c.open.store(1, .release);
        io.futexWake(u32, &c.open.raw, std.math.maxInt(u32));
        for (threads[0..count]) |t| t.join();
        waitUntilGone(threads_before);
        return .{ .count = count, .refusal = refusal, .start_ns = start_ns, .resident_bytes = resident_bytes };
    }

    /// Waits (up to `gone_wait_ms_max`) until the system counts no more
    /// threads than `before`. Without libc, kennel learns that a thread
    /// ended only when the system says so (thread.zig, "When is a heap's
    /// thread gone?"), and a joined thread may still be counted: under
    /// qemu-user until its host thread ends, which takes a while for a
    /// thousand at once. A heap whose thread the system still counts
    /// cannot be taken, so the next wave would start before the test's
    /// premise (the first wave is gone) holds.
    fn waitUntilGone(before: ?usize) void {
        const threads_before = before orelse return;
        var waited_ms: usize = 0;
        while (waited_ms < gone_wait_ms_max) : (waited_ms += 1) {
            if ((util.threadCount() orelse return) <= threads_before) return;
            util.sleepMilliseconds(1);
        }
        std.debug.print("crowd: the system still counts {?d} threads, {d} before the wave, after {d} ms\n", .{ util.threadCount(), threads_before, gone_wait_ms_max });
    }

    const gone_wait_ms_max = 30_000;
};

test "crowd: 20,000 threads alive at once each get memory, and the next 20,000 reuse it" {
    if (builtin.single_threaded) return error.SkipZigTest;
    // Each thread takes a stack mapping and its guard, and kennel a segment
    // (two mappings with guard pages): stay within the kernel's limit on
    // mappings, which this test is not about.
    // Hardened, a segment's guards (after its header, at its end) split its
    // mapping in four, and the second wave may meet the first's spare
    // segments besides its own: leave room.
    const mappings_per_thread: usize = if (kennel.config.hardening.guard_pages) 7 else 3;
    // On 32-bit targets every heap's 4 MiB segment comes out of 4 GiB of
    // address space at most: a few hundred threads that each hold a block
    // fill it (a limit of the address space, not of the registry).
    const address_space_threads: usize = if (@bitSizeOf(usize) >= 64) crowd_thread_count else 256;
    const count_max = @min(@min(util.scaled(crowd_thread_count), address_space_threads), (util.mapCountMax() -| 4096) / mappings_per_thread);
    if (count_max < crowd_thread_count) {
        std.debug.print("crowd: vm.max_map_count allows {d} threads here, not {d}\n", .{ count_max, crowd_thread_count });
    }
    // Not from std.heap.page_allocator, which under qemu with 64 KiB pages
    // now and then fails after earlier tests (see tests/model.zig).
    const blocks = crowd_blocks[0..count_max];
    const threads = crowd_threads[0..count_max];
    var crowd: Crowd = .{ .blocks = blocks };

    const before = kennel.stats();
    var first: kennel.Stats = undefined;
    for (0..2) |wave| {
        const result = crowd.run(threads);
        // A kennel failure is a failure, however many threads the OS gave.
        if (crowd.failures.load(.monotonic) > 0 or crowd.corrupted.load(.monotonic) > 0) {
            const s = kennel.stats();
            std.debug.print("crowd: wave {d}: {d} of {d} allocations failed, {d} blocks corrupted; {d} heaps, {d} MiB mapped\n", .{
                wave, crowd.failures.load(.monotonic), result.count, crowd.corrupted.load(.monotonic), s.heap_count, s.mapped_bytes >> 20,
            });
            // Whether the system still gives a segment's worth of memory:
            // tells a refusal by the system (or its emulator) from kennel's.
            if (std.heap.page_allocator.alloc(u8, 4 << 20)) |probe| {
                std.heap.page_allocator.free(probe);
                std.debug.print("crowd: the system still maps 4 MiB\n", .{});
            } else |_| std.debug.print("crowd: the system refuses to map 4 MiB\n", .{});
            return error.TestAllocationFailed;
        }
        if (result.refusal) |err| {
            std.debug.print("crowd: SKIPPED: the OS refused thread {d} of {d} ({s}): this machine allows fewer threads " ++
                "(ulimit -u, kernel.threads-max, kernel.pid_max); the {d} started were all served\n", .{ result.count + 1, count_max, @errorName(err), result.count });
            return error.SkipZigTest;
        }
        const s = kennel.stats();
        std.debug.print("crowd: wave {d}: {d} threads alive at once, started in {d} ms, {d:.1} KiB resident per thread; {d} heaps, {d} MiB mapped, {d} MiB committed\n", .{
            wave,                                                                                            result.count, result.start_ns / std.time.ns_per_ms,
            @as(f64, @floatFromInt(result.resident_bytes)) / 1024.0 / @as(f64, @floatFromInt(result.count)), s.heap_count, s.mapped_bytes >> 20,
            s.committed_bytes >> 20,
        });
        try std.testing.expectEqual(before.blocksLive(), s.blocksLive());
        if (wave == 0) {
            first = s;
            try std.testing.expect(s.heap_count >= count_max);
            continue;
        }
        // The second wave runs on the heaps and segments of the first: a
        // heap that absorbed others and holds segments its next thread does
        // not need gives them to the pool (pool.zig), where threads whose
        // heap has none find them. Without the pool the second wave mapped
        // a fifth more; without any reuse it would map as much again.
        // (Committed memory is not compared: it follows the purge policy's
        // timing.) On 32-bit targets emptied heaps keep no segment
        // (Heap.absorb) and the pool holds a few, so only the heaps are
        // reused there.
        const mapped_first = first.mapped_bytes - before.mapped_bytes;
        const mapped_again = @bitSizeOf(usize) >= 64 and s.mapped_bytes > first.mapped_bytes + mapped_first / 16;
        if (s.heap_count > first.heap_count + count_max / 100 or mapped_again) {
            std.debug.print("crowd: the second wave did not reuse the first's memory: heaps {d} -> {d}, mapped {d} -> {d} MiB, committed {d} -> {d} MiB\n", .{
                first.heap_count, s.heap_count, first.mapped_bytes >> 20, s.mapped_bytes >> 20, first.committed_bytes >> 20, s.committed_bytes >> 20,
            });
            return error.TestMemoryNotReused;
        }
    }
}
