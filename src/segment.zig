//! Segments: the 4 MiB regions, aligned to their own size, that pages live in.
//!
//! A segment is cut into 64 slices of 64 KiB. A page is a run of slices:
//!
//!   small page    1 slice (64 KiB), blocks up to 8 KiB
//!   medium page   8 slices (512 KiB), blocks up to 64 KiB
//!   large page    as many slices as one block takes: a single block of up
//!                 to 2 MiB
//!   huge          one allocation of any size in its own mapping (huge.zig)
//!
//! Any free run of slices serves any page, whatever size class used it
//! before, so memory one size freed is memory the next size can take
//! without a fault, and a freed large block is a free run that goes back
//! to the OS on its own. The segment tracks which slices are free
//! (`free_mask`) and which may be resident (`resident_mask`), and pages are
//! taken from resident slices first.
//!
//! The segment starts with this header; the header holds one `Page` per
//! slice, so the page of any block is found from the block's address
//! alone: mask to the segment, shift to the slice, and take the entry its
//! page starts at (`first_slice`, the slice itself for a one-slice page).
//! Slice 0
//! shares its space with the header, so its blocks start at
//! `header_bytes`; it (and, with guard pages, slice 63) holds small pages
//! only. Every page area starts at a multiple of 4 KiB, which is why blocks
//! can promise alignments up to `block_align_max_bytes`.
//!
//! A segment belongs to one heap (`owner`), which alone allocates from its
//! pages and frees into them directly; other threads only push onto a page's
//! `thread_free` and set bits in `page_notice`.
//!
//! Pointers are mapped to their segment with `(ptr - 1) & ~mask` rather than
//! `ptr & ~mask`: no block of a segment starts at the segment's first byte
//! (the header is there), and a huge allocation aligned to more than a
//! segment starts exactly one segment after its header. One formula thus
//! covers every block kennel hands out.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const size_class = @import("size_class.zig");
const page_mod = @import("page.zig");
const Page = page_mod.Page;
const Heap = @import("heap.zig").Heap;
const purge = @import("purge.zig");
const config = @import("config.zig");
const pool = @import("pool.zig");

pub const segment_size_bytes = 4 * 1024 * 1024;
const segment_mask = segment_size_bytes - 1;

pub const slice_bytes = 64 * 1024;
pub const slice_count = segment_size_bytes / slice_bytes;
pub const slice_shift = std.math.log2_int(usize, slice_bytes);
/// A page starts at some slice, so a segment has at most this many.
pub const page_count_max = slice_count;

pub const small_page_bytes = slice_bytes;
pub const medium_page_slices = 8;
pub const medium_page_bytes = medium_page_slices * slice_bytes;

/// Largest block of each page kind: at least 8 blocks fit in a small or
/// medium page.
pub const small_block_max_bytes = small_page_bytes / 8;
pub const medium_block_max_bytes = medium_page_bytes / 8;
pub const large_block_max_bytes = size_class.block_size_max_bytes;
/// Slices of the largest large page.
pub const large_page_slices_max = large_block_max_bytes / slice_bytes;

comptime {
    assert(slice_count == 64); // the masks are u64
    assert(large_block_max_bytes % slice_bytes == 0);
    assert(large_page_slices_max + 2 <= slice_count);
}

/// Every block is aligned to the largest power of two (up to this) that
/// divides its size: page areas start at multiples of this.
pub const block_align_max_bytes = 4096;

/// Hardened: the segment's last kernel page is inaccessible, so a run of
/// writes off the end of its last block faults before it reaches the next
/// mapping. Zero otherwise, and where the system cannot protect memory
/// (wasm).
pub fn guardBytes() usize {
    return if (config.hardening.guard_pages and os.can_protect) os.pageSize() else 0;
}

/// The kind of page a size class lives in.
pub const Kind = enum(u8) {
    small,
    medium,
    large,

    pub fn ofClass(class: size_class.Class) Kind {
        const block_size = size_class.blockSize(class);
        if (block_size <= small_block_max_bytes) return .small;
        if (block_size <= medium_block_max_bytes) return .medium;
        return .large;
    }
};

/// Slices of a page for blocks of `class`: one block per large page.
pub fn pageSlices(class: size_class.Class) u8 {
    return switch (Kind.ofClass(class)) {
        .small => 1,
        .medium => medium_page_slices,
        .large => @intCast(std.math.divCeil(usize, size_class.blockSize(class) + pageGuardBytes() + frontGuardBytes(), slice_bytes) catch unreachable),
    };
}

/// Hardened (guard pages): a large page also begins with a guard, its first
/// kernel page, and its block starts right above it, so an underflow from
/// the block (the page's only one) faults at once. Below a large page lies
/// whatever the segment put there: small pages' blocks, free slices, or
/// the guard of a medium or large page; the blocks of small and medium
/// pages are guarded against underflows by the canary of the block below
/// them instead (C, secure.keepsTailCanary). Left closed when the page
/// goes back to its segment, as the end guard is: the next large page set
/// up at the same slice needs no system call, and any other page set up
/// over it opens it.
pub fn frontGuardBytes() usize {
    return pageGuardBytes();
}

/// Hardened (guard pages): the last kernel page of every medium and large
/// page (pages of more than one slice) is inaccessible while the page is
/// in use, so a run of writes from one of its blocks faults before it
/// leaves the page. Small pages have one only on every
/// `small_guard_interval_slices`th slice (`smallPageGuarded`): each closed
/// guard inside a segment costs the process two more kernel mappings, of
/// the 65,530 the kernel allows by default, and one per small page would
/// split a segment into up to 128, enough for about 8 GiB of small pages.
/// None either with kernel pages of more than a quarter of a slice (64 KiB
/// on some aarch64 kernels), where the guard would take a whole slice.
pub fn pageGuardBytes() usize {
    const guard = guardBytes();
    return if (guard * 4 <= slice_bytes) guard else 0;
}

/// Small pages end in a guard on every this many slices, so a run of
/// writes from a small block of 1 MiB or more meets a guard (any 16
/// slices in a row hold one whose end is guarded, the segment's last
/// included), if small pages fill them and no other guard comes first.
/// Three guards a segment: the fragmentation workload's hardened run (600
/// MiB) peaked at 625 kernel mappings with none, 1,541 with these, 2,775
/// with a guard every eighth slice and 4,961 every fourth.
pub const small_guard_interval_slices = 16;

/// Whether a small page on slice `i` ends in a guard (guard pages). Not on
/// the segment's last slice, which ends in the segment's own guard.
pub fn smallPageGuarded(i: usize) bool {
    return pageGuardBytes() > 0 and i % small_guard_interval_slices == small_guard_interval_slices - 1 and i != slice_count - 1;
}

/// What a segment holds: pages of blocks, or one huge block (huge.zig).
pub const SegmentKind = enum(u8) { pages, huge };

/// The page shift of a huge mapping: every offset inside it maps to page 0.
pub const huge_page_shift = @bitSizeOf(usize) - 1;

/// Intrusive links for the heap's segment lists.
pub const Link = extern struct {
    next: ?*Segment = null,
    prev: ?*Segment = null,
};

/// A run of slices (Segment.takeSpan).
pub const Span = struct { first: u6, slices: u8 };

