//! Thread ownership: which heap each thread uses, and what becomes of a heap
//! whose thread is gone.
//!
//! Each thread reaches its heap through the thread-local `tls_heap`. Until
//! its first allocation that is `Heap.empty`, whose fast paths always fall
//! through to the slow path, which calls `initCurrent`.
//!
//! Heaps are never unmapped: they live in the registry (below) and are
//! handed from dead threads to new ones. Each heap has an owner word (state,
//! sequence number, thread id):
//!
//!   unborn       registry memory that is not a heap yet (fresh zeroes)
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
//! ## The registry
//!
//! Heaps are stored in place, one per index, in chunks: chunk k holds
//! `chunk_first_heaps << k` heaps, is mapped when a thread first needs one of
//! its indices, and is never unmapped. So the registry grows with the number
//! of threads alive at once, up to `heap_count_max` (more than memory can
//! hold), and costs one mapping per doubling. A thread that needs a new heap
//! takes the next index (a compare-and-swap on `registry_len`), maps the
//! chunk if no thread has yet (two may race: the loser unmaps its own),
//! initializes the heap and then makes it born with a release store of its
//! first owner word. A reader loads the chunk's address and the owner word
//! with acquire and skips unborn heaps; it takes no lock, and whatever it
//! reaches stays mapped. The owner's fast paths reach their heap through
//! the thread-local pointer alone: the registry costs them nothing.
//!
//! Nothing that runs per thread walks the registry. A new thread finds a
//! heap in constant time (`claim`), heaps that hold memory first:
//! 1. the heap its thread id last owned, if that is still tagged with it
//!    (rule 2 below), from `tid_hints`;
//! 2. where the system announces thread ends, an orphaned heap from the
//!    vacant stack;
//! 3. a heap whose thread is gone, among the next `probe_batch_count`
//!    heaps of a shared cursor (rule 1 below);
//! 4. the heap popped from the vacant stack and held back: a free shell,
//!    or (where thread ends go unannounced) an orphan;
//! and creates one only when all of these fail. The cursor moves one heap
//! per probe, so the threads together sweep the registry and a heap whose
//! thread is gone is met within one sweep. Before a heap maps a fresh
//! segment it looks for an orphaned heap to absorb among the next
//! `absorb_scan_count` heaps of a second cursor (only while `orphaned_count`
//! says one exists) and probes the next `probe_batch_count`. Only
//! statistics visit every heap.
//!
//! ## The vacant stack
//!
//! A lock-free stack of the heaps that are orphaned or free, linked through
//! their registry indices (`Entry`). Its head packs the top index with a tag
//! that every push and pop changes, so a pop that read a stale link fails
//! its compare-and-swap (no ABA); heaps are never unmapped, so reading a
//! stale link is safe. A heap is on the stack at most once: `listed` is set
//! by whoever pushes it and cleared by whoever pops it. A heap whose state
//! changes while it is listed stays on the stack; a pop that finds it
//! active or claimed drops it. No vacant heap is missed: whoever makes a
//! heap orphaned or free stores the owner word, then sets `listed` and
//! pushes the heap if `listed` was clear; a pop clears `listed`, then loads
//! the owner word. All four are SeqCst, so in their single total order
//! either the setter finds `listed` clear (and pushes) or the popper loads
//! the new state (and takes the heap).
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
//! A thread starting up takes a dead owner's heap whole (`claim`). A
//! running thread that finds one (a remote free's probe, or the look before
//! a fresh mapping) makes it orphaned, with its memory (`orphanDead`), and
//! leaves it to new threads for the grace, as the exit callback does.
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
//! that a parent thread could have held at fork time. A push or pop of the
//! vacant stack cut short by the fork can leave a heap listed but off the
//! stack in the child: step 3 of `claim` takes orphaned and free heaps it
//! meets too, so such a heap is found in time.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const config = @import("config.zig");
const secure = @import("secure.zig");
const quarantine = @import("quarantine.zig");
const Heap = @import("heap.zig").Heap;
const purge = @import("purge.zig");
const Segment = @import("segment.zig").Segment;
const pool = @import("pool.zig");

/// The calling thread's heap, and beside it (one thread-local, so that the
/// shared library reaches both without __tls_get_addr) whether the
/// thread's exit callback ran.
const ThreadSlot = extern struct {
    /// Reached through `current`/`setCurrent` only. First: the assembly in
    /// `current` reads it at the slot's own offset.
    heap: *Heap,
    /// Set when the system's exit callback gave the thread's heap up
    /// (`onThreadExit`). A free after that (glibc frees its per-thread
    /// buffers after running the destructors of thread-specific data) must
    /// not take a heap for the thread: nothing would give it up again,
    /// and it would stay active for a thread that is gone. An allocation
    /// still does (the block must come from somewhere), and registers for
    /// another callback.
    exited: bool,
};

/// The calling thread's slot. In the shared library on Linux x86_64 and
/// aarch64 it is exported so that inline assembly can address it with the
/// initial-exec TLS model (see tlsSlot); everywhere else it is a plain
/// thread-local.
const tls_heap = if (config.shared_object) struct {
    export threadlocal var kennel_thread_heap: ThreadSlot = .{ .heap = &Heap.empty, .exited = false };
} else struct {
    threadlocal var kennel_thread_heap: ThreadSlot = .{ .heap = &Heap.empty, .exited = false };
};

inline fn slot() *ThreadSlot {
    return if (config.shared_object) tlsSlot() else &tls_heap.kennel_thread_heap;
}

comptime {
    // Only the assembly in tlsSlot names the variable; make sure it is emitted.
    if (config.shared_object) _ = &tls_heap.kennel_thread_heap;
}

