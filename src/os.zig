//! Everything kennel asks of the operating system, behind one small
//! interface: mapping aligned address space, unmapping it, giving physical
//! memory back (purging), making pages inaccessible, resizing mappings in
//! place and moving their pages, a cheap clock, and the thread identity and
//! thread exit that thread ownership is built on.
//!
//! One backend per kind of system, chosen at compile time:
//!
//!   os/linux.zig    Linux, with or without libc: system calls
//!   os/posix.zig    macOS and the BSDs (and other systems with a POSIX
//!                   libc): libc's mmap, madvise and pthreads
//!   os/windows.zig  Windows: VirtualAlloc and friends, FLS callbacks
//!   os/wasm.zig     WebAssembly (wasm32-wasi, wasm32-freestanding):
//!                   linear memory that only grows
//!
//! Not every system can do everything. The capabilities below say what the
//! backend can, and the callers ask them instead of assuming Linux:
//!
//! - `can_move`: moving pages to another address without copying (Linux's
//!   mremap). Without it, a huge block that cannot grow in place is copied
//!   by the caller, and the huge cache cannot split or join mappings.
//!   `movePages` moves pages between places inside kennel's mappings and
//!   leaves the source empty (Linux, where the backend's probe passes);
//!   without it a large block that cannot grow in place is copied.
//! - Growing in place may fail anywhere (the neighbouring address space is
//!   taken); on Windows it works only inside the original reservation, on
//!   wasm only where the following memory is free.
//! - `can_protect`: guard pages. wasm has no memory protection; the
//!   hardened build there has no guard pages.
//! - `purge_needs_commit`: on Windows, purging decommits, and decommitted
//!   pages fault until committed again (`commit`); elsewhere purged memory
//!   stays accessible.
//! - `purge_zeroes`: whether purged memory reads back as zeroes (Linux,
//!   Windows; elsewhere `madvise(MADV_FREE)` may leave the old contents, and
//!   wasm cannot purge). Where it holds, `calloc` of a large block clears
//!   only the memory its slices held before (Heap.allocZeroed); the tests
//!   check it where the system promises it.
//! - `thread_exit_callback`: whether the system calls back when a thread
//!   ends (a pthread key destructor where libc is linked, an FLS callback
//!   on Windows); `can_probe_threads`: whether a thread id can be checked
//!   for life (Linux's tgkill, Windows' OpenThread, FreeBSD's thr_kill).
//!
//! Every function here reports failure by returning null or false; none of
//! them panics, so an out-of-memory condition travels up to the caller of
//! `alloc` as a null pointer and the allocator's state stays consistent.
//!
//! The count of bytes currently mapped (`mappedBytes`) is kept here, next to
//! the only calls that change it, so it is exact by construction.
const std = @import("std");
const builtin = @import("builtin");
const config = @import("config.zig");
const assert = std.debug.assert;

pub const backend = switch (builtin.os.tag) {
    .linux => @import("os/linux.zig"),
    .windows => @import("os/windows.zig"),
    .wasi => @import("os/wasm.zig"),
    .freestanding => if (builtin.cpu.arch.isWasm())
        @import("os/wasm.zig")
    else
        @compileError("kennel needs an operating system to map memory; on " ++ @tagName(builtin.cpu.arch) ++
            "-freestanding use a std.heap.FixedBufferAllocator"),
    .driverkit, .ios, .maccatalyst, .macos, .tvos, .visionos, .watchos => @import("os/posix.zig"),
    .freebsd, .netbsd, .openbsd, .dragonfly, .illumos, .haiku => @import("os/posix.zig"),
    else => @compileError("kennel has no backend for " ++ @tagName(builtin.os.tag) ++
        " yet (src/os.zig); use std.heap.smp_allocator or std.heap.c_allocator there"),
};

/// The smallest page size the kernel may use on the target. Layout decisions
/// (block alignment, segment header size) are made against this; the real
/// page size, which may be larger (aarch64 Linux: 4, 16 or 64 KiB), is
/// asked for at run time.
pub const page_size_min_bytes = std.heap.page_size_min;

/// Kennel's page size limits are designed for kernels whose pages are at
/// most 64 KiB (x86_64: 4 KiB; aarch64: 4, 16 or 64 KiB; wasm: 64 KiB).
pub const page_size_max_bytes = 64 * 1024;

comptime {
    if (std.heap.page_size_max > page_size_max_bytes) @compileError(std.fmt.comptimePrint(
        "kennel supports kernel pages of at most {d} bytes; {s}-{s} may use {d}",
        .{ page_size_max_bytes, @tagName(builtin.cpu.arch), @tagName(builtin.os.tag), std.heap.page_size_max },
    ));
}

