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
//! A freed huge mapping goes to the freeing thread's heap cache instead of
//! back to the OS, and a new huge block of any size may be built from it
//! (`Cache.assemble`): the smallest cached mapping that holds the block
//! serves it, and what it has beyond the block is split off (moved with
//! mremap, no copy) and stays cached; when every cached mapping is
//! smaller, the largest grows, in place or moving, and only the growth is
//! fresh memory. So a program that replaces large buffers of varying sizes
//! touches new memory only where a buffer outgrows the one it replaces.
//! Cached mappings count as the heap's free memory and go back to the OS
//! under the purge policy (purge.zig). Every mapping stays one kernel VMA:
//! mremap cannot move or grow a range made of several, so pages of two
//! cached mappings are never combined into one block.
//!
//! Huge mappings ask for transparent huge pages (os.adviseHugePages) while
//! the program writes its huge blocks whole: then one fault per 2 MiB costs
//! far less than 512. A block touched only in part would hold up to a huge
//! page more than it touched, so the first free of a fresh mapping that did
//! not ask looks at how much of its block is resident (one mincore), and a
//! process-wide score decides (`touch_score`): blocks written whole raise
//! it, sparse ones lower it twice as fast. It starts at "no": a program
//! shows first how it uses its huge blocks.
//!
//! With guard pages (config.hardening.guard_pages), a freed mapping goes
//! straight back to the OS, so a use after free faults, and the mapping
//! ends in an inaccessible page right after the block's last page.
//! The guard is part of `huge_mapping_bytes`. It is in the way of growing
//! in place, so growing always moves (mremap, no copy). A second guard, the
//! kernel page right after the header, stops a run of writes below the
//! block before it reaches the header:
//!
//!   [header | guard | padding | block | guard]
//!
//! Where pages cannot move (os.can_move is false: everywhere but Linux), a
//! block that cannot grow in place is copied by the caller (`remap` says
//! no), the cache serves a block only from a mapping that holds it or grows
//! in place, and the excess of a cached mapping is unmapped (shrunk) rather
//! than split off.
const std = @import("std");
const assert = std.debug.assert;
const os = @import("os.zig");
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const segment_size_bytes = segment_mod.segment_size_bytes;
const Heap = @import("heap.zig").Heap;
const thread = @import("thread.zig");
const pool = @import("pool.zig");
const config = @import("config.zig");
const purge = @import("purge.zig");

/// Cached mappings per heap.
pub const cache_count_max = 16;
/// A cached mapping may serve a block with up to this fraction (1/n) of it
/// to spare: the excess stays with the block (its usable size grows) rather
/// than being split off.
const slack_divisor = 8;
/// An excess above the slack is split off as a cached mapping of its own
/// when at least this big; a smaller one goes back to the OS (moving it
/// costs system calls that touching it anew would not repay).
const split_min_bytes = 1024 * 1024;

/// A mapping built from cached pages (Cache.assemble).
const Assembled = struct { segment: *Segment, reused: usize };

