//! When free memory goes back to the OS: kennel's purge policy. The
//! mechanisms (madvise, munmap) are in os.zig; what is free and where is in
//! heap.zig (empty pages, spare segments) and huge.zig (cached mappings).
//!
//! Free memory is worth keeping: giving it back and touching it again costs
//! a system call, then a page fault and the zeroing of every kernel page,
//! far more than the allocator's own work. But free memory a heap keeps is
//! resident, and only that heap can use it. So a heap keeps what its thread
//! is about to take again and returns the rest, following the program
//! rather than fixed delays. (Free memory is counted as what of it is
//! resident: the touched prefix of each free slice, Segment.touchedBytesOf,
//! not the whole 64 KiB.)
//!
//! 1. Decay. Time is cut into periods of `decay_period_ns`. The low-water
//!    mark of a heap's free memory over a period is memory the program did
//!    not need at any moment of it; at the period's end half of that goes
//!    back (more when several periods passed unseen). A program that keeps
//!    reusing its free memory keeps it all; one that stopped returns it
//!    geometrically, all of it after `decay_periods_max` periods. Not while
//!    free memory from the heap's own frees waits past the budget (rule
//!    4): a round that takes the last round's memory bit by bit left a low
//!    mark each period, and halving it purged what the round's second half
//!    then faulted in (the compiler front end: 42 MiB a run).
//! 2. Room before fresh memory. A heap about to touch fresh memory (a page
//!    never used or already purged, a new huge mapping) while it holds free
//!    memory the request could not use (it prefers resident memory wherever
//!    it can) returns as much first, beyond `keep_bytes`, of what it freed
//!    in earlier periods. Memory freed in the current period is kept: a
//!    program working in rounds is about to take it again, and giving it
//!    back would not lower its peak.
//! 3. Pressure between heaps. When a heap touches fresh memory that takes
//!    the process's footprint above its recent peak while other heaps hold
//!    free memory, those heaps owe the process that much: each gives back
//!    its share (in proportion to what it holds) at its next slow path.
//!    Threads taking turns then do not hold the peak of each at once.
//!    Below the peak, fresh memory raises no pressure: the process has been
//!    that large moments ago, and purging the others' free memory would
//!    only have them fault it in again (each purge then begot the next, as
//!    threads working side by side took turns purging and touching). Huge
//!    mappings a heap cached in the current period do not pay: they are
//!    buffers its thread is replacing, which its next huge block takes
//!    again, and purging them only moved the fresh touch from one heap to
//!    the other (large_buffers, 2 threads: each heap's growths purged the
//!    other's cache). They stay bounded by the budget and by decay.
//! 4. Budget. The free memory of all heaps together stays below
//!    `budgetBytes`, a share of what the process maps: past it, the heap
//!    whose free memory grew gives back the excess at once. Except when
//!    its part of the excess (at most its own free memory: the rest may
//!    be other heaps' waits) lies in its cache of freed huge mappings: a program that
//!    replaces a large buffer frees it and then allocates the next, and
//!    the budget unmapped the freed mapping moments before the next one was
//!    mapped and faulted in whole. That excess waits `budget_grace_ns` (to
//!    the heap's first slow path after it), so the next huge block is built
//!    from it, and goes back then as far as it is still past the budget.
//!    While it waits, fresh memory the heap touches is paid for with any of
//!    its free memory (rule 2, not only the cold part), so the footprint
//!    does not grow; past `budget_hard_factor` budgets this wait ends.
//!    The excess waits too, whatever it is, when it grew from the heap's
//!    own frees (Heap.freeing), and longer: `own_frees_grace_ns`. A
//!    program that frees a round's memory at its end (a compilation's
//!    results, every buffer of a request, a batch of grown vectors)
//!    allocates the next round moments later, and the budget gave the
//!    memory back page by page as the frees emptied them, for the next
//!    round to fault it all in again (the compiler front end: a third of
//!    its faults). A wait of 10 ms ended early in the next round
//!    (realloc_growth: rounds of about 50 ms; 200 ms took its faults from
//!    147k to 124k); the front end's passes last 0.5 s. Whatever else grows
//!    the heap's free memory during such a wait (a huge block freed, an
//!    array shrunk in place) waits with it, rather than end it early: the
//!    front end's next pass trimmed an array and the 50 MiB its previous
//!    pass had freed went back at once. When the wait ends, empty segments
//!    go to the pool with their memory (below), and only the rest goes
//!    back. This wait has no cap in budgets: it is bounded in time. Free
//!    pages that grew from other threads' frees, when the heap collects
//!    them (Heap.collecting), wait only `budget_grace_ns` and up to
//!    `budget_hard_factor` budgets, as cached huge mappings do: a producer
//!    whose consumers freed its last batches takes that memory again
//!    within microseconds, and the budget purged it as it was collected
//!    (batch_free: 135 MiB a run, 788 `madvise` calls; 9 interleaved runs,
//!    faults 41.8k → 33.3k, peak RSS 29.5 → 27.2 MiB, time unchanged).
//!    Waiting as long as the own frees do was tried: a producer held the
//!    excess while the other producer touched fresh memory (peak RSS +30 to
//!    37% over 5 and 9 runs, faults within 11% either way); so was paying
//!    for fresh memory during the short wait with cold memory only, as
//!    outside a wait (faults 31.5k, peak 35.4 MiB). During a wait the
//!    heap's own frees began, they wait with it (batch_free peak RSS 26.6
//!    and 26.1 MiB without and with that, 5 runs). What a heap's blocks
//!    got back while it had no thread, collected when a new thread takes
//!    it over (Heap.resumeForNewOwner), waits as its own frees would: the
//!    ended thread's working set, which the new one builds its own from
//!    (the compiler front end's next worker: the budget purged 29 MiB of
//!    it at the takeover, and the worker faulted it in again). A heap whose own frees
//!    cross the budget again and again starts a wait after each: its
//!    decay then rarely runs, and the budget still applies every second.
//!
//! Purges take memory freed in earlier periods first (Segment.freed_period),
//! cached huge mappings and spare segments before free pages, and take no
//! more than asked, to the next slice (Segment.purgeDirtyAtLeast): purging
//! a segment's free slices whole, for the few KiB a page extension
//! touched, had pages set up there moments later fault them in again
//! (realloc_growth: 175k faults, 147k without). A spare
//! segment (an empty one) past the budget or at a thread's end is not
//! purged but given to the shared pool with its memory (pool.zig), where
//! any heap takes it before it touches fresh memory; the pool holds it only
//! while the footprint does not grow (every fresh touch purges as much of
//! it, `touched`) and purges it when no heap took a segment for
//! `pool.resident_keep_ns`. (Spares that decay, room or pressure return are
//! purged in place: that memory was idle, or is owed to other heaps.)
//! Outside these rules, resident memory inside a page that no block uses
//! goes back when the page is shrunk, or at the end of the decay period
//! after the one it was set up in if the page still lives then: the rest
//! of a large page's last slice past its block, and what a small or medium
//! page set up over touched slices has not linked blocks into by then
//! (Segment.purgePageTail, Heap.waitTail).
//! Everything
//! here runs on slow paths (a page taken or emptied, a segment or huge
//! mapping freed), never on the alloc and free fast paths; the clock is
//! read only while a period is running, and the process-wide figures cost
//! one atomic add per page taken or emptied.
//!
//! Limits: there is no background thread, so a program that stops calling
//! the allocator keeps the free memory it had (at most the budget, or what
//! its last frees left waiting, and the pool's) until it calls again; a
//! heap blocked in its own program cannot pay pressure until it runs. A
//! thread that ends returns all but `keep_bytes` of its free memory at
//! once (Heap.releaseUnused), its empty segments to the pool: nobody runs
//! its decay later.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const os = @import("os.zig");
const Heap = @import("heap.zig").Heap;
const pool = @import("pool.zig");

