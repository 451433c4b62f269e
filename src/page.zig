//! A page: a run of memory inside a segment holding blocks of one size class,
//! and the free lists that hand those blocks out.
//!
//! Three lists, after mimalloc's free-list sharding:
//! - `free`: blocks the owning thread may hand out. Allocation pops here, and
//!   frees by the owning thread push here (intrusive, LIFO).
//! - the untouched tail: blocks [capacity, reserved) have never been handed
//!   out; `extend` links a bounded chunk of them into `free` on demand, so
//!   memory that is never used is never touched.
//! - `thread_free`: an atomic stack that other threads push their frees onto.
//!   The owner takes the whole stack, and only when `free` is empty, so the
//!   stack becomes the new `free` list without being walked: walking it
//!   would fetch every block from the cache of the core that freed it, long
//!   before the block is used again.
//!
//! The `thread_free` word packs three things. With 64-bit words:
//!
//!   bits 48..63  number of blocks on the stack
//!   bits  3..47  address of the top block (os.address_bits: every mapping
//!                kennel makes ends below 2^48)
//!   bit   0      `notifying`: a remote free is announcing the page
//!
//! With 32-bit words an address leaves no room for the count, so the top
//! block is named by its index in the page instead:
//!
//!   bits 18..31  number of blocks on the stack
//!   bits  1..17  index of the top block + 1 (0: empty)
//!   bit   0      `notifying`
//!
//! With the count, `used == pending` tells the owner the page is entirely
//! free without looking at the blocks. A remote free announces the page to
//! its owner (Heap.notifyOwner) in two cases: it is the first remote free
//! into a page parked in the full queue, or it frees the page's last live
//! block. While `notifying` is set the owner keeps the page (and so its
//! segment) mapped, because the announcing thread still writes to the
//! segment header.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const size_class = @import("size_class.zig");
const config = @import("config.zig");
const secure = @import("secure.zig");
const os = @import("os.zig");
const memcheck = @import("memcheck.zig");
const check = @import("check.zig");

/// A free block: its first word links to the next free block. The word is
/// an address, or with encoded lists (secure.zig) an encoding of one; read
/// and write it only through `Page.nextFree` and `Block.setNext`.
pub const Block = extern struct {
    link: usize,

    pub inline fn setNext(block: *Block, next: ?*Block) void {
        memcheck.wordAccess(&block.link);
        block.link = secure.encodeLink(@intFromPtr(block), @intFromPtr(next));
        memcheck.wordDone(&block.link);
    }
};

/// Smallest block: it must hold the free-list link (block sizes are
/// multiples of size_class.word_bytes, so every block is 8-aligned).
pub const block_size_min_bytes = @max(@sizeOf(Block), size_class.word_bytes);

/// `extend` links at most this many bytes' worth of blocks at a time (and at
/// least one block), so a fresh page is touched one kernel page at a time.
pub const extend_bytes_max = 4 * 1024;

/// Whether `thread_free` holds the top block's address (64-bit words) or
/// its index in the page (32-bit words); see the top of the file.
const top_is_address = @bitSizeOf(usize) >= 64;
const notifying_bit: usize = 1;
const count_shift = if (top_is_address) 48 else 18;
const count_one: usize = 1 << count_shift;
/// The top block's field (address, or index + 1).
const address_mask: usize = count_one - 1 - notifying_bit;
/// Blocks in the fullest page (64 KiB of 8-byte blocks).
const blocks_per_page_max = 64 * 1024 / block_size_min_bytes;

/// Blocks in one page (capacity, reserved): a small page holds the most,
/// and every other page holds blocks above 8 KiB (segment.zig).
pub const BlockCount = u16;

comptime {
    assert(blocks_per_page_max <= std.math.maxInt(BlockCount));
}

comptime {
    // The count field holds the blocks of the fullest page.
    assert(blocks_per_page_max < (1 << (@bitSizeOf(usize) - count_shift)));
    if (top_is_address) {
        // Blocks are 8-aligned (bits 0..2 are free) and every mapping ends
        // below 2^address_bits (os.map refuses others).
        assert(block_size_min_bytes >= 8);
        assert(os.address_bits <= count_shift);
    } else {
        // Index + 1 of any block, shifted past the notifying bit.
        assert((blocks_per_page_max + 1) << 1 <= address_mask + notifying_bit);
    }
}