/// Extern: fields stay in this order, so the ones every free reads share
/// the header's first cache line (Zig's automatic layout had put them after
/// the 4 KiB page array).
pub const Segment = extern struct {
    // ---- Read by any thread ----
    /// The heap that owns every page here; null for huge allocations. Changes
    /// only when a heap absorbs an orphaned heap's segments (thread.zig).
    owner: std.atomic.Value(?*Heap),
    /// Pages that a remote free announced: bit i is the page whose first
    /// slice is i.
    page_notice: PageBits,
    kind: SegmentKind,
    /// log2 of the slice size (`huge_page_shift` for huge: every offset
    /// maps to slice 0).
    page_shift: u8,
    /// Entries of `pages` in use: slice_count, or 1 for huge.
    page_count: u8,
    /// In the owner's list of segments with free slices.
    in_with_free: bool,
    /// In the owner's list of segments with a free run for a medium page.
    in_with_run: bool,

    // ---- Owner only (read by checks and statistics as a snapshot) ----
    /// Bit i: slice i is part of no page.
    free_mask: u64,
    /// Bit i: slice i has been touched and not purged since, so may be
    /// resident. The free memory of the segment is its resident free slices.
    resident_mask: u64,
    /// In the owner's list of all its segments.
    all: Link,
    /// In the owner's list of segments with free slices.
    with_free: Link,
    /// In the owner's list of segments with a free run of at least
    /// `medium_page_slices` slices that multi-slice pages may use.
    with_run: Link,

    // ---- Huge allocations only ----
    /// Length of the whole mapping, header included.
    huge_mapping_bytes: usize,
    /// Offset of the block from the segment start.
    huge_block_offset: usize,
    /// Alignment the block was requested with (kept for moving remaps).
    huge_alignment: usize,
    /// A fresh mapping whose block was not freed yet: its first free tells
    /// how much of it the program touched (huge.zig, huge pages).
    huge_fresh: bool,
    /// The whole mapping asked for huge pages (kept while cached).
    huge_advised: bool,
    /// The mapping is made of several kernel mappings, listed in
    /// `huge_pieces`; else it is one (huge.zig).
    huge_pieced: bool,

    // ---- Owner only (or the cache holding it) ----
    /// The owner's decay period (Heap.period_index) in which free memory
    /// last came to this segment or huge mapping: purges take memory from
    /// earlier periods first (purge.zig).
    freed_period: u32,
    /// Pieces of blocks moved into this segment by their kernel pages
    /// (Heap.moveLarge), each a kernel mapping of its own inside the
    /// segment's (`split_marks`), until the segment is unmapped (`destroy`
    /// gives them back to the process's count, Heap.moved_blocks).
    moved_in: u32,

    /// One entry per slice: the page starting there, or, for the other
    /// slices of a page, an entry whose `first_slice` leads to it.
    pages: [page_count_max]Page,

    // ---- Owner only (read by statistics as a snapshot) ----
    /// Per slice: how far from its start it has been touched since it was
    /// last purged, in units of `touch_unit_bytes`. Pages are touched front
    /// to back (Page.extend, a large page's block), so this prefix is what
    /// the slice holds resident, finer than `resident_mask`: a small page
    /// that used a few KiB of its slice leaves the rest untouched, and the
    /// next page there that goes further touches fresh memory, which the
    /// footprint (purge.zig) counts.
    slice_touched: [slice_count]u8,
    /// Hardened (guard pages): bit i while the guard in the last kernel
    /// page of slice i is inaccessible, whether or not a page in use ends
    /// there. A released page leaves its guard closed, so the next page set
    /// up to end at the same slice (one size allocated and freed in a loop)
    /// needs no system call; a page set up over a closed guard opens it
    /// (`setUpGuards`).
    guards_closed: u64,
    /// Bit i: the first kernel page of slice i is a closed front guard
    /// (`frontGuardBytes`): of the large page in use that starts there, or
    /// left closed by one that went back to the segment, as `guards_closed`.
    front_guards_closed: u64,
    /// Bit i: the page starting at slice i has a dead tail that
    /// waits for the owner's decay period to end (Heap.waitTail); cleared
    /// when the page is released or its tail purged. Owner only.
    tails_waiting: u64,
    /// Those of them that were waiting at the owner's last period end
    /// already: they go back at the next.
    tails_old: u64,
    /// Bit i: a kernel mapping (VMA) may begin at the segment's i-th unit of
    /// `os.page_size_min_bytes` (a start or end of a block that moved in by
    /// its pages, Heap.moveLarge). The segment's mapping is one until a
    /// move splits it, and the pieces stay until it is unmapped: the moved
    /// pages keep the page offsets of where they came from. A move out of
    /// the segment takes its range one piece at a time (`nextSplit`): the
    /// kernel moves a range of several mappings one by one, so a refusal
    /// partway would leave part of it moved, and each piece arrives as a
    /// mapping of its own, which the count of moves must cover. A set bit
    /// may mark pieces the kernel joined after all. Owner only.
    split_marks: [split_mark_words]u64,
    /// Huge only, with `huge_pieced`: the kernel mappings the mapping is
    /// made of (huge.zig). Past the page array: with 4 KiB kernel pages it
    /// lies on the header's second page, which a mapping of one piece
    /// leaves untouched.
    huge_pieces: @import("huge.zig").Pieces,

    /// One bit per page that any thread may set: one word on 64-bit
    /// targets, two on 32-bit ones (which have no 64-bit atomics).
    pub const PageBits = extern struct {
        words: [word_count]std.atomic.Value(usize),

        pub const word_bits = @bitSizeOf(usize);
        const word_count = page_count_max / word_bits;
        pub const empty: PageBits = .{ .words = @splat(.init(0)) };

        comptime {
            assert(page_count_max % word_bits == 0);
        }

        /// The word that holds page `index`'s bit.
        pub inline fn word(bits: *PageBits, index: usize) *std.atomic.Value(usize) {
            return &bits.words[index / word_bits];
        }

        /// Page `index`'s bit in its word.
        pub inline fn bit(index: usize) usize {
            return @as(usize, 1) << @intCast(index % word_bits);
        }

        /// Whether any bit is set. SeqCst: see Heap.absorb.
        pub fn anySet(bits: *PageBits) bool {
            for (&bits.words) |*w| {
                if (w.load(.seq_cst) != 0) return true;
            }
            return false;
        }

        /// Clears every bit. Monotonic: for the owner of a segment nobody
        /// else refers to (no notifier runs).
        pub fn clear(bits: *PageBits) void {
            for (&bits.words) |*w| w.store(0, .monotonic);
        }
    };

    /// `free_mask` or `resident_mask` as another thread reads it: a
    /// snapshot (statistics, checks of a page's own bit). On 32-bit targets
    /// in two halves, each read atomically; a page's own bit is exact.
    pub fn loadMaskRelaxed(mask: *const u64) u64 {
        // Monotonic: the owner writes the masks with plain stores; readers
        // need some recent value.
        if (@bitSizeOf(usize) >= 64) return @atomicLoad(u64, mask, .monotonic);
        const halves: *const [2]u32 = @ptrCast(mask);
        const first: u64 = @atomicLoad(u32, &halves[0], .monotonic);
        const second: u64 = @atomicLoad(u32, &halves[1], .monotonic);
        return switch (builtin.cpu.arch.endian()) {
            .little => first | second << 32,
            .big => first << 32 | second,
        };
    }

    /// Bytes of the header struct, rounded to where blocks may start. A huge
    /// mapping's block starts after this.
    pub const metadata_bytes = std.mem.alignForward(usize, @sizeOf(Segment), block_align_max_bytes);

    /// Hardened (check_frees, zero_freed, guard_freed_large): after the
    /// metadata, the block map. Per block of every page, a live bit, set
    /// while the block is handed out (check_frees). Free clears it with an
    /// atomic read-modify-write, so a second free of the block, from any
    /// thread, finds it clear (check.zig). Outside the blocks, so nothing
    /// the program writes into freed memory can hide a double free. In a
    /// page of at most `handed_blocks_max` blocks each block has a second
    /// bit, next to its live bit: handed out since the page was set up (so
    /// freed before, if it is free), which spares a fresh block the zero
    /// check and the unguarding (check.zig). Sized for the fullest page:
    /// 64 KiB of 16-byte blocks (the hardened minimum; medium and large
    /// pages hold at most 64 blocks); a page uses the bits of its first
    /// slice.
    pub const live_bits_per_page = small_page_bytes / 16;
    pub const handed_blocks_max = live_bits_per_page / 2;
    pub const has_block_map = config.hardening.check_frees or config.hardening.zero_freed or config.hardening.guard_freed_large;
    pub const live_map_bytes = if (has_block_map) page_count_max * live_bits_per_page / 8 else 0;
    pub const LiveWords = [live_bits_per_page / @bitSizeOf(usize)]std.atomic.Value(usize);

    /// Bytes of the header: the metadata and the live map.
    pub const header_bytes = metadata_bytes + live_map_bytes;

    /// Hardened (guard pages): the kernel page after the header is
    /// inaccessible, so a run of writes below the first blocks of slice 0
    /// faults before it reaches the page metadata. Its offset in the
    /// segment, when there is one.
    /// With 64 KiB kernel pages the guard would take slice 1 as well: there
    /// is none then.
    pub fn headerGuardOffset() ?usize {
        const guard = guardBytes();
        if (guard == 0) return null;
        const offset = std.mem.alignForward(usize, header_bytes, guard);
        return if (offset + guard <= slice_bytes) offset else null;
    }

    /// Bytes from the segment start to the first block of slice 0: after
    /// the header and its guard. With 16 KiB kernel pages the guard takes
    /// the rest of slice 0, which then holds no page.
    pub fn firstBlockOffset() usize {
        const guard_offset = headerGuardOffset() orelse return header_bytes;
        return guard_offset + guardBytes();
    }

    comptime {
        // 8 KiB with 64-bit pointers (pages of 64 bytes), 4 KiB with 32-bit.
        assert(metadata_bytes == if (@bitSizeOf(usize) >= 64) 8192 else 4096);
        assert(header_bytes % block_align_max_bytes == 0);
        assert(@offsetOf(Segment, "pages") <= 128);
        // With 64-bit pointers a page's metadata is one 64-byte line of its
        // own: remote frees of one page (a CAS on `thread_free`) and the
        // owner's allocations from its neighbour (`free`, `used`) do not
        // share a line. (Pages sat at offset 120 until `moved_in` came;
        // larson and mpsc moved within noise either way on the 2-core
        // machine: a layout rule, not a measured gain.)
        if (@bitSizeOf(usize) >= 64) assert(@offsetOf(Segment, "pages") % 64 == 0 and @sizeOf(Page) == 64);
        assert(small_page_bytes > header_bytes);
    }

    /// The block map's words of page `index` (hardened only).
    pub fn liveWords(segment: *Segment, index: usize) *LiveWords {
        comptime assert(has_block_map);
        assert(index < page_count_max);
        const base: [*]u8 = @ptrCast(segment);
        return @ptrCast(@alignCast(base + metadata_bytes + index * @sizeOf(LiveWords)));
    }

    /// The segment containing the block that starts at `ptr`.
    pub inline fn ofPtr(ptr: *const anyopaque) *Segment {
        return @ptrFromInt((@intFromPtr(ptr) - 1) & ~@as(usize, segment_mask));
    }

    /// The slice entry of `ptr`: the page itself for a one-slice page.
    pub inline fn sliceOf(segment: *Segment, ptr: *const anyopaque) *Page {
        const index = (@intFromPtr(ptr) - @intFromPtr(segment)) >> @intCast(segment.page_shift);
        assert(index < segment.page_count);
        return &segment.pages[index];
    }

    /// The page containing the block that starts at `ptr`.
    pub inline fn pageOf(segment: *Segment, ptr: *const anyopaque) *Page {
        // Written when the page was set up, before any of its blocks was
        // handed out. An index, not a step back: one subtraction fewer on
        // every free.
        return &segment.pages[segment.sliceOf(ptr).first_slice];
    }

    /// `pageOf` in a segment of pages (not a huge mapping), for any
    /// offset inside it: the slice shift is then a constant.
    pub inline fn pageAtOffset(segment: *Segment, offset: usize) *Page {
        assert(segment.kind == .pages and segment.page_shift == slice_shift);
        assert(offset < segment_size_bytes);
        // As in pageOf; a free slice's entry leads to itself.
        return &segment.pages[segment.pages[offset >> slice_shift].first_slice];
    }

    /// The owner, as seen by any thread. Monotonic: the owner compares it
    /// with itself (a value only it can have stored), and other threads only
    /// need some recent value (see Heap.notifyOwner for the one exception).
    pub inline fn ownerRelaxed(segment: *const Segment) ?*Heap {
        return segment.owner.load(.monotonic);
    }

    /// Maps a fresh segment for `owner`, every slice free. Null when out of
    /// memory.
    pub fn create(owner: *Heap) ?*Segment {
        const base = pool.map(segment_size_bytes, segment_size_bytes, 0) orelse return null;
        const segment: *Segment = @ptrCast(base);
        const guard = guardBytes();
        const header_guard_ok = if (headerGuardOffset()) |offset| os.guard(base + offset, guard, false) else true;
        if ((guard > 0 and !os.guard(base + segment_size_bytes - guard, guard, false)) or !header_guard_ok or !segment_map.add(segment)) {
            os.unmap(base, segment_size_bytes);
            return null;
        }
        segment.owner = .init(owner);
        segment.page_notice = .empty;
        segment.kind = .pages;
        segment.page_shift = slice_shift;
        segment.page_count = slice_count;
        segment.in_with_free = false;
        segment.in_with_run = false;
        segment.all = .{};
        segment.with_free = .{};
        segment.with_run = .{};
        segment.huge_mapping_bytes = 0;
        segment.huge_block_offset = 0;
        segment.huge_fresh = false;
        segment.huge_advised = false;
        segment.huge_alignment = 0;
        segment.huge_pieced = false;
        segment.freed_period = 0;
        segment.moved_in = 0;
        segment.resident_mask = 0;
        segment.guards_closed = 0;
        segment.front_guards_closed = 0;
        segment.tails_waiting = 0;
        segment.tails_old = 0;
        segment.split_marks = @splat(0);
        segment.slice_touched = @splat(0);
        segment.free_mask = usableSlices();
        for (&segment.pages, 0..) |*page, i| page.* = .{ .index = @intCast(i), .first_slice = @intCast(i) };
        return segment;
    }

    const split_mark_units = segment_size_bytes / os.page_size_min_bytes;
    pub const split_mark_words = split_mark_units / 64;

    /// A kernel mapping may begin at `offset` in the segment (a multiple
    /// of the kernel page; the segment's end is no split).
    pub fn markSplit(segment: *Segment, offset: usize) void {
        assert(offset % os.pageSize() == 0 and offset <= segment_size_bytes);
        if (offset == segment_size_bytes) return;
        const unit = offset / os.page_size_min_bytes;
        segment.split_marks[unit / 64] |= @as(u64, 1) << @intCast(unit % 64);
    }

    /// The first offset in (`from`, `to`) where a kernel mapping may begin,
    /// else `to`: [from, result) lies in one mapping of the segment.
    pub fn nextSplit(segment: *const Segment, from: usize, to: usize) usize {
        assert(from < to and to <= segment_size_bytes);
        assert(from % os.pageSize() == 0 and to % os.pageSize() == 0);
        const end = to / os.page_size_min_bytes;
        var unit = from / os.page_size_min_bytes + 1;
        // Bounded: each step moves to the next word, at most split_mark_words.
        while (unit < end) {
            const rest = segment.split_marks[unit / 64] >> @intCast(unit % 64);
            if (rest != 0) return @min(to, (unit + @ctz(rest)) * os.page_size_min_bytes);
            unit = (unit / 64 + 1) * 64;
        }
        return to;
    }

    pub fn destroy(segment: *Segment) void {
        assert(segment.kind == .pages);
        assert(segment.isEmpty() and segment.tails_waiting == 0);
        purge.untouched(segment.touchedBytes());
        Heap.movedBlocksUnmapped(segment.moved_in);
        segment_map.remove(segment);
        os.unmap(@ptrCast(@alignCast(segment)), segment_size_bytes);
    }

    /// Bit i: slice i can hold blocks. Every slice, unless a guard page
    /// swallows the last one (under 64 KiB kernel pages).
    pub fn usableSlices() u64 {
        var slices: u64 = std.math.maxInt(u64);
        if (sliceArea(slice_count - 1, 1).len == 0) slices >>= 1;
        if (sliceArea(0, 1).len == 0) slices &= ~@as(u64, 1);
        return slices;
    }

    /// Slices that only one-slice pages may use: 0 (the header) and, with
    /// guard pages, 63 (so a large block never runs into the guard).
    fn edgeSlices() u64 {
        const last: u64 = if (guardBytes() > 0) @as(u64, 1) << (slice_count - 1) else 0;
        return 1 | last;
    }

    pub fn isEmpty(segment: *const Segment) bool {
        return segment.free_mask == usableSlices();
    }

    pub fn hasFreeSlice(segment: *const Segment) bool {
        return segment.free_mask != 0;
    }

    /// Whether the segment has a free run long enough for a medium page.
    pub fn hasFreeRun(segment: *const Segment) bool {
        return runStarts(segment.free_mask & ~edgeSlices(), medium_page_slices) != 0;
    }

    /// Where the blocks of a new page of `slices` slices starting at
    /// `first` lie: its area, less the guard at the end of a medium or
    /// large page, or of a small page on a guarded slice
    /// (`pageGuardBytes`), which follows the result, and less a large
    /// page's front guard (`frontGuardBytes`), which precedes it.
    pub fn blockArea(segment: *Segment, first: usize, slices: usize, kind: Kind) []u8 {
        const area = segment.pageArea(first, slices);
        if (slices == 1) return if (smallPageGuarded(first)) area[0 .. area.len - pageGuardBytes()] else area;
        // Never the last slice (edgeSlices): the span ends on a slice boundary.
        assert(@intFromPtr(area.ptr + area.len) == @intFromPtr(segment) + ((first + slices) << slice_shift));
        const front = if (kind == .large) frontGuardBytes() else 0;
        return area[front .. area.len - pageGuardBytes()];
    }

    /// The guard at the end of the page in use at `page` (medium and large
    /// pages, small ones on guarded slices; hardened), if it has one.
    pub fn pageGuard(segment: *Segment, page: *const Page) ?[]u8 {
        if (!hasGuard(page.index, page.slice_count)) return null;
        return segment.sliceGuard(@as(usize, page.index) + page.slice_count - 1);
    }

    /// Whether a page of `slices` slices at `first` ends in a guard.
    fn hasGuard(first: usize, slices: usize) bool {
        if (pageGuardBytes() == 0) return false;
        return slices > 1 or smallPageGuarded(first);
    }

    /// The memory of the guard that a page ending at slice `i` has: the
    /// slice's last kernel page (guard pages on).
    fn sliceGuard(segment: *Segment, i: usize) []u8 {
        const guard = pageGuardBytes();
        assert(guard > 0 and i < slice_count);
        const end: [*]u8 = @ptrFromInt(@intFromPtr(segment) + ((i + 1) << slice_shift));
        return (end - guard)[0..guard];
    }

    /// Whether a released page leaves its guard closed (`guards_closed`).
    /// Not where a purge decommits (Windows): committing the memory again
    /// would make the guard accessible behind the bit's back.
    const guards_stay_closed = !os.purge_needs_commit;

    /// A page was just set up at `page` (guard pages): guards that earlier
    /// pages left closed inside its area open, with one system call, and
    /// its own guard (medium and large pages, small ones on guarded
    /// slices; and a large page's front guard) closes unless it was left
    /// closed there. A refusal to close
    /// (out of memory for the split mapping, or the kernel's limit on
    /// mappings) leaves the page unguarded, as it would be without the
    /// feature: its blocks never reach the guard's memory. A refusal to
    /// open (out of memory: RLIMIT_DATA does not count inaccessible memory,
    /// and other mappings may have taken its room) returns false, and the
    /// page cannot be used.
    pub fn setUpGuards(segment: *Segment, page: *const Page) bool {
        if (pageGuardBytes() == 0) return true;
        assert(segment.free_mask & spanMask(page.index, page.slice_count) == 0);
        const last = @as(usize, page.index) + page.slice_count - 1;
        const span = spanMask(page.index, page.slice_count);
        const own: u64 = if (hasGuard(page.index, page.slice_count)) @as(u64, 1) << @intCast(last) else 0;
        const own_front: u64 = if (frontGuardBytes() > 0 and Kind.ofClass(page.class) == .large) @as(u64, 1) << @intCast(page.index) else 0;
        const inside = segment.guards_closed & span & ~own;
        const inside_front = segment.front_guards_closed & span & ~own_front;
        if (inside | inside_front != 0) {
            // Between the first and the last closed guard lies only memory
            // that is accessible already. A front guard begins its slice,
            // an end guard ends it.
            var start: usize = std.math.maxInt(usize);
            var end: usize = 0;
            if (inside != 0) {
                start = @intFromPtr(segment.sliceGuard(@ctz(inside)).ptr);
                end = @intFromPtr(segment.sliceGuard(slice_count - 1 - @clz(inside)).ptr) + pageGuardBytes();
            }
            if (inside_front != 0) {
                start = @min(start, @intFromPtr(segment.frontGuard(@ctz(inside_front)).ptr));
                end = @max(end, @intFromPtr(segment.frontGuard(slice_count - 1 - @clz(inside_front)).ptr) + frontGuardBytes());
            }
            if (!os.unguard(@ptrFromInt(start), end - start, pageGuardBytes())) return false;
            segment.guards_closed &= ~inside;
            segment.front_guards_closed &= ~inside_front;
        }
        if (own != 0 and segment.guards_closed & own == 0) {
            const guard = segment.sliceGuard(last);
            if (os.guard(guard.ptr, guard.len, false)) segment.guards_closed |= own;
        }
        // No page with a guard ends in the header's slice or the last.
        assert(segment.guards_closed & edgeSlices() == 0);
        if (own_front != 0 and segment.front_guards_closed & own_front == 0) {
            // As the end guard: a refusal leaves the page without it.
            const guard = segment.frontGuard(page.index);
            assert(@intFromPtr(guard.ptr + guard.len) == @intFromPtr(page.area));
            if (os.guard(guard.ptr, guard.len, false)) segment.front_guards_closed |= own_front;
        }
        return true;
    }

    /// The memory of the front guard of a large page starting at slice
    /// `first`: the first kernel page of its area.
    fn frontGuard(segment: *Segment, first: usize) []u8 {
        const guard = frontGuardBytes();
        assert(guard > 0);
        return segment.pageArea(first, 1)[0..guard];
    }

    /// Whether `address` (in this segment) lies in a closed front guard.
    /// Safe in a signal handler, as check.guardHit is.
    pub fn frontGuardHit(segment: *Segment, address: usize) bool {
        const guard = frontGuardBytes();
        if (guard == 0) return false;
        const slice = (address - @intFromPtr(segment)) >> slice_shift;
        // A snapshot of an owner-written mask (see loadMaskRelaxed): the bit
        // of a guard that faulted was set before the access.
        if (loadMaskRelaxed(&segment.front_guards_closed) & (@as(u64, 1) << @intCast(slice)) == 0) return false;
        const start = @intFromPtr(segment.pageArea(slice, 1).ptr);
        return address >= start and address < start + guard;
    }

    /// The page at `page` goes back to the segment (guard pages): its
    /// guards stay closed (`guards_closed`, `front_guards_closed`), or open
    /// where they cannot stay.
    pub fn releaseGuard(segment: *Segment, page: *const Page) void {
        const front_bit = @as(u64, 1) << @intCast(page.index);
        if (!guards_stay_closed and segment.front_guards_closed & front_bit != 0) {
            openGuards(segment.frontGuard(page.index));
            segment.front_guards_closed &= ~front_bit;
        }
        const guard = segment.pageGuard(page) orelse return;
        if (guards_stay_closed) return;
        const bit = @as(u64, 1) << @intCast(page.index + page.slice_count - 1);
        if (segment.guards_closed & bit == 0) return;
        openGuards(guard);
        segment.guards_closed &= ~bit;
    }

    /// Makes `memory` (guards, and accessible memory between them)
    /// accessible: it becomes free slice memory that any page may use.
    fn openGuards(memory: []u8) void {
        if (!os.unguard(memory.ptr, memory.len, pageGuardBytes()))
            os.fatal("cannot make the guard page at 0x{x} accessible again (out of memory)", .{@intFromPtr(memory.ptr)});
    }

    /// The block area of a page of `slices` slices starting at `first`.
    pub fn pageArea(segment: *Segment, first: usize, slices: usize) []u8 {
        const area = sliceArea(first, slices);
        const base: [*]u8 = @ptrCast(segment);
        return base[area.start..][0..area.len];
    }

    const Area = struct { start: usize, len: usize };

    fn sliceArea(first: usize, slices: usize) Area {
        assert(slices >= 1 and first + slices <= slice_count);
        const start = if (first == 0) firstBlockOffset() else first << slice_shift;
        const end = @min((first + slices) << slice_shift, segment_size_bytes - guardBytes());
        assert(start % block_align_max_bytes == 0);
        return .{ .start = start, .len = end -| start };
    }

    /// Bit i of the result: slices i .. i + n - 1 are all set in `mask`.
    fn runStarts(mask: u64, n: usize) u64 {
        assert(n >= 1 and n <= slice_count);
        var starts = mask;
        var covered: usize = 1;
        // Doubling: after each step a bit stands for a run of `covered`
        // slices; at most log2(64) steps.
        while (covered < n) {
            const step = @min(covered, n - covered);
            starts &= starts >> @intCast(step);
            covered += step;
        }
        return starts;
    }

    /// Bits first .. first + slices - 1.
    fn spanMask(first: usize, slices: usize) u64 {
        assert(slices >= 1 and first + slices <= slice_count);
        const run = if (slices == 64) std.math.maxInt(u64) else (@as(u64, 1) << @intCast(slices)) - 1;
        return run << @intCast(first);
    }

    /// Takes the free run of `slices` slices at slice `first` (picked by
    /// `choose`). Returns its resident bytes (free memory that goes back
    /// into use), or null when out of memory (Windows).
    pub fn takeSpan(segment: *Segment, span: Span) ?usize {
        return segment.claimRun(span.first, span.slices);
    }

    /// How well a chosen run serves a page, best last: a run of purged or
    /// never touched memory, one that starts resident, one resident
    /// throughout (no page faults).
    pub const Fit = enum(u2) { none, fresh, starts_resident, resident };

    pub const Choice = struct {
        first: u6,
        fit: Fit,
        /// Free resident slices the page leaves in the run it goes into.
        slack: u8,
    };

    /// Where a page of `slices` slices would go: the tightest resident run
    /// that holds it (best fit, so that longer runs stay whole for larger
    /// pages), else a run that starts resident, else the lowest. Null if
    /// the segment has no free run that long.
    pub fn choose(segment: *const Segment, slices: u8) ?Choice {
        const allowed = if (slices == 1) segment.free_mask else segment.free_mask & ~edgeSlices();
        const starts = runStarts(allowed, slices);
        if (starts == 0) return null;
        if (tightestRun(allowed & segment.resident_mask, slices)) |run| {
            return .{ .first = run.first, .fit = .resident, .slack = @intCast(run.len - slices) };
        }
        const starting_resident = starts & segment.resident_mask;
        if (starting_resident != 0) return .{ .first = @intCast(@ctz(starting_resident)), .fit = .starts_resident, .slack = 0 };
        return .{ .first = @intCast(@ctz(starts)), .fit = .fresh, .slack = 0 };
    }

    const Run = struct { first: u6, len: usize };

    /// The shortest maximal run of set bits of `mask` at least `n` long,
    /// the lowest of equals.
    fn tightestRun(mask: u64, n: usize) ?Run {
        var best: ?Run = null;
        var rest = mask;
        // Each step clears one maximal run: at most 32.
        while (rest != 0) {
            const first = @ctz(rest);
            const len = @ctz(~(rest >> @intCast(first)));
            rest &= ~spanMask(first, len);
            if (len < n) continue;
            if (best == null or len < best.?.len) best = .{ .first = @intCast(first), .len = len };
            if (len == n) break;
        }
        return best;
    }

    /// Marks the free slices first .. first + slices - 1 as in use. Returns
    /// their resident bytes, or null when out of memory (Windows).
    fn claimRun(segment: *Segment, first: usize, slices: usize) ?usize {
        const bits = spanMask(first, slices);
        assert(segment.free_mask & bits == bits);
        // Where purged memory faults until committed (Windows): commit the
        // run unless all of it is resident. Memory never touched since the
        // segment was mapped is committed already, and committing it again
        // costs one system call.
        if (os.purge_needs_commit and bits & ~segment.resident_mask != 0) {
            const area = segment.pageArea(first, slices);
            if (!os.commit(area.ptr, area.len)) return null;
        }
        segment.free_mask &= ~bits;
        return segment.touchedBytesOf(bits);
    }

    /// Extends the page at slice `first` from `slices` to `new_slices`
    /// slices, if the slices after it are free: a large block growing in
    /// place (Heap.growLarge). Returns the resident bytes of the slices
    /// taken (free memory that goes back into use), or null.
    pub fn growSpan(segment: *Segment, first: usize, slices: usize, new_slices: usize) ?usize {
        assert(new_slices > slices and slices >= 1);
        assert(segment.pages[first].slice_count == slices);
        if (first + new_slices > slice_count) return null;
        const bits = spanMask(first + slices, new_slices - slices);
        if (bits & edgeSlices() != 0 or segment.free_mask & bits != bits) return null;
        const resident = segment.claimRun(first + slices, new_slices - slices) orelse return null;
        for (slices..new_slices) |i| {
            const entry = &segment.pages[first + i];
            assert(entry.index == first + i and entry.first_slice == entry.index);
            entry.first_slice = @intCast(first);
        }
        return resident;
    }

    /// Shrinks the page at slice `first` from `slices` to `new_slices`
    /// slices, freeing the slices after its new end (Heap.shrinkLarge).
    /// Returns their resident bytes (free memory the segment gained).
    pub fn shrinkSpan(segment: *Segment, first: usize, slices: usize, new_slices: usize) usize {
        assert(new_slices < slices and new_slices >= 1);
        assert(segment.pages[first].slice_count == slices);
        const bits = spanMask(first + new_slices, slices - new_slices);
        assert(segment.free_mask & bits == 0);
        for (new_slices..slices) |i| segment.pages[first + i].unlinkSlice();
        segment.free_mask |= bits;
        return segment.touchedBytesOf(bits);
    }

    /// Sets up the slice entries of a page taken with takeSpan: the first
    /// is the page, the others lead back to it.
    pub fn linkSpan(segment: *Segment, span: Span) *Page {
        const page = &segment.pages[span.first];
        assert(page.index == span.first);
        for (1..span.slices) |i| {
            const entry = &segment.pages[span.first + i];
            assert(entry.index == span.first + i and entry.first_slice == entry.index);
            // Read by remote frees and checks of blocks of this page, which
            // are handed out after this.
            entry.first_slice = span.first;
        }
        return page;
    }

    /// Bytes of memory under `slices` (slice 0 starts after the header);
    /// statistics pass the free and resident masks they read.
    pub fn residentBytesOf(slices: u64) usize {
        return residentBytes(slices);
    }

    fn residentBytes(slices: u64) usize {
        const all = @as(usize, @popCount(slices)) * slice_bytes;
        return if (slices & 1 != 0) all - firstBlockOffset() else all;
    }

    /// Granularity of `slice_touched`: the smallest kernel page.
    pub const touch_unit_bytes = 4096;
    const touch_units_per_slice = slice_bytes / touch_unit_bytes;

    comptime {
        assert(touch_units_per_slice <= std.math.maxInt(u8));
    }

    /// Footprint bytes of slice `i` touched `units` far: the header of
    /// slice 0 is not counted (as in `residentBytes`).
    fn touchedSliceBytes(i: usize, units: usize) usize {
        const bytes = units * touch_unit_bytes;
        return if (i == 0) bytes -| firstBlockOffset() else bytes;
    }

    /// Footprint bytes of the touched prefixes of `slices`: what of them is
    /// resident. Free memory is counted so (`dirtyBytes`, and what taking
    /// or freeing slices returns), not by whole slices: a free small page
    /// that its blocks touched 8 KiB far holds 8 KiB, not 64. (Counted
    /// whole, a short-lived thread's twenty barely used pages weighed
    /// 1.3 MiB against the budget and `keep_bytes`, and were purged as
    /// the next thread took its heap, to be faulted in again: thread-churn
    /// without libc, 11 faults per thread.) A free slice's record does not
    /// change while it is free: only pages in use are touched
    /// (markTouched) or trimmed (purgePageTail).
    fn touchedBytesOf(segment: *const Segment, slices: u64) usize {
        var sum: usize = 0;
        var rest = slices & segment.resident_mask;
        // Each step clears one bit: at most 64.
        while (rest != 0) : (rest &= rest - 1) {
            const i = @ctz(rest);
            sum += touchedSliceBytes(i, segment.slice_touched[i]);
        }
        return sum;
    }

    /// Footprint bytes of the segment's touched slices.
    pub fn touchedBytes(segment: *const Segment) usize {
        var sum: usize = 0;
        // Monotonic: owner-written; other threads (statistics) take a snapshot.
        for (&segment.slice_touched, 0..) |*units, i| sum += touchedSliceBytes(i, @atomicLoad(u8, units, .monotonic));
        return sum;
    }

    /// The end (an address) of the memory in slices `first` to `last` that
    /// may hold old contents: the touched prefix of the highest of them
    /// touched since it was last purged (`slice_touched`), or the start of
    /// `first` if none was. Past it the slices hold what the system gave:
    /// zeroes, where purged memory reads back as zeroes (os.purge_zeroes).
    /// Owner only.
    pub fn touchedEnd(segment: *const Segment, first: usize, last: usize) usize {
        assert(first <= last and last < slice_count);
        const base = @intFromPtr(segment);
        // Bounded: one step per slice, highest first.
        var i = last + 1;
        while (i > first) {
            i -= 1;
            const units: usize = segment.slice_touched[i];
            if (units > 0) return base + (i << slice_shift) + units * touch_unit_bytes;
        }
        return base + (first << slice_shift);
    }

    /// Notes that `page` has been touched up to its capacity. Returns the
    /// bytes of it touched for the first time since the slices were purged
    /// (footprint bytes, counted by purge.touched).
    pub fn markTouched(segment: *Segment, page: *const Page) usize {
        const touched = page.touchedBytes();
        if (touched == 0) return 0;
        const start = @intFromPtr(page.area) - @intFromPtr(segment);
        const end = start + touched;
        const first = start >> slice_shift;
        const last = (end - 1) >> slice_shift;
        assert(last < slice_count and last < @as(usize, page.index) + page.slice_count);
        segment.resident_mask |= spanMask(first, last - first + 1);
        var fresh: usize = 0;
        for (first..last + 1) |i| {
            const reach = @min(end - (i << slice_shift), slice_bytes);
            const units = std.math.divCeil(usize, reach, touch_unit_bytes) catch unreachable;
            const before = segment.slice_touched[i];
            if (units <= before) continue;
            segment.slice_touched[i] = @intCast(units);
            fresh += touchedSliceBytes(i, units) - touchedSliceBytes(i, before);
        }
        if (fresh > 0) purge.touched(fresh);
        return fresh;
    }

    /// Gives back the resident memory of a page's slices past what the
    /// page uses: past its block for a large page (a large page is whole
    /// slices and its one block seldom ends on a slice boundary, so up to
    /// 60 KiB of its last slice hold nothing while it lives), past the
    /// blocks it has linked so far for a small or medium page (extendPage
    /// links them a chunk at a time, and a page of a class the heap uses
    /// little may never reach its end). Set up over slices that earlier
    /// pages touched, that memory stayed resident anyway (the compiler
    /// front end: 6 MiB of its peak in large pages once its second pass
    /// reused the first one's memory, 10 MiB in small and medium pages on
    /// two threads). The record stays a touched prefix of each slice. Owner
    /// only. Not where purged memory must be committed again (Windows):
    /// there a slice's record is all or nothing (see claimRun).
    pub fn purgePageTail(segment: *Segment, page: *const Page) void {
        const kept_end = deadTailStart(segment, page) orelse return;
        const last = @as(usize, page.index) + page.slice_count - 1;
        const base: [*]u8 = @ptrCast(segment);
        // A run of purged memory not yet given to the system: slices purged
        // to their end and the next one from its start go in one call.
        var run_start: usize = 0;
        var run_end: usize = 0;
        var untouched: usize = 0;
        // Bounded: one step per slice of the page.
        for (kept_end >> slice_shift..last + 1) |i| {
            const slice_start = i << slice_shift;
            const kept = keptUnits(slice_start, kept_end);
            const units: usize = segment.slice_touched[i];
            if (units <= kept) continue;
            const from = slice_start + kept * touch_unit_bytes;
            const to = slice_start + @min(slice_bytes, std.mem.alignForward(usize, units * touch_unit_bytes, os.pageSize()));
            if (from != run_end) {
                if (run_end > run_start) os.purge(base + run_start, run_end - run_start);
                run_start = from;
            }
            run_end = to;
            untouched += touchedSliceBytes(i, units) - touchedSliceBytes(i, kept);
            segment.slice_touched[i] = @intCast(kept);
            if (kept == 0) segment.resident_mask &= ~(@as(u64, 1) << @intCast(i));
        }
        if (run_end > run_start) os.purge(base + run_start, run_end - run_start);
        assert(untouched > 0);
        purge.untouched(untouched);
    }

    /// Whether `purgePageTail` would give anything back now.
    pub fn hasDeadTail(segment: *const Segment, page: *const Page) bool {
        return segment.deadTailStart(page) != null;
    }

    /// The touch units of the slice at `slice_start` (an offset in the
    /// segment) that lie before `kept_end`.
    fn keptUnits(slice_start: usize, kept_end: usize) usize {
        return @min(touch_units_per_slice, (kept_end -| slice_start) / touch_unit_bytes);
    }

    /// Where (an offset in the segment, at a kernel page boundary) the
    /// memory the page uses ends, when any of its slices is recorded
    /// touched past it: the end of its block (large page) or of the blocks
    /// linked so far (Page.touchedBytes).
    fn deadTailStart(segment: *const Segment, page: *const Page) ?usize {
        if (os.purge_needs_commit) return null;
        // Never slice 0, whose record leaves out the header (multi-slice
        // pages never go there: edgeSlices).
        if (page.index == 0) return null;
        const last = @as(usize, page.index) + page.slice_count - 1;
        // Whole kernel pages, which may be larger than the record's unit.
        const kept_end = std.mem.alignForward(usize, @intFromPtr(page.area) - @intFromPtr(segment) + page.touchedBytes(), os.pageSize());
        // Bounded: one step per slice of the page.
        for (kept_end >> slice_shift..last + 1) |i| {
            if (segment.slice_touched[i] > keptUnits(i << slice_shift, kept_end)) return kept_end;
        }
        return null;
    }

    /// The bytes from `kept` to `moved_end` of a large page's block (offsets
    /// in it, whole kernel pages) went to another block by their kernel
    /// pages (Heap.moveLarge, os.movePages), which left them empty. Gives
    /// back what the page's slices hold past `moved_end`, and records them
    /// as touched up to `kept` only, as a purge would: the block is about to
    /// be freed, and its slices then add only that much free memory. Not
    /// slice 0 (whose record leaves out the header). Owner only.
    pub fn forgetMoved(segment: *Segment, page: *const Page, kept: usize, moved_end: usize) void {
        assert(Kind.ofClass(page.class) == .large and page.index != 0);
        assert(kept % os.pageSize() == 0 and moved_end % os.pageSize() == 0);
        assert(kept < moved_end and moved_end <= page.block_size and kept <= slice_bytes);
        const first: usize = page.index;
        const last = first + page.slice_count - 1;
        const area = @intFromPtr(page.area);
        assert(area == @intFromPtr(segment) + (first << slice_shift));
        const touched_end = std.mem.alignForward(usize, segment.touchedEnd(first, last), os.pageSize());
        if (touched_end > area + moved_end) os.purge(@ptrFromInt(area + moved_end), touched_end - (area + moved_end));
        const bits = spanMask(first, page.slice_count);
        const before = segment.touchedBytesOf(bits);
        // The first slice keeps the block's first `kept` bytes, as far as
        // they were touched.
        const kept_units = @min(segment.slice_touched[first], kept / touch_unit_bytes);
        for (first..last + 1) |i| segment.slice_touched[i] = 0;
        segment.resident_mask &= ~bits;
        if (kept_units > 0) {
            segment.slice_touched[first] = @intCast(kept_units);
            segment.resident_mask |= @as(u64, 1) << @intCast(first);
        }
        purge.untouched(before - touchedSliceBytes(first, kept_units));
    }

    /// Gives a page's slices back to the segment; their memory stays
    /// resident until the heap purges it. Returns the page's resident bytes
    /// (free memory the segment gained).
    pub fn releasePage(segment: *Segment, page: *Page) usize {
        const bits = spanMask(page.index, page.slice_count);
        assert(segment.free_mask & bits == 0);
        assert(page.next == null and page.prev == null);
        for (1..page.slice_count) |i| segment.pages[page.index + i].unlinkSlice();
        segment.free_mask |= bits;
        page.free = null;
        page.used = 0;
        page.flags = .{};
        page.capacity = 0;
        page.free_limit = 0;
        return segment.touchedBytesOf(bits);
    }

    /// The two records of residency agree: a slice counts touched units
    /// exactly when its resident bit is set (both set by markTouched,
    /// both cleared by a purge). Owner only.
    pub fn checkResidency(segment: *const Segment) void {
        for (segment.slice_touched, 0..) |units, i| {
            const resident = segment.resident_mask & (@as(u64, 1) << @intCast(i)) != 0;
            assert(units <= touch_units_per_slice);
            assert(resident == (units > 0));
        }
    }

    /// Resident bytes under free slices: the segment's free memory.
    pub fn dirtyBytes(segment: *const Segment) usize {
        return segment.touchedBytesOf(segment.free_mask);
    }

    /// Returns the resident memory under free slices to the OS, a run of
    /// adjacent slices per system call. Returns the bytes released (as
    /// counted by `dirtyBytes`).
    pub fn purgeDirty(segment: *Segment) usize {
        return segment.purgeDirtyAtLeast(std.math.maxInt(usize));
    }

    /// `purgeDirty`, stopping once at least `bytes` went back (the free
    /// slices above the first few stay resident).
    pub fn purgeDirtyAtLeast(segment: *Segment, bytes: usize) usize {
        var slices = segment.free_mask & segment.resident_mask;
        // Keep the slices past the lowest ones that cover `bytes`.
        var covered: usize = 0;
        var rest = slices;
        // Each step clears one bit: at most 64.
        while (rest != 0 and covered < bytes) {
            const low = rest & (~rest +% 1);
            covered += segment.touchedBytesOf(low);
            rest &= ~low;
        }
        slices &= ~rest;
        const released = segment.touchedBytesOf(slices);
        segment.resident_mask &= ~slices;
        var marked = slices;
        // Each step clears one bit: at most 64.
        while (marked != 0) : (marked &= marked - 1) segment.slice_touched[@ctz(marked)] = 0;
        purge.untouched(released);
        const base: [*]u8 = @ptrCast(segment);
        // Each step clears a run of set bits.
        while (slices != 0) {
            const first = @ctz(slices);
            const run = @ctz(~(slices >> @intCast(first)));
            const area = sliceArea(first, run);
            if (area.len > 0) os.purge(base + area.start, area.len);
            slices &= ~spanMask(first, run);
        }
        return released;
    }
};

