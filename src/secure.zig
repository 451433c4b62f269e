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
//! - Fill: freed blocks are filled with `fill_byte` past their first two
//!   words, so a read after free sees the pattern instead of old data.
//!
//! Guard pages are set where memory is mapped (segment.zig, huge.zig).
const std = @import("std");
const assert = std.debug.assert;
const config = @import("config.zig");
const os = @import("os.zig");

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

inline fn canaryByte(address: usize) u8 {
    return @truncate(mix(address ^ secret()) >> 56);
}

/// Writes the canary after `len` requested bytes of a block with `usable`.
pub fn writeCanary(ptr: [*]u8, len: usize, usable: usize) void {
    if (!config.hardening.canary) return;
    assert(len <= usable);
    for (len..@min(usable, len + canary_bytes_max)) |i| ptr[i] = canaryByte(@intFromPtr(ptr) + i);
}

/// Whether the canary after `len` bytes is intact.
pub fn canaryIntact(ptr: [*]const u8, len: usize, usable: usize) bool {
    if (!config.hardening.canary) return true;
    for (len..@min(usable, len + canary_bytes_max)) |i| {
        if (ptr[i] != canaryByte(@intFromPtr(ptr) + i)) return false;
    }
    return true;
}

// ---- Fill ---------------------------------------------------------------

/// Fills a block being freed, past the words the free lists and the freed
/// mark use.
pub fn fillFreed(block: [*]u8, block_bytes: usize) void {
    if (!config.fill_freed_available or !fill_freed) return;
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