/// The calling thread's heap (`Heap.empty` before its first allocation).
pub inline fn current() *Heap {
    if (config.shared_object) {
        // One load relative to %fs, where tlsSlot().* takes two (the
        // thread pointer, then the heap): this runs on every malloc and
        // free. Volatile, with a memory clobber: setCurrent's store must
        // not be reordered with it, nor two reads merged across it. In rax:
        // left to choose, the compiler takes rdi and moves free's argument
        // out of it.
        if (builtin.cpu.arch == .x86_64) return asm volatile ("movq %%fs:(%[offset]), %[heap]"
            : [heap] "={rax}" (-> *Heap),
            : [offset] "r" (tlsOffset()),
            : .{ .memory = true });
        return tlsSlot().heap;
    }
    return tls_heap.kennel_thread_heap.heap;
}

/// Whether a free by the calling thread may give it a heap: false after its
/// exit callback ran (see ThreadSlot.exited).
pub fn mayTakeHeapToFree() bool {
    return !slot().exited;
}

fn setCurrent(heap: *Heap) void {
    slot().heap = heap;
}

/// The address of this thread's slot in a shared object, with the
/// initial-exec model: the variable's offset from the thread pointer comes
/// from the GOT (fixed when the library is loaded), so no __tls_get_addr.
/// A library loaded with LD_PRELOAD (or linked) always gets static TLS.
inline fn tlsSlot() *ThreadSlot {
    const offset = tlsOffset();
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

/// The heap pointer's offset from the thread pointer (see tlsSlot).
inline fn tlsOffset() usize {
    return switch (builtin.cpu.arch) {
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
}

/// Heaps in the registry's first chunk; chunk k holds this many << k.
const chunk_first_heaps = 16;
/// Chunks the registry can have. On 32-bit targets the vacant stack's head
/// packs an index and a tag in 32 bits, so indices stay below 2^16; a 32-bit
/// address space holds fewer threads than that anyway (each needs a stack).
const chunk_count = if (tid_in_word) 28 else 12;

/// Most heaps that can exist at once: one per thread alive at the same time
/// (dead threads' heaps are reused). More than memory holds (each heap is a
/// few KiB), so a thread that needs a heap gets one while memory lasts; the
/// vacant stack needs every index + 1 to fit in 32 bits.
pub const heap_count_max = chunk_first_heaps * ((1 << chunk_count) - 1);

comptime {
    assert(std.math.isPowerOfTwo(chunk_first_heaps));
    assert(heap_count_max < std.math.maxInt(VacantIndex));
    assert(@bitSizeOf(OwnerWord) <= @bitSizeOf(usize));
    assert(@sizeOf(Heap) % @alignOf(Heap) == 0);
}

/// Heaps probed for a dead owner each time a thread needs a heap, and each
/// time a heap is about to map a fresh segment.
const probe_batch_count = 8;

/// Heaps looked at for an orphan to absorb each time a heap is about to map
/// a fresh segment (no system call: a look at each owner word).
const absorb_scan_count = 64;

/// Entries of `tid_hints` (128 KiB, touched as ids are used): one per
/// thread id where ids stay below this (Linux's default pid_max); beyond,
/// ids share entries, and a hint overwritten by another id is a miss.
const tid_hint_count = 1 << 15;

const State = enum(u3) { unborn = 0, free, active, orphaned, claimed };

/// Whether the owner's thread id fits in the owner word (see the top).
pub const tid_in_word = @bitSizeOf(usize) >= 64;
pub const OwnerWord = if (tid_in_word) u64 else u32;

const Owner = packed struct(OwnerWord) {
    state: State,
    seq: u29,
    /// The owning thread (active only); on 32-bit in `Heap.owner_tid`.
    tid: if (tid_in_word) os.Tid else u0,

    fn next(owner: Owner, state: State, tid: os.Tid) Owner {
        return .{ .state = state, .seq = owner.seq +% 1, .tid = if (tid_in_word) tid else 0 };
    }
};

/// The thread an `owner` word read from `heap` names (active only).
fn ownerTid(heap: *Heap, owner: Owner) os.Tid {
    if (tid_in_word) return owner.tid;
    // Monotonic: the acquire load of `owner` ordered this after the store
    // that preceded its publication; a later id comes with a later word,
    // and the caller's compare-and-swap with `owner` then fails.
    return heap.owner_tid.load(.monotonic);
}

/// A heap's place in the registry: a field of every heap (`Heap.entry`).
pub const Entry = struct {
    /// The heap's registry index, set before it is born.
    index: u32 = 0,
    /// On the vacant stack: index + 1 of the heap below (0: none).
    vacant_next: std.atomic.Value(u32) = .init(0),
    /// On the vacant stack, or about to be pushed (see the top comment).
    listed: std.atomic.Value(bool) = .init(false),
};

/// Half of the vacant stack's head: a whole word has no 64-bit atomics on
/// 32-bit targets.
const VacantIndex = if (tid_in_word) u32 else u16;

/// The vacant stack's head.
const Vacant = packed struct(OwnerWord) {
    /// Index + 1 of the top heap; 0 when the stack is empty.
    top: VacantIndex,
    /// Changed by every push and pop.
    tag: VacantIndex,
};

var chunks: [chunk_count]std.atomic.Value(?[*]Heap) = @splat(.init(null));
/// Indices handed out so far (some may not be born yet, or never will be:
/// a thread whose chunk could not be mapped leaves its index unborn).
var registry_len: std.atomic.Value(u32) = .init(0);
/// Heaps born so far.
var born_count: std.atomic.Value(u32) = .init(0);
var vacant_head: std.atomic.Value(OwnerWord) = .init(0);
/// Heaps in state orphaned (a hint for absorbAnyOrphan).
var orphaned_count: std.atomic.Value(u32) = .init(0);
/// Where the next liveness probe looks, and the next look for an orphan.
var probe_cursor: std.atomic.Value(u32) = .init(0);
var orphan_cursor: std.atomic.Value(u32) = .init(0);
/// Index + 1 of the heap a thread with id `tid % tid_hint_count` last took.
var tid_hints: [tid_hint_count]std.atomic.Value(u32) = @splat(.init(0));

/// The heap of a single-threaded build.
var single_heap: Heap = Heap.init_value;

/// Number of heaps ever created: about the most threads alive at once.
pub fn heapCount() usize {
    if (builtin.single_threaded) return 1;
    // Monotonic: a statistic.
    return born_count.load(.monotonic);
}

/// Registry indices in use, born or not: every heap's index is below.
pub fn indexCount() usize {
    if (builtin.single_threaded) return 1;
    // Monotonic: indices below it may still be unborn; readers check.
    return registry_len.load(.monotonic);
}

/// The chunk that holds `index`, and the index's offset in it.
fn chunkOf(index: u32) struct { chunk: u5, offset: usize } {
    assert(index < heap_count_max);
    const chunk = std.math.log2_int(u32, index / chunk_first_heaps + 1);
    const first = chunk_first_heaps * ((@as(usize, 1) << chunk) - 1);
    return .{ .chunk = @intCast(chunk), .offset = index - first };
}

/// Bytes of chunk `chunk`; null where that does not fit the address space.
fn chunkBytes(chunk: u5) ?usize {
    const heaps = std.math.shlExact(usize, chunk_first_heaps, chunk) catch return null;
    return std.math.mul(usize, heaps, @sizeOf(Heap)) catch null;
}

/// The heap at `index` if it is born.
fn bornAt(index: u32) ?*Heap {
    const where = chunkOf(index);
    // Acquire: pairs with the chunk's installation (its memory is fresh).
    const chunk = chunks[where.chunk].load(.acquire) orelse return null;
    const heap = &chunk[where.offset];
    return if (loadOwner(heap).state == .unborn) null else heap;
}

/// Calls `visit(context, heap)` for every heap (statistics). Heaps are never
/// unmapped, so any thread may look at them.
pub fn forEachHeap(context: anytype, comptime visit: fn (@TypeOf(context), *Heap) void) void {
    if (builtin.single_threaded) return visit(context, &single_heap);
    const len = indexCount();
    for (0..len) |index| visit(context, bornAt(@intCast(index)) orelse continue);
}

/// Whether `heap`'s thread has ended and no thread has taken the heap over
/// yet (statistics: a snapshot).
pub fn isAbandoned(heap: *Heap) bool {
    if (builtin.single_threaded) return false;
    const owner = loadOwner(heap);
    return owner.state == .orphaned or isDead(heap, owner, os.currentPid());
}

fn loadOwner(heap: *Heap) Owner {
    // Acquire: a heap we may take over must be seen as its last owner left
    // it, and a heap seen born as its creator initialized it.
    return @bitCast(heap.owner.load(.acquire));
}

/// Gives the calling thread a heap. Null when out of memory.
pub fn initCurrent() ?*Heap {
    assert(current() == &Heap.empty);
    secure.init();
    const heap = if (builtin.single_threaded) &single_heap else claim() orelse return null;
    if ((config.hardening.randomize or config.hardening.quarantine) and heap.random == 0) heap.random = secure.randomWord() | 1;
    // The probe cadence is what this thread learns about the owners it
    // frees into: a heap taken over starts as a new one does, probing at
    // its first remote free. (Kept, a count of up to 65,536 from the last
    // owner let a consumer free all 20,000 blocks of a dead producer
    // without a probe, and the producer's memory stayed resident.)
    heap.remote_frees_until_probe = 0;
    heap.remote_frees_per_probe = 0;
    setCurrent(heap);
    if (!builtin.single_threaded) exit_hook.register(heap);
    return heap;
}

/// A heap for a new thread: one an ended thread left, else a new one. Heaps
/// with memory come first: an empty shell only when none is found.
fn claim() ?*Heap {
    const pid = os.currentPid();
    const tid = os.currentTid();
    if (takeHinted(pid, tid)) |heap| return heap;
    // A heap being absorbed by another thread turns into a free shell in a
    // moment; waiting for it keeps the number of heaps at the number of
    // threads alive at once. Bounded: absorbing takes microseconds.
    for (0..claim_rounds_max) |_| {
        var saw_claimed = false;
        const vacant = popVacantFor(&saw_claimed);
        if (vacant) |heap| {
            const owner = loadOwner(heap);
            if (owner.state == .orphaned and exit_hook.announces() and take(heap, owner, pid, tid)) return heap;
        }
        if (takeProbed(pid, tid, &saw_claimed)) |heap| {
            // Back on the stack for the next thread.
            if (vacant) |held| listVacant(held);
            return heap;
        }
        if (vacant) |held| {
            const owner = loadOwner(held);
            if ((owner.state == .free or owner.state == .orphaned) and take(held, owner, pid, tid)) return held;
            // Taken meanwhile (it was off the stack, so through a probe).
            saw_claimed = true;
        }
        if (!saw_claimed) break;
        os.yieldThread();
    }
    return create(pid, tid);
}

const claim_rounds_max = 16;

/// Rule 2 without a scan: the heap our thread id last owned, if it is
/// still tagged with it.
fn takeHinted(pid: os.Pid, tid: os.Tid) ?*Heap {
    // Monotonic: a hint; bornAt and take check the heap.
    const hint = tid_hints[hintIndex(tid)].load(.monotonic);
    if (hint == 0) return null;
    const heap = bornAt(hint - 1) orelse return null;
    const owner = loadOwner(heap);
    // Monotonic: checked again by the CAS in `take`.
    if (owner.state != .active or ownerTid(heap, owner) != tid or heap.pid.load(.monotonic) != pid) return null;
    return if (take(heap, owner, pid, tid)) heap else null;
}

fn hintIndex(tid: os.Tid) usize {
    return @as(u32, @bitCast(tid)) % tid_hint_count;
}

/// Pops the vacant stack until it finds a heap orphaned or free, which it
/// leaves to the caller (off the stack, not taken).
///
/// Where thread ends go unannounced, the caller holds an orphan back, as it
/// does a shell, and probes first: a heap whose thread is gone is met only
/// by the cursor's sweep, and there orphans are the few that running
/// threads' probes found. Taken first, the orphans went to the first new
/// threads, and the later ones swept a registry where the heaps taken
/// meanwhile lay between the dead ones: eight live heaps in a row, and a
/// thread created a heap while dead ones were left (32-bit x86 without
/// libc, under qemu: a second wave of 256 threads made 80 more heaps).
fn popVacantFor(saw_claimed: *bool) ?*Heap {
    // Every pop removes an entry, and a heap is listed at most once: the
    // stack holds at most one entry per index (pushes meanwhile may add a
    // few, found by the next round).
    for (0..indexCount()) |_| {
        const heap = popVacant() orelse break;
        // SeqCst, both: see "The vacant stack" at the top.
        heap.entry.listed.store(false, .seq_cst);
        const owner: Owner = @bitCast(heap.owner.load(.seq_cst));
        switch (owner.state) {
            .orphaned, .free => return heap,
            // Claimed by an absorber: it comes back as a shell.
            .claimed => saw_claimed.* = true,
            .unborn, .active => {},
        }
    }
    return null;
}

/// Rule 1 (and 2) over the next `probe_batch_count` heaps of the cursor.
/// Vacant heaps met on the way are taken too (see "fork" at the top).
fn takeProbed(pid: os.Pid, tid: os.Tid, saw_claimed: *bool) ?*Heap {
    const len = indexCount();
    if (len == 0) return null;
    for (0..@min(len, probe_batch_count)) |_| {
        const heap = bornAt(nextIndex(&probe_cursor, len)) orelse continue;
        const owner = loadOwner(heap);
        const vacant = switch (owner.state) {
            .orphaned, .free => true,
            // Monotonic: checked again by the CAS in `take`.
            .active => (ownerTid(heap, owner) == tid and heap.pid.load(.monotonic) == pid) or isDead(heap, owner, pid),
            .claimed => blk: {
                saw_claimed.* = true;
                break :blk false;
            },
            .unborn => false,
        };
        if (vacant and take(heap, owner, pid, tid)) return heap;
    }
    return null;
}

/// The next index of a round-robin `cursor` over `len` indices. One at a
/// time, so that the heaps a thread did not need to look at are the next
/// thread's: together the threads sweep the registry, and a heap whose
/// thread is gone is found within one sweep.
fn nextIndex(cursor: *std.atomic.Value(u32), len: usize) u32 {
    // Monotonic: any value will do.
    return @intCast(cursor.fetchAdd(1, .monotonic) % len);
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
    assert(expected.state != .unborn and expected.state != .claimed);
    // Written before the CAS: every thread that may race here is in this
    // process and writes the same value. Monotonic: readers re-check the
    // owner word with a CAS before relying on it.
    heap.pid.store(pid, .monotonic);
    if (tid_in_word) {
        // Acquire on success: we see the heap as its previous owner left it.
        if (heap.owner.cmpxchgStrong(@bitCast(expected), @bitCast(expected.next(.active, tid)), .acquire, .monotonic) != null) return false;
    } else {
        // Claimed while the id beside the word changes: readers skip
        // claimed heaps.
        const claimed = expected.next(.claimed, 0);
        // Acquire on success: as above.
        if (heap.owner.cmpxchgStrong(@bitCast(expected), @bitCast(claimed), .acquire, .monotonic) != null) return false;
        // Monotonic: published by the release store below.
        heap.owner_tid.store(tid, .monotonic);
        // Release: a reader that sees us active sees our id.
        heap.owner.store(@bitCast(claimed.next(.active, tid)), .release);
    }
    tookOver(heap, expected, tid);
    // Its thread ended without telling (no exit callback, or a thread id
    // reused), and a probe found it so (active, or orphaned by
    // `orphanDead`): do now what `abandonCurrent` does at a thread's end,
    // but keep the free memory; spares we will not need go to the pool
    // before other new threads look. (After `abandonCurrent` this costs a
    // walk of the page queues.)
    if (expected.state != .free) {
        heap.resumeForNewOwner();
        heap.shedSpares();
    }
    return true;
}

/// Bookkeeping after the calling thread (id `tid`) took `heap` in state
/// `was`.
fn tookOver(heap: *Heap, was: Owner, tid: os.Tid) void {
    // Monotonic: a hint, and a count read as a hint.
    if (was.state == .orphaned) _ = orphaned_count.fetchSub(1, .monotonic);
    tid_hints[hintIndex(tid)].store(heap.entry.index + 1, .monotonic);
}

fn create(pid: os.Pid, tid: os.Tid) ?*Heap {
    const index = reserveIndex() orelse return null;
    const where = chunkOf(index);
    const chunk = chunks[where.chunk].load(.acquire) orelse mapChunk(where.chunk) orelse return null;
    const heap = &chunk[where.offset];
    // Other threads may load the owner word meanwhile (and see it unborn):
    // every other field is ours until the heap is born.
    inline for (comptime std.meta.fieldNames(Heap)) |name| {
        if (comptime !std.mem.eql(u8, name, "owner")) @field(heap, name) = @field(Heap.init_value, name);
    }
    heap.entry.index = index;
    heap.pid = .init(pid);
    if (!tid_in_word) heap.owner_tid = .init(tid);
    // Release: a thread that sees the heap born sees it initialized.
    heap.owner.store(@bitCast(Owner{ .state = .active, .seq = 0, .tid = if (tid_in_word) tid else 0 }), .release);
    // Monotonic: a statistic.
    _ = born_count.fetchAdd(1, .monotonic);
    tookOver(heap, .{ .state = .unborn, .seq = 0, .tid = 0 }, tid);
    return heap;
}

/// The next registry index; null past `heap_count_max`.
fn reserveIndex() ?u32 {
    // Monotonic: the index is ours alone; the chunk and the owner word
    // publish what is stored there.
    var len = registry_len.load(.monotonic);
    // Bounded: each failed swap means another thread took an index.
    while (len < heap_count_max) {
        len = registry_len.cmpxchgWeak(len, len + 1, .monotonic, .monotonic) orelse return len;
    }
    return null;
}

/// Maps chunk `chunk` and installs it, unless another thread did first.
fn mapChunk(chunk: u5) ?[*]Heap {
    const bytes = chunkBytes(chunk) orelse return null;
    const memory = os.map(bytes, os.page_size_min_bytes, 0) orelse return null;
    const heaps: [*]Heap = @ptrCast(@alignCast(memory));
    // Release on success: readers that acquire the address see fresh
    // (zeroed: unborn) memory. Acquire on failure: we use the winner's.
    if (chunks[chunk].cmpxchgStrong(null, heaps, .release, .acquire)) |winner| {
        os.unmap(memory, bytes);
        return winner.?;
    }
    return heaps;
}

/// Pops the vacant stack's top heap.
fn popVacant() ?*Heap {
    // Acquire: we read the link the pusher stored before its release swap.
    var head: Vacant = @bitCast(vacant_head.load(.acquire));
    // Bounded: each failed swap means another thread pushed or popped.
    while (head.top != 0) {
        // Only born heaps are pushed, by a thread that saw their chunk.
        const heap = bornAt(head.top - 1).?;
        // Monotonic: if the link changed since we read the head, so did the
        // tag, and the swap fails.
        const below = heap.entry.vacant_next.load(.monotonic);
        const popped: Vacant = .{ .top = @intCast(below), .tag = head.tag +% 1 };
        // Acquire: as above, for the next head.
        head = @bitCast(vacant_head.cmpxchgWeak(@bitCast(head), @bitCast(popped), .acquire, .acquire) orelse return heap);
    }
    return null;
}

/// `heap` just became orphaned or free (its owner word stored SeqCst): put
/// it on the vacant stack unless it is listed already.
fn listVacant(heap: *Heap) void {
    // SeqCst: see "The vacant stack" at the top.
    if (heap.entry.listed.swap(true, .seq_cst)) return;
    // Monotonic: the swap below orders the link.
    var head: Vacant = @bitCast(vacant_head.load(.monotonic));
    // Bounded: each failed swap means another thread pushed or popped.
    while (true) {
        // Monotonic: published by the release swap below.
        heap.entry.vacant_next.store(head.top, .monotonic);
        const pushed: Vacant = .{ .top = @intCast(heap.entry.index + 1), .tag = head.tag +% 1 };
        // Release: a popper that acquires the head sees the link.
        head = @bitCast(vacant_head.cmpxchgWeak(@bitCast(head), @bitCast(pushed), .release, .monotonic) orelse return);
    }
}

/// kennel.releaseThreadMemory: the calling thread's unused memory goes back
/// to the OS now, with the resident memory of the segment pool (pool.zig),
/// which would otherwise wait there for a thread to take it, and its heap
/// to the next thread.
pub fn releaseCurrent() void {
    // An orphan this thread freed into goes back now, grace or not: the
    // program asked for its memory back (a consumer of an ended thread's
    // blocks, done with them, whose producer ended without telling and
    // was orphaned at the consumer's first free).
    if (!builtin.single_threaded and current() != &Heap.empty) absorbNotedWithin(current(), 0);
    abandonCurrent();
    pool.purgeResident(std.math.maxInt(usize));
}

/// The calling thread is ending (or gives its heap up): return what its heap
/// does not need and leave the rest to whoever takes the heap next.
pub fn abandonCurrent() void {
    // The blocks waiting in the heap's quarantine are freed by their thread.
    if (config.hardening.quarantine and current() != &Heap.empty) quarantine.flush(current());
    if (builtin.single_threaded) {
        // The only thread keeps its heap; it can still give memory back.
        if (current() != &Heap.empty) current().releaseUnused();
        return;
    }
    const heap = current();
    if (heap == &Heap.empty) return;
    // An orphan this thread freed into, past its grace, goes back with
    // this heap's memory.
    absorbNoted(heap);
    setCurrent(&Heap.empty);
    heap.releaseUnused();
    heap.shedSpares();
    heap.orphaned_ns = os.nowNanoseconds();
    const owner: Owner = @bitCast(heap.owner.load(.monotonic));
    assert(owner.state == .active);
    // Monotonic: a count read as a hint; counted before the heap can be
    // taken, so it never drops below zero.
    _ = orphaned_count.fetchAdd(1, .monotonic);
    // A plain store suffices: while we are alive and active, no other thread
    // changes the word (rules 1 and 2 need us gone).
    // SeqCst: releases the heap to its next owner (whose acquire sees it as
    // we leave it) and orders the store before listVacant's (see the top).
    heap.owner.store(@bitCast(owner.next(.orphaned, 0)), .seq_cst);
    listVacant(heap);
}

/// A heap orphaned this recently is left to a thread starting up, which
/// takes it whole (`claim`), rather than absorbed by a running one: a
/// program that ends threads and starts new ones then gives each new thread
/// a heap with memory, instead of one thread all and the others none.
pub const orphan_grace_ns = 50 * std.time.ns_per_ms;

fn recentlyOrphaned(heap: *Heap) bool {
    return orphanedWithin(heap, orphan_grace_ns);
}

fn orphanedWithin(heap: *Heap, ns: u64) bool {
    // Written before the release store that orphaned the heap, which the
    // caller's acquire load of the owner word saw.
    return os.nowNanoseconds() -% heap.orphaned_ns < ns;
}

/// A heap whose thread a probe found gone (it ended without telling: no
/// exit callback) becomes orphaned now, as if its thread's callback had
/// run, with its free memory kept: a thread starting up takes it whole from
/// the vacant stack (`claim`), and running threads absorb it only after the
/// grace, as they do with libc. (Absorbed at once by the first running
/// thread whose remote free or fresh mapping met it, the heaps of ended
/// threads went into running ones and new threads got empty shells:
/// thread-churn without libc faulted 10 times per thread, with libc 0.15.)
/// Returns false if another thread changed the heap's owner word first.
fn orphanDead(heap: *Heap, expected: Owner) bool {
    assert(expected.state == .active);
    // Claimed first, so that orphaned_ns is ours to write.
    if (!claimToAbsorb(heap, expected)) return false;
    heap.orphaned_ns = os.nowNanoseconds();
    // Monotonic: as in abandonCurrent.
    _ = orphaned_count.fetchAdd(1, .monotonic);
    const claimed: Owner = @bitCast(heap.owner.load(.monotonic));
    // SeqCst: as in abandonCurrent (the next owner's acquire sees the
    // heap as its dead thread left it, and listVacant's order).
    heap.owner.store(@bitCast(claimed.next(.orphaned, 0)), .seq_cst);
    listVacant(heap);
    return true;
}

/// Claims an ownerless heap for absorption by the caller.
fn claimToAbsorb(heap: *Heap, expected: Owner) bool {
    // Acquire on success: as in `take`.
    if (heap.owner.cmpxchgStrong(@bitCast(expected), @bitCast(expected.next(.claimed, 0)), .acquire, .monotonic) != null) return false;
    // Monotonic: as in `tookOver`.
    if (expected.state == .orphaned) _ = orphaned_count.fetchSub(1, .monotonic);
    return true;
}

/// Moves all of `other` (claimed by us) into `heap` and frees the shell.
fn absorbClaimed(heap: *Heap, other: *Heap) void {
    heap.absorb(other);
    // The ended thread's quarantine: its blocks are free now.
    if (config.hardening.quarantine) quarantine.flush(other);
    heap.collectAfterAbsorbing();
    const owner: Owner = @bitCast(other.owner.load(.monotonic));
    assert(owner.state == .claimed);
    // SeqCst: releases the emptied shell to the next thread that takes it,
    // and orders the store before listVacant's (see the top).
    other.owner.store(@bitCast(owner.next(.free, 0)), .seq_cst);
    listVacant(other);
}

/// Before mapping fresh memory: absorb one heap orphaned longer than the
/// grace, if any among the next heaps of the cursor, and orphan those
/// among the next whose thread is gone (`orphanDead`). Returns whether it
/// absorbed one.
pub fn absorbAnyOrphan(heap: *Heap) bool {
    comptime assert(!builtin.single_threaded);
    const len = indexCount();
    if (len < 2) return false;
    // Monotonic: a hint; an orphan missed now is found by a later scan, by
    // a free into it (absorbIfOrphaned) or by a new thread.
    if (orphaned_count.load(.monotonic) > 0) {
        if (absorbFromCursor(heap, len, absorb_scan_count, .orphaned)) return true;
    }
    return absorbFromCursor(heap, len, probe_batch_count, .dead);
}

/// Looks at the next `count_max` heaps of the cursor (all if fewer) for
/// one to absorb, orphaned a while ago; or (a system call each) for heaps
/// active with their thread gone, which it orphans.
fn absorbFromCursor(heap: *Heap, len: usize, count_max: usize, comptime which: enum { orphaned, dead }) bool {
    const pid = if (which == .dead) os.currentPid() else undefined;
    const cursor = if (which == .dead) &probe_cursor else &orphan_cursor;
    for (0..@min(len, count_max)) |_| {
        const other = bornAt(nextIndex(cursor, len)) orelse continue;
        if (other == heap) continue;
        const owner = loadOwner(other);
        const ownerless = switch (which) {
            .orphaned => owner.state == .orphaned and !recentlyOrphaned(other),
            // Left to a new thread first (`orphanDead`).
            .dead => {
                if (isDead(other, owner, pid)) _ = orphanDead(other, owner);
                continue;
            },
        };
        if (ownerless and claimToAbsorb(other, owner)) {
            absorbClaimed(heap, other);
            return true;
        }
    }
    return false;
}

/// Remote frees between two liveness probes of the block owner's thread
/// (two system calls each: the process id, then the probe). A probe that
/// finds the owner alive doubles the count for the next, up to the most;
/// one that finds it dead starts again from the least. Where the system
/// announces thread ends (exit callbacks), always the most: a probe there
/// only finds a thread that allocated again after its callback ran. A
/// probe every 256 frees cost programs passing blocks between threads
/// thousands of system calls a second, nearly all finding the owner alive
/// (mstress, with libc: 3,000 in 0.15 s; larson, without: 7,600 in 0.5 s).
const remote_frees_per_probe_min = 256;
const remote_frees_per_probe_max = 1 << 16;

/// Called on a remote free: if the segment's owner heap has no thread any
/// more, the freeing thread absorbs it, so that memory whose thread ended
/// goes back into use (and to the OS) instead of waiting for a new thread:
/// at once if it was orphaned longer than the grace, else once the grace
/// is over (`absorbNoted`). Orphaned heaps are seen at once; heaps whose
/// thread died without telling (no libc) are found by a probe every
/// `remote_frees_per_probe_min` to `remote_frees_per_probe_max` frees, and
/// orphaned then (`orphanDead`).
pub fn absorbIfOrphaned(segment: *Segment) bool {
    comptime assert(!builtin.single_threaded);
    // Acquire: pairs with the SeqCst store in Heap.absorb; an older owner is
    // harmless (absorbing any ownerless heap is fine; the caller re-checks).
    const other = segment.owner.load(.acquire) orelse return false;
    var heap = current();
    if (other == heap) return false;
    if (heap == &Heap.empty) {
        // A thread that frees before it ever allocated (a consumer of other
        // threads' blocks) takes a heap now, to absorb and to count its
        // frees between probes; `claim` may hand it `other` itself. Without
        // one, a producer's memory that such a thread freed after the
        // producer ended stayed resident, nobody's to reuse or purge
        // (64 MiB of 1000-byte blocks, for as long as the program ran).
        if (!mayTakeHeapToFree()) return false;
        heap = initCurrent() orelse return false;
        if (other == heap) return true;
    }
    const owner = loadOwner(other);
    switch (owner.state) {
        .orphaned => if (recentlyOrphaned(other)) {
            // Left to a new thread for now; if none takes it, this heap
            // absorbs it later (`absorbNoted`): nothing else might, and the
            // frees made meanwhile would stay with it.
            heap.orphan_noted = other;
            return false;
        },
        .active => {
            // The countdown lives in the freeing thread's own heap.
            if (heap.remote_frees_until_probe > 0) {
                heap.remote_frees_until_probe -= 1;
                return false;
            }
            const dead = isDead(other, owner, os.currentPid());
            heap.remote_frees_per_probe = if (exit_hook.announces())
                remote_frees_per_probe_max
            else if (dead)
                remote_frees_per_probe_min
            else
                std.math.clamp(heap.remote_frees_per_probe *| 2, remote_frees_per_probe_min, remote_frees_per_probe_max);
            heap.remote_frees_until_probe = heap.remote_frees_per_probe;
            // Left to a new thread first, then absorbed by this one as
            // any orphan it freed into (`orphanDead`, `absorbNoted`).
            if (dead and orphanDead(other, owner)) heap.orphan_noted = other;
            return false;
        },
        .free, .claimed, .unborn => return false,
    }
    if (!claimToAbsorb(other, owner)) return false;
    absorbClaimed(heap, other);
    return true;
}

/// At a slow path of `heap`: absorbs the orphan its thread freed into during
/// the grace (`absorbIfOrphaned`) once the grace is over, unless a new
/// thread took it or another thread absorbed it meanwhile. Before, all of
/// a producer's blocks freed by a consumer within 50 ms of the producer's
/// end stayed in the orphan: nothing looked at it again until some thread
/// mapped a fresh segment or a new thread started.
pub fn absorbNoted(heap: *Heap) void {
    absorbNotedWithin(heap, orphan_grace_ns);
}

/// `absorbNoted`, once the orphan has been one for `grace_ns`.
fn absorbNotedWithin(heap: *Heap, grace_ns: u64) void {
    comptime assert(!builtin.single_threaded);
    const other = heap.orphan_noted orelse return;
    const owner = loadOwner(other);
    if (owner.state == .orphaned and orphanedWithin(other, grace_ns)) return;
    heap.orphan_noted = null;
    if (owner.state == .orphaned and other != heap and claimToAbsorb(other, owner)) absorbClaimed(heap, other);
}

/// Where the system calls back at thread exit (os.ThreadExit): abandons the
/// heap of an ending thread; after a fork (with libc), re-tags the child's
/// heap.
const exit_hook = os.ThreadExit(onThreadExit, onForkChild);

fn onThreadExit(value: *anyopaque) void {
    const heap: *Heap = @ptrCast(@alignCast(value));
    slot().exited = true;
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

test "remote frees probe a live owner less and less often, a dead one's finder again soon" {
    if (builtin.single_threaded or config.secure) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const Owner_ = struct {
        blocks: [2][]u8 = .{ &.{}, &.{} },
        ready: std.atomic.Value(u32) = .init(0),
        release: std.atomic.Value(u32) = .init(0),

        // Allocates, then stays alive (owning the blocks' page) until
        // told, so that the frees below are remote and find the owner alive.
        fn run(o: *@This()) void {
            for (&o.blocks) |*b| b.* = gpa.alloc(u8, 64) catch @panic("out of memory");
            // Release: publishes `blocks` to the waiting thread.
            o.ready.store(1, .release);
            // Acquire: pairs with the release store below.
            while (o.release.load(.acquire) == 0) std.atomic.spinLoopHint();
        }
    };
    // A heap of our own first, so that the frees are remote and counted.
    gpa.free(try gpa.alloc(u8, 64));
    const heap = current();
    var o: Owner_ = .{};
    const t = try std.Thread.spawn(.{}, Owner_.run, .{&o});
    // Acquire: pairs with the release store in `run`.
    while (o.ready.load(.acquire) == 0) std.atomic.spinLoopHint();
    heap.remote_frees_per_probe = remote_frees_per_probe_min;
    for (o.blocks, 0..) |block, i| {
        heap.remote_frees_until_probe = 0;
        gpa.free(block);
        // Each free probed the owner, alive, and doubled the count.
        const expected: u32 = if (exit_hook.announces()) remote_frees_per_probe_max else @as(u32, remote_frees_per_probe_min) << @intCast(i + 1);
        try std.testing.expectEqual(expected, heap.remote_frees_until_probe);
    }
    // Release: pairs with the acquire load in `run`.
    o.release.store(1, .release);
    t.join();
    // Where the system calls back at thread exit, the key exists by now.
    if (os.thread_exit_callback) try std.testing.expect(exit_hook.announces());
    if (os.thread_exit_callback or !os.can_probe_threads) return;
    // Without exit callbacks the ended thread's heap stays active, tagged
    // with a dead thread: the next probe finds it so, and the count starts
    // again from the least.
    var dead: Owner_ = .{};
    const d = try std.Thread.spawn(.{}, Owner_.run, .{&dead});
    // Acquire and release: as for the first owner above.
    while (dead.ready.load(.acquire) == 0) std.atomic.spinLoopHint();
    dead.release.store(1, .release);
    d.join();
    // Acquire: as in absorbIfOrphaned.
    const dead_heap = Segment.ofPtr(dead.blocks[0].ptr).owner.load(.acquire).?;
    try os.expectThreadReaped(ownerTid(dead_heap, loadOwner(dead_heap)));
    heap.remote_frees_per_probe = remote_frees_per_probe_max;
    heap.remote_frees_until_probe = 0;
    gpa.free(dead.blocks[0]);
    try std.testing.expectEqual(@as(u32, remote_frees_per_probe_min), heap.remote_frees_until_probe);
    // Found dead, the heap is orphaned with its memory and left to a new
    // thread for the grace (`orphanDead`); absorbed at once, it would be
    // an empty shell for the next thread.
    try std.testing.expectEqual(State.orphaned, loadOwner(dead_heap).state);
    try std.testing.expectEqual(dead_heap, heap.orphan_noted.?);
    gpa.free(dead.blocks[1]);
}

test "a new thread that takes an ended thread's heap keeps its free memory" {
    if (builtin.single_threaded or config.secure) return error.SkipZigTest;
    // Where threads say they end, their heaps are given up at the end
    // (abandonCurrent) and this path is not taken.
    if (os.thread_exit_callback or !os.can_probe_threads) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const Ended = struct {
        heap: *Heap = undefined,
        free_bytes: usize = 0,
        kept: []u8 = &.{},

        // Touches 3 MiB of small pages and frees them, keeping one block so
        // that the segment stays in use; then ends without telling.
        fn run(e: *@This()) void {
            var blocks: [400][]u8 = undefined;
            for (&blocks) |*b| {
                b.* = gpa.alloc(u8, 8000) catch @panic("out of memory");
                @memset(b.*, 1);
            }
            e.kept = gpa.alloc(u8, 64) catch @panic("out of memory");
            for (blocks) |b| gpa.free(b);
            e.heap = current();
            e.free_bytes = e.heap.dirty_bytes;
        }
    };
    const Taker = struct {
        free_bytes: usize = 0,
        took: bool = false,

        // What a new thread's claim does with the heap of a dead thread.
        fn run(t: *@This(), heap: *Heap) void {
            const owner = loadOwner(heap);
            const pid = os.currentPid();
            if (!isDead(heap, owner, pid)) return;
            t.took = take(heap, owner, pid, os.currentTid());
            if (!t.took) return;
            setCurrent(heap);
            t.free_bytes = heap.dirty_bytes;
            abandonCurrent();
        }
    };
    var ended: Ended = .{};
    const e = try std.Thread.spawn(.{}, Ended.run, .{&ended});
    e.join();
    defer gpa.free(ended.kept);
    try os.expectThreadReaped(ownerTid(ended.heap, loadOwner(ended.heap)));
    // The ended thread's free memory must exceed what a purge keeps.
    if (ended.free_bytes <= 2 * purge.keep_bytes) return error.SkipZigTest;
    var taker: Taker = .{};
    const t = try std.Thread.spawn(.{}, Taker.run, .{ &taker, ended.heap });
    t.join();
    try std.testing.expect(taker.took);
    // All of it, but what the budget took: purged to `keep_bytes` at the
    // take-over, the new thread faulted the same memory in again.
    try std.testing.expect(taker.free_bytes > 2 * purge.keep_bytes);
}

test "a new thread that takes an ended thread's heap keeps what its blocks got back meanwhile" {
    if (builtin.single_threaded or config.secure) return error.SkipZigTest;
    // As above: where threads say they end, this path is not taken.
    if (os.thread_exit_callback or !os.can_probe_threads) return error.SkipZigTest;
    const gpa = @import("root.zig").allocator;
    const block_count = 48;
    const Ended = struct {
        heap: *Heap = undefined,
        blocks: [block_count][]u8 = undefined,

        // Fills large blocks and ends without telling, leaving them live.
        fn run(e: *@This()) void {
            for (&e.blocks) |*b| {
                b.* = gpa.alloc(u8, 1 << 20) catch @panic("out of memory");
                @memset(b.*, 1);
            }
            e.heap = current();
        }
    };
    const Taker = struct {
        took: bool = false,
        waits_as_own: bool = false,
        footprint_before: usize = 0,
        footprint_after: usize = 0,

        // A new thread's claim of the dead thread's heap, then its first
        // allocation, which collects the frees the heap's blocks got.
        fn run(t: *@This(), heap: *Heap) void {
            const owner = loadOwner(heap);
            const pid = os.currentPid();
            // Found dead by the frees below (orphaned, left to new threads
            // for a while), or not looked at yet; this thread may have its
            // thread id, as `claim` then finds the heap first.
            const reused = owner.state == .active and ownerTid(heap, owner) == os.currentTid();
            if (owner.state != .orphaned and !reused and !isDead(heap, owner, pid)) return;
            t.took = take(heap, owner, pid, os.currentTid());
            if (!t.took) return;
            t.footprint_before = purge.footprintBytes();
            setCurrent(heap);
            gpa.destroy(gpa.create(u64) catch @panic("out of memory"));
            t.waits_as_own = heap.budget_wait_own;
            t.footprint_after = purge.footprintBytes();
            abandonCurrent();
        }
    };
    // This thread frees into the ended thread's pages from a heap of its
    // own: without one, its first such free would take that heap.
    gpa.destroy(try gpa.create(u64));
    // What this thread's frees left it (an orphan noted, a wait past the
    // budget) goes with the test: the tests after it read its heap's
    // purge state.
    defer releaseCurrent();
    var ended: Ended = .{};
    const e = try std.Thread.spawn(.{}, Ended.run, .{&ended});
    e.join();
    try os.expectThreadReaped(ownerTid(ended.heap, loadOwner(ended.heap)));
    // Freed here, into the dead thread's pages: each page is announced to
    // its heap, which collects the blocks at its next slow path.
    for (ended.blocks) |b| gpa.free(b);
    // The freed memory must be past the budget, or nothing waits at all.
    if (block_count << 20 <= purge.budgetBytes()) return error.SkipZigTest;
    var taker: Taker = .{};
    const t = try std.Thread.spawn(.{}, Taker.run, .{ &taker, ended.heap });
    t.join();
    if (!taker.took) return error.SkipZigTest;
    // It waits as the heap's own frees would (a second), so the new thread
    // builds its working set from it, resident in the heap or in the pool
    // (empty segments). Before, the takeover ended every wait right after
    // collecting it, and the budget took it at the next free, or at once
    // when all free memory was past four budgets.
    try std.testing.expect(taker.waits_as_own);
    try std.testing.expect(taker.footprint_after + (block_count / 2 << 20) >= taker.footprint_before);
}
