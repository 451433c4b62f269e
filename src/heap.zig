//! A heap: the pages and segments of one thread, and the allocation and free
//! paths that use them.
//!
//! `alloc` and `free` below are the fast paths: a few loads and stores on
//! memory only the owning thread touches, no lock, no atomic read-modify-
//! write. Everything else (finding or making a page, frees from other
//! threads, returning memory) lives in the functions after them.
//!
//! A heap keeps, per size class, a queue of pages that may have free blocks;
//! the first page of a queue is the one allocation pops from. Pages found
//! exhausted move to the `full` queue, so the search never revisits them.
//! For small sizes `pages_direct` maps the request size in words straight to
//! the first page of its queue, so the fast path needs no class computation.
//!
//! Remote frees reach the owner through notices: the first remote free into
//! a page with an empty thread-free list sets the page's bit in its
//! segment's `page_notice` and the segment's group bit in the owner's
//! `notice_groups`. On its slow path the owner visits exactly the flagged
//! pages: it collects them, brings full ones back, and frees empty ones. So
//! memory freed by other threads is reused or returned wherever the page
//! sits, without scanning.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const size_class = @import("size_class.zig");
const page_mod = @import("page.zig");
const Page = page_mod.Page;
const Block = page_mod.Block;
const PageQueue = page_mod.PageQueue;
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const SegmentList = segment_mod.SegmentList;
const huge = @import("huge.zig");
const thread = @import("thread.zig");
const config = @import("config.zig");
const purge = @import("purge.zig");
const secure = @import("secure.zig");
const quarantine = @import("quarantine.zig");
const pool = @import("pool.zig");

/// Requests up to this size (and alignment) take the direct fast path.
pub const direct_size_max_bytes = 1024;
const direct_count = direct_size_max_bytes / size_class.word_bytes + 1;

/// Touched memory of empty pages kept as their size's only page (so that
/// allocating and freeing one block in a loop does not free and set up the
/// page each time), at most.
pub const retain_bytes_max = 1024 * 1024;

/// Pages retired since a page was kept, after which a page that does not
/// fit the budget may take its place (`makeRoomToRetain`). A program that
/// moves on to other sizes leaves the pages it kept for the old ones
/// behind; one that alternates between two sizes keeps the first it kept.
const retain_age_min_retires = 64;

/// Empty segments a heap keeps mapped at most. Fewer in a 32-bit address
/// space, where 4 GiB hold only 1024 segments: spares keep address space
/// from other threads even when their memory is purged.
pub const spare_count_max = if (@bitSizeOf(usize) >= 64) 16 else 4;

/// Whether a heap emptied by an absorber keeps an empty segment for its
/// next thread (see absorb): where address space is plentiful.
const shells_keep_segments = @bitSizeOf(usize) >= 64;

/// Segments are spread over this many lists per heap by address bits: one
/// per bit of the `notice_groups` word.
const segment_group_count = @bitSizeOf(usize);
const Group = std.math.Log2Int(usize);

fn segmentGroup(segment: *const Segment) Group {
    return @truncate(@intFromPtr(segment) / segment_mod.segment_size_bytes);
}

/// The page `pages_direct` points at when a size has no page: never has free
/// blocks, so the fast path falls through to the slow path.
var page_empty: Page = .{};

/// A page kept as its class's only page (Heap.retained_at).
const Retained = struct {
    /// Heap.retire_tick when it was kept.
    tick: u32 = 0,
    /// Its touched bytes then, counted in Heap.retained_bytes.
    bytes: u32 = 0,
};