/// Length of a decay period.
pub const decay_period_ns = 100 * std.time.ns_per_ms;
/// Idle memory goes back by halves, one per period; after this many
/// periods without use, a decay returns all of it.
pub const decay_periods_max = 8;
/// Idle free memory below this goes back whole at a period's end rather
/// than halved forever.
pub const decay_floor_bytes = 64 * 1024;

/// Free memory a heap keeps while it touches fresh memory, and when its
/// thread ends.
pub const keep_bytes = 1024 * 1024;

/// The free memory of all heaps together goes back beyond the larger of
/// this and a share (1 / 2^n) of the bytes the process maps.
pub const budget_min_bytes = 4 * 1024 * 1024;
pub const budget_share_log2 = 3;
/// How long cached huge mappings past the budget wait for the heap's next
/// huge allocation before they go back (rule 4).
pub const budget_grace_ns = 10 * std.time.ns_per_ms;
/// How long free memory past the budget that grew from the heap's own
/// frees waits before it goes back (rule 4): longer than a program's round
/// (a compilation pass, a batch of requests) usually lasts, so the next
/// round is built from it. Decay waits too (rule 1): a round consumes the
/// memory the last one freed gradually, and the low-water mark of each
/// period called what it had not reached yet idle.
pub const own_frees_grace_ns = 1000 * std.time.ns_per_ms;
/// Free memory past this multiple of the budget goes back at once.
pub const budget_hard_factor = 4;

