//! Checks around allocation and free that a C library must make (C programs
//! free pointers kennel never returned) and that the hardened Zig allocator
//! makes too (config.validate_frees). Everything here runs before the heap's
//! free path or after its alloc path; the heap itself trusts its input.
//!
//! - `validate`: the segment map (segment.zig) must list the pointer's
//!   segment header, so a foreign pointer is rejected before anything
//!   behind it is read; the page must be in use; the pointer must be the
//!   start of a block handed out at least once (by a multiply, not a
//!   divide), or the over-aligned address inside one, which its block's
//!   first word names (`alignedTag`, written when it is handed out).
//! - Double frees, fast C library: a free writes a mark (the page's
//!   address) into the block's second word, and allocation clears it, so a
//!   second free of a block still free is seen (unless the program
//!   overwrote the mark meanwhile). Blocks linked into a free list without
//!   ever being handed out carry the mark too (page.extend), so a free of
//!   one is caught as well.
//! - The fast C library's free (`freeableInOwn`) makes the same checks in
//!   one pass with the lookups the free needs, for a pointer into the
//!   segment its thread freed into last (known listed and owned, so the map
//!   and the owner are not asked again); anything it does not pass goes to
//!   `validate`, which names the fault.
//! - Double frees, hardened: each block has a bit in its segment's live map
//!   (segment.zig), set by allocation and cleared by free, both with an
//!   atomic read-modify-write. A free that finds the bit clear is a double
//!   free, whatever the program wrote into the freed block, and of two
//!   threads freeing a block at once exactly one finds it set.
//! - Hardened extras: canaries after the requested length (Zig) or at the
//!   end of every block (C), zeroing freed blocks and checking them when
//!   handed out again, guarding freed large blocks, and the fill of freed
//!   blocks (secure.zig).
//! - With -Dvalgrind, blocks are described to memcheck (memcheck.zig).
//!
//! A failed check prints one line naming the fault and the pointer and
//! aborts.
const std = @import("std");
const assert = std.debug.assert;
const config = @import("config.zig");
const os = @import("os.zig");
const secure = @import("secure.zig");
const size_class = @import("size_class.zig");
const huge = @import("huge.zig");
const segment_mod = @import("segment.zig");
const Segment = segment_mod.Segment;
const page_mod = @import("page.zig");
const Page = page_mod.Page;
const Heap = @import("heap.zig").Heap;
const memcheck = @import("memcheck.zig");

/// The smallest block the checks work with: the free-list link and the
/// freed mark (two words), and 16 bytes with 32-bit words too: the live
/// map's size assumes it. C requests are rounded to 16 anyway; the hardened
/// Zig allocator rounds up to it.
pub const block_bytes_min = @max(16, 2 * @sizeOf(usize));

comptime {
    std.debug.assert(segment_mod.small_page_bytes / block_bytes_min == Segment.live_bits_per_page);
}

/// The first two words of a block: its free-list link and its freed mark.
pub const Words = [2]usize;

/// C (hardened with canaries): bytes at the end of every block that hold its
/// canary; malloc_usable_size leaves them out and every C allocation asks
/// the heap for that many more.
pub const c_tail_bytes = if (config.hardening.canary and config.c_library) secure.tail_canary_bytes else 0;

/// The bytes a C request of `size` asks of the heap; null if too many.
pub inline fn cRequest(size: usize) ?usize {
    if (c_tail_bytes == 0) return size;
    return std.math.add(usize, size, c_tail_bytes) catch null;
}

/// Whether handing a block out or freeing it looks at the block itself:
/// zeroing and its check, guarding large ones.
const scrubs = config.hardening.zero_freed or config.hardening.guard_freed_large;

/// The fast C library's freed mark of a block of `page`: the address of the
/// page's entry in its segment's header. No block lies in a header, so the
/// mark is no pointer to a block a program may keep in the word; and free
/// has the address at hand, where a constant would take an instruction to
/// load.
pub inline fn freedMark(page: *const Page) usize {
    return @intFromPtr(page);
}

/// Whether blocks carry the fast C library's freed mark (`freedMark`):
/// pointers are validated, without the hardened live map, and not under
/// memcheck (which leaves the check to `markFreed`).
pub const marks_freed = config.validate_frees and !config.hardening.check_frees and !config.valgrind;

