//! The C ABI: the malloc family under its standard names (and with a kn_
//! prefix), built into libkennel.so and libkennel.a, and hardened into
//! libkennel-secure.so, which also export C++'s operator new and delete
//! (cxx.zig). The behaviour of each function, where C leaves a choice, is
//! documented in include/kennel.h.
//!
//! Linux first: there the library replaces malloc (LD_PRELOAD, -lkennel)
//! and reads KENNEL_* variables at load. On every other system it exports
//! the kn_ functions only, for a program that calls them on purpose: the
//! system's malloc stays as it is, and the library runs nothing at load.
//!
//! The Zig allocator knows each block's size and alignment at free; C does
//! not, and C programs free pointers kennel never returned. So every free(),
//! realloc() and malloc_usable_size() here validates its pointer first
//! (check.zig), and a failed check prints one line naming the pointer and
//! aborts.
const std = @import("std");
const builtin = @import("builtin");
const os = @import("os.zig");
const heap_mod = @import("heap.zig");
const Heap = heap_mod.Heap;
const thread = @import("thread.zig");
const check = @import("check.zig");
const config = @import("config.zig");
const secure = @import("secure.zig");
const stats_mod = @import("stats.zig");
const size_class = @import("size_class.zig");
const purge = @import("purge.zig");
const cxx = @import("cxx.zig");
const quarantine = @import("quarantine.zig");
const pool = @import("pool.zig");
const segment_size_bytes = @import("segment.zig").segment_size_bytes;

/// Makes this compilation the C library (see config.zig).
pub const kennel_c_library = true;

/// A library inside a C program must not unwind or print Zig traces: say
/// what broke and abort, like the C library would.
pub const panic = std.debug.FullPanic(onPanic);

fn onPanic(message: []const u8, _: ?usize) noreturn {
    os.fatal("internal error: {s}", .{message});
}

/// alignof(max_align_t) on x86_64 and aarch64 Linux.
const max_align_bytes = 16;

// ---- Exports ------------------------------------------------------------

/// Whether the standard names (malloc, free, ...) are exported too.
const replaces_malloc = builtin.os.tag == .linux;

comptime {
    // operator new and delete replace the C++ runtime's, as malloc does
    // the C library's: on Linux only.
    if (replaces_malloc) _ = cxx;
    exportBoth("malloc", &malloc);
    exportBoth("free", &free);
    exportBoth("calloc", &calloc);
    exportBoth("realloc", &realloc);
    exportBoth("reallocarray", &reallocarray);
    exportBoth("aligned_alloc", &aligned_alloc);
    exportBoth("posix_memalign", &posix_memalign);
    exportBoth("memalign", &memalign);
    exportBoth("valloc", &valloc);
    exportBoth("pvalloc", &pvalloc);
    exportBoth("malloc_usable_size", &malloc_usable_size);
    exportBoth("free_sized", &free_sized);
    exportBoth("free_aligned_sized", &free_aligned_sized);
    exportBoth("malloc_trim", &malloc_trim);
    exportBoth("mallinfo2", &mallinfo2);
    exportBoth("mallinfo", &mallinfo);
    exportBoth("mallopt", &mallopt);
    exportBoth("malloc_stats", &malloc_stats);
    exportBoth("malloc_info", &malloc_info);
    // glibc's own names for its allocator, which programs and libraries
    // that wrap or bypass malloc call directly: each must reach kennel
    // too, or a block from __libc_malloc is glibc's and free() aborts on
    // it as foreign (mimalloc and tcmalloc export the same set). cfree is
    // glibc's old free, still exported for binaries linked against it.
    if (replaces_malloc) {
        @export(&malloc, .{ .name = "__libc_malloc" });
        @export(&free, .{ .name = "__libc_free" });
        @export(&free, .{ .name = "cfree" });
        @export(&calloc, .{ .name = "__libc_calloc" });
        @export(&realloc, .{ .name = "__libc_realloc" });
        @export(&memalign, .{ .name = "__libc_memalign" });
        @export(&valloc, .{ .name = "__libc_valloc" });
        @export(&pvalloc, .{ .name = "__libc_pvalloc" });
        @export(&posix_memalign, .{ .name = "__posix_memalign" });
        // Without these a caller got the figures of glibc's arena, which
        // kennel leaves unused.
        @export(&mallinfo, .{ .name = "__libc_mallinfo" });
        @export(&mallopt, .{ .name = "__libc_mallopt" });
    }
    @export(&kn_stats, .{ .name = "kn_stats" });
    @export(&kn_stats_print, .{ .name = "kn_stats_print" });
    @export(&kn_release_thread_memory, .{ .name = "kn_release_thread_memory" });
    // Run at load and at exit (KENNEL_SHOW_STATS); hidden, not exported.
    if (replaces_malloc) {
        @export(&init_entry, .{ .name = "kennel_init_entry", .section = ".init_array", .visibility = .hidden });
        @export(&fini_entry, .{ .name = "kennel_fini_entry", .section = ".fini_array", .visibility = .hidden });
    }
}

