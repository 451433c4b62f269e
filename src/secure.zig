//! The hardened configuration's mechanisms (config.hardening, -Dsecure).
//! Each is a comptime switch; with all off, every function here compiles to
//! what the fast configuration always did.
//!
//! - Encoded free-list links: a free block's link is stored as
//!   `rotl(next ^ at ^ key, key >> 58) + key` (>> 27 with 32-bit words), where `at` is the address of
//!   the block holding it and `key` a process secret. A link overwritten
//!   after free (a use after free, or an overflow from the block below)
//!   decodes to an address outside the page, or off a block boundary, and
//!   is caught when the list is next followed. Mixing in `at` makes a link
//!   copied from another block wrong too.
//! - Checked frees: see check.zig (and the live map in segment.zig).
//! - Random block order: a fresh page links each chunk of never-used blocks
//!   in a random permutation, so the address of the next block is not
//!   predictable from the last.
//! - Canaries (Zig only: C's free does not say how many bytes were asked
//!   for): up to `canary_bytes_max` bytes after the requested length, when
//!   the block has that slack, hold a pattern derived from their address,
//!   checked at free.
//! - Tail canaries (C): the last `tail_canary_bytes` of every block, which
//!   malloc_usable_size leaves out, hold a word derived from their address,
//!   checked at free and realloc. A write past the usable size hits it, and
//!   so does an underflow from the block above, which that block's free
//!   checks: blocks of small and medium pages keep their canaries while
//!   free too (`keepsTailCanary`), and large pages begin with a guard.
//! - Zero on free, check on reuse: a freed block is zeroed whole (above
//!   `zero_whole_bytes_max`, its first kernel page and any partial last one;
//!   the kernel pages between are purged, which reads back as zeros on
//!   Linux), and when handed out again everything past its link word must
//!   still be zero, or a write after free is reported. Every free block
//!   satisfies this: fresh memory is zero, freed blocks are zeroed, and a
//!   page that goes back to its segment has its links cleared
//!   (`pageReleased`), so the next class's blocks find zeros too. A block
//!   handed out for the first time since its page was set up (the block
//!   map's handed-out bit, segment.zig) is checked only in the kernel page
//!   holding its link: it was never freed there, and reading its untouched
//!   kernel pages would fault each twice.
//! - Guarded freed large blocks: a freed block above
//!   `zero_whole_bytes_max` is purged and made inaccessible past its first
//!   kernel page until handed out again, so a use after free faults.
//! - Zero-size blocks (C): malloc(0) returns a unique address in a reserved
//!   region that is never accessible, so any access faults.
//! - Fill: freed blocks are filled with `fill_byte` past their first two
//!   words, so a read after free sees the pattern instead of old data.
//!
//! Guard pages are set where memory is mapped (segment.zig, huge.zig).
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const config = @import("config.zig");
const os = @import("os.zig");
const segment_mod = @import("segment.zig");

/// What freed blocks are filled with (when filling is on).
pub const fill_byte = 0xdf;

/// Bytes after the requested length that carry a canary, at most.
pub const canary_bytes_max = 8;

/// Whether frees fill blocks now. The C library sets it from
/// KENNEL_FILL_FREED at load; without the feature compiled in it is false.
pub var fill_freed: bool = config.fill_freed_default;

/// The process secret behind link encoding and canaries. Zero
/// until `init`; set once by a compare-and-swap (so racing initializers
/// agree, and a forked child keeps its parent's) and read-only after.
var key: std.atomic.Value(usize) = .init(0);

/// Sets the secret up. Called before a thread's first heap exists, so every
/// block kennel hands out was made after it (and so did every thread that
/// receives one).
pub fn init() void {
    if (!config.secure) return;
    // Monotonic: the secret publishes nothing but itself; a thread that
    // reads it got its blocks from a thread that set or saw it.
    if (key.load(.monotonic) != 0) return;
    const fresh = randomWord() | 1;
    // Monotonic: as above; losing the race means another value won.
    _ = key.cmpxchgStrong(0, fresh, .monotonic, .monotonic);
}

inline fn secret() usize {
    // Monotonic: set once before any block exists (see init); a plain load.
    const k = key.load(.monotonic);
    assert(k != 0);
    return k;
}

