//! The Zig compiler's front end: every `.zig` file under a directory (the
//! standard library of the pinned Zig, passed with `--input`) is parsed into
//! an AST and lowered to ZIR with std.zig.Ast and std.zig.AstGen.
//!
//! Shaped like one compilation: the sources are read into memory first
//! (outside the allocator under test, so that part costs every allocator
//! the same), then worker threads take files from a shared queue; each
//! parses, lowers, frees the AST and files the ZIR in a map from path to
//! result that lives until the compilation ends, as the compiler keeps the
//! ZIR of every file. A pass is one such compilation, with its own threads
//! and map, all freed at its end; a fixed number of passes makes the run
//! long enough to measure.
//!
//! The totals (ZIR instructions, extra words, string bytes, imports, files
//! with errors) depend only on the sources: every pass must repeat the
//! first, and the driver prints them so that runs and allocators can be
//! compared.
const std = @import("std");
const linux = std.os.linux;
const Ast = std.zig.Ast;
const AstGen = std.zig.AstGen;
const Zir = std.zig.Zir;
const common = @import("../common.zig");

/// Compilations at scale 1.0: about 1-3 s on 2 threads of the 2-core
/// development machine over the standard library (563 files, 17 MB).
const passes_nominal = 3;
const threads_max = 128;
/// The parser and AstGen recurse once per nesting level of the source; the
/// compiler's workers get std.Thread's default stack, and so do these.
const worker_stack_bytes = std.Thread.SpawnConfig.default_stack_size;
const path_bytes_max = 4096;
const dirents_buffer_bytes = 16 * 1024;

const SourceFile = struct {
    /// Relative to the input directory: the key of the result map.
    path: [:0]const u8,
    source: [:0]const u8,
};

/// What depends only on the sources; equal for every pass and allocator.
const Totals = struct {
    files: u64 = 0,
    files_with_errors: u64 = 0,
    ast_nodes: u64 = 0,
    zir_instructions: u64 = 0,
    zir_extra_words: u64 = 0,
    zir_string_bytes: u64 = 0,
    zir_imports: u64 = 0,
};

/// What the front end keeps of one file until the compilation ends.
const FileResult = struct {
    zir: Zir,
    parse_errors: u32,
};

/// One compilation: a queue of files, and the results of those done.
const Compilation = struct {
    gpa: std.mem.Allocator,
    files: []const SourceFile,
    next_file: std.atomic.Value(usize) = .init(0),
    /// Guards results and totals (one short critical section per file).
    lock: common.SpinLock = .{},
    results: std.StringHashMapUnmanaged(FileResult) = .empty,
    totals: Totals = .{},

    fn work(c: *Compilation) void {
        while (true) {
            // Monotonic: the index only hands out files; the sources were
            // written before the threads started.
            const index = c.next_file.fetchAdd(1, .monotonic);
            if (index >= c.files.len) return;
            c.lower(c.files[index]);
        }
    }

    fn lower(c: *Compilation, file: SourceFile) void {
        var tree = Ast.parse(c.gpa, file.source, .{}) catch common.oom();
        const parse_errors: u32 = @intCast(tree.errors.len);
        const ast_nodes = tree.nodes.len;
        const zir = AstGen.generate(c.gpa, tree) catch common.oom();
        // ZIR refers to nothing in the AST: the compiler drops the tree here
        // and reparses if it ever needs it for an error message.
        tree.deinit(c.gpa);

        var imports: u64 = 0;
        const imports_index = zir.extra[@backingInt(Zir.ExtraIndex.imports)];
        if (imports_index != 0) imports = zir.extraData(Zir.Inst.Imports, imports_index).data.imports_len;
        const has_errors = parse_errors != 0 or zir.hasCompileErrors();

        c.lock.lock();
        defer c.lock.unlock();
        const entry = c.results.getOrPut(c.gpa, file.path) catch common.oom();
        common.check(!entry.found_existing, "frontend: each file lowered once per pass");
        entry.value_ptr.* = .{ .zir = zir, .parse_errors = parse_errors };
        c.totals.files += 1;
        c.totals.files_with_errors += @intFromBool(has_errors);
        c.totals.ast_nodes += ast_nodes;
        c.totals.zir_instructions += zir.instructions.len;
        c.totals.zir_extra_words += zir.extra.len;
        c.totals.zir_string_bytes += zir.string_bytes.len;
        c.totals.zir_imports += imports;
    }

    fn deinit(c: *Compilation) void {
        var it = c.results.valueIterator();
        while (it.next()) |result| result.zir.deinit(c.gpa);
        c.results.deinit(c.gpa);
    }
};