/// Bits of a user-space address: every mapping kennel makes ends below
/// 2^address_bits. 48 on 64-bit systems (x86_64, aarch64, riscv64 and the
/// others keep user mappings below 2^47 or 2^48 unless asked for more), the
/// whole word on 32-bit ones. The segment map covers this range, and a
/// mapping beyond it is refused (so packed words may rely on it).
pub const address_bits: comptime_int = @min(@bitSizeOf(usize), 48);

pub const can_move = backend.can_move;
pub const can_protect = backend.can_protect;
pub const purge_needs_commit = backend.purge_needs_commit;
pub const purge_zeroes = backend.purge_zeroes;
pub const thread_exit_callback = backend.thread_exit_callback;
pub const can_probe_threads = backend.can_probe_threads;

/// Bytes currently mapped by kennel: segments, huge allocations, heap
/// metadata. Changed only by `map`, `unmap` and the resize functions.
var mapped_bytes: std.atomic.Value(usize) = .init(0);
/// High-water mark of `mapped_bytes`.
var mapped_bytes_peak: std.atomic.Value(usize) = .init(0);

pub fn mappedBytes() usize {
    // Monotonic: a statistic, read without ordering against other memory.
    return mapped_bytes.load(.monotonic);
}

pub fn mappedBytesPeak() usize {
    // Monotonic: a statistic, as above.
    return mapped_bytes_peak.load(.monotonic);
}

/// Counts `bytes` newly mapped. (Sizes stay unsigned: on a 32-bit
/// system one mapping may be 2 GiB or more, which an isize does not hold;
/// a delta as isize made such a map panic in safe builds.)
fn accountMapped(bytes: usize) void {
    if (builtin.single_threaded) {
        mapped_bytes.raw +%= bytes;
        mapped_bytes_peak.raw = @max(mapped_bytes_peak.raw, mapped_bytes.raw);
        return;
    }
    // Monotonic: counters order nothing; they only need to be exact in sum.
    const after = mapped_bytes.fetchAdd(bytes, .monotonic) +% bytes;
    // Monotonic: a high-water mark, as above.
    _ = mapped_bytes_peak.fetchMax(after, .monotonic);
}

/// Counts `bytes` unmapped.
fn accountUnmapped(bytes: usize) void {
    if (builtin.single_threaded) {
        mapped_bytes.raw -%= bytes;
        return;
    }
    // Monotonic: as in accountMapped.
    _ = mapped_bytes.fetchSub(bytes, .monotonic);
}

/// The kernel's page size, queried once.
pub fn pageSize() usize {
    return std.heap.pageSize();
}

/// Rounds up to whole kernel pages; null if that overflows.
pub fn pageAlignForward(len: usize) ?usize {
    const page = pageSize();
    if (len > std.math.maxInt(usize) - page) return null;
    return std.mem.alignForward(usize, len, page);
}

/// Maps `len` bytes of fresh, zeroed, read-write memory such that
/// `result + offset` is a multiple of `alignment`. `len` is rounded up to the
/// page size; `offset` is a multiple of 64 KiB (Windows reserves address
/// space in units of 64 KiB). The mapping starts at `result`. Returns null
/// when the system refuses (out of memory, address space limit).
pub fn map(len: usize, alignment: usize, offset: usize) ?[*]align(page_size_min_bytes) u8 {
    assert(std.math.isPowerOfTwo(alignment));
    assert(offset % (64 * 1024) == 0);
    const len_aligned = pageAlignForward(len) orelse return null;
    const address = backend.map(len_aligned, @max(alignment, pageSize()), offset) orelse {
        warn("out of memory: the system refused a mapping of {d} bytes", .{len_aligned});
        return null;
    };
    assert((address + offset) % alignment == 0);
    if (@as(u128, address) + len_aligned > address_limit) {
        // Beyond what the segment map and packed words cover (see
        // `address_bits`): as good as no memory.
        backend.unmap(address, len_aligned);
        warn("a mapping came back above 2^{d}; refused", .{address_bits});
        return null;
    }
    accountMapped(len_aligned);
    return @ptrFromInt(address);
}

const address_limit: u128 = 1 << address_bits;

/// Returns a mapping made by `map` (or resized by `remapInPlace`) to the
/// system, whole.
pub fn unmap(ptr: [*]align(page_size_min_bytes) u8, len: usize) void {
    const len_aligned = std.mem.alignForward(usize, len, pageSize());
    backend.unmap(@intFromPtr(ptr), len_aligned);
    accountUnmapped(len_aligned);
}

/// Tells the system that the contents of [ptr, ptr+len) are no longer
/// needed: the physical pages are released (on wasm nothing can be). The
/// range is shrunk inward to whole kernel pages; the mapping itself stays.
/// Where `purge_needs_commit`, the range must be `commit`ted before use.
pub fn purge(ptr: [*]u8, len: usize) void {
    const whole = wholePages(ptr, len) orelse return;
    backend.purge(whole.start, whole.len);
}

