//! macOS and the BSDs (and other systems with a POSIX libc, which Zig
//! always links there): libc's mmap, munmap, madvise and mprotect, thread
//! ids from each system's own call, thread exit through a pthread key
//! destructor.
//!
//! What differs from Linux, and what kennel does instead:
//! - No mremap. Growing in place maps the pages right after the mapping
//!   with that address as a hint and keeps them only if the system put them
//!   there; moving pages is impossible (`can_move` is false), so a huge
//!   block that cannot grow in place is copied by the caller, and the huge
//!   cache cannot split or join mappings (huge.zig).
//! - Purging uses MADV_FREE: the system takes the pages when it needs
//!   them, and until then they may keep their old contents.
//! - Thread liveness can be probed on FreeBSD only (thr_kill with signal
//!   0). Elsewhere a thread's heap is given up by the pthread key
//!   destructor alone; a heap whose thread allocated again after its
//!   destructors ran (other keys' destructors that call malloc) is not
//!   reclaimed until a thread with the same id takes it.
const std = @import("std");
const builtin = @import("builtin");
const c = std.c;
const assert = std.debug.assert;
const os = @import("../os.zig");

comptime {
    if (!builtin.link_libc) @compileError("kennel on " ++ @tagName(builtin.os.tag) ++ " goes through libc; link it");
}

const is_darwin = builtin.os.tag.isDarwin();

pub const can_move = false;
pub const can_protect = true;
pub const purge_needs_commit = false;
pub const purge_zeroes = false;
pub const thread_exit_callback = true;
pub const can_probe_threads = builtin.os.tag == .freebsd;

fn mmapAt(hint: usize, len: usize) ?usize {
    const flags: c.MAP = .{ .TYPE = .PRIVATE, .ANONYMOUS = true };
    const rc = c.mmap(@ptrFromInt(hint), len, .{ .READ = true, .WRITE = true }, flags, -1, 0);
    if (rc == c.MAP_FAILED) return null;
    return @intFromPtr(rc);
}

/// As on Linux: a plain mapping first (often aligned already), else
/// over-map by the alignment and trim both ends.
pub fn map(len: usize, alignment: usize, offset: usize) ?usize {
    const page = std.heap.pageSize();
    if (alignment > page) {
        const address = mmapAt(0, len) orelse return null;
        if ((address + offset) % alignment == 0) return address;
        unmap(address, len);
    }
    const slack = if (alignment > page) alignment else 0;
    const request = std.math.add(usize, len, slack) catch return null;
    const raw = mmapAt(0, request) orelse return null;
    const start = std.mem.alignForward(usize, raw + offset, alignment) - offset;
    assert(start >= raw and start + len <= raw + request);
    if (start > raw) unmap(raw, start - raw);
    const tail = raw + request - (start + len);
    if (tail > 0) unmap(start + len, tail);
    return start;
}

/// Any whole-page range of our mappings (munmap may span several).
pub fn unmap(address: usize, len: usize) void {
    const rc = c.munmap(@ptrFromInt(address), len);
    // munmap fails only for invalid arguments, which would be a kennel bug.
    assert(rc == 0);
}

pub fn purge(address: usize, len: usize) void {
    // A failure only means the memory stays resident, which is harmless.
    _ = c.madvise(@ptrFromInt(address), len, c.MADV.FREE);
}

/// MADV_FREE may leave the old contents: fresh pages mapped over the
/// range instead (one call, and the old pages go at once).
pub fn discard(address: usize, len: usize) void {
    const flags: c.MAP = .{ .TYPE = .PRIVATE, .ANONYMOUS = true, .FIXED = true };
    const rc = c.mmap(@ptrFromInt(address), len, .{ .READ = true, .WRITE = true }, flags, -1, 0);
    if (rc != c.MAP_FAILED) {
        assert(@intFromPtr(rc) == address);
        return;
    }
    // Refused (out of memory for the new mapping): zeroed in place.
    @memset(@as([*]u8, @ptrFromInt(address))[0..len], 0);
}

pub fn commit(address: usize, len: usize) bool {
    _ = address;
    _ = len;
    comptime unreachable; // purge_needs_commit is false
}

pub fn adviseHugePages(address: usize, len: usize) void {
    // Transparent huge pages are a Linux feature; FreeBSD promotes
    // superpages by itself, macOS does not for anonymous memory.
    _ = address;
    _ = len;
}