pub fn run(gpa: std.mem.Allocator, o: common.Options) void {
    const input = o.input orelse {
        std.debug.print("frontend: needs --input DIR (a tree of .zig files, e.g. zig's lib/std)\n", .{});
        std.process.exit(2);
    };
    // The sources stay in page_allocator's memory, never the allocator's:
    // reading them costs every allocator the same.
    var source_arena: std.heap.ArenaAllocator = .init(std.heap.page_allocator);
    defer source_arena.deinit();
    const files = readTree(source_arena.allocator(), input);
    common.check(files.len != 0, "frontend: the input directory holds .zig files");
    var source_bytes: u64 = 0;
    for (files) |f| source_bytes += f.source.len;

    const threads = std.math.clamp(o.threads, 1, threads_max);
    const passes = o.scaled(passes_nominal);
    var first: Totals = undefined;
    for (0..passes) |pass| {
        var compilation: Compilation = .{ .gpa = gpa, .files = files };
        // The calling thread is worker 0, as the compiler's main thread
        // helps its pool; with one thread nothing is spawned.
        var workers: [threads_max]std.Thread = undefined;
        for (workers[1..threads]) |*w| {
            w.* = std.Thread.spawn(.{ .stack_size = worker_stack_bytes }, Compilation.work, .{&compilation}) catch |err| {
                std.debug.print("cannot spawn a thread: {s}\n", .{@errorName(err)});
                std.process.exit(5);
            };
        }
        compilation.work();
        for (workers[1..threads]) |w| w.join();
        common.check(compilation.totals.files == files.len, "frontend: every file lowered");
        common.check(compilation.results.count() == files.len, "frontend: every file in the map");
        if (pass == 0) first = compilation.totals;
        common.check(std.meta.eql(first, compilation.totals), "frontend: every pass gives the same ZIR");
        compilation.deinit();
    }

    common.metric("files", @floatFromInt(first.files), "files");
    common.metric("source_bytes", @floatFromInt(source_bytes), "bytes");
    common.metric("passes", @floatFromInt(passes), "passes");
    common.metric("files_with_errors", @floatFromInt(first.files_with_errors), "files");
    common.metric("ast_nodes", @floatFromInt(first.ast_nodes), "nodes");
    common.metric("zir_instructions", @floatFromInt(first.zir_instructions), "instructions");
    common.metric("zir_extra_words", @floatFromInt(first.zir_extra_words), "words");
    common.metric("zir_string_bytes", @floatFromInt(first.zir_string_bytes), "bytes");
    common.metric("zir_imports", @floatFromInt(first.zir_imports), "imports");
}

/// Every .zig file under `root`, sorted by path so that the queue's order
/// is the same in every run.
fn readTree(arena: std.mem.Allocator, root: [:0]const u8) []SourceFile {
    var list: std.ArrayList(SourceFile) = .empty;
    const fd = openDirectory(linux.AT.FDCWD, root) orelse fail("cannot open the directory", root);
    var path: [path_bytes_max]u8 = undefined;
    walk(arena, &list, fd, &path, 0);
    std.mem.sort(SourceFile, list.items, {}, struct {
        fn lessThan(_: void, a: SourceFile, b: SourceFile) bool {
            return std.mem.lessThan(u8, a.path, b.path);
        }
    }.lessThan);
    return list.items;
}