pub const Heap = struct {
    // ---- Owner only; the fast paths read the first field. ----
    pages_direct: [direct_count]*Page,
    /// The fast C free's segment (config.fused_free, c.zig): a segment of
    /// pages this heap owns that a free found in the segment map last, so
    /// that the next frees into it skip the map and the owner check.
    /// `no_segment` when none; removeSegment clears it, so it always names
    /// a segment in this heap's lists.
    free_segment: if (config.fused_free) usize else void,
    queues: [size_class.class_count]PageQueue,
    /// Pages found without free blocks (flag `in_full` set).
    full: PageQueue,
    /// Every small, medium and large segment this heap owns, by group (see
    /// `segmentGroup`), so that notices need only scan one group.
    segments: [segment_group_count]SegmentList("all"),
    segment_count: usize,
    /// Segments with at least one free slice, not empty: where new pages
    /// come from first, the most recently freed first.
    with_free: SegmentList("with_free"),
    /// Those of them with a free run long enough for a medium page.
    with_run: SegmentList("with_run"),
    /// Empty segments kept mapped (their memory purged past the dirty
    /// budget), so a heap that frees pages and allocates again, or passes
    /// from an ended thread to a new one, does not unmap and map.
    spares: SegmentList("all"),
    /// Freed huge mappings kept for reuse.
    huge_cache: huge.Cache,
    /// Touched bytes of free pages, spares and cached huge mappings that may
    /// be resident: the heap's free memory (see purge.zig).
    dirty_bytes: usize,
    /// Low-water mark of `dirty_bytes` in the current decay period.
    dirty_low_bytes: usize,
    /// `dirty_bytes` as last added to the process-wide total (purge.zig).
    dirty_reported_bytes: usize,
    /// The process-wide pressure sum this heap last paid up to (purge.zig).
    pressure_seen_bytes: usize,
    /// When the current decay period ends; 0 when none runs.
    decay_due_ns: u64,
    /// When free memory past the budget goes back: cached huge mappings
    /// unless a huge allocation took them, or what the heap's own frees
    /// left (purge.zig, rule 4); 0 when none wait.
    budget_due_ns: u64,
    /// Set while a free of the owning thread retires a page: free memory
    /// that grows then may wait past the budget (purge.zig, rule 4).
    freeing: bool,
    /// Set while the heap collects the blocks other threads freed into its
    /// pages (`processNotices`): free memory that grows then may wait past
    /// the budget for `purge.budget_grace_ns` (purge.zig, rule 4).
    collecting: bool,
    /// Whether the wait of `budget_due_ns` began with the heap's own frees:
    /// free memory that grows during it, by any means, waits with it.
    budget_wait_own: bool,
    /// Decay periods ended so far: free memory stamped with an earlier one
    /// (Segment.freed_period) is cold, and purges take it first.
    period_index: u32,
    /// Classes whose only page was kept when it became empty (bit = class);
    /// the next purge frees those still empty.
    retained_classes: u128,
    /// Touched bytes of those pages when they were kept (an estimate: a kept
    /// page may be used again meanwhile).
    retained_bytes: usize,
    /// Pages retired so far (`retirePage`), modulo 2^32: the clock of
    /// `retained_at`.
    retire_tick: u32,
    /// For each class in `retained_classes`: when its page was kept, and its
    /// share of `retained_bytes`.
    retained_at: [size_class.class_count]Retained,
    /// Remote frees until this thread next probes whether the owner of the
    /// block it frees is still alive, and the count it restarts from
    /// (thread.absorbIfOrphaned).
    remote_frees_until_probe: u32,
    remote_frees_per_probe: u32,
    /// A heap this thread freed into while it was orphaned too recently to
    /// absorb (thread.absorbIfOrphaned): absorbed at a slow path once the
    /// grace is over, if no new thread took it (thread.absorbNoted).
    orphan_noted: ?*Heap,
    /// When the heap's thread gave it up (thread.zig), on os.nowNanoseconds.
    orphaned_ns: u64,
    /// Offset index for the next huge block (huge.zig).
    huge_color: u32,
    /// The large page `installPage` set up last, and the end (an address)
    /// of the memory in it that may hold old contents (Segment.touchedEnd):
    /// past it the page's slices were never touched or were purged since,
    /// so they read as zeroes and `allocZeroed` clears only up to it.
    fresh_page: if (knows_zeroes) ?*Page else void,
    fresh_dirty_end: if (knows_zeroes) usize else void,
    /// Pages of this heap's segments whose dead tails wait for the
    /// decay period's end (`waitTail`, Segment.tails_waiting).
    tail_count: u32,
    /// Generator state for random block order and the quarantine
    /// (hardened; never 0 there).
    random: u64,
    /// Freed blocks waiting to be reused (hardened; see quarantine.zig).
    quarantine: quarantine.Quarantine,
    /// Bytes requested by this heap's thread minus bytes it freed (wrapping;
    /// config.count_requested only). Summed over heaps by stats.zig.
    requested_bytes: usize,

    // ---- Read and written by other threads (thread.zig). ----
    /// Thread ownership word; see thread.zig.
    owner: std.atomic.Value(thread.OwnerWord) align(std.atomic.cache_line),
    /// 32-bit only: the owning thread's id, beside the word (thread.zig).
    owner_tid: if (thread.tid_in_word) void else std.atomic.Value(os.Tid),
    /// Process the owner word refers to (detects fork children).
    pid: std.atomic.Value(os.Pid),
    /// Bit g: some segment of group g has `page_notice` bits set.
    notice_groups: std.atomic.Value(usize),
    /// The heap's place in the registry of heaps (thread.zig).
    entry: thread.Entry,

    pub const init_value: Heap = .{
        .pages_direct = @splat(&page_empty),
        .queues = @splat(.{}),
        .full = .{},
        .segments = @splat(.{}),
        .segment_count = 0,
        .with_free = .{},
        .with_run = .{},
        .spares = .{},
        .huge_cache = .{},
        .dirty_bytes = 0,
        .dirty_low_bytes = 0,
        .dirty_reported_bytes = 0,
        .pressure_seen_bytes = 0,
        .decay_due_ns = 0,
        .budget_due_ns = 0,
        .freeing = false,
        .collecting = false,
        .budget_wait_own = false,
        .period_index = 0,
        .retained_classes = 0,
        .retained_bytes = 0,
        .retire_tick = 0,
        .retained_at = @splat(.{}),
        .remote_frees_until_probe = 0,
        .remote_frees_per_probe = 0,
        .orphan_noted = null,
        .orphaned_ns = 0,
        .huge_color = 0,
        .fresh_page = if (knows_zeroes) null else {},
        .fresh_dirty_end = if (knows_zeroes) 0 else {},
        .tail_count = 0,
        .random = 0,
        .quarantine = .{},
        .requested_bytes = 0,
        .free_segment = if (config.fused_free) no_segment else {},
        .owner = .init(0),
        .owner_tid = if (thread.tid_in_word) {} else .init(0),
        .pid = .init(0),
        .notice_groups = .init(0),
        .entry = .{},
    };

    /// `free_segment` when it names none. With 64-bit words, 2^63: aligned
    /// like a segment, and under it lies no pointer a program holds (it is
    /// no user-space address on x86_64 or aarch64, and null is far away).
    /// With 32-bit words every aligned address may be the program's: 1,
    /// not aligned, the segment of no pointer.
    pub const no_segment_is_aligned = @bitSizeOf(usize) >= 64;
    pub const no_segment: usize = if (no_segment_is_aligned) 1 << (@bitSizeOf(usize) - 1) else 1;

    /// The heap of threads that have not allocated yet. It owns nothing, so
    /// its fast paths always fall through to the slow path, which gives the
    /// thread a real heap.
    pub var empty: Heap = init_value;

    // ==== Fast paths ====================================================

    /// Allocates `len` bytes aligned to `alignment` (a power of two).
    pub inline fn alloc(len: usize, alignment: usize) ?[*]u8 {
        const heap = thread.current();
        // Both at most direct_size_max_bytes (len == 0 wraps and goes slow).
        if (((len -% 1) | (alignment - 1)) < direct_size_max_bytes) {
            // Rounding to the alignment first makes the block a multiple of
            // it (size_class.zig), and every block sits at such a multiple.
            const size = std.mem.alignForward(usize, len, alignment);
            const page = heap.pages_direct[(size + size_class.word_bytes - 1) / size_class.word_bytes];
            if (page.free) |block| {
                @branchHint(.likely);
                page.free = page.nextFree(block);
                page.addUsed(.up);
                return @ptrCast(block);
            }
        }
        return heap.allocSlow(len, alignment);
    }

    /// The C library's fast malloc (c.zig): a pop from the page of a size
    /// up to direct_size_max_bytes, aligned to `alignment`, or null for
    /// `allocSlow`. Size 0 picks entry 0 of pages_direct, which is always
    /// the empty page (updateDirect fills entries from 1): so one compare
    /// sends both it and large sizes to the slow path.
    pub inline fn allocDirect(heap: *Heap, len: usize, comptime alignment: usize) ?[*]u8 {
        comptime assert(alignment >= size_class.word_bytes and alignment <= direct_size_max_bytes);
        if (len > direct_size_max_bytes) return null;
        const page = heap.pages_direct[std.mem.alignForward(usize, len, alignment) / size_class.word_bytes];
        const block = page.free orelse return null;
        page.free = page.nextFree(block);
        page.addUsed(.up);
        return @ptrCast(block);
    }

    /// Frees a pointer kennel returned, from any thread.
    pub inline fn free(ptr: [*]u8) void {
        const segment = Segment.ofPtr(ptr);
        freeInPage(segment, segment.pageOf(ptr), ptr);
    }

    /// `free`, where the caller looked up the block's segment and page.
    pub inline fn freeInPage(segment: *Segment, page: *Page, ptr: [*]u8) void {
        assert(segment == Segment.ofPtr(ptr) and (segment.kind == .huge or page == segment.pageOf(ptr)));
        const heap = thread.current();
        if (segment.ownerRelaxed() == heap) {
            @branchHint(.likely);
            if (@as(u8, @bitCast(page.flags)) == 0) {
                @branchHint(.likely);
                return heap.freeUnflagged(page, @ptrCast(@alignCast(ptr)));
            }
            return heap.freeLocalFlagged(page, ptr);
        }
        return freeRemote(segment, page, ptr);
    }

    /// A local free into a page of this heap without flags: a push.
    pub inline fn freeUnflagged(heap: *Heap, page: *Page, block: *Block) void {
        assert(@as(u8, @bitCast(page.flags)) == 0);
        // (Guarded: the atomic load would stay in a release build.)
        if (std.debug.runtime_safety) assert(Segment.ofPtr(block).ownerRelaxed() == heap);
        block.setNext(page.free);
        page.free = block;
        page.addUsed(.down);
        // Monotonic: the owner reads its own store (x86 compares in memory).
        if (@atomicLoad(page_mod.BlockCount, &page.used, .monotonic) == 0 and !page.retained) {
            @branchHint(.unlikely);
            heap.retireAfterFree(page);
        }
    }

    /// The C library's free after the generic checks (c.zig): remembers
    /// the block's segment for the fast checks of the next frees when this
    /// heap owns it, then frees.
    pub fn freeRemembering(ptr: [*]u8) void {
        comptime assert(config.fused_free);
        const segment = Segment.ofPtr(ptr);
        const heap = thread.current();
        // Before the free, which may release the segment (and so clear
        // the field again in removeSegment).
        if (segment.kind == .pages and segment.ownerRelaxed() == heap) heap.free_segment = @intFromPtr(segment);
        free(ptr);
    }

    /// Whether a large page's memory past what its slices held before reads
    /// as zeroes (`fresh_page`): where purged memory reads back as zeroes,
    /// and nothing but the program writes into blocks (no hardening, fill
    /// or valgrind, whose writes and checks the plain clearing serves).
    const knows_zeroes = os.purge_zeroes and !config.secure and !config.fill_freed_available and !config.valgrind;

    /// Like `alloc`, with the first `len` bytes zero. Fresh huge mappings are
    /// zero already, and so is the part of a large block set up on slices
    /// never touched or purged since: only memory that may have been used
    /// is cleared, so a large `calloc` the program fills sparsely stays as
    /// small in RSS as with an allocator that maps it afresh.
    pub fn allocZeroed(len: usize, alignment: usize) ?[*]u8 {
        if (len > size_class.block_size_max_bytes and alignment <= segment_mod.block_align_max_bytes) {
            const current = thread.current();
            const heap = if (current == &empty) thread.initCurrent() orelse return null else current;
            return huge.allocZeroed(heap, len, alignment);
        }
        if (knows_zeroes and len > segment_mod.medium_block_max_bytes) {
            const current = thread.current();
            const heap = if (current == &empty) thread.initCurrent() orelse return null else current;
            heap.fresh_page = null;
            const ptr = alloc(len, alignment) orelse return null;
            // Whether this allocation set up the block's page (it may also
            // have come from a page kept as its class's only one, or, over-
            // aligned, from a huge mapping: then all of it is cleared).
            var dirty_end = @intFromPtr(ptr) + len;
            if (heap.fresh_page) |fresh| {
                if (fresh == Segment.ofPtr(ptr).pageOf(ptr)) {
                    // The page's free-list link sat in the block's first words.
                    dirty_end = @max(heap.fresh_dirty_end, @intFromPtr(fresh.area) + 2 * size_class.word_bytes);
                }
            }
            heap.fresh_page = null;
            @memset(ptr[0..@min(len, dirty_end -| @intFromPtr(ptr))], 0);
            return ptr;
        }
        const ptr = alloc(len, alignment) orelse return null;
        @memset(ptr[0..len], 0);
        return ptr;
    }

    // ==== Allocation, slow paths ========================================

    /// Sizes above the direct range: compute the class and pop from its
    /// first page. The heap may still be `empty` (its queues are empty, so
    /// that ends in allocGeneric, which sets the thread up).
    pub noinline fn allocSlow(heap: *Heap, len: usize, alignment: usize) ?[*]u8 {
        if (len -% 1 < size_class.block_size_max_bytes and alignment <= segment_mod.block_align_max_bytes) {
            const size = std.mem.alignForward(usize, len, alignment);
            if (size <= size_class.block_size_max_bytes) {
                const class = size_class.ofSize(size);
                if (heap.queues[class].first) |page| {
                    if (page.free != null) return page.pop();
                }
                return heap.allocGeneric(class);
            }
        }
        return heap.allocRare(len, alignment);
    }

    /// Zero bytes, huge sizes and alignments above 4 KiB.
    noinline fn allocRare(heap_or_empty: *Heap, len: usize, alignment: usize) ?[*]u8 {
        const heap = if (heap_or_empty == &empty) thread.initCurrent() orelse return null else heap_or_empty;
        const len_nonzero = @max(len, 1);
        if (alignment > segment_mod.block_align_max_bytes) return heap.allocOverAligned(len_nonzero, alignment);
        const size = std.math.add(usize, len_nonzero, alignment - 1) catch return huge.alloc(heap, len_nonzero, alignment);
        if (size & ~(alignment - 1) > size_class.block_size_max_bytes) return huge.alloc(heap, len_nonzero, alignment);
        return heap.allocClass(size_class.ofSize(size & ~(alignment - 1)));
    }

    fn allocClass(heap: *Heap, class: size_class.Class) ?[*]u8 {
        if (heap.queues[class].first) |page| {
            if (page.free != null) return page.pop();
        }
        return heap.allocGeneric(class);
    }

    /// The first page of the class has no free block: collect, search,
    /// extend, or take a new page. Also where a thread gets its heap.
    noinline fn allocGeneric(heap_or_empty: *Heap, class: size_class.Class) ?[*]u8 {
        const heap = if (heap_or_empty == &empty) thread.initCurrent() orelse return null else heap_or_empty;
        if (!builtin.single_threaded) thread.absorbNoted(heap);
        heap.processNotices();
        purge.decayIfDue(heap);
        const page = heap.findPage(class) orelse return null;
        return page.pop();
    }

    /// A request aligned to more than blocks guarantee: over-allocate within
    /// a class and hand out the aligned address inside the block.
    fn allocOverAligned(heap: *Heap, len: usize, alignment: usize) ?[*]u8 {
        // Blocks start at multiples of 8, so an aligned run of `len` bytes
        // starts within the first `alignment - 8` bytes of the block.
        const padded = std.math.add(usize, len, alignment - size_class.word_bytes) catch return null;
        if (padded > size_class.block_size_max_bytes) return huge.alloc(heap, len, alignment);
        const block = heap.allocClass(size_class.ofSize(padded)) orelse return null;
        const page = Segment.ofPtr(block).pageOf(block);
        if (!page.flags.has_aligned) page.setFlags(.{ .in_full = page.flags.in_full, .has_aligned = true });
        const aligned = std.mem.alignForward(usize, @intFromPtr(block), alignment);
        assert(aligned + len <= @intFromPtr(block) + page.block_size);
        return @ptrFromInt(aligned);
    }

    /// A page of `class` with a free block, or null when out of memory.
    fn findPage(heap: *Heap, class: size_class.Class) ?*Page {
        if (heap.findPageInQueue(class)) |page| return page;
        const slices = segment_mod.pageSlices(class);
        if (heap.takeFreeSpan(slices)) |page| return heap.installPage(page, class);
        // Before mapping fresh memory, reuse what dead threads left behind.
        if (!builtin.single_threaded and thread.absorbAnyOrphan(heap)) {
            heap.processNotices();
            if (heap.findPageInQueue(class)) |page| return page;
            if (heap.takeFreeSpan(slices)) |page| return heap.installPage(page, class);
        }
        const segment = heap.takePooled(.any) orelse Segment.create(heap) orelse
            (if (heap.releaseMappings()) Segment.create(heap) else null) orelse return null;
        heap.addSegment(segment);
        // An empty segment holds a run for any page.
        const choice = segment.choose(slices) orelse unreachable;
        return heap.installPage(heap.takeSpanFrom(segment, .{ .first = choice.first, .slices = slices }) orelse return null, class);
    }

    /// How far past an exhausted first page `findPageInQueue` looks for
    /// another page's holes before extending it.
    const hole_scan_pages_max = 8;

    fn findPageInQueue(heap: *Heap, class: size_class.Class) ?*Page {
        const queue = &heap.queues[class];
        // Each step returns or moves the first page to the full queue, so
        // the queue's length bounds the loop.
        var steps = queue.count;
        while (steps > 0) : (steps -= 1) {
            const page = queue.first.?;
            if (page.free == null) page.collect();
            if (page.free != null) return page;
            if (page.capacity < page.reserved) {
                if (holdsLocalFrees(page.next, hole_scan_pages_max)) |other| {
                    // No longer first, and in use again: as in parkFull,
                    // retained no more (releaseRetained looks at first
                    // pages only).
                    page.retained = false;
                    heap.queueRemove(other);
                    heap.queuePushFront(other);
                    return other;
                }
                heap.extendPage(page);
                return page;
            }
            if (!heap.parkFull(page)) return page;
        }
        return null;
    }

    /// The first of at most `pages_max` pages, from `start` on, whose own
    /// free list holds blocks. Extending a page touches memory for the first
    /// time (a fault, and resident from then on), while these holes are
    /// resident already: without the look, a class whose live blocks just
    /// outgrow one page extends its newest page to the end while the older
    /// page's holes wait, and holds two pages' memory for one page's blocks
    /// and a few. Only the owner's frees count: blocks other threads freed
    /// come in batches whose lifetimes ended together, and a page they are
    /// emptying is better left to empty (and go back) than refilled.
    fn holdsLocalFrees(start: ?*Page, comptime pages_max: u32) ?*Page {
        var next = start;
        for (0..pages_max) |_| {
            const page = next orelse return null;
            if (page.free != null) return page;
            next = page.next;
        }
        return null;
    }

    /// Moves an exhausted page to the full queue, unless remote frees arrive
    /// meanwhile; then collects them and returns false.
    fn parkFull(heap: *Heap, page: *Page) bool {
        assert(page.free == null and !page.flags.in_full);
        // The flag first, then a look at the stack (both SeqCst): a remote
        // free either sees the flag and announces the page, or lands before
        // our look and we take it now. See Page.pushThreadFree.
        page.setFlags(.{ .in_full = true, .has_aligned = page.flags.has_aligned });
        if (page.hasThreadFrees()) {
            page.setFlags(.{ .in_full = false, .has_aligned = page.flags.has_aligned });
            page.collect();
            return false;
        }
        heap.queueRemove(page);
        heap.full.pushBack(page);
        // A retained page in use again is retained no more (the next time it
        // empties it retires anew); only a class's first page carries it.
        page.retained = false;
        return true;
    }

    /// Sets up a page just taken (`takeSpanFrom`) for `class` and puts it
    /// first in its queue. Null when out of memory: the page went back.
    fn installPage(heap: *Heap, page: *Page, class: size_class.Class) ?*Page {
        const segment = Segment.ofPtr(page);
        const slices = segment_mod.pageSlices(class);
        const area = segment.blockArea(page.index, slices, segment_mod.Kind.ofClass(class));
        page.init(class, slices, area.ptr, area.len);
        if (!segment.setUpGuards(page)) {
            _ = heap.releasePage(segment, page);
            return null;
        }
        // Hardened: no block of the page is live or was handed out (see
        // Segment.live_map_bytes).
        if (Segment.has_block_map) @memset(@as(*[Segment.live_bits_per_page / 8]u8, @ptrCast(segment.liveWords(page.index))), 0);
        if (knows_zeroes and segment_mod.Kind.ofClass(class) == .large) {
            // Before extendPage marks the block touched (see allocZeroed).
            heap.fresh_page = page;
            heap.fresh_dirty_end = segment.touchedEnd(page.index, page.index + slices - 1);
        }
        heap.extendPage(page);
        heap.waitTail(segment, page);
        heap.queuePushFront(page);
        return page;
    }

    /// The dead tail of a page just set up (Segment.purgePageTail: what its
    /// slices hold past its block, or past the blocks it has linked so far)
    /// goes back at the end of the decay period after the one it was set
    /// up in, as far as the page still does not use it then; a page freed
    /// before that leaves it to the next page set up over those slices.
    /// Purged at set-up, a large page's tail was faulted in again by the
    /// next page there, moments later where large blocks live for
    /// milliseconds. slot_swap (2 threads, blocks up
    /// to 200 KB, ~300 large ones live, each for ~3 ms; 5 interleaved
    /// runs): purged at set-up, 239k faults, 1.12 s system time, 0.99 s
    /// wall; at the end of their own period (young pages purged every
    /// period), 87k, 0.30 s, 0.59 s; after a whole period, 62k, 0.22 s,
    /// 0.56 s (glibc 29k, 0.13 s, 0.51 s). Peak RSS 85 -> 92 MiB there,
    /// +2 to 3% in the compiler front end.
    fn waitTail(heap: *Heap, segment: *Segment, page: *const Page) void {
        if (!segment.hasDeadTail(page)) return;
        const bit = @as(u64, 1) << @intCast(page.index);
        assert(segment.tails_waiting & bit == 0);
        segment.tails_waiting |= bit;
        heap.tail_count += 1;
        purge.schedule(heap);
    }

    /// The waiting tails go back: at a decay period's end those that were
    /// waiting at the last one already (`.aged`; the others age), or all of
    /// them when the heap's thread ends or trims. Bounded by the heap's
    /// segments.
    pub fn purgeWaitingTails(heap: *Heap, which: enum { aged, all }) void {
        if (heap.tail_count == 0) return;
        for (&heap.segments) |*list| {
            var next = list.first;
            while (next) |segment| : (next = segment.all.next) {
                assert(segment.tails_old & ~segment.tails_waiting == 0);
                var bits = if (which == .aged) segment.tails_old else segment.tails_waiting;
                segment.tails_waiting &= ~bits;
                segment.tails_old = segment.tails_waiting;
                while (bits != 0) : (bits &= bits - 1) {
                    const page = &segment.pages[@ctz(bits)];
                    // releasePage clears the bit: the page is in use.
                    assert(page.index == @ctz(bits));
                    segment.purgePageTail(page);
                    heap.tail_count -= 1;
                }
            }
        }
        assert(which == .aged or heap.tail_count == 0);
    }

    /// Links the page's next chunk of fresh blocks, in random order when
    /// hardened.
    fn extendPage(heap: *Heap, page: *Page) void {
        const old_capacity = page.capacity;
        const keeps_tails = secure.keepsTailCanary(page.block_size);
        // The first block of such a page is never handed out: its canary
        // guards the second against underflows (secure.keepsTailCanary).
        if (keeps_tails and old_capacity == 0) page.capacity = 1;
        if (config.hardening.randomize) page.extendShuffled(&heap.random) else page.extend();
        if (keeps_tails) secure.writeSlotTails(page.area, page.block_size, old_capacity, page.capacity - old_capacity);
        // Fresh memory, where the slice was purged or never reached so far.
        const fresh = Segment.ofPtr(page).markTouched(page);
        if (fresh > 0) purge.makeRoom(heap, fresh);
    }

    // ==== Free, slow paths ==============================================

    /// A local free into a page with flags: full, or holding over-aligned
    /// blocks whose pointers may be interior.
    noinline fn freeLocalFlagged(heap: *Heap, page: *Page, ptr: [*]u8) void {
        const block = if (page.flags.has_aligned) page.blockStart(ptr) else @as(*Block, @ptrCast(@alignCast(ptr)));
        page.push(block);
        if (page.flags.in_full) heap.unfull(page);
        if (page.isEntirelyFree()) heap.retireAfterFree(page);
    }

    /// A free emptied `page`: retire it and, if that gave memory back to a
    /// segment, end the decay period if due (so a program that only frees
    /// for a while still returns memory). A page kept as its size's only page costs nothing
    /// more: a loop allocating and freeing one block comes here every time.
    noinline fn retireAfterFree(heap: *Heap, page: *Page) void {
        heap.freeing = true;
        defer heap.freeing = false;
        if (heap.retirePage(page, .may_evict) != .nothing) purge.decayIfDue(heap);
    }

    /// A free by a thread that does not own the block's page.
    noinline fn freeRemote(segment: *Segment, page: *Page, ptr: [*]u8) void {
        if (segment.kind == .huge) return huge.free(segment);
        if (builtin.single_threaded) unreachable; // One heap owns every page.
        // A block whose owner is gone makes this thread the owner: from then
        // on its frees into those pages are local.
        if (thread.absorbIfOrphaned(segment)) {
            const heap = thread.current();
            if (segment.ownerRelaxed() == heap) return heap.freeLocalFlagged(page, ptr);
        }
        const block = if (page.loadFlags().has_aligned) page.blockStart(ptr) else @as(*Block, @ptrCast(@alignCast(ptr)));
        page.pushThreadFree(block, segment, notifyOwner);
    }

    /// Announces to the owner of `segment` that `page` has remote frees.
    /// Runs under the page's notifying bit, so the segment stays mapped.
    fn notifyOwner(segment: *Segment, page: *Page) void {
        // SeqCst, with the SeqCst store of `owner` and load of `page_notice`
        // in `absorb`: of the two threads, at least one sees the other's
        // write, so a notice racing with a change of owner is not lost.
        _ = segment.page_notice.word(page.index).fetchOr(Segment.PageBits.bit(page.index), .seq_cst);
        // SeqCst: the other half of the pattern above.
        const owner = segment.owner.load(.seq_cst) orelse return;
        const bit = @as(usize, 1) << segmentGroup(segment);
        // SeqCst: if the bit looks set, the owner's SeqCst swap of the
        // groups comes later and its scan then sees our page bit.
        if (owner.notice_groups.load(.seq_cst) & bit == 0) {
            // SeqCst: as above.
            _ = owner.notice_groups.fetchOr(bit, .seq_cst);
        }
    }

    /// Visits the pages that remote frees announced.
    fn processNotices(heap: *Heap) void {
        if (builtin.single_threaded) return;
        // Monotonic: a cheap look; the swap below does the ordering.
        if (heap.notice_groups.load(.monotonic) == 0) return;
        // SeqCst: see notifyOwner.
        var groups = heap.notice_groups.swap(0, .seq_cst);
        heap.collecting = true;
        defer heap.collecting = false;
        while (groups != 0) : (groups &= groups - 1) {
            const list = &heap.segments[@ctz(groups)];
            var steps = list.count;
            var it = list.first;
            while (it) |segment| {
                assert(steps > 0);
                steps -= 1;
                // The segment may be released below: step first.
                it = segment.all.next;
                // One word on 64-bit targets.
                words: for (&segment.page_notice.words, 0..) |*word, w| {
                    // SeqCst: a look that may skip the swap must still see a
                    // notifier's bit that came before our swap of the groups
                    // (notifyOwner found the group bit set and left it):
                    // a weaker load may be served before that swap is
                    // visible on weakly ordered CPUs, and miss the bit.
                    if (word.load(.seq_cst) == 0) continue;
                    // SeqCst: see notifyOwner.
                    var pages = word.swap(0, .seq_cst);
                    while (pages != 0) : (pages &= pages - 1) {
                        const index = w * Segment.PageBits.word_bits + @ctz(pages);
                        // A released segment had no page in use: the remaining
                        // bits are stale, and the memory may be gone.
                        if (heap.handleNotice(segment, &segment.pages[index]) == .segment_released) break :words;
                    }
                }
            }
        }
    }

    /// A remote free announced `page`: it got its first block back while
    /// full, or its last block back. Takes no blocks: they are taken when the
    /// page comes first in its queue.
    fn handleNotice(heap: *Heap, segment: *Segment, page: *Page) Released {
        // A notice may outlive the page's use (freed or reused since).
        if (segment.free_mask & (@as(u64, 1) << @intCast(page.index)) != 0) return .nothing;
        // ... or its first slice is now inside another page.
        if (!page.isFirstSlice()) return .nothing;
        if (page.isNotifying()) {
            // The announcer is still at work (or a second one raced it):
            // look again on the next round.
            heap.rearmNotice(segment, page);
            return .nothing;
        }
        if (page.flags.in_full) heap.unfull(page);
        // The current page is being allocated from: keep it.
        if (page.isCurrent() or !page.isEntirelyFree()) return .nothing;
        // processNotices walks the segments: freeing a page kept for another
        // class could release the next segment of its walk.
        return heap.retirePage(page, .keeps_others);
    }

    /// What giving back a page released.
    const Released = enum { nothing, page, segment_released };

    /// Moves a page from the full queue back to its class queue.
    fn unfull(heap: *Heap, page: *Page) void {
        assert(page.flags.in_full);
        heap.full.remove(page);
        page.setFlags(.{ .in_full = false, .has_aligned = page.flags.has_aligned });
        heap.queuePushBack(page);
    }

    /// A page's last block came back. `others`: whether pages kept for
    /// other classes may be freed to make room for this one
    /// (`makeRoomToRetain`), which may release their segments.
    fn retirePage(heap: *Heap, page: *Page, others: enum { may_evict, keeps_others }) Released {
        assert(page.isEntirelyFree() and !page.flags.in_full);
        // Keep a size's only page, so a loop that allocates and frees one
        // block does not give the page back each time, until the end of the
        // decay period (after which it goes like the others) and within a
        // byte budget, so that a program moving through many sizes does not
        // keep a page of each, nor many big ones: pages kept a while ago
        // make room for this one (`makeRoomToRetain`).
        if (page.retained) return .nothing;
        heap.retire_tick +%= 1;
        const bytes = page.touchedBytes();
        const bit = @as(u128, 1) << @intCast(page.class);
        if (heap.retained_classes & bit != 0) {
            // A kept page is its class's first (checkInvariants). One in
            // use again since (parkFull, setLargeClass, findPageInQueue)
            // is kept no more: its share goes, and this page may take it.
            const first = heap.queues[page.class].first;
            if (first == null or !first.?.retained) {
                heap.retained_classes &= ~bit;
                heap.retained_bytes -|= heap.retained_at[page.class].bytes;
            }
        }
        const fits = heap.retained_bytes + bytes <= retain_bytes_max;
        if (heap.queues[page.class].count == 1 and recordsItsBlock(page) and
            (fits or (others == .may_evict and heap.makeRoomToRetain(bytes))))
        {
            page.retained = true;
            heap.retained_classes |= bit;
            heap.retained_bytes += bytes;
            heap.retained_at[page.class] = .{ .tick = heap.retire_tick, .bytes = @intCast(bytes) };
            purge.schedule(heap);
            return .nothing;
        }
        return heap.freePage(page);
    }

    /// Whether the segment's record of touched memory covers the page's
    /// block, as a page kept for its class must: its block is handed out
    /// again without a new record. Not after a move took the block's pages
    /// away (moveLarge, Segment.forgetMoved).
    fn recordsItsBlock(page: *const Page) bool {
        if (segment_mod.Kind.ofClass(page.class) != .large) return true;
        const segment = Segment.ofPtr(page);
        const end = segment.touchedEnd(page.index, page.index + page.slice_count - 1);
        return end >= @intFromPtr(page.area) + page.block_size;
    }

    /// Whether `bytes` more fit the retained budget, after freeing the
    /// pages kept at least `retain_age_min_retires` retirements ago that
    /// are still empty, and forgetting those in use again. (Without it, a
    /// program stepping through sizes, as size-sweep does, filled the
    /// budget with its first few sizes, and every later size freed and set
    /// up its page at each allocation until the decay period ended: 100 to
    /// 120 ns a pair from 12 KiB to 1 MiB, four times glibc's.)
    fn makeRoomToRetain(heap: *Heap, bytes: usize) bool {
        var classes = heap.retained_classes;
        // Bounded: one step per class.
        while (classes != 0) : (classes &= classes - 1) {
            const class: size_class.Class = @intCast(@ctz(classes));
            const kept = heap.retained_at[class];
            if (heap.retire_tick -% kept.tick < retain_age_min_retires) continue;
            heap.retained_classes &= ~(@as(u128, 1) << @intCast(class));
            heap.retained_bytes -|= kept.bytes;
            // A kept page is its class's first (checkInvariants); one in use
            // again retires anew when it empties.
            if (heap.queues[class].first) |page| if (page.retained) {
                page.retained = false;
                if (page.isEntirelyFree()) _ = heap.freePage(page);
            };
            if (heap.retained_bytes + bytes <= retain_bytes_max) return true;
        }
        return false;
    }

    /// Takes an empty page out of its queue and returns it to its segment.
    fn freePage(heap: *Heap, page: *Page) Released {
        assert(page.isEntirelyFree());
        const segment = Segment.ofPtr(page);
        if (page.isNotifying()) {
            // A remote free is still announcing the page and writes to the
            // segment header: keep both, and look again on the next round.
            heap.rearmNotice(segment, page);
            return .nothing;
        }
        if (!opensForRelease(segment, page)) return .nothing;
        if (page.flags.in_full) heap.full.remove(page) else heap.queueRemove(page);
        return heap.releasePage(segment, page);
    }

    /// Hardened: whether the empty `page` may go back to its segment now,
    /// its guarded freed block made accessible (secure.openReleased). When
    /// the system refuses (out of memory), the page stays where it is, its
    /// block free and guarded, until the next collect of its queue (the
    /// thread's end, a trim, an absorb) or an allocation that takes the
    /// block (check.afterAlloc: opened then, or the allocation fails and
    /// the page is tried again). A limit: until then it keeps its segment
    /// in use.
    fn opensForRelease(segment: *Segment, page: *const Page) bool {
        if (!config.hardening.guard_freed_large) return true;
        return secure.openReleased(page.area, page.block_size, page.capacity, segment.pageGuard(page));
    }

    /// Sets a notice for one of our own pages.
    fn rearmNotice(heap: *Heap, segment: *Segment, page: *Page) void {
        // Monotonic: we are the owner, and processNotices reads both.
        _ = segment.page_notice.word(page.index).fetchOr(Segment.PageBits.bit(page.index), .monotonic);
        _ = heap.notice_groups.fetchOr(@as(usize, 1) << segmentGroup(segment), .monotonic);
    }

    /// Returns an empty page, already out of every queue, to its segment
    /// (and the segment, if now empty).
    fn releasePage(heap: *Heap, segment: *Segment, page: *Page) Released {
        const tail_bit = @as(u64, 1) << @intCast(page.index);
        if (segment.tails_waiting & tail_bit != 0) {
            segment.tails_waiting &= ~tail_bit;
            segment.tails_old &= ~tail_bit;
            heap.tail_count -= 1;
        }
        page.dropThreadFrees();
        if (config.hardening.zero_freed) secure.pageReleased(page.area, page.block_size, page.capacity);
        segment.releaseGuard(page);
        const had_free = segment.hasFreeSlice();
        heap.dirty_bytes += segment.releasePage(page);
        segment.freed_period = heap.period_index;
        var released: Released = .page;
        if (segment.isEmpty()) {
            heap.releaseSegment(segment);
            released = .segment_released;
        } else {
            // First in the lists: pages are taken from the first segment
            // with room, and this one now has resident free slices.
            if (had_free) {
                assert(segment.in_with_free);
                heap.with_free.remove(segment);
            }
            heap.with_free.push(segment);
            segment.in_with_free = true;
            if (segment.in_with_run) heap.with_run.remove(segment);
            segment.in_with_run = segment.hasFreeRun();
            if (segment.in_with_run) heap.with_run.push(segment);
        }
        purge.grew(heap);
        return released;
    }

    // ==== Segments ======================================================

    fn addSegment(heap: *Heap, segment: *Segment) void {
        assert(segment.ownerRelaxed() == heap);
        heap.segments[segmentGroup(segment)].push(segment);
        heap.segment_count += 1;
        heap.updateFreeLists(segment);
    }

    fn removeSegment(heap: *Heap, segment: *Segment) void {
        if (config.fused_free and heap.free_segment == @intFromPtr(segment)) heap.free_segment = no_segment;
        heap.segments[segmentGroup(segment)].remove(segment);
        heap.segment_count -= 1;
        if (segment.in_with_free) heap.with_free.remove(segment);
        if (segment.in_with_run) heap.with_run.remove(segment);
        segment.in_with_free = false;
        segment.in_with_run = false;
    }

    /// Puts `segment` in, or takes it out of, the lists of segments with
    /// free slices and free runs, after its free slices changed.
    fn updateFreeLists(heap: *Heap, segment: *Segment) void {
        const any = segment.hasFreeSlice();
        if (any != segment.in_with_free) {
            if (any) heap.with_free.push(segment) else heap.with_free.remove(segment);
            segment.in_with_free = any;
        }
        const run = any and segment.hasFreeRun();
        if (run != segment.in_with_run) {
            if (run) heap.with_run.push(segment) else heap.with_run.remove(segment);
            segment.in_with_run = run;
        }
    }

    /// A page of `slices` slices from the heap's segments or its spares:
    /// where it faults least (see `bestFit`), segments in use before spares
    /// of equal fit, so that spares can go back to the OS.
    fn takeFreeSpan(heap: *Heap, slices: u8) ?*Page {
        const in_use = if (slices == 1) heap.bestFit("with_free", slices, .until_found) else heap.bestFitRun(slices);
        const spare = if (in_use.choice.fit == .resident) Fitting{} else heap.bestFit("all", slices, .until_found);
        const exchange = spare.segment != null and spare.choice.fit != .resident;
        if (in_use.choice.fit != .resident and (exchange or (spare.segment == null and heap.segment_count >= grow_from_pool_segments))) {
            // Resident memory another heap (or this one) pooled beats
            // touching fresh memory (pool.zig). In exchange for our spare,
            // if we have one; beside our segments only for a heap with
            // several: a thread with one segment that took another left
            // threads with none to map anew (a crowd of threads started at
            // once mapped 10% more).
            if (heap.takePooled(.resident)) |segment| {
                if (exchange) {
                    heap.spares.remove(spare.segment.?);
                    heap.giveAway(spare.segment.?);
                }
                heap.addSegment(segment);
                // An empty segment holds a run for any page.
                const choice = segment.choose(slices) orelse unreachable;
                return heap.takeSpanFrom(segment, .{ .first = choice.first, .slices = slices });
            }
        }
        if (@backingInt(spare.choice.fit) > @backingInt(in_use.choice.fit)) {
            // Its resident memory stays free memory, whatever pages it holds next.
            heap.spares.remove(spare.segment.?);
            heap.addSegment(spare.segment.?);
            return heap.takeSpanFrom(spare.segment.?, .{ .first = spare.choice.first, .slices = slices });
        }
        // Null only where purged memory must be committed and cannot be.
        if (in_use.segment) |segment| return heap.takeSpanFrom(segment, .{ .first = in_use.choice.first, .slices = slices });
        return null;
    }

    /// Segments in use from which a heap without spares takes a resident
    /// pooled segment rather than touch fresh memory (`takeFreeSpan`).
    const grow_from_pool_segments = 2;

    const Fitting = struct { segment: ?*Segment = null, choice: Segment.Choice = .{ .first = 0, .fit = .none, .slack = 0 } };

    /// A run of `slices` (more than one) in a segment in use, as bestFit.
    /// The list of runs holds the segments with a run for a medium page
    /// (8 slices); a large page of 2 to 7 slices also fits the shorter
    /// runs that segments without one leave, and those are often the
    /// resident ones: a program that freed its data and builds it again
    /// (the compiler front end's second pass) set such pages up on fresh
    /// slices beside them, and the room rule then purged as much of its
    /// resident free memory, for the rest of the pass to fault it in
    /// again. So the first few segments with a free slice are looked at
    /// for a resident run first.
    fn bestFitRun(heap: *Heap, slices: u8) Fitting {
        assert(slices > 1);
        if (slices >= segment_mod.medium_page_slices) return heap.bestFit("with_run", slices, .until_found);
        const short = heap.bestFit("with_free", slices, .first_few);
        if (short.choice.fit == .resident) return short;
        const run = heap.bestFit("with_run", slices, .until_found);
        return if (@backingInt(short.choice.fit) > @backingInt(run.choice.fit)) short else run;
    }

    /// The segment of a list (those in use with free slices or runs, or
    /// the spares) whose free run of `slices` slices faults the least
    /// among the first `fit_scan_count`, the tightest of those resident
    /// throughout (see Segment.choose), or else (`until_found`) the first
    /// with a run at all. Setting up a page is a slow path, and a fresh run
    /// costs a fault per kernel page: first fit touched fresh runs in the
    /// first segment with room while others held resident ones, which the
    /// purge rules then gave back.
    fn bestFit(heap: *Heap, comptime list: []const u8, slices: u8, comptime scan: enum { until_found, first_few }) Fitting {
        const spares = comptime std.mem.eql(u8, list, "all");
        const segments = if (spares) &heap.spares else &@field(heap, list);
        var best: Fitting = .{};
        var it = segments.first;
        for (0..segments.count) |scanned| {
            // Past the first few, any run will do, or none.
            if (scanned >= fit_scan_count and (scan == .first_few or best.segment != null)) break;
            const segment = it.?;
            it = @field(segment, list).next;
            // A list of runs for medium pages may hold none for a large one.
            const choice = segment.choose(slices) orelse continue;
            const better = @backingInt(choice.fit) > @backingInt(best.choice.fit) or
                (choice.fit == .resident and best.choice.fit == .resident and choice.slack < best.choice.slack);
            if (!better) continue;
            best = .{ .segment = segment, .choice = choice };
            // Spares are empty: the first resident run is as good as any.
            if (choice.fit == .resident and (choice.slack == 0 or spares)) break;
        }
        return best;
    }

    /// Segments a page's setup looks at in each list (see `bestFit`).
    const fit_scan_count = 16;

    /// Takes the free run `span` of `segment` for a new page, or null when
    /// out of memory (Windows: purged memory cannot be committed).
    fn takeSpanFrom(heap: *Heap, segment: *Segment, span: segment_mod.Span) ?*Page {
        const resident = segment.takeSpan(span) orelse return null;
        if (resident > 0) purge.shrank(heap, resident);
        // The page's first blocks are touched next (extendPage): any fresh
        // memory among them makes room then.
        heap.updateFreeLists(segment);
        return segment.linkSpan(span);
    }

    /// An empty segment: keep it as a spare, or unmap it.
    fn releaseSegment(heap: *Heap, segment: *Segment) void {
        assert(segment.isEmpty());
        heap.removeSegment(segment);
        heap.keepSpare(segment);
    }

    fn keepSpare(heap: *Heap, segment: *Segment) void {
        if (pool.unmapsMoved(segment)) return segment.destroy();
        if (heap.spares.count < spare_count_max) {
            heap.spares.push(segment);
            return;
        }
        heap.giveAway(segment);
    }

    /// Unmaps a spare on `spares` (this heap's, or a shell's it absorbs)
    /// that holds nothing resident, only moved blocks' kernel mappings
    /// (pool.unmapsMoved): what kept it was its memory, and unmapping it
    /// gives its moves back.
    fn unmapIfOnlyMoved(spares: *SegmentList("all"), spare: *Segment) void {
        if (!pool.unmapsMoved(spare)) return;
        spares.remove(spare);
        spare.destroy();
    }

    /// An empty segment the heap does not keep: into the shared pool with
    /// its resident memory (pool.zig), or unmapped when the pool is full.
    fn giveAway(heap: *Heap, segment: *Segment) void {
        // Ours until put: its free memory is the pool's from here.
        purge.shrank(heap, segment.dirtyBytes());
        if (pool.put(segment)) return;
        segment.destroy();
    }

    /// A segment from the shared pool (one with resident memory, if
    /// `resident`), now ours, or null.
    fn takePooled(heap: *Heap, comptime which: @TypeOf(.enum_literal)) ?*Segment {
        const segment = pool.take(which) orelse return null;
        // Monotonic: an empty segment; nobody frees into it.
        segment.owner.store(heap, .monotonic);
        // Its resident memory is our free memory now, taken to be used at
        // once: hot, so that cold purges leave it (purged, the period only
        // orders it among our free memory).
        const resident = segment.dirtyBytes();
        segment.freed_period = if (resident > 0) heap.period_index else heap.period_index -% 1;
        heap.dirty_bytes += resident;
        purge.changed(heap);
        return segment;
    }

    /// At thread end, after `releaseUnused`: the spares the heap's next
    /// thread will not need go to the pool, for any heap that lacks a
    /// segment. It keeps one only if it has no segment in use.
    pub fn shedSpares(heap: *Heap) void {
        const keep: usize = if (heap.segment_count > 0) 0 else 1;
        // Bounded: spare_count_max spares at most.
        while (heap.spares.count > keep) heap.giveAway(heap.spares.pop().?);
    }

    /// The OS refused a mapping: unmaps what this heap keeps mapped for
    /// reuse (its cached huge mappings, and its spare segments, given to
    /// the pool) and the pool, whose address space may be what a limit
    /// lacks (RLIMIT_AS, or a 32-bit space that is full). Returns whether
    /// anything went, so that the caller maps once more. Called where no
    /// cache or spare list is being walked.
    pub fn releaseMappings(heap: *Heap) bool {
        // Hardened: blocks waiting in the quarantine keep their pages, and
        // so their segments, in use; freed, empty segments become spares.
        const held = if (config.hardening.quarantine) quarantine.heldCount(heap) else 0;
        if (held > 0) quarantine.flush(heap);
        const cached = heap.huge_cache.len;
        // Cached mappings count whole in the free bytes (cacheChanged).
        heap.dirty_bytes -= heap.huge_cache.release(heap.huge_cache.bytes, null);
        const spares = heap.spares.count;
        // Bounded: spare_count_max spares at most.
        while (heap.spares.pop()) |spare| heap.giveAway(spare);
        purge.changed(heap);
        const pooled = pool.release();
        return held > 0 or cached > 0 or spares > 0 or pooled;
    }

    /// The huge cache changed from `before` bytes (huge.zig): account for it.
    pub fn cacheChanged(heap: *Heap, before: usize) void {
        const after = heap.huge_cache.bytes;
        if (after < before) return purge.shrank(heap, before - after);
        if (after == before) return;
        heap.dirty_bytes += after - before;
        purge.grew(heap);
    }

    /// Returns resident free memory until at most `keep_bytes` remain (the
    /// policy, when and how much, is in purge.zig): memory freed in earlier
    /// decay periods first, then, unless `cold_only`, the rest. Spares go to
    /// the pool with their memory (pool.zig) or are purged (`spares`), the
    /// rest goes to the OS. Changes no page or segment list but the spares,
    /// so it may run while any other is walked.
    pub fn purgeTo(heap: *Heap, keep_bytes: usize, comptime which: Which, comptime spares: Spares) void {
        heap.purgeDown(keep_bytes, true, true, spares);
        if (which != .cold_only) heap.purgeDown(keep_bytes, false, which == .cold_first_but_warm_huge, spares);
        purge.changed(heap);
    }

    /// Which free memory a purge may take: only memory freed in earlier
    /// decay periods (cold), or that first and then the rest, or the rest
    /// but for huge mappings cached in this period (rule 3 in purge.zig).
    pub const Which = enum { cold_only, cold_first, cold_first_but_warm_huge };

    /// What a purge does with spare segments: give them to the pool with
    /// their memory (memory the program freed all at once, past the budget
    /// or at a thread's end, which the next round takes again), or purge
    /// them in place (memory found idle, or owed to other heaps).
    pub const Spares = enum { pool, purge };

    fn purgeDown(heap: *Heap, keep_bytes: usize, cold_only: bool, huge_cold_only: bool, comptime spares: Spares) void {
        assert(huge_cold_only or !cold_only);
        const before = if (huge_cold_only) heap.period_index else null;
        // Cached huge mappings first, then spares: they serve fewer requests
        // than free pages of segments in use, which come last.
        heap.dirty_bytes -= heap.huge_cache.release(heap.dirty_bytes -| keep_bytes, before);
        var spare_steps = heap.spares.count;
        var spare_it = heap.spares.first;
        while (spare_it) |spare| {
            assert(spare_steps > 0);
            spare_steps -= 1;
            spare_it = spare.all.next;
            if (heap.dirty_bytes <= keep_bytes) return;
            if (cold_only and spare.freed_period == heap.period_index) continue;
            const resident = spare.dirtyBytes();
            if (resident == 0) continue;
            if (spares == .pool) {
                // Any heap may take it from the pool without faulting; the
                // pool purges what nobody takes.
                heap.spares.remove(spare);
                heap.dirty_bytes -= resident;
                if (pool.put(spare)) continue;
                // The pool is full: purged in place, as below.
                heap.dirty_bytes += resident;
                heap.spares.push(spare);
            }
            // No more than asked (to the next slice): a whole segment's free
            // memory for a few KiB of fresh memory was faulted in again by
            // the next pages set up there.
            heap.dirty_bytes -= spare.purgeDirtyAtLeast(heap.dirty_bytes - keep_bytes);
            unmapIfOnlyMoved(&heap.spares, spare);
        }
        for (&heap.segments) |*list| {
            var steps = list.count;
            var it = list.first;
            while (it) |segment| : (it = segment.all.next) {
                if (heap.dirty_bytes <= keep_bytes) return;
                assert(steps > 0);
                steps -= 1;
                if (cold_only and segment.freed_period == heap.period_index) continue;
                // As for spares: the rest of the segment stays resident.
                heap.dirty_bytes -= segment.purgeDirtyAtLeast(heap.dirty_bytes - keep_bytes);
            }
        }
    }

    /// Retires the first page of each class that other threads' frees
    /// emptied, as if the owner's own frees had (kept as its class's only
    /// page, or given back). Remote frees do not announce the page the owner
    /// allocates from (Page.is_current): a thread that handed every block
    /// of a size to others and allocates that size no more would keep the
    /// page, outside every rule of purge.zig, until it ended. Period end
    /// only: one look per class.
    pub fn retireEmptiedFirstPages(heap: *Heap) void {
        if (builtin.single_threaded) return;
        for (&heap.queues) |*queue| {
            const page = queue.first orelse continue;
            if (page.retained or page.used == 0 or !page.isEntirelyFree()) continue;
            _ = heap.retirePage(page, .keeps_others);
        }
    }

    /// Frees the pages kept empty as their class's only page, if still
    /// empty; those in use again lose the mark.
    pub fn releaseRetained(heap: *Heap) void {
        var classes = heap.retained_classes;
        heap.retained_classes = 0;
        heap.retained_bytes = 0;
        while (classes != 0) : (classes &= classes - 1) {
            const page = heap.queues[@ctz(classes)].first orelse continue;
            if (!page.retained) continue;
            page.retained = false;
            if (page.isEntirelyFree()) _ = heap.freePage(page);
        }
    }

    // ==== Queues ========================================================
    // The first page of a small class's queue is mirrored in pages_direct.

    fn queuePushFront(heap: *Heap, page: *Page) void {
        const queue = &heap.queues[page.class];
        if (queue.first) |old| {
            old.setCurrent(false);
            // It stays in the queue, no longer current: blocks that other
            // threads freed into it while it was, all of them, were not
            // announced. (A free still on its way announces it itself:
            // Page.emptiedUnannounced.)
            if (old.emptiedUnannounced()) heap.rearmNotice(Segment.ofPtr(old), old);
        }
        queue.pushFront(page);
        heap.firstChanged(page.class);
    }

    fn queuePushBack(heap: *Heap, page: *Page) void {
        const queue = &heap.queues[page.class];
        queue.pushBack(page);
        if (queue.first == page) heap.firstChanged(page.class);
    }

    fn queueRemove(heap: *Heap, page: *Page) void {
        const queue = &heap.queues[page.class];
        const was_first = queue.first == page;
        queue.remove(page);
        if (was_first) {
            page.setCurrent(false);
            heap.firstChanged(page.class);
        }
    }

    /// The first page of `class` changed: mirror it in pages_direct and
    /// mark it current.
    fn firstChanged(heap: *Heap, class: size_class.Class) void {
        if (heap.queues[class].first) |page| page.setCurrent(true);
        heap.updateDirect(class);
    }

    /// Points the direct entries of every size served by `class` at the
    /// class's first page.
    fn updateDirect(heap: *Heap, class: size_class.Class) void {
        const block_size = size_class.blockSize(class);
        if (block_size > direct_size_max_bytes) return;
        const smaller = if (class == 0) 0 else size_class.blockSize(class - 1);
        const page = heap.queues[class].first orelse &page_empty;
        // Word sizes (smaller, block_size] in units of words: at most 8.
        for (smaller / size_class.word_bytes + 1..block_size / size_class.word_bytes + 1) |words| {
            heap.pages_direct[words] = page;
        }
    }

    // ==== Thread end and adoption =======================================

    /// Gives back what the heap does not need to keep its live blocks:
    /// collects remote frees, frees empty pages, and returns free memory to
    /// the OS down to `purge.keep_bytes`. Called when the owning thread
    /// ends, after which no decay runs for the heap; the little kept
    /// resident saves the next thread that takes the heap from faulting it
    /// all in again.
    pub fn releaseUnused(heap: *Heap) void {
        heap.purgeWaitingTails(.all);
        heap.collectFreePages();
        heap.purgeTo(purge.keep_bytes, .cold_first, .pool);
        heap.endPurgeWaits();
    }

    /// Ends the heap's decay period and any wait past the budget
    /// (purge.zig): its thread ended or changed, and their clocks with it.
    fn endPurgeWaits(heap: *Heap) void {
        heap.decay_due_ns = 0;
        heap.budget_due_ns = 0;
        heap.budget_wait_own = false;
    }

    /// A new thread took over the heap of a thread that ended without
    /// telling (no exit callback): collects remote frees and frees empty
    /// pages, like `releaseUnused`, but gives nothing back: the new thread
    /// runs the heap's decay from now on, and what it does not take again
    /// goes back by decay. (Purged here to `purge.keep_bytes`, the memory
    /// was faulted in again moments later by the new thread: thread-churn
    /// without libc, 129k faults and 1.4 s of system time, against 1.4k and
    /// 0.36 s with libc, whose exit callback runs `releaseUnused` while
    /// the heap holds less.) A period starts now: the old thread's low-water
    /// mark and overdue period would call all of this memory idle.
    ///
    /// What the heap's blocks got back while it had no thread (other
    /// threads' frees, collected here) waits as the heap's own frees do
    /// (purge.zig, rule 4): it is the ended thread's working set, which its
    /// successor (the next worker of a pool, the next pass's thread)
    /// builds its own from, not blocks a running consumer freed, which
    /// wait 10 ms and up to four budgets. (The compiler front end on two
    /// threads, where each pass's worker takes the last one's heap: the
    /// budget purged 29 MiB of it at the takeover, for the worker to fault
    /// it in again.)
    pub fn resumeForNewOwner(heap: *Heap) void {
        heap.endPurgeWaits();
        heap.freeing = true;
        defer heap.freeing = false;
        heap.collectFreePages();
        purge.schedule(heap);
    }

    /// malloc_trim: the heap's free memory goes back to the OS down to
    /// `keep_bytes`, its empty pages, spare segments and cached huge
    /// mappings included, and the thread keeps its heap. Returns the bytes
    /// of free memory that went back.
    pub fn trim(heap: *Heap, keep_bytes: usize) usize {
        heap.purgeWaitingTails(.all);
        heap.collectFreePages();
        const before = heap.dirty_bytes;
        heap.purgeTo(keep_bytes, .cold_first, .purge);
        return before -| heap.dirty_bytes;
    }

    /// Collects remote frees and frees every page that is entirely free,
    /// those kept as their class's only page included.
    fn collectFreePages(heap: *Heap) void {
        heap.processNotices();
        heap.releaseRetained();
        heap.collectQueues();
    }

    /// After taking in an ended thread's heap (thread.zig): processes the
    /// notices and frees every page that is entirely free, announced or not.
    /// A page whose last blocks came back by this thread's own frees after
    /// other threads' remote ones is never announced (a remote free
    /// announces only the last block), and announced pages wait for an
    /// allocation that misses its page: a thread that takes in heap after
    /// heap by freeing into them (a consumer of short-lived producers'
    /// blocks) may make none, and each heap it took in would add its pages
    /// to the wait, without bound. Taking a heap in walks that heap's pages
    /// anyway; this walks ours too, once per heap taken in.
    pub fn collectAfterAbsorbing(heap: *Heap) void {
        heap.processNotices();
        heap.collectQueues();
    }

    /// Frees the entirely free pages of every queue, but those kept as
    /// their class's only page.
    fn collectQueues(heap: *Heap) void {
        for (&heap.queues) |*queue| heap.collectQueue(queue);
        heap.collectQueue(&heap.full);
    }

    /// Frees the entirely free pages of `queue`.
    fn collectQueue(heap: *Heap, queue: *PageQueue) void {
        var steps = queue.count;
        var it = queue.first;
        while (it) |page| {
            assert(steps > 0);
            steps -= 1;
            it = page.next;
            if (page.isEntirelyFree() and !page.retained) _ = heap.freePage(page);
        }
    }

    /// Takes over every page and segment in use of `other`, a heap whose
    /// thread is gone and which the caller has claimed (thread.zig): nobody
    /// else touches `other`'s owner-only state. Pages are collected on the
    /// way in; empty ones go back to their segments. `other` keeps its
    /// spare segments (or gets one of ours), purged.
    pub fn absorb(heap: *Heap, other: *Heap) void {
        assert(heap != other);
        // Its segments come with their waiting tails.
        heap.tail_count += other.tail_count;
        other.tail_count = 0;
        for (&other.segments) |*list| {
            while (list.first) |segment| {
                other.removeSegment(segment);
                // SeqCst: see notifyOwner; after this store, remote frees
                // notify us, and notices sent to `other` before it are
                // caught by the load below.
                segment.owner.store(heap, .seq_cst);
                // Its free memory is cold to us: its thread ended.
                segment.freed_period = heap.period_index -% 1;
                heap.addSegment(segment);
                // SeqCst: the load half of the pattern in notifyOwner.
                if (segment.page_notice.anySet()) {
                    // Monotonic: we are the owner; processNotices reads it.
                    _ = heap.notice_groups.fetchOr(@as(usize, 1) << segmentGroup(segment), .monotonic);
                }
            }
        }
        assert(other.segment_count == 0);
        // The segments' free memory is ours now; adopting pages may free
        // more of it (and count it again as it goes).
        heap.dirty_bytes += other.dirty_bytes;
        other.dirty_bytes = 0;
        purge.changed(other);
        for (&other.queues) |*queue| heap.adoptPages(queue);
        heap.adoptPages(&other.full);
        const other_cached = other.huge_cache.bytes;
        const cached_before = heap.huge_cache.bytes;
        heap.huge_cache.takeAll(&other.huge_cache, heap.period_index -% 1);
        // Entries unmapped because our cache was full are free memory no more.
        heap.dirty_bytes -= cached_before + other_cached - heap.huge_cache.bytes;
        // The emptied shell keeps its empty segments, or else gets one of
        // ours, for the thread that takes it next (thread.zig): that thread
        // then maps no segment, while we would keep them as spares we may
        // never use. Their free memory goes back now: no thread runs the
        // shell's purges. Not on 32-bit targets, whose address space holds
        // a few hundred segments: there shells keep nothing.
        if (!shells_keep_segments) {
            while (other.spares.pop()) |spare| {
                purge.shrank(heap, spare.purgeDirty());
                spare.destroy();
            }
        } else if (other.spares.count == 0) {
            if (heap.spares.pop()) |spare| {
                // Monotonic: an empty segment; nobody frees into it.
                spare.owner.store(other, .monotonic);
                other.spares.push(spare);
            }
        }
        var spare_it = other.spares.first;
        // Bounded by spare_count_max.
        while (spare_it) |spare| {
            spare_it = spare.all.next;
            purge.shrank(heap, spare.purgeDirty());
            unmapIfOnlyMoved(&other.spares, spare);
        }
        other.pages_direct = @splat(&page_empty);
        other.with_free = .{};
        other.with_run = .{};
        other.endPurgeWaits();
        purge.grew(heap);
    }

    /// Moves the pages of another heap's queue into ours; entirely free
    /// ones go back to their segments. Full pages stay full: their notices
    /// now reach us (see absorb).
    fn adoptPages(heap: *Heap, queue: *PageQueue) void {
        var steps = queue.count;
        while (queue.first) |page| {
            assert(steps > 0);
            steps -= 1;
            queue.remove(page);
            page.retained = false; // `other`'s bookkeeping, not ours
            page.setCurrent(false);
            if (page.isEntirelyFree() and !page.isNotifying()) {
                if (page.flags.in_full) page.setFlags(.{ .has_aligned = page.flags.has_aligned });
                if (opensForRelease(Segment.ofPtr(page), page)) {
                    _ = heap.releasePage(Segment.ofPtr(page), page);
                } else {
                    heap.queuePushBack(page);
                }
            } else if (page.flags.in_full) {
                heap.full.pushBack(page);
            } else {
                heap.queuePushBack(page);
            }
        }
    }

    // ==== Resizing ======================================================

    /// How much of its block a shrunk block may leave unused before
    /// resizing in place says no, so that the caller moves it to a fitting
    /// block.
    pub const Shrink = enum {
        /// Only what its size class rounds up (the Zig allocator): a Zig
        /// array ends with a shrink to its length (`toOwnedSlice`), up to a
        /// third of its capacity, and kept in place that spare capacity
        /// stayed with the array while it lived; the memory was resident
        /// when the block reused freed memory (the compiler front end kept
        /// 3.5 MB of its 51.8 MB of ZIR blocks that way: 72.1 MiB peak on
        /// one thread, 70.4 moving; smp_allocator also moves a block that
        /// changes class).
        to_class,
        /// Up to half (C's realloc, as mimalloc's): C programs trim strings
        /// and buffers with realloc, often by a few bytes, and each move
        /// costs an allocation, a copy and a free.
        to_half,
    };

    /// Whether the block at `ptr` can hold `new_len` bytes without moving
    /// and without wasting more of its block than `shrink` allows.
    pub fn resizeInPlace(ptr: [*]u8, alignment: usize, new_len: usize, comptime shrink: Shrink) bool {
        assert(new_len > 0);
        const segment = Segment.ofPtr(ptr);
        if (segment.kind == .huge) return huge.resizeInPlace(segment, new_len);
        const page = segment.pageOf(ptr);
        // The page may belong to another thread; block_size and area do not
        // change while any of its blocks is live.
        const block = if (page.loadFlags().has_aligned) page.blockStart(ptr) else @as(*Block, @ptrCast(@alignCast(ptr)));
        const block_end = @intFromPtr(block) + page.block_size;
        if (new_len > block_end - @intFromPtr(ptr)) return @intFromPtr(block) == @intFromPtr(ptr) and growLarge(segment, page, new_len);
        if (@intFromPtr(block) != @intFromPtr(ptr)) return true; // over-aligned
        const size = std.mem.alignForward(usize, new_len, @min(alignment, segment_mod.block_align_max_bytes));
        if (shrinkLarge(segment, page, size)) return true;
        // Never into a block less than half as large: that would strand
        // most of it. An over-aligned block's class was chosen for its
        // padding, so only that rule holds for it.
        const class = size_class.ofSize(size);
        if (size_class.blockSize(class) * 2 <= page.block_size) return false;
        return shrink == .to_half or class == page.class or page.loadFlags().has_aligned;
    }

    /// Shrinks the block of a large page in place to `size` bytes, giving
    /// the slices it no longer needs back to the segment, when the calling
    /// thread owns it and the smaller block is still large. A growing
    /// array ends with a shrink to its length (`toOwnedSlice`): without
    /// this its spare capacity, up to a third of the block, stayed in use
    /// as long as the array lived. Not hardened (see growLarge).
    fn shrinkLarge(segment: *Segment, page: *Page, size: usize) bool {
        if (config.secure or size <= segment_mod.medium_block_max_bytes) return false;
        if (segment_mod.Kind.ofClass(page.class) != .large) return false;
        const heap = thread.current();
        // Owner only: as in growLarge.
        if (segment.ownerRelaxed() != heap) return false;
        // A large page holds its one block, which the caller holds.
        assert(page.reserved == 1 and page.used == 1 and page.capacity == 1);
        const class = size_class.ofSize(size);
        const slices = segment_mod.pageSlices(class);
        if (slices >= page.slice_count) return false;
        heap.dirty_bytes += segment.shrinkSpan(page.index, page.slice_count, slices);
        segment.freed_period = heap.period_index;
        heap.setLargeClass(page, class, slices);
        segment.purgePageTail(page);
        heap.updateFreeLists(segment);
        purge.grew(heap);
        return true;
    }

    /// Grows the block of a large page in place, into the free slices right
    /// after the page, when the calling thread owns it and the larger block
    /// is still large: a buffer that grows by steps (realloc, ArrayList)
    /// then neither copies itself nor leaves a run of free slices behind
    /// that the next, larger step cannot use (each step used to fault in a
    /// fresh run while the runs it left stayed free). Not hardened, where
    /// a page's slices carry guards and live bits set up with the page.
    fn growLarge(segment: *Segment, page: *Page, new_len: usize) bool {
        if (config.secure or new_len > segment_mod.large_block_max_bytes) return false;
        if (segment_mod.Kind.ofClass(page.class) != .large) return false;
        const heap = thread.current();
        // Owner only: the segment's masks and the page are the owner's.
        if (segment.ownerRelaxed() != heap) return false;
        // A large page holds its one block, which the caller holds.
        assert(page.reserved == 1 and page.used == 1 and page.capacity == 1);
        const class = size_class.ofSize(new_len);
        const slices = segment_mod.pageSlices(class);
        if (slices > page.slice_count) {
            const resident = segment.growSpan(page.index, page.slice_count, slices) orelse return false;
            if (resident > 0) purge.shrank(heap, resident);
            heap.updateFreeLists(segment);
        }
        heap.setLargeClass(page, class, slices);
        const fresh = segment.markTouched(page);
        if (fresh > 0) purge.makeRoom(heap, fresh);
        // Its last slice's tail stays: a block that grew in place tends to
        // grow again, into that tail.
        return true;
    }

    /// Gives a large page, resized in place to `slices` slices, the class
    /// of its resized block.
    fn setLargeClass(heap: *Heap, page: *Page, class: size_class.Class, slices: u8) void {
        // Into the queue of its new class (it has no free block: the next
        // allocation there parks it in `full`, as any exhausted page).
        const queued = !page.flags.in_full;
        if (queued) heap.queueRemove(page);
        // Kept once as its old class's only page: that mark is the old
        // class's (Heap.releaseRetained).
        page.retained = false;
        const d = size_class.divisor(class);
        page.class = class;
        page.slice_count = slices;
        page.block_size = @intCast(size_class.blockSize(class));
        page.block_inverse = d.inverse;
        page.block_shift = d.shift;
        assert(Segment.ofPtr(page.area).pageArea(page.index, slices).len / page.block_size == 1);
        if (queued) heap.queuePushBack(page);
    }

    /// Like resizeInPlace, but huge allocations may move. Null: the caller
    /// tries moveLarge, or allocates, copies and frees.
    pub fn remap(ptr: [*]u8, alignment: usize, new_len: usize, comptime shrink: Shrink) ?[*]u8 {
        const segment = Segment.ofPtr(ptr);
        if (segment.kind == .huge) {
            // Shrinking below the huge range keeps the mapping: cheaper than
            // copying, and only the header page is extra.
            return huge.remap(segment, new_len);
        }
        return if (resizeInPlace(ptr, alignment, new_len, shrink)) ptr else null;
    }

    /// The smallest large block moveLarge moves. Below it the system call
    /// (a TLB flush on every core the process runs on) costs more than
    /// the copy, and the faults it saves come back when the emptied
    /// slices are reused: realloc_growth with blocks from 128 KiB moved, 10%
    /// more wall time; from 512 KiB, the same time and 15% fewer faults
    /// (README, "Large blocks that cannot grow move their pages").
    pub const move_bytes_min = 512 * 1024;

    /// A new block of `new_len` bytes holding the contents of the large
    /// block at `ptr`, which could not grow in place (remap returned null),
    /// moved there by its kernel pages (os.movePages) rather than copied.
    /// The caller frees the old block, through its usual free path, and
    /// must read nothing of it past its first kernel page: that page is
    /// copied and stays (the free's link and freed mark go there), the rest
    /// was moved away and reads back zeroes. A copy faults in every kernel
    /// page of the new block and leaves the old block's memory resident and
    /// free, for the purge rules to give back; a vector doubling from 1 to
    /// 2 MiB touched 2 MiB fresh and left 1 MiB behind. The new block was
    /// not passed through the C library's afterAlloc: the copied first page
    /// overwrites the freed mark that would clear.
    ///
    /// Null (the caller copies) where the system cannot move pages, for a
    /// block smaller than move_bytes_min or not growing, one of another
    /// thread's heap (its slices' records are the owner's), one at slice 0
    /// (see Segment.forgetMoved), an over-aligned one, or out of memory.
    /// Not hardened (guards, canaries and zeroing look after blocks where
    /// they are), with the fill of freed blocks (it would fill the moved
    /// pages in again), or under memcheck. Copied rather than moved into a
    /// huge mapping, or once `moved_blocks_max` moved pieces hold kernel
    /// mappings of their own (a block moves one kernel mapping of its
    /// segment at a time: movePieces).
    pub fn moveLarge(ptr: [*]u8, alignment: usize, new_len: usize) ?[*]u8 {
        if (!os.can_move or config.secure or config.valgrind or config.fill_freed_available) return null;
        const segment = Segment.ofPtr(ptr);
        if (segment.kind != .pages) return null;
        const page = segment.pageOf(ptr);
        if (segment_mod.Kind.ofClass(page.class) != .large or page.index == 0) return null;
        if (@intFromPtr(ptr) != @intFromPtr(page.area)) return null;
        const old_len: usize = page.block_size;
        if (old_len < move_bytes_min or new_len <= old_len) return null;
        const heap = thread.current();
        // Owner only: as in growLarge.
        if (segment.ownerRelaxed() != heap) return null;
        const fresh = alloc(new_len, alignment) orelse return null;
        // The old block is live: its page is as it was before the
        // allocation ran.
        assert(segment.pageOf(ptr) == page and page.block_size == old_len);
        const kernel_page = os.pageSize();
        const moved_end = std.mem.alignBackward(usize, old_len, kernel_page);
        // Into a large page only: a huge mapping keeps count of the kernel
        // mappings it is made of (huge.zig), which moved pages would add to.
        const dest = Segment.ofPtr(fresh);
        var moved = kernel_page;
        if (dest.kind == .pages and @intFromPtr(fresh) % kernel_page == 0 and moved_end > kernel_page)
            moved = movePieces(segment, ptr, dest, fresh, moved_end);
        // The first kernel page (the free list's link and the freed mark go
        // there) and what did not move are copied.
        @memcpy(fresh[0..kernel_page], ptr[0..kernel_page]);
        @memcpy(fresh[moved..old_len], ptr[moved..old_len]);
        if (moved > kernel_page) {
            segment.forgetMoved(page, kernel_page, moved);
            // The page's record now leaves the moved range out, so the free
            // that follows must give the page back to its segment: kept for
            // its class (`retirePage`), its block would be handed out again
            // without a new record, the program's writes to it would go
            // unrecorded, and a page set up there later would take them for
            // zeroes (calloc returned old bytes). Kept already, it is kept
            // no more, as in parkFull.
            page.retained = false;
        }
        return fresh;
    }

    /// Moves the kernel pages of the block at `ptr` (in `source`) from its
    /// second kernel page up to `moved_end` onto the block at `fresh` (in
    /// `dest`), one kernel mapping of the source segment at a time
    /// (Segment.nextSplit), each counted as a moved block, until the bound
    /// on them or a refusal stops it. Returns where the moved part ends:
    /// the rest is the caller's to copy. A block that moved in and grew
    /// again spans its moved piece and what it grew into: two moves.
    fn movePieces(source: *Segment, ptr: [*]u8, dest: *Segment, fresh: [*]u8, moved_end: usize) usize {
        const kernel_page = os.pageSize();
        const source_offset = @intFromPtr(ptr) - @intFromPtr(source);
        const dest_offset = @intFromPtr(fresh) - @intFromPtr(dest);
        var at = kernel_page;
        // Bounded: each step moves at least a kernel page.
        while (at < moved_end) {
            const end = source.nextSplit(source_offset + at, source_offset + moved_end) - source_offset;
            if (!reserveMove()) break;
            const done = os.movePages(@alignCast(ptr + at), @alignCast(fresh + at), end - at);
            // Counted and marked even when refused: the kernel may have
            // unmapped the range and os.movePages mapped it again, a kernel
            // mapping of its own where it lies inside an earlier moved piece.
            dest.moved_in += 1;
            dest.markSplit(dest_offset + at);
            dest.markSplit(dest_offset + end);
            if (!done) break;
            at = end;
        }
        return at;
    }

    /// Pieces of blocks moved by their kernel pages (moveLarge: a block
    /// moves as one piece per kernel mapping its pages lie in) into
    /// segments still mapped, process-wide, and the most there may be. A
    /// piece makes its range of the destination segment a kernel mapping
    /// (VMA) of its own, splitting the segment's mapping in up to three: the moved pages keep
    /// the page offsets of where they came from, and the kernel joins
    /// anonymous mappings only where those offsets run on, so the pieces
    /// stay until the segment is unmapped (Linux 6.18, realloc_growth on two
    /// threads: 274 kernel mappings at exit against 50 without moves, 823
    /// over twelve times the run). A process may hold only vm.max_map_count
    /// of them (65,530 by default), past which mmap fails: past this bound
    /// blocks are copied, and moves add at most 2 * moved_blocks_max.
    var moved_blocks: std.atomic.Value(u32) = .init(0);
    pub const moved_blocks_max = 1024;

    /// Counts one more moved piece, unless the bound is reached.
    fn reserveMove() bool {
        // Monotonic: a count that orders nothing; the add makes two racing
        // moves take distinct places under the bound.
        if (moved_blocks.fetchAdd(1, .monotonic) < moved_blocks_max) return true;
        movedBlocksUnmapped(1);
        return false;
    }

    /// `count` moved pieces' kernel mappings are gone (their segment was
    /// unmapped, Segment.destroy) or were never made.
    pub fn movedBlocksUnmapped(count: u32) void {
        if (count == 0) return;
        // Monotonic: as in reserveMove.
        const before = moved_blocks.fetchSub(count, .monotonic);
        assert(before >= count);
    }

    /// Bytes usable at `ptr` (at least what was requested).
    pub fn usableSize(ptr: [*]u8) usize {
        const segment = Segment.ofPtr(ptr);
        if (segment.kind == .huge) return huge.usableSize(segment);
        const page = segment.pageOf(ptr);
        const block = if (page.loadFlags().has_aligned) page.blockStart(ptr) else @as(*Block, @ptrCast(@alignCast(ptr)));
        return @intFromPtr(block) + page.block_size - @intFromPtr(ptr);
    }

    // ==== Checks ========================================================

    /// Verifies the heap's bookkeeping (tests and debugging). Owner only.
    pub fn checkInvariants(heap: *Heap) void {
        // The retained budget is the kept classes' shares, each once.
        var retained: usize = 0;
        var classes = heap.retained_classes;
        while (classes != 0) : (classes &= classes - 1) retained += heap.retained_at[@ctz(classes)].bytes;
        assert(retained == heap.retained_bytes);
        var dirty: usize = 0;
        var segments: usize = 0;
        var tails: usize = 0;
        for (&heap.segments, 0..) |*list, group| {
            var it = list.first;
            while (it) |segment| : (it = segment.all.next) {
                tails += @popCount(segment.tails_waiting);
                assert(segment.tails_old & ~segment.tails_waiting == 0);
                // Only pages in use wait (releasePage clears the bit).
                var bits = segment.tails_waiting;
                while (bits != 0) : (bits &= bits - 1) assert(segment.pages[@ctz(bits)].isFirstSlice() and segment.free_mask & (@as(u64, 1) << @intCast(@ctz(bits))) == 0);
                segments += 1;
                assert(segments <= heap.segment_count);
                assert(segmentGroup(segment) == group);
                assert(segment.ownerRelaxed() == heap);
                assert(segment.kind == .pages);
                assert(segment.in_with_free == segment.hasFreeSlice());
                assert(segment.in_with_run == (segment.hasFreeSlice() and segment.hasFreeRun()));
                segment.checkResidency();
                dirty += segment.dirtyBytes();
            }
        }
        assert(segments == heap.segment_count);
        assert(tails == heap.tail_count);
        var spare_it = heap.spares.first;
        while (spare_it) |spare| : (spare_it = spare.all.next) {
            assert(spare.isEmpty());
            spare.checkResidency();
            dirty += spare.dirtyBytes();
        }
        dirty += heap.huge_cache.bytes;
        assert(dirty == heap.dirty_bytes);
        for (&heap.queues, 0..) |*queue, class| {
            var count: u32 = 0;
            var page_it = queue.first;
            while (page_it) |page| : (page_it = page.next) {
                count += 1;
                assert(count <= queue.count);
                assert(page.class == class and !page.flags.in_full);
                assert(page.used <= page.capacity and page.capacity <= page.reserved);
                // Only a class's first page is kept as retained, and its
                // class's bit (so releaseRetained frees it) says so.
                assert(!page.retained or page == queue.first);
                assert(!page.retained or heap.retained_classes & (@as(u128, 1) << @intCast(class)) != 0);
            }
            assert(count == queue.count);
            if (size_class.blockSize(@intCast(class)) <= direct_size_max_bytes) {
                const words = size_class.blockSize(@intCast(class)) / size_class.word_bytes;
                assert(heap.pages_direct[words] == queue.first orelse &page_empty);
            }
        }
        var page_it = heap.full.first;
        while (page_it) |page| : (page_it = page.next) assert(page.flags.in_full);
    }
};

