//! Helpers shared by the tests: the size of the run, a spin lock (std's
//! blocking locks need an Io instance), block patterns, random sizes and
//! alignments, and what the system can tell about the process.
const std = @import("std");
const builtin = @import("builtin");
const Alignment = std.mem.Alignment;

/// True in the quick (Debug) configurations, where loops run fewer times.
pub const slow_build = builtin.mode == .debug;

/// The one place that sizes an emulated run (qemu, wine, a WASI runtime:
/// build option -Dtest-reduced, on by default for a target other than the
/// host's): loops and thread counts divided by `reduced_divisor`.
pub const reduced = @import("test_options").reduced;
pub const reduced_divisor = 10;

/// What runs the tests: "none" (natively), "qemu", "wine" or "wasmtime".
pub const emulator = @import("test_options").emulator;
/// Under qemu-user the process is the emulator: its resident set and
/// address space hold qemu's own memory, and fork in a process with other
/// threads trips qemu's own assertions (qemu 7.2).
pub const under_qemu = std.mem.eql(u8, emulator, "qemu");

/// `full` iterations (or threads), fewer in a reduced run.
pub fn scaled(full: usize) usize {
    return if (reduced) @max(1, full / reduced_divisor) else full;
}

pub const SpinLock = struct {
    inner: std.atomic.Mutex = .unlocked,

    pub fn lock(l: *SpinLock) void {
        var spins: usize = 0;
        while (!l.inner.tryLock()) : (spins += 1) backOff(spins);
    }

    pub fn unlock(l: *SpinLock) void {
        l.inner.unlock();
    }
};

/// One step of a wait for another thread: a pause, and every 64th time
/// the processor given up. Spinning alone starves the awaited thread when
/// runnable threads outnumber cores (make test runs several test binaries
/// and compilers at once): a producer spinning on a full queue took 22 s
/// instead of 0.7 s that way.
pub fn backOff(spins: usize) void {
    if (spins % 64 == 63) std.Thread.yield() catch {} else std.atomic.spinLoopHint();
}

extern "kernel32" fn Sleep(milliseconds: u32) callconv(.winapi) void;

pub fn sleepMilliseconds(ms: u64) void {
    switch (builtin.os.tag) {
        .linux => {
            var ts: std.os.linux.timespec = .{ .sec = @intCast(ms / 1000), .nsec = @intCast((ms % 1000) * std.time.ns_per_ms) };
            _ = std.os.linux.nanosleep(&ts, &ts);
        },
        .windows => Sleep(@intCast(ms)),
        else => {
            var ts: std.c.timespec = .{ .sec = @intCast(ms / 1000), .nsec = @intCast((ms % 1000) * std.time.ns_per_ms) };
            _ = std.c.nanosleep(&ts, &ts);
        },
    }
}

/// Byte `i` of the pattern of a block with `seed`.
inline fn patternByte(seed: u64, i: usize) u8 {
    return @truncate((seed +% i) *% 0x9E37_79B9_7F4A_7C15 >> 56);
}

/// Bytes of a block that carry the pattern: the first and last
/// `edge_bytes` and one byte per stride between them (4 KiB, or 64 KiB in
/// blocks above 1 MiB). Enough to catch overlapping blocks and lost
/// contents, cheap enough for huge blocks.
const edge_bytes = 256;
const stride_bytes = 4096;
const huge_stride_bytes = 64 * 1024;

pub fn fill(block: []u8, seed: u64) void {
    var it = PatternIterator{ .len = block.len };
    while (it.next()) |i| block[i] = patternByte(seed, i);
}

/// Checks the pattern in the first `len` bytes (a prefix of the block as it
/// was filled when it had `filled_len` bytes).
pub fn check(block: []const u8, filled_len: usize, seed: u64) !void {
    var it = PatternIterator{ .len = filled_len };
    while (it.next()) |i| {
        if (i >= block.len) continue;
        if (block[i] != patternByte(seed, i)) {
            std.debug.print("pattern mismatch at byte {d} of a {d}-byte block at {*}\n", .{ i, filled_len, block.ptr });
            return error.TestPatternMismatch;
        }
    }
}

