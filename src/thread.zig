//! Thread ownership: which heap each thread uses, and what becomes of a heap
//! whose thread is gone.
//!
//! Each thread reaches its heap through the thread-local `tls_heap`. Until
//! its first allocation that is `Heap.empty`, whose fast paths always fall
//! through to the slow path, which calls `initCurrent`.
//!
//! Heaps are never unmapped: they live in a registry of at most
//! `heap_count_max` entries and are handed from dead threads to new ones.
//! Each heap has an owner word (state, sequence number, thread id):
//!
//!   active(tid)  a live thread owns the heap and alone touches its state
//!   orphaned     its thread ended and gave it up (pthread key destructor);
//!                the heap holds live blocks that other threads may free
//!   claimed      another thread is absorbing it (transient)
//!   free         an empty shell, ready for a new thread
//!
//! Every change of owner is a compare-and-swap on the whole word; the
//! sequence number makes a stale read fail the swap (no ABA).
//!
//! On 64-bit targets the owner word is 64 bits and holds the thread id.
//! 32-bit targets have no 64-bit atomics: there the word holds state and
//! sequence number, and the id sits beside it (`Heap.owner_tid`), written
//! while the heap is claimed and published by the release store that makes
//! it active (see `take`). A reader that pairs a stale id with its owner
//! word then fails its compare-and-swap: the word moved on.
//!
//! ## When is a heap's thread gone?
//!
//! Where the system says so (os.thread_exit_callback: a pthread key
//! destructor with libc, an FLS callback on Windows), a callback runs in
//! the ending thread: it returns unused memory and marks the heap orphaned.
//! Without one (Linux without libc), or when a thread allocates again after
//! its callback ran, nothing tells us, so threads that need a heap or fresh
//! memory look for dead owners, where the system can tell
//! (os.can_probe_threads):
//!
//! 1. A heap tagged active(T) in our process whose thread T is gone is safe
//!    to take over: nobody runs on it any more. A thread is gone when the
//!    probe says so (Linux: `tgkill(pid, T, 0)` fails with ESRCH; the
//!    kernel reaps a thread's id only after the thread has stopped
//!    running, so the heap is quiescent).
//! 2. Thread ids of live threads are unique. So when a thread with id T
//!    registers and finds a heap tagged active(T) in its process, that
//!    heap's thread is gone (the id was reused); take it without probing.
//! 3. The id may be reused between a probe and the takeover; the CAS on the
//!    owner word read before the probe then still succeeds. That is sound:
//!    the probe proved the tagged thread dead, and the new thread with the
//!    same id cannot be using this heap: it would have had to claim it
//!    through this word, changing the sequence number.
//!
//! ## fork
//!
//! A child process has one thread (the forking one, now with tid == pid)
//! and copies of every other thread's heap, which may have been caught in
//! the middle of an update: the copy is not a consistent snapshot across
//! pages. Heaps are recorded with the pid of their owner, and a heap
//! recorded with another pid is never taken over by probing (rules 1 and 2
//! compare pids first). Those copies stay mapped and unused: a leak bounded
//! by the parent's footprint at fork, shared copy-on-write, and never a
//! corruption. The forking thread keeps using its own heap; with libc an
//! atfork handler re-tags it with the child's pid and tid so that it can be
//! reclaimed like any other when that thread ends. No global lock exists
//! that a parent thread could have held at fork time.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const config = @import("config.zig");
const secure = @import("secure.zig");
const Heap = @import("heap.zig").Heap;
const Segment = @import("segment.zig").Segment;

/// The calling thread's heap. Reached through `current`/`setCurrent` only.
/// In the shared library on Linux x86_64 and aarch64 it is exported so that
/// inline assembly can address it with the initial-exec TLS model (see
/// tlsSlot); everywhere else it is a plain thread-local.
const tls_heap = if (config.shared_object) struct {
    export threadlocal var kennel_thread_heap: *Heap = &Heap.empty;
} else struct {
    threadlocal var kennel_thread_heap: *Heap = &Heap.empty;
};

