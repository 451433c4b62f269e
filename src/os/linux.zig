//! Linux, with or without libc: mapping through system calls (mmap, munmap,
//! madvise, mprotect, mremap), thread ids from gettid, thread liveness from
//! tgkill. With libc, thread exit through a pthread key destructor.
//!
//! Everything the interface asks for exists here: partial unmaps, mremap to
//! grow in place and to move pages without copying, MADV_DONTNEED purges
//! that read back as zeroes.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const assert = std.debug.assert;
const os = @import("../os.zig");
const config = @import("../config.zig");

pub const can_move = true;
pub const can_protect = true;
pub const purge_needs_commit = false;
pub const purge_zeroes = true;
pub const thread_exit_callback = builtin.link_libc;
pub const can_probe_threads = true;

/// Private anonymous memory, reserved lazily by the kernel anyway. Not
/// MAP_NORESERVE: it changes nothing under strict overcommit (mode 2, where
/// the kernel ignores it) and, under the default heuristic (mode 0), it
/// skips the one check there is, so a mapping larger than memory and swap
/// together succeeded: malloc of 64 TiB returned a block on a 24 GiB
/// machine, where glibc's returns NULL, and the program was killed when it
/// wrote it rather than told.
fn mapFlags() linux.MAP {
    return .{ .TYPE = .PRIVATE, .ANONYMOUS = true };
}

/// `hint`: where the mapping should start, if that range is free (0: where
/// the kernel likes). Never MAP_FIXED: nothing mapped there is replaced.
fn mmap(hint: usize, len: usize) ?usize {
    const address: ?[*]u8 = if (hint == 0) null else @ptrFromInt(hint);
    const rc = linux.mmap(address, len, .{ .READ = true, .WRITE = true }, mapFlags(), -1, 0);
    if (linux.errno(rc) != .SUCCESS) return null;
    return rc;
}

/// Where the last aligned mapping starts. The kernel hands out addresses
/// top-down, right below the last mapping, so an aligned mapping whose
/// length is not a multiple of its alignment (a huge block with its
/// header) landed unaligned and cost four system calls (the mapping, its
/// unmap, a larger one, a trim at each end). Asked for at the aligned
/// address just below the last one, it costs one. A hint: when that range
/// is taken (another mapping, or another thread's), the kernel places the
/// mapping as it likes and the old way follows.
var aligned_below: std.atomic.Value(usize) = .init(0);

/// The aligned start just below `below` for `len` bytes, if there is room.
fn hintBelow(below: usize, len: usize, alignment: usize, offset: usize) usize {
    if (below == 0) return 0;
    const end = std.math.add(usize, below, offset) catch return 0;
    const top = std.math.sub(usize, end, len) catch return 0;
    const aligned = std.mem.alignBackward(usize, top, alignment);
    if (aligned < offset + alignment) return 0;
    assert(aligned - offset + len <= below);
    return aligned - offset;
}

/// `len` (page-aligned) bytes such that `result + offset` is a multiple of
/// `alignment` (at least the page size).
pub fn map(len: usize, alignment: usize, offset: usize) ?usize {
    const page = std.heap.pageSize();
    if (alignment > page) {
        // Monotonic, load and store: a hint; any value will do.
        // A refused hinted call falls through to the plain one below: a
        // kernel refuses both alike, but an emulator (qemu-user) searches
        // from the hint and may refuse it alone; returning here would keep
        // the hint, and each later aligned mapping would try it first.
        if (mmap(hintBelow(aligned_below.load(.monotonic), len, alignment, offset), len)) |address| {
            if ((address + offset) % alignment == 0) {
                aligned_below.store(address, .monotonic);
                return address;
            }
            unmap(address, len);
        }
    }
    // Over-map by the alignment so that an aligned start exists inside, then
    // trim both ends. Alignments up to the page size need no trimming.
    const slack = if (alignment > page) alignment else 0;
    const request = std.math.add(usize, len, slack) catch return null;
    const raw = mmap(0, request) orelse return null;
    const start = std.mem.alignForward(usize, raw + offset, alignment) - offset;
    assert(start >= raw);
    assert(start + len <= raw + request);
    if (start > raw) unmap(raw, start - raw);
    const tail = raw + request - (start + len);
    if (tail > 0) unmap(start + len, tail);
    if (alignment > page) aligned_below.store(start, .monotonic);
    return start;
}

/// Any whole-page range of a mapping.
pub fn unmap(address: usize, len: usize) void {
    const rc = linux.munmap(@ptrFromInt(address), len);
    // munmap fails only for invalid arguments, which would be a kennel bug.
    assert(linux.errno(rc) == .SUCCESS);
}

