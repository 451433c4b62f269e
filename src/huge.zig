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
//!
//! A freed huge mapping goes to the freeing thread's heap cache (if it fits)
//! instead of back to the OS: a program that frees and allocates big blocks
//! in a loop then pays neither mmap nor page faults. Cached mappings count
//! as the heap's free memory and are unmapped by its purge (after the purge
//! delay, or at once past the cap).
//!
//! With guard pages (config.hardening.guard_pages), a freed mapping goes
//! straight back to the OS, so a use after free faults, and the mapping
//! ends in an inaccessible page right after the block's last page:
//!
//!   [header | padding | block | guard]
//!
//! The guard is part of `huge_mapping_bytes`. It is in the way of growing
//! in place, so growing always moves (mremap, no copy).
const std = @import("std");
const assert = std.debug.assert;
const os = @import("os.zig");
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const segment_size_bytes = segment_mod.segment_size_bytes;
const Heap = @import("heap.zig").Heap;
const thread = @import("thread.zig");
const config = @import("config.zig");

/// Cached mappings per heap.
pub const cache_count_max = 8;
/// Mappings larger than this are unmapped when freed: touching them anew
/// costs far more than mapping them.
pub const cache_entry_bytes_max = 64 * 1024 * 1024;

/// Freed huge mappings of one heap, most recent last.
pub const Cache = struct {
    entries: [cache_count_max]*Segment = undefined,
    len: usize = 0,
    /// Sum of the entries' mapping lengths.
    bytes: usize = 0,

    /// A cached mapping of at least `total` bytes and at most a quarter
    /// more, most recently freed first.
    fn take(cache: *Cache, total: usize) ?*Segment {
        var i = cache.len;
        while (i > 0) {
            i -= 1;
            const segment = cache.entries[i];
            const bytes = segment.huge_mapping_bytes;
            if (bytes >= total and bytes - total <= total / 4) {
                std.mem.copyForwards(*Segment, cache.entries[i .. cache.len - 1], cache.entries[i + 1 .. cache.len]);
                cache.len -= 1;
                cache.bytes -= bytes;
                return segment;
            }
        }
        return null;
    }

    /// Adds a freed mapping, unmapping the oldest entry when full.
    /// Returns the change in cached bytes.
    fn put(cache: *Cache, segment: *Segment) isize {
        var change: isize = @intCast(segment.huge_mapping_bytes);
        if (cache.len == cache_count_max) {
            const oldest = cache.entries[0];
            change -= @intCast(oldest.huge_mapping_bytes);
            cache.bytes -= oldest.huge_mapping_bytes;
            std.mem.copyForwards(*Segment, cache.entries[0 .. cache.len - 1], cache.entries[1..cache.len]);
            cache.len -= 1;
            unmap(oldest);
        }
        cache.entries[cache.len] = segment;
        cache.len += 1;
        cache.bytes += segment.huge_mapping_bytes;
        return change;
    }

    /// Unmaps the oldest entries until at least `wanted` bytes are gone (or
    /// the cache is empty). Returns the bytes unmapped.
    pub fn release(cache: *Cache, wanted: usize) usize {
        var released: usize = 0;
        var kept: usize = 0;
        for (cache.entries[0..cache.len]) |segment| {
            if (released < wanted) {
                released += segment.huge_mapping_bytes;
                unmap(segment);
            } else {
                cache.entries[kept] = segment;
                kept += 1;
            }
        }
        cache.len = kept;
        cache.bytes -= released;
        return released;
    }

    /// Moves `other`'s entries here (absorbing a heap). Returns the bytes
    /// unmapped because this cache was full.
    pub fn takeAll(cache: *Cache, other: *Cache) usize {
        var unmapped: usize = 0;
        for (other.entries[0..other.len]) |segment| {
            const change = cache.put(segment);
            unmapped += segment.huge_mapping_bytes - @as(usize, @intCast(change));
        }
        other.* = .{};
        return unmapped;
    }
};

