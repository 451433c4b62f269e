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
//!   The owner takes the whole stack at once (`collect`).
//!
//! Only the owning thread touches anything but `thread_free`. A remote free
//! that finds `thread_free` empty announces the page to its owner (see
//! Heap.notifyOwner), so the owner learns of every page that gets blocks
//! back from other threads, whether it sits first in a queue, deep in one,
//! or in the full queue, and can reuse or free it. Bit 0 of `thread_free`
//! (`notifying`) is set while such an announcement is in flight: the owner
//! then keeps the page (and so its segment) mapped, because the announcing
//! thread still writes to the segment header.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const size_class = @import("size_class.zig");

/// A free block: its first word links to the next free block.
pub const Block = extern struct {
    next: ?*Block,
};

/// Smallest block: it must hold the free-list link.
pub const block_size_min_bytes = @sizeOf(Block);

/// `extend` links at most this many bytes' worth of blocks at a time (and at
/// least one block), so a fresh page is touched one kernel page at a time.
pub const extend_bytes_max = 4 * 1024;

/// Bit 0 of `thread_free`: a remote free is announcing the page to its
/// owner; the page must not be freed until the bit clears.
const notifying_bit: usize = 1;

pub const Flags = packed struct(u8) {
    /// In the owning heap's full queue (no free blocks when it was parked).
    in_full: bool = false,
    /// Some block was handed out at an interior, over-aligned address, so a
    /// pointer may not be a block start.
    has_aligned: bool = false,
    _: u6 = 0,
};

