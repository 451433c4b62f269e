//! Symmetric: a pool of worker threads (one per core) takes tasks from a
//! shared counter; each task builds a growing list and a hash map of
//! formatted strings, then frees them. Allocation and free on one thread.
const std = @import("std");
const builtin = @import("builtin");
const common = @import("../common.zig");

const list_len = 3000;
const keys_per_task = 300;

fn task(gpa: std.mem.Allocator, id: usize) u64 {
    var list: std.ArrayList(u64) = .empty;
    defer list.deinit(gpa);
    var map: std.StringHashMapUnmanaged(u64) = .empty;
    defer {
        var it = map.keyIterator();
        while (it.next()) |key| gpa.free(key.*);
        map.deinit(gpa);
    }
    for (0..list_len) |i| list.append(gpa, i + id) catch common.oom();
    for (0..keys_per_task) |i| {
        const key = std.fmt.allocPrint(gpa, "task-{d}-key-{d}-{s}", .{ id, i, "payload" }) catch common.oom();
        map.put(gpa, key, i) catch common.oom();
    }
    var sum: u64 = 0;
    for (list.items) |v| sum += v;
    var it = map.valueIterator();
    while (it.next()) |v| sum += v.*;
    return sum;
}

fn expected(id: usize) u64 {
    return list_len * (list_len - 1) / 2 + list_len * id + keys_per_task * (keys_per_task - 1) / 2;
}

const Pool = struct {
    gpa: std.mem.Allocator,
    tasks: usize,
    next: std.atomic.Value(usize) = .init(0),
    wrong: std.atomic.Value(usize) = .init(0),

    fn worker(p: *Pool) void {
        while (true) {
            // Monotonic: a work counter; results are checked per task.
            const id = p.next.fetchAdd(1, .monotonic);
            if (id >= p.tasks) return;
            if (task(p.gpa, id) != expected(id)) _ = p.wrong.fetchAdd(1, .monotonic);
        }
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    var pool: Pool = .{ .gpa = gpa, .tasks = o.scaled(6000) };
    if (builtin.single_threaded or o.threads == 1) {
        pool.worker();
    } else {
        var threads: [64]std.Thread = undefined;
        const n = @min(o.threads, threads.len);
        for (threads[0..n]) |*t| t.* = common.spawn(Pool.worker, .{&pool});
        for (threads[0..n]) |t| t.join();
    }
    common.check(pool.wrong.load(.monotonic) == 0, "symmetric: every task's sums");
}