/// Huge blocks would all start at the same offset from a segment-aligned
/// base, so the same low address bits: a program writing several of them in
/// step (appending to lists side by side) stalls on 4K aliasing and fights
/// over the same cache sets. Each block therefore starts a "color" further
/// in, a multiple of 64 bytes below 4 KiB that keeps its alignment, taken in
/// turn per heap. Costs at most one kernel page of address space.
const color_step_bytes = 64;
const color_count = 4096 / color_step_bytes;

fn blockOffset(alignment: usize, color: usize) usize {
    if (alignment > segment_size_bytes) return segment_size_bytes;
    const base = @max(Segment.metadata_bytes, alignment);
    if (alignment >= 4096) return base;
    // A multiple of both the step and the alignment, below 4 KiB.
    const step = @max(alignment, color_step_bytes);
    return base + (color * step) % 4096;
}

/// Where the mapping must start: aligned to at least a segment, and such
/// that the block (at blockOffset) gets its alignment.
fn mapAlignment(alignment: usize) usize {
    return @max(alignment, segment_size_bytes);
}

fn mapOffset(alignment: usize) usize {
    return if (alignment > segment_size_bytes) segment_size_bytes else 0;
}

pub fn alloc(heap: *Heap, len: usize, alignment: usize) ?[*]u8 {
    return allocMaybeZeroed(heap, len, alignment, false);
}

/// `alloc` with the first `len` bytes zero (calloc).
pub fn allocZeroed(heap: *Heap, len: usize, alignment: usize) ?[*]u8 {
    return allocMaybeZeroed(heap, len, alignment, true);
}

fn allocMaybeZeroed(heap: *Heap, len: usize, alignment: usize, comptime zeroed: bool) ?[*]u8 {
    assert(len > 0);
    heap.huge_color = (heap.huge_color + 1) % color_count;
    const offset = blockOffset(alignment, heap.huge_color);
    const total = std.math.add(usize, offset, len) catch return null;
    if (alignment <= segment_size_bytes and !config.hardening.guard_pages) {
        if (heap.huge_cache.take(total)) |segment| {
            heap.dirty_bytes -= segment.huge_mapping_bytes;
            const block = setHeader(segment, segment.huge_mapping_bytes, offset, alignment);
            if (zeroed) @memset(block[0..len], 0);
            return block;
        }
    }
    const mapping = mappingBytes(total) orelse return null;
    const base = mapGuarded(mapping, alignment) orelse return null;
    if (!segment_mod.segment_map.add(@ptrCast(base))) {
        os.unmap(base, mapping);
        return null;
    }
    return setHeader(@ptrCast(base), mapping, offset, alignment);
}

/// The length of a mapping whose header and block take `total` bytes:
/// whole kernel pages, and the guard page when hardened.
fn mappingBytes(total: usize) ?usize {
    const pages = os.pageAlignForward(total) orelse return null;
    return std.math.add(usize, pages, segment_mod.guardBytes()) catch null;
}

/// Maps `mapping` bytes for a block of `alignment`, its last page a guard
/// when hardened.
fn mapGuarded(mapping: usize, alignment: usize) ?[*]align(os.page_size_min_bytes) u8 {
    const base = os.map(mapping, mapAlignment(alignment), mapOffset(alignment)) orelse return null;
    const guard = segment_mod.guardBytes();
    if (guard > 0 and !os.protectNone(base + mapping - guard, guard)) {
        os.unmap(base, mapping);
        return null;
    }
    return base;
}

fn setHeader(segment: *Segment, mapping_bytes: usize, offset: usize, alignment: usize) [*]u8 {
    const base: [*]u8 = @ptrCast(segment);
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
    segment.huge_mapping_bytes = mapping_bytes;
    segment.huge_block_offset = offset;
    segment.huge_alignment = alignment;
    segment.pages[0] = .{ .area = base + offset, .used = 1, .capacity = 1, .reserved = 1 };
    const block = base + offset;
    assert(Segment.ofPtr(block) == segment);
    assert(@intFromPtr(block) % alignment == 0);
    return block;
}