/// Which segment-aligned addresses hold a kennel segment header. Two uses:
/// free() in the C library (and hardened) rejects a pointer kennel never
/// returned before touching memory behind it, and statistics (stats.zig)
/// find every segment to read its page metadata. Two levels: a root of 1024
/// leaves, each a bitmap of 65,536 segments (256 GiB of address space),
/// mapped on first use and never freed.
///
/// Readers of headers (`beginRead`/`endRead`) keep listed segments mapped:
/// `remove` waits until no read is in progress. The wait is Dekker's: the
/// remover clears the bit, then looks at the reader count; a reader counts
/// itself, then looks at the bit (all SeqCst). So either the reader sees
/// the bit clear and skips the segment, or the remover sees the reader and
/// waits. Reads are rare (a stats call), so removers almost never wait.
pub const segment_map = struct {
    /// Every mapping ends below 2^address_bits (os.map refuses others).
    const address_bits = os.address_bits;
    const segment_shift: comptime_int = std.math.log2_int(usize, segment_size_bytes);
    /// 64-bit: leaves of 65,536 segments; 32-bit: one leaf of all 1024.
    const leaf_shift = @min(16, address_bits - segment_shift);
    const word_bits = @bitSizeOf(usize);
    const leaf_words = (1 << leaf_shift) / word_bits;
    const root_count = 1 << (address_bits - segment_shift - leaf_shift);
    const Leaf = [leaf_words]std.atomic.Value(usize);

    var root: [root_count]std.atomic.Value(?*Leaf) = @splat(.init(null));

    /// Reads in progress (low `reader_count_bits`) by threads of process
    /// `pid` (the bits above: the pid's low bits, which tell a forked child
    /// from its parent). A forked child sees another pid and ignores
    /// readers that were in its parent: they do not exist in the child.
    var readers: std.atomic.Value(usize) = .init(0);
    /// 32 on 64-bit targets; on 32-bit ones 10 (1023 readers at once; more
    /// wait) under a 22-bit pid (Linux pids stay below 2^22).
    const reader_count_bits = if (word_bits >= 64) 32 else 10;
    const reader_count_mask: usize = (1 << reader_count_bits) - 1;

    fn readerPid() usize {
        const pid: usize = @as(@Int(.unsigned, @bitSizeOf(os.Pid)), @bitCast(os.currentPid()));
        return @as(@Int(.unsigned, word_bits - reader_count_bits), @truncate(pid));
    }

    fn leafOf(index: usize, create_leaf: bool) ?*Leaf {
        const r = index >> leaf_shift;
        if (r >= root_count) return null;
        // Acquire: a leaf is zeroed memory published by the CAS below.
        if (root[r].load(.acquire)) |leaf| return leaf;
        if (!create_leaf) return null;
        const memory = os.map(@sizeOf(Leaf), os.page_size_min_bytes, 0) orelse return null;
        const leaf: *Leaf = @ptrCast(@alignCast(memory));
        // AcqRel: publishes our leaf, or sees the one another thread won with.
        if (root[r].cmpxchgStrong(null, leaf, .acq_rel, .acquire)) |other| {
            os.unmap(memory, @sizeOf(Leaf));
            return other;
        }
        return leaf;
    }

    /// Records a segment (or huge mapping) header; false when out of memory.
    pub fn add(segment: *const Segment) bool {
        const index = @intFromPtr(segment) >> segment_shift;
        const leaf = leafOf(index, true) orelse return false;
        // Release: the mapping exists before a thread that checks the map
        // may read it.
        _ = leaf[(index & ((1 << leaf_shift) - 1)) / word_bits].fetchOr(@as(usize, 1) << @intCast(index % word_bits), .release);
        return true;
    }

    /// Must run before the range is unmapped or moved away (see huge.remap).
    pub fn remove(segment: *const Segment) void {
        const index = @intFromPtr(segment) >> segment_shift;
        const leaf = leafOf(index, false).?;
        // SeqCst: the remover's half of the wait described above. Also, no
        // block in the segment is live, and callers remove before the range
        // goes back to the kernel, so a segment mapped there later (ordered
        // after us by the kernel's mmap lock) sets its bit after we clear ours.
        _ = leaf[(index & ((1 << leaf_shift) - 1)) / word_bits].fetchAnd(~(@as(usize, 1) << @intCast(index % word_bits)), .seq_cst);
        waitForReaders();
    }

    /// Whether `address` is the start of a live segment or huge mapping.
    pub fn contains(address: usize) bool {
        if (address % segment_size_bytes != 0) return false;
        const index = address >> segment_shift;
        const leaf = leafOf(index, false) orelse return false;
        // SeqCst: pairs with the release in `add`, and is the reader's half
        // of the wait in `remove`.
        return leaf[(index & ((1 << leaf_shift) - 1)) / word_bits].load(.seq_cst) & (@as(usize, 1) << @intCast(index % word_bits)) != 0;
    }

    /// Starts reading the headers of listed segments: until `endRead`, a
    /// segment that `contains` lists stays mapped.
    pub fn beginRead() void {
        const pid = readerPid();
        // Monotonic: seeds the CAS loop.
        var old = readers.load(.monotonic);
        // Bounded by other readers' updates; a full count waits for their
        // walks (microseconds each).
        while (true) {
            if (old >> reader_count_bits == pid and old & reader_count_mask == reader_count_mask) {
                os.yieldThread();
                // Monotonic: as above.
                old = readers.load(.monotonic);
                continue;
            }
            const new = if (old >> reader_count_bits == pid) old + 1 else pid << reader_count_bits | 1;
            // SeqCst: the reader's half of the wait in `remove`.
            old = readers.cmpxchgWeak(old, new, .seq_cst, .monotonic) orelse return;
        }
    }

    pub fn endRead() void {
        // Release: our reads of headers happen before a remover unmaps.
        _ = readers.fetchSub(1, .release);
    }

    fn waitForReaders() void {
        // SeqCst: the remover's half of the wait; acquire for endRead.
        var r = readers.load(.seq_cst);
        if (r & reader_count_mask == 0) return;
        const pid = readerPid();
        // Bounded by the readers' walks, which take microseconds.
        while (r & reader_count_mask != 0 and r >> reader_count_bits == pid) : (r = readers.load(.seq_cst)) os.yieldThread();
    }

    /// Calls `visit(context, address)` for every listed segment, in address
    /// order. The caller holds a read (beginRead).
    pub fn forEach(context: anytype, comptime visit: fn (@TypeOf(context), usize) void) void {
        for (&root, 0..) |*slot, r| {
            // Acquire: as in leafOf.
            const leaf = slot.load(.acquire) orelse continue;
            for (leaf, 0..) |*word, w| {
                // SeqCst: as in `contains`.
                var bits = word.load(.seq_cst);
                while (bits != 0) : (bits &= bits - 1) {
                    const index = (r << leaf_shift) | (w * word_bits + @ctz(bits));
                    visit(context, index << segment_shift);
                }
            }
        }
    }
};