/// Reads the directory `fd` (whose path relative to the root is
/// path[0..prefix_len]) and its subdirectories; closes `fd`.
fn walk(arena: std.mem.Allocator, list: *std.ArrayList(SourceFile), fd: linux.fd_t, path: *[path_bytes_max]u8, prefix_len: usize) void {
    defer _ = linux.close(fd);
    var buffer: [dirents_buffer_bytes]u8 align(@alignOf(linux.dirent64)) = undefined;
    while (true) {
        const rc = linux.getdents64(fd, &buffer, buffer.len);
        if (linux.errno(rc) != .SUCCESS) fail("cannot list the directory", path[0..prefix_len]);
        if (rc == 0) return;
        var offset: usize = 0;
        while (offset < rc) {
            const start = offset;
            const entry: *align(1) linux.dirent64 = @ptrCast(&buffer[start]);
            offset += entry.reclen;
            const name_ptr: [*:0]const u8 = @ptrCast(&buffer[start + @offsetOf(linux.dirent64, "name")]);
            const name = std.mem.sliceTo(name_ptr, 0);
            if (std.mem.eql(u8, name, ".") or std.mem.eql(u8, name, "..")) continue;
            const sub = switch (entry.type) {
                linux.DT.DIR => openDirectory(fd, name_ptr) orelse fail("cannot open the directory", name),
                // Some file systems leave the type out: try a directory.
                linux.DT.UNKNOWN => openDirectory(fd, name_ptr),
                else => null,
            };
            if (prefix_len + name.len + 1 >= path.len) fail("path too long:", name);
            @memcpy(path[prefix_len..][0..name.len], name);
            if (sub) |sub_fd| {
                path[prefix_len + name.len] = '/';
                walk(arena, list, sub_fd, path, prefix_len + name.len + 1);
            } else if ((entry.type == linux.DT.REG or entry.type == linux.DT.UNKNOWN) and std.mem.endsWith(u8, name, ".zig")) {
                const relative = path[0 .. prefix_len + name.len];
                list.append(arena, .{
                    .path = arena.dupeSentinel(u8, relative, 0) catch common.oom(),
                    .source = readFile(arena, fd, name_ptr, relative),
                }) catch common.oom();
            }
        }
    }
}

fn openDirectory(dir: linux.fd_t, name: [*:0]const u8) ?linux.fd_t {
    const rc = linux.openat(dir, name, .{ .DIRECTORY = true, .CLOEXEC = true }, 0);
    if (linux.errno(rc) != .SUCCESS) return null;
    return @intCast(rc);
}

fn readFile(arena: std.mem.Allocator, dir: linux.fd_t, name: [*:0]const u8, path: []const u8) [:0]const u8 {
    const rc = linux.openat(dir, name, .{ .CLOEXEC = true }, 0);
    if (linux.errno(rc) != .SUCCESS) fail("cannot open", path);
    const fd: linux.fd_t = @intCast(rc);
    defer _ = linux.close(fd);
    const end = linux.lseek(fd, 0, linux.SEEK.END);
    if (linux.errno(end) != .SUCCESS) fail("cannot seek in", path);
    const source = arena.allocSentinel(u8, end, 0) catch common.oom();
    var done: usize = 0;
    while (done < source.len) {
        const n = linux.pread(fd, source[done..].ptr, source.len - done, @intCast(done));
        if (linux.errno(n) != .SUCCESS) fail("cannot read", path);
        if (n == 0) fail("file shrank while read:", path);
        done += n;
    }
    return source;
}

fn fail(comptime what: []const u8, path: []const u8) noreturn {
    std.debug.print("frontend: " ++ what ++ " {s}\n", .{path});
    std.process.exit(2);
}