/// Frees a huge block, from any thread: into the calling thread's cache
/// when it fits, else back to the OS.
pub fn free(segment: *Segment) void {
    assert(segment.kind == .huge);
    const heap = thread.current();
    if (config.hardening.guard_pages or heap == &Heap.empty or segment.huge_mapping_bytes > cache_entry_bytes_max or
        segment.huge_alignment > segment_size_bytes) return unmap(segment);
    // Monotonic: a cached mapping holds no live block (statistics read it).
    @atomicStore(u32, &segment.pages[0].used, 0, .monotonic);
    const change = heap.huge_cache.put(segment);
    if (change >= 0) heap.dirty_bytes += @intCast(change) else heap.dirty_bytes -= @intCast(-change);
    heap.dirtyGrew();
}

fn unmap(segment: *Segment) void {
    segment_mod.segment_map.remove(segment);
    os.unmap(@ptrCast(@alignCast(segment)), segment.huge_mapping_bytes);
}

pub fn usableSize(segment: *Segment) usize {
    assert(segment.kind == .huge);
    return segment.huge_mapping_bytes - segment_mod.guardBytes() - segment.huge_block_offset;
}

pub fn resizeInPlace(segment: *Segment, new_len: usize) bool {
    assert(segment.kind == .huge);
    const total = std.math.add(usize, segment.huge_block_offset, new_len) catch return false;
    const mapping = mappingBytes(total) orelse return false;
    const guard = segment_mod.guardBytes();
    const base: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(segment));
    if (guard > 0) {
        // The guard is in the way of growing; shrinking moves it down.
        if (mapping > segment.huge_mapping_bytes) return false;
        if (mapping == segment.huge_mapping_bytes) return true;
        if (!os.protectNone(base + mapping - guard, guard)) return false;
    }
    if (!os.remapInPlace(base, segment.huge_mapping_bytes, mapping)) return false;
    segment.huge_mapping_bytes = mapping;
    return true;
}

/// Resizes, moving the mapping when it cannot grow in place.
pub fn remap(segment: *Segment, new_len: usize) ?[*]u8 {
    assert(segment.kind == .huge);
    const offset = segment.huge_block_offset;
    if (resizeInPlace(segment, new_len)) return @as([*]u8, @ptrCast(segment)) + offset;
    const total = std.math.add(usize, offset, new_len) catch return null;
    const mapping = mappingBytes(total) orelse return null;
    const alignment = segment.huge_alignment;
    const guard = segment_mod.guardBytes();
    // Reserve the destination and record it in the segment map before any
    // page moves, so that failing leaves the block where it was.
    const dest = mapGuarded(mapping, alignment) orelse return null;
    if (!segment_mod.segment_map.add(@ptrCast(dest))) {
        os.unmap(dest, mapping);
        return null;
    }
    // Out of the map before the move: the move unmaps the old range, and
    // another thread may map a segment there at once and record it; clearing
    // the bit after that would erase the newcomer's entry.
    segment_mod.segment_map.remove(segment);
    const old: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(segment));
    const old_mapping = segment.huge_mapping_bytes;
    // Only the accessible part moves; the destination keeps its own guard.
    if (!os.moveInto(old, old_mapping - guard, dest, mapping - guard)) {
        // Its leaf exists, so adding it back cannot fail.
        const restored = segment_mod.segment_map.add(segment);
        assert(restored);
        segment_mod.segment_map.remove(@ptrCast(dest));
        os.unmap(dest, mapping);
        return null;
    }
    if (guard > 0) os.unmap(@alignCast(old + old_mapping - guard), guard);
    const base: [*]u8 = dest;
    const moved: *Segment = @ptrCast(dest);
    moved.huge_mapping_bytes = mapping;
    moved.pages[0].area = base + offset;
    assert(Segment.ofPtr(base + offset) == moved);
    return base + offset;
}