pub const Page = struct {
    // Fields of the fast paths first: they share one cache line.
    free: ?*Block = null,
    /// Blocks handed out and not yet back on `free` (blocks waiting on
    /// `thread_free` still count). Zero means the page is empty.
    used: u32 = 0,
    /// Any set flag sends the owner's frees to the slow path.
    flags: Flags = .{},
    class: size_class.Class = 0,
    /// Position in the segment's page array.
    index: u8 = 0,
    /// Blocks linked into a free list at least once: [0, capacity).
    capacity: u32 = 0,
    /// Blocks that fit in the page.
    reserved: u32 = 0,
    block_size: u32 = 0,
    /// Address of block 0.
    area: [*]u8 = undefined,
    /// Blocks freed by other threads (address | full_bit).
    thread_free: std.atomic.Value(usize) = .init(0),
    /// Links in the owning heap's page queue.
    next: ?*Page = null,
    prev: ?*Page = null,

    comptime {
        assert(@sizeOf(Page) == 64);
    }

    /// Sets up a page for blocks of `class` in [area, area + area_bytes).
    pub fn init(page: *Page, class: size_class.Class, area: [*]u8, area_bytes: usize) void {
        const block_size = size_class.blockSize(class);
        assert(area_bytes >= block_size);
        const index = page.index;
        page.* = .{
            .class = class,
            .index = index,
            .block_size = @intCast(block_size),
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
        // Link in address order, so a fresh page is used front to back.
        var block: *Block = @ptrCast(@alignCast(first));
        for (1..count) |_| {
            const next: *Block = @ptrCast(@alignCast(@as([*]u8, @ptrCast(block)) + block_size));
            block.next = next;
            block = next;
        }
        block.next = page.free;
        page.free = @ptrCast(@alignCast(first));
        page.capacity += @intCast(count);
    }

    pub fn isEmpty(page: *const Page) bool {
        return page.used == 0;
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

    /// Whether `ptr` is exactly the start of a block.
    pub fn isBlockStart(page: *const Page, ptr: [*]const u8) bool {
        if (!page.contains(ptr)) return false;
        const offset = @intFromPtr(ptr) - @intFromPtr(page.area);
        return offset % page.block_size == 0;
    }

    /// Bytes of the page's area that have been touched (rounded to kernel
    /// pages by the caller when it purges).
    pub fn touchedBytes(page: *const Page) usize {
        return @as(usize, page.capacity) * page.block_size;
    }

    /// Pops the first free block; the caller has checked there is one.
    pub inline fn pop(page: *Page) [*]u8 {
        const block = page.free.?;
        page.free = block.next;
        page.used += 1;
        return @ptrCast(block);
    }

    /// Pushes a block the owner frees.
    pub inline fn push(page: *Page, block: *Block) void {
        assert(page.used > 0);
        block.next = page.free;
        page.free = block;
        page.used -= 1;
    }

    /// Flags are written by the owner and read by any thread freeing into
    /// the page (`has_aligned`), so both sides use atomic byte accesses.
    pub fn setFlags(page: *Page, flags: Flags) void {
        // Monotonic: a remote reader needs `has_aligned` only for blocks it
        // got through its own synchronization with the allocating thread.
        @atomicStore(u8, @as(*u8, @ptrCast(&page.flags)), @bitCast(flags), .monotonic);
    }

    pub fn loadFlags(page: *const Page) Flags {
        // Monotonic: see setFlags.
        return @bitCast(@atomicLoad(u8, @as(*const u8, @ptrCast(&page.flags)), .monotonic));
    }

    // ---- Cross-thread frees -------------------------------------------

    /// Called by a thread that does not own the page. When the list was
    /// empty, this free announces the page: `notify(context, page)` runs
    /// after the push, under the `notifying` bit, which keeps the owner from
    /// freeing the page until the announcement is done.
    pub fn pushThreadFree(page: *Page, block: *Block, context: anytype, comptime notify: fn (@TypeOf(context), *Page) void) void {
        comptime assert(!builtin.single_threaded);
        // Monotonic: the value only seeds the CAS loop below.
        var old = page.thread_free.load(.monotonic);
        while (true) {
            // Empty and nobody announcing: this free announces.
            const announce = old == 0;
            block.next = @ptrFromInt(old & ~notifying_bit);
            const new = @intFromPtr(block) | (if (announce) notifying_bit else old & notifying_bit);
            // Release on success: the owner's acquire in `collect` must see
            // `block.next` and everything the program wrote to the block.
            old = page.thread_free.cmpxchgWeak(old, new, .release, .monotonic) orelse break;
        }
        if (old != 0) return;
        notify(context, page);
        // Release: the announcement's writes happen before the owner, which
        // acquires this word, may free the page. Keeps the list intact.
        _ = page.thread_free.fetchAnd(~notifying_bit, .release);
    }

    /// Moves blocks freed by other threads onto `free`. Owner only.
    pub fn collect(page: *Page) void {
        if (builtin.single_threaded) return;
        // Monotonic: a cheap look first; the fetchAnd below does the ordering.
        if (page.thread_free.load(.monotonic) & ~notifying_bit == 0) return;
        // Acquire: pairs with the release of each push, making the links and
        // the blocks' contents visible before we walk them. Takes the list
        // and leaves the notifying bit to its owner.
        const taken = page.thread_free.fetchAnd(notifying_bit, .acquire) & ~notifying_bit;
        assert(taken != 0);
        const head: *Block = @ptrFromInt(taken);
        var tail = head;
        var count: u32 = 1;
        while (tail.next) |next| : (count += 1) {
            assert(count < page.reserved);
            tail = next;
        }
        assert(count <= page.used);
        tail.next = page.free;
        page.free = head;
        page.used -= count;
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
        // Monotonic: a hint; `collect` orders the actual take.
        return page.thread_free.load(.monotonic) & ~notifying_bit != 0;
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

    /// Appends all of `other` (emptying it).
    pub fn appendAll(q: *PageQueue, other: *PageQueue) void {
        const first = other.first orelse return;
        first.prev = q.last;
        if (q.last) |l| l.next = first else q.first = first;
        q.last = other.last;
        q.count += other.count;
        other.* = .{};
    }
};

test "extend links blocks lazily, one chunk at a time" {
    var memory: [64 * 1024]u8 align(4096) = undefined;
    var page: Page = .{};
    page.init(size_class.ofSize(16), &memory, memory.len);
    try std.testing.expectEqual(@as(u32, 4096), page.reserved);
    page.extend();
    try std.testing.expectEqual(@as(u32, extend_bytes_max / 16), page.capacity);
    var n: usize = 0;
    var prev: usize = 0;
    var it = page.free;
    while (it) |b| : (it = b.next) {
        try std.testing.expect(@intFromPtr(b) > prev);
        prev = @intFromPtr(b);
        n += 1;
    }
    try std.testing.expectEqual(@as(usize, page.capacity), n);
}

test "block start of interior pointers" {
    var memory: [64 * 1024]u8 align(4096) = undefined;
    var page: Page = .{};
    page.init(size_class.ofSize(48), &memory, memory.len);
    page.extend();
    const p: [*]u8 = &memory;
    try std.testing.expectEqual(@as(*Block, @ptrCast(@alignCast(p + 48))), page.blockStart(p + 48 + 17));
    try std.testing.expect(page.isBlockStart(p + 96));
    try std.testing.expect(!page.isBlockStart(p + 97));
}
