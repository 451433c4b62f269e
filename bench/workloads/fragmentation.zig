//! Fragmentation: allocate a large live set of mixed small sizes, free 90%
//! of it at random, then allocate as many bytes again in other (larger)
//! sizes. Reports the resident set over the live bytes at the end; peak
//! RSS comes from the driver.
const std = @import("std");
const common = @import("../common.zig");

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const count = o.scaled(600_000);
    // Bookkeeping outside the allocator under test.
    const blocks = std.heap.page_allocator.alloc([]u8, count) catch common.oom();
    defer std.heap.page_allocator.free(blocks);
    var prng = std.Random.DefaultPrng.init(42);
    const random = prng.random();

    var live_bytes: usize = 0;
    for (blocks) |*b| {
        b.* = gpa.alloc(u8, random.intRangeAtMost(usize, 16, 1024)) catch common.oom();
        @memset(b.*, 0x11);
        live_bytes += b.len;
    }
    // Free 90% at random.
    random.shuffle([]u8, blocks);
    const kept = count / 10;
    var freed_bytes: usize = 0;
    for (blocks[kept..]) |b| {
        freed_bytes += b.len;
        gpa.free(b);
    }
    live_bytes -= freed_bytes;
    // As many bytes again, in sizes the freed blocks cannot serve as is.
    var others: std.ArrayList([]u8) = .empty;
    defer others.deinit(std.heap.page_allocator);
    var new_bytes: usize = 0;
    while (new_bytes < freed_bytes) {
        const b = gpa.alloc(u8, random.intRangeAtMost(usize, 1025, 8192)) catch common.oom();
        @memset(b, 0x22);
        others.append(std.heap.page_allocator, b) catch common.oom();
        new_bytes += b.len;
    }
    live_bytes += new_bytes;
    const rss = common.residentBytes();
    common.metric("live", @as(f64, @floatFromInt(live_bytes)) / 1e6, "MB");
    common.metric("rss_end", @as(f64, @floatFromInt(rss)) / 1e6, "MB");
    common.metric("rss_over_live", @as(f64, @floatFromInt(rss)) / @as(f64, @floatFromInt(live_bytes)), "x");
    for (blocks[0..kept]) |b| {
        common.check(b[0] == 0x11 and b[b.len - 1] == 0x11, "fragmentation: old block intact");
        gpa.free(b);
    }
    for (others.items) |b| {
        common.check(b[0] == 0x22 and b[b.len - 1] == 0x22, "fragmentation: new block intact");
        gpa.free(b);
    }
}
