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
//! smaller, the largest grows, in place or moving, and the pages of other
//! cached mappings are moved into the growth (`Cache.donate`), so that
//! only what all of them together lack is fresh memory. A program that
//! replaces large buffers of varying sizes thus touches new memory only
//! where its buffers outgrow what it freed. Cached mappings count as the
//! heap's free memory and go back to the OS under the purge policy
//! (purge.zig). A mapping built of several is several kernel mappings
//! (VMAs), listed in its header (`Pieces`): mremap moves or grows within
//! one VMA only, so such a mapping moves piece by piece and grows at its
//! last piece.
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

/// Kernel mappings (VMAs) one huge mapping may be made of: pieces of other
/// cached mappings moved into it (Cache.donate) add to them.
pub const piece_count_max = 16;
/// Kernel mappings that huge mappings of several pieces add, process-wide,
/// at most: Linux allows a process 65,530 by default, and a mapping it
/// refuses is out of memory for everything, not only for huge blocks.
const pieces_extra_max = 4096;
/// Pieces past the first of every huge mapping (`setPieces`, `unmap`).
var pieces_extra: std.atomic.Value(usize) = .init(0);
/// A cached mapping gives pages to another's block only in runs of at
/// least this: a move costs a few system calls, which touching fewer
/// fresh pages than this would not repay.
const donate_min_bytes = 256 * 1024;

/// The kernel mappings a huge mapping is made of, as their ends (offsets
/// from its start, ascending, the last its length). A fresh mapping is
/// one piece. Pages moved in from other cached mappings (Cache.donate)
/// stay mappings of their own: Linux does not merge them with their new
/// neighbours (seen on 6.18), mremap grows a range only within one
/// mapping, and moves one only within one mapping on the kernels most
/// systems run, so the pieces move one by one (`moveRange`) and a mapping
/// grows in place at its last piece. A recorded boundary where the kernel
/// did merge costs a system call, nothing else.
pub const Pieces = extern struct {
    ends: [piece_count_max]usize = undefined,
    count: usize = 0,

    pub fn one(len: usize) Pieces {
        var pieces: Pieces = .{};
        pieces.ends[0] = len;
        pieces.count = 1;
        return pieces;
    }

    fn start(pieces: *const Pieces, i: usize) usize {
        assert(i < pieces.count);
        return if (i == 0) 0 else pieces.ends[i - 1];
    }

    fn bytes(pieces: *const Pieces) usize {
        assert(pieces.count > 0);
        return pieces.ends[pieces.count - 1];
    }

    fn assertValid(pieces: *const Pieces) void {
        assert(pieces.count > 0 and pieces.count <= piece_count_max);
        for (0..pieces.count) |i| {
            assert(pieces.ends[i] > pieces.start(i));
            assert(pieces.ends[i] % os.pageSize() == 0);
        }
    }

    /// The pieces of [from, to), as offsets from `from`.
    fn slice(pieces: *const Pieces, from: usize, to: usize) Pieces {
        assert(from < to and to <= pieces.bytes());
        var result: Pieces = .{};
        for (0..pieces.count) |i| {
            if (pieces.ends[i] <= from) continue;
            result.ends[result.count] = @min(pieces.ends[i], to) - from;
            result.count += 1;
            if (pieces.ends[i] >= to) break;
        }
        return result;
    }

    /// Cuts the mapping to `new_len` bytes.
    fn truncate(pieces: *Pieces, new_len: usize) void {
        assert(new_len > 0 and new_len <= pieces.bytes());
        var i: usize = 0;
        // Ends below new_len come first; the last end is at least new_len.
        while (pieces.ends[i] < new_len) i += 1;
        pieces.ends[i] = new_len;
        pieces.count = i + 1;
    }

    /// The last piece grew or shrank to end at `new_len`.
    fn setEnd(pieces: *Pieces, new_len: usize) void {
        assert(new_len > pieces.start(pieces.count - 1));
        pieces.ends[pieces.count - 1] = new_len;
    }

    /// `moved`, pages moved onto [at, at + moved.bytes()) of the last piece,
    /// split it there.
    fn insert(pieces: *Pieces, at: usize, moved: Pieces) void {
        const end = pieces.bytes();
        const at_end = at + moved.bytes();
        assert(at >= pieces.start(pieces.count - 1) and at_end <= end);
        assert(pieces.count + moved.count + 1 <= piece_count_max);
        if (at == pieces.start(pieces.count - 1)) pieces.count -= 1 else pieces.ends[pieces.count - 1] = at;
        for (moved.ends[0..moved.count]) |e| {
            pieces.ends[pieces.count] = at + e;
            pieces.count += 1;
        }
        if (at_end < end) {
            pieces.ends[pieces.count] = end;
            pieces.count += 1;
        }
    }
};

