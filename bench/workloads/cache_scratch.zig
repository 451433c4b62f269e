//! Cache-scratch: each thread is handed a small block allocated by the main
//! thread, frees it, then allocates its own small blocks and writes them
//! many times. An allocator that puts different threads' blocks on one
//! cache line makes the writes fight over it (false sharing).
const std = @import("std");
const common = @import("../common.zig");

const object_bytes = 8;

const Worker = struct {
    gpa: std.mem.Allocator,
    given: []u8,
    repetitions: usize,
    writes: usize,
    sum: u64 = 0,

    fn run(w: *Worker) void {
        w.gpa.free(w.given);
        for (0..w.repetitions) |_| {
            const object = w.gpa.alloc(u8, object_bytes) catch common.oom();
            const p: *volatile u8 = &object[0];
            p.* = 0;
            for (0..w.writes) |_| p.* +%= 1;
            w.sum += p.*;
            w.gpa.free(object);
        }
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const thread_count = @max(2, o.threads);
    var workers: [64]Worker = undefined;
    var threads: [64]std.Thread = undefined;
    // Allocated back to back by one thread: likely neighbours in memory.
    for (workers[0..thread_count]) |*w| w.* = .{
        .gpa = gpa,
        .given = gpa.alloc(u8, object_bytes) catch common.oom(),
        .repetitions = o.scaled(2000),
        .writes = 20_000,
    };
    for (threads[0..thread_count], workers[0..thread_count]) |*t, *w| t.* = common.spawn(Worker.run, .{w});
    for (threads[0..thread_count]) |t| t.join();
    for (workers[0..thread_count]) |w| common.check(w.sum == w.repetitions * (20_000 % 256), "cache-scratch: writes counted");
}
