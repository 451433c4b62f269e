//! Statistics, computed when asked for: nothing on the alloc and free paths
//! counts anything for them. `collect` walks the segment map (segment.zig),
//! which lists every segment and huge mapping, and reads the page metadata
//! in each header, which already says what the figures need: a page's
//! class, its blocks in use (`used` less the blocks waiting on its
//! `thread_free`), and how much of it was ever touched (`capacity`).
//!
//! Headers of segments owned by other threads change while they are read,
//! so the figures are exact when the program is quiet (the tests check them
//! to the block) and a close snapshot while it runs. Reading never follows
//! a pointer another thread may free: the map's read guard keeps every
//! listed segment mapped, and only fixed-size header fields are read, with
//! every index checked.
//!
//! Requested bytes are the exception: they cannot be derived, so they are
//! counted per heap on the fast paths when kennel is built with -Dstats
//! (config.count_requested; Zig only).
//!
//! Hardened with a quarantine (quarantine.zig), blocks waiting there count
//! as free: the program freed them. Each heap's ring records their sizes,
//! so they are subtracted without reading the blocks.
const std = @import("std");
const builtin = @import("builtin");
const config = @import("config.zig");
const secure = @import("secure.zig");
const os = @import("os.zig");
const size_class = @import("size_class.zig");
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const thread = @import("thread.zig");
const purge = @import("purge.zig");
const pool = @import("pool.zig");
const Heap = @import("heap.zig").Heap;
const BlockCount = @import("page.zig").BlockCount;
const quarantine = @import("quarantine.zig");

pub const ClassStats = struct {
    /// Bytes per block of the class.
    block_size: usize = 0,
    /// Blocks handed out and not freed.
    blocks_live: usize = 0,
    /// Pages holding blocks of the class.
    pages: usize = 0,
    /// Free blocks of those pages, as `Stats.free_blocks` counts them.
    blocks_free: usize = 0,
};

pub const Stats = struct {
    /// Bytes requested and not freed, when counted (-Dstats, Zig); null
    /// otherwise (always in the C library: free does not say the size).
    requested_bytes: ?usize = null,
    /// Bytes in live blocks: block sizes, huge blocks' usable sizes.
    block_bytes: usize = 0,
    /// Bytes kennel has touched and not given back to the OS: page areas up
    /// to the last block ever handed out, page metadata, huge mappings.
    committed_bytes: usize = 0,
    /// The purge policy's footprint (purge.zig): resident slices of segments
    /// and whole huge mappings, as counted where they change
    /// (`footprint_counted_bytes`) and as the walk finds them
    /// (`footprint_bytes`); equal when the program is quiet.
    footprint_bytes: usize = 0,
    footprint_counted_bytes: usize = 0,
    /// Bytes mapped from the OS (reserved address space), now and at most.
    mapped_bytes: usize = 0,
    mapped_bytes_peak: usize = 0,
    /// Heaps created: one per thread alive at once (ended threads' heaps
    /// are reused).
    heap_count: usize = 0,
    /// Heaps whose thread ended and that no thread has taken over yet.
    abandoned_heaps: usize = 0,
    /// Pages with live blocks in those heaps.
    abandoned_pages: usize = 0,
    /// Segments (4 MiB, in use or kept empty for reuse).
    segment_count: usize = 0,
    /// Of those, empty and purged in the pool any heap takes from
    /// (pool.zig), about: counted apart from the walk.
    pooled_segments: usize = 0,
    /// Blocks of pages in use that are free: on a free list, pending from
    /// other threads, or linked and never handed out (not the pages'
    /// untouched tails).
    free_blocks: usize = 0,
    /// Live huge blocks, and their usable bytes (part of block_bytes).
    huge_count: usize = 0,
    huge_bytes: usize = 0,
    /// Per size class (index = class; `size_class.zig`).
    classes: [size_class.class_count]ClassStats = @splat(.{}),

    /// Blocks live in every class, huge blocks included.
    pub fn blocksLive(s: *const Stats) usize {
        var total = s.huge_count;
        for (s.classes) |c| total += c.blocks_live;
        return total;
    }
};

/// Registry indices whose abandoned state the walk keeps on the stack;
/// beyond, in a mapping made for the walk.
const abandoned_local_heaps = 4096;

/// The walk's state: the figures, and the heaps found abandoned beforehand
/// (finding one can take a system call, which must not happen while the
/// walk holds removers of segments waiting).
const Walk = struct {
    stats: Stats,
    /// Bit i: the heap of registry index i (Heap.entry) is abandoned.
    abandoned: []u64,
    /// Blocks waiting in quarantines, per class.
    quarantined: [size_class.class_count]usize = @splat(0),

    fn isAbandoned(walk: *const Walk, heap: *Heap) bool {
        const index = heap.entry.index;
        if (index / 64 >= walk.abandoned.len) return false;
        return walk.abandoned[index / 64] >> @intCast(index % 64) & 1 != 0;
    }
};