/// What the first word of a block holds while the block is handed out at
/// `ptr`, an address inside it (over-aligned): that word lies before `ptr`,
/// where the program does not write, and `validate` accepts an interior
/// pointer only if the word names it. A multiply mixes the address, so the
/// tag is no value a program keeps in its blocks by chance.
inline fn alignedTag(ptr: [*]const u8) usize {
    const mixer: usize = if (@bitSizeOf(usize) == 64) 0x9e3779b97f4a7c15 else 0x9e3779b9;
    return @intFromPtr(ptr) *% mixer;
}

/// A block's word and bit in its segment's block map (hardened), and the
/// bit beside it that says it was handed out since its page was set up
/// (`handed`; 0 in a page of too many blocks to keep one: see
/// Segment.live_map_bytes).
const LiveBit = struct { word: *std.atomic.Value(usize), mask: usize, handed: usize };

fn liveBit(segment: *Segment, page: *const Page, block: *const Words) LiveBit {
    return liveBitAt(segment, page, size_class.blockIndex(page.class, @intFromPtr(block) - @intFromPtr(page.area)));
}

/// `liveBit` of the block at `index` in its page.
inline fn liveBitAt(segment: *Segment, page: *const Page, index: usize) LiveBit {
    assert(index < page.reserved and index < Segment.live_bits_per_page);
    const pairs = page.reserved <= Segment.handed_blocks_max;
    // In pairs the handed bit is the next one, in the same word (2 * index
    // is even).
    const bit = if (pairs) 2 * index else index;
    const bits = @bitSizeOf(usize);
    const mask = @as(usize, 1) << @intCast(bit % bits);
    return .{ .word = &segment.liveWords(page.index)[bit / bits], .mask = mask, .handed = if (pairs) mask << 1 else 0 };
}

/// A block that passed `validate`.
pub const Checked = struct {
    /// Where the block starts (the pointer, unless over-aligned).
    block: *Words,
    /// Its page (not huge).
    page: *Page,
    /// Its live bit (hardened, not huge).
    live: if (config.hardening.check_frees) LiveBit else void,
    /// Bytes from the pointer to the end of the block.
    usable: usize,
    huge: ?*Segment,
};

/// A block the fast C free may push onto its page's local list at once.
pub const Freeable = struct { page: *Page, block: *Words };

/// The fast C library's free checks (config.fused_free) for a pointer into
/// `segment_address`, a segment of pages that the calling thread's heap
/// owns and found in the segment map before (Heap.free_segment), fused with
/// the lookups the free needs anyway. Null when the pointer lies elsewhere,
/// or is not the start of a block the page handed out, or its page has
/// flags (full, or over-aligned blocks), or the block carries the freed
/// mark: the generic path (`beforeFree`) tells those cases apart and names
/// a fault exactly as before.
pub inline fn freeableInOwn(segment_address: usize, ptr: ?*anyopaque) ?Freeable {
    comptime assert(config.fused_free);
    const address = @intFromPtr(ptr);
    // The segment is aligned to its size: for a pointer inside it, the
    // exclusive or is the pointer's offset (one instruction fewer than a
    // mask and a compare, then a mask for the slice). Heap.no_segment is
    // aligned too, and no pointer a program holds lies under it, null
    // included. On 32-bit targets no such address exists: mask and compare.
    const offset_in_segment = address ^ segment_address;
    if (Heap.no_segment_is_aligned) {
        if (offset_in_segment >= segment_mod.segment_size_bytes) return null;
    } else if (address & ~@as(usize, segment_mod.segment_size_bytes - 1) != segment_address) return null;
    const segment: *Segment = @ptrFromInt(segment_address);
    // The owner wrote every field read here; this thread is the owner.
    const page = segment.pageAtOffset(offset_in_segment);
    // A free slice's entry has free_limit 0. Below the area (a pointer into
    // the header) the offset wraps to 2^32 minus less than a segment, and
    // exactIndex takes it past every page's block count.
    const offset: u32 = @truncate(address -% @intFromPtr(page.area));
    const divisor: size_class.Divisor = .{ .inverse = page.block_inverse, .shift = @intCast(page.block_shift) };
    if (divisor.exactIndex(offset) >= page.free_limit) return null;
    const block: *Words = @ptrFromInt(address);
    // C rounds every request to 16 bytes: every block holds the mark.
    assert(page.block_size >= block_bytes_min);
    if (block[1] == freedMark(page)) return null;
    return .{ .page = page, .block = block };
}

