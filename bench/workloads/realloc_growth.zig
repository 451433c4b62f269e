//! Realloc growth: several lists grown by appending, side by side, until
//! each holds 100 MB. Growth goes through `remap`, so an allocator that can
//! grow in place or move pages without copying wins.
const std = @import("std");
const common = @import("../common.zig");

const list_count = 4;

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const items_per_list = o.scaled(100_000_000) / @sizeOf(u64);
    var lists: [list_count]std.ArrayList(u64) = @splat(.empty);
    for (0..items_per_list) |i| {
        for (&lists, 0..) |*list, l| list.append(gpa, i * list_count + l) catch common.oom();
    }
    for (&lists, 0..) |*list, l| {
        common.check(list.items.len == items_per_list, "realloc: list length");
        var i: usize = 0;
        while (i < list.items.len) : (i += 4099) {
            common.check(list.items[i] == i * list_count + l, "realloc: contents survived every move");
        }
        list.deinit(gpa);
    }
}
