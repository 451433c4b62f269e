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
//! Pooled segments are purged (no thread runs a decay for them, purge.zig):
//! they hold address space, not memory. The pool holds at most one segment
//! per heap ever created (`countMax`): it never keeps more than the threads
//! that could take one. Beyond that, segments are unmapped, and the whole
//! pool is when the OS refuses a mapping (`map`).
//!
//! A lock guards the list: taken only on paths that already map, purge or
//! end a thread, and held for a few loads and stores (no system call).
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

/// The pooled segments, linked through `all.next` alone: each change is one
/// store of `first`, so the list is whole at every step (see fork above).
var first: ?*Segment = null;
/// Segments in the list; written under the lock, read without it as a hint.
var pooled: std.atomic.Value(usize) = .init(0);
/// 0: free; else the process id of the thread that holds it.
var lock_word: std.atomic.Value(os.Pid) = .init(0);

/// Spins before a waiter yields and checks for a fork.
const spins_before_yield = 1000;

fn countMax() usize {
    if (@bitSizeOf(usize) < 64) return count_max_32bit;
    return @max(count_min_64bit, thread.heapCount());
}

/// Puts an empty, purged segment into the pool. False when the pool is
/// full: the caller unmaps it.
pub fn put(segment: *Segment) bool {
    assert(segment.isEmpty() and segment.dirtyBytes() == 0);
    assert(segment.all.next == null and segment.all.prev == null);
    // Monotonic: an empty segment; nobody frees into it, and the lock's
    // release publishes it to the next taker.
    segment.owner.store(null, .monotonic);
    lock();
    defer unlock();
    // Monotonic: we hold the lock, the only writer.
    const n = pooled.load(.monotonic);
    if (n >= countMax()) return false;
    segment.all.next = first;
    first = segment;
    // Monotonic: a hint for `take` and `count`; the lock orders the list.
    pooled.store(n + 1, .monotonic);
    return true;
}

/// A pooled segment, its owner not yet set, or null if the pool is empty.
pub fn take() ?*Segment {
    // Monotonic: a look without the lock; a segment put meanwhile is found
    // by a later request.
    if (pooled.load(.monotonic) == 0) return null;
    lock();
    defer unlock();
    const segment = first orelse return null;
    first = segment.all.next;
    segment.all = .{};
    // Monotonic: as in `put`. Saturating: after a fork the hint may be one off.
    pooled.store(pooled.load(.monotonic) -| 1, .monotonic);
    assert(segment.isEmpty());
    return segment;
}

/// Unmaps every pooled segment. Returns whether there was any.
pub fn release() bool {
    var chain: ?*Segment = null;
    var n: usize = 0;
    {
        lock();
        defer unlock();
        chain = first;
        first = null;
        // Monotonic: as in `put`.
        n = pooled.swap(0, .monotonic);
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

/// Whether the pool is full, about: a segment that would not fit is unmapped
/// without being purged first.
pub fn isFull() bool {
    // Monotonic: a hint; `put` checks again under the lock.
    return pooled.load(.monotonic) >= countMax();
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
    try std.testing.expectEqual(segment, take().?);
    try std.testing.expectEqual(before, count());
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
