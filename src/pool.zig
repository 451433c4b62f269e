//! Empty segments shared by all heaps. A heap keeps up to
//! `Heap.spare_count_max` empty segments of its own (spares); the pool holds
//! those it does not keep: beyond its spares, and those a heap does not need
//! when its thread ends. A heap that needs a segment and has none looks here
//! before it maps one.
//!
//! Why: threads end and start at different times, so memory moves between
//! heaps (an absorber takes an ended thread's segments, thread.zig) and a
//! heap can end with segments another will lack. Without the pool, a new
//! thread whose heap had none mapped a fresh segment while another heap kept
//! an empty one it did not use: the process mapped more with every round of
//! threads.
//!
//! Pooled segments keep their resident memory for a while: a program that
//! frees everything at the end of a round (a compilation, a request, a
//! thread's life) takes the same memory again moments later, from this heap
//! or another, and purging it in between cost a fault per kernel page of
//! the next round. Resident pooled memory is held only while it cannot
//! raise the footprint's peak, and only while the program uses it:
//! - a heap about to touch fresh memory takes a resident pooled segment
//!   instead where it can (Heap.takeFreeSpan, giving its own purged spare
//!   in exchange), and any fresh touch purges as much pooled memory
//!   (`purgeResident`, from purge.touched): while the pool holds resident
//!   memory the footprint does not grow;
//! - when no heap took a segment for `resident_keep_ns`, the next decay
//!   period to end purges all of it (`decay`).
//! The pool holds at most one segment per heap ever created (`countMax`):
//! it never keeps more than the threads that could take one. Beyond that,
//! segments are unmapped, and the whole pool is when the OS refuses a
//! mapping (`map`).
//!
//! A lock guards the lists: taken only on paths that already map, purge or
//! end a thread, and held for a few loads and stores, or for the purge of
//! one segment (`purgeResident`).
//! The lock word holds the holder's process id, so the child of a fork that
//! happened while another thread held it can tell that the holder is gone
//! and take the lock over; every step leaves the list whole, so the child
//! finds a valid list (at worst the segment being moved is lost to it, and
//! the count is one off).
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const thread = @import("thread.zig");

/// Pooled segments at most on 32-bit targets, whose 4 GiB hold only 1024
/// segments (on 64-bit ones, `countMax` follows the number of heaps).
const count_max_32bit = 4;

/// The pool holds at least this many (64-bit), whatever the number of heaps:
/// a single-threaded program that frees many segments keeps a few mapped.
const count_min_64bit = 16;

/// How long resident pooled memory waits for a heap to take it: two decay
/// periods (purge.zig), so that the pause between two rounds of a program
/// does not cost it its memory, and memory nobody takes goes back soon.
pub const resident_keep_ns = 200 * std.time.ns_per_ms;

/// The pooled segments with resident memory, and those without, each a
/// stack linked through `all.next` alone: each change is one store of its
/// head, so the lists are whole at every step (see fork above).
var resident_first: ?*Segment = null;
var purged_first: ?*Segment = null;
/// Segments in the lists; written under the lock, read without it as a hint.
var pooled: std.atomic.Value(usize) = .init(0);
/// Resident bytes of the pooled segments' free slices (`dirtyBytes`);
/// written under the lock, read without it as a hint.
var resident_bytes: std.atomic.Value(usize) = .init(0);
/// When a heap last took a segment, or resident memory came to a pool that
/// had none: the pool's resident memory goes back `resident_keep_ns` after
/// it (`decay`). In milliseconds, wrapping (`os.clockMs`).
var used_ms: std.atomic.Value(u32) = .init(0);
/// 0: free; else the process id of the thread that holds it.
var lock_word: std.atomic.Value(os.Pid) = .init(0);

/// Spins before a waiter yields and checks for a fork.
const spins_before_yield = 1000;

fn countMax() usize {
    if (@bitSizeOf(usize) < 64) return count_max_32bit;
    return @max(count_min_64bit, thread.heapCount());
}

/// Puts an empty segment into the pool, with whatever resident memory it
/// has. False when the pool is full, or for a segment with no resident
/// memory that holds moved blocks' kernel mappings (`unmapsMoved`): the
/// caller unmaps it.
pub fn put(segment: *Segment) bool {
    assert(segment.isEmpty() and segment.tails_waiting == 0);
    assert(segment.all.next == null and segment.all.prev == null);
    const resident = segment.dirtyBytes();
    if (unmapsMoved(segment)) return false;
    // The wait starts with the first resident memory (a pool that only
    // receives keeps none for longer).
    if (resident > 0 and residentBytes() == 0) {
        // Monotonic: a policy clock.
        used_ms.store(os.clockMs(os.nowNanoseconds()), .monotonic);
    }
    lock();
    defer unlock();
    // Monotonic: we hold the lock, the only writer.
    const n = pooled.load(.monotonic);
    if (n >= countMax()) return false;
    // Monotonic: an empty segment; nobody frees into it, and the lock's
    // release publishes it to the next taker. (Still the caller's when full.)
    segment.owner.store(null, .monotonic);
    const head = if (resident > 0) &resident_first else &purged_first;
    segment.all.next = head.*;
    head.* = segment;
    // Monotonic, here and for every hint below: read without the lock by
    // `take`, `count` and the purge policy; the lock orders the list.
    pooled.store(n + 1, .monotonic);
    resident_bytes.store(resident_bytes.load(.monotonic) + resident, .monotonic);
    return true;
}

