const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    // An allocator is built to be fast: ReleaseFast unless told otherwise.
    const optimize = b.option(std.lang.Optimize, "optimize", "Prioritize performance, safety, or binary size (default: fast)") orelse .fast;
    const secure = b.option(bool, "secure", "Hardened allocator: checked frees, encoded free lists, guard pages, random block order, canaries, zeroed freed blocks, quarantine, zero-size blocks, guarded freed large blocks") orelse false;
    var features: Features = if (secure) .secure else .{};
    features.fill_freed = b.option(bool, "fill-freed", "Fill freed blocks with 0xdf, so reads after free see a pattern") orelse false;
    features.valgrind = b.option(bool, "valgrind", "Describe blocks to valgrind's memcheck with client requests") orelse false;
    features.count_requested = b.option(bool, "stats", "Count requested bytes per heap for kennel.stats() (Zig only; two adds per alloc and free)") orelse false;

    // The module users import: `b.dependency("kennel", ...).module("kennel")`.
    const module = b.addModule("kennel", .{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .valgrind = if (features.valgrind) true else null,
    });
    module.addImport("kennel_options", features.module(b));

    const libs = addCLibrary(b, target, optimize, features);
    const example = addExample(b, target, module);
    addTests(b, target, libs, example);
    if (isHost(b, target)) addBench(b, target);
}

/// Whether binaries for `target` run here without an emulator.
fn isHost(b: *std.Build, target: std.Build.ResolvedTarget) bool {
    const host = b.graph.host.result;
    return target.result.os.tag == host.os.tag and target.result.cpu.arch == host.cpu.arch;
}

/// wasm without shared memory has no threads: kennel's wasm backend needs a
/// single-threaded build (src/os/wasm.zig).
fn singleThreadedOnly(target: std.Build.ResolvedTarget) bool {
    return target.result.cpu.arch.isWasm() and !target.result.cpu.has(.wasm, .atomics);
}

/// examples/hello.zig: a program that uses nothing but std and kennel, as a
/// new user's would (`zig build example`, for any -Dtarget).
fn addExample(b: *std.Build, target: std.Build.ResolvedTarget, kennel: *std.Build.Module) *std.Build.Step {
    const exe = b.addExecutable(.{ .name = "hello", .root_module = b.createModule(.{
        .root_source_file = b.path("examples/hello.zig"),
        .target = target,
        .optimize = .safe,
        .imports = &.{.{ .name = "kennel", .module = kennel }},
    }) });
    if (target.result.os.tag == .freestanding) {
        // A wasm module without a start function: the host calls `run`.
        exe.entry = .disabled;
        exe.rdynamic = true;
    }
    const step = b.step("example", "Build the example program (examples/hello.zig) into zig-out/bin");
    step.dependOn(&b.addInstallArtifact(exe, .{}).step);
    return step;
}

/// The compile-time configuration of one kennel compilation (src/config.zig
/// reads it from the `kennel_options` module).
pub const Features = struct {
    check_frees: bool = false,
    encode_lists: bool = false,
    guard_pages: bool = false,
    randomize: bool = false,
    canary: bool = false,
    zero_freed: bool = false,
    quarantine: bool = false,
    zero_size: bool = false,
    guard_freed_large: bool = false,
    fill_freed: bool = false,
    valgrind: bool = false,
    count_requested: bool = false,

    /// Every hardening feature (fill_freed stays a separate choice).
    pub const secure: Features = .{
        .check_frees = true,
        .encode_lists = true,
        .guard_pages = true,
        .randomize = true,
        .canary = true,
        .zero_freed = true,
        .quarantine = true,
        .zero_size = true,
        .guard_freed_large = true,
    };

    pub fn module(f: Features, b: *std.Build) *std.Build.Module {
        const options = b.addOptions();
        inline for (comptime std.meta.fieldNames(Features)) |name| {
            options.addOption(bool, name, @field(f, name));
        }
        return options.createModule();
    }
};

