//! Thread exit where libc is linked (Linux with libc, macOS, the BSDs): a
//! pthread key whose destructor runs in each ending thread that set a
//! value, and an atfork handler for the child of a fork.
const std = @import("std");
const builtin = @import("builtin");
const c = std.c;

/// pthread_key_t: unsigned long on macOS, a 32-bit integer elsewhere
/// (std leaves it undefined for some BSDs).
const Key = if (builtin.os.tag.isDarwin()) c_ulong else c_uint;
extern "c" fn pthread_key_create(key: *Key, destructor: ?*const fn (*anyopaque) callconv(.c) void) c_int;
extern "c" fn pthread_setspecific(key: Key, value: ?*const anyopaque) c_int;

pub fn ExitKey(comptime onExit: fn (*anyopaque) void, comptime onForkChild: fn () void) type {
    return struct {
        pub const Handle = Key;

        fn destructor(value: *anyopaque) callconv(.c) void {
            onExit(value);
        }

        fn forkChild() callconv(.c) void {
            onForkChild();
        }

        pub fn create() ?Handle {
            var key: Handle = undefined;
            if (pthread_key_create(&key, destructor) != 0) return null;
            _ = c.pthread_atfork(null, null, forkChild);
            return key;
        }

        pub fn set(key: Handle, value: *anyopaque) void {
            // glibc keeps the first 32 keys in the thread descriptor, so this
            // does not allocate for our key; if it failed, probing still works
            // where the system has a probe.
            _ = pthread_setspecific(key, value);
        }
    };
}