/// [ptr, ptr+len) shrunk inward to whole kernel pages; null if none.
fn wholePages(ptr: [*]u8, len: usize) ?struct { start: usize, len: usize } {
    const page = pageSize();
    const start = std.mem.alignForward(usize, @intFromPtr(ptr), page);
    const end = std.mem.alignBackward(usize, @intFromPtr(ptr) + len, page);
    if (end <= start) return null;
    return .{ .start = start, .len = end - start };
}

/// Like `purge`, and [ptr, ptr+len) then reads back as zeroes on every
/// system: where a purge may keep the old contents (`purge_zeroes` false)
/// or the system refuses it (locked memory on Linux before 5.18), the
/// pages are replaced by fresh ones or zeroed in place. The range must be
/// accessible (no guard inside). For the hardened build's freed blocks:
/// a page set up over their memory later checks its fresh blocks for
/// zeroes, and old contents there read as a write after free.
pub fn discard(ptr: [*]u8, len: usize) void {
    const whole = wholePages(ptr, len) orelse return;
    backend.discard(whole.start, whole.len);
}

/// Makes purged memory in [ptr, ptr+len) usable again (Windows); false when
/// the system refuses (out of commit charge). Elsewhere a no-op.
pub fn commit(ptr: [*]u8, len: usize) bool {
    if (!purge_needs_commit) return true;
    const page = pageSize();
    const start = std.mem.alignBackward(usize, @intFromPtr(ptr), page);
    const end = std.mem.alignForward(usize, @intFromPtr(ptr) + len, page);
    return backend.commit(start, end - start);
}

/// Asks the kernel to back [ptr, ptr+len) with transparent huge pages
/// where it can (Linux: whole aligned 2 MiB ranges on x86_64): one fault and
/// one zeroing per huge page instead of one per kernel page. A hint.
pub fn adviseHugePages(ptr: [*]u8, len: usize) void {
    backend.adviseHugePages(@intFromPtr(ptr), len);
}

/// The transparent huge page that adviseHugePages asks for (x86_64 and
/// aarch64 with 4 KiB pages); 0 where the system has none to give.
pub const huge_page_bytes: usize = if (builtin.os.tag == .linux) 2 * 1024 * 1024 else 0;

/// The answer vector of `residentPages`, in bytes: one per kernel page of
/// the first 16 MiB looked at, at the smallest kernel page size.
pub const resident_sample_pages = 4096;

pub const Resident = struct { resident: usize, total: usize };

/// How many of the kernel pages in the first 16 MiB of [ptr, ptr+len) are
/// resident; null where the system cannot tell (then nothing asks for
/// huge pages either). One system call. The range is capped in bytes, not
/// in pages of `pageSize()`: the kernel writes one byte per page of its
/// own, and under an emulator that shows the program larger pages than
/// its host's (qemu-user with QEMU_PAGESIZE) that is the host's 4 KiB
/// page. Capped at 4096 pages of 16 KiB, a 24 MiB block's answer ran
/// 2 KiB past the vector on the stack, over a return address (found by
/// make test under qemu-aarch64 with 16 KiB pages, 2026-11-29).
pub fn residentPages(ptr: [*]u8, len: usize) ?Resident {
    assert(@intFromPtr(ptr) % pageSize() == 0);
    // Only huge-page advice needs it, which only Linux takes.
    if (!@hasDecl(backend, "residentPages")) return null;
    return backend.residentPages(@intFromPtr(ptr), @min(len, resident_sample_pages * page_size_min_bytes));
}

/// Makes [ptr, ptr+len) inaccessible (a guard page); false if the system
/// refuses (out of memory for the split mapping) or cannot (`can_protect`).
pub fn protectNone(ptr: [*]u8, len: usize) bool {
    assert(@intFromPtr(ptr) % pageSize() == 0 and len % pageSize() == 0);
    if (!can_protect) return false;
    return backend.protectNone(@intFromPtr(ptr), len);
}

/// Makes [ptr, ptr+len), made inaccessible by `protectNone`, readable and
/// writable again; false if the system refuses.
pub fn protectReadWrite(ptr: [*]u8, len: usize) bool {
    assert(@intFromPtr(ptr) % pageSize() == 0 and len % pageSize() == 0);
    if (!can_protect) return false;
    return backend.protectReadWrite(@intFromPtr(ptr), len);
}