/// Freed huge mappings of one heap, oldest first. Owner only.
pub const Cache = struct {
    entries: [cache_count_max]*Segment = undefined,
    len: usize = 0,
    /// Sum of the entries' mapping lengths: all of it counts as touched.
    bytes: usize = 0,

    fn removeAt(cache: *Cache, i: usize) *Segment {
        assert(i < cache.len);
        const segment = cache.entries[i];
        std.mem.copyForwards(*Segment, cache.entries[i .. cache.len - 1], cache.entries[i + 1 .. cache.len]);
        cache.len -= 1;
        cache.bytes -= segment.huge_mapping_bytes;
        return segment;
    }

    /// Index of the smallest entry of at least `bytes`, else of the
    /// largest entry; null when empty.
    fn bestFit(cache: *const Cache, bytes: usize) ?usize {
        var fit: ?usize = null;
        var largest: ?usize = null;
        for (cache.entries[0..cache.len], 0..) |segment, i| {
            const m = segment.huge_mapping_bytes;
            if (m >= bytes and (fit == null or m < cache.entries[fit.?].huge_mapping_bytes)) fit = i;
            if (largest == null or m > cache.entries[largest.?].huge_mapping_bytes) largest = i;
        }
        return fit orelse largest;
    }

    /// Adds a freed mapping (its header already says so), unmapping the
    /// oldest entry when full.
    fn put(cache: *Cache, segment: *Segment) void {
        assert(segment.kind == .huge and segment.pages[0].used == 0);
        if (cache.len == cache_count_max) unmap(cache.removeAt(0));
        cache.entries[cache.len] = segment;
        cache.len += 1;
        cache.bytes += segment.huge_mapping_bytes;
    }

    /// A mapping of `mapping` bytes (a page multiple) made of cached pages,
    /// aligned to a segment, its header not yet written; null when the
    /// cache is empty or the kernel refuses a step (the cache then keeps
    /// what it had, or returns it to the OS, never loses track of it).
    /// `reused` is how many bytes from its start may hold old data; the
    /// rest is fresh and reads as zeroes.
    fn assemble(cache: *Cache, mapping: usize) ?Assembled {
        const index = cache.bestFit(mapping) orelse return null;
        const segment = cache.removeAt(index);
        const have = segment.huge_mapping_bytes;
        if (have >= mapping) {
            cache.trim(segment, mapping);
            return .{ .segment = segment, .reused = segment.huge_mapping_bytes };
        }
        const base: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(segment));
        var grown: *Segment = segment;
        if (os.remapInPlace(base, have, mapping)) {
            segment.huge_mapping_bytes = mapping;
            purge.touched(mapping - have);
        } else if (!os.can_move) {
            // Copying old pages would cost what touching fresh ones does.
            return cache.giveBack(segment);
        } else {
            // Move it to a reservation of the full length: mremap moves the
            // pages without copying and leaves the rest fresh.
            const dest = pool.map(mapping, segment_size_bytes, 0) orelse return cache.giveBack(segment);
            if (!segment_mod.segment_map.add(@ptrCast(dest))) {
                os.unmap(dest, mapping);
                return cache.giveBack(segment);
            }
            // Out of the map before the pages move (see `remap`).
            segment_mod.segment_map.remove(segment);
            if (!os.moveInto(base, have, dest, mapping)) {
                segment_mod.segment_map.remove(@ptrCast(dest));
                os.unmap(dest, mapping);
                return cache.giveBack(restore(segment));
            }
            grown = @ptrCast(dest);
            grown.huge_mapping_bytes = mapping;
            purge.touched(mapping - have);
        }
        return .{ .segment = grown, .reused = have };
    }

    /// Puts back a mapping `assemble` took (the kernel refused a step).
    fn giveBack(cache: *Cache, segment: *Segment) ?Assembled {
        cache.put(segment);
        return null;
    }

    /// Cuts a mapping taken from the cache down to `mapping` bytes, unless
    /// the excess is slack: an excess worth keeping is split off as a cached
    /// mapping of its own, a smaller one is unmapped.
    fn trim(cache: *Cache, segment: *Segment, mapping: usize) void {
        const have = segment.huge_mapping_bytes;
        assert(have >= mapping);
        const excess = have - mapping;
        if (excess <= mapping / slack_divisor) return;
        const base: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(segment));
        if (os.can_move and excess >= split_min_bytes and cache.len < cache_count_max) split: {
            const dest = os.map(excess, segment_size_bytes, 0) orelse break :split;
            if (!segment_mod.segment_map.add(@ptrCast(dest))) {
                os.unmap(dest, excess);
                break :split;
            }
            if (!os.moveInto(@alignCast(base + mapping), excess, dest, excess)) {
                segment_mod.segment_map.remove(@ptrCast(dest));
                os.unmap(dest, excess);
                break :split;
            }
            segment.huge_mapping_bytes = mapping;
            const tail: *Segment = @ptrCast(dest);
            writeCachedHeader(tail, excess);
            tail.freed_period = segment.freed_period;
            cache.put(tail);
            return;
        }
        // Shrinking a mapping only unmaps its tail: it cannot fail.
        const shrunk = os.remapInPlace(base, have, mapping);
        assert(shrunk);
        segment.huge_mapping_bytes = mapping;
        purge.untouched(excess);
    }

    /// Unmaps the oldest entries until at least `wanted` bytes are gone (or
    /// none is left); the last one may only shrink. With `before`, only
    /// entries cached in earlier decay periods than that one. Returns the
    /// bytes released.
    pub fn release(cache: *Cache, wanted: usize, before: ?u32) usize {
        var released: usize = 0;
        var i: usize = 0;
        // Each step removes entry i or moves past it.
        while (released < wanted and i < cache.len) {
            const entry = cache.entries[i];
            if (before) |period| if (entry.freed_period == period) {
                i += 1;
                continue;
            };
            const bytes = entry.huge_mapping_bytes;
            const short = wanted - released;
            if (bytes > short + split_min_bytes) {
                // Shrink it by what is still wanted, in whole pages.
                const keep = std.mem.alignForward(usize, bytes - short, os.pageSize());
                const base: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(entry));
                if (keep < bytes and os.remapInPlace(base, bytes, keep)) {
                    entry.huge_mapping_bytes = keep;
                    purge.untouched(bytes - keep);
                    cache.bytes -= bytes - keep;
                    released += bytes - keep;
                }
                break;
            }
            unmap(cache.removeAt(i));
            released += bytes;
        }
        return released;
    }

    /// Moves `other`'s entries here (absorbing a heap), oldest first,
    /// stamped cold (`period`): their thread ended.
    pub fn takeAll(cache: *Cache, other: *Cache, period: u32) void {
        for (other.entries[0..other.len]) |segment| {
            segment.freed_period = period;
            cache.put(segment);
        }
        other.* = .{};
    }
};