/// `freeableInOwn` for a pointer into any segment of pages that `heap`
/// owns, not only the one it freed into last: a program whose live blocks
/// fill many segments frees into them in turn (big_heap: 91% of its frees
/// missed the remembered segment and took the generic path). The segment
/// map first, as in `validate`: nothing behind a foreign pointer is read
/// before it says the segment exists; then its kind and owner. Null sends
/// the free to the generic path, which names any fault.
pub fn freeableInHeap(heap: *const Heap, ptr: ?*anyopaque) ?Freeable {
    comptime assert(config.fused_free);
    const base = @intFromPtr(ptr) & ~@as(usize, segment_mod.segment_size_bytes - 1);
    if (!segment_mod.segment_map.contains(base)) return null;
    const segment: *Segment = @ptrFromInt(base);
    // Only this thread makes its heap a segment's owner, or stops it being
    // one: a stale value is never `heap`.
    if (segment.kind != .pages or segment.ownerRelaxed() != heap) return null;
    return freeableInOwn(base, ptr);
}

/// Marks a block `freeableInOwn` passed as freed (see markFreed).
pub inline fn markFreedFast(f: Freeable) void {
    f.block[1] = freedMark(f.page);
}

/// Validates a pointer passed to `function` (free, realloc, operator delete,
/// malloc_usable_size). Aborts, naming the pointer, unless it is a live
/// block kennel returned.
pub fn validate(ptr: [*]u8, comptime function: []const u8) Checked {
    const address = @intFromPtr(ptr);
    // The map first, on the address alone: nothing behind a foreign
    // pointer may be read (and its segment address may even be 0).
    // A huge block's mapping leaves the map when it is freed (unmapped, or
    // in the hardened build never cached): a second free of one ends here.
    if (!segment_mod.segment_map.contains((address -% 1) & ~@as(usize, segment_mod.segment_size_bytes - 1)))
        invalid(function, ptr, "not allocated by kennel (or a huge block freed already)");
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) {
        if (ptr != segment.pages[0].area) invalid(function, ptr, "points into the middle of a block");
        // Monotonic: a racing free is caught by the CAS in markFreed.
        if (@atomicLoad(page_mod.BlockCount, &segment.pages[0].used, .monotonic) != 1) doubleFree(function, ptr);
        return .{ .block = @ptrCast(@alignCast(ptr)), .page = undefined, .usable = Heap.usableSize(ptr), .huge = segment, .live = undefined };
    }
    // The map was asked about the address one byte lower (a huge block may
    // start a segment's length into its mapping): a pointer just past a
    // segment of pages lies in the next one, which is no block.
    if (address - @intFromPtr(segment) >= segment_mod.segment_size_bytes) invalid(function, ptr, "not allocated by kennel");
    // Monotonic: the page of a live block was set up before the block was
    // handed out, which happened before the caller got the pointer.
    const free_slices = Segment.loadMaskRelaxed(&segment.free_mask);
    const slice: u6 = @intCast((address - @intFromPtr(segment)) >> segment_mod.slice_shift);
    if (free_slices & (@as(u64, 1) << slice) != 0) invalid(function, ptr, "in memory kennel does not use (freed twice?)");
    const page = segment.pageOf(ptr);
    const offset = address -% @intFromPtr(page.area);
    // Monotonic: as above; capacity only grows while the page is in use.
    const capacity = @atomicLoad(page_mod.BlockCount, &page.capacity, .monotonic);
    if (offset >= @as(usize, capacity) * page.block_size) invalid(function, ptr, "not a block kennel handed out");
    const index = size_class.blockIndex(page.class, offset);
    const start = index * page.block_size;
    const block: *Words = @ptrCast(@alignCast(page.area + start));
    const checked: Checked = .{
        .block = block,
        .page = page,
        .usable = start + page.block_size - offset,
        .huge = null,
        .live = if (config.hardening.check_frees) liveBitAt(segment, page, index) else {},
    };
    // A page that never held an over-aligned block handed out block starts
    // only: an interior pointer there is one, whether or not its block is
    // free (it was named a double free when the block was).
    if (start != offset and !page.loadFlags().has_aligned) invalid(function, ptr, "points into the middle of a block");
    // C, hardened: a page's first block is never handed out (its canary
    // guards the second: secure.keepsTailCanary). Named as such, not as the
    // double free its clear live bit would say.
    if (index == 0 and secure.keepsTailCanary(page.block_size)) invalid(function, ptr, "not a block kennel handed out");
    if (config.hardening.check_frees) {
        // Monotonic: a racing free is caught by the RMW in markFreed.
        if (checked.live.word.load(.monotonic) & checked.live.mask == 0) doubleFree(function, ptr);
    } else if (!config.valgrind and page.block_size >= block_bytes_min and
        @atomicLoad(usize, &block[1], .monotonic) == freedMark(page))
    {
        // (Under memcheck the word may be the program's uninitialized data:
        // the check is left to markFreed, and to memcheck.)
        doubleFree(function, ptr);
    }
    // After the double-free checks, so that a second free of an
    // over-aligned block, whose tag its first free overwrote, is named as
    // one. The tag is read only in a page that hands out such blocks.
    if (start != offset) {
        memcheck.wordAccess(&block[0]);
        const tagged = block[0] == alignedTag(ptr);
        memcheck.wordDone(&block[0]);
        if (!tagged) invalid(function, ptr, "points into the middle of a block");
    }
    return checked;
}