pub fn collect() Stats {
    // Read before the walk maps anything.
    const mapped_bytes = os.mappedBytes();
    const mapped_bytes_peak = os.mappedBytesPeak();
    const footprint_counted_bytes = purge.footprintBytes();
    var local: [abandoned_local_heaps / 64]u64 = @splat(0);
    // Heaps born after this have no bit: not counted as abandoned.
    const words = std.math.divCeil(usize, thread.indexCount(), 64) catch unreachable;
    // Beyond the local bits, a mapping (fresh: zeroed); if none can be had,
    // only the pages of the first indices' abandoned heaps are counted.
    const mapped: ?[*]align(os.page_size_min_bytes) u8 = if (words > local.len) os.map(words * @sizeOf(u64), os.page_size_min_bytes, 0) else null;
    defer if (mapped) |memory| os.unmap(memory, words * @sizeOf(u64));
    var walk: Walk = .{
        .stats = .{
            .mapped_bytes = mapped_bytes,
            .mapped_bytes_peak = mapped_bytes_peak,
            .footprint_counted_bytes = footprint_counted_bytes,
            .heap_count = thread.heapCount(),
            .pooled_segments = pool.count(),
        },
        .abandoned = if (mapped) |memory| @as([*]u64, @ptrCast(memory))[0..words] else &local,
    };
    for (&walk.stats.classes, 0..) |*c, class| c.block_size = size_class.blockSize(@intCast(class));
    thread.forEachHeap(&walk, addHeap);
    segment_mod.segment_map.beginRead();
    segment_mod.segment_map.forEach(&walk, addSegment);
    segment_mod.segment_map.endRead();
    if (config.hardening.quarantine) takeOffQuarantined(&walk.stats, &walk.quarantined);
    return walk.stats;
}

/// Counts the blocks waiting in quarantines (per class) as free: the
/// program freed them, though their pages count them in use. No more per
/// class than the walk found in use: while the program runs, blocks leave
/// the rings between their count and the walk (and a ring read mid-change
/// may list one twice). The same number comes off the class and the
/// totals, which stay the sums of the classes' figures. (The class's count
/// was clamped and the total bytes not: about one snapshot in ten
/// disagreed with itself while another thread churned.)
fn takeOffQuarantined(s: *Stats, quarantined: *const [size_class.class_count]usize) void {
    for (&s.classes, quarantined) |*c, waiting| {
        const moved = @min(waiting, c.blocks_live);
        c.blocks_live -= moved;
        s.block_bytes -= moved * c.block_size;
        s.free_blocks += moved;
        c.blocks_free += moved;
    }
}

test "quarantined blocks come off each class and the totals alike, at most what the class had" {
    var s: Stats = .{};
    for (&s.classes, 0..) |*c, class| c.block_size = size_class.blockSize(@intCast(class));
    s.classes[3].blocks_live = 5;
    s.classes[7].blocks_live = 2;
    s.block_bytes = 5 * s.classes[3].block_size + 2 * s.classes[7].block_size;
    var waiting: [size_class.class_count]usize = @splat(0);
    // More waiting than the walk found in use: blocks that left the ring
    // between the two reads.
    waiting[3] = 2;
    waiting[7] = 4;
    takeOffQuarantined(&s, &waiting);
    try std.testing.expectEqual(3, s.classes[3].blocks_live);
    try std.testing.expectEqual(0, s.classes[7].blocks_live);
    try std.testing.expectEqual(3 * s.classes[3].block_size, s.block_bytes);
    try std.testing.expectEqual(4, s.free_blocks);
    try std.testing.expectEqual(2, s.classes[7].blocks_free);
}

fn addHeap(walk: *Walk, heap: *Heap) void {
    const s = &walk.stats;
    if (thread.isAbandoned(heap)) {
        s.abandoned_heaps += 1;
        const index = heap.entry.index;
        if (index / 64 < walk.abandoned.len) walk.abandoned[index / 64] |= @as(u64, 1) << @intCast(index % 64);
    }
    if (config.hardening.quarantine) {
        addQuarantined(walk, &heap.quarantine.small);
        if (quarantine.holds_large) addQuarantined(walk, &heap.quarantine.large);
    }
    if (config.count_requested) {
        // Monotonic: the owner stores it with plain (atomic) stores.
        s.requested_bytes = (s.requested_bytes orelse 0) +% @atomicLoad(usize, &heap.requested_bytes, .monotonic);
    }
}

/// Counts the blocks waiting in one of a heap's quarantine rings. Plain
/// owner-written fields, read as a snapshot (see the top); the sizes alone
/// are read, never the blocks.
fn addQuarantined(walk: *Walk, ring: anytype) void {
    const slots = @TypeOf(ring.*).slot_count;
    const count = @min(@atomicLoad(u32, &ring.count, .monotonic), slots);
    for (ring.sizes[0..count]) |*size| {
        const bytes = @atomicLoad(u32, size, .monotonic);
        if (bytes == 0 or bytes > size_class.block_size_max_bytes) continue;
        walk.quarantined[size_class.ofSize(bytes)] += 1;
    }
}