/// Exports `function` with the kn_ prefix and, on Linux, under its
/// standard name.
fn exportBoth(comptime name: []const u8, comptime function: anytype) void {
    if (replaces_malloc) @export(function, .{ .name = name });
    @export(function, .{ .name = "kn_" ++ name });
}

fn malloc(size: usize) callconv(.c) ?*anyopaque {
    if (!config.fused_free) {
        if (config.hardening.zero_size and size == 0) return zeroSize();
        const ptr = Heap.alloc(check.cRequest(size) orelse return outOfMemory(), max_align_bytes) orelse return outOfMemory();
        if (!check.afterAlloc(ptr, null, max_align_bytes, false)) return outOfMemory();
        return ptr;
    }
    // The fast library: a pop, or a tail call, so that no stack is set up.
    const ptr = thread.current().allocDirect(size, max_align_bytes) orelse return mallocSlow(size);
    if (!check.afterAlloc(ptr, null, max_align_bytes, false)) return outOfMemory();
    return ptr;
}

noinline fn mallocSlow(size: usize) ?*anyopaque {
    const ptr = thread.current().allocSlow(size, max_align_bytes) orelse return outOfMemory();
    if (!check.afterAlloc(ptr, null, max_align_bytes, false)) return outOfMemory();
    return ptr;
}

fn free(ptr: ?*anyopaque) callconv(.c) void {
    release(ptr, "free");
}

/// free, and C++'s operator delete (cxx.zig), whose faults name
/// `function`. The fast library checks a pointer into the segment its
/// thread freed into last, and pushes the block, in one pass
/// (check.freeableInOwn); everything else, faults included, goes to
/// `releaseGeneric`.
pub inline fn release(ptr: ?*anyopaque, comptime function: []const u8) void {
    if (!config.fused_free) return releaseGeneric(ptr, function);
    const heap = thread.current();
    const f = check.freeableInOwn(heap.free_segment, ptr) orelse return releaseInHeap(ptr, function);
    check.markFreedFast(f);
    heap.freeUnflagged(f.page, @ptrCast(f.block));
}

/// `release` of a pointer outside the segment the thread freed into last:
/// into another segment of its heap (remembered from now on), or else the
/// generic path.
noinline fn releaseInHeap(ptr: ?*anyopaque, comptime function: []const u8) void {
    // Looked up again: passing it costs the fast path an instruction.
    const heap = thread.current();
    const f = check.freeableInHeap(heap, ptr) orelse return releaseGeneric(ptr, function);
    // Before the free, which may release the segment (and clear the field
    // again in removeSegment).
    heap.free_segment = @intFromPtr(ptr) & ~@as(usize, segment_size_bytes - 1);
    check.markFreedFast(f);
    heap.freeUnflagged(f.page, @ptrCast(f.block));
}

noinline fn releaseGeneric(ptr: ?*anyopaque, comptime function: []const u8) void {
    const p: [*]u8 = @ptrCast(ptr orelse return);
    if (config.hardening.zero_size and secure.isZeroSize(p)) return releaseZeroSize(p, function);
    const found = check.beforeFree(p, null, function);
    if (config.fused_free) {
        Heap.freeRemembering(p);
    } else if (config.hardening.quarantine) {
        quarantine.hold(p, found);
    } else {
        Heap.free(p);
    }
}

/// Hardened: takes back what malloc(0) returned, or stops the program.
fn releaseZeroSize(p: [*]u8, comptime function: []const u8) void {
    switch (secure.releaseZeroSize(p)) {
        .released => {},
        .double_free => os.fatal(function ++ "(): double free of 0x{x} (a zero-size block)", .{@intFromPtr(p)}),
        .not_handed_out => os.fatal(function ++ "(): invalid pointer 0x{x}: inside the zero-size region, not a block kennel handed out", .{@intFromPtr(p)}),
    }
}