/// A word of random bits from the system, or from the clock and addresses
/// if it has none to give (Linux early at boot, wasm32-freestanding).
pub fn randomWord() usize {
    if (os.randomWord()) |word| return word;
    var local: u8 = 0;
    return @truncate(mix(os.nowNanoseconds() ^ @intFromPtr(&local) ^ @as(u32, @bitCast(os.currentTid()))));
}

/// SplitMix64's finalizer: a bijection that spreads every input bit.
fn mix(x: u64) u64 {
    var z = x +% 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)) *% 0xBF58_476D_1CE4_E5B9;
    z = (z ^ (z >> 27)) *% 0x94D0_49BB_1331_11EB;
    return z ^ (z >> 31);
}

// ---- Links --------------------------------------------------------------

/// The key's top bits (6 with 64-bit words, 5 with 32-bit) are the rotation.
const rotation_shift = if (@bitSizeOf(usize) == 64) 58 else 27;

/// The word stored in the block at `at` to link to `next`.
pub inline fn encodeLink(at: usize, next: usize) usize {
    if (!config.hardening.encode_lists) return next;
    const k = secret();
    return std.math.rotl(usize, next ^ at ^ k, k >> rotation_shift) +% k;
}

/// Inverse of encodeLink; the caller checks that the result is plausible.
pub inline fn decodeLink(at: usize, stored: usize) usize {
    if (!config.hardening.encode_lists) return stored;
    const k = secret();
    return std.math.rotr(usize, stored -% k, k >> rotation_shift) ^ at ^ k;
}

// ---- Random order -------------------------------------------------------

/// A generator's next value (xorshift64*); `state` is never zero.
pub fn nextRandom(state: *u64) u64 {
    assert(state.* != 0);
    var x = state.*;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    state.* = x;
    return x *% 0x2545_F491_4F6C_DD1D;
}

/// A uniformly random permutation of 0..order.len (Fisher-Yates).
pub fn shuffle(state: *u64, order: []u16) void {
    for (order, 0..) |*slot, i| slot.* = @intCast(i);
    var i = order.len;
    while (i > 1) : (i -= 1) {
        const j: usize = @intCast((@as(u128, nextRandom(state)) * i) >> 64);
        std.mem.swap(u16, &order[i - 1], &order[j]);
    }
}

// ---- Canaries -----------------------------------------------------------

/// The bytes of a canary that starts at `address`: one word derived from
/// the address, so a block copied elsewhere does not carry a valid canary.
/// One mix per canary, not per byte: this runs at every allocation and free.
inline fn canaryPattern(address: usize) u64 {
    comptime assert(canary_bytes_max == @sizeOf(u64));
    return std.mem.nativeToLittle(u64, mix(address ^ secret()));
}

/// Bytes of canary after `len` requested bytes of a block with `usable`.
inline fn canaryLen(len: usize, usable: usize) usize {
    assert(len <= usable);
    return @min(usable - len, canary_bytes_max);
}

/// Writes the canary after `len` requested bytes of a block with `usable`.
/// Inline up to the length: a request that fills its block (often: classes
/// are word-exact up to 128 bytes) leaves no room and costs no call.
pub inline fn writeCanary(ptr: [*]u8, len: usize, usable: usize) void {
    if (!config.hardening.canary) return;
    const n = canaryLen(len, usable);
    if (n != 0) writeCanaryBytes(ptr + len, n);
}

fn writeCanaryBytes(at: [*]u8, n: usize) void {
    assert(n >= 1 and n <= canary_bytes_max);
    const pattern = canaryPattern(@intFromPtr(at));
    if (n == canary_bytes_max) {
        // The common case past 128 bytes: one unaligned store.
        @as(*align(1) u64, @ptrCast(at)).* = pattern;
        return;
    }
    const bytes: [8]u8 = @bitCast(pattern);
    for (at[0..n], bytes[0..n]) |*byte, expected| byte.* = expected;
}