fn addSegment(walk: *Walk, address: usize) void {
    const s = &walk.stats;
    const segment: *Segment = @ptrFromInt(address);
    const kind = @atomicLoad(segment_mod.SegmentKind, &segment.kind, .monotonic);
    if (kind == .huge) {
        const mapping = @atomicLoad(usize, &segment.huge_mapping_bytes, .monotonic);
        s.footprint_bytes += mapping;
        // Monotonic: 1 while the block is live, 0 once freed (cached).
        if (@atomicLoad(BlockCount, &segment.pages[0].used, .monotonic) == 0) {
            s.committed_bytes += mapping;
            return;
        }
        const usable = mapping -| (segment_mod.guardBytes() + @atomicLoad(usize, &segment.huge_block_offset, .monotonic));
        s.huge_count += 1;
        s.huge_bytes += usable;
        s.block_bytes += usable;
        // Saturating: a header being written may still read as zeroes.
        s.committed_bytes += mapping -| segment_mod.guardBytes();
        return;
    }
    s.segment_count += 1;
    // A header being set up may still read as zeroes: nothing to count.
    if (@atomicLoad(u8, &segment.page_count, .monotonic) != segment_mod.slice_count) return;
    const page = os.pageSize();
    s.committed_bytes += std.mem.alignForward(usize, @sizeOf(Segment), page);
    const abandoned = if (segment.ownerRelaxed()) |owner| walk.isAbandoned(owner) else false;
    // Monotonic: owner-written masks; a snapshot.
    const free_slices = Segment.loadMaskRelaxed(&segment.free_mask);
    const resident = Segment.loadMaskRelaxed(&segment.resident_mask);
    s.footprint_bytes += segment.touchedBytes();
    // Free slices: the memory under them that may still be resident.
    s.committed_bytes += Segment.residentBytesOf(free_slices & resident);
    for (&segment.pages, 0..) |*p, i| {
        if (free_slices & (@as(u64, 1) << @intCast(i)) != 0) continue;
        // Monotonic: as above (written by the owner as it sets pages up).
        if (@atomicLoad(u8, &p.first_slice, .monotonic) != i) continue; // not a page's first slice
        // Monotonic: as above (written by the owner as it extends the page).
        const capacity = @atomicLoad(BlockCount, &p.capacity, .monotonic);
        const touched = @as(usize, capacity) * @atomicLoad(u32, &p.block_size, .monotonic);
        if (touched == 0) continue;
        s.committed_bytes += std.mem.alignForward(usize, touched, page);
        // Hardened: the page's bits in the live map, cleared when it was set up.
        if (config.hardening.check_frees) s.committed_bytes += @sizeOf(Segment.LiveWords);
        const class = @atomicLoad(size_class.Class, &p.class, .monotonic);
        if (class >= size_class.class_count) continue;
        const used = @atomicLoad(BlockCount, &p.used, .monotonic);
        const live = used -| p.pendingCount();
        const c = &s.classes[class];
        // Hardened C: a page's first block is no free block (see
        // secure.keepsTailCanary); it is never handed out.
        const reserved: BlockCount = if (secure.keepsTailCanary(c.block_size)) 1 else 0;
        s.free_blocks += capacity -| live -| reserved;
        c.blocks_free += capacity -| live -| reserved;
        c.pages += 1;
        c.blocks_live += live;
        s.block_bytes += live * c.block_size;
        if (abandoned and live > 0) s.abandoned_pages += 1;
    }
}

/// Writes the figures, one "kennel: " line each, with `write(bytes)`; the
/// first line has the form tests/preload/run.sh looks for.
pub fn print(s: *const Stats, context: anytype, comptime write: fn (@TypeOf(context), []const u8) void) void {
    var buf: [256]u8 = undefined;
    const lines = .{
        .{ "kennel: {d} bytes mapped, peak {d} bytes, {d} heaps\n", .{ s.mapped_bytes, s.mapped_bytes_peak, s.heap_count } },
        .{ "kennel: {d} live blocks in {d} bytes, {d} bytes committed, {d} segments, {d} huge blocks ({d} bytes)\n", .{ s.blocksLive(), s.block_bytes, s.committed_bytes, s.segment_count, s.huge_count, s.huge_bytes } },
        .{ "kennel: {d} heaps abandoned by ended threads, holding {d} pages with live blocks\n", .{ s.abandoned_heaps, s.abandoned_pages } },
    };
    inline for (lines) |line| write(context, std.fmt.bufPrint(&buf, line[0], line[1]) catch unreachable);
    if (s.requested_bytes) |bytes| write(context, std.fmt.bufPrint(&buf, "kennel: {d} bytes requested\n", .{bytes}) catch unreachable);
    write(context, "kennel: class  block size  live blocks  pages\n");
    for (s.classes, 0..) |c, class| {
        if (c.pages == 0) continue;
        write(context, std.fmt.bufPrint(&buf, "kennel: {d:>5}  {d:>10}  {d:>11}  {d:>5}\n", .{ class, c.block_size, c.blocks_live, c.pages }) catch unreachable);
    }
}