pub fn purge(address: usize, len: usize) void {
    if (drop(address, len)) return;
    // Older kernels: zeroed in place (locked memory stays resident anyway).
    // Not in hardened builds, whose ranges may hold inaccessible guards;
    // the memory free there was zeroed when it was freed (`discard`).
    if (!config.secure) @memset(@as([*]u8, @ptrFromInt(address))[0..len], 0);
}

pub fn discard(address: usize, len: usize) void {
    if (!drop(address, len)) @memset(@as([*]u8, @ptrFromInt(address))[0..len], 0);
}

/// Drops the pages of the range, which then read back as zeroes; false
/// where the kernel refuses.
fn drop(address: usize, len: usize) bool {
    if (builtin.is_test and test_drop_refused) return false;
    // MADV_DONTNEED rather than MADV_FREE: the resident set drops at once, so
    // RSS follows the live set in the measurements users make.
    if (linux.errno(linux.madvise(@ptrFromInt(address), len, linux.MADV.DONTNEED)) == .SUCCESS) return true;
    // Locked memory (mlock, mlockall) refuses it, and would keep its bytes,
    // where callers count on purged memory reading back as zeroes (calloc's
    // record of touched memory, the hardened check that freed blocks stay
    // zero: a program under mlockall was aborted for a write after free it
    // never made). MADV_DONTNEED_LOCKED (Linux 5.18) drops locked pages too.
    return linux.errno(linux.madvise(@ptrFromInt(address), len, madv_dontneed_locked)) == .SUCCESS;
}

/// Test-only: `drop` acts as if the kernel refused both advices, as one
/// before 5.18 does for locked memory. (Not an invalid advice: qemu-user
/// takes any advice it does not know for a hint and returns success.)
pub var test_drop_refused: if (builtin.is_test) bool else void = if (builtin.is_test) false else {};

pub fn commit(address: usize, len: usize) bool {
    _ = address;
    _ = len;
    comptime unreachable; // purge_needs_commit is false
}

pub fn adviseHugePages(address: usize, len: usize) void {
    _ = linux.madvise(@ptrFromInt(address), len, linux.MADV.HUGEPAGE);
}

pub fn residentPages(address: usize, len: usize) ?os.Resident {
    var vector: [os.resident_sample_pages]u8 = undefined;
    const pages = std.math.divCeil(usize, len, os.pageSize()) catch unreachable;
    assert(pages <= vector.len);
    if (linux.errno(linux.mincore(@ptrFromInt(address), len, &vector)) != .SUCCESS) return null;
    var resident: usize = 0;
    for (vector[0..pages]) |v| resident += v & 1;
    return .{ .resident = resident, .total = pages };
}

pub fn protectNone(address: usize, len: usize) bool {
    return linux.errno(linux.mprotect(@ptrFromInt(address), len, .{})) == .SUCCESS;
}

// ---- Guards -------------------------------------------------------------
//
// Linux 6.13 and later mark guard pages in the page table itself
// (madvise MADV_GUARD_INSTALL): an access faults, the memory is freed,
// and the mapping stays one piece. A guard made with mprotect splits the
// mapping in three, and a process may hold only vm.max_map_count mappings
// (65,530 by default): the hardened build with a guard after every page
// of 100 KB blocks ran out of them at 2.9 GB, and malloc returned null.
// But a marker costs the kernel per kernel page (to install, and as much
// to remove), mprotect per mapping split: to guard a freed block and open
// it again took, on the 2-core development machine, 10 us with markers
// against 12-14 us with mprotect at 72 KiB, as much at 128 KiB, 16 against
// 14 at 256 KiB and 39 against 15 at 1 MiB (the size sweep of
// bench-kennel-guard-freed-large, two runs). So a range up to
// `marker_bytes_max` gets markers, a larger one mprotect; the caller of
// `unguard` says which (`guarded_bytes`).

/// The advice values (std does not name them yet).
const madv_guard_install = 102;
const madv_guard_remove = 103;
const madv_populate_read = 22;
const madv_dontneed_locked = 24;

/// The largest guard made with markers.
pub const marker_bytes_max = 128 * 1024;

