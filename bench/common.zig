//! What every workload shares: output of metrics, clocks, RSS, checks, and
//! small thread-safe queues built on a spin lock (std's blocking primitives
//! need an Io instance; spinning with yield is enough for a benchmark and
//! costs every allocator the same).
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;

pub const Options = struct {
    /// Worker threads, usually one per core.
    threads: usize,
    /// Multiplies the amount of work (QUICK=1 uses a fraction).
    scale: f64,
    /// A directory the workload reads its input from (frontend: .zig files).
    input: ?[:0]const u8 = null,

    pub fn scaled(o: Options, n: usize) usize {
        return @max(1, @as(usize, @intFromFloat(@as(f64, @floatFromInt(n)) * o.scale)));
    }
};

/// Writes a formatted line to stdout, unbuffered.
pub fn print(comptime fmt: []const u8, args: anytype) void {
    var buf: [1024]u8 = undefined;
    const line = std.fmt.bufPrint(&buf, fmt ++ "\n", args) catch return;
    var done: usize = 0;
    while (done < line.len) {
        const rc = linux.write(1, line.ptr + done, line.len - done);
        if (linux.errno(rc) != .SUCCESS) return;
        done += rc;
    }
}

/// A result the driver collects: `metric <name> <value> <unit>`.
pub fn metric(name: []const u8, value: f64, unit: []const u8) void {
    print("metric {s} {d:.3} {s}", .{ name, value, unit });
}

/// A workload that computed a wrong result fails loudly.
pub fn check(ok: bool, comptime what: []const u8) void {
    if (ok) return;
    std.debug.print("CHECK FAILED: " ++ what ++ "\n", .{});
    std.process.exit(3);
}

pub fn oom() noreturn {
    std.debug.print("out of memory\n", .{});
    std.process.exit(4);
}

/// Through the C library where one is linked: std.os.linux reaches the
/// vDSO only when Zig's own start code found it, so with libc its
/// clock_gettime is a system call (size-sweep made 126,000 of them under
/// glibc, about 2 ns per small pair that kennel's binary did not pay).
pub fn nowNanoseconds() u64 {
    var ts: linux.timespec = undefined;
    if (builtin.link_libc) {
        _ = std.c.clock_gettime(.MONOTONIC, &ts);
    } else {
        _ = linux.clock_gettime(.MONOTONIC, &ts);
    }
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

pub fn sleepMilliseconds(ms: u64) void {
    var ts: linux.timespec = .{ .sec = @intCast(ms / 1000), .nsec = @intCast((ms % 1000) * std.time.ns_per_ms) };
    _ = linux.nanosleep(&ts, &ts);
}

/// Resident set size now, from /proc/self/statm.
pub fn residentBytes() usize {
    const fd_rc = linux.openat(linux.AT.FDCWD, "/proc/self/statm", .{}, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return 0;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var buf: [128]u8 = undefined;
    const n = linux.read(fd, &buf, buf.len);
    if (linux.errno(n) != .SUCCESS) return 0;
    var it = std.mem.tokenizeScalar(u8, buf[0..n], ' ');
    _ = it.next();
    const pages = std.fmt.parseInt(usize, it.next() orelse return 0, 10) catch return 0;
    return pages * std.heap.pageSize();
}

/// Peak resident set size of this process (VmHWM in /proc/self/status).
/// The driver cannot use wait4's ru_maxrss: Linux carries it across execve,
/// so it would include the driver's own size at fork.
pub fn peakResidentBytes() usize {
    const fd_rc = linux.openat(linux.AT.FDCWD, "/proc/self/status", .{}, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return 0;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var buf: [4096]u8 = undefined;
    var len: usize = 0;
    while (len < buf.len) {
        const n = linux.read(fd, buf[len..].ptr, buf.len - len);
        if (linux.errno(n) != .SUCCESS or n == 0) break;
        len += n;
    }
    var lines = std.mem.tokenizeScalar(u8, buf[0..len], '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, "VmHWM:")) continue;
        var fields = std.mem.tokenizeAny(u8, line["VmHWM:".len..], " \t");
        const kb = std.fmt.parseInt(usize, fields.next() orelse return 0, 10) catch return 0;
        return kb * 1024;
    }
    return 0;
}

pub fn spawn(function: anytype, args: anytype) std.Thread {
    if (builtin.single_threaded) @compileError("no threads in a single-threaded build");
    return std.Thread.spawn(.{ .stack_size = 1 << 20 }, function, args) catch |err| {
        std.debug.print("cannot spawn a thread: {s}\n", .{@errorName(err)});
        std.process.exit(5);
    };
}

pub const SpinLock = struct {
    inner: std.atomic.Mutex = .unlocked,

    pub fn lock(l: *SpinLock) void {
        var spins: usize = 0;
        while (!l.inner.tryLock()) : (spins += 1) {
            if (spins % 32 == 31) _ = linux.sched_yield() else std.atomic.spinLoopHint();
        }
    }

    pub fn unlock(l: *SpinLock) void {
        l.inner.unlock();
    }
};

/// Waits politely: spins briefly, then yields the core.
pub fn backoff(spins: *usize) void {
    spins.* += 1;
    if (spins.* % 16 == 0) _ = linux.sched_yield() else std.atomic.spinLoopHint();
}

/// A bounded queue for many producers and consumers.
pub fn Queue(comptime T: type, comptime capacity: usize) type {
    return struct {
        const Self = @This();
        lock: SpinLock = .{},
        items: [capacity]T = undefined,
        head: usize = 0,
        len: usize = 0,

        pub fn tryPush(q: *Self, item: T) bool {
            q.lock.lock();
            defer q.lock.unlock();
            if (q.len == capacity) return false;
            q.items[(q.head + q.len) % capacity] = item;
            q.len += 1;
            return true;
        }

        pub fn push(q: *Self, item: T) void {
            var spins: usize = 0;
            while (!q.tryPush(item)) backoff(&spins);
        }

        pub fn tryPop(q: *Self) ?T {
            q.lock.lock();
            defer q.lock.unlock();
            if (q.len == 0) return null;
            const item = q.items[q.head];
            q.head = (q.head + 1) % capacity;
            q.len -= 1;
            return item;
        }
    };
}

/// A bounded queue for one producer and one consumer, without a lock.
pub fn SpscRing(comptime T: type, comptime capacity: usize) type {
    return struct {
        const Self = @This();
        items: [capacity]T = undefined,
        head: std.atomic.Value(usize) align(std.atomic.cache_line) = .init(0),
        tail: std.atomic.Value(usize) align(std.atomic.cache_line) = .init(0),

        pub fn push(r: *Self, item: T) void {
            // Monotonic: only this thread writes tail.
            const tail = r.tail.load(.monotonic);
            var spins: usize = 0;
            // Acquire: the consumer is done with the slot it released.
            while (tail - r.head.load(.acquire) == capacity) backoff(&spins);
            r.items[tail % capacity] = item;
            // Release: publishes the item.
            r.tail.store(tail + 1, .release);
        }

        pub fn pop(r: *Self) ?T {
            // Monotonic: only this thread writes head.
            const head = r.head.load(.monotonic);
            // Acquire: pairs with the producer's release.
            if (head == r.tail.load(.acquire)) return null;
            const item = r.items[head % capacity];
            // Release: the slot may be reused.
            r.head.store(head + 1, .release);
            return item;
        }
    };
}
