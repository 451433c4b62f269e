//! Segments: the 4 MiB regions, aligned to their own size, that pages live in.
//!
//! A segment starts with this header; the header holds the metadata of every
//! page in the segment, so the page of any block is found from the block's
//! address alone: mask to the segment, shift to the page index.
//!
//!   small segment   64 pages of 64 KiB, blocks up to 8 KiB
//!   medium segment   8 pages of 512 KiB, blocks up to 64 KiB
//!   large segment    1 page (the whole segment), blocks up to 1 MiB
//!   huge            one allocation of any size in its own mapping (huge.zig)
//!
//! Page 0 shares its space with the header, so its blocks start at
//! `header_bytes`. Every page area starts at a multiple of 4 KiB, which is why
//! blocks can promise alignments up to `block_align_max_bytes`.
//!
//! A segment belongs to one heap (`owner`), which alone allocates from its
//! pages and frees into them directly; other threads only push onto a page's
//! `thread_free` and set bits in `page_notice`.
//!
//! Pointers are mapped to their segment with `(ptr - 1) & ~mask` rather than
//! `ptr & ~mask`: no block of a small, medium or large segment starts at the
//! segment's first byte (the header is there), and a huge allocation aligned
//! to more than a segment starts exactly one segment after its header. One
//! formula thus covers every block kennel hands out.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const size_class = @import("size_class.zig");
const page_mod = @import("page.zig");
const Page = page_mod.Page;
const Heap = @import("heap.zig").Heap;
const config = @import("config.zig");

pub const segment_size_bytes = 4 * 1024 * 1024;
const segment_mask = segment_size_bytes - 1;

pub const small_page_bytes = 64 * 1024;
pub const medium_page_bytes = 512 * 1024;
pub const small_page_count = segment_size_bytes / small_page_bytes;
pub const medium_page_count = segment_size_bytes / medium_page_bytes;
pub const page_count_max = small_page_count;

/// Largest block of each page kind: at least 8 blocks fit in a page.
pub const small_block_max_bytes = small_page_bytes / 8;
pub const medium_block_max_bytes = medium_page_bytes / 8;
pub const large_block_max_bytes = size_class.block_size_max_bytes;

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

pub const Kind = enum(u8) {
    small,
    medium,
    large,
    huge,

    pub fn ofClass(class: size_class.Class) Kind {
        const block_size = size_class.blockSize(class);
        if (block_size <= small_block_max_bytes) return .small;
        if (block_size <= medium_block_max_bytes) return .medium;
        return .large;
    }

    fn pageShift(kind: Kind) u8 {
        return switch (kind) {
            .small => std.math.log2_int(usize, small_page_bytes),
            .medium => std.math.log2_int(usize, medium_page_bytes),
            .large => std.math.log2_int(usize, segment_size_bytes),
            .huge => huge_page_shift,
        };
    }

    fn pageCount(kind: Kind) u8 {
        return switch (kind) {
            .small => small_page_count,
            .medium => medium_page_count,
            .large, .huge => 1,
        };
    }
};

/// The page shift of a huge mapping: every offset inside it maps to page 0.
pub const huge_page_shift = @bitSizeOf(usize) - 1;

/// Intrusive links for the heap's segment lists.
pub const Link = extern struct {
    next: ?*Segment = null,
    prev: ?*Segment = null,
};