pub fn budgetBytes() usize {
    return @max(budget_min_bytes, os.mappedBytes() >> budget_share_log2);
}

/// The sum of every heap's `dirty_bytes`, as each last reported it.
var dirty_total: std.atomic.Value(usize) = .init(0);

/// Bytes of fresh memory heaps touched while other heaps held free memory,
/// since the process started (see `makeRoom`).
/// Wraps (on 32-bit targets after 4 GiB): heaps look at differences only.
var pressure_bytes: std.atomic.Value(usize) = .init(0);

/// The footprint: bytes of memory kennel has touched and not given back,
/// in use or free (resident slices of segments, and huge mappings whole).
/// Kept where residency changes: a slice first touched or purged, a segment
/// unmapped, a huge mapping made, resized or unmapped.
var footprint_bytes: std.atomic.Value(usize) = .init(0);
/// The footprint's recent peak: the largest footprint, lowered halfway
/// towards the footprint once per decay period of the process (`lowerPeak`).
var footprint_peak_bytes: std.atomic.Value(usize) = .init(0);
/// When the peak was last lowered, in milliseconds (`os.clockMs`).
var peak_lowered_ms: std.atomic.Value(u32) = .init(0);

/// `bytes` of memory became resident.
pub fn touched(bytes: usize) void {
    // Resident pooled memory is held only while the footprint does not
    // grow (pool.zig): what is touched fresh, anywhere, goes back there.
    if (pool.residentBytes() > 0) pool.purgeResident(bytes);
    // Monotonic, here and below: policy figures that order nothing; a peak
    // lost between two racing stores is raised again by the next touch.
    const now = footprint_bytes.fetchAdd(bytes, .monotonic) + bytes;
    if (now > footprint_peak_bytes.load(.monotonic)) footprint_peak_bytes.store(now, .monotonic);
}

/// `bytes` of resident memory went back to the OS.
pub fn untouched(bytes: usize) void {
    const before = footprint_bytes.fetchSub(bytes, .monotonic);
    assert(before >= bytes);
}

/// The footprint now (a snapshot, for statistics and tests).
pub fn footprintBytes() usize {
    return footprint_bytes.load(.monotonic);
}

/// How much of `bytes` more memory would take the footprint above its
/// recent peak.
fn abovePeak(bytes: usize) usize {
    const after = footprint_bytes.load(.monotonic) +| bytes;
    return @min(bytes, after -| footprint_peak_bytes.load(.monotonic));
}

/// A heap's decay period ended: unless the peak was lowered less than a
/// period ago, it forgets half of its distance to the footprint, so that a
/// program that shrank is held to its new size within a few periods. Once
/// per period of the process, not of each heap: with many threads each
/// ending its heap's periods in turn, the peak followed the footprint down
/// within milliseconds, and fresh touches well below the real recent peak
/// raised pressure (thread-churn, 16 threads on 16 cores, one run each:
/// pressure purged 133 MiB in 2,122 calls, 75 MiB in 1,198 with this, for
/// a peak RSS of 7 to 9 MiB; time and faults within noise).
fn lowerPeak(now_ns: u64) void {
    const now_ms = os.clockMs(now_ns);
    // Monotonic, both: a policy clock that orders nothing; the swap makes
    // one heap of those that race here lower the peak.
    const last_ms = peak_lowered_ms.load(.monotonic);
    if (now_ms -% last_ms < decay_period_ns / std.time.ns_per_ms) return;
    if (peak_lowered_ms.cmpxchgStrong(last_ms, now_ms, .monotonic, .monotonic) != null) return;
    const now = footprint_bytes.load(.monotonic);
    const peak = footprint_peak_bytes.load(.monotonic);
    if (peak > now) footprint_peak_bytes.store(now + (peak - now) / 2, .monotonic);
}