/// Whether the canary after `len` bytes is intact (inline up to the length,
/// as `writeCanary`).
pub inline fn canaryIntact(ptr: [*]const u8, len: usize, usable: usize) bool {
    if (!config.hardening.canary) return true;
    const n = canaryLen(len, usable);
    return n == 0 or canaryBytesIntact(ptr + len, n);
}

fn canaryBytesIntact(at: [*]const u8, n: usize) bool {
    assert(n >= 1 and n <= canary_bytes_max);
    const pattern = canaryPattern(@intFromPtr(at));
    if (n == canary_bytes_max) return @as(*align(1) const u64, @ptrCast(at)).* == pattern;
    const bytes: [8]u8 = @bitCast(pattern);
    var differ: u8 = 0;
    for (at[0..n], bytes[0..n]) |byte, expected| differ |= byte ^ expected;
    return differ == 0;
}

// ---- Tail canaries (C) --------------------------------------------------

/// Bytes at the end of every C block that hold its canary.
pub const tail_canary_bytes = 8;

inline fn tailCanary(address: usize) u64 {
    return mix(address ^ secret());
}

/// Writes the canary into the last bytes before `end` (a block's end).
pub fn writeTailCanary(end: [*]u8) void {
    const at = end - tail_canary_bytes;
    @as(*align(1) u64, @ptrCast(at)).* = tailCanary(@intFromPtr(at));
}

/// Writes the canary into the last bytes before `end` (a block's end, word
/// aligned) and returns the offset from `end - tail_canary_bytes` of the
/// first nonzero byte it replaced, if any. One write access: a check that
/// read first would map the kernel's zero page in where the kernel page is
/// fresh (a large block's last page, discarded while it was free), and the
/// write would then fault a second time to replace it.
pub fn swapTailCanary(end: [*]u8) ?usize {
    // A word at a time: 32-bit targets have no 64-bit exchange, and the
    // first word's write brings the kernel page in for both.
    const Words = [tail_canary_bytes / @sizeOf(usize)]usize;
    const at = end - tail_canary_bytes;
    const words: *Words = @ptrCast(@alignCast(at));
    const canary: Words = @bitCast(tailCanary(@intFromPtr(at)));
    var old: Words = undefined;
    // Monotonic: the block was just taken by this thread; atomic only so
    // that the old bytes are read by the instruction that writes.
    for (words, canary, &old) |*word, new, *was| was.* = @atomicRmw(usize, word, .Xchg, new, .monotonic);
    return firstNonzero(std.mem.asBytes(&old), 0, tail_canary_bytes);
}

/// Whether the canary before `end` is intact.
pub fn tailCanaryIntact(end: [*]const u8) bool {
    const at = end - tail_canary_bytes;
    return @as(*align(1) const u64, @ptrCast(at)).* == tailCanary(@intFromPtr(at));
}

/// Whether blocks of `block_size` keep their tail canary for as long as
/// their page is set up (C): the blocks of small and medium pages, many to
/// a page, each right above another. Their canaries are written when the
/// page's capacity reaches them (`writeSlotTails`), checked when they are
/// handed out and freed, and never zeroed while the page lives, free or
/// not; and the page's first block is never handed out (Heap.extendPage).
/// So the 8 bytes just below any block handed out are always a canary,
/// which its free checks: an underflow from the block is caught when the
/// block itself is freed, whatever its neighbour does, with nothing to race
/// with (the bytes change only when the page is set up or released, never
/// while a block of it is live). A large block (one a page) writes its
/// canary when handed out, and a freed one is purged.
pub inline fn keepsTailCanary(block_size: usize) bool {
    return config.hardening.canary and config.c_library and block_size <= segment_mod.medium_block_max_bytes;
}

/// Writes the tail canaries of blocks `first` to `first + count` of a page
/// of blocks of `block_size` at `area` (their page's capacity reached them).
pub fn writeSlotTails(area: [*]u8, block_size: usize, first: usize, count: usize) void {
    assert(keepsTailCanary(block_size));
    // Bounded by the page's blocks.
    for (first..first + count) |i| writeTailCanary(area + (i + 1) * block_size);
}

// ---- Zero on free, guarded large blocks ---------------------------------

/// Blocks up to this size (small and medium pages) are zeroed and checked
/// whole; larger ones only outside their whole kernel pages (`Span`).
pub const zero_whole_bytes_max = segment_mod.medium_block_max_bytes;