/// A mapping whose move failed went back where it was: list it again.
fn restore(segment: *Segment) *Segment {
    // Its leaf exists, so adding it back cannot fail.
    const restored = segment_mod.segment_map.add(segment);
    assert(restored);
    return segment;
}

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
    const header_end = if (headerGuardOffset()) |offset| offset + segment_mod.guardBytes() else Segment.metadata_bytes;
    const base = std.mem.alignForward(usize, header_end, alignment);
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

/// The touch score: huge pages are asked for while it is positive. It
/// rises by one per freed block that was resident to at least 7/8, up to
/// this, and falls by two per sparser one. Only blocks of mappings that did
/// not ask for huge pages count (one that did is resident by whole huge
/// pages, touched or not), so while the score is positive every
/// `touch_probe_interval`th fresh mapping asks for none, as a probe.
const touch_score_max = 4;
var touch_score: std.atomic.Value(i8) = .init(0);
const touch_probe_interval = 4;
var touch_probe: std.atomic.Value(u8) = .init(0);

/// Whether the program writes its huge blocks whole, as far as we know.
fn writesWhole() bool {
    // Monotonic: a hint.
    return touch_score.load(.monotonic) > 0;
}

/// Whether a fresh mapping of `mapping` bytes should ask for huge pages.
fn wantsHugePages(mapping: usize) bool {
    if (mapping < os.huge_page_bytes or !writesWhole()) return false;
    // Monotonic, a load and a store: a hint (this is a slow path).
    const probe = touch_probe.load(.monotonic) +% 1;
    touch_probe.store(probe, .monotonic);
    return probe % touch_probe_interval != 0;
}

