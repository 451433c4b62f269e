//! One benchmark process: `bench-<allocator> <workload> [--threads N]
//! [--scale X] [--input DIR]`. The driver (run.py) runs it, measures wall time and peak
//! RSS from the outside, and reads the `metric` lines it prints.
const std = @import("std");
const builtin = @import("builtin");
const common = @import("common.zig");
const allocators = @import("allocators.zig");

pub const std_options: std.Options = .{ .signal_stack_size = null };

const threaded = !builtin.single_threaded;

const workloads = .{
    .{ "symmetric", @import("workloads/symmetric.zig") },
    .{ "size-sweep", @import("workloads/size_sweep.zig") },
} ++ (if (threaded) .{
    .{ "asymmetric", @import("workloads/asymmetric.zig") },
    .{ "mpsc", @import("workloads/mpsc.zig") },
    .{ "larson", @import("workloads/larson.zig") },
    .{ "xmalloc", @import("workloads/xmalloc.zig") },
    .{ "cache-scratch", @import("workloads/cache_scratch.zig") },
    .{ "thread-churn", @import("workloads/thread_churn.zig") },
    .{ "frontend", @import("workloads/frontend.zig") },
} else .{}) ++ .{
    .{ "realloc-growth", @import("workloads/realloc_growth.zig") },
    .{ "fragmentation", @import("workloads/fragmentation.zig") },
};

fn usage() noreturn {
    std.debug.print("usage: bench-{s} <workload> [--threads N] [--scale X] [--input DIR]\n       bench-{s} instr <small|medium|large> <pairs>\nworkloads:", .{ allocators.name, allocators.name });
    inline for (workloads) |w| std.debug.print(" {s}", .{w[0]});
    std.debug.print("\n", .{});
    std.process.exit(2);
}

pub fn main(init: std.process.Init.Minimal) void {
    var args = init.args.iterate();
    _ = args.next();
    const workload = args.next() orelse usage();
    var options: common.Options = .{
        .threads = if (threaded) std.Thread.getCpuCount() catch 2 else 1,
        .scale = 1.0,
    };
    if (std.mem.eql(u8, workload, "instr")) {
        const group = args.next() orelse usage();
        const pairs = std.fmt.parseInt(usize, args.next() orelse usage(), 10) catch usage();
        @import("workloads/size_sweep.zig").instructionRun(allocators.allocator, group, pairs);
        return;
    }
    while (args.next()) |arg| {
        const value = args.next() orelse usage();
        if (std.mem.eql(u8, arg, "--threads")) {
            options.threads = std.fmt.parseInt(usize, value, 10) catch usage();
        } else if (std.mem.eql(u8, arg, "--scale")) {
            options.scale = std.fmt.parseFloat(f64, value) catch usage();
        } else if (std.mem.eql(u8, arg, "--input")) {
            options.input = value;
        } else usage();
    }
    inline for (workloads) |w| {
        if (std.mem.eql(u8, workload, w[0])) {
            const t0 = common.nowNanoseconds();
            w[1].run(allocators.allocator, options);
            common.metric("inner_time", @as(f64, @floatFromInt(common.nowNanoseconds() - t0)) / 1e9, "s");
            common.metric("peak_rss", @floatFromInt(common.peakResidentBytes()), "bytes");
            return;
        }
    }
    usage();
}
