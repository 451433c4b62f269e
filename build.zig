const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});

    // The module users import: `b.dependency("kennel", ...).module("kennel")`.
    _ = b.addModule("kennel", .{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
    });

    addTests(b, target);
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

fn addTests(b: *std.Build, target: std.Build.ResolvedTarget) void {
    const only = b.option([]const u8, "test-config", "Run the tests of one configuration only (e.g. debug, release-fast)");
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
}