/// Makes [ptr, ptr+len) a guard: any access faults until `unguard`. Unlike
/// `protectNone`, what the memory held is lost. Linux 6.13 and later mark
/// a guard of up to 128 KiB in the page table (the memory is freed with it,
/// and the mapping is not split, so a program may have any number of such
/// guards: see os/linux.zig); elsewhere, and larger ones, the pages are
/// discarded first if `discard_first` (`discard`: they read back as
/// zeroes once unguarded), then protected. false if the system refuses or
/// cannot (`can_protect`); with `discard_first` the memory is discarded
/// even then.
pub fn guard(ptr: [*]u8, len: usize, discard_first: bool) bool {
    assert(@intFromPtr(ptr) % pageSize() == 0 and len % pageSize() == 0);
    if (!can_protect) {
        if (discard_first) discard(ptr, len);
        return false;
    }
    if (@hasDecl(backend, "guard")) return backend.guard(@intFromPtr(ptr), len, discard_first);
    if (discard_first) discard(ptr, len);
    return backend.protectNone(@intFromPtr(ptr), len);
}

/// Makes the guards in [ptr, ptr+len) accessible again (memory between
/// them that is accessible already stays as it is); false if the system
/// refuses. `guarded_bytes` is the `len` each of those guards was made
/// with (the kind of guard may depend on it). What a guard covered reads
/// as zeroes where it was purged.
pub fn unguard(ptr: [*]u8, len: usize, guarded_bytes: usize) bool {
    assert(@intFromPtr(ptr) % pageSize() == 0 and len % pageSize() == 0);
    assert(guarded_bytes <= len);
    if (!can_protect) return false;
    if (@hasDecl(backend, "unguard")) return backend.unguard(@intFromPtr(ptr), len, guarded_bytes);
    return backend.protectReadWrite(@intFromPtr(ptr), len);
}

/// Grows or shrinks the mapping [ptr, ptr+old_len) to new_len without
/// moving it. Shrinking always works (on Windows the tail is decommitted
/// and stays reserved until the mapping is unmapped). Growing returns false
/// when the neighbouring address space is taken, or the system cannot.
pub fn remapInPlace(ptr: [*]align(page_size_min_bytes) u8, old_len: usize, new_len: usize) bool {
    const page = pageSize();
    const old_aligned = std.mem.alignForward(usize, old_len, page);
    const new_aligned = pageAlignForward(new_len) orelse return false;
    if (new_aligned == old_aligned) return true;
    if (new_aligned < old_aligned) {
        backend.shrinkInPlace(@intFromPtr(ptr), old_aligned, new_aligned);
    } else {
        if (@as(u128, @intFromPtr(ptr)) + new_aligned > address_limit) return false;
        if (!backend.growInPlace(@intFromPtr(ptr), old_aligned, new_aligned)) return false;
    }
    if (new_aligned > old_aligned) accountMapped(new_aligned - old_aligned) else accountUnmapped(old_aligned - new_aligned);
    return true;
}

/// Moves the pages of [src, src+len) onto [dest, dest+len), replacing the
/// pages there, and leaves `src` mapped and empty: it reads back zeroes, as
/// after `purge`. Both ranges lie in mappings kennel made, `len` is whole
/// kernel pages. A large block that cannot grow in place moves this way
/// (Heap.moveLarge): no copy, and the new block's first part faults
/// nothing. The moved range stays a kernel mapping of its own, so
/// callers bound how many they make (Heap.moved_blocks_max). `src` must
/// lie in one kernel mapping: the kernel moves a range of several one
/// mapping at a time, so a refusal could come with part of it moved, and
/// each would arrive as a mapping of its own. False where the system
/// cannot (Linux before 5.7, a kernel that moves only within one mapping,
/// emulators that get it wrong: see the backend's probe, or a process
/// under an address-space limit) or refuses; nothing moved then, `dest`
/// is mapped (empty if the refusal unmapped it), and the caller copies.
pub fn movePages(src: [*]align(page_size_min_bytes) u8, dest: [*]align(page_size_min_bytes) u8, len: usize) bool {
    if (!@hasDecl(backend, "movePages")) return false;
    assert(len > 0 and len % pageSize() == 0);
    assert(@intFromPtr(src) % pageSize() == 0 and @intFromPtr(dest) % pageSize() == 0);
    assert(@intFromPtr(src) + len <= @intFromPtr(dest) or @intFromPtr(dest) + len <= @intFromPtr(src));
    return backend.movePages(@intFromPtr(src), @intFromPtr(dest), len);
}

/// Whether `movePages` can move pages here (tests).
pub fn movesPages() bool {
    if (!@hasDecl(backend, "movePages")) return false;
    return backend.movePagesWork();
}

