//! The hardened configuration (-Dsecure): each detection, committed in a
//! child process that must stop with kennel's message. Skipped in the fast
//! configurations, where these faults are undefined behaviour.
const std = @import("std");
const builtin = @import("builtin");
const kennel = @import("kennel");
const util = @import("util.zig");

const gpa = kennel.allocator;
const hardening = kennel.config.hardening;

fn doubleFree() void {
    const block = gpa.alloc(u8, 48) catch unreachable;
    gpa.free(block);
    gpa.free(block);
}

test "hardened: a double free aborts" {
    if (!hardening.check_frees) return error.SkipZigTest;
    try util.expectAbort(doubleFree, "double free of 0x");
}

fn doubleFreeFromAnotherThread() void {
    const block = gpa.alloc(u8, 48) catch unreachable;
    const t = std.Thread.spawn(.{}, freeBlock, .{block}) catch unreachable;
    t.join();
    gpa.free(block);
}

fn freeBlock(block: []u8) void {
    gpa.free(block);
}

test "hardened: a block freed by two threads aborts" {
    if (!hardening.check_frees or builtin.single_threaded) return error.SkipZigTest;
    try util.expectAbort(doubleFreeFromAnotherThread, "double free of 0x");
}

fn freeStackMemory() void {
    var local: [64]u8 = undefined;
    gpa.free(@as([]u8, &local));
}

test "hardened: a free of memory kennel never returned aborts" {
    if (!hardening.check_frees) return error.SkipZigTest;
    try util.expectAbort(freeStackMemory, "not allocated by kennel");
}

fn freeInterior() void {
    const block = gpa.alloc(u8, 100) catch unreachable;
    gpa.free(block[8..]);
}

test "hardened: a free of an interior pointer aborts" {
    if (!hardening.check_frees) return error.SkipZigTest;
    try util.expectAbort(freeInterior, "middle of a block");
}

fn overflowIntoSlack() void {
    const block = gpa.alloc(u8, 13) catch unreachable;
    block.ptr[13] ^= 0x5a; // one byte too far; a change whatever the canary byte is
    gpa.free(block);
}

test "hardened: a canary catches a write past the requested length" {
    if (!hardening.canary) return error.SkipZigTest;
    try util.expectAbort(overflowIntoSlack, "heap overflow");
}

fn writeAfterFree() void {
    const keep = gpa.alloc(u8, 72) catch unreachable;
    const block = gpa.alloc(u8, 72) catch unreachable;
    gpa.free(block);
    @memset(block.ptr[0..16], 'A');
    const a = gpa.alloc(u8, 72) catch unreachable;
    const b = gpa.alloc(u8, 72) catch unreachable;
    gpa.free(a);
    gpa.free(b);
    gpa.free(keep);
}

fn writeAfterFreeThenChurn() void {
    writeAfterFree();
    // With a quarantine the block is not reused at once: allocate and free
    // blocks of its size until it comes back.
    for (0..100_000) |_| gpa.free(gpa.alloc(u8, 72) catch unreachable);
}

test "hardened: a write after free is caught when the free list is next used" {
    if (!hardening.encode_lists) return error.SkipZigTest;
    // In quarantine the block has no link yet: its first word is zero
    // while it waits, checked when it leaves.
    try util.expectAbort(writeAfterFreeThenChurn, if (hardening.quarantine) "write after free" else "corrupted free list");
}

fn writeFirstWordAfterFree() void {
    const keep = gpa.alloc(u8, 72) catch unreachable;
    const block = gpa.alloc(u8, 72) catch unreachable;
    gpa.free(block);
    block.ptr[3] = 0x41; // in the word the free-list link takes when it leaves
    for (0..100_000) |_| gpa.free(gpa.alloc(u8, 72) catch unreachable);
    gpa.free(keep);
}

test "hardened: a write into a waiting block's first word is caught when it leaves the quarantine" {
    if (!hardening.quarantine) return error.SkipZigTest;
    try util.expectAbort(writeFirstWordAfterFree, "was written at offset 3 before it was handed out again");
}