pub const Flags = packed struct(u8) {
    /// In the owning heap's full queue (no free blocks when it was parked).
    in_full: bool = false,
    /// Some block was handed out at an interior, over-aligned address, so a
    /// pointer may not be a block start.
    has_aligned: bool = false,
    _: u6 = 0,
};

/// Extern: one cache line, fast-path fields first, in this order.
pub const Page = extern struct {
    free: ?*Block = null,
    /// Blocks handed out and not yet back on `free` (blocks waiting on
    /// `thread_free` still count). Written only by the owner, with atomic
    /// stores, because remote frees read it to detect an empty page.
    used: BlockCount = 0,
    /// `capacity` while no flag is set, else 0; 0 in free slices' entries
    /// too. The fast C free (check.freeableInOwn) asks "a block handed
    /// out, in a page in use without flags" with one compare against it.
    /// Owner only (that free runs on the owner's thread).
    free_limit: BlockCount = 0,
    /// Any set flag sends the owner's frees to the slow path.
    flags: Flags = .{},
    class: size_class.Class = 0,
    /// Position in the segment's page array.
    index: u8 = 0,
    /// Kept, empty, as its size's only page (Heap.retirePage); tested first
    /// when a free empties the page, so a loop that allocates and frees one
    /// block pays one byte test.
    retained: bool = false,
    /// Blocks linked into a free list at least once: [0, capacity). Zero
    /// in free slices' entries (Segment.releasePage), so that the fast C
    /// free (check.zig) finds no block there.
    capacity: BlockCount = 0,
    /// Blocks that fit in the page.
    reserved: BlockCount = 0,
    block_size: u32 = 0,
    /// `block_size` as the fast C free divides by it (size_class.Divisor).
    block_inverse: u32 = 0,
    /// First in its class queue: the page the owner allocates from. A remote
    /// free that empties it need not announce it (the owner is using it),
    /// which keeps producer/consumer programs off the announcement path.
    /// Written by the owner, read by remote frees (atomic bytes).
    is_current: bool = false,
    /// Slices the page spans (segment.zig); set while the page is in use.
    slice_count: u8 = 0,
    /// The entry of the page that holds this slice: `index` itself in a
    /// page's own entry and in free slices, the page's first slice in the
    /// entry of any other slice of a page (Segment.pageOf).
    first_slice: u8 = 0,
    /// The rest of `block_size`'s divisor (see block_inverse).
    block_shift: u8 = 0,
    /// Address of block 0.
    area: [*]u8 = undefined,
    /// Blocks freed by other threads: count | top block | notifying.
    thread_free: std.atomic.Value(usize) = .init(0),
    /// Links in the owning heap's page queue.
    next: ?*Page = null,
    prev: ?*Page = null,

    comptime {
        // One cache line with 64-bit pointers; less with 32-bit ones.
        assert(@sizeOf(Page) == if (@bitSizeOf(usize) >= 64) 64 else 44);
    }

    /// A slice entry after a page's first, when its slice leaves the page:
    /// it leads to itself again, as a free slice's entry does.
    pub fn unlinkSlice(entry: *Page) void {
        assert(entry.first_slice < entry.index);
        entry.first_slice = entry.index;
    }

    /// Whether this entry is a page's own (or a free slice's), not one that
    /// leads back to the first slice of a page.
    pub fn isFirstSlice(entry: *const Page) bool {
        return entry.first_slice == entry.index;
    }

    /// Sets up a page of `slices` slices for blocks of `class` in
    /// [area, area + area_bytes).
    pub fn init(page: *Page, class: size_class.Class, slices: u8, area: [*]u8, area_bytes: usize) void {
        const block_size = size_class.blockSize(class);
        assert(area_bytes >= block_size);
        assert(page.first_slice == page.index);
        const index = page.index;
        const d = size_class.divisor(class);
        page.* = .{
            .class = class,
            .index = index,
            .first_slice = index,
            .slice_count = slices,
            .block_size = @intCast(block_size),
            .block_inverse = d.inverse,
            .block_shift = d.shift,
            .reserved = @intCast(area_bytes / block_size),
            .area = area,
        };
        assert(page.reserved >= 1);
    }

    /// Links the next chunk of never-used blocks into `free`. The caller has
    /// checked that some remain.
    pub fn extend(page: *Page) void {
        assert(page.capacity < page.reserved);
        const block_size: usize = page.block_size;
        const count = @min(page.reserved - page.capacity, @max(1, extend_bytes_max / block_size));
        const first = page.area + page.capacity * block_size;
        // The fast C library marks these blocks free, as a free would: a
        // free of one before it is handed out is then caught (check.zig).
        // (C rounds every request to 16 bytes, so its blocks hold the mark.)
        if (check.marks_freed and block_size >= check.block_bytes_min) {
            const mark = check.freedMark(page);
            for (0..count) |i| @as(*check.Words, @ptrCast(@alignCast(first + i * block_size)))[1] = mark;
        }
        // Link in address order, so a fresh page is used front to back.
        var block: *Block = @ptrCast(@alignCast(first));
        for (1..count) |_| {
            const next: *Block = @ptrCast(@alignCast(@as([*]u8, @ptrCast(block)) + block_size));
            block.setNext(next);
            block = next;
        }
        block.setNext(page.free);
        page.free = @ptrCast(@alignCast(first));
        page.capacity += @intCast(count);
        page.syncFreeLimit();
    }

    /// Like `extend`, but links the chunk in a random order (hardened
    /// configuration), drawing from the generator `random`.
    pub fn extendShuffled(page: *Page, random: *u64) void {
        assert(page.capacity < page.reserved);
        const block_size: usize = page.block_size;
        const count = @min(page.reserved - page.capacity, @max(1, extend_bytes_max / block_size));
        var order_buffer: [extend_bytes_max / block_size_min_bytes]u16 = undefined;
        const order = order_buffer[0..count];
        secure.shuffle(random, order);
        const first = page.area + page.capacity * block_size;
        var next = page.free;
        for (order) |i| {
            const block: *Block = @ptrCast(@alignCast(first + i * block_size));
            block.setNext(next);
            next = block;
        }
        page.free = next;
        page.capacity += @intCast(count);
        page.syncFreeLimit();
    }

    /// The block after `block` on one of this page's free lists. With
    /// encoded lists the link is checked: it must lead to a block of this
    /// page that has been handed out at least once, or end the list.
    pub inline fn nextFree(page: *const Page, block: *const Block) ?*Block {
        // The block is being handed out: it stays accessible.
        memcheck.wordAccess(&block.link);
        if (!config.hardening.encode_lists) return @ptrFromInt(block.link);
        const next = secure.decodeLink(@intFromPtr(block), block.link);
        if (next != 0 and !page.isBlockStart(@ptrFromInt(next))) corrupted(block);
        return @ptrFromInt(next);
    }

    fn corrupted(block: *const Block) noreturn {
        os.fatal("corrupted free list: the free block 0x{x} was overwritten (a write after free, or an overflow from the block below)", .{@intFromPtr(block)});
    }

    /// Owner-side writes of `used` (see the field).
    pub inline fn setUsed(page: *Page, used: BlockCount) void {
        // Monotonic: remote frees need only some recent value (see
        // pushThreadFree); a plain store on the fast path.
        @atomicStore(BlockCount, &page.used, used, .monotonic);
    }

    /// The owner's change of `used` by one block on the fast paths: an
    /// atomic load and store, not a read-modify-write (only the owner
    /// writes), which x86 does in one instruction on memory.
    pub inline fn addUsed(page: *Page, comptime delta: enum { up, down }) void {
        // Monotonic: the owner reads its own last store.
        const used = @atomicLoad(BlockCount, &page.used, .monotonic);
        page.setUsed(if (delta == .up) used + 1 else used - 1);
    }

    /// Pops the first free block; the caller has checked there is one.
    pub inline fn pop(page: *Page) [*]u8 {
        const block = page.free.?;
        page.free = page.nextFree(block);
        page.addUsed(.up);
        return @ptrCast(block);
    }

    /// Pushes a block the owner frees.
    pub inline fn push(page: *Page, block: *Block) void {
        assert(page.used > 0);
        block.setNext(page.free);
        page.free = block;
        page.setUsed(page.used - 1);
    }

    /// Whether `ptr` lies inside block memory the page has ever handed out.
    pub fn contains(page: *const Page, ptr: [*]const u8) bool {
        const offset = @intFromPtr(ptr) -% @intFromPtr(page.area);
        return offset < @as(usize, page.capacity) * page.block_size;
    }

    /// The start of the block that contains `ptr`. Safe from any thread:
    /// `area`, `block_size` and `reserved` are fixed while blocks are live.
    pub fn blockStart(page: *const Page, ptr: [*]u8) *Block {
        const offset = @intFromPtr(ptr) - @intFromPtr(page.area);
        assert(offset < @as(usize, page.reserved) * page.block_size);
        const start = offset - offset % page.block_size;
        return @ptrCast(@alignCast(page.area + start));
    }

    /// Whether `ptr` is exactly the start of a block handed out at least
    /// once (by a multiply, not a divide: it runs on every hardened pop).
    pub inline fn isBlockStart(page: *const Page, ptr: [*]const u8) bool {
        if (!page.contains(ptr)) return false;
        const offset = @intFromPtr(ptr) - @intFromPtr(page.area);
        return size_class.blockIndex(page.class, offset) * page.block_size == offset;
    }

    /// Bytes of the page's area that have been touched (rounded to kernel
    /// pages by the caller when it purges).
    pub fn touchedBytes(page: *const Page) usize {
        return @as(usize, page.capacity) * page.block_size;
    }

    /// Flags are written by the owner and read by any thread freeing into
    /// the page, so both sides use atomic byte accesses.
    pub fn setFlags(page: *Page, flags: Flags) void {
        // SeqCst: setting `in_full` pairs with the SeqCst CAS and flags load
        // in pushThreadFree (see Heap.parkFull); otherwise a plain store.
        @atomicStore(u8, @as(*u8, @ptrCast(&page.flags)), @bitCast(flags), .seq_cst);
        page.syncFreeLimit();
    }

    /// Keeps `free_limit` in step with `capacity` and the flags (owner).
    pub inline fn syncFreeLimit(page: *Page) void {
        page.free_limit = if (@as(u8, @bitCast(page.flags)) == 0) page.capacity else 0;
    }

    pub fn loadFlags(page: *const Page) Flags {
        // SeqCst: see setFlags; a plain load on x86.
        return @bitCast(@atomicLoad(u8, @as(*const u8, @ptrCast(&page.flags)), .seq_cst));
    }

    pub fn setCurrent(page: *Page, current: bool) void {
        // Monotonic when set: a hint for remote frees (see is_current).
        // SeqCst when cleared: the store half of the handshake with a free
        // that brings the last block back (emptiedUnannounced).
        if (current) @atomicStore(bool, &page.is_current, true, .monotonic) else @atomicStore(bool, &page.is_current, false, .seq_cst);
    }

    pub fn isCurrent(page: *const Page) bool {
        // Monotonic: see setCurrent.
        return @atomicLoad(bool, &page.is_current, .monotonic);
    }

    /// After `setCurrent(false)`, on a page that stays in its queue: whether
    /// other threads' frees emptied it while it was current, and so did not
    /// announce it (pushThreadFree); the owner then announces it to itself.
    /// A push in flight that read the page as current holds the notifying
    /// bit and reads `is_current` again after it lands (pushThreadFree):
    /// the clear, then this read, here, against the push, then that read,
    /// there, all SeqCst, so one of the two sees the other and announces.
    pub fn emptiedUnannounced(page: *const Page) bool {
        if (builtin.single_threaded) return false;
        // SeqCst: the load half of the handshake above.
        return page.used > 0 and page.used == page.thread_free.load(.seq_cst) >> count_shift;
    }

    // ---- Cross-thread frees -------------------------------------------

    /// Called by a thread that does not own the page. When this free is the
    /// first into a full page, or frees the page's last live block, it
    /// announces the page: `notify(context, page)` runs after the push,
    /// under the `notifying` bit, which keeps the owner from freeing the
    /// page until the announcement is done.
    ///
    /// The first block onto an empty stack of a page not seen full also
    /// takes the bit, and looks at the flag again after the push: the owner
    /// parks a page (Heap.parkFull) by writing `in_full` and then reading
    /// this word, so a look before our push may miss the flag while the
    /// owner's read misses the push, and the page would wait in the full
    /// queue with free blocks and no announcement. Written, then read, on
    /// both sides, one of the two sees the other. Pushes made while the bit
    /// is held leave announcing to its holder, which looks at the word
    /// again before it lets the bit go.
    ///
    /// The free that brings the page's last block back does not announce
    /// the page its owner allocates from (`is_current`): the owner takes
    /// those blocks at its next allocation. The owner may stop allocating
    /// from it (Heap.queuePushFront) while this free is on its way, and
    /// look for such blocks before they land; so that free holds the bit
    /// too, and reads `is_current` again after its push (see
    /// emptiedUnannounced). Before 2026-11-28 it did not, and such a page
    /// waited, empty, until it was first again or its thread ended.
    pub fn pushThreadFree(page: *Page, block: *Block, context: anytype, comptime notify: fn (@TypeOf(context), *Page) void) void {
        comptime assert(!builtin.single_threaded);
        // Monotonic: the value only seeds the CAS loop below.
        var old = page.thread_free.load(.monotonic);
        var announce = false;
        var look_again = false;
        while (true) {
            const count = (old >> count_shift) + 1;
            assert(count <= page.reserved);
            const top = decodeTop(page, old);
            // Only one holder of the bit at a time; it covers our push (the
            // owner re-checks a page it finds notifying, and a holder that
            // looks again sees our count).
            const idle = old & notifying_bit == 0;
            // Every block in use is back: announced unless the page is its
            // owner's current one, which the owner may stop being at any
            // moment; then we look again after the push.
            const last_back = allBack(page, count);
            announce = idle and ((top == null and page.loadFlags().in_full) or (last_back and !page.isCurrent()));
            look_again = idle and (top == null or last_back) and !announce;
            if (builtin.is_test) if (test_before_push) |hook| hook(page);
            block.setNext(top);
            const new = (count << count_shift) | encodeTop(page, block) | (old & notifying_bit) |
                (if (announce or look_again) notifying_bit else 0);
            // SeqCst on success: publishes the block and its contents to the
            // owner's acquire, and orders against the owner's SeqCst store
            // of `in_full` followed by its load of this word (parkFull).
            if (page.thread_free.cmpxchgWeak(old, new, .seq_cst, .monotonic)) |seen| {
                old = seen;
            } else {
                old = new;
                break;
            }
        }
        if (look_again) {
            // Bounded by the pushes other threads make meanwhile (each
            // failed CAS saw one, or the owner's collect).
            while (true) {
                // SeqCst, both: the read halves of the handshakes with
                // parkFull and with the owner's setCurrent(false) followed by
                // emptiedUnannounced.
                announce = page.loadFlags().in_full or
                    (allBack(page, old >> count_shift) and !@atomicLoad(bool, &page.is_current, .seq_cst));
                if (announce) break;
                // SeqCst: on success a release as below (no announcement
                // was made); on failure the word it reads (a push made while
                // we held the bit, which left announcing to us) must come
                // before our next load of `in_full` in the order parkFull
                // relies on: a monotonic read lets that load see a flag
                // older than the push on weakly ordered CPUs. (A failure
                // ordering may not be stronger than the success one.)
                old = page.thread_free.cmpxchgWeak(old, old & ~notifying_bit, .seq_cst, .seq_cst) orelse return;
            }
        }
        if (!announce) return;
        notify(context, page);
        // Release: the announcement's writes happen before the owner, which
        // acquires this word, may free the page. Keeps the stack intact.
        _ = page.thread_free.fetchAnd(~notifying_bit, .release);
    }

    /// Whether `pending` blocks waiting on the stack are all the page's
    /// blocks in use.
    inline fn allBack(page: *const Page, pending: usize) bool {
        // Monotonic: the owner's own collect or allocation may race; both
        // only happen on a page it is using, and it looks again at its
        // pages when it stops (emptiedUnannounced, parkFull).
        return pending == @atomicLoad(BlockCount, &page.used, .monotonic);
    }

    /// Test-only: runs in pushThreadFree between its looks at the page and
    /// its push, where the owner may act meanwhile.
    pub var test_before_push: if (builtin.is_test) ?*const fn (*Page) void else void = if (builtin.is_test) null else {};

    /// The top block's field of `thread_free` for `block`.
    inline fn encodeTop(page: *const Page, block: *Block) usize {
        if (top_is_address) {
            assert(@intFromPtr(block) & ~address_mask == 0);
            return @intFromPtr(block);
        }
        const index = (@intFromPtr(block) - @intFromPtr(page.area)) / page.block_size;
        assert(index < page.reserved);
        return (index + 1) << 1;
    }

    /// The top block named by a `thread_free` word, or null if none.
    inline fn decodeTop(page: *const Page, word: usize) ?*Block {
        const top = word & address_mask;
        if (top_is_address) return @ptrFromInt(top);
        if (top == 0) return null;
        return @ptrCast(@alignCast(page.area + ((top >> 1) - 1) * page.block_size));
    }

    /// Blocks waiting on `thread_free` (a snapshot; only grows unless the
    /// owner takes them).
    pub fn pendingCount(page: *const Page) u32 {
        if (builtin.single_threaded) return 0;
        // Acquire: if the count says every block is back, their pushes (and
        // so the program's last writes to them) happened before.
        return @intCast(page.thread_free.load(.acquire) >> count_shift);
    }

    /// Whether every block of the page is free (on `free`, on the stack, or
    /// never handed out).
    pub fn isEntirelyFree(page: *const Page) bool {
        return page.used == page.pendingCount();
    }

    /// Makes the blocks freed by other threads the new `free` list, without
    /// walking them. Owner only, and only when `free` is empty.
    pub fn collect(page: *Page) void {
        if (builtin.single_threaded) return;
        assert(page.free == null);
        // Monotonic: a cheap look first; the fetchAnd below does the ordering.
        if (page.thread_free.load(.monotonic) & address_mask == 0) return;
        // Acquire: pairs with the SeqCst (release) CAS of each push, so the
        // links and the blocks' contents are visible. Leaves `notifying`.
        const taken = page.thread_free.fetchAnd(notifying_bit, .acquire);
        const count: u32 = @intCast(taken >> count_shift);
        assert(count > 0 and count <= page.used);
        page.free = decodeTop(page, taken);
        page.setUsed(@intCast(page.used - count));
    }

    /// Forgets the stack of an entirely free page being given back: its
    /// blocks are free and no other thread can push to it any more.
    pub fn dropThreadFrees(page: *Page) void {
        if (builtin.single_threaded) return;
        assert(page.isEntirelyFree() and !page.isNotifying());
        // Monotonic: nobody else touches the word now (no live blocks).
        page.thread_free.store(0, .monotonic);
    }

    /// Whether an announcement is in flight; the page must stay mapped.
    pub fn isNotifying(page: *const Page) bool {
        if (builtin.single_threaded) return false;
        // Acquire: pairs with the release that clears the bit, so the
        // announcer is done with the segment before we may unmap it.
        return page.thread_free.load(.acquire) & notifying_bit != 0;
    }

    /// Whether blocks from other threads are waiting (a hint).
    pub fn hasThreadFrees(page: *const Page) bool {
        if (builtin.single_threaded) return false;
        // SeqCst: the load half of the full-queue handshake (parkFull);
        // elsewhere a hint.
        return page.thread_free.load(.seq_cst) & address_mask != 0;
    }
};

