//! Huge allocations: anything above the largest size class (1 MiB), or
//! aligned beyond what a page can offer, gets a mapping of its own.
//!
//! The mapping starts with a segment header (kind `huge`, no owner), so the
//! usual `Segment.ofPtr` finds it from the block pointer and `free` works
//! from any thread without a lock. Layout:
//!
//!   alignment <= 4 MiB:  [header | padding to max(8 KiB, alignment) | block]
//!                        the mapping starts on a segment boundary
//!   alignment  > 4 MiB:  [header | padding to 4 MiB | block]
//!                        the block is aligned, the header one segment before
//!
//! Only the header's first kernel page and the block's pages are touched.
//! Resizing grows or shrinks the mapping in place; `remap` may also move it
//! with mremap, which moves pages without copying them.
const std = @import("std");
const assert = std.debug.assert;
const os = @import("os.zig");
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const segment_size_bytes = segment_mod.segment_size_bytes;

fn blockOffset(alignment: usize) usize {
    return if (alignment > segment_size_bytes) segment_size_bytes else @max(Segment.header_bytes, alignment);
}

/// Where the mapping must start: aligned to at least a segment, and such
/// that the block (at blockOffset) gets its alignment.
fn mapAlignment(alignment: usize) usize {
    return @max(alignment, segment_size_bytes);
}

fn mapOffset(alignment: usize) usize {
    return if (alignment > segment_size_bytes) segment_size_bytes else 0;
}

pub fn alloc(len: usize, alignment: usize) ?[*]u8 {
    assert(len > 0);
    const offset = blockOffset(alignment);
    const total = std.math.add(usize, offset, len) catch return null;
    const base = os.map(total, mapAlignment(alignment), mapOffset(alignment)) orelse return null;
    const segment: *Segment = @ptrCast(base);
    // Field by field, not `segment.* = ...`: that would write (and make
    // resident) the whole page array of the header.
    segment.owner = .init(null);
    segment.page_notice = .init(0);
    segment.kind = .huge;
    segment.page_shift = 63;
    segment.page_count = 1;
    segment.free_mask = 0;
    segment.dirty_mask = 0;
    segment.all = .{};
    segment.with_free = .{};
    segment.in_with_free = false;
    segment.huge_mapping_bytes = os.pageAlignForward(total).?;
    segment.huge_block_offset = offset;
    segment.huge_alignment = alignment;
    segment.pages[0] = .{ .area = base + offset, .used = 1, .capacity = 1, .reserved = 1 };
    const block = base + offset;
    assert(Segment.ofPtr(block) == segment);
    assert(@intFromPtr(block) % alignment == 0);
    return block;
}

pub fn free(segment: *Segment) void {
    assert(segment.kind == .huge);
    os.unmap(@ptrCast(@alignCast(segment)), segment.huge_mapping_bytes);
}

pub fn usableSize(segment: *Segment) usize {
    assert(segment.kind == .huge);
    return segment.huge_mapping_bytes - segment.huge_block_offset;
}

pub fn resizeInPlace(segment: *Segment, new_len: usize) bool {
    assert(segment.kind == .huge);
    const total = std.math.add(usize, segment.huge_block_offset, new_len) catch return false;
    if (!os.remapInPlace(@ptrCast(@alignCast(segment)), segment.huge_mapping_bytes, total)) return false;
    segment.huge_mapping_bytes = os.pageAlignForward(total).?;
    return true;
}

/// Resizes, moving the mapping when it cannot grow in place.
pub fn remap(segment: *Segment, new_len: usize) ?[*]u8 {
    assert(segment.kind == .huge);
    const offset = segment.huge_block_offset;
    if (resizeInPlace(segment, new_len)) return @as([*]u8, @ptrCast(segment)) + offset;
    const total = std.math.add(usize, offset, new_len) catch return null;
    const alignment = segment.huge_alignment;
    const base = os.remapMove(@ptrCast(@alignCast(segment)), segment.huge_mapping_bytes, total, mapAlignment(alignment), mapOffset(alignment)) orelse return null;
    const moved: *Segment = @ptrCast(base);
    moved.huge_mapping_bytes = os.pageAlignForward(total).?;
    moved.pages[0].area = base + offset;
    assert(Segment.ofPtr(base + offset) == moved);
    return base + offset;
}