/// Bytes at a block's start that the free lists use (the link), never
/// zeroed by `scrubFreed` nor checked by `freeBlockWritten`.
pub const link_bytes = @sizeOf(usize);

/// The kernel pages inside a large block, past the one holding its link:
/// what is purged (and protected) while it is free.
const Span = struct { start: usize, end: usize };

fn innerPages(block: [*]u8, bytes: usize) Span {
    const page = os.pageSize();
    const start = std.mem.alignForward(usize, @intFromPtr(block) + link_bytes, page);
    const end = @max(start, std.mem.alignBackward(usize, @intFromPtr(block) + bytes, page));
    return .{ .start = start, .end = end };
}

/// Whether a block of `bytes` is handled by its kernel pages when freed.
inline fn byPages(bytes: usize) bool {
    return bytes > zero_whole_bytes_max and
        (config.hardening.guard_freed_large or config.hardening.zero_freed);
}

/// A block (`bytes` its whole size) was freed: zero it past the first
/// `keep` bytes (which the free lists and marks use), purge and protect the
/// inner pages of a large one.
pub fn scrubFreed(block: [*]u8, bytes: usize, keep: usize) void {
    if (byPages(bytes)) {
        const span = innerPages(block, bytes);
        const start = span.start - @intFromPtr(block);
        const end = span.end - @intFromPtr(block);
        if (config.hardening.zero_freed) {
            if (start > keep) @memset(block[keep..start], 0);
            @memset(block[end..bytes], 0);
        }
        if (span.end > span.start) {
            // Discarded, not only purged: the inner pages must read back
            // as zeroes wherever this memory is handed out again, also
            // where a purge keeps old contents (MADV_FREE, wasm, locked
            // memory on old kernels), or a page set up over them later
            // takes those for a write after free. A refusal to guard (out
            // of memory for the split mapping) leaves the pages
            // accessible: still discarded, only not guarded.
            if (config.hardening.guard_freed_large and os.can_protect)
                _ = os.guard(block + start, end - start, true)
            else if (config.hardening.zero_freed)
                os.discard(block + start, end - start)
            else
                os.purge(block + start, end - start);
        }
        return;
    }
    if (config.hardening.zero_freed) @memset(block[keep..bytes], 0);
}

/// A free block is being handed out again: make a large one's inner pages
/// accessible, and (zero_freed) return the offset of the first byte past
/// its first `skip` that was written while it was free, if any.
/// error.OutOfMemory when the system refuses to make it accessible (see
/// `openReleased`): the block must not be handed out. A block
/// never freed since its page was set up (`freed` false) was neither
/// guarded nor purged; it is zero unless a pointer kept from the memory's
/// earlier use wrote it, and only the kernel page holding its link (which
/// `Page.extend` touched) is checked: reading the rest of a fresh block
/// would map the kernel's zero page, and the program's first write would
/// then fault a second time.
pub fn reuseFreed(block: [*]u8, bytes: usize, skip: usize, freed: bool) error{OutOfMemory}!?usize {
    if (!freed) {
        if (!config.hardening.zero_freed) return null;
        const link_page_end = std.mem.alignForward(usize, @intFromPtr(block) + link_bytes, os.pageSize());
        return firstNonzero(block, skip, @min(bytes, link_page_end - @intFromPtr(block)));
    }
    if (byPages(bytes)) {
        const span = innerPages(block, bytes);
        if (config.hardening.guard_freed_large and os.can_protect and span.end > span.start) {
            if (!os.unguard(@ptrFromInt(span.start), span.end - span.start, span.end - span.start)) return error.OutOfMemory;
        }
        if (os.purge_needs_commit and span.end > span.start) {
            if (!os.commit(@ptrFromInt(span.start), span.end - span.start)) return error.OutOfMemory;
        }
        if (!config.hardening.zero_freed) return null;
        return firstNonzero(block, skip, span.start - @intFromPtr(block)) orelse
            firstNonzero(block, span.end - @intFromPtr(block), bytes);
    }
    if (!config.hardening.zero_freed) return null;
    return firstNonzero(block, skip, bytes);
}

