//! Windows: VirtualAlloc, VirtualFree, VirtualProtect and VirtualQuery from
//! kernel32, thread ids from the TEB, thread exit through an FLS callback,
//! thread liveness through OpenThread.
//!
//! What differs from Linux, and what kennel does instead:
//! - Address space is reserved in units of 64 KiB, and a reservation can
//!   only be released whole. An aligned mapping is found by reserving more
//!   than needed, releasing it and reserving the aligned part inside
//!   (another thread may take it meanwhile: a few tries, then the larger
//!   reservation is kept and only its aligned part committed). Shrinking a
//!   mapping decommits its tail, which stays reserved until the whole
//!   mapping is released; growing in place recommits inside the original
//!   reservation only.
//! - Mappings are committed whole when made (they count against the commit
//!   limit, not against physical memory, until touched).
//! - Purging decommits. Decommitted pages fault until committed again, so
//!   a segment's page whose memory may have been purged is committed again
//!   when it is taken into use (`purge_needs_commit`, segment.zig).
//! - No mremap: pages cannot move (`can_move` is false); a huge block that
//!   cannot grow in place is copied by the caller.
//! - No fork.
const std = @import("std");
const builtin = @import("builtin");
const windows = std.os.windows;
const assert = std.debug.assert;
const os = @import("../os.zig");

pub const can_move = false;
pub const can_protect = true;
pub const purge_needs_commit = true;
pub const purge_zeroes = true;
pub const thread_exit_callback = true;
pub const can_probe_threads = true;

const BOOL = c_int;
const HANDLE = windows.HANDLE;

const MEM_COMMIT: u32 = 0x1000;
const MEM_RESERVE: u32 = 0x2000;
const MEM_DECOMMIT: u32 = 0x4000;
const MEM_RELEASE: u32 = 0x8000;
const MEM_FREE: u32 = 0x10000;
const PAGE_NOACCESS: u32 = 0x01;
const PAGE_READWRITE: u32 = 0x04;

const MemoryBasicInformation = extern struct {
    BaseAddress: ?*anyopaque,
    AllocationBase: ?*anyopaque,
    AllocationProtect: u32,
    PartitionId: if (@sizeOf(usize) == 8) u16 else void,
    RegionSize: usize,
    State: u32,
    Protect: u32,
    Type: u32,
};

extern "kernel32" fn VirtualAlloc(address: ?*anyopaque, size: usize, allocation_type: u32, protect: u32) callconv(.winapi) ?*anyopaque;
extern "kernel32" fn VirtualFree(address: *anyopaque, size: usize, free_type: u32) callconv(.winapi) BOOL;
extern "kernel32" fn VirtualProtect(address: *anyopaque, size: usize, new_protect: u32, old_protect: *u32) callconv(.winapi) BOOL;
extern "kernel32" fn VirtualQuery(address: ?*const anyopaque, buffer: *MemoryBasicInformation, length: usize) callconv(.winapi) usize;
extern "kernel32" fn FlsAlloc(callback: ?*const fn (?*anyopaque) callconv(.winapi) void) callconv(.winapi) u32;
extern "kernel32" fn FlsSetValue(index: u32, value: ?*anyopaque) callconv(.winapi) BOOL;
extern "kernel32" fn OpenThread(desired_access: u32, inherit_handle: BOOL, thread_id: u32) callconv(.winapi) ?HANDLE;
extern "kernel32" fn GetProcessIdOfThread(thread: HANDLE) callconv(.winapi) u32;
extern "kernel32" fn WaitForSingleObject(handle: HANDLE, milliseconds: u32) callconv(.winapi) u32;
extern "kernel32" fn CloseHandle(handle: HANDLE) callconv(.winapi) BOOL;
extern "kernel32" fn GetLastError() callconv(.winapi) u32;
extern "kernel32" fn SwitchToThread() callconv(.winapi) BOOL;
extern "kernel32" fn GetTickCount64() callconv(.winapi) u64;
extern "kernel32" fn GetStdHandle(which: u32) callconv(.winapi) ?HANDLE;
extern "kernel32" fn WriteFile(file: HANDLE, buffer: [*]const u8, len: u32, written: ?*u32, overlapped: ?*anyopaque) callconv(.winapi) BOOL;
extern "kernel32" fn ExitProcess(code: u32) callconv(.winapi) noreturn;

fn reserveAndCommit(address: usize, len: usize) ?usize {
    const p = VirtualAlloc(@ptrFromInt(address), len, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE) orelse return null;
    return @intFromPtr(p);
}

/// Times an aligned range found free may be taken by another thread before
/// we reserve it, before `map` keeps a larger reservation instead.
const map_tries_max = 8;

pub fn map(len: usize, alignment: usize, offset: usize) ?usize {
    return mapTrying(len, alignment, offset, map_tries_max);
}

