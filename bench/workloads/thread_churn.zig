//! Thread churn: many short-lived threads, a few at a time, each allocating
//! blocks, freeing most, and leaving some in a shared table for later
//! threads to free; then ending without any call to the allocator.
const std = @import("std");
const common = @import("../common.zig");

const Leftovers = struct {
    gpa: std.mem.Allocator,
    lock: common.SpinLock = .{},
    slots: [256]?[]u8 = @splat(null),

    fn worker(l: *Leftovers, id: usize) void {
        var prng = std.Random.DefaultPrng.init(id);
        const random = prng.random();
        var mine: [32][]u8 = undefined;
        for (&mine) |*b| {
            b.* = l.gpa.alloc(u8, random.intRangeAtMost(usize, 16, 4096)) catch common.oom();
            b.*[0] = 0x77;
        }
        for (mine, 0..) |b, i| {
            if (i % 4 != 0) {
                l.gpa.free(b);
                continue;
            }
            l.lock.lock();
            const slot = &l.slots[random.uintLessThan(usize, l.slots.len)];
            const old = slot.*;
            slot.* = b;
            l.lock.unlock();
            if (old) |o| {
                common.check(o[0] == 0x77, "churn: left-over block intact");
                l.gpa.free(o);
            }
        }
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const total = o.scaled(10_000);
    const wave = @max(2, 2 * o.threads);
    var leftovers: Leftovers = .{ .gpa = gpa };
    var started: usize = 0;
    while (started < total) : (started += wave) {
        var threads: [128]std.Thread = undefined;
        for (threads[0..wave], 0..) |*t, i| t.* = common.spawn(Leftovers.worker, .{ &leftovers, started + i });
        for (threads[0..wave]) |t| t.join();
    }
    for (leftovers.slots) |s| if (s) |b| gpa.free(b);
    common.metric("threads", @floatFromInt(started), "");
}