/// A kennel module (root src/root.zig) of the given configuration.
fn kennelModule(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.lang.Optimize, features: Features, single_threaded: bool, link_libc: bool) *std.Build.Module {
    const module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .single_threaded = single_threaded or singleThreadedOnly(target),
        .link_libc = link_libc,
        .valgrind = if (features.valgrind) true else null,
    });
    module.addImport("kennel_options", features.module(b));
    return module;
}

const CLibraries = struct { shared: *std.Build.Step.Compile, static: *std.Build.Step.Compile };
const c_library_version: std.SemanticVersion = .{ .major = 0, .minor = 2, .patch = 0 };

fn cLibraries(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.lang.Optimize, features: Features, name: []const u8) CLibraries {
    const module = b.createModule(.{
        .root_source_file = b.path("src/c.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .pic = true,
        // Outside debug builds, malloc and free set up no frame pointer
        // (three instructions of a pair's fifty), as C libraries built
        // with -O2 do.
        .omit_frame_pointer = if (optimize == .debug) null else true,
        .single_threaded = if (singleThreadedOnly(target)) true else null,
        .valgrind = if (features.valgrind) true else null,
    });
    module.addImport("kennel_options", features.module(b));
    const static = b.addLibrary(.{ .name = name, .linkage = .static, .root_module = module });
    // Zig's stack probe (__zig_probe_stack) and the rest of compiler-rt go
    // into the archive, so that gcc and g++ can link it, not only zig.
    static.bundle_compiler_rt = true;
    return .{
        .shared = b.addLibrary(.{ .name = name, .linkage = .dynamic, .root_module = module, .version = c_library_version }),
        .static = static,
    };
}

/// libkennel.so and libkennel.a (the malloc family, src/c.zig), the
/// hardened libkennel-secure.so, kennel.h and a pkg-config file, installed
/// by plain `zig build`. On Linux the libraries replace malloc; elsewhere
/// they export the kn_ functions only (src/c.zig). wasm has no shared
/// libraries: the static one only.
fn addCLibrary(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.lang.Optimize, features: Features) CLibraries {
    const version = c_library_version;
    const libs = cLibraries(b, target, optimize, features, "kennel");
    // Freestanding wasm has no libc, hence no C library: a C program there
    // has no malloc to replace.
    if (target.result.os.tag == .freestanding) return libs;
    const shared_ok = !target.result.cpu.arch.isWasm();
    if (shared_ok) b.installArtifact(libs.shared);
    b.installArtifact(libs.static);
    var hardened = features;
    inline for (comptime std.meta.fieldNames(Features)) |name| {
        if (@field(Features.secure, name)) @field(hardened, name) = true;
    }
    if (shared_ok) b.installArtifact(cLibraries(b, target, optimize, hardened, "kennel-secure").shared);
    b.installFile("include/kennel.h", "include/kennel.h");
    // Relocatable: the prefix is found from where the file is installed.
    const pc = b.addWriteFiles().add("kennel.pc", b.fmt(
        \\prefix=${{pcfiledir}}/../..
        \\libdir=${{prefix}}/lib
        \\includedir=${{prefix}}/include
        \\
        \\Name: kennel
        \\Description: A general-purpose memory allocator (malloc replacement)
        \\Version: {f}
        \\Libs: -L${{libdir}} -lkennel
        \\Libs.private: -lpthread
        \\Cflags: -I${{includedir}}
        \\
    , .{version}));
    b.getInstallStep().dependOn(&b.addInstallFileWithDir(pc, .lib, "pkgconfig/kennel.pc").step);
    return libs;
}

/// The benchmark binaries, one per allocator (mimalloc, jemalloc and
/// tcmalloc replace malloc in any process that links them), always built
/// ReleaseFast and installed in zig-out/bench/. bench/run.py drives them.
/// A peer is linked by the path of its runtime library (run.py finds it
/// with ldconfig), so only the runtime package is needed, not -dev.
fn addBench(b: *std.Build, target: std.Build.ResolvedTarget) void {
    const mimalloc_lib = b.option([]const u8, "mimalloc", "Build the mimalloc benchmark binary, linking this library (e.g. /usr/lib/x86_64-linux-gnu/libmimalloc.so.2)");
    const jemalloc_lib = b.option([]const u8, "jemalloc", "Build the jemalloc benchmark binary, linking this library (libjemalloc.so.2)");
    const tcmalloc_lib = b.option([]const u8, "tcmalloc", "Build the tcmalloc benchmark binary, linking this library (libtcmalloc_minimal.so.4)");
    const with_hardening = b.option(bool, "bench-hardening", "Build the hardened benchmark binaries (make bench-secure)") orelse false;
    // A full build of the benchmark binaries takes about ten minutes on two
    // cores; an experiment on one allocator needs only its binary.
    const only = b.option([]const []const u8, "bench-only", "Build only these benchmark binaries (e.g. kennel, glibc: the names after bench-)") orelse &.{};
    const bench_step = b.step("bench", "Build the benchmark binaries into zig-out/bench");
    const entries = [_]struct {
        name: []const u8,
        allocator: []const u8,
        features: Features = .{},
        single_threaded: bool = false,
        link_libc: bool = false,
        /// A peer's shared library, by path.
        library: ?[]const u8 = null,
        enabled: bool = true,
    }{
        .{ .name = "kennel", .allocator = "kennel" },
        // The hardened build, and each hardening feature alone, for what
        // each costs (make bench-secure).
        .{ .name = "kennel-secure", .allocator = "kennel", .features = .secure, .enabled = with_hardening },
        .{ .name = "kennel-check-frees", .allocator = "kennel", .features = .{ .check_frees = true }, .enabled = with_hardening },
        .{ .name = "kennel-encode-lists", .allocator = "kennel", .features = .{ .encode_lists = true }, .enabled = with_hardening },
        .{ .name = "kennel-guard-pages", .allocator = "kennel", .features = .{ .guard_pages = true }, .enabled = with_hardening },
        .{ .name = "kennel-randomize", .allocator = "kennel", .features = .{ .randomize = true }, .enabled = with_hardening },
        .{ .name = "kennel-canary", .allocator = "kennel", .features = .{ .canary = true }, .enabled = with_hardening },
        .{ .name = "kennel-zero-freed", .allocator = "kennel", .features = .{ .zero_freed = true }, .enabled = with_hardening },
        .{ .name = "kennel-quarantine", .allocator = "kennel", .features = .{ .quarantine = true }, .enabled = with_hardening },
        .{ .name = "kennel-guard-freed-large", .allocator = "kennel", .features = .{ .guard_freed_large = true }, .enabled = with_hardening },
        .{ .name = "kennel-fill-freed", .allocator = "kennel", .features = .{ .fill_freed = true }, .enabled = with_hardening },
        // kennel in a Zig program that links libc: threads are pthreads
        // (glibc caches their stacks) and heaps are handed over by the
        // thread-exit callback instead of liveness probes.
        .{ .name = "kennel-libc", .allocator = "kennel", .link_libc = true },
        .{ .name = "smp", .allocator = "smp" },
        .{ .name = "glibc", .allocator = "glibc", .link_libc = true },
        .{ .name = "mimalloc", .allocator = "mimalloc", .link_libc = true, .library = mimalloc_lib, .enabled = mimalloc_lib != null },
        .{ .name = "jemalloc", .allocator = "jemalloc", .link_libc = true, .library = jemalloc_lib, .enabled = jemalloc_lib != null },
        .{ .name = "tcmalloc", .allocator = "tcmalloc", .link_libc = true, .library = tcmalloc_lib, .enabled = tcmalloc_lib != null },
        .{ .name = "st-kennel", .allocator = "kennel", .single_threaded = true },
        .{ .name = "st-glibc", .allocator = "glibc", .single_threaded = true, .link_libc = true },
        .{ .name = "st-std-default", .allocator = "std-default", .single_threaded = true },
    };
    const launch = b.addExecutable(.{ .name = "bench-launch", .root_module = b.createModule(.{
        .root_source_file = b.path("bench/launch.zig"),
        .target = target,
        .optimize = .fast,
        .link_libc = true,
    }) });
    bench_step.dependOn(&b.addInstallArtifact(launch, .{ .dest_dir = .{ .override = .{ .custom = "bench" } } }).step);
    for (entries) |entry| {
        if (!entry.enabled) continue;
        if (only.len > 0 and !containsName(only, entry.name)) continue;
        const options = b.addOptions();
        options.addOption([]const u8, "allocator", entry.allocator);
        const kennel = kennelModule(b, target, .fast, entry.features, entry.single_threaded, false);
        const module = b.createModule(.{
            .root_source_file = b.path("bench/main.zig"),
            .target = target,
            .optimize = .fast,
            .single_threaded = entry.single_threaded,
            .link_libc = entry.link_libc,
            .imports = &.{
                .{ .name = "kennel", .module = kennel },
                .{ .name = "bench_options", .module = options.createModule() },
            },
        });
        if (entry.library) |path| module.addObjectFile(.{ .cwd_relative = path });
        const exe = b.addExecutable(.{ .name = b.fmt("bench-{s}", .{entry.name}), .root_module = module });
        bench_step.dependOn(&b.addInstallArtifact(exe, .{ .dest_dir = .{ .override = .{ .custom = "bench" } } }).step);
    }
}

fn containsName(names: []const []const u8, name: []const u8) bool {
    for (names) |n| if (std.mem.eql(u8, n, name)) return true;
    return false;
}

/// Every configuration the tests run in. Release modes catch what
/// optimization exposes; Debug and ReleaseSafe keep assertions on; libc
/// switches thread exit from tgkill probing to pthread key destructors.
const test_configs = [_]struct {
    name: []const u8,
    optimize: std.lang.Optimize,
    single_threaded: bool = false,
    link_libc: bool = false,
    features: Features = .{},
    /// The suite's root; the per-feature configurations run only the
    /// standard library's allocator tests (enough to compile and use every
    /// path a feature touches).
    suite: []const u8 = "tests/all.zig",
}{
    .{ .name = "debug", .optimize = .debug },
    .{ .name = "release-fast", .optimize = .fast },
    .{ .name = "debug-libc", .optimize = .debug, .link_libc = true },
    .{ .name = "release-safe-libc", .optimize = .safe, .link_libc = true },
    .{ .name = "single-threaded-debug", .optimize = .debug, .single_threaded = true },
    .{ .name = "single-threaded-release-fast", .optimize = .fast, .single_threaded = true },
    // The hardened configuration must pass everything the fast one does.
    .{ .name = "secure-debug", .optimize = .debug, .features = Features.secure },
    .{ .name = "secure-release-fast", .optimize = .fast, .features = withStatsAndFill(Features.secure) },
    .{ .name = "stats-release-safe-libc", .optimize = .safe, .link_libc = true, .features = .{ .count_requested = true } },
    // Each hardening feature alone (as make bench-secure builds them).
    .{ .name = "check-frees-debug", .optimize = .debug, .features = .{ .check_frees = true }, .suite = "tests/conformance.zig" },
    .{ .name = "encode-lists-debug", .optimize = .debug, .features = .{ .encode_lists = true }, .suite = "tests/conformance.zig" },
    .{ .name = "guard-pages-debug", .optimize = .debug, .features = .{ .guard_pages = true }, .suite = "tests/conformance.zig" },
    .{ .name = "randomize-debug", .optimize = .debug, .features = .{ .randomize = true }, .suite = "tests/conformance.zig" },
    .{ .name = "canary-debug", .optimize = .debug, .features = .{ .canary = true }, .suite = "tests/conformance.zig" },
    .{ .name = "zero-freed-debug", .optimize = .debug, .features = .{ .zero_freed = true }, .suite = "tests/conformance.zig" },
    .{ .name = "quarantine-debug", .optimize = .debug, .features = .{ .quarantine = true }, .suite = "tests/conformance.zig" },
    .{ .name = "guard-freed-large-debug", .optimize = .debug, .features = .{ .guard_freed_large = true }, .suite = "tests/conformance.zig" },
    .{ .name = "fill-freed-debug", .optimize = .debug, .features = .{ .fill_freed = true }, .suite = "tests/conformance.zig" },
};

fn withStatsAndFill(features: Features) Features {
    var f = features;
    f.count_requested = true;
    f.fill_freed = true;
    return f;
}

/// The configurations a target other than the host's runs (under qemu,
/// wine or a WASI runtime) or only compiles, at the reduced size that
/// tests/util.zig picks for emulated runs: without libc (probing thread
/// liveness) and with it (thread exit callbacks; musl, wasi-libc, MinGW),
/// and hardened, whose guards, purges and zero checks lean on each
/// system's memory calls (on wasm, macOS and the BSDs a purge may keep the
/// old bytes, which the hardened build took for writes after free until
/// 2026-11-28; its suite had run on Linux only).
const foreign_test_configs = [_][]const u8{ "debug", "release-safe-libc", "secure-debug" };

fn addTests(b: *std.Build, target: std.Build.ResolvedTarget, libs: CLibraries, example: *std.Build.Step) void {
    const only = b.option([]const u8, "test-config", "Run the tests of one configuration only (e.g. debug, release-fast; c for the C library)");
    const filters = b.option([]const []const u8, "test-filter", "Run only tests whose name contains this") orelse &.{};
    const native = isHost(b, target);
    const reduced = b.option(bool, "test-reduced", "Fewer threads and iterations (default: for targets that run under an emulator)") orelse !native;
    const wasi_python = b.option([]const u8, "wasi-python", "Run wasm32-wasi tests with this Python, which has the wasmtime package (else: zig's -fwasmtime)");
    const test_step = b.step("test", "Run all tests in every configuration (another -Dtarget: under its emulator, -fqemu / -fwine)");
    const build_step = b.step("test-build", "Build the test binaries, the example and the C library for -Dtarget without running them");
    const test_options = b.addOptions();
    test_options.addOption(bool, "reduced", reduced);
    // What runs the tests (tests/util.zig skips what an emulator cannot do).
    const emulator: enum { none, qemu, wine, wasmtime } = if (native) .none else switch (target.result.os.tag) {
        .linux => .qemu,
        .windows => .wine,
        .wasi => .wasmtime,
        else => .none, // built, not run
    };
    test_options.addOption([]const u8, "emulator", @tagName(emulator));
    const options_module = test_options.createModule();
    for (test_configs) |config| {
        if (only) |name| if (!std.mem.eql(u8, name, config.name)) continue;
        if (!native and only == null and !isForeignConfig(config.name)) continue;
        // Freestanding: std.testing prints failures through std.Io, which
        // needs an OS; the example program is what builds there.
        if (target.result.os.tag == .freestanding) continue;
        const kennel = kennelModule(b, target, config.optimize, config.features, config.single_threaded, config.link_libc);
        const runner: std.Build.Step.Compile.TestRunner = .{ .path = b.path("tests/runner.zig"), .mode = .simple };
        const unit = b.addTest(.{ .name = b.fmt("unit-{s}", .{config.name}), .root_module = kennel, .filters = filters, .test_runner = runner });
        const suite = b.addTest(.{
            .name = b.fmt("suite-{s}", .{config.name}),
            .filters = filters,
            .test_runner = runner,
            .root_module = b.createModule(.{
                .root_source_file = b.path(config.suite),
                .target = target,
                .optimize = config.optimize,
                .single_threaded = config.single_threaded or singleThreadedOnly(target),
                .link_libc = config.link_libc,
                .imports = &.{
                    .{ .name = "kennel", .module = kennel },
                    .{ .name = "test_options", .module = options_module },
                },
            }),
        });
        // The unit tests do not depend on the configuration's features
        // beyond what the full suites cover.
        const with_unit = std.mem.eql(u8, config.suite, "tests/all.zig");
        if (with_unit) {
            test_step.dependOn(runTest(b, target, unit, wasi_python));
            build_step.dependOn(&unit.step);
        }
        test_step.dependOn(runTest(b, target, suite, wasi_python));
        build_step.dependOn(&suite.step);
    }
    build_step.dependOn(example);
    build_step.dependOn(b.getInstallStep());
    if (!native) test_step.dependOn(example);
    if (native and target.result.os.tag == .linux and (only == null or std.mem.eql(u8, only.?, "c"))) addCTests(b, target, test_step, libs);
}

fn isForeignConfig(name: []const u8) bool {
    return containsName(&foreign_test_configs, name);
}

/// Runs a test binary: natively, under qemu or wine (zig build -fqemu,
/// -fwine), or for wasm32-wasi with tests/wasi_run.py when a Python with
/// wasmtime is given.
fn runTest(b: *std.Build, target: std.Build.ResolvedTarget, artifact: *std.Build.Step.Compile, wasi_python: ?[]const u8) *std.Build.Step {
    if (target.result.os.tag == .wasi) if (wasi_python) |python| {
        const run = b.addSystemCommand(&.{python});
        run.addFileArg(b.path("tests/wasi_run.py"));
        run.addArtifactArg(artifact);
        run.has_side_effects = true;
        return &run.step;
    };
    const run = b.addRunArtifact(artifact);
    // Under an emulator the same binary runs again with other settings
    // (QEMU_PAGESIZE): never take an earlier run's result from the cache.
    if (!isHost(b, target)) run.has_side_effects = true;
    return &run.step;
}

/// The C library's tests, each a C program linked with a library built
/// ReleaseSafe (assertions on) and again ReleaseFast where what the
/// optimizer does matters: conformance (shared, static, hardened), a
/// multi-threaded stress (fast and hardened), 20,000 threads alive at
/// once, misuse and faults under both
/// libraries, statistics, memcheck with the valgrind build, C++ operator
/// new and delete (with g++), and real programs under LD_PRELOAD with the
/// installed library.
fn addCTests(b: *std.Build, target: std.Build.ResolvedTarget, test_step: *std.Build.Step, installed: CLibraries) void {
    const checked = cLibraries(b, target, .safe, .{}, "kennel");
    const hardened = cLibraries(b, target, .safe, Features.secure, "kennel-secure");
    const hardened_fast = cLibraries(b, target, .fast, Features.secure, "kennel-secure");
    const Program = struct { name: []const u8, library: *std.Build.Step.Compile, args: []const []const u8 = &.{} };
    const programs = [_]Program{
        .{ .name = "conformance", .library = checked.shared, .args = &.{"fast"} },
        .{ .name = "conformance", .library = checked.static, .args = &.{"fast"} },
        .{ .name = "conformance", .library = hardened.shared, .args = &.{"secure"} },
        .{ .name = "stress", .library = checked.shared },
        .{ .name = "stress", .library = hardened.shared },
        .{ .name = "faults", .library = checked.shared, .args = &.{"fast"} },
        .{ .name = "faults", .library = installed.shared, .args = &.{"fast"} },
        .{ .name = "faults", .library = hardened.shared, .args = &.{"secure"} },
        .{ .name = "faults", .library = hardened_fast.shared, .args = &.{"secure"} },
        .{ .name = "stats", .library = checked.shared },
        .{ .name = "threads", .library = checked.shared },
        .{ .name = "remote", .library = checked.shared, .args = &.{"fast"} },
        .{ .name = "remote", .library = hardened.shared, .args = &.{"secure"} },
    };
    for (programs) |program| {
        const run = b.addRunArtifact(cTestProgram(b, target, program.name, program.library));
        run.addArgs(program.args);
        run.has_side_effects = true;
        test_step.dependOn(&run.step);
    }
    // A hardened detection's test must fail without the feature that makes
    // it, or it could pass by accident: faults.c's `without FEATURE` mode,
    // linked with the hardened library built without that one feature,
    // checks that the faults it lists for the feature are then missed.
    inline for (comptime std.meta.fieldNames(Features)) |name| {
        if (comptime @field(Features.secure, name)) {
            var ablated = Features.secure;
            @field(ablated, name) = false;
            const library = cLibraries(b, target, .fast, ablated, "kennel-secure-without-" ++ name).shared;
            const run = b.addRunArtifact(cTestProgram(b, target, "faults", library));
            run.addArgs(&.{ "without", name });
            run.has_side_effects = true;
            test_step.dependOn(&run.step);
        }
    }
    // Memcheck must see kennel's blocks with the valgrind build, and only
    // with it (the plain build is the control). For the baseline CPU:
    // valgrind cannot run AVX-512 code, which a native build may contain.
    var baseline_query = target.query;
    baseline_query.cpu_model = .baseline;
    const baseline = b.resolveTargetQuery(baseline_query);
    const valgrind_lib = cLibraries(b, baseline, .safe, .{ .valgrind = true }, "kennel-valgrind").shared;
    const plain_lib = cLibraries(b, baseline, .safe, .{}, "kennel").shared;
    const memcheck = b.addSystemCommand(&.{"sh"});
    memcheck.addFileArg(b.path("tests/c/memcheck.sh"));
    memcheck.addArtifactArg(cTestProgram(b, baseline, "use_after_free", valgrind_lib));
    memcheck.addArtifactArg(cTestProgram(b, baseline, "use_after_free", plain_lib));
    memcheck.has_side_effects = true;
    test_step.dependOn(&memcheck.step);

    // C++ programs built with the system g++ (libstdc++), each linked with
    // the checked shared and static libraries, the hardened one and the
    // installed (ReleaseFast) one; and a C++ plugin loaded with
    // dlopen(RTLD_LOCAL) under each shared one preloaded.
    const cxx = b.addSystemCommand(&.{"sh"});
    cxx.addFileArg(b.path("tests/c/cxx.sh"));
    cxx.addDirectoryArg(b.path("include"));
    for ([_]*std.Build.Step.Compile{ checked.shared, checked.static, hardened.shared, installed.shared }) |library| cxx.addArtifactArg(library);
    cxx.addFileInput(b.path("tests/c/cxx.cpp"));
    cxx.addFileInput(b.path("tests/c/cxx_replace.cpp"));
    cxx.addFileInput(b.path("tests/c/cxx_plugin.cpp"));
    cxx.addFileInput(b.path("tests/c/cxx_plugin_host.c"));
    cxx.has_side_effects = true;
    test_step.dependOn(&cxx.step);

    // Heap errors class by class under the C library's malloc and both
    // libraries as users get them (ReleaseFast, preloaded): the hardened
    // one must stop what glibc's malloc stops, and its documented classes.
    // ReleaseFast: a sanitizer's trap would stop errors under every library.
    const matrix_module = b.createModule(.{ .target = target, .optimize = .fast, .link_libc = true });
    matrix_module.addCSourceFile(.{ .file = b.path("tests/c/error_matrix.c"), .flags = &.{ "-std=gnu11", "-fno-builtin", "-Wall", "-Wextra", "-Werror" } });
    const matrix = b.addRunArtifact(b.addExecutable(.{ .name = "c-error_matrix", .root_module = matrix_module }));
    matrix.addArtifactArg(installed.shared);
    matrix.addArtifactArg(hardened_fast.shared);
    matrix.has_side_effects = true;
    test_step.dependOn(&matrix.step);

    // Real programs under LD_PRELOAD: the installed library, and the
    // hardened one as users get it (ReleaseFast), which must raise no false
    // alarm on programs that use the heap correctly.
    const preload = b.addSystemCommand(&.{"sh"});
    preload.addFileArg(b.path("tests/preload/run.sh"));
    preload.addArtifactArg(installed.shared);
    preload.addArtifactArg(hardened_fast.shared);
    preload.has_side_effects = true;
    test_step.dependOn(&preload.step);
}

/// tests/c/<name>.c linked with `library`.
fn cTestProgram(b: *std.Build, target: std.Build.ResolvedTarget, name: []const u8, library: *std.Build.Step.Compile) *std.Build.Step.Compile {
    const module = b.createModule(.{ .target = target, .optimize = .safe, .link_libc = true });
    module.addCSourceFile(.{ .file = b.path(b.fmt("tests/c/{s}.c", .{name})), .flags = &.{ "-std=gnu11", "-fno-builtin", "-Wall", "-Wextra", "-Werror" } });
    module.addIncludePath(b.path("include"));
    module.linkLibrary(library);
    module.linkSystemLibrary("pthread", .{});
    const linkage = @tagName(library.linkage.?);
    const optimize = @tagName(library.root_module.optimize.?);
    return b.addExecutable(.{ .name = b.fmt("c-{s}-{s}-{s}-{s}", .{ name, library.name, linkage, optimize }), .root_module = module });
}