/// A doubly linked list of pages; the heap keeps one per size class plus one
/// for full pages. Owner only.
pub const PageQueue = struct {
    first: ?*Page = null,
    last: ?*Page = null,
    count: u32 = 0,

    pub fn pushFront(q: *PageQueue, page: *Page) void {
        assert(page.next == null and page.prev == null);
        page.next = q.first;
        if (q.first) |f| f.prev = page else q.last = page;
        q.first = page;
        q.count += 1;
    }

    pub fn pushBack(q: *PageQueue, page: *Page) void {
        assert(page.next == null and page.prev == null);
        page.prev = q.last;
        if (q.last) |l| l.next = page else q.first = page;
        q.last = page;
        q.count += 1;
    }

    pub fn remove(q: *PageQueue, page: *Page) void {
        assert(q.count > 0);
        if (page.prev) |p| p.next = page.next else {
            assert(q.first == page);
            q.first = page.next;
        }
        if (page.next) |n| n.prev = page.prev else {
            assert(q.last == page);
            q.last = page.prev;
        }
        page.next = null;
        page.prev = null;
        q.count -= 1;
    }
};

test "extend links blocks lazily, one chunk at a time" {
    secure.init();
    var memory: [64 * 1024]u8 align(4096) = undefined;
    var page: Page = .{};
    page.init(size_class.ofSize(16), 1, &memory, memory.len);
    try std.testing.expectEqual(@as(BlockCount, 4096), page.reserved);
    page.extend();
    try std.testing.expectEqual(@as(BlockCount, extend_bytes_max / 16), page.capacity);
    var n: usize = 0;
    var prev: usize = 0;
    var it = page.free;
    while (it) |b| : (it = page.nextFree(b)) {
        try std.testing.expect(@intFromPtr(b) > prev);
        prev = @intFromPtr(b);
        n += 1;
    }
    try std.testing.expectEqual(@as(usize, page.capacity), n);
}