fn writeAfterFreeDeep() void {
    const keep = gpa.alloc(u8, 200) catch unreachable;
    const block = gpa.alloc(u8, 200) catch unreachable;
    gpa.free(block);
    block.ptr[150] = 1; // far past the link
    // Out of the quarantine (64 blocks, a random one leaves at each free:
    // still there after 2,000 frees with odds of 1 in 10^27)...
    for (0..2_000) |_| gpa.free(gpa.alloc(u8, 200) catch unreachable);
    // ...then every free block of the size is handed out, the block among
    // them wherever its page stands in the size's queue (pages that the
    // suite's earlier tests left partly free come first or after: freeing
    // at once, as above, kept handing out the current page's blocks, and
    // the block waited in another page for ever). 10 MB at most, linked
    // through their first words.
    var live: ?*[200]u8 = null;
    for (0..50_000) |_| {
        const next: *[200]u8 = (gpa.alloc(u8, 200) catch unreachable)[0..200];
        @as(*?*[200]u8, @ptrCast(@alignCast(next))).* = live;
        live = next;
    }
    while (live) |b| {
        live = @as(*?*[200]u8, @ptrCast(@alignCast(b))).*;
        gpa.free(b);
    }
    gpa.free(keep);
}

test "hardened: a write after free anywhere in a block is caught when it is handed out again" {
    if (!hardening.zero_freed) return error.SkipZigTest;
    try util.expectAbort(writeAfterFreeDeep, "write after free: the free block 0x");
}

/// Minor page faults of this process so far (Linux).
fn minorFaults() usize {
    var usage: std.os.linux.rusage = undefined;
    if (std.os.linux.errno(std.os.linux.getrusage(std.os.linux.rusage.SELF, &usage)) != .SUCCESS) @panic("getrusage failed");
    return @intCast(usage.minflt);
}

test "hardened: a fresh block's untouched memory is not read when it is handed out" {
    // Under qemu the counts are the emulator's.
    if (!hardening.zero_freed or builtin.os.tag != .linux or util.under_qemu) return error.SkipZigTest;
    // Medium blocks of several kernel pages each, never freed before.
    const count = 64;
    const block_bytes = 40 * 1024;
    var blocks: [count][]u8 = undefined;
    const start = minorFaults();
    // rawAlloc: `alloc` fills a block in safe builds.
    for (&blocks) |*block| block.* = (gpa.rawAlloc(block_bytes, .@"16", @returnAddress()) orelse return error.OutOfMemory)[0..block_bytes];
    const handing = minorFaults() - start;
    for (blocks) |block| @memset(block, 1);
    const touching = minorFaults() - start - handing;
    for (blocks) |block| gpa.rawFree(block, .@"16", @returnAddress());
    // Memory that was resident already costs no fault either way.
    const kernel_pages = count * block_bytes / std.heap.pageSize();
    if (touching < kernel_pages / 2) {
        std.debug.print("fresh blocks: the blocks' memory was resident already ({d} faults to hand out, {d} to touch {d} kernel pages)\n", .{ handing, touching, kernel_pages });
        return error.SkipZigTest;
    }
    // Checking the whole of each block would have read every kernel page
    // (a fault each), and touching them would have faulted each again.
    std.debug.print("fresh blocks: {d} faults handing out, {d} touching {d} kernel pages\n", .{ handing, touching, kernel_pages });
    try std.testing.expect(handing * 4 <= touching);
}

test "hardened: a freed block is not handed out again at once" {
    if (!hardening.quarantine) return error.SkipZigTest;
    const keep = try gpa.create([48]u8);
    defer gpa.destroy(keep);
    for (0..100) |_| {
        const a = try gpa.create([48]u8);
        gpa.destroy(a);
        const b = try gpa.create([48]u8);
        defer gpa.destroy(b);
        try std.testing.expect(a != b);
    }
}

fn useAfterFreeLarge() void {
    const block = gpa.alloc(u8, 200 * 1024) catch unreachable;
    @memset(block, 1);
    gpa.free(block);
    const inside: *volatile u8 = &block.ptr[100 * 1024];
    inside.* = 2;
}

