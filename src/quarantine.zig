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
const thread = @import("thread.zig");
const Heap = @import("heap.zig").Heap;
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;

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

/// One ring of waiting blocks: their addresses and block sizes.
pub fn Ring(comptime slots: usize, comptime bytes_max: usize) type {
    return struct {
        const Self = @This();
        pub const slot_count = slots;

        blocks: [slots]usize = @splat(0),
        sizes: [slots]u32 = @splat(0),
        count: u32 = 0,
        held_bytes: usize = 0,

        /// Puts `ptr` (a block of `bytes`) in the ring, after freeing
        /// blocks picked at random until it fits.
        fn hold(ring: *Self, random: *u64, ptr: [*]u8, bytes: usize) void {
            assert(bytes <= bytes_max);
            // Each step empties a slot; the ring's size bounds the loop.
            while (ring.count == slots or ring.held_bytes + bytes > bytes_max) {
                assert(ring.count > 0);
                const i: usize = @intCast((@as(u128, secure.nextRandom(random)) * ring.count) >> 64);
                const leaving: [*]u8 = @ptrFromInt(ring.blocks[i]);
                ring.held_bytes -= ring.sizes[i];
                ring.count -= 1;
                ring.blocks[i] = ring.blocks[ring.count];
                ring.sizes[i] = ring.sizes[ring.count];
                ring.sizes[ring.count] = 0;
                Heap.free(leaving);
            }
            ring.blocks[ring.count] = @intFromPtr(ptr);
            ring.sizes[ring.count] = @intCast(bytes);
            ring.count += 1;
            ring.held_bytes += bytes;
        }

        /// Frees every block in the ring.
        fn flush(ring: *Self) void {
            // Each step empties a slot.
            while (ring.count > 0) {
                ring.count -= 1;
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
pub fn hold(ptr: [*]u8) void {
    comptime assert(config.hardening.quarantine);
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) return Heap.free(ptr);
    const bytes = segment.pageOf(ptr).block_size;
    const large = bytes > held_block_bytes_max;
    if (large and !holds_large) return Heap.free(ptr);
    const current = thread.current();
    // A thread that frees before it ever allocated gets a heap now (not
    // one whose exit callback ran: see thread.exited).
    if (current == &Heap.empty and !thread.mayTakeHeapToFree()) return Heap.free(ptr);
    const heap = if (current == &Heap.empty) thread.initCurrent() orelse return Heap.free(ptr) else current;
    if (holds_large) {
        if (large) return heap.quarantine.large.hold(&heap.random, ptr, bytes);
    }
    heap.quarantine.small.hold(&heap.random, ptr, bytes);
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