pub fn protectNone(address: usize, len: usize) bool {
    return c.mprotect(@ptrFromInt(address), len, .{}) == 0;
}

pub fn protectReadWrite(address: usize, len: usize) bool {
    return c.mprotect(@ptrFromInt(address), len, .{ .READ = true, .WRITE = true }) == 0;
}

/// Maps the range after the mapping, asking for that address; a system
/// that put it elsewhere gets it back.
pub fn growInPlace(address: usize, old_len: usize, new_len: usize) bool {
    const want = address + old_len;
    const got = mmapAt(want, new_len - old_len) orelse return false;
    if (got == want) return true;
    unmap(got, new_len - old_len);
    return false;
}

pub fn shrinkInPlace(address: usize, old_len: usize, new_len: usize) void {
    unmap(address + new_len, old_len - new_len);
}

pub fn moveInto(address: usize, old_len: usize, dest: usize, new_len: usize) bool {
    _ = .{ address, old_len, dest, new_len };
    comptime unreachable; // can_move is false
}

pub fn nowNanoseconds() u64 {
    var ts: c.timespec = undefined;
    if (c.clock_gettime(.MONOTONIC, &ts) != 0) return 0;
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// arc4random_buf where libc has it; elsewhere (Haiku) none.
pub fn fillRandom(bytes: []u8) bool {
    if (@TypeOf(c.arc4random_buf) == void) return false;
    c.arc4random_buf(bytes.ptr, bytes.len);
    return true;
}

pub const Pid = c.pid_t;

pub fn currentPid() Pid {
    return c.getpid();
}

extern "c" fn pthread_mach_thread_np(thread: c.pthread_t) u32;
extern "c" fn thr_kill(id: c_long, sig: c_int) c_int;
extern "c" fn find_thread(name: ?[*:0]const u8) i32;

/// An id unique among the process's live threads (see os.Tid). On macOS
/// the thread's Mach port name: 32 bits, unlike pthread_threadid_np's 64.
pub fn currentTid() os.Tid {
    return switch (builtin.os.tag) {
        .driverkit, .ios, .maccatalyst, .macos, .tvos, .visionos, .watchos => @bitCast(pthread_mach_thread_np(c.pthread_self())),
        .freebsd => c.pthread_getthreadid_np(),
        .netbsd => c._lwp_self(),
        .openbsd => c.getthrid(),
        .dragonfly => c.lwp_gettid(),
        .haiku => find_thread(null),
        // pthread_t is a small integer there.
        .illumos => @bitCast(@as(u32, @truncate(@intFromPtr(c.pthread_self())))),
        else => @compileError("kennel: no thread id for " ++ @tagName(builtin.os.tag)),
    };
}

pub fn yieldThread() void {
    _ = c.sched_yield();
}

/// FreeBSD: thr_kill with signal 0 checks that the thread exists.
pub fn threadIsAlive(pid: Pid, tid: os.Tid) bool {
    if (builtin.os.tag != .freebsd) comptime unreachable; // can_probe_threads
    _ = pid; // thr_kill addresses threads of the calling process only
    return c.errno(thr_kill(tid, 0)) != .SRCH;
}

/// A pthread key whose destructor calls `onExit`.
pub const ExitKey = @import("pthread.zig").ExitKey;

pub fn writeStderr(bytes: []const u8) void {
    var written: usize = 0;
    while (written < bytes.len) {
        const rc = c.write(2, bytes.ptr + written, bytes.len - written);
        if (rc <= 0) return;
        written += @intCast(rc);
    }
}

pub fn abort() noreturn {
    c.abort();
}

/// Tests: what is at `address`. Unmapped ranges make mincore fail with
/// ENOMEM; a page without access makes write(2) from it into a pipe (which
/// copies the byte) fail with EFAULT.
pub fn access(address: usize) os.Access {
    const page = std.mem.alignBackward(usize, address, std.heap.pageSize());
    var vec: [1]u8 = undefined;
    if (c.errno(c.mincore(@ptrFromInt(page), 1, &vec)) == .NOMEM) return .unmapped;
    var fds: [2]c.fd_t = undefined;
    assert(c.pipe(&fds) == 0);
    defer for (fds) |fd| {
        _ = c.close(fd);
    };
    if (c.errno(c.write(fds[1], @ptrFromInt(address), 1)) == .FAULT) return .no_access;
    return .read_write;
}
