//! How this compilation uses kennel, decided at compile time.
//!
//! Two sources:
//! - The C library (src/c.zig) is the root of its compilation and declares `kennel_c_library`; the Zig module never is.
//!   Features only the C ABI needs (initial-exec TLS in a shared object)
//!   switch on here, so the Zig allocator pays nothing for them.
//! - The build options module `kennel_options` (build.zig: -Dsecure,
//!   -Dfill-freed, -Dvalgrind, -Dstats) selects the hardened configuration
//!   and the tool support. Every feature is a comptime bool, so a feature
//!   that is off compiles to nothing: the fast configuration's code is the
//!   code it had before hardening existed.
const builtin = @import("builtin");
const root = @import("root");
const options = @import("kennel_options");

/// Built as libkennel (free() must validate pointers it is given).
pub const c_library = @hasDecl(root, "kennel_c_library");

/// Built as a shared object on Linux x86_64 or aarch64, which is loaded
/// with LD_PRELOAD: its thread-local heap pointer is reached with the
/// initial-exec model (inline assembly in thread.zig), without a call to
/// __tls_get_addr on every allocation. Elsewhere a shared library uses a
/// plain thread-local.
pub const shared_object = c_library and builtin.output_mode == .Lib and builtin.link_mode == .dynamic and
    builtin.os.tag == .linux and (builtin.cpu.arch == .x86_64 or builtin.cpu.arch == .aarch64);

/// The hardened configuration's features (all on with -Dsecure; bench.zig
/// builds each alone to measure what it costs). See secure.zig.
pub const Hardening = struct {
    /// Every free checks its pointer (a block kennel handed out and has not
    /// taken back) and marks the block freed with an atomic swap, so double
    /// and invalid frees abort, from one thread or two.
    check_frees: bool,
    /// Free-list links are stored encoded with per-segment secrets and
    /// checked when followed.
    encode_lists: bool,
    /// The last kernel page of every segment and the page after every huge
    /// block are inaccessible, and freed huge mappings go back to the OS at
    /// once (no cache), so a use after free of one faults.
    guard_pages: bool,
    /// A fresh page hands out its blocks in random order.
    randomize: bool,
    /// The slack after a Zig allocation's requested length holds a canary,
    /// checked at free; in C the last 8 bytes of every block (outside what
    /// malloc_usable_size reports) hold one, checked at free and realloc.
    canary: bool,
    /// Freed blocks are zeroed (blocks above 64 KiB: their first kernel
    /// page, the rest purged) and checked to be zero when handed out again.
    zero_freed: bool,
    /// Freed blocks up to 64 KiB wait in a per-heap ring of bounded bytes
    /// before they are reused; a random one leaves when it is full.
    quarantine: bool,
    /// C: malloc(0) returns a unique pointer into a reserved inaccessible
    /// region, which free accepts.
    zero_size: bool,
    /// Freed blocks above 64 KiB are inaccessible past their first kernel
    /// page (and their memory purged) until handed out again.
    guard_freed_large: bool,
};

pub const hardening: Hardening = .{
    .check_frees = options.check_frees,
    .encode_lists = options.encode_lists,
    .guard_pages = options.guard_pages,
    .randomize = options.randomize,
    .canary = options.canary,
    .zero_freed = options.zero_freed,
    .quarantine = options.quarantine,
    .zero_size = options.zero_size,
    .guard_freed_large = options.guard_freed_large,
};

/// Any hardening at all (the allocator calls itself hardened).
pub const secure = hardening.check_frees or hardening.encode_lists or hardening.guard_pages or
    hardening.randomize or hardening.canary or hardening.zero_freed or hardening.quarantine or
    hardening.zero_size or hardening.guard_freed_large;

/// Whether frees fill blocks with `secure.fill_byte` at start (-Dfill-freed).
pub const fill_freed_default = options.fill_freed;

/// Whether the fill is compiled in at all: with -Dfill-freed, and in every
/// hardened build, where the C library turns it on with KENNEL_FILL_FREED=1.
pub const fill_freed_available = fill_freed_default or secure;

/// Free pointers are checked before anything behind them is read: always in
/// the C library (C programs free foreign pointers), in Zig when hardened.
pub const validate_frees = c_library or hardening.check_frees;

/// The fast C library's free (c.zig): the checks fused with the lookups
/// the free needs anyway, for a pointer into the segment the thread freed
/// into last; everything else takes the generic path (check.beforeFree,
/// Heap.free). Not with memcheck, the fill, or the hardened checks, which
/// all need the generic path.
pub const fused_free = c_library and !secure and !fill_freed_available and !valgrind;

/// Blocks are described to valgrind's memcheck with client requests.
pub const valgrind = options.valgrind;

/// Requested bytes are counted per heap (Zig only: C's free does not say
/// how many bytes were requested). Costs two adds on the fast paths.
pub const count_requested = options.count_requested;

comptime {
    // The valgrind build is a debugging build of the fast configuration:
    // memcheck does what the hardening would (and canaries sit where
    // memcheck forbids access).
    if (valgrind and (secure or fill_freed_default))
        @compileError("kennel's valgrind option does not combine with -Dsecure or -Dfill-freed");
    if (valgrind and !builtin.valgrind_support)
        @compileError("kennel's valgrind option needs a module built with .valgrind = true");
}