/// A capability of the kernel that a probe finds at its first use, and
/// every later use reads.
fn Probed(comptime probe: fn () bool) type {
    return struct {
        const State = enum(u8) { unknown, work, absent };
        var state: std.atomic.Value(State) = .init(.unknown);

        fn works() bool {
            // Monotonic: a fact about the kernel; racing probes find the same.
            switch (state.load(.monotonic)) {
                .work => return true,
                .absent => return false,
                .unknown => {},
            }
            const answer: State = if (probe()) .work else .absent;
            state.store(answer, .monotonic);
            return answer == .work;
        }

        /// Whether the probe ran and found it (tests).
        fn known() bool {
            // Monotonic: as in works.
            return state.load(.monotonic) == .work;
        }
    };
}

/// Whether guard markers work here, found at the first guard.
const markers = Probed(probeMarkers);

/// Set when a guard that asked for markers fell back to mprotect (a range
/// the kernel refuses them for, such as mlock'ed memory): from then on
/// `unguard` undoes both kinds.
var protect_used: std.atomic.Value(bool) = .init(false);

/// An older kernel refuses the advice (EINVAL); an emulator may accept it
/// and do nothing (qemu-user does), so the probe also checks that the page
/// really is guarded: populating it must fail with EFAULT.
fn probeMarkers() bool {
    const page = os.pageSize();
    const rc = linux.mmap(null, page, .{ .READ = true, .WRITE = true }, mapFlags(), -1, 0);
    if (linux.errno(rc) != .SUCCESS) return false;
    defer _ = linux.munmap(@ptrFromInt(rc), page);
    if (linux.errno(linux.madvise(@ptrFromInt(rc), page, madv_guard_install)) != .SUCCESS) return false;
    return linux.errno(linux.madvise(@ptrFromInt(rc), page, madv_populate_read)) == .FAULT;
}

pub fn guard(address: usize, len: usize, discard_first: bool) bool {
    if (len <= marker_bytes_max and markers.works()) {
        if (linux.errno(linux.madvise(@ptrFromInt(address), len, madv_guard_install)) == .SUCCESS) return true;
        // Monotonic: the range is handed to whoever unguards it through
        // the allocator's own synchronization, which orders this store.
        protect_used.store(true, .monotonic);
    }
    if (discard_first) discard(address, len);
    return protectNone(address, len);
}

pub fn unguard(address: usize, len: usize, guarded_bytes: usize) bool {
    if (guarded_bytes <= marker_bytes_max and markers.works()) {
        if (linux.errno(linux.madvise(@ptrFromInt(address), len, madv_guard_remove)) != .SUCCESS) return false;
        // Monotonic: see guard.
        if (!protect_used.load(.monotonic)) return true;
    }
    return protectReadWrite(address, len);
}

/// Tests: whether the page at `address` holds a guard marker (populating
/// it fails); false where markers are not used.
fn hasMarker(address: usize) bool {
    if (!markers.known()) return false;
    const page = std.mem.alignBackward(usize, address, os.pageSize());
    return linux.errno(linux.madvise(@ptrFromInt(page), os.pageSize(), madv_populate_read)) == .FAULT;
}

pub fn protectReadWrite(address: usize, len: usize) bool {
    return linux.errno(linux.mprotect(@ptrFromInt(address), len, .{ .READ = true, .WRITE = true })) == .SUCCESS;
}

pub fn growInPlace(address: usize, old_len: usize, new_len: usize) bool {
    const rc = linux.mremap(@ptrFromInt(address), old_len, new_len, .{}, null);
    if (linux.errno(rc) != .SUCCESS) return false;
    assert(rc == address);
    return true;
}

pub fn shrinkInPlace(address: usize, old_len: usize, new_len: usize) void {
    unmap(address + new_len, old_len - new_len);
}

pub fn moveInto(address: usize, old_len: usize, dest: usize, new_len: usize) bool {
    if (addressSpaceLimited()) return false;
    const rc = linux.mremap(@ptrFromInt(address), old_len, new_len, .{ .MAYMOVE = true, .FIXED = true }, @ptrFromInt(dest));
    if (linux.errno(rc) != .SUCCESS) return refusedMove(dest, new_len);
    assert(rc == dest);
    return true;
}

