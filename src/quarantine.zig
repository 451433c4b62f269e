//! Delayed reuse (hardened, config.hardening.quarantine): a freed block
//! does not go back to its page at once but waits in a ring of the freeing
//! thread's heap. When the ring is full (its slots, or its bytes), a block
//! picked at random among those waiting leaves, into its page's free list.
//! So a block freed and used again (a use after free) is not the next
//! block of its size handed out, which the zeroing then catches when it is
//! (secure.zig), and a second free of a waiting block still finds it freed
//! (check.zig). Randomness keeps the delay from being a fixed count a
//! program could step over.
//!
//! Two rings per heap. Small and medium blocks (up to
//! `held_block_bytes_max`) wait in one that holds `held_bytes_max` bytes:
//! they stay resident while they wait. Large blocks wait in a ring of their
//! own, where they cost address space rather than memory: their inner
//! kernel pages were purged and made inaccessible when they were freed
//! (secure.scrubFreed), so a use after free of one faults for as long as it
//! waits, even after the program allocates that size again (a large page
//! holds one block: without the wait, the next allocation of its size
//! took the same block back at once, and a pointer kept to it reached the
//! new owner). They wait only where they are purged (guarded freed large
//! blocks, or zeroing, on a system that can protect memory); otherwise
//! they are freed at once, as are huge blocks, which are unmapped.
const std = @import("std");
const assert = std.debug.assert;
const config = @import("config.zig");
const os = @import("os.zig");
const secure = @import("secure.zig");
const check = @import("check.zig");
const thread = @import("thread.zig");
const Heap = @import("heap.zig").Heap;
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const Page = @import("page.zig").Page;
const Block = @import("page.zig").Block;
const memcheck = @import("memcheck.zig");

/// Small and medium blocks a heap's quarantine holds at most.
pub const slot_count = 64;

/// Bytes of small and medium blocks a heap's quarantine holds at most.
pub const held_bytes_max = 256 * 1024;

/// Larger blocks wait in the ring of large blocks, or not at all.
pub const held_block_bytes_max = held_bytes_max / 4;

/// Large blocks a heap's quarantine holds at most.
pub const large_slot_count = 16;

/// Bytes of large blocks a heap's quarantine holds at most: address space
/// (of segments that cannot be released meanwhile), not memory; each block
/// keeps only the kernel page that holds its link resident.
pub const large_held_bytes_max = 32 * 1024 * 1024;

/// Whether large blocks wait: only where their pages are purged at free
/// (where the system can protect memory it can purge it too; on wasm it
/// can do neither, and they would wait resident).
pub const holds_large = os.can_protect and (config.hardening.guard_freed_large or config.hardening.zero_freed);

comptime {
    // A block too large for the first ring is one that secure.scrubFreed
    // purges (and guards) by its kernel pages.
    assert(held_block_bytes_max == secure.zero_whole_bytes_max);
    assert(segment_mod.large_block_max_bytes <= large_held_bytes_max / 4);
}

/// One ring of waiting blocks: their addresses, pages and block sizes.
pub fn Ring(comptime slots: usize, comptime bytes_max: usize) type {
    return struct {
        const Self = @This();
        pub const slot_count = slots;

        blocks: [slots]usize = @splat(0),
        /// Each block's page, for its free when it leaves: a waiting block
        /// counts as used, so the page stays where it is meanwhile.
        pages: [slots]*Page = undefined,
        /// Each block's size (read by stats.zig from other threads).
        sizes: [slots]u32 = @splat(0),
        count: u32 = 0,
        held_bytes: usize = 0,

        /// Puts `ptr` (a block of `page`) in the ring, after freeing blocks
        /// picked at random until it fits. A full ring (the common case)
        /// frees one and puts the new block in its slot. Each block is
        /// freed after the ring let it go, so that a free never sees a
        /// ring in between.
        fn hold(ring: *Self, random: *u64, ptr: [*]u8, page: *Page) void {
            const bytes = page.block_size;
            assert(bytes <= bytes_max);
            // Each step empties a slot; the ring's size bounds the loop.
            while (ring.held_bytes + bytes > bytes_max) {
                assert(ring.count > 0);
                const leaving = ring.take(ring.pick(random));
                ring.count -= 1;
                ring.set(leaving.slot, ring.blocks[ring.count], ring.pages[ring.count], ring.sizes[ring.count]);
                ring.sizes[ring.count] = 0;
                leaving.free();
            }
            ring.held_bytes += bytes;
            if (ring.count < slots) {
                ring.set(ring.count, @intFromPtr(ptr), page, @intCast(bytes));
                ring.count += 1;
                return;
            }
            const leaving = ring.take(ring.pick(random));
            ring.set(leaving.slot, @intFromPtr(ptr), page, @intCast(bytes));
            leaving.free();
        }

        /// A slot picked at random among the waiting blocks.
        inline fn pick(ring: *const Self, random: *u64) usize {
            return @intCast((@as(u128, secure.nextRandom(random)) * ring.count) >> 64);
        }

        const Leaving = struct {
            slot: usize,
            block: [*]u8,
            page: *Page,

            inline fn free(leaving: Leaving) void {
                checkFirstWord(blockOf(leaving.page, leaving.block));
                Heap.freeInPage(Segment.ofPtr(leaving.block), leaving.page, leaving.block);
            }
        };

        /// Lets the block in slot `i` go; the caller fills the slot, then
        /// frees the block.
        inline fn take(ring: *Self, i: usize) Leaving {
            assert(i < ring.count);
            ring.held_bytes -= ring.sizes[i];
            return .{ .slot = i, .block = @ptrFromInt(ring.blocks[i]), .page = ring.pages[i] };
        }

        inline fn set(ring: *Self, i: usize, block: usize, page: *Page, bytes: u32) void {
            ring.blocks[i] = block;
            ring.pages[i] = page;
            ring.sizes[i] = bytes;
        }

        /// Frees every block in the ring.
        fn flush(ring: *Self) void {
            // Each step empties a slot.
            while (ring.count > 0) {
                ring.count -= 1;
                checkFirstWord(blockOf(ring.pages[ring.count], @ptrFromInt(ring.blocks[ring.count])));
                Heap.free(@ptrFromInt(ring.blocks[ring.count]));
                ring.sizes[ring.count] = 0;
            }
            ring.held_bytes = 0;
        }
    };
}