/// Marks a validated block freed; aborts if another free marked it first.
fn markFreed(ptr: [*]u8, checked: Checked, comptime function: []const u8) void {
    if (checked.huge) |segment| {
        // A huge block is its own mapping: `used` says whether it is live.
        // AcqRel: two threads freeing it at once see each other.
        if (@cmpxchgStrong(page_mod.BlockCount, &segment.pages[0].used, 1, 0, .acq_rel, .monotonic) != null) doubleFree(function, ptr);
        return;
    }
    if (config.hardening.check_frees) {
        // Monotonic: only this word matters, and RMWs of it are totally
        // ordered: the second of two frees finds the bit the first cleared.
        if (checked.live.word.fetchAnd(~checked.live.mask, .monotonic) & checked.live.mask == 0) doubleFree(function, ptr);
        return;
    }
    const block = checked.block;
    memcheck.wordAccess(&block[1]);
    defer memcheck.wordDone(&block[1]);
    // `validate` compared the mark already, except under memcheck.
    if (config.valgrind and block[1] == freedMark(checked.page)) doubleFree(function, ptr);
    block[1] = freedMark(checked.page);
}

/// After any allocation: clears the block's freed mark (C, or hardened),
/// writes the canary after `len` bytes (hardened Zig), and describes the
/// block to memcheck. `len` is null in C, where the program may use the
/// whole usable size. Blocks are at least `block_bytes_min` when marks are
/// on: C rounds every request to 16 bytes, and the hardened Zig allocator
/// rounds up to it. False (hardened) when the block could not be made
/// accessible again (out of memory): it went back, and the allocation
/// fails. Always true in the fast builds.
pub inline fn afterAlloc(ptr: [*]u8, len: ?usize, alignment: usize, comptime zeroed: bool) bool {
    // Looked up once for the live bit, the zero check and the canary.
    const at = if (looks_up_page) Placed.of(ptr, alignment) else {};
    const handed_before = if (Segment.has_block_map) markLive(ptr, at) else true;
    if (config.validate_frees and !config.hardening.check_frees) {
        const block = blockOf(ptr, alignment);
        memcheck.wordAccess(&block[1]);
        // Monotonic: a plain store; only a double free could race with it.
        @atomicStore(usize, &block[1], 0, .monotonic);
        memcheck.wordDone(&block[1]);
    }
    if (scrubs and !reuse(at, handed_before)) {
        giveBack(ptr, alignment);
        return false;
    }
    if (config.hardening.canary) {
        if (len) |n| secure.writeCanary(ptr, n, at.usable(ptr)) else if (c_tail_bytes != 0) tailCanaryAfterAlloc(ptr, at, zeroed);
    }
    if (config.validate_frees and alignment > segment_mod.block_align_max_bytes) tagAligned(ptr, alignment);
    if (config.valgrind) memcheck.allocated(ptr, len orelse Heap.usableSize(ptr), zeroed);
    return true;
}