/// The pieces of a huge mapping.
fn piecesOf(segment: *const Segment) Pieces {
    return if (segment.huge_pieced) segment.huge_pieces else .one(segment.huge_mapping_bytes);
}

/// Records the pieces of a huge mapping, and so its length (the last end).
fn setPieces(segment: *Segment, pieces: Pieces) void {
    pieces.assertValid();
    const before = piecesOf(segment).count;
    // Monotonic, here and in `unmap`: a bound on a count, ordering nothing.
    if (pieces.count > before) _ = pieces_extra.fetchAdd(pieces.count - before, .monotonic);
    if (pieces.count < before) _ = pieces_extra.fetchSub(before - pieces.count, .monotonic);
    segment.huge_mapping_bytes = pieces.bytes();
    segment.huge_pieced = pieces.count > 1;
    if (pieces.count > 1) segment.huge_pieces = pieces;
}

/// The kernel pages at the start of a cached mapping that hold its header:
/// a mapping giving pages to another keeps them.
fn headerPagesBytes() usize {
    return std.mem.alignForward(usize, Segment.metadata_bytes, os.pageSize());
}

/// Moves the pages of [from, to) of `segment`'s mapping onto `dest`, a
/// mapping of at least `dest_len` bytes made by `map` (or a fresh part of
/// one), without copying, one piece at a time; the last piece's move
/// extends it to `dest + dest_len` (fresh memory). Returns false, nothing
/// moved, when the kernel refuses the first piece. A later piece it
/// refuses is copied and unmapped instead, so that a move begun always
/// ends. Pieces and lengths are the caller's to update.
fn moveRange(segment: *Segment, from: usize, to: usize, dest: [*]align(os.page_size_min_bytes) u8, dest_len: usize) bool {
    assert(os.can_move);
    assert(from < to and dest_len >= to - from);
    const base: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(segment));
    // With guard pages the range may stop short of the mapping's end (the
    // guard stays); such mappings are never made of several pieces.
    assert(to <= segment.huge_mapping_bytes);
    const pieces = piecesOf(segment).slice(from, to);
    for (0..pieces.count) |i| {
        const start = pieces.start(i);
        const len = pieces.ends[i] - start;
        const new_len = if (i == pieces.count - 1) dest_len - start else len;
        const src: [*]align(os.page_size_min_bytes) u8 = @alignCast(base + from + start);
        if (os.moveInto(src, len, @alignCast(dest + start), new_len)) continue;
        if (i == 0) return false;
        // The destination is mapped and writable: copying is what a move
        // would have done, at the price of touching the pages.
        @memcpy(dest[start..][0..len], src[0..len]);
        os.unmap(src, len);
    }
    return true;
}

/// Grows a mapping in place to `mapping` bytes: its last piece grows.
fn growInPlace(segment: *Segment, mapping: usize) bool {
    var pieces = piecesOf(segment);
    assert(mapping > pieces.bytes());
    const start = pieces.start(pieces.count - 1);
    const base: [*]u8 = @ptrCast(segment);
    if (!os.remapInPlace(@alignCast(base + start), pieces.bytes() - start, mapping - start)) return false;
    pieces.setEnd(mapping);
    setPieces(segment, pieces);
    return true;
}