test "a large block grows in place into the free slices after it" {
    if (config.secure) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const kib = 1024;
    var block = try gpa.alloc(u8, 100 * kib);
    defer gpa.free(block);
    @memset(block, 3);
    const segment = Segment.ofPtr(block.ptr);
    const page = segment.pageOf(block.ptr);
    // The slices up to 800 KiB must be free for this test to say anything.
    const wanted: u6 = @intCast(segment_mod.pageSlices(size_class.ofSize(800 * kib)) - page.slice_count);
    const after = (@as(u64, 1) << wanted) - 1 << @intCast(page.index + page.slice_count);
    if (segment.free_mask & after != after) return error.SkipZigTest;
    for ([_]usize{ 200 * kib, 400 * kib, 800 * kib }) |len| {
        try std.testing.expect(gpa.resize(block, len));
        block = block.ptr[0..len];
        try std.testing.expectEqual(page, segment.pageOf(block.ptr + len - 1));
        try std.testing.expect(std.mem.allEqual(u8, block[0 .. 100 * kib], 3));
        @memset(block, 3);
        thread.current().checkInvariants();
    }
    // Beyond the largest class it would be huge: the caller moves it.
    try std.testing.expect(!gpa.resize(block, size_class.block_size_max_bytes + 1));
}

test "a large block that cannot grow in place moves by its kernel pages, and leaves nothing resident" {
    const gpa = @import("root.zig").allocator;
    const kib = 1024;
    const old_len = Heap.move_bytes_min;
    const pair = try movableTestBlock(gpa);
    defer gpa.free(pair[1]);
    var block = pair[0];
    for (block, 0..) |*byte, i| byte.* = @truncate(i *% 7 +% (i >> 12));
    const segment = Segment.ofPtr(block.ptr);
    const page = segment.pageOf(block.ptr);
    const old = block.ptr;
    const old_first: usize = page.index;
    const old_count: usize = page.slice_count;
    const moved_before = Heap.moved_blocks.load(.monotonic);
    block = try gpa.realloc(block, old_len + 512 * kib);
    defer gpa.free(block);
    try std.testing.expect(block.ptr != old);
    for (block[0..old_len], 0..) |byte, i| try std.testing.expectEqual(@as(u8, @truncate(i *% 7 +% (i >> 12))), byte);
    thread.current().checkInvariants();
    // Where the kernel moves pages, the old block's memory past its first
    // kernel page went with them, and its slices' records say so.
    if (!os.movesPages()) return;
    // The move is counted where its kernel mapping lies.
    try std.testing.expectEqual(moved_before + 1, Heap.moved_blocks.load(.monotonic));
    try std.testing.expect(Segment.ofPtr(block.ptr).moved_in >= 1);
    const seen = os.residentPages(@alignCast(old + os.pageSize()), old_len - os.pageSize()) orelse return;
    try std.testing.expectEqual(@as(usize, 0), seen.resident);
    var units: usize = 0;
    for (segment.slice_touched[old_first..][0..old_count]) |u| units += u;
    try std.testing.expect(units * Segment.touch_unit_bytes <= os.pageSize());
}