/// C: the canary at the end of a block just handed out. A block that keeps
/// its canary (secure.keepsTailCanary) must find it intact, or it was
/// written while the block was free; unless its allocation cleared the
/// block (`zeroed`, calloc), which then writes it again, as every other
/// block does.
fn tailCanaryAfterAlloc(ptr: [*]u8, at: Placed, comptime zeroed: bool) void {
    const end = ptr + at.usable(ptr);
    if (zeroed or at.isHuge() or !secure.keepsTailCanary(at.page.block_size)) return secure.writeTailCanary(end);
    if (!secure.tailCanaryIntact(end))
        os.fatal("write after free: the canary at the end of the free block 0x{x} was overwritten before it was handed out again (or an underflow from the block above it)", .{@intFromPtr(at.block)});
}

/// Whether `afterAlloc` looks at the block's page: for its live bit, its
/// zero check or its canary (hardened).
const looks_up_page = Segment.has_block_map or scrubs or config.hardening.canary;

/// Where a block just handed out lies, looked up once (`afterAlloc`).
/// `page` and `block` mean nothing for a huge block.
const Placed = struct {
    segment: *Segment,
    page: *Page,
    block: *Words,

    inline fn of(ptr: [*]u8, alignment: usize) Placed {
        const segment = Segment.ofPtr(ptr);
        if (segment.kind == .huge) return .{ .segment = segment, .page = undefined, .block = undefined };
        const page = segment.pageOf(ptr);
        // A block aligned no further than every block is starts at the pointer.
        const block: *Words = if (alignment <= segment_mod.block_align_max_bytes) @ptrCast(@alignCast(ptr)) else @ptrCast(page.blockStart(ptr));
        assert(@intFromPtr(block) <= @intFromPtr(ptr) and @intFromPtr(ptr) - @intFromPtr(block) < page.block_size);
        return .{ .segment = segment, .page = page, .block = block };
    }

    inline fn isHuge(at: Placed) bool {
        return at.segment.kind == .huge;
    }

    /// Bytes from `ptr` to the end of its block (Heap.usableSize).
    inline fn usable(at: Placed, ptr: [*]u8) usize {
        if (at.isHuge()) return huge.usableSize(at.segment);
        return @intFromPtr(at.block) + at.page.block_size - @intFromPtr(ptr);
    }
};

/// A block just taken that `reuse` could not make accessible goes back as
/// it was: free, guarded, its live bit clear or its freed mark written.
fn giveBack(ptr: [*]u8, alignment: usize) void {
    const segment = Segment.ofPtr(ptr);
    const page = segment.pageOf(ptr);
    if (config.hardening.check_frees) {
        const bit = liveBit(segment, page, blockOf(ptr, alignment));
        // Monotonic: as in markFreed.
        _ = bit.word.fetchAnd(~bit.mask, .monotonic);
    } else if (config.validate_frees) {
        // Monotonic: as in afterAlloc, which cleared it.
        @atomicStore(usize, &blockOf(ptr, alignment)[1], freedMark(page), .monotonic);
    }
    Heap.free(ptr);
}

/// An over-aligned block handed out at `ptr` inside it: its first word, in
/// the padding before `ptr`, names `ptr` for `validate` (after the zero
/// check of `reuse`, which leaves that word out).
fn tagAligned(ptr: [*]u8, alignment: usize) void {
    const block = blockOf(ptr, alignment);
    if (@intFromPtr(block) == @intFromPtr(ptr)) return;
    // Blocks start at multiples of 8: the padding holds a word.
    assert(@intFromPtr(ptr) - @intFromPtr(block) >= @sizeOf(usize));
    memcheck.wordAccess(&block[0]);
    defer memcheck.wordDone(&block[0]);
    block[0] = alignedTag(ptr);
}