/// Shrinks a mapping in place to `mapping` bytes (the pieces past it are
/// unmapped; this cannot fail).
fn shrinkInPlace(segment: *Segment, mapping: usize) void {
    assert(mapping < segment.huge_mapping_bytes);
    const base: [*]align(os.page_size_min_bytes) u8 = @ptrCast(@alignCast(segment));
    const shrunk = os.remapInPlace(base, segment.huge_mapping_bytes, mapping);
    assert(shrunk);
    var pieces = piecesOf(segment);
    pieces.truncate(mapping);
    setPieces(segment, pieces);
}

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
        var grown: *Segment = segment;
        if (growInPlace(segment, mapping)) {
            // Grown in place.
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
            if (!moveRange(segment, 0, have, dest, mapping)) {
                segment_mod.segment_map.remove(@ptrCast(dest));
                os.unmap(dest, mapping);
                return cache.giveBack(restore(segment));
            }
            grown = @ptrCast(dest);
            var pieces = piecesOf(grown);
            pieces.setEnd(mapping);
            setPieces(grown, pieces);
        }
        // The growth is fresh memory, less what other cached mappings fill.
        const donated = cache.donate(grown, have);
        purge.touched(mapping - have - donated);
        return .{ .segment = grown, .reused = have + donated };
    }

    /// Fills the fresh part of a mapping that grew, [at, its end), with
    /// pages of other cached mappings (the tails of the best fitting),
    /// moved without copying: a program that replaces large buffers of
    /// varying sizes then touches fresh memory only where all its cached
    /// mappings together fall short, not wherever the largest one does.
    /// Returns the bytes filled from `at` on.
    fn donate(cache: *Cache, segment: *Segment, at: usize) usize {
        if (!os.can_move) return 0;
        const end = segment.huge_mapping_bytes;
        assert(at < end);
        const base: [*]u8 = @ptrCast(segment);
        var pieces = piecesOf(segment);
        var filled: usize = 0;
        // Each step moves one donor's tail and takes it out of the running
        // (shrunk below what it had to spare, or unmapped), or stops.
        for (0..cache_count_max) |_| {
            const need = end - (at + filled);
            if (need < donate_min_bytes) break;
            const index = cache.bestDonor(need) orelse break;
            const donor = cache.entries[index];
            const donor_len = donor.huge_mapping_bytes;
            const take = @min(need, donor_len - headerPagesBytes());
            const from = donor_len - take;
            var donor_pieces = piecesOf(donor);
            const moved = donor_pieces.slice(from, donor_len);
            if (pieces.count + moved.count + 1 > piece_count_max) break;
            // Monotonic: as in setPieces (a race overshoots by a few).
            if (pieces_extra.load(.monotonic) + moved.count + 1 > pieces_extra_max) break;
            if (!moveRange(donor, from, donor_len, @alignCast(base + at + filled), take)) {
                // Refused at the first piece. The kernel may have unmapped
                // the range that piece was to fill, and os.moveInto mapped
                // it again: a kernel mapping of its own inside the fresh
                // tail (its page offsets do not run on from the tail's),
                // which later moves and growth must know of. Recorded as a
                // piece (the checks above left room); where the range was
                // left intact, the extra boundary costs a system call.
                pieces.insert(at + filled, .one(if (moved.count == 1) take else moved.ends[0]));
                break;
            }
            // Pages that asked for huge pages keep asking where they land;
            // a block that asked gets its new part asking too.
            if (segment.huge_advised) os.adviseHugePages(base + at + filled, take);
            pieces.insert(at + filled, moved);
            donor_pieces.truncate(from);
            setPieces(donor, donor_pieces);
            cache.bytes -= take;
            filled += take;
            // What is left of it is too little to give again: unmapped.
            if (from - headerPagesBytes() < donate_min_bytes) unmap(cache.removeAt(index));
        }
        setPieces(segment, pieces);
        return filled;
    }

    /// Index of the entry with the least to spare (past its header) of at
    /// least `need` bytes, else of the one with the most; null when none
    /// has `donate_min_bytes` to spare.
    fn bestDonor(cache: *const Cache, need: usize) ?usize {
        var fit: ?usize = null;
        var largest: ?usize = null;
        for (cache.entries[0..cache.len], 0..) |segment, i| {
            const spare = segment.huge_mapping_bytes -| headerPagesBytes();
            if (spare < donate_min_bytes) continue;
            if (spare >= need and (fit == null or segment.huge_mapping_bytes < cache.entries[fit.?].huge_mapping_bytes)) fit = i;
            if (largest == null or segment.huge_mapping_bytes > cache.entries[largest.?].huge_mapping_bytes) largest = i;
        }
        return fit orelse largest;
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
        if (os.can_move and excess >= split_min_bytes and cache.len < cache_count_max) split: {
            const dest = os.map(excess, segment_size_bytes, 0) orelse break :split;
            var pieces = piecesOf(segment);
            const moved = pieces.slice(mapping, have);
            if (!moveRange(segment, mapping, have, dest, excess)) {
                os.unmap(dest, excess);
                break :split;
            }
            pieces.truncate(mapping);
            setPieces(segment, pieces);
            const tail: *Segment = @ptrCast(dest);
            writeCachedHeader(tail, moved);
            tail.freed_period = segment.freed_period;
            // Into the segment map only with its header written: statistics
            // walk the map from other threads and read every header, and
            // until the moves above the tail's first page held the block's
            // bytes.
            if (!segment_mod.segment_map.add(tail)) {
                unmapUnlisted(tail);
                return;
            }
            cache.put(tail);
            return;
        }
        shrinkInPlace(segment, mapping);
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
                if (keep < bytes) {
                    shrinkInPlace(entry, keep);
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
/// Never inlined: its mincore vector (4 KiB, on the stack) would then be in
/// the frame of every free that can reach a huge block, remote frees
/// included. There it took every new thread one stack page deeper at its
/// first free of another thread's block. thread-churn, without libc:
/// 10,000 short threads, 31.7k faults against smp_allocator's 20.5k. perf
/// put a third of them in Heap.freeRemote.
noinline fn scoreTouch(segment: *Segment) void {
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

/// Bytes of old pages that a zeroed block built from a cached mapping
/// clears by writing them whatever the program does with its blocks.
const clear_write_bytes_max = 2 * 1024 * 1024;

/// Up to this many, they are written too while the program writes its
/// huge blocks whole (`writesWhole`): it is about to write them anyway,
/// and resident pages written cost no fault (large_buffers callocs 5 to
/// 25 MiB buffers and touches every page). glibc's calloc writes what it
/// reuses up to its mmap threshold, 32 MiB at most, as well.
const clear_write_dense_bytes_max = 32 * 1024 * 1024;

/// Clears the first `len` bytes of a block built from a cached mapping
/// (calloc). Past what `clear_write_bytes_max` and
/// `clear_write_dense_bytes_max` allow, the whole kernel pages are
/// discarded (one system call; they read as zeroes and fault in only where
/// the program writes): a cached mapping is old pages whether or not they
/// were ever touched, and writing them all faulted in what the program may
/// never touch (calloc of 4 GiB after a free of an unwritten 4 GiB block:
/// 450 MiB resident, 0.5 s; after 1 TiB, the OOM killer).
fn clearReused(block: [*]u8, len: usize) void {
    const write_max: usize = if (writesWhole()) clear_write_dense_bytes_max else clear_write_bytes_max;
    const page = os.pageSize();
    const start = std.mem.alignForward(usize, @intFromPtr(block), page) - @intFromPtr(block);
    const end = std.mem.alignBackward(usize, @intFromPtr(block) + len, page) -| @intFromPtr(block);
    // Windows: a discarded page must be committed again before use, which
    // may fail; there every byte is written.
    if (len <= write_max or os.purge_needs_commit or end <= start) return @memset(block[0..len], 0);
    @memset(block[0..start], 0);
    os.discard(block + start, end - start);
    @memset(block[end..len], 0);
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
            if (zeroed) clearReused(block, @min(len, a.reused -| offset));
            return block;
        }
    }
    purge.makeRoom(heap, mapping);
    const base = mapGuarded(mapping, alignment) orelse
        (if (heap.releaseMappings()) mapGuarded(mapping, alignment) else null) orelse return null;
    const thp = wantsHugePages(mapping);
    if (thp) os.adviseHugePages(base, mapping);
    if (!segment_mod.segment_map.add(@ptrCast(base))) {
        os.unmap(base, mapping);
        return null;
    }
    purge.touched(mapping);
    const block = setHeader(@ptrCast(base), mapping, offset, alignment);
    const segment: *Segment = @ptrCast(base);
    segment.huge_pieced = false;
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
    if (guard > 0 and !(os.guard(base + mapping - guard, guard, false) and os.guard(base + headerGuardOffset().?, guard, false))) {
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
fn writeCachedHeader(segment: *Segment, pieces: Pieces) void {
    writeHeader(segment, pieces.bytes());
    segment.huge_pieced = false;
    setPieces(segment, pieces);
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
    segment.front_guards_closed = 0;
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
    segment_mod.segment_map.remove(segment);
    unmapUnlisted(segment);
}

/// `unmap` for a mapping not (or no longer) in the segment map.
fn unmapUnlisted(segment: *Segment) void {
    purge.untouched(segment.huge_mapping_bytes);
    const extra = piecesOf(segment).count - 1;
    // Monotonic: as in setPieces.
    if (extra > 0) _ = pieces_extra.fetchSub(extra, .monotonic);
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
        if (!os.guard(base + mapping - guard, guard, false)) return false;
    }
    const old_mapping = segment.huge_mapping_bytes;
    if (mapping > old_mapping) {
        if (!growInPlace(segment, mapping)) return false;
    } else if (mapping < old_mapping) {
        shrinkInPlace(segment, mapping);
    }
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
    // A shrink that failed in place (hardened: its guard could not be
    // placed) has nothing to move into a smaller mapping: the caller copies.
    if (mapping <= old_mapping) return null;
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
    // for it (a guard made with mprotect splits the mapping; a guard
    // marker would move along, but opening costs little), and closes again
    // wherever the pages end up.
    const header_guard = headerGuardOffset();
    const opened = if (header_guard) |at| os.unguard(old + at, guard, guard) else true;
    if (!opened or !moveRange(segment, 0, old_mapping - guard, dest, mapping - guard)) {
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
    var pieces = piecesOf(moved);
    pieces.setEnd(mapping);
    setPieces(moved, pieces);
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
    _ = os.guard(address, segment_mod.guardBytes(), false);
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

test "pressure leaves the huge mappings cached in the current period" {
    if (!cacheable(1)) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    // Small enough to stay cached past the budget while they wait (rule 4).
    const len = 3 * 1024 * 1024;
    const cold = try gpa.alloc(u8, len);
    const warm = try gpa.alloc(u8, len);
    const heap = thread.current();
    const cold_segment = Segment.ofPtr(cold.ptr);
    const warm_segment = Segment.ofPtr(warm.ptr);
    gpa.free(cold);
    // A decay period ends between the two frees.
    heap.period_index +%= 1;
    gpa.free(warm);
    const cached = struct {
        fn has(cache: *const Cache, segment: *Segment) bool {
            return std.mem.indexOfScalar(*Segment, cache.entries[0..cache.len], segment) != null;
        }
    };
    // The budget may have taken them already: nothing to tell then.
    if (!cached.has(&heap.huge_cache, cold_segment) or !cached.has(&heap.huge_cache, warm_segment)) return error.SkipZigTest;
    // What other heaps' fresh memory asks of this heap: all of its free
    // memory. (Asking for the two mappings' worth, a cold mapping an
    // earlier test left cached could pay it instead.)
    heap.purgeTo(0, .cold_first_but_warm_huge, .purge);
    try std.testing.expect(!cached.has(&heap.huge_cache, cold_segment));
    try std.testing.expect(cached.has(&heap.huge_cache, warm_segment));
}

/// A test's cached mapping of `len` bytes, each kernel page past the
/// header stamped with `id` and its offset.
fn testCachedMapping(cache: *Cache, len: usize, id: u64) !void {
    const base = os.map(len, segment_size_bytes, 0) orelse return error.OutOfMemory;
    if (!segment_mod.segment_map.add(@ptrCast(base))) {
        os.unmap(base, len);
        return error.OutOfMemory;
    }
    purge.touched(len);
    writeCachedHeader(@ptrCast(base), .one(len));
    var offset = headerPagesBytes();
    while (offset < len) : (offset += os.pageSize()) {
        std.mem.writeInt(u64, base[offset..][0..8], id << 32 | offset, .little);
    }
    cache.put(@ptrCast(base));
}

fn expectStamp(block: [*]const u8, at: usize, id: u64, offset: usize) !void {
    try std.testing.expectEqual(id << 32 | offset, std.mem.readInt(u64, block[at..][0..8], .little));
}

test "a huge block larger than every cached mapping is built from the pages of several" {
    // (Linux alone moves pages; the test places a mapping with its calls.)
    if (!os.can_move or @import("builtin").os.tag != .linux) return error.SkipZigTest;
    if (!cacheable(1)) return error.SkipZigTest;
    const mib = 1024 * 1024;
    const header = headerPagesBytes();
    var cache: Cache = .{};
    defer _ = cache.release(cache.bytes, null);
    try testCachedMapping(&cache, 6 * mib, 0);
    try testCachedMapping(&cache, 5 * mib, 1);
    try testCachedMapping(&cache, 3 * mib, 2);
    const footprint = purge.footprintBytes();
    const extra = pieces_extra.load(.monotonic);

    // None holds 13 MiB: the largest grows, and the growth is filled with
    // the 5 MiB mapping's pages past its header (which has too little
    // left to keep), then 2 MiB and a header's worth from the end of the
    // 3 MiB one, which stays cached with the rest.
    const a = cache.assemble(13 * mib) orelse return error.OutOfMemory;
    const block: [*]u8 = @ptrCast(a.segment);
    try std.testing.expectEqual(13 * mib, a.segment.huge_mapping_bytes);
    try std.testing.expectEqual(13 * mib, a.reused);
    try std.testing.expectEqual(3, piecesOf(a.segment).count);
    try std.testing.expectEqual(extra + 2, pieces_extra.load(.monotonic));
    try std.testing.expectEqual(1, cache.len);
    try std.testing.expectEqual(mib - header, cache.bytes);
    // Nothing was touched fresh; the header pages of the 5 MiB mapping
    // went back.
    try std.testing.expectEqual(footprint - header, purge.footprintBytes());
    try expectStamp(block, header, 0, header);
    try expectStamp(block, 6 * mib - os.pageSize(), 0, 6 * mib - os.pageSize());
    try expectStamp(block, 6 * mib, 1, header);
    try expectStamp(block, 11 * mib - header - os.pageSize(), 1, 5 * mib - os.pageSize());
    try expectStamp(block, 11 * mib - header, 2, mib - header);
    try expectStamp(block, 13 * mib - os.pageSize(), 2, 3 * mib - os.pageSize());

    // Made of several mappings, it still grows, here moving piece by
    // piece: a mapping placed right after it keeps it from growing in place.
    const linux = std.os.linux;
    const end = block + 13 * mib;
    const blocker = linux.mmap(end, os.pageSize(), .{}, .{ .TYPE = .PRIVATE, .ANONYMOUS = true, .FIXED_NOREPLACE = true }, -1, 0);
    defer if (linux.errno(blocker) == .SUCCESS) {
        _ = linux.munmap(@ptrFromInt(blocker), os.pageSize());
    };
    const offset = blockOffset(1, 0);
    _ = setHeader(a.segment, a.segment.huge_mapping_bytes, offset, 1);
    const moved_block = remap(a.segment, 40 * mib - offset) orelse return error.OutOfMemory;
    const moved: [*]u8 = moved_block - offset;
    const segment = Segment.ofPtr(moved_block);
    errdefer unmap(segment);
    try std.testing.expectEqual(40 * mib, segment.huge_mapping_bytes);
    try std.testing.expectEqual(3, piecesOf(segment).count);
    try expectStamp(moved, header, 0, header);
    try expectStamp(moved, 6 * mib, 1, header);
    try expectStamp(moved, 11 * mib - header, 2, mib - header);
    try expectStamp(moved, 13 * mib - os.pageSize(), 2, 3 * mib - os.pageSize());
    try std.testing.expectEqual(0, std.mem.readInt(u64, moved[13 * mib ..][0..8], .little));
    try std.testing.expectEqual(0, std.mem.readInt(u64, moved[40 * mib - 8 ..][0..8], .little));
    unmap(segment);
    try std.testing.expectEqual(extra, pieces_extra.load(.monotonic));
}

test "a zeroed block over a cached mapping is zero, and its untouched old pages stay untouched" {
    const mib = 1024 * 1024;
    const len = 8 * mib;
    const page = os.pageSize();
    const base = os.map(len, page, 0) orelse return error.OutOfMemory;
    defer os.unmap(base, len);
    // Old pages: the first 3 MiB written, the rest never touched. The
    // block starts off a page boundary, as a colored block does.
    const dirty = 3 * mib;
    @memset(base[0..dirty], 0xa5);
    const offset = 64;
    // A program that does not write its huge blocks whole.
    const score = touch_score.load(.monotonic);
    defer touch_score.store(score, .monotonic);
    touch_score.store(0, .monotonic);
    clearReused(base + offset, len - offset);
    try std.testing.expect(std.mem.allEqual(u8, base[offset..dirty], 0));
    // Linux tells what is resident: nothing past what was written.
    if (os.residentPages(@alignCast(base + 4 * mib), 4 * mib)) |seen| try std.testing.expectEqual(0, seen.resident);
    try std.testing.expect(std.mem.allEqual(u8, base[dirty..len], 0));
    // Written whole, then cleared again, with a partial last page: by
    // discarding, and by writing (a program that writes its blocks whole).
    for ([_]i8{ 0, touch_score_max }) |whole| {
        touch_score.store(whole, .monotonic);
        @memset(base[0..len], 0x5a);
        clearReused(base + offset, len - offset - 100);
        try std.testing.expect(std.mem.allEqual(u8, base[offset .. len - 100], 0));
        try std.testing.expect(std.mem.allEqual(u8, base[len - 100 .. len], 0x5a));
        try std.testing.expectEqual(0x5a, base[offset - 1]);
    }
}
