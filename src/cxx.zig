//! C++'s replaceable global allocation functions ([new.delete]) in the C
//! library, under their Itanium C++ ABI names for x86_64 and aarch64 Linux
//! (size_t mangles as `m`, std::align_val_t as `St11align_val_t`, a
//! std::nothrow_t const& as `RKSt9nothrow_t`): all twenty that the standard
//! lists and libstdc++ exports. include/kennel.h lists the choices made.
//!
//! The standard builds the twenty on four: operator new(size),
//! operator new(size, alignment), operator delete(ptr) and
//! operator delete(ptr, alignment). Those four are kennel's own code. Every
//! other form does what its "default behavior" in the standard says: it
//! calls one of the four (or a form that does) by its exported name, as
//! libstdc++'s forms do. So a program that replaces only operator new and
//! operator delete, as the standard allows, still gets its own functions
//! from new[], sized delete and the rest. Those calls go through the
//! exported names (`exported` below), so the compiler calls the symbol (the
//! PLT) rather than kennel's function: a direct call would be bound, even
//! inlined, to kennel's own code. The exports are weak: a weak definition
//! is never taken as final, and a program that links libkennel.a and
//! defines some operators itself replaces kennel's at link time without a
//! duplicate symbol. (In a shared object it binds like any other.)
//!
//! kennel links no C++ runtime, so a C program that loads it needs none.
//! What only the runtime can do is looked up by name when first needed:
//! - the new-handler (std::get_new_handler), called while allocation fails;
//! - throwing std::bad_alloc: the runtime's own std::__throw_bad_alloc()
//!   throws it, and the exception unwinds through kennel's frames, which
//!   have unwind tables and hold nothing that needs cleaning up;
//! - catching it: the nothrow forms are defined as calling the throwing
//!   form and returning null if that throws. Zig code cannot catch, so they
//!   hand the call to the runtime's own nothrow form (the next definition
//!   after kennel's), which calls the throwing form (kennel's, or the
//!   program's) inside its try block.
//! Without a runtime there is no handler to call and nothing to throw with:
//! a throwing form that fails aborts with one line naming the size, and a
//! nothrow form returns null.
//!
//! Deletes are free() (c.release): the same checks, so an invalid or
//! double delete aborts with one line naming the pointer, and in the fast
//! library the same one-pass check and push. kennel finds a
//! block's size and alignment from its page, and has no use for the size
//! and alignment that sized and aligned deletes pass: they forward to the
//! unsized forms, as the standard's default behaviour says.
const std = @import("std");
const Heap = @import("heap.zig").Heap;
const check = @import("check.zig");
const os = @import("os.zig");
const c = @import("c.zig");

/// __STDCPP_DEFAULT_NEW_ALIGNMENT__ on x86_64 and aarch64 Linux: what
/// operator new(size) guarantees, and the least any form hands out.
const default_new_align_bytes = 16;

/// `const std::nothrow_t&`: an empty tag, never read.
const NothrowTag = *const anyopaque;

// ---- Exports ------------------------------------------------------------

comptime {
    const forms = .{
        // The bases, kennel's own code.
        .{ "_Znwm", &newSingle },
        .{ "_ZnwmSt11align_val_t", &newAligned },
        .{ "_ZdlPv", &deleteSingle },
        .{ "_ZdlPvSt11align_val_t", &deleteAligned },
        // The forms that call another.
        .{ "_Znam", &newArray },
        .{ "_ZnamSt11align_val_t", &newArrayAligned },
        .{ "_ZnwmRKSt9nothrow_t", &newNothrow },
        .{ "_ZnamRKSt9nothrow_t", &newArrayNothrow },
        .{ "_ZnwmSt11align_val_tRKSt9nothrow_t", &newAlignedNothrow },
        .{ "_ZnamSt11align_val_tRKSt9nothrow_t", &newArrayAlignedNothrow },
        .{ "_ZdaPv", &deleteArray },
        .{ "_ZdlPvm", &deleteSized },
        .{ "_ZdaPvm", &deleteArraySized },
        .{ "_ZdlPvRKSt9nothrow_t", &deleteNothrow },
        .{ "_ZdaPvRKSt9nothrow_t", &deleteArrayNothrow },
        .{ "_ZdaPvSt11align_val_t", &deleteArrayAligned },
        .{ "_ZdlPvmSt11align_val_t", &deleteSizedAligned },
        .{ "_ZdaPvmSt11align_val_t", &deleteArraySizedAligned },
        .{ "_ZdlPvSt11align_val_tRKSt9nothrow_t", &deleteAlignedNothrow },
        .{ "_ZdaPvSt11align_val_tRKSt9nothrow_t", &deleteArrayAlignedNothrow },
    };
    for (forms) |form| @export(form[1], .{ .name = form[0], .linkage = .weak });
}

// ---- The four bases -----------------------------------------------------

/// operator new(size_t).
fn newSingle(size: usize) callconv(.c) *anyopaque {
    return tryAlloc(size, default_new_align_bytes) orelse newRetry(size, default_new_align_bytes);
}