/// A block is handed out (zero_freed, guard_freed_large): a large one's
/// guarded pages become accessible, and everything past its link must still
/// be zero, or it was written while free. A block not handed out before
/// since its page was set up (`handed_before` false) was never freed there:
/// nothing was guarded, and only the kernel page holding its link is
/// checked (see secure.reuseFreed). False when its guarded pages could not
/// be made accessible (out of memory).
fn reuse(at: Placed, handed_before: bool) bool {
    if (at.isHuge()) return true;
    const block: [*]u8 = @ptrCast(at.block);
    const block_size = at.page.block_size;
    // A canary the block keeps is checked by afterAlloc, not as zeros.
    const kept_tail: usize = if (secure.keepsTailCanary(block_size)) c_tail_bytes else 0;
    var written = secure.reuseFreed(block, block_size - kept_tail, secure.link_bytes, handed_before) catch return false;
    // A block handed out for the first time had only its first kernel page
    // checked. A large block's last bytes (it keeps no canary while free)
    // are where its C canary goes, about to be written: they also hold
    // what an underflow of up to 8 bytes from above wrote, which the
    // canary would hide for good. Checked as the canary is written, with one
    // access: that kernel page is often fresh.
    if (written == null and !handed_before and c_tail_bytes != 0 and kept_tail == 0 and config.hardening.zero_freed) {
        if (secure.swapTailCanary(block + block_size)) |offset| written = block_size - c_tail_bytes + offset;
    }
    if (written) |offset|
        os.fatal("write after free: the free block 0x{x} was written at offset {d} before it was handed out again", .{ @intFromPtr(block), offset });
    return true;
}

/// Sets the live bit (check_frees) and the handed-out bit (zeroing and
/// guarding) of a block just handed out, with one atomic. Returns whether
/// the block may have been freed since its page was set up: it was handed
/// out before, or its page keeps no handed-out bits.
fn markLive(ptr: [*]u8, at: Placed) bool {
    if (at.isHuge()) return true; // `used` says it (see markFreed)
    const bit = liveBit(at.segment, at.page, at.block);
    const live = if (config.hardening.check_frees) bit.mask else 0;
    const handed = if (scrubs) bit.handed else 0;
    // Monotonic: as in markFreed. A live bit already set means the free
    // list handed out a live block: only a corrupted list does that.
    const old = bit.word.fetchOr(live | handed, .monotonic);
    if (old & live != 0)
        os.fatal("corrupted free list: the live block 0x{x} was handed out again", .{@intFromPtr(ptr)});
    return handed == 0 or old & handed != 0;
}

/// After a block was resized: in place (`new == old`) or moved whole (huge).
/// Lengths as in `afterAlloc`.
pub inline fn afterResize(old: [*]u8, old_len: ?usize, new: [*]u8, new_len: ?usize) void {
    if (config.hardening.canary) {
        if (new_len) |n| secure.writeCanary(new, n, Heap.usableSize(new)) else if (c_tail_bytes != 0) secure.writeTailCanary(new + Heap.usableSize(new));
    }
    if (!config.valgrind) return;
    const len = new_len orelse Heap.usableSize(new);
    if (new == old) memcheck.resized(new, old_len.?, len) else memcheck.moved(old, new, len);
}

/// Before a block goes back to its heap: validate (C, or hardened), check
/// the canary when the requested length is known (Zig), mark, fill, and
/// tell memcheck. Returns the block's page where the checks looked it up,
/// for the quarantine, which would look again.
pub inline fn beforeFree(ptr: [*]u8, len: ?usize, comptime function: []const u8) ?Found {
    defer memcheck.freed(ptr);
    if (!config.validate_frees) {
        if (config.hardening.canary) if (len) |n| checkCanary(ptr, n, Heap.usableSize(ptr));
        if (scrubs) scrubUnchecked(ptr);
        if (config.fill_freed_available) fillFreed(ptr);
        return null;
    }
    // Inlined into every free path (free, operator delete and its aligned
    // form): it is most of a free's work, and the compiler keeps it out of
    // line once two callers share one instance, which costs a call and the
    // spills around it on every free.
    const checked = @call(.always_inline, validate, .{ ptr, function });
    if (config.hardening.canary) {
        if (len) |n| checkCanary(ptr, n, checked.usable) else if (c_tail_bytes != 0) checkCanaries(ptr, checked, function);
    }
    markFreed(ptr, checked, function);
    if ((scrubs or config.fill_freed_available) and checked.huge == null) {
        const block: [*]u8 = @ptrCast(checked.block);
        // What the free may overwrite: not a canary the block keeps.
        const kept_tail: usize = if (secure.keepsTailCanary(checked.page.block_size)) c_tail_bytes else 0;
        const bytes = @intFromPtr(ptr) + checked.usable - @intFromPtr(block) - kept_tail;
        // The fast C library's freed mark (second word) stays.
        const keep = if (config.hardening.check_frees) secure.link_bytes else @sizeOf(Words);
        if (scrubs) secure.scrubFreed(block, bytes, keep);
        if (config.fill_freed_available) secure.fillFreed(block, bytes);
    }
    return .{ .page = if (checked.huge == null) checked.page else null };
}