/// `map`, with `tries` attempts at an exact reservation (tests take fewer).
pub fn mapTrying(len: usize, alignment: usize, offset: usize, tries: usize) ?usize {
    // Reservations are 64 KiB aligned, and consecutive ones tend to be
    // adjacent: often aligned enough already.
    const address = reserveAndCommit(0, len) orelse return null;
    if ((address + offset) % alignment == 0) return address;
    unmap(address, len);
    const request = std.math.add(usize, len, alignment) catch return null;
    for (0..tries) |_| {
        const raw = VirtualAlloc(null, request, MEM_RESERVE, PAGE_NOACCESS) orelse return null;
        const start = std.mem.alignForward(usize, @intFromPtr(raw) + offset, alignment) - offset;
        unmap(@intFromPtr(raw), request);
        if (reserveAndCommit(start, len)) |got| {
            assert(got == start);
            return got;
        }
    }
    // Threads that map at the same moment all see the same free range
    // first, and all but one lose it: with a few hundred at once (a wave
    // of new threads taking their first segments) some lost every try.
    // Keep the larger reservation whole and commit its aligned part: it
    // costs `alignment` bytes of address space, no memory. `unmap`
    // releases it from its base.
    const raw = VirtualAlloc(null, request, MEM_RESERVE, PAGE_NOACCESS) orelse return null;
    const start = std.mem.alignForward(usize, @intFromPtr(raw) + offset, alignment) - offset;
    if (!commit(start, len)) {
        releaseReservation(@intFromPtr(raw));
        return null;
    }
    return start;
}

fn releaseReservation(base: usize) void {
    const ok = VirtualFree(@ptrFromInt(base), 0, MEM_RELEASE) != 0;
    // Fails only for an address that starts no reservation: a kennel bug.
    assert(ok);
}

/// Releases the whole reservation that holds the mapping at `address`:
/// Windows cannot release a part (kennel unmaps whole mappings only; see
/// shrinkInPlace). The mapping starts its reservation, except where `map`
/// kept a larger one.
pub fn unmap(address: usize, len: usize) void {
    _ = len;
    if (VirtualFree(@ptrFromInt(address), 0, MEM_RELEASE) != 0) return;
    var info: MemoryBasicInformation = undefined;
    const found = VirtualQuery(@ptrFromInt(address), &info, @sizeOf(MemoryBasicInformation)) != 0;
    // A mapping kennel made lies in a reservation: else a kennel bug.
    assert(found and info.State != MEM_FREE);
    releaseReservation(@intFromPtr(info.AllocationBase));
}

pub fn purge(address: usize, len: usize) void {
    // A failure only means the memory stays committed, which is harmless.
    _ = VirtualFree(@ptrFromInt(address), len, MEM_DECOMMIT);
}

/// Decommitted pages read back as zeroes once committed again.
pub fn discard(address: usize, len: usize) void {
    if (VirtualFree(@ptrFromInt(address), len, MEM_DECOMMIT) == 0) @memset(@as([*]u8, @ptrFromInt(address))[0..len], 0);
}

pub fn commit(address: usize, len: usize) bool {
    return VirtualAlloc(@ptrFromInt(address), len, MEM_COMMIT, PAGE_READWRITE) != null;
}

pub fn adviseHugePages(address: usize, len: usize) void {
    // Large pages need a privilege and locked memory: not for a heap.
    _ = address;
    _ = len;
}

pub fn protectNone(address: usize, len: usize) bool {
    var old: u32 = undefined;
    return VirtualProtect(@ptrFromInt(address), len, PAGE_NOACCESS, &old) != 0;
}

pub fn protectReadWrite(address: usize, len: usize) bool {
    var old: u32 = undefined;
    return VirtualProtect(@ptrFromInt(address), len, PAGE_READWRITE, &old) != 0;
}

/// Decommitted pages fault on any access: discarded, the range is a guard
/// already. (VirtualProtect refuses pages that are not committed, so the
/// discard-then-protect of other systems failed here, and so did the
/// unguard of the hardened build's freed large blocks: until 2026-11-28
/// a freed block above 64 KiB could not be handed out again, and its page
/// not be released.)
pub fn guard(address: usize, len: usize, discard_first: bool) bool {
    if (discard_first) {
        if (VirtualFree(@ptrFromInt(address), len, MEM_DECOMMIT) != 0) return true;
        @memset(@as([*]u8, @ptrFromInt(address))[0..len], 0);
    }
    return protectNone(address, len);
}

/// Opens guards of either kind: decommitted ones are committed (zeroed),
/// protected ones made accessible.
pub fn unguard(address: usize, len: usize, guarded_bytes: usize) bool {
    _ = guarded_bytes;
    return commit(address, len) and protectReadWrite(address, len);
}