comptime {
    // Only the assembly in tlsSlot names the variable; make sure it is emitted.
    if (config.shared_object) _ = &tls_heap.kennel_thread_heap;
}

/// The calling thread's heap (`Heap.empty` before its first allocation).
pub inline fn current() *Heap {
    if (config.shared_object) return tlsSlot().*;
    return tls_heap.kennel_thread_heap;
}

fn setCurrent(heap: *Heap) void {
    if (config.shared_object) {
        tlsSlot().* = heap;
    } else tls_heap.kennel_thread_heap = heap;
}

/// The address of this thread's heap pointer in a shared object, with the
/// initial-exec model: the variable's offset from the thread pointer comes
/// from the GOT (fixed when the library is loaded), so no __tls_get_addr.
/// A library loaded with LD_PRELOAD (or linked) always gets static TLS.
inline fn tlsSlot() **Heap {
    const offset = switch (builtin.cpu.arch) {
        .x86_64 => asm ("movq kennel_thread_heap@gottpoff(%%rip), %[offset]"
            : [offset] "=r" (-> usize),
        ),
        .aarch64 => asm (
            \\adrp %[offset], :gottprel:kennel_thread_heap
            \\ldr %[offset], [%[offset], #:gottprel_lo12:kennel_thread_heap]
            : [offset] "=r" (-> usize),
        ),
        else => comptime unreachable,
    };
    const thread_pointer = switch (builtin.cpu.arch) {
        // glibc keeps the TCB's own address at %fs:0.
        .x86_64 => asm ("movq %%fs:0, %[tp]"
            : [tp] "=r" (-> usize),
        ),
        .aarch64 => asm ("mrs %[tp], tpidr_el0"
            : [tp] "=r" (-> usize),
        ),
        else => comptime unreachable,
    };
    return @ptrFromInt(thread_pointer +% offset);
}

/// Most heaps that can exist at once: one per thread alive at the same time
/// (dead threads' heaps are reused). Allocation fails beyond.
pub const heap_count_max = 1 << 14;

/// Active heaps probed for a dead owner each time a heap is about to map a
/// fresh segment.
const probe_batch_count = 8;

const State = enum(u2) { free, active, orphaned, claimed };

/// Whether the owner's thread id fits in the owner word (see the top).
pub const tid_in_word = @bitSizeOf(usize) >= 64;
pub const OwnerWord = if (tid_in_word) u64 else u32;

const Owner = packed struct(OwnerWord) {
    state: State,
    seq: u30,
    /// The owning thread (active only); on 32-bit in `Heap.owner_tid`.
    tid: if (tid_in_word) os.Tid else u0,

    fn next(owner: Owner, state: State, tid: os.Tid) Owner {
        return .{ .state = state, .seq = owner.seq +% 1, .tid = if (tid_in_word) tid else 0 };
    }
};

comptime {
    assert(@bitSizeOf(OwnerWord) <= @bitSizeOf(usize));
}

/// The thread an `owner` word read from `heap` names (active only).
fn ownerTid(heap: *Heap, owner: Owner) os.Tid {
    if (tid_in_word) return owner.tid;
    // Monotonic: the acquire load of `owner` ordered this after the store
    // that preceded its publication; a later id comes with a later word,
    // and the caller's compare-and-swap with `owner` then fails.
    return heap.owner_tid.load(.monotonic);
}

/// Sets up the owner of a heap not yet published: active(tid).
fn initOwner(heap: *Heap, tid: os.Tid) void {
    heap.owner = .init(@bitCast(Owner{ .state = .active, .seq = 0, .tid = if (tid_in_word) tid else 0 }));
    if (!tid_in_word) heap.owner_tid = .init(tid);
}

var registry: [heap_count_max]std.atomic.Value(?*Heap) = @splat(.init(null));
var registry_len: std.atomic.Value(u32) = .init(0);
var probe_cursor: std.atomic.Value(u32) = .init(0);

/// The heap of a single-threaded build.
var single_heap: Heap = Heap.init_value;

/// Number of heaps ever created (the registry's length).
pub fn heapCount() usize {
    if (builtin.single_threaded) return 1;
    // Monotonic: a statistic.
    return @min(registry_len.load(.monotonic), heap_count_max);
}

/// Calls `visit(context, heap)` for every heap (statistics). Heaps are never
/// unmapped, so any thread may look at them.
pub fn forEachHeap(context: anytype, comptime visit: fn (@TypeOf(context), *Heap) void) void {
    if (builtin.single_threaded) return visit(context, &single_heap);
    for (registry[0..heapCount()]) |*slot| {
        // Acquire: the heap was initialized before it was published.
        visit(context, slot.load(.acquire) orelse continue);
    }
}

/// Whether `heap`'s thread has ended and no thread has taken the heap over
/// yet (statistics: a snapshot).
pub fn isAbandoned(heap: *Heap) bool {
    if (builtin.single_threaded) return false;
    const owner = loadOwner(heap);
    return owner.state == .orphaned or isDead(heap, owner, os.currentPid());
}

fn loadOwner(heap: *Heap) Owner {
    // Acquire: a heap we may take over must be seen as its last owner left it.
    return @bitCast(heap.owner.load(.acquire));
}

/// Gives the calling thread a heap. Null when out of memory.
pub fn initCurrent() ?*Heap {
    assert(current() == &Heap.empty);
    secure.init();
    const heap = if (builtin.single_threaded) &single_heap else claim() orelse return null;
    if (config.hardening.randomize and heap.random == 0) heap.random = secure.randomWord() | 1;
    setCurrent(heap);
    if (!builtin.single_threaded) exit_hook.register(heap);
    return heap;
}

/// A heap for a new thread: one an ended thread left, else a new one.
fn claim() ?*Heap {
    const pid = os.currentPid();
    const tid = os.currentTid();
    // A heap being absorbed by another thread turns into a free shell in a
    // moment; waiting for it keeps the number of heaps at the number of
    // threads alive at once. Bounded: absorbing takes microseconds.
    for (0..claim_rounds_max) |_| {
        const found = claimScan(pid, tid);
        if (found.heap) |heap| return heap;
        if (!found.saw_claimed) break;
        os.yieldThread();
    }
    return create(pid, tid);
}

const claim_rounds_max = 16;

fn claimScan(pid: os.Pid, tid: os.Tid) struct { heap: ?*Heap, saw_claimed: bool } {
    const len = heapCount();
    var shell: ?*Heap = null;
    var saw_claimed = false;
    // Heaps that hold memory and have no owner come first.
    for (registry[0..len]) |*slot| {
        // Acquire: the heap was initialized before it was published.
        const heap = slot.load(.acquire) orelse continue;
        const owner = loadOwner(heap);
        switch (owner.state) {
            .orphaned => if (take(heap, owner, pid, tid)) return .{ .heap = heap, .saw_claimed = false },
            // Rule 2: our id on an active heap of our process: its thread is gone.
            .active => if (ownerTid(heap, owner) == tid and heap.pid.load(.monotonic) == pid and take(heap, owner, pid, tid))
                return .{ .heap = heap, .saw_claimed = false },
            .free => if (shell == null) {
                shell = heap;
            },
            .claimed => saw_claimed = true,
        }
    }
    // Rule 1: heaps of threads that ended without telling us.
    for (registry[0..len]) |*slot| {
        const heap = slot.load(.acquire) orelse continue;
        const owner = loadOwner(heap);
        if (isDead(heap, owner, pid) and take(heap, owner, pid, tid)) return .{ .heap = heap, .saw_claimed = false };
    }
    if (shell) |heap| {
        const owner = loadOwner(heap);
        if (owner.state == .free and take(heap, owner, pid, tid)) return .{ .heap = heap, .saw_claimed = false };
        saw_claimed = true; // Someone took it first; there may be another.
    }
    return .{ .heap = null, .saw_claimed = saw_claimed };
}

/// Whether `heap` is active, belongs to this process and its thread is gone.
fn isDead(heap: *Heap, owner: Owner, pid: os.Pid) bool {
    if (owner.state != .active) return false;
    // Monotonic: checked again by the CAS in `take`/`claimToAbsorb`.
    if (heap.pid.load(.monotonic) != pid) return false;
    return !os.threadIsAlive(pid, ownerTid(heap, owner));
}

/// Makes the calling thread the owner of `heap`, if its owner word is still
/// `expected`.
fn take(heap: *Heap, expected: Owner, pid: os.Pid, tid: os.Tid) bool {
    // Written before the CAS: every thread that may race here is in this
    // process and writes the same value. Monotonic: readers re-check the
    // owner word with a CAS before relying on it.
    heap.pid.store(pid, .monotonic);
    if (tid_in_word) {
        // Acquire on success: we see the heap as its previous owner left it.
        return heap.owner.cmpxchgStrong(@bitCast(expected), @bitCast(expected.next(.active, tid)), .acquire, .monotonic) == null;
    }
    // Claimed while the id beside the word changes: readers skip claimed heaps.
    const claimed = expected.next(.claimed, 0);
    // Acquire on success: as above.
    if (heap.owner.cmpxchgStrong(@bitCast(expected), @bitCast(claimed), .acquire, .monotonic) != null) return false;
    // Monotonic: published by the release store below.
    heap.owner_tid.store(tid, .monotonic);
    // Release: a reader that sees us active sees our id.
    heap.owner.store(@bitCast(claimed.next(.active, tid)), .release);
    return true;
}

fn create(pid: os.Pid, tid: os.Tid) ?*Heap {
    const bytes = std.mem.alignForward(usize, @sizeOf(Heap), os.page_size_min_bytes);
    const memory = os.map(bytes, os.page_size_min_bytes, 0) orelse return null;
    const heap: *Heap = @ptrCast(@alignCast(memory));
    heap.* = Heap.init_value;
    heap.pid = .init(pid);
    initOwner(heap, tid);
    // Monotonic: the slot store below publishes the heap.
    const index = registry_len.fetchAdd(1, .monotonic);
    if (index >= heap_count_max) {
        os.unmap(memory, bytes);
        return null;
    }
    // Release: a thread that loads the slot sees the initialized heap.
    registry[index].store(heap, .release);
    return heap;
}

/// The calling thread is ending (or gives its heap up): return what its heap
/// does not need and leave the rest to whoever takes the heap next.
pub fn abandonCurrent() void {
    if (builtin.single_threaded) {
        // The only thread keeps its heap; it can still give memory back.
        if (current() != &Heap.empty) current().releaseUnused();
        return;
    }
    const heap = current();
    if (heap == &Heap.empty) return;
    setCurrent(&Heap.empty);
    heap.releaseUnused();
    heap.orphaned_ns = os.nowNanoseconds();
    const owner: Owner = @bitCast(heap.owner.load(.monotonic));
    assert(owner.state == .active);
    // A plain store suffices: while we are alive and active, no other thread
    // changes the word (rules 1 and 2 need us gone).
    // Release: the next owner's acquire sees the heap as we leave it.
    heap.owner.store(@bitCast(owner.next(.orphaned, 0)), .release);
}

/// A heap orphaned this recently is left to a thread starting up, which
/// takes it whole (`claim`), rather than absorbed by a running one: a
/// program that ends threads and starts new ones then gives each new thread
/// a heap with memory, instead of one thread all and the others none.
pub const orphan_grace_ns = 50 * std.time.ns_per_ms;

fn recentlyOrphaned(heap: *Heap) bool {
    // Written before the release store that orphaned the heap, which the
    // caller's acquire load of the owner word saw.
    return os.nowNanoseconds() -% heap.orphaned_ns < orphan_grace_ns;
}

/// Claims an ownerless heap for absorption by the caller.
fn claimToAbsorb(heap: *Heap, expected: Owner) bool {
    // Acquire on success: as in `take`.
    return heap.owner.cmpxchgStrong(@bitCast(expected), @bitCast(expected.next(.claimed, 0)), .acquire, .monotonic) == null;
}

/// Moves all of `other` (claimed by us) into `heap` and frees the shell.
fn absorbClaimed(heap: *Heap, other: *Heap) void {
    heap.absorb(other);
    const owner: Owner = @bitCast(other.owner.load(.monotonic));
    assert(owner.state == .claimed);
    // Release: the next thread to take the shell sees it emptied.
    other.owner.store(@bitCast(owner.next(.free, 0)), .release);
}

/// Before mapping fresh memory: absorb one heap whose thread is gone, if any.
/// Probes at most `probe_batch_count` active heaps. Returns whether it did.
pub fn absorbAnyOrphan(heap: *Heap) bool {
    comptime assert(!builtin.single_threaded);
    const len = heapCount();
    for (registry[0..len]) |*slot| {
        const other = slot.load(.acquire) orelse continue;
        if (other == heap) continue;
        const owner = loadOwner(other);
        if (owner.state == .orphaned and !recentlyOrphaned(other) and claimToAbsorb(other, owner)) {
            absorbClaimed(heap, other);
            return true;
        }
    }
    if (len < 2) return false;
    const pid = os.currentPid();
    for (0..@min(len, probe_batch_count)) |_| {
        // Monotonic: a round-robin cursor; any value will do.
        const index = probe_cursor.fetchAdd(1, .monotonic) % len;
        const other = registry[index].load(.acquire) orelse continue;
        if (other == heap) continue;
        const owner = loadOwner(other);
        if (isDead(other, owner, pid) and claimToAbsorb(other, owner)) {
            absorbClaimed(heap, other);
            return true;
        }
    }
    return false;
}

/// Remote frees between two liveness probes of the block owner's thread.
const remote_frees_per_probe = 256;

/// Called on a remote free: if the segment's owner heap has no thread any
/// more, the freeing thread absorbs it, so that memory whose thread ended
/// goes back into use (and to the OS) instead of waiting for a new thread.
/// Orphaned heaps are seen at once; heaps whose thread died without telling
/// (no libc) are found by a probe every `remote_frees_per_probe` frees.
pub fn absorbIfOrphaned(segment: *Segment) bool {
    comptime assert(!builtin.single_threaded);
    const heap = current();
    if (heap == &Heap.empty) return false;
    // Acquire: pairs with the SeqCst store in Heap.absorb; an older owner is
    // harmless (absorbing any ownerless heap is fine; the caller re-checks).
    const other = segment.owner.load(.acquire) orelse return false;
    if (other == heap) return false;
    const owner = loadOwner(other);
    switch (owner.state) {
        .orphaned => if (recentlyOrphaned(other)) return false,
        .active => {
            // The countdown lives in the freeing thread's own heap.
            if (heap.remote_frees_until_probe > 0) {
                heap.remote_frees_until_probe -= 1;
                return false;
            }
            heap.remote_frees_until_probe = remote_frees_per_probe;
            if (!isDead(other, owner, os.currentPid())) return false;
        },
        .free, .claimed => return false,
    }
    if (!claimToAbsorb(other, owner)) return false;
    absorbClaimed(heap, other);
    return true;
}

/// Where the system calls back at thread exit (os.ThreadExit): abandons the
/// heap of an ending thread; after a fork (with libc), re-tags the child's
/// heap.
const exit_hook = os.ThreadExit(onThreadExit, onForkChild);

fn onThreadExit(value: *anyopaque) void {
    const heap: *Heap = @ptrCast(@alignCast(value));
    // The thread may have given this heap up and taken another since.
    if (heap == current()) abandonCurrent();
}

fn onForkChild() void {
    const heap = current();
    if (heap == &Heap.empty) return;
    // Only this thread exists in the child: plain re-tagging is safe.
    heap.pid.store(os.currentPid(), .monotonic);
    const owner: Owner = @bitCast(heap.owner.load(.monotonic));
    // Monotonic: published by the release store below.
    if (!tid_in_word) heap.owner_tid.store(os.currentTid(), .monotonic);
    // Release: as in `abandonCurrent`.
    heap.owner.store(@bitCast(owner.next(.active, os.currentTid())), .release);
}
