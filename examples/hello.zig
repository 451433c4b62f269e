//! A program that uses nothing but std and kennel, as a new user's would:
//! build it for any target with `zig build example -Dtarget=...`.
const std = @import("std");
const builtin = @import("builtin");
const kennel = @import("kennel");

/// Builds a list, a map and a string with kennel.allocator and checks them;
/// returns 0 when everything added up.
fn run() u32 {
    const gpa = kennel.allocator;
    var list: std.ArrayList(u64) = .empty;
    defer list.deinit(gpa);
    for (0..100_000) |i| list.append(gpa, i) catch return 1;
    var sum: u64 = 0;
    for (list.items) |v| sum += v;
    if (sum != 100_000 * 99_999 / 2) return 2;

    var map: std.AutoHashMapUnmanaged(u32, u32) = .empty;
    defer map.deinit(gpa);
    for (0..1000) |i| map.put(gpa, @intCast(i), @intCast(i * i)) catch return 3;
    if (map.get(999) != 999 * 999) return 4;

    const text = std.fmt.allocPrint(gpa, "{d} items, sum {d}", .{ list.items.len, sum }) catch return 5;
    defer gpa.free(text);
    return if (std.mem.startsWith(u8, text, "100000 items")) 0 else 6;
}

/// wasm32-freestanding has no start code: the host calls this.
export fn kennel_example_run() u32 {
    return run();
}

pub fn main() u8 {
    return @intCast(run());
}