/// One heap's rings; nothing at all without the feature.
pub const Quarantine = if (config.hardening.quarantine) struct {
    small: Ring(slot_count, held_bytes_max) = .{},
    large: if (holds_large) Ring(large_slot_count, large_held_bytes_max) else struct {} = .{},
} else struct {};

/// Frees `ptr` (validated, marked freed, scrubbed) after a random delay:
/// it waits in the calling thread's quarantine, and another block may leave.
/// `found`: what the free's checks found out about the block
/// (check.beforeFree); null to look it up here.
pub fn hold(ptr: [*]u8, found: ?check.Found) void {
    comptime assert(config.hardening.quarantine);
    const segment = Segment.ofPtr(ptr);
    // A huge block is unmapped: it never waits.
    const page = (found orelse lookUp(segment, ptr)).page orelse return Heap.free(ptr);
    assert(page == lookUp(segment, ptr).page);
    const large = page.block_size > held_block_bytes_max;
    if (large and !holds_large) return Heap.freeInPage(segment, page, ptr);
    const current = thread.current();
    // A thread that frees before it ever allocated gets a heap now (not
    // one whose exit callback ran: see thread.exited).
    if (current == &Heap.empty and !thread.mayTakeHeapToFree()) return Heap.freeInPage(segment, page, ptr);
    const heap = if (current == &Heap.empty) thread.initCurrent() orelse return Heap.freeInPage(segment, page, ptr) else current;
    clearFirstWord(blockOf(page, ptr));
    if (holds_large) {
        if (large) return heap.quarantine.large.hold(&heap.random, ptr, page);
    }
    heap.quarantine.small.hold(&heap.random, ptr, page);
}

// A waiting block's first word is where its free-list link goes when it
// leaves, so the zero check of a block handed out skips it and the link's
// encoding covers it only once it is written: a write after free there
// while the block waits was overwritten by that link, unseen. It is zero
// while the block waits, and checked when the block leaves.

/// The block `ptr` points into: itself, but in a page with over-aligned
/// blocks (a divide, which the common free should not pay).
inline fn blockOf(page: *Page, ptr: [*]u8) *Block {
    return if (page.loadFlags().has_aligned) page.blockStart(ptr) else @ptrCast(@alignCast(ptr));
}

fn clearFirstWord(block: *Block) void {
    const word: *usize = &block.link;
    memcheck.wordAccess(word);
    // Monotonic: a plain store; the block is this thread's until it
    // leaves (a racing use after free is what the check looks for).
    @atomicStore(usize, word, 0, .monotonic);
    memcheck.wordDone(word);
}

fn checkFirstWord(block: *Block) void {
    const word: *usize = &block.link;
    memcheck.wordAccess(word);
    // Monotonic: as in clearFirstWord.
    const value = @atomicLoad(usize, word, .monotonic);
    memcheck.wordDone(word);
    const offset = secure.firstNonzero(std.mem.asBytes(&value), 0, @sizeOf(usize)) orelse return;
    os.fatal("write after free: the free block 0x{x} was written at offset {d} before it was handed out again", .{ @intFromPtr(block), offset });
}

fn lookUp(segment: *Segment, ptr: [*]u8) check.Found {
    return .{ .page = if (segment.kind == .huge) null else segment.pageOf(ptr) };
}

/// Blocks waiting in `heap`'s quarantine.
pub fn heldCount(heap: *const Heap) usize {
    comptime assert(config.hardening.quarantine);
    const large: usize = if (holds_large) heap.quarantine.large.count else 0;
    return heap.quarantine.small.count + large;
}

/// Frees every block waiting in `heap`'s quarantine: its thread gives the
/// heap up (the blocks must not stay live with no one to free them).
/// Also called by a thread absorbing the heap of one that ended (the calling
/// thread frees the blocks, as any thread may).
pub fn flush(heap: *Heap) void {
    if (!config.hardening.quarantine) return;
    heap.quarantine.small.flush();
    if (holds_large) heap.quarantine.large.flush();
}