/// Moves the pages of [ptr, ptr+old_len) onto `dest`, a mapping of new_len
/// bytes made by `map`, without copying; `dest`'s own pages are replaced.
/// `ptr`'s range must lie in one kernel mapping (see `movePages`). Returns
/// false when the system refuses (nothing moved; `dest` is mapped, its
/// contents lost if the refusal unmapped it), and always where it cannot
/// (`can_move`, or a process under an address-space limit).
pub fn moveInto(ptr: [*]align(page_size_min_bytes) u8, old_len: usize, dest: [*]align(page_size_min_bytes) u8, new_len: usize) bool {
    if (!can_move) return false;
    const old_aligned = std.mem.alignForward(usize, old_len, pageSize());
    const new_aligned = std.mem.alignForward(usize, new_len, pageSize());
    if (!backend.moveInto(@intFromPtr(ptr), old_aligned, @intFromPtr(dest), new_aligned)) return false;
    // `dest` was counted by `map`; the old range no longer exists.
    accountUnmapped(old_aligned);
    return true;
}

/// A cheap monotonic clock for decay periods, with a resolution of a few
/// milliseconds, which is all a period needs. 0 where the system has no
/// clock (wasm32-freestanding): periods then never end, and free memory
/// goes back under the budget alone.
pub fn nowNanoseconds() u64 {
    return backend.nowNanoseconds();
}

/// `now_ns` in milliseconds, wrapping (every 49 days), for clocks kept in
/// an atomic word: 32-bit targets have no 64-bit atomics. Compare two
/// readings by their wrapping difference.
pub fn clockMs(now_ns: u64) u32 {
    return @truncate(now_ns / std.time.ns_per_ms);
}

/// A word of random bits from the system, or null if it has none to give
/// (Linux early at boot, wasm32-freestanding).
pub fn randomWord() ?usize {
    var word: usize = 0;
    if (!backend.fillRandom(std.mem.asBytes(&word))) return null;
    return word;
}

/// A process id (fork children get a new one).
pub const Pid = backend.Pid;

/// A thread id as the owner word stores it: unique among the live threads
/// of a process, possibly reused after a thread has ended.
pub const Tid = i32;

pub fn currentPid() Pid {
    return backend.currentPid();
}

pub fn currentTid() Tid {
    return backend.currentTid();
}

/// Lets another thread run (used only while waiting for a one-time setup).
pub fn yieldThread() void {
    backend.yieldThread();
}

/// Whether thread `tid` of process `pid` still exists. Where the system
/// offers no probe (`can_probe_threads`), always true: a thread's heap is
/// then given up by its exit callback alone.
pub fn threadIsAlive(pid: Pid, tid: Tid) bool {
    if (!can_probe_threads) return true;
    return backend.threadIsAlive(pid, tid);
}

/// Runs `onExit(value)` in the calling thread when it ends, after
/// `registerThreadExit(value)` there. Where `thread_exit_callback` is
/// false, `register` does nothing (probing covers). `onForkChild` runs in
/// the child of a fork (with libc). Set up once, on first use.
pub fn ThreadExit(comptime onExit: fn (*anyopaque) void, comptime onForkChild: fn () void) type {
    if (!thread_exit_callback) return struct {
        pub fn register(_: *anyopaque) void {}
        pub fn announces() bool {
            return false;
        }
    };
    return struct {
        const Key = backend.ExitKey(onExit, onForkChild);
        var key: Key.Handle = undefined;
        /// 0: not set up, 1: being set up, 2: ready, 3: unavailable.
        var key_state: std.atomic.Value(u8) = .init(0);

        /// Registers `value` for the calling thread (replacing any value
        /// registered before). If the key cannot be made, probing covers.
        pub fn register(value: *anyopaque) void {
            if (!ensureKey()) return;
            Key.set(key, value);
        }

        /// Whether threads that registered are told of at their end: the
        /// key exists. (A thread that allocates again after its callback
        /// ran may still end unannounced.)
        pub fn announces() bool {
            // Monotonic: a hint for how often to probe; a stale 0 or 1
            // only probes more often.
            return key_state.load(.monotonic) == 2;
        }

        fn ensureKey() bool {
            // Acquire: pairs with the release below, so `key` is initialized.
            switch (key_state.load(.acquire)) {
                2 => return true,
                3 => return false,
                else => {},
            }
            // Acquire/monotonic: whoever wins sets the key up; the rest wait.
            if (key_state.cmpxchgStrong(0, 1, .acquire, .monotonic) == null) {
                const created = Key.create();
                if (created) |handle| key = handle;
                // Release: publishes `key`.
                key_state.store(if (created != null) 2 else 3, .release);
                return created != null;
            }
            var spins: usize = 0;
            // Acquire: as above. Bounded by the winner's system calls.
            while (key_state.load(.acquire) == 1) : (spins += 1) {
                if (spins > 1000) yieldThread();
                std.atomic.spinLoopHint();
            }
            return key_state.load(.acquire) == 2;
        }
    };
}

/// KENNEL_VERBOSE (C library): print `note`s and `warn`ings on stderr.
pub var verbose = false;