test "past the bound on moved blocks, a large block that cannot grow in place is copied" {
    const gpa = @import("root.zig").allocator;
    const old_len = Heap.move_bytes_min;
    const pair = try movableTestBlock(gpa);
    defer gpa.free(pair[1]);
    var block = pair[0];
    @memset(block, 9);
    // As if the process held the most moved blocks it may.
    const saved = Heap.moved_blocks.swap(Heap.moved_blocks_max, .monotonic);
    defer Heap.moved_blocks.store(saved, .monotonic);
    const old = block.ptr;
    const moved_in = movedIn(thread.current());
    block = try gpa.realloc(block, 2 * old_len);
    defer gpa.free(block);
    try std.testing.expect(block.ptr != old);
    try std.testing.expect(std.mem.allEqual(u8, block[0..old_len], 9));
    // Neither counted nor moved.
    try std.testing.expectEqual(@as(u32, Heap.moved_blocks_max), Heap.moved_blocks.load(.monotonic));
    try std.testing.expectEqual(moved_in, movedIn(thread.current()));
}

test "a large block whose pages lie in two kernel mappings moves them one mapping at a time" {
    const gpa = @import("root.zig").allocator;
    const old_len = Heap.move_bytes_min;
    const pair = try movableTestBlock(gpa);
    defer gpa.free(pair[1]);
    var block = pair[0];
    for (block, 0..) |*byte, i| byte.* = @truncate(i *% 13 +% (i >> 12));
    // As if a block had moved in and ended there: a kernel mapping begins
    // inside this one's pages.
    const segment = Segment.ofPtr(block.ptr);
    const kernel_page = os.pageSize();
    segment.markSplit(@intFromPtr(block.ptr) - @intFromPtr(segment) + 4 * kernel_page);
    const moved = Heap.moved_blocks.load(.monotonic);
    const moved_in = movedIn(thread.current());
    const old = block.ptr;
    block = try gpa.realloc(block, 2 * old_len);
    defer gpa.free(block);
    try std.testing.expect(block.ptr != old);
    for (block[0..old_len], 0..) |byte, i| try std.testing.expectEqual(@as(u8, @truncate(i *% 13 +% (i >> 12))), byte);
    thread.current().checkInvariants();
    if (!os.movesPages() or moved + 2 > Heap.moved_blocks_max) return;
    // Two pieces, each a kernel mapping where it lands, each counted.
    try std.testing.expectEqual(moved + 2, Heap.moved_blocks.load(.monotonic));
    try std.testing.expectEqual(moved_in + 2, movedIn(thread.current()));
    const new_segment = Segment.ofPtr(block.ptr);
    const offset = @intFromPtr(block.ptr) - @intFromPtr(new_segment);
    try std.testing.expectEqual(offset + 4 * kernel_page, new_segment.nextSplit(offset + kernel_page, offset + old_len));
}