/// What the checks of a free found out about the block: its page, null
/// for a huge block.
pub const Found = struct { page: ?*Page };

fn checkCanary(ptr: [*]u8, len: usize, usable: usize) void {
    if (!secure.canaryIntact(ptr, len, usable))
        os.fatal("heap overflow: the bytes after the {d}-byte block at 0x{x} were overwritten", .{ len, @intFromPtr(ptr) });
}

/// C: the canary at the end of the block whose pointer `ptr` has `usable`
/// bytes to its end (canary included) must be intact.
pub fn checkTailCanary(ptr: [*]u8, usable: usize, comptime function: []const u8) void {
    if (!secure.tailCanaryIntact(ptr + usable))
        os.fatal(function ++ "(): heap overflow: the canary at the end of the block 0x{x} was overwritten (a write past its usable size, or before the block above it)", .{@intFromPtr(ptr)});
}

/// C, at free and realloc: the block's own tail canary, and where the block
/// below keeps its canary (secure.keepsTailCanary), that one too: the bytes
/// just before the block, which an underflow from it overwrites first.
pub fn checkCanaries(ptr: [*]u8, checked: Checked, comptime function: []const u8) void {
    checkTailCanary(ptr, checked.usable, function);
    if (checked.huge != null or !secure.keepsTailCanary(checked.page.block_size)) return;
    // The page's first block, never handed out, has none below.
    assert(@intFromPtr(checked.block) > @intFromPtr(checked.page.area));
    if (!secure.tailCanaryIntact(@ptrCast(checked.block)))
        os.fatal(function ++ "(): heap underflow: the bytes before the block 0x{x} were overwritten (a write before its start, or past the end of the block below it)", .{@intFromPtr(ptr)});
}

/// Zeroing and guarding without validation (a build without checked frees).
fn scrubUnchecked(ptr: [*]u8) void {
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) return;
    const page = segment.pageOf(ptr);
    const block: [*]u8 = if (page.loadFlags().has_aligned) @ptrCast(page.blockStart(ptr)) else ptr;
    secure.scrubFreed(block, page.block_size, secure.link_bytes);
}

/// The fill without validation (a build with the fill alone).
fn fillFreed(ptr: [*]u8) void {
    if (!secure.fill_freed) return;
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) return;
    const page = segment.pageOf(ptr);
    const block: [*]u8 = if (page.loadFlags().has_aligned) @ptrCast(page.blockStart(ptr)) else ptr;
    secure.fillFreed(block, page.block_size);
}

/// The start of the block that `ptr` (allocated with `alignment`) lies in.
fn blockOf(ptr: [*]u8, alignment: usize) *Words {
    if (alignment <= segment_mod.block_align_max_bytes) return @ptrCast(@alignCast(ptr));
    const segment = Segment.ofPtr(ptr);
    if (segment.kind == .huge) return @ptrCast(@alignCast(ptr));
    return @ptrCast(segment.pageOf(ptr).blockStart(ptr));
}

/// Segment-sized steps `guardHit` looks down for the header of a huge
/// mapping: 256 GiB, far beyond any mapping a process gets.
const guard_search_steps_max = 1 << 16;

/// If `address` lies in one of kennel's guard pages (hardened), the address
/// of the segment or huge mapping it ends. Safe in a signal handler: it
/// reads only the segment map and the headers it lists.
pub fn guardHit(address: usize) ?usize {
    const guard = segment_mod.guardBytes();
    if (guard == 0) return null;
    segment_mod.segment_map.beginRead();
    defer segment_mod.segment_map.endRead();
    // The nearest header at or below the address owns it, if anything does.
    var base = address & ~@as(usize, segment_mod.segment_size_bytes - 1);
    for (0..guard_search_steps_max) |_| {
        if (segment_mod.segment_map.contains(base)) {
            const segment: *Segment = @ptrFromInt(base);
            const end = base + if (segment.kind == .huge) segment.huge_mapping_bytes else segment_mod.segment_size_bytes;
            if (address >= end - guard and address < end) return base;
            if (segment.kind == .pages and address < end and (pageGuardHit(segment, address) or segment.frontGuardHit(address))) return base;
            // The guard between a segment's or huge mapping's header and its
            // blocks.
            const offset = if (segment.kind == .huge) huge.headerGuardOffset() else Segment.headerGuardOffset();
            const header_guard = base + (offset orelse return null);
            return if (address >= header_guard and address < header_guard + guard) base else null;
        }
        if (base == 0) return null;
        base -= segment_mod.segment_size_bytes;
    }
    return null;
}

