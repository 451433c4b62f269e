//! `bench-launch <program> [args...]`: runs a program and prints its wall
//! time, peak RSS and what it cost the kernel, on stderr:
//! `launch <seconds> <peak RSS bytes> <wait status> <user seconds>
//! <system seconds> <minor page faults>` (the last three from wait4's
//! rusage, which covers all the program's threads).
//!
//! Linux carries ru_maxrss across execve, so a child forked from a large
//! process (the Python driver) reports at least that process's size. This
//! launcher is a few hundred KiB, so the peak it reports is the program's.
const std = @import("std");
const linux = std.os.linux;

pub const std_options: std.Options = .{ .signal_stack_size = null };

fn now() u64 {
    var ts: linux.timespec = undefined;
    _ = linux.clock_gettime(.MONOTONIC, &ts);
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

fn secondsOf(t: linux.timeval) f64 {
    return @as(f64, @floatFromInt(t.sec)) + @as(f64, @floatFromInt(t.usec)) / 1e6;
}

pub fn main(init: std.process.Init.Minimal) u8 {
    const argv = init.args.vector;
    if (argv.len < 2) {
        std.debug.print("usage: bench-launch <program> [args...]\n", .{});
        return 2;
    }
    const start = now();
    const pid = linux.fork();
    if (linux.errno(pid) != .SUCCESS) return 3;
    if (pid == 0) {
        // execvpe-like: the driver passes absolute paths or PATH names.
        const envp: [*:null]const ?[*:0]const u8 = @ptrCast(std.c.environ);
        const program = argv[1];
        const args: [*:null]const ?[*:0]const u8 = @ptrCast(argv.ptr + 1);
        _ = linux.execve(program, args, envp);
        linux.exit_group(127);
    }
    var status: i32 = 0;
    var usage: linux.rusage = undefined;
    while (true) {
        const rc = linux.wait4(@intCast(pid), &status, 0, &usage);
        if (linux.errno(rc) == .INTR) continue;
        break;
    }
    const seconds = @as(f64, @floatFromInt(now() - start)) / 1e9;
    std.debug.print("launch {d:.4} {d} {d} {d:.4} {d:.4} {d}\n", .{
        seconds,
        @as(u64, @intCast(usage.maxrss)) * 1024,
        status,
        secondsOf(usage.utime),
        secondsOf(usage.stime),
        usage.minflt,
    });
    return if (linux.W.IFEXITED(@bitCast(status))) linux.W.EXITSTATUS(@bitCast(status)) else 1;
}
