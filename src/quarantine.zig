//! Delayed reuse (hardened, config.hardening.quarantine): a freed block
//! does not go back to its page at once but waits in a ring of the freeing
//! thread's heap. When the ring is full (`slot_count` blocks, or
//! `held_bytes_max` bytes), a block picked at random among those waiting
//! leaves, into its page's free list. So a block freed and used again
//! (a use after free) is not the next block of its size handed out, which
//! the zeroing then catches when it is (secure.zig), and a second free of
//! a waiting block still finds it freed (check.zig). Randomness keeps the
//! delay from being a fixed count a program could step over.
//!
//! Blocks above `held_block_bytes_max` and huge blocks do not wait: the
//! former are purged and guarded at free (secure.zig), the latter unmapped.
const std = @import("std");
const assert = std.debug.assert;
const config = @import("config.zig");
const secure = @import("secure.zig");
const thread = @import("thread.zig");
const Heap = @import("heap.zig").Heap;
const Segment = @import("segment.zig").Segment;

/// Blocks a heap's quarantine holds at most.
pub const slot_count = 64;

/// Bytes of blocks a heap's quarantine holds at most.
pub const held_bytes_max = 256 * 1024;

/// Larger blocks are freed at once.
pub const held_block_bytes_max = held_bytes_max / 4;

/// One heap's ring; nothing at all without the feature.
pub const Quarantine = if (config.hardening.quarantine) struct {
    blocks: [slot_count]usize = @splat(0),
    sizes: [slot_count]u32 = @splat(0),
    count: u32 = 0,
    held_bytes: usize = 0,
} else struct {};

/// Frees `ptr` (validated, marked freed, scrubbed) after a random delay:
/// it waits in the calling thread's quarantine, and another block may leave.
pub fn hold(ptr: [*]u8) void {
    comptime assert(config.hardening.quarantine);
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) return Heap.free(ptr);
    const bytes = segment.pageOf(ptr).block_size;
    if (bytes > held_block_bytes_max) return Heap.free(ptr);
    const current = thread.current();
    // A thread that frees before it ever allocated gets a heap now.
    const heap = if (current == &Heap.empty) thread.initCurrent() orelse return Heap.free(ptr) else current;
    const q = &heap.quarantine;
    // Each step empties a slot; the ring's size bounds the loop.
    while (q.count == slot_count or q.held_bytes + bytes > held_bytes_max) {
        assert(q.count > 0);
        const i: usize = @intCast((@as(u128, secure.nextRandom(&heap.random)) * q.count) >> 64);
        const leaving: [*]u8 = @ptrFromInt(q.blocks[i]);
        q.held_bytes -= q.sizes[i];
        q.count -= 1;
        q.blocks[i] = q.blocks[q.count];
        q.sizes[i] = q.sizes[q.count];
        Heap.free(leaving);
    }
    q.blocks[q.count] = @intFromPtr(ptr);
    q.sizes[q.count] = @intCast(bytes);
    q.count += 1;
    q.held_bytes += bytes;
}

/// Frees every block waiting in `heap`'s quarantine: its thread gives the
/// heap up (the blocks must not stay live with no one to free them).
/// Also called by a thread absorbing the heap of one that ended (the calling
/// thread frees the blocks, as any thread may).
pub fn flush(heap: *Heap) void {
    if (!config.hardening.quarantine) return;
    const q = &heap.quarantine;
    while (q.count > 0) {
        q.count -= 1;
        Heap.free(@ptrFromInt(q.blocks[q.count]));
        q.sizes[q.count] = 0;
    }
    q.held_bytes = 0;
}