/// malloc(0), hardened: an address that faults on any access.
fn zeroSize() ?*anyopaque {
    return secure.zeroSizeBlock() orelse {
        const ptr = Heap.alloc(check.c_tail_bytes, max_align_bytes) orelse return outOfMemory();
        if (!check.afterAlloc(ptr, null, max_align_bytes, false)) return outOfMemory();
        return ptr;
    };
}

fn calloc(count: usize, size: usize) callconv(.c) ?*anyopaque {
    const len = std.math.mul(usize, count, size) catch return outOfMemory();
    if (config.hardening.zero_size and len == 0) return zeroSize();
    // Hardened: guarded freed large blocks are accessible only after
    // afterAlloc.
    if (config.valgrind or (config.hardening.guard_freed_large and len < size_class.block_size_max_bytes)) {
        // Memcheck must know the block before kennel clears it: a reused
        // block is inaccessible to everyone until then.
        const ptr = Heap.alloc(check.cRequest(len) orelse return outOfMemory(), max_align_bytes) orelse return outOfMemory();
        if (!check.afterAlloc(ptr, null, max_align_bytes, false)) return outOfMemory();
        @memset(ptr[0..len], 0);
        return ptr;
    }
    const ptr = Heap.allocZeroed(check.cRequest(len) orelse return outOfMemory(), max_align_bytes) orelse return outOfMemory();
    if (!check.afterAlloc(ptr, null, max_align_bytes, true)) return outOfMemory();
    return ptr;
}

fn realloc(ptr: ?*anyopaque, size: usize) callconv(.c) ?*anyopaque {
    const p: [*]u8 = @ptrCast(ptr orelse return malloc(size));
    if (size == 0) {
        free(ptr);
        return null;
    }
    if (config.hardening.zero_size and secure.isZeroSize(p)) {
        // Allocate first: on failure, realloc leaves the block as it was.
        const fresh = malloc(size) orelse return null;
        releaseZeroSize(p, "realloc");
        return fresh;
    }
    const checked = check.validate(p, "realloc");
    if (check.c_tail_bytes != 0) check.checkCanaries(p, checked, "realloc");
    const old_size = checked.usable - check.c_tail_bytes;
    const request = check.cRequest(size) orelse return outOfMemory();
    if (Heap.remap(p, max_align_bytes, request, .to_half)) |same_or_moved| {
        check.afterResize(p, old_size, same_or_moved, null);
        return same_or_moved;
    }
    // A large block that cannot grow in place moves by its kernel pages
    // (Heap.moveLarge); the old one is then freed as any block.
    if (Heap.moveLarge(p, max_align_bytes, request)) |moved| {
        free(p);
        return moved;
    }
    const fresh: [*]u8 = @ptrCast(malloc(size) orelse return null);
    @memcpy(fresh[0..@min(old_size, size)], p[0..@min(old_size, size)]);
    free(p);
    return fresh;
}

fn reallocarray(ptr: ?*anyopaque, count: usize, size: usize) callconv(.c) ?*anyopaque {
    const len = std.math.mul(usize, count, size) catch return outOfMemory();
    return realloc(ptr, len);
}

fn aligned_alloc(alignment: usize, size: usize) callconv(.c) ?*anyopaque {
    if (!isPowerOfTwo(alignment)) return failWith(.INVAL);
    return allocAligned(@max(alignment, max_align_bytes), size);
}

fn posix_memalign(result: *?*anyopaque, alignment: usize, size: usize) callconv(.c) c_int {
    if (!isPowerOfTwo(alignment) or alignment % @sizeOf(*anyopaque) != 0) return errorCode(.INVAL);
    const a = @max(alignment, max_align_bytes);
    const ptr = Heap.alloc(check.cRequest(size) orelse return errorCode(.NOMEM), a) orelse return errorCode(.NOMEM);
    if (!check.afterAlloc(ptr, null, a, false)) return errorCode(.NOMEM);
    result.* = ptr;
    return 0;
}