test "the page a moved block left is not kept for its class, so zeroed allocations over it are zero" {
    if (config.secure or config.valgrind or config.fill_freed_available or !os.can_move or !Heap.knows_zeroes) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const heap = try keptPagesTestHeap(gpa);
    defer heap.decay_due_ns = 0;
    // Sizes of classes no other test uses: the moved block's page is its
    // class's only one.
    const len = 600_000;
    const class = size_class.ofSize(len);
    if (heap.queues[class].count != 0) return error.SkipZigTest;
    // A block with a block of another class right after it, so that it
    // cannot grow in place.
    var block: []u8 = undefined;
    var fence: []u8 = undefined;
    var tries: usize = 0;
    while (true) : (tries += 1) {
        if (tries == 8) return error.SkipZigTest;
        block = try gpa.alloc(u8, len);
        fence = try gpa.alloc(u8, 700_000);
        const page = Segment.ofPtr(block.ptr).pageOf(block.ptr);
        if (Segment.ofPtr(fence.ptr) == Segment.ofPtr(block.ptr) and page.index != 0 and
            Segment.ofPtr(fence.ptr).pageOf(fence.ptr).index == page.index + page.slice_count) break;
        gpa.free(fence);
        gpa.free(block);
    }
    defer gpa.free(fence);
    @memset(block, 'a');
    const moved = Heap.moved_blocks.load(.monotonic);
    const grown = try gpa.realloc(block, 2 * len);
    defer gpa.free(grown);
    if (!os.movesPages() or Heap.moved_blocks.load(.monotonic) == moved) return error.SkipZigTest;
    // The same size again, written, freed, and again, then given back.
    const b = try gpa.alloc(u8, len);
    @memset(b, 'B');
    gpa.free(b);
    const b2 = try gpa.alloc(u8, len);
    @memset(b2, 'C');
    const b3 = try gpa.alloc(u8, len);
    defer gpa.free(b3);
    gpa.free(b2);
    const zeroed = Heap.allocZeroed(500_000, 16) orelse return error.OutOfMemory;
    defer gpa.free(zeroed[0..500_000]);
    // Before, the bytes past the first kernel page were b2's ('C').
    try std.testing.expect(std.mem.allEqual(u8, zeroed[0..500_000], 0));
    heap.checkInvariants();
}

