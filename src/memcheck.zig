//! Valgrind's memcheck, told about kennel's blocks (build option
//! -Dvalgrind, config.valgrind): with it, memcheck reports reads and writes
//! of freed blocks, reads of uninitialized bytes and leaked blocks in a
//! program that uses kennel as it does for glibc's malloc. Without the
//! option every function here is empty.
//!
//! - A block handed out is a "malloc-like" block (`allocated`) of the
//!   requested length in Zig, of its usable size in C (where a program may
//!   use all of malloc_usable_size); a freed one is "free-like" (`freed`):
//!   memcheck marks its bytes inaccessible, and reports a second free.
//! - Kennel itself reads and writes a freed block's first word (the free-list
//!   link; see page.zig) and second (the freed mark; check.zig):
//!   `wordAccess` makes the word accessible for the moment, and `wordDone`
//!   takes it back. Blocks that were never handed out
//!   also end up inaccessible once linked, so an overflow into one is seen.
//! - A huge block that moves (mremap) is freed and allocated again; its
//!   contents are then all taken as initialized.
//!
//! The client requests are a few no-op instructions when the program does
//! not run under valgrind.
const std = @import("std");
const config = @import("config.zig");
const valgrind = std.valgrind;
const memcheck = std.valgrind.memcheck;

pub inline fn allocated(ptr: [*]u8, len: usize, zeroed: bool) void {
    if (!config.valgrind) return;
    valgrind.mallocLikeBlock(ptr[0..len], 0, zeroed);
}

pub inline fn freed(ptr: [*]u8) void {
    if (!config.valgrind) return;
    valgrind.freeLikeBlock(ptr, 0);
}

/// A block kept its place with a new length.
pub inline fn resized(ptr: [*]u8, old_len: usize, new_len: usize) void {
    if (!config.valgrind) return;
    valgrind.resizeInPlaceBlock(ptr[0..old_len], new_len, 0);
}

/// A block moved (huge remap, without copying).
pub inline fn moved(old: [*]u8, new: [*]u8, new_len: usize) void {
    if (!config.valgrind) return;
    valgrind.freeLikeBlock(old, 0);
    valgrind.mallocLikeBlock(new[0..new_len], 0, true);
}

/// Kennel is about to read or write its own word (a free-list link, a
/// freed mark) in a block that is not the program's.
pub inline fn wordAccess(word: *const usize) void {
    if (!config.valgrind) return;
    memcheck.makeMemDefined(std.mem.asBytes(word));
}

/// Kennel is done with that word.
pub inline fn wordDone(word: *const usize) void {
    if (!config.valgrind) return;
    memcheck.makeMemNoAccess(std.mem.asBytes(word));
}