/// A pooled segment, its owner not yet set, or null if the pool is empty.
/// `resident`: only one with resident memory (else null).
pub fn take(comptime which: Which) ?*Segment {
    const segment = takeAny(which) orelse return null;
    // Monotonic: a policy clock (see `decay`).
    used_ms.store(os.clockMs(os.nowNanoseconds()), .monotonic);
    return segment;
}

const Which = enum { any, resident };

/// `take`, without telling the clock a heap took it.
fn takeAny(comptime which: Which) ?*Segment {
    // Monotonic: a look without the lock; a segment put meanwhile is found
    // by a later request.
    if (pooled.load(.monotonic) == 0) return null;
    if (which == .resident and resident_bytes.load(.monotonic) == 0) return null;
    lock();
    defer unlock();
    // Resident memory first, whoever asks: it saves the faults.
    const head = if (resident_first != null or which == .resident) &resident_first else &purged_first;
    const segment = head.* orelse return null;
    head.* = segment.all.next;
    segment.all = .{};
    // Saturating: after a fork the hints may be off (see the top).
    pooled.store(pooled.load(.monotonic) -| 1, .monotonic);
    resident_bytes.store(resident_bytes.load(.monotonic) -| segment.dirtyBytes(), .monotonic);
    assert(segment.isEmpty());
    return segment;
}

/// Resident bytes of the pooled segments, about (a hint: see `take`).
pub fn residentBytes() usize {
    // Monotonic: a hint.
    return resident_bytes.load(.monotonic);
}

/// Purges pooled resident memory, at least `bytes` of it while there is
/// any: the footprint grew by that much (purge.touched). Under the lock, a
/// system call included: a segment taken out to be purged would leave a
/// heap that needs one to find the pool empty and map another.
pub fn purgeResident(bytes: usize) void {
    var purged: usize = 0;
    // Each step purges a segment or ends: bounded by the pool's count.
    var steps: usize = 0;
    while (purged < bytes and steps <= countMax()) : (steps += 1) {
        if (residentBytes() == 0) return;
        const unmapped = step: {
            lock();
            defer unlock();
            const segment = resident_first orelse return;
            const released = segment.purgeDirtyAtLeast(bytes - purged);
            purged += released;
            // Monotonic: as in `put`.
            resident_bytes.store(resident_bytes.load(.monotonic) -| released, .monotonic);
            if (segment.dirtyBytes() > 0) break :step null;
            resident_first = segment.all.next;
            if (unmapsMoved(segment)) {
                // Out of the pool, unmapped below (outside the lock).
                segment.all = .{};
                // Saturating: as in `takeAny`.
                pooled.store(pooled.load(.monotonic) -| 1, .monotonic);
                break :step segment;
            }
            // To the purged list (a fork meanwhile loses it to the child).
            segment.all.next = purged_first;
            purged_first = segment;
            break :step null;
        };
        if (unmapped) |segment| segment.destroy();
    }
}

/// Whether an empty segment is unmapped rather than kept for reuse: it has
/// no resident memory left, which would have been its worth, and holds
/// moved blocks' kernel mappings (Heap.moveLarge), which only unmapping it
/// gives back (Heap.moved_blocks).
pub fn unmapsMoved(segment: *const Segment) bool {
    assert(segment.isEmpty());
    return segment.moved_in > 0 and segment.dirtyBytes() == 0;
}

/// Purges all pooled resident memory when no heap took a segment for
/// `resident_keep_ns` (called at the end of any heap's decay period).
pub fn decay(now_ns: u64) void {
    if (residentBytes() == 0) return;
    // Monotonic: as in `take`.
    if (os.clockMs(now_ns) -% used_ms.load(.monotonic) < resident_keep_ns / std.time.ns_per_ms) return;
    purgeResident(std.math.maxInt(usize));
}

/// Unmaps every pooled segment. Returns whether there was any.
pub fn release() bool {
    var chain: ?*Segment = null;
    var n: usize = 0;
    {
        lock();
        defer unlock();
        // One chain of both lists: the purged ones after the resident.
        chain = purged_first;
        if (resident_first) |top| {
            var last = top;
            // Bounded by the count taken (at most one off after a fork).
            for (0..countMax() + 1) |_| last = last.all.next orelse break;
            last.all.next = purged_first;
            chain = top;
        }
        resident_first = null;
        purged_first = null;
        // Monotonic: as in `put`.
        n = pooled.swap(0, .monotonic);
        resident_bytes.store(0, .monotonic);
    }
    // Outside the lock: unmapping is a system call. Bounded by the count
    // taken (at most one off after a fork, see the top).
    var unmapped: usize = 0;
    while (chain) |segment| : (unmapped += 1) {
        assert(unmapped <= n + 1);
        chain = segment.all.next;
        segment.all = .{};
        segment.destroy();
    }
    return unmapped > 0;
}