/// A move onto `dest` that the kernel refused. Some refusals come before
/// it touches anything (at the process's limit of kernel mappings, for
/// one); others after it unmapped the destination (the address-space and
/// data limits, strict overcommit, its own memory for the new mapping).
/// Nothing moved either way: callers move one source mapping at a time,
/// which the kernel moves whole or not at all, and the destination is
/// unmapped whole or not at all. A hole is mapped again, empty, before
/// the caller copies into it; a destination still there is left as it is
/// (mapping over it would split its kernel mapping, which the kernel also
/// refuses at the limit). Returns false.
pub fn refusedMove(dest: usize, len: usize) bool {
    var flags = mapFlags();
    flags.FIXED_NOREPLACE = true;
    const rc = linux.mmap(@ptrFromInt(dest), len, .{ .READ = true, .WRITE = true }, flags, -1, 0);
    switch (linux.errno(rc)) {
        // Still mapped: intact.
        .EXIST => return false,
        // A hole, mapped again.
        .SUCCESS => if (rc == dest) return false else {
            // A kernel before 4.17 takes the flag for a hint and maps
            // elsewhere when the range is in use: intact.
            _ = linux.munmap(@ptrFromInt(rc), len);
            return false;
        },
        // The range was kennel's a moment ago and the limits were checked
        // before the move (`addressSpaceLimited`): only a kernel out of
        // memory or a limit lowered meanwhile by another thread refuses it.
        else => os.fatal("the kernel refused to move pages to 0x{x} and to map that range again (out of memory)", .{dest}),
    }
}

/// Whether the process runs under an address-space or data limit. A move
/// is then not tried: it asks the kernel for the moved length on top of
/// what the process maps, and a process at its limit (one lowered below
/// what it maps, as a test may do) would get its destination unmapped,
/// then a refusal, then a refusal to map it again. Copying needs no new
/// mapping. One system call (two without an address-space limit), against
/// the several microseconds a move costs.
fn addressSpaceLimited() bool {
    for ([_]linux.rlimit_resource{ .AS, .DATA }) |resource| {
        var limit: linux.rlimit = undefined;
        if (linux.errno(linux.getrlimit(resource, &limit)) != .SUCCESS) return true;
        if (limit.cur != linux.RLIM.INFINITY) return true;
    }
    return false;
}

/// mremap with MREMAP_DONTUNMAP (Linux 5.7 and later): the pages move and
/// the source stays mapped, empty. Whether it works is found at the first
/// move (`probeMovePages`).
pub fn movePages(src: usize, dest: usize, len: usize) bool {
    if (!move_pages.works() or addressSpaceLimited()) return false;
    const rc = linux.mremap(@ptrFromInt(src), len, len, .{ .MAYMOVE = true, .FIXED = true, .DONTUNMAP = true }, @ptrFromInt(dest));
    if (linux.errno(rc) != .SUCCESS) return refusedMove(dest, len);
    assert(rc == dest);
    return true;
}

/// Whether movePages works here, found at the first move.
const move_pages = Probed(probeMovePages);

pub fn movePagesWork() bool {
    return move_pages.works();
}

/// An older kernel refuses the flag (EINVAL); an emulator might accept it
/// and do something else, so the probe moves a page it wrote and checks
/// both ends: the contents at the destination, zeroes at the source. Last,
/// the whole range, the moved page included, must move again in one call.
/// A moved page stays a kernel mapping (VMA) of its own: it keeps the page
/// offset of where it came from, and the kernel joins anonymous mappings
/// only where those run on. A kernel that moves only within one mapping
/// fails that last step, and moves stay off; one that moves a range of
/// several (Linux 6.18 here) passes it, and what bounds the mappings moves
/// add there, toward the process's limit (vm.max_map_count), is
/// Heap.moved_blocks_max.
fn probeMovePages() bool {
    const page = os.pageSize();
    // The probe's four pages, an inaccessible page that keeps them a mapping
    // of their own, and four to move them into.
    const total = 9 * page;
    const rc = linux.mmap(null, total, .{ .READ = true, .WRITE = true }, mapFlags(), -1, 0);
    if (linux.errno(rc) != .SUCCESS) return false;
    defer _ = linux.munmap(@ptrFromInt(rc), total);
    if (linux.errno(linux.mprotect(@ptrFromInt(rc + 4 * page), page, .{})) != .SUCCESS) return false;
    const src: *volatile u8 = @ptrFromInt(rc + page);
    const dest: *volatile u8 = @ptrFromInt(rc + 2 * page);
    src.* = 0x5a;
    dest.* = 0x33;
    const moved = linux.mremap(@ptrFromInt(rc + page), page, page, .{ .MAYMOVE = true, .FIXED = true, .DONTUNMAP = true }, @ptrFromInt(rc + 2 * page));
    if (linux.errno(moved) != .SUCCESS or moved != rc + 2 * page) return false;
    // The source must still be there: qemu-user takes the flag and unmaps
    // it. Read it through a system call first, which answers EFAULT
    // rather than faulting (qemu checks the range as the kernel does).
    if (!readable(rc + page)) return false;
    if (dest.* != 0x5a or src.* != 0) return false;
    const whole = linux.mremap(@ptrFromInt(rc), 4 * page, 4 * page, .{ .MAYMOVE = true, .FIXED = true }, @ptrFromInt(rc + 5 * page));
    if (linux.errno(whole) != .SUCCESS) return false;
    const again: *volatile u8 = @ptrFromInt(rc + 7 * page);
    return again.* == 0x5a;
}