/// operator new(size_t, align_val_t). An alignment that is not a power of
/// two is undefined behaviour; libstdc++ throws bad_alloc at once, without
/// calling the new-handler, and so does kennel.
fn newAligned(size: usize, alignment: usize) callconv(.c) *anyopaque {
    if (!isPowerOfTwo(alignment)) throwBadAlloc(size, alignment);
    const a = @max(alignment, default_new_align_bytes);
    return tryAlloc(size, a) orelse newRetry(size, a);
}

/// operator delete(void*).
fn deleteSingle(ptr: ?*anyopaque) callconv(.c) void {
    release(ptr);
}

/// operator delete(void*, align_val_t). The page knows the alignment.
fn deleteAligned(ptr: ?*anyopaque, alignment: usize) callconv(.c) void {
    _ = alignment;
    release(ptr);
}

inline fn tryAlloc(size: usize, alignment: usize) ?*anyopaque {
    // new(0) is a unique pointer, as malloc(0) is in kennel.
    const ptr = Heap.alloc(check.cRequest(size) orelse return null, alignment) orelse return null;
    if (!check.afterAlloc(ptr, null, alignment, false)) return null;
    return ptr;
}

/// As free does (c.zig: in the fast library, one pass checks and pushes).
inline fn release(ptr: ?*anyopaque) void {
    c.release(ptr, "operator delete");
}

/// [new.delete.single]: while allocation fails, call the new-handler and
/// try again; with no handler installed, throw std::bad_alloc. The loop has
/// no bound of its own: the standard leaves its end to the handler, which
/// must make memory available, uninstall itself, throw or end the program.
noinline fn newRetry(size: usize, alignment: usize) *anyopaque {
    while (true) {
        const get_handler = get_new_handler.find() orelse throwBadAlloc(size, alignment);
        const handler = get_handler() orelse throwBadAlloc(size, alignment);
        handler();
        if (tryAlloc(size, alignment)) |ptr| return ptr;
    }
}

fn throwBadAlloc(size: usize, alignment: usize) noreturn {
    @branchHint(.cold);
    if (throw_bad_alloc.find()) |throw| throw();
    os.fatal("operator new({d} bytes, aligned to {d}) failed, and no C++ runtime is loaded to throw std::bad_alloc", .{ size, alignment });
}

// ---- Forms that call another --------------------------------------------

/// The forms that others call, by their exported names: a call through one
/// of these goes through the symbol, to whichever definition the process
/// uses (a direct call to the Zig function would bind to kennel's).
const exported = struct {
    const new_single = @extern(*const fn (usize) callconv(.c) *anyopaque, .{ .name = "_Znwm" });
    const new_aligned = @extern(*const fn (usize, usize) callconv(.c) *anyopaque, .{ .name = "_ZnwmSt11align_val_t" });
    const delete_single = @extern(*const fn (?*anyopaque) callconv(.c) void, .{ .name = "_ZdlPv" });
    const delete_aligned = @extern(*const fn (?*anyopaque, usize) callconv(.c) void, .{ .name = "_ZdlPvSt11align_val_t" });
    const delete_array = @extern(*const fn (?*anyopaque) callconv(.c) void, .{ .name = "_ZdaPv" });
    const delete_array_aligned = @extern(*const fn (?*anyopaque, usize) callconv(.c) void, .{ .name = "_ZdaPvSt11align_val_t" });
};

fn newArray(size: usize) callconv(.c) *anyopaque {
    return exported.new_single(size);
}

fn newArrayAligned(size: usize, alignment: usize) callconv(.c) *anyopaque {
    return exported.new_aligned(size, alignment);
}

fn newNothrow(size: usize, tag: NothrowTag) callconv(.c) ?*anyopaque {
    if (runtime_new_nothrow.find()) |f| return f(size, tag);
    return tryAlloc(size, default_new_align_bytes);
}

fn newArrayNothrow(size: usize, tag: NothrowTag) callconv(.c) ?*anyopaque {
    if (runtime_new_array_nothrow.find()) |f| return f(size, tag);
    return tryAlloc(size, default_new_align_bytes);
}

fn newAlignedNothrow(size: usize, alignment: usize, tag: NothrowTag) callconv(.c) ?*anyopaque {
    if (runtime_new_aligned_nothrow.find()) |f| return f(size, alignment, tag);
    if (!isPowerOfTwo(alignment)) return null;
    return tryAlloc(size, @max(alignment, default_new_align_bytes));
}

fn newArrayAlignedNothrow(size: usize, alignment: usize, tag: NothrowTag) callconv(.c) ?*anyopaque {
    if (runtime_new_array_aligned_nothrow.find()) |f| return f(size, alignment, tag);
    if (!isPowerOfTwo(alignment)) return null;
    return tryAlloc(size, @max(alignment, default_new_align_bytes));
}

fn deleteArray(ptr: ?*anyopaque) callconv(.c) void {
    exported.delete_single(ptr);
}

fn deleteSized(ptr: ?*anyopaque, _: usize) callconv(.c) void {
    exported.delete_single(ptr);
}

fn deleteArraySized(ptr: ?*anyopaque, _: usize) callconv(.c) void {
    exported.delete_array(ptr);
}

