//! Size sweep: single-thread alloc/free pairs at each size class from 8 B to
//! 1 MiB and at huge sizes, reported in nanoseconds per pair; first freeing
//! at once (LIFO), then with a window of live blocks so frees are not LIFO.
//! Every block is touched, so an allocator cannot win by never mapping.
//!
//! Each size runs its nominal number of pairs or for `size_budget_ns`,
//! whichever ends first, so that an allocator that maps and unmaps every
//! block cannot stretch the run to minutes. The workload's time is then
//! reported as `projected_time`: the nominal pairs at the measured cost,
//! which the driver uses in place of the wall time.
const std = @import("std");
const common = @import("../common.zig");

/// The sizes swept: 8-byte steps to 128, eight steps per power of two to
/// 1 MiB, then huge sizes.
fn sizes(buffer: []usize) []usize {
    var n: usize = 0;
    var size: usize = 8;
    while (size <= 128) : (size += 8) {
        buffer[n] = size;
        n += 1;
    }
    var base: usize = 128;
    while (base < 1 << 20) : (base *= 2) {
        for (1..9) |j| {
            buffer[n] = base + j * base / 8;
            n += 1;
        }
    }
    for ([_]usize{ 2 << 20, 4 << 20, 8 << 20, 16 << 20 }) |huge| {
        buffer[n] = huge;
        n += 1;
    }
    return buffer[0..n];
}

const window = 64;

/// Longest time one size (one of its two loops) may run.
const size_budget_ns = 20 * std.time.ns_per_ms;

/// Runs `body(i)` for i in 0..pairs, stopping early when the budget is
/// spent; returns the pairs done.
fn timed(pairs: usize, context: anytype, comptime body: fn (@TypeOf(context), usize) void) usize {
    const start = common.nowNanoseconds();
    var i: usize = 0;
    while (i < pairs) : (i += 1) {
        body(context, i);
        if (i % 64 == 63 and common.nowNanoseconds() - start > size_budget_ns) return i + 1;
    }
    return pairs;
}

/// Pairs per size: enough for small sizes to take a few ms, fewer for
/// large ones (whose cost is mostly touching memory).
fn pairsFor(size: usize, o: common.Options) usize {
    const base: usize = if (size <= 1024) 200_000 else if (size <= 65536) 40_000 else if (size <= 1 << 20) 4_000 else 400;
    return o.scaled(base);
}

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    var buffer: [256]usize = undefined;
    var lifo_total: f64 = 0;
    var window_total: f64 = 0;
    var projected_ns: f64 = 0;
    var name: [64]u8 = undefined;
    for (sizes(&buffer)) |size| {
        const pairs = pairsFor(size, o);
        // LIFO: allocate, touch, free.
        const Lifo = struct {
            gpa: std.mem.Allocator,
            size: usize,
            fn pair(c: @This(), i: usize) void {
                const block = c.gpa.alloc(u8, c.size) catch common.oom();
                block[0] = @truncate(i);
                block[c.size - 1] = @truncate(i);
                std.mem.doNotOptimizeAway(block.ptr);
                c.gpa.free(block);
            }
        };
        var t0 = common.nowNanoseconds();
        const lifo_pairs = timed(pairs, Lifo{ .gpa = gpa, .size = size }, Lifo.pair);
        const lifo = @as(f64, @floatFromInt(common.nowNanoseconds() - t0)) / @as(f64, @floatFromInt(lifo_pairs));
        // Window: free the block allocated `window` pairs ago.
        const Window = struct {
            gpa: std.mem.Allocator,
            size: usize,
            live: *[window]?[]u8,
            fn pair(c: @This(), i: usize) void {
                const slot = &c.live[i % window];
                if (slot.*) |old| {
                    common.check(old[0] == @as(u8, @truncate(i -% window)), "size sweep: block intact");
                    c.gpa.free(old);
                }
                const block = c.gpa.alloc(u8, c.size) catch common.oom();
                block[0] = @truncate(i);
                block[c.size - 1] = @truncate(i);
                slot.* = block;
            }
        };
        var live: [window]?[]u8 = @splat(null);
        t0 = common.nowNanoseconds();
        const window_pairs = timed(pairs, Window{ .gpa = gpa, .size = size, .live = &live }, Window.pair);
        for (live) |b| if (b) |block| gpa.free(block);
        const windowed = @as(f64, @floatFromInt(common.nowNanoseconds() - t0)) / @as(f64, @floatFromInt(window_pairs));
        projected_ns += (lifo + windowed) * @as(f64, @floatFromInt(pairs));
        common.metric(std.fmt.bufPrint(&name, "lifo_{d}", .{size}) catch unreachable, lifo, "ns");
        common.metric(std.fmt.bufPrint(&name, "window_{d}", .{size}) catch unreachable, windowed, "ns");
        lifo_total += lifo;
        window_total += windowed;
    }
    const count: f64 = @floatFromInt(sizes(&buffer).len);
    common.metric("lifo_mean", lifo_total / count, "ns");
    common.metric("window_mean", window_total / count, "ns");
    common.metric("projected_time", projected_ns / 1e9, "s");
}

/// For the instruction-count mode: `pairs` LIFO pairs at each size of one
/// group (small, medium, large), nothing else.
pub fn instructionRun(gpa: std.mem.Allocator, group: []const u8, pairs: usize) void {
    var buffer: [256]usize = undefined;
    var total: usize = 0;
    defer common.metric("pairs", @floatFromInt(total), "");
    for (sizes(&buffer)) |size| {
        const in_group = if (std.mem.eql(u8, group, "small"))
            size <= 1024
        else if (std.mem.eql(u8, group, "medium"))
            size > 1024 and size <= 65536
        else
            size > 65536 and size <= 1 << 20;
        if (!in_group) continue;
        total += pairs;
        for (0..pairs) |i| {
            const block = gpa.alloc(u8, size) catch common.oom();
            block[0] = @truncate(i);
            std.mem.doNotOptimizeAway(block.ptr);
            gpa.free(block);
        }
    }
}
