//! The test suite of kennel, run by `zig build test` in every configuration
//! (see build.zig): Debug and release, with and without libc, and
//! single-threaded.
test {
    _ = @import("util.zig");
    _ = @import("conformance.zig");
    _ = @import("model.zig");
    _ = @import("threads.zig");
    _ = @import("process.zig");
    _ = @import("stats.zig");
    _ = @import("secure.zig");
}
