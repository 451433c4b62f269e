//! Tests that need a process of their own: out of memory under a lowered
//! address-space limit, and fork while other threads allocate.
const std = @import("std");
const builtin = @import("builtin");
const kennel = @import("kennel");
const util = @import("util.zig");
const linux = std.os.linux;

const gpa = kennel.allocator;

/// Runs `body` in a child process; the test passes if it exits with 0.
/// Linux only (skipped elsewhere).
fn inChild(comptime body: fn () anyerror!void) !void {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const rc = if (builtin.link_libc) @as(isize, std.c.fork()) else @as(isize, @bitCast(linux.fork()));
    if (rc < 0 or (!builtin.link_libc and linux.errno(@as(usize, @bitCast(rc))) != .SUCCESS)) return error.SkipZigTest;
    if (rc == 0) {
        const code: u8 = if (body()) 0 else |err| code: {
            std.debug.print("child: {s}\n", .{@errorName(err)});
            break :code 1;
        };
        linux.exit_group(code);
    }
    var status: i32 = 0;
    while (true) {
        const w = linux.wait4(@intCast(rc), &status, 0, null);
        if (linux.errno(w) == .INTR) continue;
        try std.testing.expectEqual(linux.E.SUCCESS, linux.errno(w));
        break;
    }
    try std.testing.expect(linux.W.IFEXITED(@bitCast(status)));
    try std.testing.expectEqual(@as(u8, 0), linux.W.EXITSTATUS(@bitCast(status)));
}

fn sleepMilliseconds(ms: u32) void {
    var ts: linux.timespec = .{ .sec = 0, .nsec = @as(isize, ms) * std.time.ns_per_ms };
    _ = linux.nanosleep(&ts, &ts);
}

/// Current size of the address space, from /proc/self/statm.
fn addressSpaceBytes() !usize {
    const fd_rc = linux.openat(linux.AT.FDCWD, "/proc/self/statm", .{}, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return error.TestCannotReadStatm;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var buf: [128]u8 = undefined;
    const n = linux.read(fd, &buf, buf.len);
    if (linux.errno(n) != .SUCCESS) return error.TestCannotReadStatm;
    var it = std.mem.tokenizeScalar(u8, buf[0..n], ' ');
    const pages = try std.fmt.parseInt(usize, it.next().?, 10);
    return pages * std.heap.pageSize();
}

fn limitAddressSpace(bytes: usize) !void {
    const limit: linux.rlimit = .{ .cur = bytes, .max = bytes };
    if (linux.errno(linux.setrlimit(.AS, &limit)) != .SUCCESS) return error.TestCannotSetLimit;
}

/// A small block: 128 bytes. (With 16, filling the headroom twice took 2
/// million allocations a fill, 34 s of the hardened Debug suite.)
const Node = struct { next: ?*Node, pad: [120]u8 };

fn fillUntilOutOfMemory(comptime T: type) !struct { ?*T, usize } {
    var chain: ?*T = null;
    var count: usize = 0;
    while (true) {
        const node = gpa.create(T) catch |err| {
            try std.testing.expectEqual(error.OutOfMemory, err);
            return .{ chain, count };
        };
        node.next = chain;
        chain = node;
        count += 1;
    }
}

fn freeChain(comptime T: type, chain: ?*T) void {
    var it = chain;
    while (it) |node| {
        it = node.next;
        gpa.destroy(node);
    }
}

fn outOfMemoryChild() !void {
    const headroom = 64 * 1024 * 1024;
    // A heap keeps empty segments mapped for reuse: after the frees below
    // they still take address space, so the limit leaves room for them
    // beside the headroom.
    const spares_bytes = kennel.layout.spare_segments_max * kennel.layout.segment_bytes;
    try limitAddressSpace(try addressSpaceBytes() + headroom + spares_bytes);

    // Small blocks until the OS says no: error.OutOfMemory, no crash.
    const chain, const count = try fillUntilOutOfMemory(Node);
    try std.testing.expect(count > 1000);
    // Every size fails cleanly while memory is exhausted.
    for ([_]usize{ 16, 5000, 100_000, 2 << 20, headroom }) |len| {
        if (gpa.alloc(u8, len)) |block| gpa.free(block) else |err| try std.testing.expectEqual(error.OutOfMemory, err);
    }
    // All allocator state stayed consistent: free everything, then the same
    // memory serves again, small and huge.
    freeChain(Node, chain);
    kennel.releaseThreadMemory();
    const big = try gpa.alloc(u8, headroom / 2);
    @memset(big, 1);
    gpa.free(big);
    const again, const count_again = try fillUntilOutOfMemory(Node);
    try std.testing.expect(count_again * 2 > count);
    freeChain(Node, again);

    // Huge blocks until failure, then recovery.
    const Huge = struct { next: ?*@This(), pad: [3 << 20]u8 };
    const huge_chain, const huge_count = try fillUntilOutOfMemory(Huge);
    try std.testing.expect(huge_count >= 4);
    freeChain(Huge, huge_chain);
    const block = try gpa.alloc(u8, 100);
    gpa.free(block);
}

test "out of memory: allocation fails with error.OutOfMemory and recovers after frees" {
    // RLIMIT_AS would limit qemu's own address space, not the program's.
    if (util.under_qemu) return error.SkipZigTest;
    try inChild(outOfMemoryChild);
}

const Spinner = struct {
    stop: std.atomic.Value(bool) = .init(false),

    fn run(s: *Spinner) void {
        var blocks: [64]?[]u8 = @splat(null);
        var i: usize = 0;
        // Monotonic: a stop flag.
        while (!s.stop.load(.monotonic)) : (i += 1) {
            const slot = &blocks[i % blocks.len];
            if (slot.*) |b| gpa.free(b);
            slot.* = gpa.alloc(u8, 1 + i % 3000) catch null;
        }
        for (blocks) |b| if (b) |block| gpa.free(block);
    }
};

fn afterForkChild() !void {
    // The parent's other threads do not exist here; their heaps must not be
    // mistaken for free ones, and nothing may wait on them.
    var threads: [4]std.Thread = undefined;
    for (&threads) |*t| t.* = try std.Thread.spawn(.{}, churnInChild, .{});
    for (threads) |t| t.join();
    const block = try gpa.alloc(u8, 12345);
    gpa.free(block);
}

fn churnInChild() void {
    for (0..20_000) |i| {
        const b = gpa.alloc(u8, 1 + i % 5000) catch @panic("child out of memory");
        @memset(b, 0xab);
        gpa.free(b);
    }
}

test "fork while another thread allocates: the child allocates from new threads" {
    // qemu-user 7.2 aborts on its own assertions in such a child.
    if (builtin.single_threaded or util.under_qemu) return error.SkipZigTest;
    var spinner: Spinner = .{};
    const t = try std.Thread.spawn(.{}, Spinner.run, .{&spinner});
    defer t.join();
    defer spinner.stop.store(true, .monotonic);
    // Let the spinner get going, then fork a few times mid-flight.
    for (0..4) |_| {
        sleepMilliseconds(5);
        try inChild(afterForkChild);
    }
}