test "an empty segment holding moved blocks' mappings is unmapped once its memory is purged" {
    if (config.secure) return error.SkipZigTest;
    const heap = thread.current();
    // Not the heap's yet: as if moveLarge had moved a block into it, whose
    // pages then went back.
    var segment = Segment.create(heap) orelse return error.SkipZigTest;
    if (!Heap.reserveMove()) {
        segment.destroy();
        return error.SkipZigTest;
    }
    segment.moved_in = 1;
    const moved = Heap.moved_blocks.load(.monotonic);
    // Purged, it is neither pooled nor kept as a spare, but unmapped.
    try std.testing.expect(!pool.put(segment));
    const spares = heap.spares.count;
    heap.keepSpare(segment);
    try std.testing.expectEqual(spares, heap.spares.count);
    try std.testing.expectEqual(moved - 1, Heap.moved_blocks.load(.monotonic));

    // With resident memory it is pooled, and unmapped when the pool purges it.
    segment = Segment.create(heap) orelse return error.SkipZigTest;
    try std.testing.expect(Heap.reserveMove());
    segment.moved_in = 1;
    const slice = segment_mod.slice_bytes;
    @memset(@as([*]u8, @ptrCast(segment))[slice..][0..slice], 0x5a);
    segment.resident_mask |= 1 << 1;
    segment.slice_touched[1] = slice / Segment.touch_unit_bytes;
    purge.touched(slice);
    const pooled = pool.count();
    if (!pool.put(segment)) {
        // The pool is full.
        _ = segment.purgeDirty();
        segment.destroy();
        return error.SkipZigTest;
    }
    try std.testing.expectEqual(pooled + 1, pool.count());
    pool.purgeResident(std.math.maxInt(usize));
    try std.testing.expectEqual(pooled, pool.count());
    try std.testing.expectEqual(moved - 1, Heap.moved_blocks.load(.monotonic));
}