/// Whether the byte at `address` can be read, asked of the kernel (a write
/// of it into a pipe) rather than by reading it, which would fault.
fn readable(address: usize) bool {
    var fds: [2]linux.fd_t = undefined;
    if (linux.errno(linux.pipe2(&fds, .{ .CLOEXEC = true })) != .SUCCESS) return false;
    defer for (fds) |fd| {
        _ = linux.close(fd);
    };
    return linux.errno(linux.write(fds[1], @ptrFromInt(address), 1)) == .SUCCESS;
}

/// The coarse monotonic clock, read through the vDSO without a system
/// call. With libc, through libc: std's own vDSO lookup reads the auxiliary
/// vector that Zig's start code saves, and in a library loaded into a C
/// program that code never ran, so std would make a real system call every
/// time.
pub fn nowNanoseconds() u64 {
    var ts: linux.timespec = undefined;
    if (builtin.link_libc) {
        if (std.c.clock_gettime(.MONOTONIC_COARSE, &ts) != 0) return 0;
    } else {
        if (linux.errno(linux.clock_gettime(.MONOTONIC_COARSE, &ts)) != .SUCCESS) return 0;
    }
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// getrandom, without waiting for the kernel's pool at early boot.
pub fn fillRandom(bytes: []u8) bool {
    const rc = linux.getrandom(bytes.ptr, bytes.len, 1); // GRND_NONBLOCK
    return linux.errno(rc) == .SUCCESS and rc == bytes.len;
}

pub const Pid = linux.pid_t;

pub fn currentPid() Pid {
    return linux.getpid();
}

pub fn currentTid() os.Tid {
    return linux.gettid();
}

pub fn yieldThread() void {
    _ = linux.sched_yield();
}

/// Signal 0 performs the permission and existence checks of tgkill without
/// sending anything; ESRCH means no such thread in that thread group. The
/// kernel reaps a thread's id only after the thread has stopped running.
pub fn threadIsAlive(pid: Pid, tid: os.Tid) bool {
    const rc = linux.tgkill(pid, tid, @fromBackingInt(@intCast(0)));
    return linux.errno(rc) != .SRCH;
}

/// With libc: a pthread key whose destructor calls `onExit`.
pub const ExitKey = @import("pthread.zig").ExitKey;

pub fn writeStderr(bytes: []const u8) void {
    var written: usize = 0;
    while (written < bytes.len) {
        const rc = linux.write(2, bytes.ptr + written, bytes.len - written);
        if (linux.errno(rc) != .SUCCESS) break;
        written += rc;
    }
}

pub fn abort() noreturn {
    if (builtin.link_libc) std.c.abort();
    // Without libc: raise SIGABRT on ourselves, then make sure we end.
    _ = linux.tgkill(linux.getpid(), linux.gettid(), .ABRT);
    linux.exit_group(134);
}

/// Tests: what is at `address`, from /proc/self/maps (which qemu-user
/// emulates for its guest, unlike the answers of mincore for PROT_NONE).
pub fn access(address: usize) os.Access {
    const fd_rc = linux.openat(linux.AT.FDCWD, "/proc/self/maps", .{}, 0);
    assert(linux.errno(fd_rc) == .SUCCESS);
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    const Static = struct {
        var buffer: [1 << 20]u8 = undefined;
    };
    var len: usize = 0;
    while (len < Static.buffer.len) {
        const n = linux.read(fd, Static.buffer[len..].ptr, Static.buffer.len - len);
        if (linux.errno(n) != .SUCCESS or n == 0) break;
        len += n;
    }
    var lines = std.mem.tokenizeScalar(u8, Static.buffer[0..len], '\n');
    while (lines.next()) |line| {
        // "start-end perms offset ..."
        const dash = std.mem.indexOfScalar(u8, line, '-') orelse continue;
        const space = std.mem.indexOfScalar(u8, line, ' ') orelse continue;
        const start = std.fmt.parseInt(usize, line[0..dash], 16) catch continue;
        const end = std.fmt.parseInt(usize, line[dash + 1 .. space], 16) catch continue;
        if (address < start or address >= end) continue;
        if (!std.mem.startsWith(u8, line[space + 1 ..], "rw")) return .no_access;
        return if (hasMarker(address)) .no_access else .read_write;
    }
    return .unmapped;
}