const PatternIterator = struct {
    len: usize,
    i: usize = 0,

    fn next(it: *PatternIterator) ?usize {
        if (it.i >= it.len) return null;
        const i = it.i;
        if (i + 1 < edge_bytes or i + 1 >= it.len -| edge_bytes) {
            it.i += 1;
        } else {
            // Jump through the middle, then to the tail edge.
            const stride: usize = if (it.len > 1 << 20) huge_stride_bytes else stride_bytes;
            it.i = @min(i + stride, it.len -| edge_bytes);
            if (it.i <= i) it.i = i + 1;
        }
        return i;
    }
};

const ProcessMemoryCounters = extern struct {
    cb: u32,
    page_fault_count: u32,
    peak_working_set_size: usize,
    working_set_size: usize,
    quota_peak_paged_pool_usage: usize,
    quota_paged_pool_usage: usize,
    quota_peak_non_paged_pool_usage: usize,
    quota_non_paged_pool_usage: usize,
    pagefile_usage: usize,
    peak_pagefile_usage: usize,
};
extern "kernel32" fn K32GetProcessMemoryInfo(process: std.os.windows.HANDLE, counters: *ProcessMemoryCounters, size: u32) callconv(.winapi) c_int;

/// Resident set size of this process (Linux: /proc/self/statm; Windows:
/// the working set), or null where the system does not say, or says it
/// for an emulator (qemu).
pub fn residentBytes() ?usize {
    if (under_qemu) return null;
    if (builtin.os.tag == .windows) {
        var counters: ProcessMemoryCounters = undefined;
        counters.cb = @sizeOf(ProcessMemoryCounters);
        if (K32GetProcessMemoryInfo(std.os.windows.GetCurrentProcess(), &counters, counters.cb) == 0) return null;
        return counters.working_set_size;
    }
    if (builtin.os.tag != .linux) return null;
    var buf: [128]u8 = undefined;
    const statm = readSystemFile("/proc/self/statm", &buf) orelse @panic("cannot read /proc/self/statm");
    var it = std.mem.tokenizeScalar(u8, statm, ' ');
    _ = it.next();
    const pages = std.fmt.parseInt(usize, it.next().?, 10) catch @panic("bad /proc/self/statm");
    return pages * std.heap.pageSize();
}