/// An intrusive list of segments through the link field `field`.
pub fn SegmentList(comptime field: []const u8) type {
    return struct {
        const List = @This();
        first: ?*Segment = null,
        count: usize = 0,

        pub fn push(list: *List, segment: *Segment) void {
            const link = &@field(segment, field);
            assert(link.next == null and link.prev == null and list.first != segment);
            link.next = list.first;
            if (list.first) |f| @field(f, field).prev = segment;
            list.first = segment;
            list.count += 1;
        }

        pub fn remove(list: *List, segment: *Segment) void {
            assert(list.count > 0);
            const link = &@field(segment, field);
            if (link.prev) |p| @field(p, field).next = link.next else {
                assert(list.first == segment);
                list.first = link.next;
            }
            if (link.next) |n| @field(n, field).prev = link.prev;
            link.* = .{};
            list.count -= 1;
        }

        pub fn pop(list: *List) ?*Segment {
            const segment = list.first orelse return null;
            list.remove(segment);
            return segment;
        }
    };
}

test "runs of free slices" {
    try std.testing.expectEqual(@as(u64, 0b0001), Segment.runStarts(0b1111, 4));
    try std.testing.expectEqual(@as(u64, 0b0011), Segment.runStarts(0b1111, 3));
    try std.testing.expectEqual(@as(u64, 0), Segment.runStarts(0b1110111, 4));
    try std.testing.expectEqual(@as(u64, 1) << 4, Segment.runStarts(0xff0, 8));
    try std.testing.expectEqual(@as(u64, 1), Segment.runStarts(std.math.maxInt(u64), 64));
    for (1..65) |n| {
        const starts = Segment.runStarts(std.math.maxInt(u64), n);
        try std.testing.expectEqual(@as(usize, 65 - n), @popCount(starts));
    }
}