/// The offset of the first nonzero byte in block[from..to], if any. Words
/// OR-ed together first: the common answer, none, costs one pass.
pub fn firstNonzero(block: [*]const u8, from: usize, to: usize) ?usize {
    if (from >= to) return null;
    assert(@intFromPtr(block + from) % @sizeOf(usize) == 0 and (to - from) % @sizeOf(usize) == 0);
    const words: []const usize = @alignCast(std.mem.bytesAsSlice(usize, block[from..to]));
    if (orWords(words) == 0) return null;
    for (block[from..to], from..) |byte, i| {
        if (byte != 0) return i;
    }
    unreachable;
}

/// The OR of `words` (at least one). Whole blocks of up to 64 KiB at every
/// reuse: a vector at a time (the plain loop stayed scalar, about 3.5
/// instructions a word), and the words a whole vector does not cover are
/// OR-ed as one more vector that overlaps the last: OR-ing a word twice
/// changes nothing, and most blocks are a few words long (a word at a time,
/// their tail was half the zero check of blocks up to 1 KiB).
fn orWords(words: []const usize) usize {
    assert(words.len > 0);
    if (words.len < 2) return words[0];
    if (words.len < 4) return orOverlapping(2, words);
    if (words.len < 8) return orOverlapping(4, words);
    return orOverlapping(8, words);
}

/// `orWords` with vectors of `lanes` words, for at least `lanes` words.
inline fn orOverlapping(comptime lanes: usize, words: []const usize) usize {
    assert(words.len >= lanes);
    const Lanes = @Vector(lanes, usize);
    var wide: Lanes = words[words.len - lanes ..][0..lanes].*;
    var at: usize = 0;
    while (at + lanes <= words.len) : (at += lanes) wide |= @as(Lanes, words[at..][0..lanes].*);
    return @reduce(.Or, wide);
}

/// A page is about to go back to its segment (guard_freed_large): a large
/// page's guarded pages become accessible again, up to the guard at its
/// end (`guard`, from Segment.pageGuard), which the segment keeps closed
/// (Segment.releaseGuard). False when the system refuses: out of memory,
/// for instance under RLIMIT_DATA, which inaccessible memory does not
/// count against, so other mappings may have taken its room meanwhile.
/// The page must then stay as it is, empty, its block guarded.
pub fn openReleased(area: [*]u8, block_bytes: usize, capacity: usize, guard: ?[]u8) bool {
    if (!(config.hardening.guard_freed_large and os.can_protect and block_bytes > zero_whole_bytes_max and capacity > 0)) return true;
    const blocks_end = @intFromPtr(area) + block_bytes * capacity;
    const end = if (guard) |g| @intFromPtr(g.ptr) else std.mem.alignForward(usize, blocks_end, os.pageSize());
    assert(end >= blocks_end);
    const start = std.mem.alignBackward(usize, @intFromPtr(area), os.pageSize());
    // A large page holds one block: what its free went through.
    assert(capacity == 1);
    const span = innerPages(area, block_bytes);
    return os.unguard(@ptrFromInt(start), end - start, span.end - span.start);
}

/// A page goes back to its segment (zero_freed): its free blocks' links,
/// and the tail canaries they kept, are cleared, so the next class finds
/// zeros.
pub fn pageReleased(area: [*]u8, block_bytes: usize, capacity: usize) void {
    if (config.hardening.zero_freed) {
        for (0..capacity) |i| @as(*usize, @ptrCast(@alignCast(area + i * block_bytes))).* = 0;
        // And the tail canaries the blocks kept (`keepsTailCanary`).
        if (keepsTailCanary(block_bytes)) {
            for (1..capacity + 1) |i| @as(*align(1) u64, @ptrCast(area + i * block_bytes - tail_canary_bytes)).* = 0;
        }
    }
}

// ---- Zero-size blocks (C) -----------------------------------------------