/// Recommits the rest of the original reservation, if it reaches far
/// enough (a mapping shrunk before).
pub fn growInPlace(address: usize, old_len: usize, new_len: usize) bool {
    var info: MemoryBasicInformation = undefined;
    if (VirtualQuery(@ptrFromInt(address + old_len), &info, @sizeOf(MemoryBasicInformation)) == 0) return false;
    if (@intFromPtr(info.AllocationBase) != address or info.State != MEM_RESERVE) return false;
    if (info.RegionSize < new_len - old_len) return false;
    return commit(address + old_len, new_len - old_len);
}

/// Decommits the tail; it stays reserved (part of the mapping's
/// reservation) until the mapping is unmapped.
pub fn shrinkInPlace(address: usize, old_len: usize, new_len: usize) void {
    const ok = VirtualFree(@ptrFromInt(address + new_len), old_len - new_len, MEM_DECOMMIT) != 0;
    assert(ok);
}

pub fn moveInto(address: usize, old_len: usize, dest: usize, new_len: usize) bool {
    _ = .{ address, old_len, dest, new_len };
    comptime unreachable; // can_move is false
}

/// The tick count: millisecond units, updated every 10-16 ms.
pub fn nowNanoseconds() u64 {
    return GetTickCount64() *% std.time.ns_per_ms;
}

extern "advapi32" fn SystemFunction036(buffer: [*]u8, len: u32) callconv(.winapi) u8;

/// RtlGenRandom (exported as SystemFunction036).
pub fn fillRandom(bytes: []u8) bool {
    return SystemFunction036(bytes.ptr, @intCast(bytes.len)) != 0;
}

pub const Pid = u32;

pub fn currentPid() Pid {
    return windows.GetCurrentProcessId();
}

/// Thread ids are 32-bit, unique among live threads system-wide.
pub fn currentTid() os.Tid {
    return @bitCast(windows.GetCurrentThreadId());
}

pub fn yieldThread() void {
    _ = SwitchToThread();
}

const SYNCHRONIZE: u32 = 0x0010_0000;
const THREAD_QUERY_LIMITED_INFORMATION: u32 = 0x0800;
const ERROR_INVALID_PARAMETER: u32 = 87;
const WAIT_TIMEOUT: u32 = 0x102;

/// A thread id is reused only once every handle to the ended thread is
/// closed, so: no thread with the id, or one of another process, or one
/// that has ended (its handle signalled) means ours is gone.
pub fn threadIsAlive(pid: Pid, tid: os.Tid) bool {
    const handle = OpenThread(SYNCHRONIZE | THREAD_QUERY_LIMITED_INFORMATION, 0, @bitCast(tid)) orelse
        return GetLastError() != ERROR_INVALID_PARAMETER;
    defer _ = CloseHandle(handle);
    if (GetProcessIdOfThread(handle) != pid) return false;
    return WaitForSingleObject(handle, 0) == WAIT_TIMEOUT;
}

/// A fiber-local storage slot whose callback runs when a thread (or a
/// fiber) holding a value ends. Windows has no fork: `onForkChild` is
/// never needed.
pub fn ExitKey(comptime onExit: fn (*anyopaque) void, comptime onForkChild: fn () void) type {
    _ = onForkChild;
    return struct {
        pub const Handle = u32;
        const FLS_OUT_OF_INDEXES: u32 = 0xffff_ffff;

        fn callback(value: ?*anyopaque) callconv(.winapi) void {
            onExit(value orelse return);
        }

        pub fn create() ?Handle {
            const index = FlsAlloc(callback);
            return if (index == FLS_OUT_OF_INDEXES) null else index;
        }

        pub fn set(key: Handle, value: *anyopaque) void {
            _ = FlsSetValue(key, value);
        }
    };
}

const STD_ERROR_HANDLE: u32 = @bitCast(@as(i32, -12));

pub fn writeStderr(bytes: []const u8) void {
    const handle = GetStdHandle(STD_ERROR_HANDLE) orelse return;
    var written_total: usize = 0;
    while (written_total < bytes.len) {
        var written: u32 = 0;
        const chunk: u32 = @intCast(@min(bytes.len - written_total, 1 << 30));
        if (WriteFile(handle, bytes.ptr + written_total, chunk, &written, null) == 0 or written == 0) return;
        written_total += written;
    }
}

pub fn abort() noreturn {
    if (builtin.link_libc) std.c.abort();
    // The exit code of abort() in the C runtime.
    ExitProcess(3);
}

/// Tests: what is at `address`.
pub fn access(address: usize) os.Access {
    var info: MemoryBasicInformation = undefined;
    if (VirtualQuery(@ptrFromInt(address), &info, @sizeOf(MemoryBasicInformation)) == 0) return .unmapped;
    if (info.State == MEM_FREE) return .unmapped;
    if (info.State != MEM_COMMIT or info.Protect == PAGE_NOACCESS) return .no_access;
    return .read_write;
}