/// os.map, and once more after unmapping the pool if the OS refused: the
/// address space pooled segments hold may be what it lacks (a limit on
/// address space, or a 32-bit one full).
pub fn map(bytes: usize, alignment: usize, offset: usize) ?[*]align(os.page_size_min_bytes) u8 {
    return os.map(bytes, alignment, offset) orelse if (release()) os.map(bytes, alignment, offset) else null;
}

/// Segments in the pool, about (tests and statistics).
pub fn count() usize {
    // Monotonic: a statistic.
    return pooled.load(.monotonic);
}

fn lock() void {
    if (builtin.single_threaded) return;
    const pid = os.currentPid();
    assert(pid != 0); // 0 is the free lock
    var spins: usize = 0;
    // Acquire: the list as the last holder left it. Bounded by the holder's
    // critical section (no system call), or by the fork check below.
    while (lock_word.cmpxchgWeak(0, pid, .acquire, .monotonic)) |holder| {
        spins += 1;
        if (spins % spins_before_yield != 0) {
            std.atomic.spinLoopHint();
            continue;
        }
        // A holder of another process: we are a fork child, and it is gone.
        if (holder != 0 and holder != pid) {
            // Acquire: as above (what the parent's holder left is ours).
            if (lock_word.cmpxchgStrong(holder, pid, .acquire, .monotonic) == null) return;
        }
        os.yieldThread();
    }
}

fn unlock() void {
    if (builtin.single_threaded) return;
    // Release: the list as we leave it, for the next holder.
    lock_word.store(0, .release);
}

test "a segment put into the pool comes back out" {
    const Heap = @import("heap.zig").Heap;
    var heap: Heap = undefined;
    const before = count();
    // Whatever earlier tests left, then ours on top.
    const segment = Segment.create(&heap) orelse return error.SkipZigTest;
    if (!put(segment)) {
        segment.destroy();
        return error.SkipZigTest; // full: nothing to test here
    }
    try std.testing.expectEqual(before + 1, count());
    try std.testing.expect(segment.owner.load(.monotonic) == null);
    try std.testing.expectEqual(segment, take(.any).?);
    try std.testing.expectEqual(before, count());
    segment.destroy();
}

test "a resident segment waits in the pool, and a fresh touch purges it" {
    const Heap = @import("heap.zig").Heap;
    const purge = @import("purge.zig");
    var heap: Heap = undefined;
    const segment = Segment.create(&heap) orelse return error.SkipZigTest;
    // As if a page on slice 1 had been touched whole and freed.
    const slice = segment_mod.slice_bytes;
    @memset(@as([*]u8, @ptrCast(segment))[slice..][0..slice], 0x5a);
    segment.resident_mask |= 1 << 1;
    segment.slice_touched[1] = slice / Segment.touch_unit_bytes;
    purge.touched(slice);
    const before = residentBytes();
    if (!put(segment)) {
        _ = segment.purgeDirty();
        segment.destroy();
        return error.SkipZigTest; // full: nothing to test here
    }
    try std.testing.expectEqual(before + slice, residentBytes());
    // Taken first, and with its memory, by a heap that wants resident memory.
    try std.testing.expectEqual(segment, take(.resident).?);
    try std.testing.expectEqual(@as(usize, slice), segment.dirtyBytes());
    try std.testing.expect(put(segment));
    // Fresh memory touched elsewhere: as much pooled memory goes back.
    purgeResident(1);
    try std.testing.expectEqual(@as(usize, 0), segment.dirtyBytes());
    try std.testing.expectEqual(before, residentBytes());
    // Purged, it is still there for any heap (after any resident ones
    // earlier tests left).
    if (before > 0) return;
    try std.testing.expectEqual(segment, take(.any).?);
    segment.destroy();
}

test "the child of a fork takes over a lock its parent's thread held" {
    if (builtin.single_threaded) return error.SkipZigTest;
    // As a fork child finds it: held by a thread of another process.
    lock_word.store(os.currentPid() +% 1, .monotonic);
    defer lock_word.store(0, .monotonic);
    // Would spin forever without the take-over.
    lock();
    unlock();
    try std.testing.expectEqual(@as(os.Pid, 0), lock_word.load(.monotonic));
}

test "release unmaps the pooled segments" {
    var heap: @import("heap.zig").Heap = undefined;
    const segment = Segment.create(&heap) orelse return error.SkipZigTest;
    const mapped = os.mappedBytes();
    if (!put(segment)) {
        segment.destroy();
        return error.SkipZigTest;
    }
    try std.testing.expect(release());
    try std.testing.expectEqual(@as(usize, 0), count());
    try std.testing.expectEqual(mapped - segment_mod.segment_size_bytes, os.mappedBytes());
    try std.testing.expect(!release());
}