/// The reserved region malloc(0) hands addresses out of, 16 bytes apart:
/// this many unique addresses before they repeat.
pub const zero_size_region_bytes: usize = if (@bitSizeOf(usize) >= 64) 64 * 1024 * 1024 else 1024 * 1024;
const zero_size_step_bytes = 16;
const zero_size_slot_count = zero_size_region_bytes / zero_size_step_bytes;
/// Behind the region, one bit per address, set while it is handed out, so
/// that freeing one twice is caught like any double free. (Zero pages of
/// the same mapping, touched only where addresses are used.)
const zero_size_live_bytes = zero_size_slot_count / 8;
const LiveWord = std.atomic.Value(usize);

/// The region's start; 0 until the first malloc(0).
var zero_size_base: std.atomic.Value(usize) = .init(0);
/// How many zero-size addresses were handed out.
var zero_size_count: std.atomic.Value(usize) = .init(0);

/// A unique address that faults on any access, for malloc(0); null when
/// the region cannot be reserved or its addresses are nearly all live.
pub fn zeroSizeBlock() ?[*]u8 {
    // Acquire: the region was protected before its address was published.
    var base = zero_size_base.load(.acquire);
    if (base == 0) base = reserveZeroSize() orelse return null;
    // Once the addresses wrap, one may still be live: skip it, so that no
    // two live blocks share an address (and freeing both is no double free).
    for (0..zero_size_probes_max) |_| {
        // Monotonic: only uniqueness matters, which the RMW gives.
        const index = zero_size_count.fetchAdd(1, .monotonic) % zero_size_slot_count;
        const word, const mask = zeroSizeLive(base, index);
        // Monotonic: the bit orders nothing else; its RMWs are ordered among
        // themselves, and a free on another thread got the pointer through
        // the program's own synchronization.
        if (word.fetchOr(mask, .monotonic) & mask == 0) return @ptrFromInt(base + index * zero_size_step_bytes);
    }
    // Nearly all addresses live at once: the caller hands out a real block.
    return null;
}

/// Live addresses zeroSizeBlock steps over before it gives up.
const zero_size_probes_max = 64;

fn zeroSizeLive(base: usize, index: usize) struct { *LiveWord, usize } {
    assert(index < zero_size_slot_count);
    const words: [*]LiveWord = @ptrFromInt(base + zero_size_region_bytes);
    return .{ &words[index / @bitSizeOf(usize)], @as(usize, 1) << @intCast(index % @bitSizeOf(usize)) };
}

pub const ZeroSizeRelease = enum { released, double_free, not_handed_out };

/// Takes back an address of the region (isZeroSize): free, or realloc.
pub fn releaseZeroSize(ptr: *const anyopaque) ZeroSizeRelease {
    const base = zero_size_base.load(.monotonic);
    const offset = @intFromPtr(ptr) - base;
    assert(offset < zero_size_region_bytes);
    if (offset % zero_size_step_bytes != 0) return .not_handed_out;
    const word, const mask = zeroSizeLive(base, offset / zero_size_step_bytes);
    // Monotonic: as in zeroSizeBlock.
    return if (word.fetchAnd(~mask, .monotonic) & mask != 0) .released else .double_free;
}

fn reserveZeroSize() ?usize {
    if (!os.can_protect) return null;
    const mapping = zero_size_region_bytes + zero_size_live_bytes;
    const region = os.map(mapping, os.pageSize(), 0) orelse return null;
    if (!os.protectNone(region, zero_size_region_bytes)) {
        os.unmap(region, mapping);
        return null;
    }
    // AcqRel: publishes the protection (release) and, losing the race,
    // takes the winner's region (acquire).
    if (zero_size_base.cmpxchgStrong(0, @intFromPtr(region), .acq_rel, .acquire)) |winner| {
        os.unmap(region, mapping);
        return winner;
    }
    return @intFromPtr(region);
}

/// Whether `ptr` is one malloc(0) returned.
pub inline fn isZeroSize(ptr: *const anyopaque) bool {
    // Monotonic: a pointer from the region was made after the region was
    // published to its thread; any other sees either value and is outside.
    const base = zero_size_base.load(.monotonic);
    return base != 0 and @intFromPtr(ptr) -% base < zero_size_region_bytes;
}

// ---- Fill ---------------------------------------------------------------