/// Extern: fields stay in this order, so the ones every free reads share
/// the header's first cache line (Zig's automatic layout had put them after
/// the 4 KiB page array).
pub const Segment = extern struct {
    // ---- Read by any thread ----
    /// The heap that owns every page here; null for huge allocations. Changes
    /// only when a heap absorbs an orphaned heap's segments (thread.zig).
    owner: std.atomic.Value(?*Heap),
    /// Pages whose full flag a remote free cleared: bit i is page i.
    page_notice: PageBits,
    kind: Kind,
    /// log2 of the page size (`huge_page_shift` for huge).
    page_shift: u8,
    page_count: u8,
    /// In the owner's list of segments with free pages (small, medium).
    in_with_free: bool,

    // ---- Owner only ----
    /// Bit i: page i holds no blocks and may be handed to a size class.
    free_mask: u64,
    /// Bit c: chunk c (`chunk_bytes` at offset c * chunk_bytes; chunk 0
    /// from the end of the header) has been touched and not purged since,
    /// so may be resident. Kept across layouts: a spare segment laid out
    /// anew still knows which of its memory is resident. The free memory of
    /// the segment is its resident chunks under free pages.
    resident_mask: u64,
    /// In the owner's list of all its segments.
    all: Link,
    /// In the owner's list of segments with free pages (small, medium).
    with_free: Link,

    // ---- Huge allocations only ----
    /// Length of the whole mapping, header included.
    huge_mapping_bytes: usize,
    /// Offset of the block from the segment start.
    huge_block_offset: usize,
    /// Alignment the block was requested with (kept for moving remaps).
    huge_alignment: usize,

    // ---- Owner only (or the cache holding it) ----
    /// The owner's decay period (Heap.period_index) in which free memory
    /// last came to this segment or huge mapping: purges take memory from
    /// earlier periods first (purge.zig).
    freed_period: u32,

    pages: [page_count_max]Page,

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

    /// Hardened (config.hardening.check_frees): after the metadata, one bit
    /// per block of every page, set while the block is handed out. Free
    /// clears it with an atomic read-modify-write, so a second free of the
    /// block, from any thread, finds it clear (check.zig). Outside the
    /// blocks, so nothing the program writes into freed memory can hide a
    /// double free. Sized for the fullest page: 64 KiB of 16-byte blocks
    /// (the hardened minimum; medium and large pages hold at most 64 blocks).
    pub const live_bits_per_page = small_page_bytes / 16;
    pub const live_map_bytes = if (config.hardening.check_frees) page_count_max * live_bits_per_page / 8 else 0;
    pub const LiveWords = [live_bits_per_page / @bitSizeOf(usize)]std.atomic.Value(usize);

    /// Bytes from the segment start to the first block of page 0.
    pub const header_bytes = metadata_bytes + live_map_bytes;

    comptime {
        // 8 KiB with 64-bit pointers (pages of 64 bytes), 4 KiB with 32-bit.
        assert(metadata_bytes == if (@bitSizeOf(usize) >= 64) 8192 else 4096);
        assert(header_bytes % block_align_max_bytes == 0);
        assert(@offsetOf(Segment, "pages") <= 128);
        assert(segment_size_bytes >= 2 * small_page_bytes);
        assert(small_page_bytes > header_bytes);
    }

    /// The live-block bits of page `index` (hardened only).
    pub fn liveWords(segment: *Segment, index: usize) *LiveWords {
        comptime assert(config.hardening.check_frees);
        assert(index < page_count_max);
        const base: [*]u8 = @ptrCast(segment);
        return @ptrCast(@alignCast(base + metadata_bytes + index * @sizeOf(LiveWords)));
    }

    /// The segment containing the block that starts at `ptr`.
    pub inline fn ofPtr(ptr: *const anyopaque) *Segment {
        return @ptrFromInt((@intFromPtr(ptr) - 1) & ~@as(usize, segment_mask));
    }

    /// The page containing the block that starts at `ptr`.
    pub inline fn pageOf(segment: *Segment, ptr: *const anyopaque) *Page {
        const index = (@intFromPtr(ptr) - @intFromPtr(segment)) >> @intCast(segment.page_shift);
        assert(index < segment.page_count);
        return &segment.pages[index];
    }

    /// The owner, as seen by any thread. Monotonic: the owner compares it
    /// with itself (a value only it can have stored), and other threads only
    /// need some recent value (see Heap.notifyOwner for the one exception).
    pub inline fn ownerRelaxed(segment: *const Segment) ?*Heap {
        return segment.owner.load(.monotonic);
    }

    /// Maps a fresh segment of `kind` for `owner`. Null when out of memory.
    pub fn create(kind: Kind, owner: *Heap) ?*Segment {
        assert(kind != .huge);
        const base = os.map(segment_size_bytes, segment_size_bytes, 0) orelse return null;
        const segment: *Segment = @ptrCast(base);
        const guard = guardBytes();
        if ((guard > 0 and !os.protectNone(base + segment_size_bytes - guard, guard)) or !segment_map.add(segment)) {
            os.unmap(base, segment_size_bytes);
            return null;
        }
        segment.owner = .init(owner);
        segment.page_notice = .empty;
        segment.all = .{};
        segment.with_free = .{};
        segment.in_with_free = false;
        segment.huge_mapping_bytes = 0;
        segment.huge_block_offset = 0;
        segment.huge_alignment = 0;
        segment.freed_period = 0;
        segment.resident_mask = 0;
        segment.setLayout(kind);
        return segment;
    }

    /// (Re)divides an empty segment into pages of `kind`.
    pub fn setLayout(segment: *Segment, kind: Kind) void {
        assert(kind != .huge);
        segment.kind = kind;
        segment.page_shift = kind.pageShift();
        segment.page_count = kind.pageCount();
        segment.free_mask = segment.usablePages();
        // Notices left from the old layout name pages that may not exist in
        // the new one (whose metadata past page_count is stale): the segment
        // is empty, so no remote free is announcing anything, and every bit
        // is stale. Monotonic: no notifier runs; only the owner reads it.
        segment.page_notice.clear();
        for (segment.pages[0..segment.page_count], 0..) |*page, i| {
            page.* = .{ .index = @intCast(i) };
        }
    }

    pub fn destroy(segment: *Segment) void {
        assert(segment.kind != .huge);
        assert(segment.isEmpty());
        segment_map.remove(segment);
        os.unmap(@ptrCast(@alignCast(segment)), segment_size_bytes);
    }

    /// Bit i: page i can hold blocks. Every page, unless a guard page
    /// swallows the last one (small pages under 64 KiB kernel pages).
    pub fn usablePages(segment: *Segment) u64 {
        const count = segment.page_count;
        const all = if (count == 64) std.math.maxInt(u64) else (@as(u64, 1) << @intCast(count)) - 1;
        if (segment.pageArea(count - 1).len > 0) return all;
        return all & ~(@as(u64, 1) << @intCast(count - 1));
    }

    pub fn isEmpty(segment: *Segment) bool {
        return segment.free_mask == segment.usablePages();
    }

    pub fn hasFreePage(segment: *const Segment) bool {
        return segment.free_mask != 0;
    }

    /// The block area of page `index`.
    pub fn pageArea(segment: *Segment, index: usize) []u8 {
        assert(index < segment.page_count);
        const base: [*]u8 = @ptrCast(segment);
        const shift: std.math.Log2Int(usize) = @intCast(segment.page_shift);
        const start = if (index == 0) header_bytes else index << shift;
        const end = @min((index + 1) << shift, segment_size_bytes - guardBytes());
        assert(start % block_align_max_bytes == 0 and start <= end);
        return base[start..end];
    }

    /// Chunks of the resident map: as many as small pages, so that a small
    /// page is one chunk and every larger page a whole number of them.
    pub const chunk_bytes = small_page_bytes;
    const chunk_shift = std.math.log2_int(usize, chunk_bytes);

    comptime {
        assert(segment_size_bytes / chunk_bytes == 64);
    }

    /// Chunks of `pages` (a mask of pages in the current layout).
    fn chunksOf(segment: *const Segment, pages: u64) u64 {
        return chunksOfPages(segment.page_shift, pages);
    }

    /// Resident bytes under `pages` of a layout with pages of 2^page_shift
    /// bytes (statistics read another thread's masks and pass them here).
    pub fn residentBytesUnder(page_shift: u8, pages: u64, resident: u64) usize {
        return chunkBytes(chunksOfPages(page_shift, pages) & resident);
    }

    fn chunksOfPages(page_shift: u8, pages: u64) u64 {
        assert(page_shift >= chunk_shift and page_shift <= std.math.log2_int(usize, segment_size_bytes));
        const per_page_log2: usize = page_shift - chunk_shift;
        if (per_page_log2 == 0) return pages;
        const per_page: usize = @as(usize, 1) << @intCast(per_page_log2);
        const run: u64 = if (per_page == 64) std.math.maxInt(u64) else (@as(u64, 1) << @intCast(per_page)) - 1;
        var chunks: u64 = 0;
        var mask = pages;
        // At most 8 pages have more than one chunk.
        while (mask != 0) : (mask &= mask - 1) {
            const first_chunk: usize = @as(usize, @ctz(mask)) << @intCast(per_page_log2);
            chunks |= run << @intCast(first_chunk);
        }
        return chunks;
    }

    /// Bytes of memory under `chunks` (chunk 0 starts after the header).
    fn chunkBytes(chunks: u64) usize {
        const all = @as(usize, @popCount(chunks)) * chunk_bytes;
        return if (chunks & 1 != 0) all - header_bytes else all;
    }

    /// Notes that page `index` has been touched up to its capacity.
    pub fn markTouched(segment: *Segment, page: *const Page) void {
        const touched = page.touchedBytes();
        if (touched == 0) return;
        const start = @intFromPtr(page.area) - @intFromPtr(segment);
        const first = start >> chunk_shift;
        const last = (start + touched - 1) >> chunk_shift;
        assert(last < 64);
        const count: u7 = @intCast(last - first + 1);
        const run = if (count == 64) std.math.maxInt(u64) else (@as(u64, 1) << @intCast(count)) - 1;
        segment.resident_mask |= run << @intCast(first);
    }

    /// Takes a free page, preferring one with resident memory. Returns the
    /// page and its resident bytes (free memory that goes back into use);
    /// null when the system cannot commit the page's memory again after a
    /// purge (Windows, out of commit charge).
    pub fn takePage(segment: *Segment) ?struct { *Page, usize } {
        assert(segment.free_mask != 0);
        var pick = segment.free_mask;
        var mask = segment.free_mask;
        // At most 64 pages.
        while (mask != 0) : (mask &= mask - 1) {
            const bit = mask & (~mask +% 1);
            if (segment.chunksOf(bit) & segment.resident_mask != 0) {
                pick = bit;
                break;
            }
        }
        const index: u6 = @intCast(@ctz(pick));
        // Where purged memory faults until committed (Windows): commit the
        // page unless all of it is resident. Memory never touched since the
        // segment was mapped is committed already, and committing it again
        // costs one system call.
        if (os.purge_needs_commit and segment.chunksOf(@as(u64, 1) << index) & ~segment.resident_mask != 0) {
            const area = segment.pageArea(index);
            if (!os.commit(area.ptr, area.len)) return null;
        }
        segment.free_mask &= ~(@as(u64, 1) << index);
        return .{ &segment.pages[index], chunkBytes(segment.chunksOf(@as(u64, 1) << index) & segment.resident_mask) };
    }

    /// Gives a page back to the segment; its memory stays resident until
    /// the heap purges it. Returns the page's resident bytes (free memory
    /// the segment gained).
    pub fn releasePage(segment: *Segment, page: *Page) usize {
        const bit = @as(u64, 1) << @intCast(page.index);
        assert(segment.free_mask & bit == 0);
        assert(page.next == null and page.prev == null);
        segment.free_mask |= bit;
        page.free = null;
        page.used = 0;
        page.flags = .{};
        return chunkBytes(segment.chunksOf(bit) & segment.resident_mask);
    }

    /// Resident bytes under free pages: the segment's free memory.
    pub fn dirtyBytes(segment: *const Segment) usize {
        return chunkBytes(segment.chunksOf(segment.free_mask) & segment.resident_mask);
    }

    /// Returns the resident memory under free pages to the OS, a run of
    /// adjacent chunks per system call. Returns the bytes released (as
    /// counted by `dirtyBytes`).
    pub fn purgeDirty(segment: *Segment) usize {
        var chunks = segment.chunksOf(segment.free_mask) & segment.resident_mask;
        const released = chunkBytes(chunks);
        segment.resident_mask &= ~chunks;
        const base: [*]u8 = @ptrCast(segment);
        const end_limit = segment_size_bytes - guardBytes();
        // Each step clears a run of set bits.
        while (chunks != 0) {
            const first = @ctz(chunks);
            const run = @ctz(~(chunks >> @intCast(first)));
            const start = if (first == 0) header_bytes else @as(usize, first) << chunk_shift;
            const end = @min((@as(usize, first) + run) << chunk_shift, end_limit);
            if (end > start) os.purge(base + start, end - start);
            chunks &= if (first + run >= 64) 0 else ~((@as(u64, 1) << @intCast(first + run)) - 1);
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

test "layouts cover the segment and keep areas 4 KiB aligned" {
    inline for (.{ Kind.small, Kind.medium, Kind.large }) |kind| {
        var end: usize = Segment.header_bytes;
        const shift: std.math.Log2Int(usize) = @intCast(kind.pageShift());
        for (0..kind.pageCount()) |i| {
            const start = if (i == 0) Segment.header_bytes else i << shift;
            try std.testing.expectEqual(end, start);
            end = @min((i + 1) << shift, segment_size_bytes);
        }
        try std.testing.expectEqual(@as(usize, segment_size_bytes), end);
    }
}

test "ofPtr finds the header for block starts" {
    const base: usize = 7 * segment_size_bytes;
    try std.testing.expectEqual(base, @intFromPtr(Segment.ofPtr(@ptrFromInt(base + Segment.header_bytes))));
    try std.testing.expectEqual(base, @intFromPtr(Segment.ofPtr(@ptrFromInt(base + segment_size_bytes - 8))));
    // A huge block aligned to a segment or more starts one segment after its header.
    try std.testing.expectEqual(base, @intFromPtr(Segment.ofPtr(@ptrFromInt(base + segment_size_bytes))));
}

test "a segment laid out anew drops the notices of its old layout" {
    var owner: Heap = Heap.init_value;
    const segment = Segment.create(.small, &owner) orelse return error.SkipZigTest;
    defer segment.destroy();
    // A notice for page 40 of the small layout, never handled: the medium
    // layout has 8 pages, and its metadata past them is the old layout's.
    _ = segment.page_notice.word(40).fetchOr(Segment.PageBits.bit(40), .monotonic);
    segment.setLayout(.medium);
    try std.testing.expect(!segment.page_notice.anySet());
}