/// The first free of a fresh mapping: how much of its block was touched.
fn scoreTouch(segment: *Segment) void {
    segment.huge_fresh = false;
    const block_start = std.mem.alignBackward(usize, segment.huge_block_offset, os.pageSize());
    const base: [*]u8 = @ptrCast(segment);
    const seen = os.residentPages(@alignCast(base + block_start), segment.huge_mapping_bytes - block_start) orelse return;
    const dense = seen.resident * 8 >= seen.total * 7;
    // Monotonic, and a load then a store rather than a read-modify-write: a
    // hint, where a lost update between two frees costs nothing.
    const score = touch_score.load(.monotonic);
    touch_score.store(if (dense) @min(touch_score_max, score + 1) else @max(-touch_score_max, score - 2), .monotonic);
}

fn allocMaybeZeroed(heap: *Heap, len: usize, alignment: usize, comptime zeroed: bool) ?[*]u8 {
    assert(len > 0);
    heap.huge_color = (heap.huge_color + 1) % color_count;
    const offset = blockOffset(alignment, heap.huge_color);
    const total = std.math.add(usize, offset, len) catch return null;
    const mapping = mappingBytes(total) orelse return null;
    if (cacheable(alignment)) {
        const before = heap.huge_cache.bytes;
        const assembled = heap.huge_cache.assemble(mapping);
        heap.cacheChanged(before);
        if (assembled) |a| {
            purge.makeRoom(heap, a.segment.huge_mapping_bytes -| a.reused);
            // A mapping from before the program showed that it writes huge
            // blocks whole: its fresh and purged parts fault in huge pages
            // from now on (the whole mapping, so it stays one VMA).
            if (!a.segment.huge_advised and a.segment.huge_mapping_bytes >= os.huge_page_bytes and writesWhole()) {
                os.adviseHugePages(@ptrCast(a.segment), a.segment.huge_mapping_bytes);
                a.segment.huge_advised = true;
            }
            const block = setHeader(a.segment, a.segment.huge_mapping_bytes, offset, alignment);
            // Only the part made of old pages needs clearing.
            if (zeroed) @memset(block[0..@min(len, a.reused -| offset)], 0);
            return block;
        }
    }
    purge.makeRoom(heap, mapping);
    const base = mapGuarded(mapping, alignment) orelse return null;
    const thp = wantsHugePages(mapping);
    if (thp) os.adviseHugePages(base, mapping);
    if (!segment_mod.segment_map.add(@ptrCast(base))) {
        os.unmap(base, mapping);
        return null;
    }
    purge.touched(mapping);
    const block = setHeader(@ptrCast(base), mapping, offset, alignment);
    const segment: *Segment = @ptrCast(base);
    segment.huge_advised = thp;
    // Only blocks that could take huge pages, and did not ask, tell
    // anything by their touch.
    segment.huge_fresh = !thp and os.huge_page_bytes > 0 and mapping >= os.huge_page_bytes;
    return block;
}

/// Whether blocks of `alignment` go through the cache: not when hardened
/// (a freed mapping goes back to the OS, so a use after free faults), nor
/// when aligned beyond a segment (their header is not at the mapping's
/// start).
fn cacheable(alignment: usize) bool {
    return !config.hardening.guard_pages and alignment <= segment_size_bytes;
}

/// The length of a mapping whose header and block take `total` bytes:
/// whole kernel pages, and the guard page when hardened.
fn mappingBytes(total: usize) ?usize {
    const pages = os.pageAlignForward(total) orelse return null;
    return std.math.add(usize, pages, segment_mod.guardBytes()) catch null;
}

/// With guard pages: the offset of the guard between a huge mapping's header
/// and its block (the first kernel page after the header), so that a run of
/// writes below the block faults before it reaches the header.
pub fn headerGuardOffset() ?usize {
    const guard = segment_mod.guardBytes();
    if (guard == 0) return null;
    return std.mem.alignForward(usize, Segment.metadata_bytes, guard);
}