/// One line on stderr, "kennel: ..." (without allocating).
fn writeLine(comptime fmt: []const u8, args: anytype) void {
    var buf: [512]u8 = undefined;
    const msg = std.fmt.bufPrint(&buf, "kennel: " ++ fmt ++ "\n", args) catch buf[0..];
    backend.writeStderr(msg);
}

/// A line of information, when verbose.
pub fn note(comptime fmt: []const u8, args: anytype) void {
    if (verbose) writeLine(fmt, args);
}

/// Something the user may want to know went wrong, when verbose.
pub fn warn(comptime fmt: []const u8, args: anytype) void {
    if (verbose) writeLine("warning: " ++ fmt, args);
}

/// Writes a message to stderr without allocating and aborts the process.
/// Used for misuse that must not be survived silently (invalid frees).
pub fn fatal(comptime fmt: []const u8, args: anytype) noreturn {
    writeLine(fmt, args);
    backend.abort();
}

// ---- Tests: one per function of the interface ---------------------------

const testing = std.testing;

test "map honours alignment and offset, and counts bytes" {
    const before = mappedBytes();
    const p = map(100, 1 << 22, 0).?;
    try testing.expect(@intFromPtr(p) % (1 << 22) == 0);
    try testing.expectEqual(before + pageSize(), mappedBytes());
    try testing.expectEqual(Access.read_write, backend.access(@intFromPtr(p)));
    // Fresh memory reads as zeroes.
    try testing.expectEqual(@as(u8, 0), p[0]);
    try testing.expectEqual(@as(u8, 0), p[99]);
    p[0] = 1;
    p[99] = 2;
    unmap(p, 100);
    const offset = 64 * 1024;
    const q = map(3 * offset, 1 << 22, offset).?;
    try testing.expect((@intFromPtr(q) + offset) % (1 << 22) == 0);
    q[3 * offset - 1] = 1;
    unmap(q, 3 * offset);
    try testing.expectEqual(before, mappedBytes());
}

/// Threads that each map aligned ranges at the same moment: on Windows
/// they all see the same free range first, and all but one lose it before
/// they can reserve it. There, one try each: the race is lost often, and
/// what follows must still map.
const ConcurrentMaps = struct {
    /// Enough for Windows to lose the race often; elsewhere a smoke test.
    const thread_count = if (builtin.os.tag == .windows) 128 else 32;
    const maps_per_thread = 16;
    const len_bytes = 4 << 20;
    const alignment_bytes = 4 << 20;

    ready: std.atomic.Value(u32) = .init(0),
    failures: std.atomic.Value(u32) = .init(0),

    fn run(c: *ConcurrentMaps) void {
        // Monotonic: a start signal; no data is passed.
        _ = c.ready.fetchAdd(1, .monotonic);
        while (c.ready.load(.monotonic) < thread_count) std.atomic.spinLoopHint();
        var got: [maps_per_thread]?usize = undefined;
        for (&got) |*address| {
            address.* = if (builtin.os.tag == .windows)
                backend.mapTrying(len_bytes, alignment_bytes, 0, 1)
            else
                backend.map(len_bytes, alignment_bytes, 0);
            if (address.*) |a| {
                assert(a % alignment_bytes == 0);
                @as(*volatile u8, @ptrFromInt(a + len_bytes - 1)).* = 1;
            } else {
                // Monotonic: read after join.
                _ = c.failures.fetchAdd(1, .monotonic);
            }
        }
        for (got) |address| if (address) |a| backend.unmap(a, len_bytes);
    }
};

test "aligned maps from many threads at once all succeed" {
    if (builtin.single_threaded or @bitSizeOf(usize) < 64) return error.SkipZigTest;
    var c: ConcurrentMaps = .{};
    var threads: [ConcurrentMaps.thread_count]std.Thread = undefined;
    for (&threads) |*t| t.* = try std.Thread.spawn(.{}, ConcurrentMaps.run, .{&c});
    for (threads) |t| t.join();
    try testing.expectEqual(@as(u32, 0), c.failures.load(.monotonic));
}

test "unmap gives the range back" {
    const p = map(4 * pageSize(), 1 << 22, 0).?;
    p[0] = 1;
    unmap(p, 4 * pageSize());
    // wasm cannot give memory back: kennel keeps the range for its next map.
    const expected: Access = if (builtin.cpu.arch.isWasm()) .read_write else .unmapped;
    try testing.expectEqual(expected, backend.access(@intFromPtr(p)));
}