/// Tests: a large block of `len` bytes and a block right after it in the
/// same segment, so that the first cannot grow in place, and not at slice 0
/// (which moveLarge leaves to the caller); null, both freed, where the heap
/// placed them otherwise.
fn blockWithNeighbour(gpa: std.mem.Allocator, len: usize) !?[2][]u8 {
    const block = try gpa.alloc(u8, len);
    const neighbour = gpa.alloc(u8, len) catch |err| {
        gpa.free(block);
        return err;
    };
    const segment = Segment.ofPtr(block.ptr);
    const page = segment.pageOf(block.ptr);
    const next = Segment.ofPtr(neighbour.ptr).pageOf(neighbour.ptr);
    if (Segment.ofPtr(neighbour.ptr) == segment and next.index == page.index + page.slice_count and page.index != 0) return .{ block, neighbour };
    gpa.free(neighbour);
    gpa.free(block);
    return null;
}

/// Tests of moveLarge: a block of `move_bytes_min` with a neighbour after
/// it (blockWithNeighbour), skipped where moves are not built in or the
/// heap placed them otherwise.
fn movableTestBlock(gpa: std.mem.Allocator) ![2][]u8 {
    if (config.secure or config.valgrind or config.fill_freed_available or !os.can_move) return error.SkipZigTest;
    return (try blockWithNeighbour(gpa, Heap.move_bytes_min)) orelse error.SkipZigTest;
}

/// Blocks moved into `heap`'s segments (tests).
fn movedIn(heap: *Heap) usize {
    var sum: usize = 0;
    for (&heap.segments) |*list| {
        var it = list.first;
        while (it) |segment| : (it = segment.all.next) sum += segment.moved_in;
    }
    return sum;
}

test "a large block shrinks in place, and its slices serve the next page" {
    if (config.secure) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const kib = 1024;
    var block = try gpa.alloc(u8, 900 * kib);
    defer gpa.free(block);
    @memset(block, 5);
    const segment = Segment.ofPtr(block.ptr);
    const page = segment.pageOf(block.ptr);
    const slices_before = page.slice_count;
    // Less than half: without the shrink this answer is no (the caller
    // would move the block to a fitting one).
    try std.testing.expect(gpa.resize(block, 150 * kib));
    block = block[0 .. 150 * kib];
    try std.testing.expect(std.mem.allEqual(u8, block, 5));
    try std.testing.expectEqual(segment_mod.pageSlices(size_class.ofSize(150 * kib)), page.slice_count);
    try std.testing.expect(page.slice_count < slices_before);
    const tail = (@as(u64, 1) << @intCast(slices_before - page.slice_count)) - 1 << @intCast(page.index + page.slice_count);
    try std.testing.expectEqual(tail, segment.free_mask & tail);
    thread.current().checkInvariants();
    // The slices given back serve a large page again: here, the block grows
    // back into them.
    try std.testing.expect(gpa.resize(block, 600 * kib));
    block = block.ptr[0 .. 600 * kib];
    try std.testing.expect(std.mem.allEqual(u8, block[0 .. 150 * kib], 5));
    @memset(block, 5);
    thread.current().checkInvariants();
}

test "a large page of a few slices is set up on a resident run too short for a medium page" {
    if (config.secure) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const kib = 1024;
    // 192 KiB blocks: a large page of three slices each, twenty to a
    // segment, which then has no run of eight free slices left.
    const len = 190 * kib;
    assert(segment_mod.pageSlices(size_class.ofSize(len)) == 3);
    gpa.destroy(try gpa.create(u64));
    const heap = thread.current();
    // No resident free memory anywhere but what this test frees.
    _ = heap.trim(0);
    pool.purgeResident(std.math.maxInt(usize));
    var blocks: [24][]u8 = undefined;
    for (&blocks) |*b| {
        b.* = try gpa.alloc(u8, len);
        @memset(b.*, 7);
    }
    defer for (blocks) |b| gpa.free(b);
    // A block whose segment keeps no run for a medium page once it is
    // freed: the run it leaves is resident, and three slices long.
    const index = for (blocks, 0..) |b, i| {
        const segment = Segment.ofPtr(b.ptr);
        const page = segment.pageOf(b.ptr);
        const own: u64 = ((@as(u64, 1) << @intCast(page.slice_count)) - 1) << @intCast(page.index);
        // Slice 0 holds the header, and starts no page of several slices.
        var run: usize = 0;
        var longest: usize = 0;
        for (1..segment_mod.slice_count) |slice| {
            run = if ((segment.free_mask | own) >> @intCast(slice) & 1 != 0) run + 1 else 0;
            longest = @max(longest, run);
        }
        if (page.slice_count == 3 and longest < segment_mod.medium_page_slices) break i;
    } else return error.SkipZigTest;
    gpa.free(blocks[index]);
    try std.testing.expect(!Segment.ofPtr(blocks[index].ptr).hasFreeRun());
    const footprint = purge.footprintBytes();
    // Before, only segments with a run for a medium page were looked at,
    // and the page was set up on fresh slices elsewhere.
    blocks[index] = try gpa.alloc(u8, len);
    try std.testing.expectEqual(footprint, purge.footprintBytes());
    @memset(blocks[index], 7);
    heap.checkInvariants();
}

test "a small or medium block shrinks in place only within its class from Zig, within half from C" {
    const gpa = @import("root.zig").allocator;
    // Sizes inside their classes, so that a hardened canary changes none.
    inline for (.{ 1000, 40 * 1024 - 512 }) |len| {
        const block = try gpa.alloc(u8, len);
        defer gpa.free(block);
        const page = Segment.ofPtr(block.ptr).pageOf(block.ptr);
        // Two thirds of the block: what an array's shrink to its length
        // leaves at worst. Another class fits it, so the block moves.
        const shrunk = len * 2 / 3;
        try std.testing.expect(size_class.ofSize(shrunk) != page.class);
        try std.testing.expect(!gpa.resize(block, shrunk));
        try std.testing.expectEqual(null, gpa.remap(block, shrunk));
        // C's realloc keeps it: it wastes less than half of the block.
        try std.testing.expectEqual(block.ptr, Heap.remap(block.ptr, 16, shrunk, .to_half).?);
        // A shrink within the class stays in place.
        const same_class = len - 8;
        try std.testing.expectEqual(page.class, size_class.ofSize(same_class));
        try std.testing.expect(gpa.resize(block, same_class));
        // Less than half of the block: neither keeps it.
        try std.testing.expectEqual(null, Heap.remap(block.ptr, 16, len / 4, .to_half));
    }
}