/// Whether `address` lies in a guard between pages: the last kernel page of
/// a slice whose guard is closed (Segment.guards_closed), at the end of a
/// medium or large page or a small page on a guarded slice in use, or left
/// closed by one that went back to the segment. Safe in a signal handler,
/// as `guardHit` is.
fn pageGuardHit(segment: *Segment, address: usize) bool {
    const guard = segment_mod.pageGuardBytes();
    if (guard == 0) return false;
    const base = @intFromPtr(segment);
    assert(address >= base and address - base < segment_mod.segment_size_bytes);
    const slice = (address - base) >> segment_mod.slice_shift;
    const slice_end = base + ((slice + 1) << segment_mod.slice_shift);
    if (address < slice_end - guard) return false;
    // A snapshot of an owner-written mask (see loadMaskRelaxed): the bit of
    // a guard that faulted was set before the access.
    return Segment.loadMaskRelaxed(&segment.guards_closed) & (@as(u64, 1) << @intCast(slice)) != 0;
}

/// The page in use whose slices hold `address`, an address in `segment` (a
/// segment of pages), if any. Safe in a signal handler: it only loads
/// fields, each set up before any block of the page was handed out.
fn pageInUseAt(segment: *Segment, address: usize) ?*Page {
    const base = @intFromPtr(segment);
    assert(address >= base and address - base < segment_mod.segment_size_bytes);
    const slice = (address - base) >> segment_mod.slice_shift;
    // Monotonic, both: a snapshot (see above).
    const first = @atomicLoad(u8, &segment.pages[slice].first_slice, .monotonic);
    if (Segment.loadMaskRelaxed(&segment.free_mask) & (@as(u64, 1) << @intCast(first)) != 0) return null;
    return &segment.pages[first];
}

/// If `address` lies in a block of a large page (above 64 KiB, whose freed
/// blocks are guarded: config.hardening.guard_freed_large), that block's
/// start. Safe in a signal handler, as `guardHit` is.
pub fn largeBlockHit(address: usize) ?usize {
    if (!config.hardening.guard_freed_large) return null;
    segment_mod.segment_map.beginRead();
    defer segment_mod.segment_map.endRead();
    const base = address & ~@as(usize, segment_mod.segment_size_bytes - 1);
    if (!segment_mod.segment_map.contains(base)) return null;
    const segment: *Segment = @ptrFromInt(base);
    // Monotonic, all: a snapshot of fields set up before any block of the
    // page was handed out.
    if (@atomicLoad(segment_mod.SegmentKind, &segment.kind, .monotonic) != .pages) return null;
    const page = pageInUseAt(segment, address) orelse return null;
    const block_size = @atomicLoad(u32, &page.block_size, .monotonic);
    if (block_size <= segment_mod.medium_block_max_bytes) return null;
    const capacity = @atomicLoad(page_mod.BlockCount, &page.capacity, .monotonic);
    const area = @intFromPtr(page.area);
    if (block_size == 0 or address < area or address - area >= @as(usize, capacity) * block_size) return null;
    return area + (address - area) / block_size * block_size;
}

fn invalid(comptime function: []const u8, ptr: [*]u8, comptime why: []const u8) noreturn {
    os.fatal(function ++ "(): invalid pointer 0x{x}: " ++ why, .{@intFromPtr(ptr)});
}

fn doubleFree(comptime function: []const u8, ptr: [*]u8) noreturn {
    // The freed mark is also on blocks linked but never handed out (see
    // page.extend), so the fast library cannot tell those two apart.
    const also = if (marks_freed) " (the block is free: freed before, or never handed out)" else "";
    os.fatal(function ++ "(): double free of 0x{x}" ++ also, .{@intFromPtr(ptr)});
}