/// Maps `mapping` bytes for a block of `alignment`, its last page a guard
/// when hardened, and the page after its header another.
fn mapGuarded(mapping: usize, alignment: usize) ?[*]align(os.page_size_min_bytes) u8 {
    const base = pool.map(mapping, mapAlignment(alignment), mapOffset(alignment)) orelse return null;
    const guard = segment_mod.guardBytes();
    if (guard > 0 and !(os.protectNone(base + mapping - guard, guard) and os.protectNone(base + headerGuardOffset().?, guard))) {
        os.unmap(base, mapping);
        return null;
    }
    return base;
}

fn setHeader(segment: *Segment, mapping_bytes: usize, offset: usize, alignment: usize) [*]u8 {
    const base: [*]u8 = @ptrCast(segment);
    writeHeader(segment, mapping_bytes);
    segment.huge_block_offset = offset;
    segment.huge_alignment = alignment;
    segment.pages[0] = .{ .area = base + offset, .used = 1, .capacity = 1, .reserved = 1 };
    const block = base + offset;
    assert(Segment.ofPtr(block) == segment);
    assert(@intFromPtr(block) % alignment == 0);
    return block;
}

/// The header of a cached mapping split off another one.
fn writeCachedHeader(segment: *Segment, mapping_bytes: usize) void {
    writeHeader(segment, mapping_bytes);
    segment.huge_advised = false;
    segment.huge_block_offset = Segment.metadata_bytes;
    segment.huge_alignment = 1;
    segment.pages[0] = .{ .area = @as([*]u8, @ptrCast(segment)) + Segment.metadata_bytes, .used = 0, .capacity = 1, .reserved = 1 };
}

fn writeHeader(segment: *Segment, mapping_bytes: usize) void {
    // Field by field, not `segment.* = ...`: that would write (and make
    // resident) the whole page array of the header.
    segment.owner = .init(null);
    segment.page_notice = .empty;
    segment.kind = .huge;
    segment.page_shift = segment_mod.huge_page_shift;
    segment.page_count = 1;
    segment.free_mask = 0;
    segment.resident_mask = 0;
    segment.guards_closed = 0;
    segment.all = .{};
    segment.with_free = .{};
    segment.with_run = .{};
    segment.in_with_free = false;
    segment.in_with_run = false;
    segment.huge_mapping_bytes = mapping_bytes;
    segment.huge_fresh = false;
}

/// Frees a huge block, from any thread: into the calling thread's cache
/// when it may go there, else back to the OS.
pub fn free(segment: *Segment) void {
    assert(segment.kind == .huge);
    if (segment.huge_fresh) scoreTouch(segment);
    const heap = thread.current();
    if (heap == &Heap.empty or !cacheable(segment.huge_alignment)) return unmap(segment);
    // Monotonic: a cached mapping holds no live block (statistics read it).
    @atomicStore(@import("page.zig").BlockCount, &segment.pages[0].used, 0, .monotonic);
    segment.freed_period = heap.period_index;
    const before = heap.huge_cache.bytes;
    heap.huge_cache.put(segment);
    heap.cacheChanged(before);
}

fn unmap(segment: *Segment) void {
    purge.untouched(segment.huge_mapping_bytes);
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
    const old_mapping = segment.huge_mapping_bytes;
    if (!os.remapInPlace(base, old_mapping, mapping)) return false;
    segment.huge_mapping_bytes = mapping;
    resized(old_mapping, mapping);
    return true;
}