test "hardened: a use after free of a large block faults" {
    if (!hardening.guard_freed_large or builtin.os.tag != .linux) return error.SkipZigTest;
    try expectFault(useAfterFreeLarge);
    // And the block is usable again when handed out.
    for (0..4) |_| {
        const block = try gpa.alloc(u8, 200 * 1024);
        @memset(block, 3);
        gpa.free(block);
    }
}

test "hardened: a freed large block is not handed out again at once" {
    // (Large blocks wait where the system can purge and protect them.)
    if (!hardening.quarantine or !(hardening.guard_freed_large or hardening.zero_freed) or builtin.os.tag != .linux) return error.SkipZigTest;
    for (0..40) |_| {
        const a = try gpa.alloc(u8, 200 * 1024);
        gpa.free(a);
        const b = try gpa.alloc(u8, 200 * 1024);
        defer gpa.free(b);
        try std.testing.expect(a.ptr != b.ptr);
    }
}

fn useAfterFreeLargeThenReuse() void {
    const block = gpa.alloc(u8, 200 * 1024) catch unreachable;
    @memset(block, 1);
    gpa.free(block);
    // The size handed out again: another block, while the freed one waits
    // in the quarantine, still guarded.
    const next = gpa.alloc(u8, 200 * 1024) catch unreachable;
    @memset(next, 2);
    const inside: *volatile u8 = &block.ptr[100 * 1024];
    inside.* = 3;
}

test "hardened: a use after free of a large block faults after its size is allocated again" {
    if (!hardening.guard_freed_large or !hardening.quarantine or builtin.os.tag != .linux) return error.SkipZigTest;
    try expectFault(useAfterFreeLargeThenReuse);
}

fn endOfSegmentGuard() void {
    const block = gpa.alloc(u8, 64) catch unreachable;
    const segment_bytes = kennel.layout.segment_bytes;
    const segment_end = (@intFromPtr(block.ptr) & ~@as(usize, segment_bytes - 1)) + segment_bytes;
    const guard: *volatile u8 = @ptrFromInt(segment_end - 1);
    guard.* = 1;
}

fn pastHugeBlock() void {
    const block = gpa.alloc(u8, 3 << 20) catch unreachable;
    const past: [*]volatile u8 = @ptrFromInt(std.mem.alignForward(usize, @intFromPtr(block.ptr) + block.len, std.heap.pageSize()));
    past[0] = 1;
}

test "hardened: guard pages end segments and huge blocks" {
    if (!hardening.guard_pages) return error.SkipZigTest;
    // The pages are really there, inaccessible (a fault alone could also
    // come from unmapped address space)...
    const small = try gpa.alloc(u8, 64);
    defer gpa.free(small);
    const segment_bytes = kennel.layout.segment_bytes;
    const segment_end = (@intFromPtr(small.ptr) & ~@as(usize, segment_bytes - 1)) + segment_bytes;
    try std.testing.expectEqualStrings("---p", try permissionsAt(segment_end - 1));
    const huge = try gpa.alloc(u8, 3 << 20);
    defer gpa.free(huge);
    const past_huge = std.mem.alignForward(usize, @intFromPtr(huge.ptr) + huge.len, std.heap.pageSize());
    try std.testing.expectEqualStrings("---p", try permissionsAt(past_huge));
    try std.testing.expectEqualStrings("rw-p", try permissionsAt(past_huge - 1));
    // ...and touching them ends the program.
    try expectFault(endOfSegmentGuard);
    try expectFault(pastHugeBlock);
}

test "hardened: a guard page lies between a segment's header and its blocks" {
    // With 64 KiB kernel pages no guard fits in the first slice.
    if (!hardening.guard_pages or std.heap.pageSize() > 16 * 1024) return error.SkipZigTest;
    const small = try gpa.alloc(u8, 64);
    defer gpa.free(small);
    const base = segmentBase(small.ptr);
    // The header is there, and above it, within the first 64 KiB slice, a
    // guard (an underflow from the slice's blocks meets it first).
    try std.testing.expectEqualStrings("rw-p", try permissionsAt(base));
    _ = headerGuard(base) orelse return error.TestGuardPageMissing;
    try expectFault(underflowIntoHeader);
}

