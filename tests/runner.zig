//! A plain test runner: runs every test, prints one line per test with its
//! time, and exits non-zero if any failed.
//!
//! Why not the default runner: its std options give every thread a 256 KiB
//! signal stack in thread-local storage, zeroed at each spawn, which made the
//! 10,000-thread churn test spend most of its time in memset. Tests here
//! measure the allocator, not that.
const std = @import("std");
const builtin = @import("builtin");

pub const std_options: std.Options = .{ .signal_stack_size = null };

extern "kernel32" fn GetTickCount64() callconv(.winapi) u64;

/// Also the tests' clock (util.nowNanoseconds): one file cannot belong to both
/// the runner's module and theirs.
pub fn nowNanoseconds() u64 {
    switch (builtin.os.tag) {
        .linux => {
            var ts: std.os.linux.timespec = undefined;
            _ = std.os.linux.clock_gettime(.MONOTONIC, &ts);
            return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
        },
        .windows => return GetTickCount64() * std.time.ns_per_ms,
        .wasi => {
            var now: std.os.wasi.timestamp_t = 0;
            _ = std.os.wasi.clock_time_get(.MONOTONIC, 1, &now);
            return now;
        },
        .freestanding => return 0,
        else => {
            var ts: std.c.timespec = undefined;
            _ = std.c.clock_gettime(.MONOTONIC, &ts);
            return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
        },
    }
}

pub fn main() void {
    var passed: usize = 0;
    var skipped: usize = 0;
    var failed: usize = 0;
    const start = nowNanoseconds();
    for (builtin.test_functions) |t| {
        const t0 = nowNanoseconds();
        const result = t.func();
        const ms = (nowNanoseconds() - t0) / std.time.ns_per_ms;
        if (result) |_| {
            passed += 1;
            std.debug.print("ok    {d:>6} ms  {s}\n", .{ ms, t.name });
        } else |err| switch (err) {
            error.SkipZigTest => {
                skipped += 1;
                std.debug.print("skip  {d:>6} ms  {s}\n", .{ ms, t.name });
            },
            else => {
                failed += 1;
                std.debug.print("FAIL  {d:>6} ms  {s}: {s}\n", .{ ms, t.name, @errorName(err) });
                if (@errorReturnTrace()) |trace| std.debug.dumpErrorReturnTrace(trace);
            },
        }
    }
    std.debug.print("{d} passed, {d} skipped, {d} failed in {d} ms ({s}{s}{s})\n", .{
        passed,                 skipped,                                                  failed,                                  (nowNanoseconds() - start) / std.time.ns_per_ms,
        @tagName(builtin.mode), if (builtin.single_threaded) ", single-threaded" else "", if (builtin.link_libc) ", libc" else "",
    });
    if (failed > 0) std.process.exit(1);
}