fn memalign(alignment: usize, size: usize) callconv(.c) ?*anyopaque {
    // glibc rounds an alignment that is not a power of two up to one.
    if (alignment > std.math.maxInt(usize) / 2 + 1) return failWith(.INVAL);
    const a = std.math.ceilPowerOfTwo(usize, @max(alignment, max_align_bytes)) catch return failWith(.INVAL);
    return allocAligned(a, size);
}

fn valloc(size: usize) callconv(.c) ?*anyopaque {
    return allocAligned(os.pageSize(), size);
}

fn pvalloc(size: usize) callconv(.c) ?*anyopaque {
    const rounded = os.pageAlignForward(@max(size, 1)) orelse return outOfMemory();
    return allocAligned(os.pageSize(), rounded);
}

fn malloc_usable_size(ptr: ?*anyopaque) callconv(.c) usize {
    const p: [*]u8 = @ptrCast(ptr orelse return 0);
    if (config.hardening.zero_size and secure.isZeroSize(p)) return 0;
    return check.validate(p, "malloc_usable_size").usable - check.c_tail_bytes;
}

fn free_sized(ptr: ?*anyopaque, size: usize) callconv(.c) void {
    _ = size;
    free(ptr);
}

fn free_aligned_sized(ptr: ?*anyopaque, alignment: usize, size: usize) callconv(.c) void {
    _ = alignment;
    _ = size;
    free(ptr);
}

/// struct kn_stats in kennel.h: stats.Stats without the optional.
const CStats = extern struct {
    block_bytes: usize,
    committed_bytes: usize,
    mapped_bytes: usize,
    mapped_bytes_peak: usize,
    heap_count: usize,
    abandoned_heaps: usize,
    abandoned_pages: usize,
    segment_count: usize,
    huge_count: usize,
    huge_bytes: usize,
    blocks_live: usize,
    class_count: usize,
    classes: [size_class.class_count]extern struct { block_size: usize, blocks_live: usize, pages: usize },
};

fn kn_stats(out: *CStats) callconv(.c) void {
    const s = stats_mod.collect();
    out.* = .{
        .block_bytes = s.block_bytes,
        .committed_bytes = s.committed_bytes,
        .mapped_bytes = s.mapped_bytes,
        .mapped_bytes_peak = s.mapped_bytes_peak,
        .heap_count = s.heap_count,
        .abandoned_heaps = s.abandoned_heaps,
        .abandoned_pages = s.abandoned_pages,
        .segment_count = s.segment_count,
        .huge_count = s.huge_count,
        .huge_bytes = s.huge_bytes,
        .blocks_live = s.blocksLive(),
        .class_count = size_class.class_count,
        .classes = undefined,
    };
    for (&out.classes, s.classes) |*c, from| c.* = .{ .block_size = from.block_size, .blocks_live = from.blocks_live, .pages = from.pages };
}

extern "c" fn fwrite(ptr: [*]const u8, size: usize, count: usize, stream: *anyopaque) usize;

/// Prints the statistics to `stream`, or to stderr (unbuffered, with
/// write(2)) when it is NULL.
fn kn_stats_print(stream: ?*anyopaque) callconv(.c) void {
    const s = stats_mod.collect();
    if (stream) |file| {
        stats_mod.print(&s, file, writeStream);
    } else stats_mod.print(&s, {}, writeStderr);
}

fn writeStream(stream: *anyopaque, bytes: []const u8) void {
    _ = fwrite(bytes.ptr, 1, bytes.len, stream);
}

fn writeStderr(_: void, bytes: []const u8) void {
    os.backend.writeStderr(bytes);
}

/// glibc's malloc_trim: the calling thread's free memory goes back to the
/// OS, all but `pad` bytes, and so does the resident memory of the segments
/// pooled for reuse. Other threads' heaps are theirs alone to purge (their
/// free memory decays as they run). 1 if any memory went back, else 0.
fn malloc_trim(pad: usize) callconv(.c) c_int {
    const heap = thread.current();
    const pooled = pool.residentBytes();
    pool.purgeResident(std.math.maxInt(usize));
    const from_pool = pooled -| pool.residentBytes();
    const from_heap = if (heap == &Heap.empty) 0 else heap.trim(pad);
    return @intFromBool(from_pool + from_heap > 0);
}