/// Free memory of all heaps together (a snapshot).
pub fn totalBytes() usize {
    // Monotonic: a budget figure; only its sum needs to be exact.
    return dirty_total.load(.monotonic);
}

/// Adds the change of the heap's free memory since its last report to the
/// total.
fn report(heap: *Heap) void {
    const now = heap.dirty_bytes;
    const before = heap.dirty_reported_bytes;
    if (now == before) return;
    heap.dirty_reported_bytes = now;
    if (builtin.single_threaded) {
        // The total holds `before`: taken off first, no intermediate sum
        // passes what the total becomes. (`+ now - before` overflowed on
        // 32-bit, wasm included: a heap holding 1 GiB of freed huge
        // mappings that freed one of 2.3 GiB panicked in safe builds.)
        dirty_total.raw = dirty_total.raw - before + now;
        return;
    }
    // Monotonic: as in totalBytes.
    if (now > before) _ = dirty_total.fetchAdd(now - before, .monotonic) else _ = dirty_total.fetchSub(before - now, .monotonic);
}

/// The heap's free memory grew. May run in the middle of walking a list:
/// a purge changes no page or segment list.
pub fn grew(heap: *Heap) void {
    report(heap);
    payPressure(heap);
    const budget = budgetBytes();
    const total = totalBytes();
    if (total > budget) {
        if (!excessWaits(heap, total, budget)) {
            returnExcess(heap, total, budget);
        } else if (heap.budget_due_ns == 0 or (heap.freeing and !heap.budget_wait_own)) {
            // Never 0, which means "nothing waits".
            const grace: u64 = if (heap.freeing) own_frees_grace_ns else budget_grace_ns;
            heap.budget_due_ns = os.nowNanoseconds() +| grace;
            heap.budget_wait_own = heap.freeing;
        }
    }
    schedule(heap);
}

/// Whether the free memory past the budget may wait (rule 4): it grew from
/// the heap's own frees or during a wait they began (no cap: the wait is
/// bounded in time), or all of it lies in the heap's huge cache and it is
/// less than `budget_hard_factor` budgets.
fn excessWaits(heap: *Heap, total: usize, budget: usize) bool {
    assert(total > budget);
    // Once the heap's own frees began a wait, what else grows its free
    // memory meanwhile waits with it: a compilation's next pass shrinking
    // its first arrays in place, or a huge block freed, ended the wait of
    // the 50 MiB its previous pass freed a moment before.
    if (heap.freeing or heap.budget_wait_own) return true;
    // Blocks other threads freed, collected at once: the heap's thread is
    // about to take that memory again (a producer whose consumers freed
    // its last batches), and purged at once it was faulted in moments
    // later. A short wait (`budget_grace_ns`), not the own frees' one.
    if (heap.collecting and total <= budget *| budget_hard_factor) return true;
    // The excess may lie in other heaps' waiting caches: this heap's part
    // of it is at most its own free memory. (Asking for the whole excess
    // had a heap whose every free byte was cached purge it all at once
    // while the other heap's wait held 60 MiB: large_buffers, 2 threads.)
    return total <= budget *| budget_hard_factor and heap.huge_cache.bytes >= @min(total - budget, heap.dirty_bytes);
}

/// The wait of rule 4 is over: what is still past the budget goes back.
fn settleBudget(heap: *Heap) void {
    heap.budget_due_ns = 0;
    heap.budget_wait_own = false;
    const budget = budgetBytes();
    const total = totalBytes();
    if (total > budget) returnExcess(heap, total, budget);
}

fn returnExcess(heap: *Heap, total: usize, budget: usize) void {
    assert(total > budget);
    heap.budget_due_ns = 0;
    heap.budget_wait_own = false;
    // An eighth of the budget more than the excess, so that a program
    // hovering at the budget does not purge on every free.
    heap.purgeTo(heap.dirty_bytes -| (total - budget + budget / 8), .cold_first, .pool);
}