/// The contents of a small Linux system file (up to `buf.len` bytes), or
/// null elsewhere or when it cannot be read.
fn readSystemFile(path: [*:0]const u8, buf: []u8) ?[]const u8 {
    if (builtin.os.tag != .linux) return null;
    const linux = std.os.linux;
    const fd_rc = linux.openat(linux.AT.FDCWD, path, .{}, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return null;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    const n = linux.read(fd, buf.ptr, buf.len);
    if (linux.errno(n) != .SUCCESS) return null;
    return buf[0..n];
}

/// Threads of this process that the kernel still knows (Linux:
/// /proc/self/status; under qemu, the emulator's own threads), or null
/// where the system does not say. A joined thread may still be counted for
/// a moment: the kernel wakes the joiner before the thread is gone, and
/// qemu-user wakes it before its own host thread ends.
pub fn threadCount() ?usize {
    var buf: [4096]u8 = undefined;
    const status = readSystemFile("/proc/self/status", &buf) orelse return null;
    var lines = std.mem.tokenizeScalar(u8, status, '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, "Threads:")) continue;
        return std.fmt.parseInt(usize, std.mem.trim(u8, line["Threads:".len..], " \t"), 10) catch null;
    }
    return null;
}

/// A monotonic clock on every target the tests run on: the runner's.
pub const nowNanoseconds = @import("root").nowNanoseconds;

/// The kernel's limit on mappings per process (vm.max_map_count); its
/// default when it cannot be read.
pub fn mapCountMax() usize {
    const default = 65530;
    var buf: [32]u8 = undefined;
    const text = readSystemFile("/proc/sys/vm/max_map_count", &buf) orelse return default;
    return std.fmt.parseInt(usize, std.mem.trim(u8, text, " \n"), 10) catch default;
}

pub const SizeMix = enum { small, medium, large, huge };

/// A random request size, mostly small, reaching every class and huge sizes.
pub fn randomSize(random: std.Random, huge_max_bytes: usize) usize {
    const roll = random.uintLessThan(u32, 100);
    return if (roll < 60)
        random.intRangeAtMost(usize, 1, 1024)
    else if (roll < 85)
        random.intRangeAtMost(usize, 1025, 64 * 1024)
    else if (roll < 96)
        random.intRangeAtMost(usize, 64 * 1024 + 1, 1024 * 1024)
    else
        random.intRangeAtMost(usize, 1024 * 1024 + 1, huge_max_bytes);
}

/// A random alignment from 1 byte to 1 MiB, mostly natural ones.
pub fn randomAlignment(random: std.Random) Alignment {
    const roll = random.uintLessThan(u32, 100);
    const log2: u8 = if (roll < 70)
        random.uintAtMost(u8, 4)
    else if (roll < 95)
        random.uintAtMost(u8, 12)
    else
        random.intRangeAtMost(u8, 13, 20);
    return @fromBackingInt(@intCast(log2));
}

test "pattern catches a changed byte" {
    var buf: [20000]u8 = undefined;
    fill(&buf, 42);
    try check(&buf, buf.len, 42);
    buf[buf.len - 1] +%= 1;
    try std.testing.expectError(error.TestPatternMismatch, check(&buf, buf.len, 42));
    buf[buf.len - 1] -%= 1;
    buf[edge_bytes - 1 + stride_bytes] +%= 1;
    try std.testing.expectError(error.TestPatternMismatch, check(&buf, buf.len, 42));
}

/// How a child process ended (see `runChild`).
pub const ChildEnd = struct {
    /// Exit code, or null if a signal ended it.
    exit_code: ?u8,
    /// The signal that ended it, if any.
    signal: ?u32,
    /// What it wrote on stderr (the start of it).
    stderr: []const u8,
};

/// Runs `body` in a forked child with stderr captured into `buffer`.
/// Linux only (skipped elsewhere).
pub fn runChild(comptime body: fn () void, buffer: []u8) !ChildEnd {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const linux = std.os.linux;
    var fds: [2]i32 = undefined;
    if (linux.errno(linux.pipe(&fds)) != .SUCCESS) return error.TestCannotPipe;
    const rc = if (builtin.link_libc) @as(isize, std.c.fork()) else @as(isize, @bitCast(linux.fork()));
    if (rc < 0 or (!builtin.link_libc and linux.errno(@as(usize, @bitCast(rc))) != .SUCCESS)) return error.SkipZigTest;
    if (rc == 0) {
        _ = linux.dup2(fds[1], 2);
        _ = linux.close(fds[0]);
        body();
        linux.exit_group(0);
    }
    _ = linux.close(fds[1]);
    var len: usize = 0;
    while (len < buffer.len) {
        const n = linux.read(fds[0], buffer[len..].ptr, buffer.len - len);
        if (linux.errno(n) == .INTR) continue;
        if (linux.errno(n) != .SUCCESS or n == 0) break;
        len += n;
    }
    _ = linux.close(fds[0]);
    var raw_status: i32 = 0;
    while (true) {
        const w = linux.wait4(@intCast(rc), &raw_status, 0, null);
        if (linux.errno(w) == .INTR) continue;
        break;
    }
    const status: u32 = @bitCast(raw_status);
    return .{
        .exit_code = if (linux.W.IFEXITED(status)) linux.W.EXITSTATUS(status) else null,
        .signal = if (linux.W.IFSIGNALED(status)) @backingInt(linux.W.TERMSIG(status)) else null,
        .stderr = buffer[0..len],
    };
}

/// Runs `body` in a child that must abort (SIGABRT, or exit code 134 where
/// kennel ends the process itself) after printing a kennel line that holds
/// `expected`.
pub fn expectAbort(comptime body: fn () void, expected: []const u8) !void {
    var buffer: [4096]u8 = undefined;
    const end = try runChild(body, &buffer);
    const aborted = (end.signal != null and end.signal.? == @backingInt(std.os.linux.SIG.ABRT)) or
        (end.exit_code != null and end.exit_code.? == 134);
    const line = std.mem.indexOf(u8, end.stderr, "kennel: ");
    if (!aborted or line == null or std.mem.indexOf(u8, end.stderr[line.?..], expected) == null) {
        std.debug.print("expected an abort naming \"{s}\"; exit {?d}, signal {?d}, stderr:\n{s}\n", .{ expected, end.exit_code, end.signal, end.stderr });
        return error.TestNotAborted;
    }
}