/// glibc's struct mallinfo2 (and, with int fields, struct mallinfo).
fn MallInfo(comptime Field: type) type {
    return extern struct {
        arena: Field,
        ordblks: Field,
        smblks: Field,
        hblks: Field,
        hblkhd: Field,
        usmblks: Field,
        fsmblks: Field,
        uordblks: Field,
        fordblks: Field,
        keepcost: Field,
    };
}

/// glibc's mallinfo2, from kn_stats's walk over every segment. glibc's
/// fields describe its arenas; here they hold kennel's nearest figures, so
/// that a program reporting its memory with them reports kennel's rather
/// than glibc's empty arena:
/// - arena: bytes touched and not given back, huge blocks left out (glibc:
///   bytes its arenas took from the OS); arena = uordblks + fordblks;
/// - ordblks: free blocks of pages in use (glibc: free chunks);
/// - hblks, hblkhd: live huge blocks and their bytes (glibc: its mmapped
///   chunks);
/// - uordblks: bytes in live blocks other than huge ones;
/// - fordblks: the rest of arena: free blocks, free slices still resident,
///   page and segment metadata, cached huge mappings;
/// - smblks, fsmblks (glibc's fastbins), usmblks (unused since glibc 2.5)
///   and keepcost (glibc's releasable top chunk): 0, having no such thing.
fn mallinfo2() callconv(.c) MallInfo(usize) {
    return mallInfoOf(&stats_mod.collect());
}

fn mallInfoOf(s: *const stats_mod.Stats) MallInfo(usize) {
    const arena = s.committed_bytes -| s.huge_bytes;
    const in_use = s.block_bytes -| s.huge_bytes;
    return .{
        .arena = arena,
        .ordblks = s.free_blocks,
        .smblks = 0,
        .hblks = s.huge_count,
        .hblkhd = s.huge_bytes,
        .usmblks = 0,
        .fsmblks = 0,
        .uordblks = in_use,
        .fordblks = arena -| in_use,
        .keepcost = 0,
    };
}

/// glibc's older mallinfo: mallinfo2's figures in ints, each saturated at
/// INT_MAX (glibc's wrap around past 2 GiB).
fn mallinfo() callconv(.c) MallInfo(c_int) {
    const wide = mallinfo2();
    var narrow: MallInfo(c_int) = undefined;
    inline for (comptime std.meta.fieldNames(MallInfo(usize))) |name| {
        @field(narrow, name) = @intCast(@min(@field(wide, name), std.math.maxInt(c_int)));
    }
    return narrow;
}

/// glibc's mallopt: kennel has none of glibc's tunables (arenas,
/// thresholds, fastbins, perturbation), so every parameter is accepted and
/// ignored, and a program that tunes glibc runs unchanged. 1, success, as
/// glibc answers for parameters it takes.
fn mallopt(param: c_int, value: c_int) callconv(.c) c_int {
    _ = param;
    _ = value;
    return 1;
}

/// glibc's malloc_stats: kennel's statistics on stderr, where glibc prints
/// its own (kn_stats_print(NULL)'s lines).
fn malloc_stats() callconv(.c) void {
    kn_stats_print(null);
}