test "purge keeps the mapping; reuse reads zeroes where the system promises it" {
    const page = pageSize();
    const p = map(8 * page, page, 0).?;
    defer unmap(p, 8 * page);
    @memset(p[0 .. 8 * page], 0xab);
    // Inward to whole pages: the first and last partial pages keep their bytes.
    purge(p + page / 2, 7 * page);
    try testing.expect(commit(p + page, 6 * page));
    try testing.expectEqual(@as(u8, 0xab), p[page - 1]);
    try testing.expectEqual(@as(u8, 0xab), p[7 * page]);
    if (purge_zeroes) {
        for (p[page .. 7 * page]) |byte| try testing.expectEqual(@as(u8, 0), byte);
    }
    // Usable again either way.
    @memset(p[page .. 7 * page], 0xcd);
    try testing.expectEqual(@as(u8, 0xcd), p[page]);
}

test "discard leaves zeroes on every system, also where the kernel refuses to purge" {
    const page = pageSize();
    const p = map(8 * page, page, 0).?;
    defer unmap(p, 8 * page);
    // Locked memory on a kernel before 5.18 (Linux), as a refused advice.
    const linux = builtin.os.tag == .linux;
    defer if (linux) {
        backend.test_drop_refused = false;
    };
    for ([_]bool{ false, true }) |refused| {
        if (refused and !linux) continue;
        if (linux) backend.test_drop_refused = refused;
        @memset(p[0 .. 8 * page], 0xab);
        // Inward to whole pages, as purge.
        discard(p + page / 2, 7 * page);
        try testing.expect(commit(p + page, 6 * page));
        try testing.expectEqual(@as(u8, 0xab), p[page - 1]);
        try testing.expectEqual(@as(u8, 0xab), p[7 * page]);
        for (p[page .. 7 * page]) |byte| try testing.expectEqual(@as(u8, 0), byte);
        // A purge where the kernel refuses: zeroed in place by the fast
        // build (the hardened one may have guards in its ranges).
        if (refused and !config.secure) {
            @memset(p[0 .. 8 * page], 0xab);
            purge(p + page, 6 * page);
            for (p[page .. 7 * page]) |byte| try testing.expectEqual(@as(u8, 0), byte);
        }
    }
}

test "protectNone makes pages inaccessible, where the system can" {
    const page = pageSize();
    const p = map(3 * page, page, 0).?;
    defer unmap(p, 3 * page);
    if (!can_protect) {
        try testing.expect(!protectNone(p + page, page));
        return error.SkipZigTest;
    }
    try testing.expect(protectNone(p + page, page));
    try testing.expectEqual(Access.read_write, backend.access(@intFromPtr(p)));
    try testing.expectEqual(Access.no_access, backend.access(@intFromPtr(p) + page));
    try testing.expectEqual(Access.read_write, backend.access(@intFromPtr(p) + 2 * page));
}

test "guard makes pages inaccessible until unguard, and they read back as zeroes" {
    const page = pageSize();
    const p = map(3 * page, page, 0).?;
    defer unmap(p, 3 * page);
    @memset(p[0 .. 3 * page], 0x5a);
    if (!can_protect) {
        try testing.expect(!guard(p + page, page, true));
        return error.SkipZigTest;
    }
    // Discarded first: on Windows, decommitted, which is the guard.
    try testing.expect(guard(p + page, page, true));
    try testing.expectEqual(Access.read_write, backend.access(@intFromPtr(p)));
    try testing.expectEqual(Access.no_access, backend.access(@intFromPtr(p) + page));
    try testing.expectEqual(Access.read_write, backend.access(@intFromPtr(p) + 2 * page));
    // Opening a range with accessible memory around the guard.
    try testing.expect(unguard(p, 3 * page, page));
    try testing.expectEqual(Access.read_write, backend.access(@intFromPtr(p) + page));
    try testing.expectEqual(@as(u8, 0x5a), p[page - 1]);
    try testing.expectEqual(@as(u8, 0x5a), p[2 * page]);
    // Discarded first: zeroes on every system.
    try testing.expectEqual(@as(u8, 0), p[page]);
    p[page] = 1;
}