test "an exhausted page is extended only when no other page of its class holds freed blocks" {
    if (config.secure) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    // 3 KiB blocks: 21 to a small page, linked one at a time as it extends.
    const Block3k = [3 * 1024]u8;
    const pageOfBlock = struct {
        fn of(block: *Block3k) *Page {
            return Segment.ofPtr(block).pageOf(@ptrCast(block));
        }
    }.of;
    var blocks: [64]*Block3k = undefined;
    var count: usize = 0;
    defer for (blocks[0..count]) |b| gpa.destroy(b);
    blocks[0] = try gpa.create(Block3k);
    count = 1;
    const page_a = pageOfBlock(blocks[0]);
    // Fill until a newer page of the class is first in its queue, with
    // untouched blocks left and none free.
    const page_b = while (count < blocks.len) {
        blocks[count] = try gpa.create(Block3k);
        count += 1;
        const page = pageOfBlock(blocks[count - 1]);
        if (page != page_a and page.capacity < page.reserved and page.free == null) break page;
    } else return error.SkipZigTest;
    const capacity_b = page_b.capacity;
    // Three holes in the older page, freed by the owner.
    var holes: usize = 0;
    var i: usize = 0;
    while (i < count and holes < 3) {
        if (pageOfBlock(blocks[i]) == page_a) {
            gpa.destroy(blocks[i]);
            blocks[i] = blocks[count - 1];
            count -= 1;
            holes += 1;
        } else i += 1;
    }
    try std.testing.expectEqual(@as(usize, 3), holes);
    // The next three blocks fill the holes; the newer page stays as it was.
    for (0..3) |_| {
        blocks[count] = try gpa.create(Block3k);
        count += 1;
        try std.testing.expectEqual(page_a, pageOfBlock(blocks[count - 1]));
    }
    try std.testing.expectEqual(capacity_b, page_b.capacity);
    thread.current().checkInvariants();
}

test "a free page weighs what its blocks touched, not its whole slice" {
    if (config.secure) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    // A size no other test uses, so that the block starts a page of its own.
    const block = try gpa.alloc(u8, 7000);
    const segment = Segment.ofPtr(block.ptr);
    const page = segment.pageOf(block.ptr);
    if (page.used != 1 or page.slice_count != 1) {
        gpa.free(block);
        return error.SkipZigTest;
    }
    const slice: u64 = @as(u64, 1) << @intCast(page.index);
    const heap = thread.current();
    const free_before = segment.dirtyBytes();
    gpa.free(block);
    // Frees the emptied page, even one kept as its class's only page.
    heap.collectFreePages();
    if (segment.free_mask & slice == 0) return error.SkipZigTest;
    const gained = segment.dirtyBytes() - free_before;
    // The slice's touched prefix: 8 KiB for this block (its page was
    // extended 4 KiB at a time), more if an earlier page reached further.
    const touched = @as(usize, segment.slice_touched[page.index]) * Segment.touch_unit_bytes;
    if (touched == segment_mod.slice_bytes) return error.SkipZigTest;
    try std.testing.expect(touched >= 2 * page_mod.extend_bytes_max);
    // Counted whole, the slice weighed 64 KiB against the budget. (Slice 0
    // starts with the segment's header, which is not free memory.)
    const header = if (page.index == 0) Segment.firstBlockOffset() else 0;
    try std.testing.expectEqual(touched - header, gained);
    heap.checkInvariants();
}

/// The testing thread's heap, which its first allocation sets up, for
/// the tests of kept pages (the hardened build keeps none).
/// The calling thread's heap, for the tests of pages kept for their class,
/// with its decay period held open until the test ends it (`defer
/// heap.decay_due_ns = 0`): a period's end gives kept pages back, and
/// under qemu on a loaded machine one ended between two frees of a test
/// (aarch64, 16 KiB pages), which then found its kept page gone.
fn keptPagesTestHeap(gpa: std.mem.Allocator) !*Heap {
    if (config.secure) return error.SkipZigTest;
    gpa.destroy(try gpa.create(u64));
    const heap = thread.current();
    heap.decay_due_ns = std.math.maxInt(u64);
    return heap;
}

test "a program stepping through sizes keeps each size's page while it allocates that size" {
    const gpa = @import("root.zig").allocator;
    const heap = try keptPagesTestHeap(gpa);
    defer heap.decay_due_ns = 0;
    // Their touched pages add up to several times the retained budget.
    const sizes = [_]usize{ 24 << 10, 40 << 10, 56 << 10, 96 << 10, 160 << 10, 224 << 10, 320 << 10, 448 << 10, 640 << 10 };
    var checked: usize = 0;
    for (sizes) |size| {
        const class = size_class.ofSize(size);
        // A class other tests left pages in keeps none of them.
        if (heap.queues[class].count != 0) continue;
        var page: *Page = undefined;
        // Long enough for the pages kept for earlier sizes to age.
        for (0..2 * retain_age_min_retires) |i| {
            const block = try gpa.alloc(u8, size);
            block[0] = @truncate(i);
            block[size - 1] = @truncate(i);
            page = Segment.ofPtr(block.ptr).pageOf(block.ptr);
            gpa.free(block);
        }
        // Kept: the next pair of this size costs no page set-up. (Before,
        // the budget held the first three sizes' pages, and every pair of
        // the later ones freed its page and set up a new one.)
        try std.testing.expect(heap.queues[class].first == page and page.retained);
        try std.testing.expect(heap.retained_bytes <= retain_bytes_max);
        checked += 1;
        // A few live at once: the kept page fills up and is kept no more,
        // and one of the pages is kept again when they all empty. (Counted
        // twice before, the class's share of the budget stayed until the
        // period ended, and the larger sizes found no room.)
        var live: [3][]u8 = undefined;
        for (&live) |*b| b.* = try gpa.alloc(u8, size);
        for (live) |b| gpa.free(b);
        heap.checkInvariants();
    }
    if (checked < sizes.len / 2) return error.SkipZigTest;
}

test "a page kept for its class stays counted when a full page of that class empties" {
    const gpa = @import("root.zig").allocator;
    const heap = try keptPagesTestHeap(gpa);
    defer heap.decay_due_ns = 0;
    // One block per page, in a class no other test uses.
    const size = 200 * 1024;
    const class = size_class.ofSize(size);
    if (heap.queues[class].count != 0) return error.SkipZigTest;
    const first = try gpa.alloc(u8, size);
    // The first page is full: the second block parks it and takes a page.
    const second = try gpa.alloc(u8, size);
    const kept = Segment.ofPtr(second.ptr).pageOf(second.ptr);
    gpa.free(second);
    if (!kept.retained) return error.SkipZigTest;
    // The parked page comes back and empties beside the kept one.
    gpa.free(first);
    try std.testing.expect(kept.retained and heap.queues[class].first == kept);
    try std.testing.expect(heap.retained_classes & (@as(u128, 1) << @intCast(class)) != 0);
    heap.checkInvariants();
}

/// Tests: a block of `block_len` bytes whose page is set up over the slices
/// of a large block of `whole_len` bytes just written whole and freed
/// (resident, recorded touched). Blocks that land elsewhere are held, so
/// that the next try finds those slices first; `release` frees them.
const PageOverWritten = struct {
    held: [16][]u8 = undefined,
    held_count: usize = 0,

    fn find(over: *PageOverWritten, gpa: std.mem.Allocator, heap: *Heap, whole_len: usize, block_len: usize) !struct { []u8, *Segment, *Page } {
        // Bounded by the held blocks.
        while (over.held_count < over.held.len) {
            const whole = try gpa.alloc(u8, whole_len);
            @memset(whole, 1);
            const at = Segment.ofPtr(whole.ptr).pageOf(whole.ptr);
            gpa.free(whole);
            heap.collectFreePages();
            const block = try gpa.alloc(u8, block_len);
            const segment = Segment.ofPtr(block.ptr);
            const page = segment.pageOf(block.ptr);
            if (page == at) return .{ block, segment, page };
            over.held[over.held_count] = block;
            over.held_count += 1;
        }
        return error.SkipZigTest;
    }

    fn release(over: *PageOverWritten, gpa: std.mem.Allocator) void {
        for (over.held[0..over.held_count]) |b| gpa.free(b);
    }
};

test "a large page's dead tail goes back at the period's end, and stays if the page goes first" {
    // Purged tails are whole kernel pages: with 64 KiB ones (some aarch64
    // kernels, wasm) a slice has none past a block that ends inside it.
    if (os.purge_needs_commit or 2 * os.pageSize() > segment_mod.slice_bytes) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const heap = try keptPagesTestHeap(gpa);
    defer heap.decay_due_ns = 0;
    const kib = 1024;
    // Whole slices, all written; then a block a slice's half shorter set
    // up over the same slices (free runs found first are held until it
    // is): its last slice's second half is resident and holds nothing.
    const whole_len = 4 * segment_mod.slice_bytes - 64 * kib / 2;
    const shorter_len = 3 * segment_mod.slice_bytes + 16 * kib;
    var over: PageOverWritten = .{};
    defer over.release(gpa);
    const shorter, const segment, const page = try over.find(gpa, heap, whole_len, shorter_len);
    try std.testing.expectEqual(@as(u8, 4), page.slice_count);
    const last = page.index + page.slice_count - 1;
    const touched = segment.slice_touched[last];
    const bit = @as(u64, 1) << @intCast(page.index);
    const waiting = heap.tail_count;
    try std.testing.expect(segment.hasDeadTail(page));
    try std.testing.expect(waiting >= 1 and segment.tails_waiting & bit != 0);
    // Freed before the period ends: nothing was purged, and the slices are
    // free memory as they were, for the next page.
    gpa.free(shorter);
    heap.collectFreePages();
    try std.testing.expectEqual(waiting - 1, heap.tail_count);
    try std.testing.expect(segment.tails_waiting & bit == 0);
    try std.testing.expectEqual(touched, segment.slice_touched[last]);
    // Set up again, and still in use when the period ends: the tail goes.
    const again = try gpa.alloc(u8, shorter_len);
    defer gpa.free(again);
    try std.testing.expectEqual(page, Segment.ofPtr(again.ptr).pageOf(again.ptr));
    try std.testing.expectEqual(waiting, heap.tail_count);
    // The first period's end finds it young (it may die within the next
    // period); the second purges it.
    heap.decay_due_ns = 1;
    purge.decayIfDue(heap);
    try std.testing.expect(segment.hasDeadTail(page) and segment.tails_old & bit != 0);
    heap.decay_due_ns = 1;
    purge.decayIfDue(heap);
    try std.testing.expect(segment.tails_waiting & bit == 0);
    try std.testing.expect(!segment.hasDeadTail(page));
    try std.testing.expect(segment.slice_touched[last] < touched);
    heap.checkInvariants();
}

test "a medium page set up over touched slices gives back what it has not linked by the period's end" {
    // As above: purged tails are whole kernel pages.
    if (os.purge_needs_commit or 2 * os.pageSize() > segment_mod.slice_bytes) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const heap = try keptPagesTestHeap(gpa);
    defer heap.decay_due_ns = 0;
    const kib = 1024;
    // A class no other test leaves pages in.
    const block_len = 40 * kib;
    const class = size_class.ofSize(block_len);
    if (segment_mod.Kind.ofClass(class) != .medium or heap.queues[class].count != 0) return error.SkipZigTest;
    // A large block as long as a medium page, written whole and freed:
    // the medium page set up next over its slices finds them resident.
    const whole_len = segment_mod.medium_page_bytes - 32 * kib;
    var over: PageOverWritten = .{};
    defer over.release(gpa);
    const first, const segment, const page = try over.find(gpa, heap, whole_len, block_len);
    defer gpa.free(first);
    try std.testing.expectEqual(segment_mod.medium_page_slices, page.slice_count);
    const bit = @as(u64, 1) << @intCast(page.index);
    try std.testing.expect(segment.hasDeadTail(page) and segment.tails_waiting & bit != 0);
    const last = page.index + page.slice_count - 1;
    // The large block reached into the last slice.
    try std.testing.expect(segment.slice_touched[last] > 0);
    const footprint = purge.footprintBytes();
    // Young at the first period's end; at the second, what the page has
    // not linked goes: all of its slices past its first blocks.
    heap.decay_due_ns = 1;
    purge.decayIfDue(heap);
    try std.testing.expect(segment.tails_old & bit != 0);
    heap.decay_due_ns = 1;
    purge.decayIfDue(heap);
    try std.testing.expect(segment.tails_waiting & bit == 0 and !segment.hasDeadTail(page));
    try std.testing.expectEqual(@as(u8, 0), segment.slice_touched[last]);
    const linked_end = std.mem.alignForward(usize, @intFromPtr(page.area) + page.touchedBytes(), os.pageSize());
    try std.testing.expectEqual(linked_end, segment.touchedEnd(page.index, last));
    try std.testing.expect(purge.footprintBytes() < footprint);
    // The page goes on linking blocks into the memory it gave back, which
    // the record counts again as it is touched.
    var more: [8][]u8 = undefined;
    for (&more, 0..) |*b, i| {
        b.* = try gpa.alloc(u8, block_len);
        @memset(b.*, @truncate(i));
    }
    for (more, 0..) |b, i| {
        try std.testing.expect(std.mem.allEqual(u8, b, @truncate(i)));
        gpa.free(b);
    }
    heap.checkInvariants();
}

test "a page that other threads' frees emptied while it was current retires at the period's end" {
    if (builtin.single_threaded) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const heap = try keptPagesTestHeap(gpa);
    defer heap.decay_due_ns = 0;
    // One block per page, in a class no other test uses.
    const size = 176 * 1024;
    const class = size_class.ofSize(size);
    if (heap.queues[class].count != 0) return error.SkipZigTest;
    const block = try gpa.alloc(u8, size);
    const page = Segment.ofPtr(block.ptr).pageOf(block.ptr);
    try std.testing.expect(heap.queues[class].first == page and page.isCurrent());
    const Freer = struct {
        fn run(a: std.mem.Allocator, b: []u8) void {
            a.free(b);
        }
    };
    const freer = try std.Thread.spawn(.{}, Freer.run, .{ gpa, block });
    freer.join();
    // Back, unannounced: the page is current.
    try std.testing.expect(page.used == 1 and page.isEntirelyFree() and !page.retained);
    // The period ends at the next slow path.
    heap.decay_due_ns = 1;
    purge.decayIfDue(heap);
    // Kept as its class's only page (and given back at the next period's
    // end if still empty), or given back already: in either case counted
    // by the purge rules. Before, it stayed in use until the thread ended.
    const first = heap.queues[class].first;
    try std.testing.expect(first == null or (first == page and page.retained));
    heap.checkInvariants();
}
