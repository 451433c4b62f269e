//! How this compilation uses kennel, decided at compile time.
//!
//! The C library (src/c.zig) is the root of its compilation and declares
//! `kennel_c_library`; the Zig module never is. Features only the C ABI
//! needs (pointer validation, initial-exec TLS in a shared object) switch on
//! here, so the Zig allocator pays nothing for them.
const builtin = @import("builtin");
const root = @import("root");

/// Built as libkennel (free() must validate pointers it is given).
pub const c_library = @hasDecl(root, "kennel_c_library");

/// Built as a shared object, which is loaded with LD_PRELOAD: its thread-
/// local heap pointer must be reached with the initial-exec model, without
/// a call to __tls_get_addr on every allocation.
pub const shared_object = c_library and builtin.output_mode == .Lib and builtin.link_mode == .dynamic;