fn deleteNothrow(ptr: ?*anyopaque, _: NothrowTag) callconv(.c) void {
    exported.delete_single(ptr);
}

fn deleteArrayNothrow(ptr: ?*anyopaque, _: NothrowTag) callconv(.c) void {
    exported.delete_array(ptr);
}

fn deleteArrayAligned(ptr: ?*anyopaque, alignment: usize) callconv(.c) void {
    exported.delete_aligned(ptr, alignment);
}

fn deleteSizedAligned(ptr: ?*anyopaque, _: usize, alignment: usize) callconv(.c) void {
    exported.delete_aligned(ptr, alignment);
}

fn deleteArraySizedAligned(ptr: ?*anyopaque, _: usize, alignment: usize) callconv(.c) void {
    exported.delete_array_aligned(ptr, alignment);
}

fn deleteAlignedNothrow(ptr: ?*anyopaque, alignment: usize, _: NothrowTag) callconv(.c) void {
    exported.delete_aligned(ptr, alignment);
}

fn deleteArrayAlignedNothrow(ptr: ?*anyopaque, alignment: usize, _: NothrowTag) callconv(.c) void {
    exported.delete_array_aligned(ptr, alignment);
}

// ---- The C++ runtime ----------------------------------------------------

const NewHandler = *const fn () callconv(.c) void;

const get_new_handler = RuntimeFunction(fn () callconv(.c) ?NewHandler, .everywhere, &.{
    "_ZSt15get_new_handlerv", // std::get_new_handler(): libstdc++ (GCC 4.9 on), libc++abi
});

const throw_bad_alloc = RuntimeFunction(fn () callconv(.c) noreturn, .everywhere, &.{
    "_ZSt17__throw_bad_allocv", // std::__throw_bad_alloc(): libstdc++
    "_ZNSt3__117__throw_bad_allocEv", // std::__1::__throw_bad_alloc(): libc++
});

const runtime_new_nothrow = RuntimeFunction(fn (usize, NothrowTag) callconv(.c) ?*anyopaque, .after_kennel, &.{"_ZnwmRKSt9nothrow_t"});
const runtime_new_array_nothrow = RuntimeFunction(fn (usize, NothrowTag) callconv(.c) ?*anyopaque, .after_kennel, &.{"_ZnamRKSt9nothrow_t"});
const runtime_new_aligned_nothrow = RuntimeFunction(fn (usize, usize, NothrowTag) callconv(.c) ?*anyopaque, .after_kennel, &.{"_ZnwmSt11align_val_tRKSt9nothrow_t"});
const runtime_new_array_aligned_nothrow = RuntimeFunction(fn (usize, usize, NothrowTag) callconv(.c) ?*anyopaque, .after_kennel, &.{"_ZnamSt11align_val_tRKSt9nothrow_t"});

/// Where dlsym looks: every loaded object in load order (RTLD_DEFAULT), or
/// the objects after the one holding kennel (RTLD_NEXT), which skips
/// kennel's own definitions. The same values in glibc and musl.
const Scope = enum(usize) {
    everywhere = 0,
    after_kennel = std.math.maxInt(usize),
};

/// The C++ runtimes' shared objects, for a runtime that `Scope` cannot
/// see: one a plugin brought in with dlopen(RTLD_LOCAL) (how Python loads
/// its extension modules, for one), whose C++ code still calls kennel's
/// operator new, since kennel is in the global scope.
const runtime_libraries = [_][:0]const u8{ "libstdc++.so.6", "libc++.so.1" };

/// A function of the C++ runtime, found by name when first needed (a
/// runtime loaded later with dlopen is found too) and remembered once
/// found. The first name that resolves wins: in `scope`, then in a runtime
/// library already loaded anywhere (RTLD_NOLOAD loads nothing; the handle
/// it returns keeps that library loaded, so the address stays valid).
fn RuntimeFunction(comptime F: type, comptime scope: Scope, comptime names: []const [:0]const u8) type {
    return struct {
        var address: std.atomic.Value(usize) = .init(0);

        fn find() ?*const F {
            // Acquire, with the release below: a thread using an address
            // another thread found also sees the runtime that the dynamic
            // linker set up before it was found.
            const known = address.load(.acquire);
            if (known != 0) return @ptrFromInt(known);
            inline for (names) |name| {
                if (std.c.dlsym(@ptrFromInt(@backingInt(scope)), name)) |found| return remember(found);
            }
            inline for (runtime_libraries) |library| {
                if (std.c.dlopen(library, .{ .LAZY = true, .NOLOAD = true })) |handle| {
                    // Looked up from the runtime's own handle, so that
                    // kennel's definitions are not found (`after_kennel`).
                    inline for (names) |name| {
                        if (std.c.dlsym(handle, name)) |found| return remember(found);
                    }
                }
            }
            return null;
        }

        fn remember(found: *anyopaque) *const F {
            address.store(@intFromPtr(found), .release);
            return @ptrCast(@alignCast(found));
        }
    };
}

/// Like std.math.isPowerOfTwo, but 0 is simply not one.
fn isPowerOfTwo(x: usize) bool {
    return x != 0 and x & (x - 1) == 0;
}