test "hardened: a guard page lies between a huge block's header and the block" {
    if (!hardening.guard_pages) return error.SkipZigTest;
    var block = try gpa.alloc(u8, 3 << 20);
    defer gpa.free(block);
    for (0..2) |_| {
        const base = segmentBase(block.ptr - 1);
        try std.testing.expectEqualStrings("rw-p", try permissionsAt(base));
        _ = guardBelow(base, @intFromPtr(block.ptr)) orelse return error.TestGuardPageMissing;
        // Growing a hardened huge block moves it: the guard goes along, and
        // so do the contents.
        @memset(block, 7);
        block = try gpa.realloc(block, 6 << 20);
        try std.testing.expect(std.mem.allEqual(u8, block[0 .. 3 << 20], 7));
    }
    try expectFault(underflowIntoHugeHeader);
}

/// The first inaccessible kernel page in [base, end).
fn guardBelow(base: usize, end: usize) ?usize {
    var page = base;
    while (page < end) : (page += std.heap.pageSize()) {
        const permissions = permissionsAt(page) catch return null;
        if (std.mem.eql(u8, permissions, "---p")) return page;
    }
    return null;
}

fn underflowIntoHugeHeader() void {
    const block = gpa.alloc(u8, 3 << 20) catch unreachable;
    const guard = guardBelow(segmentBase(block.ptr - 1), @intFromPtr(block.ptr)) orelse return;
    const last: *volatile u8 = @ptrFromInt(guard + std.heap.pageSize() - 1);
    last.* = 1;
}

fn segmentBase(ptr: [*]u8) usize {
    return @intFromPtr(ptr) & ~@as(usize, kennel.layout.segment_bytes - 1);
}

/// The first inaccessible kernel page of the segment's first slice.
fn headerGuard(base: usize) ?usize {
    const slice_bytes = kennel.layout.slice_bytes;
    var page = base;
    while (page < base + slice_bytes) : (page += std.heap.pageSize()) {
        const permissions = permissionsAt(page) catch return null;
        if (std.mem.eql(u8, permissions, "---p")) return page;
    }
    return null;
}

fn underflowIntoHeader() void {
    const block = gpa.alloc(u8, 64) catch unreachable;
    const guard = headerGuard(segmentBase(block.ptr)) orelse return;
    // Writes down from the guard's last byte, as a run below the slice's
    // first block would reach it.
    const last: *volatile u8 = @ptrFromInt(guard + std.heap.pageSize() - 1);
    last.* = 1;
}

test "hardened: guard pages do not split mappings where the kernel marks guards" {
    // Guard markers (Linux 6.13 and later): a guard after each of many
    // large pages leaves the mapping count where it was, where mprotect
    // added two mappings per guard and a program ran out of them (the
    // kernel's vm.max_map_count) long before it ran out of memory.
    if (!hardening.guard_pages or builtin.os.tag != .linux or !kernelMarksGuards()) return error.SkipZigTest;
    const count = 256;
    var blocks: [count][]u8 = undefined;
    // Segments for the blocks come first: a fresh segment is a mapping.
    for (&blocks) |*b| b.* = try gpa.alloc(u8, 100_000);
    for (blocks) |b| gpa.free(b);
    const before = try mappingCount();
    for (&blocks) |*b| {
        b.* = try gpa.alloc(u8, 100_000);
        @memset(b.*, 0x3c);
    }
    defer for (blocks) |b| gpa.free(b);
    const after = try mappingCount();
    // Each block's page ends in a guard: with mprotect, 2 * count more.
    try std.testing.expect(after < before + count / 8);
    // The guards are there: at the end of each page, within a slice (64
    // KiB) of its block's end.
    for (blocks[0..8]) |b| {
        const end = std.mem.alignForward(usize, @intFromPtr(b.ptr) + b.len, std.heap.pageSize());
        _ = guardBelow(end, end + 64 * 1024) orelse return error.TestGuardPageMissing;
    }
}