/// Free memory of `bytes` went back into use, or to the OS.
pub fn shrank(heap: *Heap, bytes: usize) void {
    assert(bytes <= heap.dirty_bytes);
    heap.dirty_bytes -= bytes;
    changed(heap);
}

/// The heap's free memory changed by other means (a purge, or a heap
/// absorbed with its free memory).
pub fn changed(heap: *Heap) void {
    heap.dirty_low_bytes = @min(heap.dirty_low_bytes, heap.dirty_bytes);
    report(heap);
}

/// Starts a decay period if none runs and there is something to decay
/// (free memory, or pages kept as their size's only page).
pub fn schedule(heap: *Heap) void {
    if (heap.decay_due_ns != 0) return;
    // Pooled resident memory decays at the end of any heap's period.
    if (heap.dirty_bytes == 0 and heap.retained_classes == 0 and heap.tail_count == 0 and pool.residentBytes() == 0) return;
    // Never 0, which means "no period running".
    heap.decay_due_ns = os.nowNanoseconds() +| decay_period_ns;
    heap.dirty_low_bytes = heap.dirty_bytes;
}

/// Pays pressure, settles the budget when its wait is over, and ends the
/// decay period if it is over. Frees pages and so changes lists: call it
/// only at the top of a slow path, never while walking a list.
pub fn decayIfDue(heap: *Heap) void {
    payPressure(heap);
    if (heap.decay_due_ns == 0 and heap.budget_due_ns == 0) return;
    const now = os.nowNanoseconds();
    if (heap.budget_due_ns != 0 and now >= heap.budget_due_ns) settleBudget(heap);
    if (heap.decay_due_ns == 0 or now < heap.decay_due_ns) return;
    const periods: std.math.Log2Int(usize) = @intCast(@min(decay_periods_max, 1 + (now - heap.decay_due_ns) / decay_period_ns));
    const low = heap.dirty_low_bytes;
    assert(low <= heap.dirty_bytes);
    // Pages kept as their size's only page and still empty were idle too.
    // (The period still runs, so the free memory they add starts none.)
    const before = heap.dirty_bytes;
    heap.releaseRetained();
    heap.retireEmptiedFirstPages();
    heap.purgeWaitingTails(.aged);
    const idle = @min(heap.dirty_bytes, low + (heap.dirty_bytes -| before));
    const returned = if (idle <= decay_floor_bytes or periods >= decay_periods_max) idle else idle - (idle >> periods);
    if (returned > 0 and !heap.budget_wait_own) heap.purgeTo(heap.dirty_bytes - returned, .cold_first, .purge);
    heap.decay_due_ns = 0;
    heap.period_index +%= 1;
    lowerPeak(now);
    pool.decay(now);
    schedule(heap);
}

/// The heap touched `bytes` of fresh memory for a page (Heap.extendPage,
/// Heap.growLarge), or is about to for a huge mapping (rules 2 and 3
/// above). (The footprint grows where the memory is touched: `touched`.)
pub fn makeRoom(heap: *Heap, bytes: usize) void {
    if (heap.dirty_bytes > keep_bytes) {
        const keep = @max(keep_bytes, heap.dirty_bytes -| bytes);
        // While free memory past the budget waits (rule 4), what the fresh
        // memory replaces may be memory freed in this period too: the
        // footprint stays where it was.
        if (heap.budget_due_ns != 0) heap.purgeTo(keep, .cold_first, .purge) else heap.purgeTo(keep, .cold_only, .purge);
    }
    if (builtin.single_threaded) return;
    const others = totalBytes() -| heap.dirty_bytes;
    if (others <= keep_bytes) return;
    const above = abovePeak(bytes);
    if (above == 0) return;
    // Monotonic: a running sum, read by payPressure.
    _ = pressure_bytes.fetchAdd(@min(above, others), .monotonic);
}