/// Resizes, moving the mapping when it cannot grow in place.
pub fn remap(segment: *Segment, new_len: usize) ?[*]u8 {
    assert(segment.kind == .huge);
    const offset = segment.huge_block_offset;
    const guard = segment_mod.guardBytes();
    const old_mapping = segment.huge_mapping_bytes;
    if (resizeInPlace(segment, new_len)) {
        grew(segment, old_mapping - guard);
        return @as([*]u8, @ptrCast(segment)) + offset;
    }
    // Without moving pages, the caller's copy is what a move would be.
    if (!os.can_move) return null;
    const total = std.math.add(usize, offset, new_len) catch return null;
    const mapping = mappingBytes(total) orelse return null;
    const alignment = segment.huge_alignment;
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
    // Only the accessible part moves; the destination keeps its own end
    // guard. A move takes one kernel mapping (VMA): the header guard opens
    // for it, and closes again wherever the pages end up.
    const header_guard = headerGuardOffset();
    const opened = if (header_guard) |at| os.protectReadWrite(old + at, guard) else true;
    if (!opened or !os.moveInto(old, old_mapping - guard, dest, mapping - guard)) {
        if (opened) if (header_guard) |at| closeGuard(old + at);
        _ = restore(segment);
        segment_mod.segment_map.remove(@ptrCast(dest));
        os.unmap(dest, mapping);
        return null;
    }
    if (header_guard) |at| closeGuard(dest + at);
    if (guard > 0) os.unmap(@alignCast(old + old_mapping - guard), guard);
    const base: [*]u8 = dest;
    const moved: *Segment = @ptrCast(dest);
    moved.huge_mapping_bytes = mapping;
    resized(old_mapping, mapping);
    moved.pages[0].area = base + offset;
    assert(Segment.ofPtr(base + offset) == moved);
    grew(moved, old_mapping - guard);
    return base + offset;
}

/// Makes a header guard opened for a move inaccessible again. It was
/// inaccessible before, so the system can split the mapping there again;
/// if it ever refuses, the block loses that guard, not its memory.
fn closeGuard(address: [*]u8) void {
    _ = os.protectNone(address, segment_mod.guardBytes());
}

/// A mapping went from `from` to `to` bytes: the footprint follows.
fn resized(from: usize, to: usize) void {
    if (to > from) purge.touched(to - from) else purge.untouched(from - to);
}

/// A block grew from `from` bytes of mapping: the growth is fresh memory.
fn grew(segment: *Segment, from: usize) void {
    const to = segment.huge_mapping_bytes;
    const heap = thread.current();
    if (to <= from or heap == &Heap.empty) return;
    purge.makeRoom(heap, to - from);
}

test "a freed huge mapping past the budget waits for the next huge block" {
    if (!cacheable(1) or !os.can_move) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const mib = 1024 * 1024;
    // Freed, it takes the free memory past the budget but not past
    // `budget_hard_factor` budgets (about 2.5 budgets), and the free memory
    // of other heaps stays within the budget.
    const len = @max(10 * mib, os.mappedBytes() / 3);
    const block = try gpa.alloc(u8, len);
    @memset(block, 1);
    const after_free = purge.totalBytes() + Segment.ofPtr(block.ptr).huge_mapping_bytes;
    const budget = purge.budgetBytes();
    if (after_free <= budget or after_free > budget * purge.budget_hard_factor) return error.SkipZigTest;
    if (purge.totalBytes() -| thread.current().dirty_bytes > budget) return error.SkipZigTest;
    gpa.free(block);
    // A little smaller: built from the freed mapping, whose pages were
    // not given back in between. (Given back, a cached mapping shrinks from
    // its end: the new block's last pages tell.)
    // (rawAlloc: in safe builds `alloc` writes the whole block.)
    const next = (gpa.rawAlloc(len - mib, .@"1", @returnAddress()) orelse return error.OutOfMemory)[0 .. len - mib];
    defer gpa.rawFree(next, .@"1", @returnAddress());
    const tail_bytes = @min(256 * os.pageSize(), mib);
    const tail = std.mem.alignBackward(usize, @intFromPtr(next.ptr) + next.len - tail_bytes, os.pageSize());
    const seen = os.residentPages(@ptrFromInt(tail), tail_bytes) orelse return error.SkipZigTest;
    try std.testing.expectEqual(seen.total, seen.resident);
}
