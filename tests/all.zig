//! The test suite of kennel, run by `zig build test` in every configuration
//! (see build.zig): Debug and release, with and without libc, and
//! single-threaded.
//!
//! Order matters once: the out-of-memory test (process.zig) runs before the
//! thread tests. Its child limits the address space to what the process
//! maps plus a headroom, then allocates until the OS refuses; after the
//! crowd test the process keeps one purged 4 MiB segment per heap of its
//! 20,000 threads mapped (80 GiB, for the next threads to take), and the
//! child filled up to 7 GiB of it before any mapping failed: 190 to 230 s
//! of the Debug-with-libc suite, and that much of the machine's memory.
test {
    _ = @import("util.zig");
    _ = @import("conformance.zig");
    _ = @import("model.zig");
    _ = @import("process.zig");
    _ = @import("threads.zig");
    _ = @import("stats.zig");
    _ = @import("secure.zig");
}