test "the tightest run that holds a page" {
    // Runs of 2 (slices 0-1), 3 (4-6) and 1 (9).
    const mask: u64 = 0b10_0111_0011;
    try std.testing.expectEqual(Segment.Run{ .first = 9, .len = 1 }, Segment.tightestRun(mask, 1).?);
    try std.testing.expectEqual(Segment.Run{ .first = 0, .len = 2 }, Segment.tightestRun(mask, 2).?);
    try std.testing.expectEqual(Segment.Run{ .first = 4, .len = 3 }, Segment.tightestRun(mask, 3).?);
    try std.testing.expectEqual(@as(?Segment.Run, null), Segment.tightestRun(mask, 4));
    try std.testing.expectEqual(Segment.Run{ .first = 0, .len = 64 }, Segment.tightestRun(std.math.maxInt(u64), 16).?);
}

test "slice areas cover the segment and stay 4 KiB aligned" {
    var end: usize = Segment.firstBlockOffset();
    for (0..slice_count) |i| {
        const area = Segment.sliceArea(i, 1);
        try std.testing.expectEqual(end, area.start);
        end = area.start + area.len;
    }
    try std.testing.expectEqual(@as(usize, segment_size_bytes - guardBytes()), end);
    try std.testing.expectEqual(@as(usize, medium_page_bytes), Segment.sliceArea(8, medium_page_slices).len);
}

test "ofPtr finds the header for block starts" {
    const base: usize = 7 * segment_size_bytes;
    try std.testing.expectEqual(base, @intFromPtr(Segment.ofPtr(@ptrFromInt(base + Segment.header_bytes))));
    try std.testing.expectEqual(base, @intFromPtr(Segment.ofPtr(@ptrFromInt(base + segment_size_bytes - 8))));
    // A huge block aligned to a segment or more starts one segment after its header.
    try std.testing.expectEqual(base, @intFromPtr(Segment.ofPtr(@ptrFromInt(base + segment_size_bytes))));
}
