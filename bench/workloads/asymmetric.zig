//! Asymmetric: one thread allocates formatted strings, another frees them.
//! Every block is freed by a thread that did not allocate it.
const std = @import("std");
const common = @import("../common.zig");

const Ring = common.SpscRing([]u8, 1024);

const Consumer = struct {
    ring: *Ring,
    gpa: std.mem.Allocator,
    expected: usize,
    sum: u64 = 0,

    fn run(c: *Consumer) void {
        var received: usize = 0;
        var spins: usize = 0;
        while (received < c.expected) {
            const s = c.ring.pop() orelse {
                common.backoff(&spins);
                continue;
            };
            common.check(std.mem.startsWith(u8, s, "message "), "asymmetric: message intact");
            c.sum += s.len;
            c.gpa.free(s);
            received += 1;
        }
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const count = o.scaled(3_000_000);
    const ring = std.heap.page_allocator.create(Ring) catch common.oom();
    defer std.heap.page_allocator.destroy(ring);
    ring.* = .{};
    var consumer: Consumer = .{ .ring = ring, .gpa = gpa, .expected = count };
    const t = common.spawn(Consumer.run, .{&consumer});
    var sum: u64 = 0;
    for (0..count) |i| {
        const s = std.fmt.allocPrint(gpa, "message {d} from the producer, {s}", .{ i, "with some text" }) catch common.oom();
        sum += s.len;
        ring.push(s);
    }
    t.join();
    common.check(sum == consumer.sum, "asymmetric: bytes received equal bytes sent");
}