/// Gives back this heap's part of the fresh memory other heaps touched
/// since it last looked: that amount, times its share of all free memory.
fn payPressure(heap: *Heap) void {
    if (builtin.single_threaded) return;
    // Monotonic: as in makeRoom.
    const now = pressure_bytes.load(.monotonic);
    const owed = now -% heap.pressure_seen_bytes;
    if (owed == 0) return;
    heap.pressure_seen_bytes = now;
    if (heap.dirty_bytes == 0) return;
    const total = @max(totalBytes(), heap.dirty_bytes);
    const share: usize = @intCast(@min(heap.dirty_bytes, @as(u128, owed) * heap.dirty_bytes / total));
    if (share > 0) heap.purgeTo(heap.dirty_bytes - share, .cold_first_but_warm_huge, .purge);
}

test "the footprint's peak is lowered once per decay period, however many heaps end one" {
    // No allocation below, so the footprint stays put; the policy's own
    // figures are restored for the tests after this one.
    const saved_peak = footprint_peak_bytes.load(.monotonic);
    const saved_ms = peak_lowered_ms.load(.monotonic);
    defer {
        footprint_peak_bytes.store(saved_peak, .monotonic);
        peak_lowered_ms.store(saved_ms, .monotonic);
    }
    const footprint = footprintBytes();
    const above_bytes = 64 * 1024 * 1024;
    const start_ns: u64 = 3600 * std.time.ns_per_s;
    peak_lowered_ms.store(os.clockMs(start_ns - 2 * decay_period_ns), .monotonic);
    footprint_peak_bytes.store(footprint + above_bytes, .monotonic);
    lowerPeak(start_ns);
    try std.testing.expectEqual(footprint + above_bytes / 2, footprint_peak_bytes.load(.monotonic));
    // 32 more heaps end their periods within this one.
    for (1..33) |heap_index| lowerPeak(start_ns + heap_index * std.time.ns_per_ms);
    try std.testing.expectEqual(footprint + above_bytes / 2, footprint_peak_bytes.load(.monotonic));
    lowerPeak(start_ns + decay_period_ns);
    try std.testing.expectEqual(footprint + above_bytes / 4, footprint_peak_bytes.load(.monotonic));
}

test "the budget grows with the process" {
    try std.testing.expect(budgetBytes() >= budget_min_bytes);
    try std.testing.expect(budgetBytes() >= os.mappedBytes() >> budget_share_log2);
}

test "free memory past the budget waits while the heap collects blocks other threads freed" {
    const mib = 1024 * 1024;
    var heap: Heap = Heap.init_value;
    heap.dirty_bytes = 40 * mib;
    try std.testing.expect(!excessWaits(&heap, 95 * mib, 49 * mib));
    heap.collecting = true;
    try std.testing.expect(excessWaits(&heap, 95 * mib, 49 * mib));
    // Not past `budget_hard_factor` budgets.
    try std.testing.expect(!excessWaits(&heap, 49 * mib * budget_hard_factor + 1, 49 * mib));
}

test "free memory past the budget waits when all of the heap's part lies in its huge cache" {
    const mib = 1024 * 1024;
    var heap: Heap = Heap.init_value;
    // Every free byte of this heap is cached, 35 MiB; another heap's wait
    // holds the rest of the 95 MiB free, past a budget of 49 MiB.
    heap.dirty_bytes = 35 * mib;
    heap.huge_cache.bytes = 35 * mib;
    try std.testing.expect(excessWaits(&heap, 95 * mib, 49 * mib));
    // A part in free pages purges at once.
    heap.dirty_bytes = 40 * mib;
    try std.testing.expect(!excessWaits(&heap, 95 * mib, 49 * mib));
    // So does an excess past `budget_hard_factor` budgets.
    heap.dirty_bytes = 35 * mib;
    try std.testing.expect(!excessWaits(&heap, 49 * mib * budget_hard_factor + 1, 49 * mib));
}

test "the free-memory total follows a heap through figures near the top of its range" {
    // The 32-bit case, scaled to any word: a heap's free memory grows by a
    // byte from past half of what the total has left.
    var heap: Heap = Heap.init_value;
    const total = totalBytes();
    const large = (std.math.maxInt(usize) - total) / 2 + 1;
    defer {
        heap.dirty_bytes = 0;
        report(&heap);
    }
    heap.dirty_bytes = large;
    report(&heap);
    heap.dirty_bytes = large + 1;
    report(&heap);
    try std.testing.expectEqual(total + large + 1, totalBytes());
}