/// glibc's malloc_info: kennel's figures in glibc's XML, so that a program
/// (or a tool reading its output) that asks glibc for a report gets
/// kennel's. The walk is process-wide, so there is one `<heap nr="0">` for
/// all of kennel's heaps, and its totals repeat at the top level:
/// - `<sizes>`: a `<size>` per class with free blocks (on free lists,
///   pending from other threads, or never handed out), from one byte past
///   the class below to the class's block size, as glibc lists its free
///   chunks by bin;
/// - total "fast": 0 (no fastbins); total "rest": free blocks, and the bytes
///   of memory touched but not in live blocks (mallinfo2's ordblks and
///   fordblks); total "mmap": live huge blocks and their bytes (hblks,
///   hblkhd);
/// - system "current" and "max": address space mapped from the OS, now and
///   at most; aspace "total": mapped now; aspace "mprotect": touched and
///   not given back (mallinfo2's arena plus the huge blocks).
/// `options` must be 0 and `stream` not NULL, or EINVAL is returned (as
/// glibc does for `options`); otherwise 0.
fn malloc_info(options: c_int, stream: ?*anyopaque) callconv(.c) c_int {
    const file = stream orelse return @backingInt(Errno.INVAL);
    if (options != 0) return @backingInt(Errno.INVAL);
    const s = stats_mod.collect();
    const info = mallInfoOf(&s);
    var buf: [256]u8 = undefined;
    var totals_buf: [256]u8 = undefined;
    var system_buf: [256]u8 = undefined;
    writeStream(file, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
    var from: usize = 1;
    for (s.classes) |c| {
        defer from = c.block_size + 1;
        if (c.blocks_free == 0) continue;
        writeStream(file, std.fmt.bufPrint(&buf, "  <size from=\"{d}\" to=\"{d}\" total=\"{d}\" count=\"{d}\"/>\n", .{ from, c.block_size, c.blocks_free * c.block_size, c.blocks_free }) catch unreachable);
    }
    writeStream(file, "</sizes>\n");
    const totals = std.fmt.bufPrint(&totals_buf,
        \\<total type="fast" count="0" size="0"/>
        \\<total type="rest" count="{d}" size="{d}"/>
        \\
    , .{ info.ordblks, info.fordblks }) catch unreachable;
    writeStream(file, totals);
    const system = std.fmt.bufPrint(&system_buf,
        \\<system type="current" size="{d}"/>
        \\<system type="max" size="{d}"/>
        \\<aspace type="total" size="{d}"/>
        \\<aspace type="mprotect" size="{d}"/>
        \\
    , .{ s.mapped_bytes, s.mapped_bytes_peak, s.mapped_bytes, s.committed_bytes }) catch unreachable;
    writeStream(file, system);
    writeStream(file, "</heap>\n");
    writeStream(file, totals);
    writeStream(file, std.fmt.bufPrint(&buf, "<total type=\"mmap\" count=\"{d}\" size=\"{d}\"/>\n", .{ info.hblks, info.hblkhd }) catch unreachable);
    writeStream(file, system);
    writeStream(file, "</malloc>\n");
    return 0;
}

fn kn_release_thread_memory() callconv(.c) void {
    thread.releaseCurrent();
}

// ---- Helpers ------------------------------------------------------------

/// Like std.math.isPowerOfTwo, but 0 (a caller's mistake here, not ours)
/// is simply not a power of two.
fn isPowerOfTwo(x: usize) bool {
    return x != 0 and x & (x - 1) == 0;
}

fn allocAligned(alignment: usize, size: usize) ?*anyopaque {
    const ptr = Heap.alloc(check.cRequest(size) orelse return outOfMemory(), alignment) orelse return outOfMemory();
    if (!check.afterAlloc(ptr, null, alignment, false)) return outOfMemory();
    return ptr;
}

/// The error codes the C functions report. wasm32-freestanding has no libc,
/// so no errno: there the codes are returned (posix_memalign) and nothing
/// is set.
const has_errno = builtin.os.tag != .freestanding;
const Errno = if (has_errno) std.c.E else enum(c_int) { NOMEM = 12, INVAL = 22 };

fn errorCode(e: Errno) c_int {
    return @intCast(@backingInt(e));
}

fn failWith(e: Errno) ?*anyopaque {
    if (has_errno) std.c._errno().* = @backingInt(e);
    return null;
}

fn outOfMemory() ?*anyopaque {
    return failWith(.NOMEM);
}

// ---- Start and exit -----------------------------------------------------

const InitFn = *const fn () callconv(.c) void;
const init_entry: InitFn = &onLoad;
const fini_entry: InitFn = &onExit;

var show_stats = false;

/// Reads the environment once, at load (getenv does not allocate):
/// KENNEL_SHOW_STATS, KENNEL_VERBOSE, KENNEL_FILL_FREED (hardened library).
fn onLoad() callconv(.c) void {
    show_stats = envFlag("KENNEL_SHOW_STATS");
    os.verbose = envFlag("KENNEL_VERBOSE");
    if (config.fill_freed_available) secure.fill_freed = envFlag("KENNEL_FILL_FREED") or config.fill_freed_default;
    if (config.hardening.guard_pages or config.hardening.zero_size or config.hardening.guard_freed_large) guard_handler.install();
    if (os.verbose) describe();
}

fn onExit() callconv(.c) void {
    if (show_stats) kn_stats_print(null);
}

/// Whether the variable is set to 1; any other value but 0 is reported.
fn envFlag(comptime name: [:0]const u8) bool {
    const value = std.mem.span(std.c.getenv(name) orelse return false);
    if (std.mem.eql(u8, value, "1")) return true;
    if (!std.mem.eql(u8, value, "0")) os.warn(name ++ "={s} is neither 0 nor 1; taken as 0", .{value});
    return false;
}

/// KENNEL_VERBOSE: what this library is and how it is configured.
fn describe() void {
    const h = config.hardening;
    os.note("kennel {s} library: {d} size classes up to {d} bytes, segments of {d} bytes", .{
        if (config.secure) "hardened" else "fast", size_class.class_count, size_class.block_size_max_bytes, segment_size_bytes,
    });
    os.note("hardening: checked frees {s}, encoded free lists {s}, guard pages {s}, random block order {s}, canaries {s}, zeroed freed blocks {s}, quarantine {s}, zero-size blocks {s}, guarded freed large blocks {s}, fill freed {s}", .{
        onOff(h.check_frees), onOff(h.encode_lists), onOff(h.guard_pages), onOff(h.randomize),         onOff(h.canary),
        onOff(h.zero_freed),  onOff(h.quarantine),   onOff(h.zero_size),   onOff(h.guard_freed_large), onOff(config.fill_freed_available and secure.fill_freed and !h.zero_freed),
    });
    os.note("free memory idle through a {d} ms period goes back to the OS by halves, at once past {d} bytes for all threads together; statistics at exit {s}", .{
        purge.decay_period_ns / std.time.ns_per_ms, purge.budgetBytes(), onOff(show_stats),
    });
}

fn onOff(on: bool) []const u8 {
    return if (on) "on" else "off";
}

/// Hardened: a SIGSEGV handler that names kennel's guard pages, zero-size
/// blocks and guarded freed large blocks. Installed
/// at load only if the program has none yet (a program's own handler,
/// installed later, replaces it). A fault elsewhere, or a SIGSEGV another
/// process or thread sent, goes on as if the handler did not exist: default
/// action, re-raised.
const guard_handler = struct {
    fn install() void {
        var old: std.c.Sigaction = undefined;
        if (std.c.sigaction(.SEGV, null, &old) != 0) return;
        if (old.handler.handler != std.c.SIG.DFL) {
            os.warn("the program handles SIGSEGV already; overflows into guard pages will not be named", .{});
            return;
        }
        var action: std.c.Sigaction = .{
            .handler = .{ .sigaction = onFault },
            .mask = undefined,
            .flags = std.c.SA.SIGINFO | std.c.SA.RESETHAND,
        };
        _ = std.c.sigemptyset(&action.mask);
        _ = std.c.sigaction(.SEGV, &action, null);
    }

    fn onFault(_: std.c.SIG, info: *const std.c.siginfo_t, _: ?*anyopaque) callconv(.c) void {
        // A SIGSEGV sent by kill, tgkill or raise (si_code SI_USER or
        // below) names no faulting address, and returning re-runs nothing:
        // send it again, now with the default action (SA_RESETHAND), to be
        // taken as soon as the handler returns and unblocks it.
        if (info.code <= 0) {
            restoreDefault();
            _ = std.c.raise(.SEGV);
            return;
        }
        const address = @intFromPtr(info.fields.sigfault.addr);
        if (check.guardHit(address)) |base| {
            os.fatal("heap overflow: access to the guard page at 0x{x} (in the kennel mapping at 0x{x})", .{ address, base });
        }
        if (config.hardening.zero_size and secure.isZeroSize(@ptrFromInt(address)))
            os.fatal("access to the zero-size block at 0x{x} (malloc(0))", .{address});
        // A fault inside a large block is an access to it while freed: a
        // live one is accessible throughout.
        if (check.largeBlockHit(address)) |block|
            os.fatal("use after free: access to 0x{x} in the freed block 0x{x}", .{ address, block });
        // Returning re-runs the access, which with the default action ends
        // the process as it would have without us.
        restoreDefault();
    }

    /// The default action for SIGSEGV. SA_RESETHAND restored it when the
    /// kernel called us, but not when a handler the program installed later
    /// chains to us for a fault it does not own: then both handlers returned
    /// and the access faulted again, for ever.
    fn restoreDefault() void {
        var action: std.c.Sigaction = .{
            .handler = .{ .handler = std.c.SIG.DFL },
            .mask = undefined,
            .flags = 0,
        };
        _ = std.c.sigemptyset(&action.mask);
        _ = std.c.sigaction(.SEGV, &action, null);
    }
};
