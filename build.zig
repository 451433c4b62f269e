const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    // An allocator is built to be fast: ReleaseFast unless told otherwise.
    const optimize = b.option(std.lang.Optimize, "optimize", "Prioritize performance, safety, or binary size (default: fast)") orelse .fast;

    // The module users import: `b.dependency("kennel", ...).module("kennel")`.
    _ = b.addModule("kennel", .{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
    });

    const libs = addCLibrary(b, target, optimize);
    addTests(b, target, libs);
    addBench(b, target);
}

const CLibraries = struct { shared: *std.Build.Step.Compile, static: *std.Build.Step.Compile };
const c_library_version: std.SemanticVersion = .{ .major = 0, .minor = 1, .patch = 0 };

fn cLibraries(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.lang.Optimize) CLibraries {
    const module = b.createModule(.{
        .root_source_file = b.path("src/c.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .pic = true,
    });
    return .{
        .shared = b.addLibrary(.{ .name = "kennel", .linkage = .dynamic, .root_module = module, .version = c_library_version }),
        .static = b.addLibrary(.{ .name = "kennel", .linkage = .static, .root_module = module }),
    };
}

/// libkennel.so and libkennel.a (the malloc family, src/c.zig), kennel.h
/// and a pkg-config file, installed by plain `zig build`.
fn addCLibrary(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.lang.Optimize) CLibraries {
    const version = c_library_version;
    const libs = cLibraries(b, target, optimize);
    const shared = libs.shared;
    const static = libs.static;
    b.installArtifact(shared);
    b.installArtifact(static);
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
    return .{ .shared = shared, .static = static };
}

/// The benchmark binaries, one per allocator (mimalloc and jemalloc replace
/// malloc in any process that links them), always built ReleaseFast and
/// installed in zig-out/bench/. bench/run.py drives them.
fn addBench(b: *std.Build, target: std.Build.ResolvedTarget) void {
    const with_mimalloc = b.option(bool, "mimalloc", "Build the mimalloc benchmark binary (needs libmimalloc-dev)") orelse false;
    const with_jemalloc = b.option(bool, "jemalloc", "Build the jemalloc benchmark binary (needs libjemalloc-dev)") orelse false;
    const bench_step = b.step("bench", "Build the benchmark binaries into zig-out/bench");
    const entries = [_]struct {
        name: []const u8,
        allocator: []const u8,
        single_threaded: bool = false,
        link_libc: bool = false,
        system_library: ?[]const u8 = null,
        enabled: bool = true,
    }{
        .{ .name = "kennel", .allocator = "kennel" },
        .{ .name = "smp", .allocator = "smp" },
        .{ .name = "glibc", .allocator = "glibc", .link_libc = true },
        .{ .name = "mimalloc", .allocator = "mimalloc", .link_libc = true, .system_library = "mimalloc", .enabled = with_mimalloc },
        .{ .name = "jemalloc", .allocator = "jemalloc", .link_libc = true, .system_library = "jemalloc", .enabled = with_jemalloc },
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
        const options = b.addOptions();
        options.addOption([]const u8, "allocator", entry.allocator);
        const kennel = b.createModule(.{
            .root_source_file = b.path("src/root.zig"),
            .target = target,
            .optimize = .fast,
            .single_threaded = entry.single_threaded,
        });
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
        if (entry.system_library) |lib| module.linkSystemLibrary(lib, .{});
        const exe = b.addExecutable(.{ .name = b.fmt("bench-{s}", .{entry.name}), .root_module = module });
        bench_step.dependOn(&b.addInstallArtifact(exe, .{ .dest_dir = .{ .override = .{ .custom = "bench" } } }).step);
    }
}

/// Every configuration the tests run in. Release modes catch what
/// optimization exposes; Debug and ReleaseSafe keep assertions on; libc
/// switches thread exit from tgkill probing to pthread key destructors.
const test_configs = [_]struct {
    name: []const u8,
    optimize: std.lang.Optimize,
    single_threaded: bool = false,
    link_libc: bool = false,
}{
    .{ .name = "debug", .optimize = .debug },
    .{ .name = "release-fast", .optimize = .fast },
    .{ .name = "debug-libc", .optimize = .debug, .link_libc = true },
    .{ .name = "release-safe-libc", .optimize = .safe, .link_libc = true },
    .{ .name = "single-threaded-debug", .optimize = .debug, .single_threaded = true },
    .{ .name = "single-threaded-release-fast", .optimize = .fast, .single_threaded = true },
};

fn addTests(b: *std.Build, target: std.Build.ResolvedTarget, libs: CLibraries) void {
    const only = b.option([]const u8, "test-config", "Run the tests of one configuration only (e.g. debug, release-fast; c for the C library)");
    const filters = b.option([]const []const u8, "test-filter", "Run only tests whose name contains this") orelse &.{};
    const test_step = b.step("test", "Run all tests in every configuration");
    for (test_configs) |config| {
        if (only) |name| if (!std.mem.eql(u8, name, config.name)) continue;
        const kennel = b.createModule(.{
            .root_source_file = b.path("src/root.zig"),
            .target = target,
            .optimize = config.optimize,
            .single_threaded = config.single_threaded,
            .link_libc = config.link_libc,
        });
        const runner: std.Build.Step.Compile.TestRunner = .{ .path = b.path("tests/runner.zig"), .mode = .simple };
        const unit = b.addTest(.{ .name = b.fmt("unit-{s}", .{config.name}), .root_module = kennel, .filters = filters, .test_runner = runner });
        const suite = b.addTest(.{
            .name = b.fmt("suite-{s}", .{config.name}),
            .filters = filters,
            .test_runner = runner,
            .root_module = b.createModule(.{
                .root_source_file = b.path("tests/all.zig"),
                .target = target,
                .optimize = config.optimize,
                .single_threaded = config.single_threaded,
                .link_libc = config.link_libc,
                .imports = &.{.{ .name = "kennel", .module = kennel }},
            }),
        });
        test_step.dependOn(&b.addRunArtifact(unit).step);
        test_step.dependOn(&b.addRunArtifact(suite).step);
    }
    if (only == null or std.mem.eql(u8, only.?, "c")) addCTests(b, target, test_step, libs);
}

/// The C library's tests: conformance, misuse and a multi-threaded stress
/// in C against a ReleaseSafe build (assertions on), conformance again
/// against the static library, and real programs under LD_PRELOAD with the
/// installed ReleaseFast library.
fn addCTests(b: *std.Build, target: std.Build.ResolvedTarget, test_step: *std.Build.Step, installed: CLibraries) void {
    const checked = cLibraries(b, target, .safe);
    const programs = [_]struct { name: []const u8, library: *std.Build.Step.Compile }{
        .{ .name = "conformance", .library = checked.shared },
        .{ .name = "misuse", .library = checked.shared },
        .{ .name = "stress", .library = checked.shared },
        .{ .name = "conformance", .library = checked.static },
    };
    for (programs) |program| {
        const module = b.createModule(.{ .target = target, .optimize = .safe, .link_libc = true });
        module.addCSourceFile(.{ .file = b.path(b.fmt("tests/c/{s}.c", .{program.name})), .flags = &.{ "-std=gnu11", "-fno-builtin", "-Wall", "-Wextra", "-Werror" } });
        module.addIncludePath(b.path("include"));
        module.linkLibrary(program.library);
        module.linkSystemLibrary("pthread", .{});
        const linkage = @tagName(program.library.linkage.?);
        const exe = b.addExecutable(.{ .name = b.fmt("c-{s}-{s}", .{ program.name, linkage }), .root_module = module });
        const run = b.addRunArtifact(exe);
        run.has_side_effects = true;
        test_step.dependOn(&run.step);
    }
    const preload = b.addSystemCommand(&.{"sh"});
    preload.addFileArg(b.path("tests/preload/run.sh"));
    preload.addArtifactArg(installed.shared);
    preload.has_side_effects = true;
    test_step.dependOn(&preload.step);
}