test "block start of interior pointers" {
    secure.init();
    var memory: [64 * 1024]u8 align(4096) = undefined;
    var page: Page = .{};
    page.init(size_class.ofSize(48), 1, &memory, memory.len);
    page.extend();
    const p: [*]u8 = &memory;
    try std.testing.expectEqual(@as(*Block, @ptrCast(@alignCast(p + 48))), page.blockStart(p + 48 + 17));
    try std.testing.expect(page.isBlockStart(p + 96));
    try std.testing.expect(!page.isBlockStart(p + 97));
}

/// For the remote-free tests: a page of 64-byte blocks over `memory`, its
/// first `blocks.len` blocks handed out into `blocks`.
fn initTestPage(page: *Page, memory: []align(4096) u8, blocks: []*Block) void {
    secure.init();
    page.* = .{};
    page.init(size_class.ofSize(64), 1, memory.ptr, memory.len);
    page.extend();
    for (blocks) |*b| b.* = @ptrCast(@alignCast(page.pop()));
}

/// The `notify` of pushThreadFree in tests: counts announcements.
fn countAnnouncement(count: *usize, _: *Page) void {
    count.* += 1;
}

test "a free that empties the current page as its owner moves on announces it" {
    if (builtin.single_threaded) return error.SkipZigTest;
    var memory: [64 * 1024]u8 align(4096) = undefined;
    var page: Page = undefined;
    var blocks: [2]*Block = undefined;
    initTestPage(&page, &memory, &blocks);
    page.setCurrent(true);
    const Race = struct {
        var owner_saw_it = false;
        /// The owner's queuePushFront, between the free's look at
        /// `is_current` and its push.
        fn ownerMovesOn(p: *Page) void {
            Page.test_before_push = null;
            p.setCurrent(false);
            owner_saw_it = p.emptiedUnannounced();
        }
    };
    var announcements: usize = 0;
    page.pushThreadFree(blocks[0], &announcements, countAnnouncement);
    try std.testing.expectEqual(@as(usize, 0), announcements);
    // The last block, onto a stack that is not empty, while the owner stops
    // allocating from the page and looks before the push lands.
    Page.test_before_push = &Race.ownerMovesOn;
    defer Page.test_before_push = null;
    page.pushThreadFree(blocks[1], &announcements, countAnnouncement);
    try std.testing.expect(!Race.owner_saw_it);
    try std.testing.expectEqual(@as(usize, 1), announcements);
    try std.testing.expect(page.isEntirelyFree() and !page.isNotifying());
}

test "remote frees: counted, announced when the page empties, taken without a walk" {
    if (builtin.single_threaded) return error.SkipZigTest;
    var memory: [64 * 1024]u8 align(4096) = undefined;
    var page: Page = undefined;
    var blocks: [3]*Block = undefined;
    initTestPage(&page, &memory, &blocks);
    var announcements: usize = 0;
    page.pushThreadFree(blocks[0], &announcements, countAnnouncement);
    page.pushThreadFree(blocks[1], &announcements, countAnnouncement);
    try std.testing.expectEqual(@as(usize, 0), announcements);
    try std.testing.expectEqual(@as(u32, 2), page.pendingCount());
    try std.testing.expect(!page.isEntirelyFree());
    page.pushThreadFree(blocks[2], &announcements, countAnnouncement);
    try std.testing.expectEqual(@as(usize, 1), announcements);
    try std.testing.expect(page.isEntirelyFree() and !page.isNotifying());
    // The owner takes the stack when its own list is empty.
    page.free = null;
    page.collect();
    try std.testing.expectEqual(@as(BlockCount, 0), page.used);
    try std.testing.expectEqual(blocks[2], page.free.?);
}