/// Fills a block being freed, past the words the free lists and the freed
/// mark use.
pub fn fillFreed(block: [*]u8, block_bytes: usize) void {
    // Zeroing supersedes the fill: freed blocks must stay zero.
    if (!config.fill_freed_available or !fill_freed or config.hardening.zero_freed) return;
    const keep = @min(block_bytes, 2 * @sizeOf(usize));
    @memset(block[keep..block_bytes], fill_byte);
}

test "links decode to what was encoded" {
    if (!config.secure) return;
    init();
    const at: usize = 0x1234_5670;
    for ([_]usize{ 0, 0x1234_5680, 0x1234_0000 }) |n| {
        try std.testing.expectEqual(n, decodeLink(at, encodeLink(at, n)));
    }
    if (config.hardening.encode_lists) {
        // The same link stored at another block decodes elsewhere.
        try std.testing.expect(decodeLink(at + 16, encodeLink(at, 0x1234_5680)) != 0x1234_5680);
    }
}

test "a written free block is found, and only past the skipped bytes" {
    var block: [64]u8 align(8) = @splat(0);
    try std.testing.expectEqual(@as(?usize, null), firstNonzero(&block, 8, 64));
    block[3] = 1;
    try std.testing.expectEqual(@as(?usize, null), firstNonzero(&block, 8, 64));
    block[41] = 7;
    try std.testing.expectEqual(@as(?usize, 41), firstNonzero(&block, 8, 64));
}

test "a written byte is found anywhere: in the vector part and in the tail" {
    // Up to two vectors and a tail past the skipped word: every length the
    // overlapping ORs treat apart (1, 2-3, 4-7 and 8 or more words).
    var block: [8 * (1 + 2 * 8 + 7)]u8 align(8) = @splat(0);
    for (1..block.len / 8) |words| {
        const end = 8 + 8 * words;
        for (8..end) |at| {
            block[at] = 0x80;
            try std.testing.expectEqual(@as(?usize, at), firstNonzero(&block, 8, end));
            block[at] = 0;
        }
        try std.testing.expectEqual(@as(?usize, null), firstNonzero(&block, 8, end));
    }
}

test "a tail canary swapped in names the first byte it replaced that was written" {
    if (!config.secure) return;
    init();
    var block: [64]u8 align(8) = @splat(0);
    const end = block[0..].ptr + block.len;
    try std.testing.expectEqual(@as(?usize, null), swapTailCanary(end));
    try std.testing.expect(tailCanaryIntact(end));
    @memset(block[56..], 0);
    block[61] = 0x5a;
    block[63] = 0x01;
    try std.testing.expectEqual(@as(?usize, 5), swapTailCanary(end));
    try std.testing.expect(tailCanaryIntact(end));
}

test "shuffle is a permutation" {
    var state: u64 = 12345;
    var order: [100]u16 = undefined;
    shuffle(&state, &order);
    var seen: [100]bool = @splat(false);
    for (order) |i| {
        try std.testing.expect(!seen[i]);
        seen[i] = true;
    }
}

test "a freed large block reads back zeroes when handed out again, also where a purge keeps its bytes" {
    if (!config.hardening.zero_freed) return error.SkipZigTest;
    const block_bytes = 256 * 1024;
    comptime assert(block_bytes > zero_whole_bytes_max);
    const page = os.pageSize();
    const region = os.map(block_bytes + page, page, 0) orelse return error.OutOfMemory;
    defer os.unmap(region, block_bytes + page);
    // A kernel before 5.18 refuses to purge locked memory (Linux); wasm and
    // MADV_FREE (macOS, the BSDs) keep the bytes anyway.
    const linux = builtin.os.tag == .linux;
    defer if (linux) {
        os.backend.test_drop_refused = false;
    };
    for ([_]bool{ false, true }) |refused| {
        if (refused and !linux) continue;
        if (linux) os.backend.test_drop_refused = refused;
        const block = region[0..block_bytes];
        @memset(block, 0xaa);
        scrubFreed(block.ptr, block_bytes, link_bytes);
        try std.testing.expectEqual(@as(?usize, null), try reuseFreed(block.ptr, block_bytes, link_bytes, true));
        for (block[link_bytes..]) |byte| try std.testing.expectEqual(@as(u8, 0), byte);
    }
}