test "remap in place and by moving keeps contents" {
    const before = mappedBytes();
    const page = pageSize();
    var p = map(4 * page, page, 0).?;
    p[0] = 7;
    p[4 * page - 1] = 9;
    if (!remapInPlace(p, 4 * page, 8 * page)) {
        const dest = map(8 * page, 1 << 22, 0).?;
        if (moveInto(p, 4 * page, dest, 8 * page)) {
            p = dest;
            try testing.expect(@intFromPtr(p) % (1 << 22) == 0);
        } else {
            // What the callers do without a move: copy.
            try testing.expect(!can_move);
            @memcpy(dest[0 .. 4 * page], p[0 .. 4 * page]);
            unmap(p, 4 * page);
            p = dest;
        }
    }
    try testing.expectEqual(@as(u8, 7), p[0]);
    try testing.expectEqual(@as(u8, 9), p[4 * page - 1]);
    try testing.expectEqual(@as(u8, 0), p[8 * page - 1]);
    p[8 * page - 1] = 3;
    try testing.expect(remapInPlace(p, 8 * page, 2 * page));
    try testing.expectEqual(before + 2 * page, mappedBytes());
    // A shrunk mapping grows back into the range it gave up (Windows keeps
    // it reserved, wasm in kennel's own list, Linux has it free unless
    // another thread mapped there meanwhile); what grows back reads as
    // zeroes.
    const regrew = remapInPlace(p, 2 * page, 3 * page);
    if (builtin.os.tag == .windows or builtin.cpu.arch.isWasm()) try testing.expect(regrew);
    if (regrew) {
        try testing.expectEqual(@as(u8, 0), p[3 * page - 1]);
        try testing.expect(remapInPlace(p, 3 * page, 2 * page));
    }
    unmap(p, 2 * page);
    try testing.expectEqual(before, mappedBytes());
}

test "a move the kernel refused leaves its destination mapped (Linux)" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const before = mappedBytes();
    const page = pageSize();
    const p = map(3 * page, page, 0).?;
    p[page] = 5;
    // A refusal before the kernel touched anything: left as it was.
    try testing.expect(!backend.refusedMove(@intFromPtr(p + page), page));
    try testing.expectEqual(@as(u8, 5), p[page]);
    // As a refusal after the kernel unmapped the destination leaves it.
    try testing.expect(std.os.linux.errno(std.os.linux.munmap(p + page, page)) == .SUCCESS);
    try testing.expect(!backend.refusedMove(@intFromPtr(p + page), page));
    // Mapped again, empty, and writable.
    try testing.expectEqual(@as(u8, 0), p[page]);
    p[page] = 6;
    try testing.expectEqual(@as(u8, 6), p[page]);
    unmap(p, 3 * page);
    try testing.expectEqual(before, mappedBytes());
}

test "the clock moves forward" {
    const a = nowNanoseconds();
    const b = nowNanoseconds();
    try testing.expect(b >= a);
    if (builtin.os.tag != .freestanding) try testing.expect(a > 0);
}

/// Probes of an ended thread before a test gives up on its reaping.
const reap_probes_max = 1_000_000;

/// Tests: waits until the system has reaped joined thread `tid` (join may
/// return a moment before), so that a probe says it is gone.
pub fn expectThreadReaped(tid: Tid) !void {
    assert(can_probe_threads);
    var probes: usize = 0;
    while (threadIsAlive(currentPid(), tid)) : (probes += 1) {
        if (probes == reap_probes_max) return error.TestThreadStillAlive;
        yieldThread();
    }
}

const Identity = struct {
    tid: Tid = 0,
    pid: Pid = 0,
    alive_inside: bool = false,

    fn run(identity: *Identity) void {
        identity.tid = currentTid();
        identity.pid = currentPid();
        identity.alive_inside = threadIsAlive(currentPid(), identity.tid);
    }
};

test "thread identity across threads, and the liveness probe" {
    try testing.expect(threadIsAlive(currentPid(), currentTid()));
    try testing.expectEqual(currentTid(), currentTid());
    if (builtin.single_threaded) return;
    var identity: Identity = .{};
    const thread = try std.Thread.spawn(.{}, Identity.run, .{&identity});
    thread.join();
    try testing.expect(identity.tid != currentTid());
    try testing.expectEqual(currentPid(), identity.pid);
    try testing.expect(identity.alive_inside);
    // Joined: the thread is gone, and a probe says so where there is one,
    // once the system has reaped it (join may return a moment before).
    if (!can_probe_threads) return;
    try expectThreadReaped(identity.tid);
}

const ExitCount = struct {
    var count: std.atomic.Value(usize) = .init(0);
    var value_seen: std.atomic.Value(usize) = .init(0);

    fn onExit(value: *anyopaque) void {
        // Monotonic: read after join, which orders it.
        _ = count.fetchAdd(1, .monotonic);
        value_seen.store(@intFromPtr(value), .monotonic);
    }

    fn onForkChild() void {}

    const Hook = ThreadExit(onExit, onForkChild);

    var marker: u8 = 0;

    fn run() void {
        Hook.register(&marker);
    }
};

test "thread exit callback runs when a thread ends" {
    if (builtin.single_threaded or !thread_exit_callback) return error.SkipZigTest;
    const thread = try std.Thread.spawn(.{}, ExitCount.run, .{});
    thread.join();
    try testing.expectEqual(@as(usize, 1), ExitCount.count.load(.monotonic));
    try testing.expectEqual(@intFromPtr(&ExitCount.marker), ExitCount.value_seen.load(.monotonic));
}

/// What `backend.access` (tests) finds at an address.
pub const Access = enum { read_write, no_access, unmapped };