/// Whether this kernel marks guard pages in the page table: a marked page
/// of a read-write mapping cannot be populated (EFAULT). An emulator may
/// accept the advice and do nothing (qemu-user), which this finds too.
fn kernelMarksGuards() bool {
    // Comptime: std.os.linux does not compile for every target.
    if (builtin.os.tag != .linux) return false;
    const linux = std.os.linux;
    const page = std.heap.pageSize();
    const rc = linux.mmap(null, page, .{ .READ = true, .WRITE = true }, .{ .TYPE = .PRIVATE, .ANONYMOUS = true }, -1, 0);
    if (linux.errno(rc) != .SUCCESS) return false;
    defer _ = linux.munmap(@ptrFromInt(rc), page);
    const madv_guard_install = 102;
    const madv_populate_read = 22;
    if (linux.errno(linux.madvise(@ptrFromInt(rc), page, madv_guard_install)) != .SUCCESS) return false;
    return linux.errno(linux.madvise(@ptrFromInt(rc), page, madv_populate_read)) == .FAULT;
}

/// Lines of /proc/self/maps: the process's mappings.
fn mappingCount() !usize {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const linux = std.os.linux;
    const fd_rc = linux.openat(linux.AT.FDCWD, "/proc/self/maps", .{}, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return error.TestCannotReadMaps;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var buffer: [16 * 1024]u8 = undefined;
    var lines: usize = 0;
    while (true) {
        const n = linux.read(fd, &buffer, buffer.len);
        if (linux.errno(n) != .SUCCESS) return error.TestCannotReadMaps;
        if (n == 0) return lines;
        lines += std.mem.count(u8, buffer[0..n], "\n");
    }
}

/// The permissions of the page at `address`: those of the mapping that
/// holds it, from /proc/self/maps ("rw-p", "---p", ...), or "---p" where
/// a guard marker in the page table makes the page of a read-write mapping
/// inaccessible (Linux 6.13 and later, os/linux.zig): populating the page
/// then fails with EFAULT.
fn permissionsAt(address: usize) ![]const u8 {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const linux = std.os.linux;
    const permissions = try mappingPermissionsAt(address);
    if (!std.mem.eql(u8, permissions, "rw-p")) return permissions;
    const madv_populate_read = 22;
    const page = std.mem.alignBackward(usize, address, std.heap.pageSize());
    if (linux.errno(linux.madvise(@ptrFromInt(page), std.heap.pageSize(), madv_populate_read)) == .FAULT) return "---p";
    return permissions;
}

/// The permissions of the mapping that holds `address`, from
/// /proc/self/maps. Read a piece at a time: after the thread tests the
/// file holds tens of thousands of mappings.
fn mappingPermissionsAt(address: usize) ![]const u8 {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const linux = std.os.linux;
    const fd_rc = linux.openat(linux.AT.FDCWD, "/proc/self/maps", .{}, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return error.TestCannotReadMaps;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    const Static = struct {
        var buffer: [64 * 1024]u8 = undefined;
        var found: [4]u8 = undefined;
    };
    // Bytes of a line cut at the end of the previous read, at the start.
    var kept: usize = 0;
    while (true) {
        const n = linux.read(fd, Static.buffer[kept..].ptr, Static.buffer.len - kept);
        if (linux.errno(n) != .SUCCESS or n == 0) break;
        const len = kept + n;
        // Whole lines only; a line is far shorter than the buffer.
        const whole = (std.mem.lastIndexOfScalar(u8, Static.buffer[0..len], '\n') orelse return error.TestCannotReadMaps) + 1;
        var lines = std.mem.tokenizeScalar(u8, Static.buffer[0..whole], '\n');
        while (lines.next()) |line| {
            // "start-end perms offset ..."
            const dash = std.mem.indexOfScalar(u8, line, '-') orelse continue;
            const space = std.mem.indexOfScalar(u8, line, ' ') orelse continue;
            const start = try std.fmt.parseInt(usize, line[0..dash], 16);
            const end = try std.fmt.parseInt(usize, line[dash + 1 .. space], 16);
            if (address >= start and address < end) {
                @memcpy(&Static.found, line[space + 1 .. space + 5]);
                return &Static.found;
            }
        }
        kept = len - whole;
        std.mem.copyForwards(u8, Static.buffer[0..kept], Static.buffer[whole..len]);
    }
    return error.TestAddressNotMapped;
}

/// The child must die of a fault: SIGSEGV, or the abort of a handler that
/// reports one.
/// A run of writes from a medium block (8-64 KiB; pages of 512 KiB) as long
/// as its page: it meets the guard at the page's end wherever in the page
/// the block lies.
fn overflowMediumPage() void {
    const block = gpa.alloc(u8, 40 * 1024) catch unreachable;
    const run: [*]volatile u8 = block.ptr;
    for (0..512 * 1024) |i| run[i] = 'M';
}

test "hardened: a run of writes from a medium block faults at its page's end" {
    // With kernel pages above 16 KiB a page-end guard would take a
    // quarter of a slice or more, and pages have none (pageGuardBytes).
    if (!hardening.guard_pages or builtin.os.tag != .linux or std.heap.pageSize() * 4 > kennel.layout.slice_bytes) return error.SkipZigTest;
    try expectFault(overflowMediumPage);
}

/// A write just below a large block (above 64 KiB; one a page), whose
/// page begins with a guard. Small pages below it first: below a large
/// page there is then no guard of another page to meet.
fn underflowLargeBlock() void {
    for (0..64) |_| _ = gpa.create([48]u8) catch unreachable;
    const block = gpa.alloc(u8, 200 * 1024) catch unreachable;
    const below: *volatile u8 = @ptrCast(block.ptr - 1);
    below.* = 'L';
}

test "hardened: a write below a large block faults at its page's front guard" {
    if (!hardening.guard_pages or builtin.os.tag != .linux or std.heap.pageSize() * 4 > kennel.layout.slice_bytes) return error.SkipZigTest;
    try expectFault(underflowLargeBlock);
    // Released (more of them than the quarantine holds), large pages leave
    // their front guards closed, and the small pages set up over them open
    // them: those pages are written whole without a fault.
    var large: [64][]u8 = undefined;
    for (&large) |*b| b.* = try gpa.alloc(u8, 200 * 1024);
    for (large) |b| gpa.free(b);
    const small = try gpa.alloc(*[48]u8, 100_000);
    defer gpa.free(small);
    for (small) |*b| {
        b.* = try gpa.create([48]u8);
        @memset(b.*, 1);
    }
    for (small) |b| gpa.destroy(b);
}

/// A run of writes from a small block on a slice whose small page ends in
/// a guard (every sixteenth slice: Segment.smallPageGuarded) to the end of
/// the slice meets the guard.
fn overflowGuardedSmallPage() void {
    const slice_bytes = kennel.layout.slice_bytes;
    const segment_bytes = kennel.layout.segment_bytes;
    // Small pages take free slices wherever they are; within 1 Mi blocks
    // (above 700 slices, 11 segments) one lands on a guarded slice.
    const interval = 16;
    for (0..1 << 20) |_| {
        const block = gpa.create([48]u8) catch unreachable;
        const offset = @intFromPtr(block) % segment_bytes;
        const slice = offset / slice_bytes;
        if (slice % interval != interval - 1 or slice == segment_bytes / slice_bytes - 1) continue;
        const run: [*]volatile u8 = @ptrCast(block);
        for (0..slice_bytes - offset % slice_bytes) |i| run[i] = 'S';
        return;
    }
}

test "hardened: a run of writes from a small block on every sixteenth slice faults at its page's end" {
    if (!hardening.guard_pages or builtin.os.tag != .linux or std.heap.pageSize() * 4 > 64 * 1024) return error.SkipZigTest;
    try expectFault(overflowGuardedSmallPage);
}

test "hardened: a released page leaves its guard closed, and a page set up over it opens it" {
    const slice_bytes = kennel.layout.slice_bytes;
    const page_size = std.heap.pageSize();
    if (!hardening.guard_pages or builtin.os.tag != .linux or page_size * 4 > slice_bytes) return error.SkipZigTest;
    // Two blocks of one large size, so two pages: freeing the first gives
    // its page back (the second stays, as the size's only page), once it
    // has left the quarantine (below).
    const len = 320 * 1024; // a size class: the block ends where asked
    // Pages of this size other heaps hold (the heap of an ended thread,
    // left to new threads for the grace, keeps its pages until taken or
    // absorbed): `flushLarge` waits for these and `second`'s.
    const pages_elsewhere = try classPages(len);
    const first = try gpa.alloc(u8, len);
    var first_live = true;
    defer if (first_live) gpa.free(first);
    const second = try gpa.alloc(u8, len);
    defer gpa.free(second);
    // Blocks of another large size, freed below to push `first` out of
    // the quarantine. Allocated now, while `first` holds its slices, so
    // that none of them lies there: one set up later could land on the
    // guard's slice and, still quarantined, keep it from the small pages
    // (it did, in a loaded run where purges had moved the placements).
    var fillers: [flush_fillers][]u8 = undefined;
    var fillers_made: usize = 0;
    var fillers_freed: usize = 0;
    defer for (fillers[fillers_freed..fillers_made]) |filler| gpa.free(filler);
    if (hardening.quarantine) {
        while (fillers_made < fillers.len) : (fillers_made += 1) fillers[fillers_made] = try gpa.alloc(u8, 96 * 1024);
    }
    @memset(first, 1);
    // The page's guard: the last kernel page of its last slice.
    const guard = std.mem.alignForward(usize, @intFromPtr(first.ptr) + len + page_size, slice_bytes) - page_size;
    try std.testing.expectEqualStrings("---p", try permissionsAt(guard));
    gpa.free(first);
    first_live = false;
    try std.testing.expectEqualStrings("---p", try permissionsAt(guard));
    // Hardened with a quarantine, the block waits there, its page in use:
    // free other large blocks until it leaves and the page goes back.
    if (hardening.quarantine) try flushLarge(len, pages_elsewhere + 1, fillers[0..fillers_made], &fillers_freed);
    try std.testing.expectEqualStrings("---p", try permissionsAt(guard));
    // Small pages take the freed slices (resident, in the segment first in
    // line): the one set up over the guard's slice opens it, and its last
    // block is the guard's memory.
    var small: [4096][]u8 = undefined;
    var count: usize = 0;
    defer for (small[0..count]) |block| gpa.free(block);
    while (count < small.len) {
        const block = try gpa.alloc(u8, 8 * 1024);
        small[count] = block;
        count += 1;
        if (@intFromPtr(block.ptr) <= guard and guard < @intFromPtr(block.ptr) + block.len) {
            try std.testing.expectEqualStrings("rw-p", try permissionsAt(guard));
            @memset(block, 2);
            return;
        }
    }
    // Where small pages go is the placement policy's choice (resident runs
    // first, across the heap's segments): in about one run in three of the
    // whole secure suite, whose earlier tests leave many segments with
    // resident runs, none of these pages landed on the guard's slice. The
    // guard stayed closed (checked above); the reopening is then untested
    // in this run, not wrong.
    try std.testing.expectEqualStrings("---p", try permissionsAt(guard));
    return error.SkipZigTest;
}

/// Blocks `flushLarge` may free: after 400 frees into a ring of 16 that
/// picks at random which block leaves (385 of them evicting one), a given
/// block is still there with a chance of about 2e-11.
const flush_fillers = 400;

/// Frees `fillers` (large blocks of another size) one by one until the
/// size `len` has at most `pages_left` pages: a freed block of that size
/// has left the quarantine and its page went back (or a page another heap
/// held went, and the test finds the guard's slice unused: a skip). Counts
/// them in `freed`.
fn flushLarge(len: usize, pages_left: usize, fillers: [][]u8, freed: *usize) !void {
    while (freed.* < fillers.len) : (freed.* += 1) {
        if (try classPages(len) <= pages_left) return;
        gpa.free(fillers[freed.*]);
    }
    return error.TestStillInQuarantine;
}

/// Pages of block size `len` in all heaps (`kennel.stats`).
fn classPages(len: usize) !usize {
    const s = kennel.stats();
    const class = for (s.classes) |c| {
        if (c.block_size == len) break c;
    } else return error.TestNoSuchClass;
    return class.pages;
}

fn expectFault(comptime body: fn () void) !void {
    var buffer: [4096]u8 = undefined;
    const end = try util.runChild(body, &buffer);
    if (end.signal == null and (end.exit_code orelse 0) == 0) return error.TestGuardPageMissing;
}

test "hardened: a fresh page hands out blocks in random order" {
    if (!hardening.randomize) return error.SkipZigTest;
    var blocks: [40]*[120]u8 = undefined;
    for (&blocks) |*b| b.* = try gpa.create([120]u8);
    defer for (blocks) |b| gpa.destroy(b);
    var ascending: usize = 0;
    for (blocks[1..], blocks[0 .. blocks.len - 1]) |b, prev| {
        if (@intFromPtr(b) == @intFromPtr(prev) + 120) ascending += 1;
    }
    // In order: 39 of 39; shuffled: about 1.
    try std.testing.expect(ascending < 10);
}

test "hardened: freed blocks are filled when filling is on, zeroed when zeroing is" {
    if (!kennel.config.fill_freed_default and !hardening.zero_freed) return error.SkipZigTest;
    // Zeroing supersedes the fill (secure.zig).
    const freed_byte: u8 = if (hardening.zero_freed) 0 else 0xdf;
    const block = try gpa.alloc(u8, 256);
    @memset(block, 0x11);
    const ptr = block.ptr;
    const keep = try gpa.alloc(u8, 256); // keeps the page in use
    defer gpa.free(keep);
    gpa.free(block);
    for (ptr[16..256]) |byte| try std.testing.expectEqual(freed_byte, byte);
}

/// Small blocks, linked through their first word, until one lies in
/// [start, end) or `count_max` were taken; returns the newest (the list's
/// head) and whether one landed there, each checked to read zero past its
/// link (freed memory is zeroed, and purged memory reads back zero).
fn smallBlocksOver(start: usize, end: usize, count_max: usize) !struct { head: ?*[64]u8, landed: bool } {
    var head: ?*[64]u8 = null;
    for (0..count_max) |_| {
        // rawAlloc: `create` fills a block in safe builds.
        const block: *[64]u8 = @ptrCast(gpa.rawAlloc(64, .@"16", @returnAddress()) orelse return error.OutOfMemory);
        for (block[8..]) |byte| try std.testing.expectEqual(@as(u8, 0), byte);
        @as(*?*[64]u8, @ptrCast(@alignCast(block))).* = head;
        head = block;
        if (@intFromPtr(block) >= start and @intFromPtr(block) < end) return .{ .head = head, .landed = true };
    }
    return .{ .head = head, .landed = false };
}

test "hardened: a freed large block's memory reads back zero when small pages take it" {
    if (!hardening.zero_freed) return error.SkipZigTest;
    // Above zero_whole_bytes_max: freed by its kernel pages (purged,
    // and guarded where the system can), not by a memset.
    const large = try gpa.alloc(u8, 256 * 1024);
    @memset(large, 0xaa);
    // Its second half: past the kernel page that holds its link, which
    // is zeroed by a memset.
    const start = @intFromPtr(large.ptr) + large.len / 2;
    const end = @intFromPtr(large.ptr) + large.len;
    gpa.free(large);
    // Out of the quarantine, its page back to the segment, the free
    // memory given back: small pages may be set up over it now. Handing
    // out a fresh block checks its kernel page for zeroes, which aborts
    // where the freed block's data stayed (a purge that does not zero:
    // MADV_FREE, wasm, locked memory on old kernels).
    kennel.releaseThreadMemory();
    // A segment's worth of 64-byte blocks at most.
    const found = try smallBlocksOver(start, end, kennel.layout.segment_bytes / 64);
    var next = found.head;
    while (next) |block| {
        next = @as(*?*[64]u8, @ptrCast(@alignCast(block))).*;
        gpa.rawFree(block, .@"16", @returnAddress());
    }
    if (!found.landed) {
        std.debug.print("large block reuse: no small block landed in its memory\n", .{});
        return error.SkipZigTest;
    }
}
