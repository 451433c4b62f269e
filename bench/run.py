#!/usr/bin/env python3
"""kennel's benchmark driver (`make bench`).

Three sections, each run with kennel and its peers, every workload as its
own process, several times with the allocators interleaved (A B C A B C
...) so that drift on a shared machine hits all of them alike:

- Zig workloads (bench/workloads/, one binary per allocator, built by
  `zig build bench`), against smp_allocator, glibc, mimalloc, jemalloc and
  tcmalloc, each peer called through the entry points a C program uses;
- C workloads (bench/c/, built with gcc -O2), run under LD_PRELOAD for
  kennel, mimalloc, jemalloc and tcmalloc, and for glibc with the C library
  itself preloaded;
- real programs (python3, lua5.4, g++, redis) under LD_PRELOAD the same way.

For every run it records wall time, peak RSS, and from wait4's rusage the
user time, system time and minor page faults (the kernel's share of an
allocator's cost: mapping, unmapping and faulting pages in). It reports
medians, each as a ratio to kennel, geometric means per allocator, and the
project's targets over the C workloads and real programs together. Writes
Markdown, CSV and a chart to bench/results/ (latest.*, quick.* for
QUICK=1, partial.* for a run narrowed with the options below).

    make bench              full run
    make bench QUICK=1      a short first look
    make bench-instr        instruction counts per alloc+free pair (callgrind)
    make bench-secure       what the hardened build, and each of its features
                            alone, costs against the fast build (time, RSS,
                            instructions per pair)
    bench/run.py --only large_buffers,batch_free --no-build
                            some workloads only (any section); see --help
"""

import argparse
import csv
import datetime
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "zig-out", "bench")
RESULTS = os.path.join(ROOT, "bench", "results")

# (workload, section). Section "mt" runs the multi-threaded binaries, "st"
# the -fsingle-threaded ones.
WORKLOADS = [
    ("symmetric", "mt"),
    ("asymmetric", "mt"),
    ("mpsc", "mt"),
    ("larson", "mt"),
    ("xmalloc", "mt"),
    ("cache-scratch", "mt"),
    ("size-sweep", "mt"),
    ("realloc-growth", "mt"),
    ("fragmentation", "mt"),
    ("thread-churn", "mt"),
    ("frontend-1t", "mt"),
    ("frontend-2t", "mt"),
    ("symmetric", "st"),
    ("size-sweep", "st"),
]
ALLOCATORS = {
    "mt": ["kennel", "smp", "glibc", "mimalloc", "jemalloc", "tcmalloc"],
    "st": ["kennel", "glibc", "std-default"],
}
# Extra figures worth a column of their own: (workload, metric, label).
DETAILS = [
    ("size-sweep", "lifo_mean", "size sweep: ns per alloc+free pair, LIFO (mean over sizes)"),
    ("size-sweep", "window_mean", "size sweep: ns per pair, window of 64 live blocks"),
    ("mpsc", "rss_slope", "mpsc: RSS slope over the second half, MB/s"),
    ("fragmentation", "rss_over_live", "fragmentation: RSS at end over live bytes"),
]
# Each peer's runtime library (the name without its version) and the Debian
# package that installs it. The benchmark links it by path and preloads it,
# so the -dev packages are not needed.
# Rows that run a binary's workload with arguments of their own: the Zig
# compiler's front end over the standard library of the Zig that builds the
# binaries (STD_DIR, from `zig env`), on one and on two threads.
WORKLOAD_ARGUMENTS = {
    "frontend-1t": ["frontend", "--threads", "1", "--input", "{std}"],
    "frontend-2t": ["frontend", "--threads", "2", "--input", "{std}"],
}
STD_DIR = None
# Metrics that depend only on a workload's input: every run of every
# allocator must report the same value, or the workload computed wrong.
INVARIANT_METRICS = ["files", "files_with_errors", "zir_instructions", "zir_extra_words", "zir_string_bytes"]
PEER_LIBRARIES = {
    "mimalloc": ("libmimalloc.so", "libmimalloc2.0"),
    "jemalloc": ("libjemalloc.so", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so", "libtcmalloc-minimal4"),
}
PRELOAD_ALLOCATORS = ["kennel", "glibc", "mimalloc", "jemalloc", "tcmalloc"]
# make bench-secure: the fast build, the hardened one, each feature alone.
HARDENED_ALLOCATORS = ["kennel", "kennel-secure", "kennel-check-frees", "kennel-encode-lists", "kennel-guard-pages",
                       "kennel-randomize", "kennel-canary", "kennel-zero-freed", "kennel-quarantine",
                       "kennel-guard-freed-large", "kennel-fill-freed"]


def log(msg):
    print(msg, flush=True)


LIBRARY_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib"]


def peer_library(base):
    """The path of the runtime library `base`.N (e.g. libmimalloc.so.2),
    from the dynamic linker's cache, else from the usual directories; the
    unversioned name (a -dev package's link) only where no versioned one
    exists. None if the library is not installed."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    found = {}
    for line in out.splitlines():
        name = line.strip().split(" ", 1)[0]
        if "=>" in line and (name == base or re.fullmatch(re.escape(base) + r"(\.[0-9]+)+", name)):
            found.setdefault(name, line.split("=>", 1)[1].strip())
    for d in LIBRARY_DIRS:
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name == base or re.fullmatch(re.escape(base) + r"(\.[0-9]+)+", name):
                    found.setdefault(name, os.path.join(d, name))
    versioned = sorted((n for n in found if n != base), key=len)
    if versioned:
        return found[versioned[0]]
    return found.get(base)


def find_peers():
    """{peer: path of its runtime library, or None}, with a note for each
    peer that is missing."""
    peers = {}
    for name, (base, package) in PEER_LIBRARIES.items():
        peers[name] = peer_library(base)
        if peers[name] is None:
            log(f"{name} is not installed ({base}.N not found): skipping it (apt-get install {package})")
    return peers


def binary(section, allocator):
    return os.path.join(BIN, f"bench-{'st-' if section == 'st' else ''}{allocator}")


def log_run(start, name, k, runs, allocator, run):
    log(f"[{(time.perf_counter() - start) / 60:5.1f} min] {name[:22]:22} run {k}/{runs}  {allocator:12} {run['time']:7.3f} s  "
        f"{run['rss'] / 2**20:8.1f} MiB  user {run['user']:6.2f} s  sys {run['sys']:6.2f} s  {run['faults']:9d} faults")


def rusage_figures(usage):
    """What a finished process cost the kernel and the CPU, from wait4."""
    return {"user": usage.ru_utime, "sys": usage.ru_stime, "faults": usage.ru_minflt}


def run_measured(section, allocator, workload, scale):
    """Runs one process; returns a run: {time (wall seconds), rss (peak
    bytes), user and sys (CPU seconds), faults (minor page faults),
    metrics}."""
    arguments = [a.replace("{std}", STD_DIR or "") for a in WORKLOAD_ARGUMENTS.get(workload, [workload])]
    cmd = [binary(section, allocator)] + arguments + ["--scale", f"{scale}"]
    out_r, out_w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.dup2(out_w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(out_w)
    chunks = []
    while True:
        chunk = os.read(out_r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(out_r)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} {workload} failed (status {status})")
    metrics = {}
    for line in b"".join(chunks).decode().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "metric":
            metrics[parts[1]] = float(parts[2])
    # The process reports its own peak (VmHWM): ru_maxrss survives execve on
    # Linux and would include this driver's size at fork.
    peak = metrics.pop("peak_rss", None)
    if not peak:
        raise RuntimeError(f"{os.path.basename(cmd[0])} {workload} reported no peak RSS")
    # Workloads that cut slow allocators short report the time the nominal
    # work would take at the cost they measured (size-sweep).
    wall = metrics.get("projected_time", wall)
    return {"time": wall, "rss": peak, **rusage_figures(usage), "metrics": metrics}


# ---- Real programs under LD_PRELOAD ----------------------------------------


def parse_launch(text):
    """The figures bench-launch printed: (seconds, peak RSS, status, user,
    sys, minor faults), or None."""
    lines = [l for l in text.splitlines() if l.startswith("launch ")]
    if not lines:
        return None
    _, seconds, rss, status, user, system, faults = lines[-1].split()
    return {"time": float(seconds), "rss": int(rss), "status": int(status), "user": float(user), "sys": float(system), "faults": int(faults)}


def launch(cmd, env):
    """Runs cmd under bench-launch; returns a run (see run_measured)."""
    proc = subprocess.run([os.path.join(BIN, "bench-launch")] + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    figures = parse_launch(proc.stderr)
    if proc.returncode != 0 or not figures:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-300:]}")
    figures.pop("status")
    return {**figures, "metrics": {}}


# glibc's column preloads the C library itself: a program linked with
# another allocator would otherwise run on that one (Debian's redis-server
# links jemalloc, so its "glibc" runs were jemalloc's). For the others the
# C library already answers malloc, and preloading it changes nothing.
GLIBC_PRELOAD = "libc.so.6"


def preload_env(allocator, libraries):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["LD_PRELOAD"] = GLIBC_PRELOAD if allocator == "glibc" else libraries[allocator]
    return env


def run_redis(env, requests):
    """redis-server under the allocator, answering a bounded redis-benchmark
    run (not preloaded); returns a run: the benchmark's wall time, and the
    server's peak RSS, CPU time and page faults."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [os.path.join(BIN, "bench-launch"), shutil.which("redis-server"), "--port", str(port), "--save", "", "--appendonly", "no"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    cli = shutil.which("redis-cli")
    for _ in range(100):
        if subprocess.run([cli, "-p", str(port), "ping"], capture_output=True).returncode == 0:
            break
        time.sleep(0.05)
    start = time.perf_counter()
    bench = subprocess.run(
        [shutil.which("redis-benchmark"), "-p", str(port), "-n", str(requests), "-c", "50", "-r", "100000", "-d", "256", "-q",
         "-t", "set,get,lpush,lpop,hset,incr"],
        capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    subprocess.run([cli, "-p", str(port), "shutdown", "nosave"], capture_output=True)
    _, err = server.communicate()
    figures = parse_launch(err)
    if bench.returncode != 0 or not figures:
        raise RuntimeError(f"redis failed: {bench.stderr[-300:]} {err[-300:]}")
    figures.pop("status")
    return {**figures, "time": seconds, "metrics": {}}


# Real programs that run about a second: more runs for their medians.
SHORT_PROGRAMS = ("g++", "lua5.4")


def preload_programs(scale):
    programs = []
    python = shutil.which("python3")
    lua = shutil.which("lua5.4")
    if python:
        programs.append(("python3 (allocation-heavy script)", lambda env: launch([python, os.path.join(ROOT, "tests/preload/alloc_heavy.py")], env)))
    if lua:
        programs.append(("lua5.4 (table-heavy script)", lambda env: launch([lua, os.path.join(ROOT, "tests/preload/tables.lua")], env)))
    gxx = shutil.which("g++")
    if gxx:
        # A compiler: GCC's C++ front end and optimizer over a source that
        # pulls in the standard containers' headers (cc1plus allocates
        # through malloc, beside its own garbage-collected pages).
        source = os.path.join(ROOT, "tests/preload/cxx.cpp")
        programs.append(("g++ (compiling a C++ file, -O2)", lambda env: launch([gxx, "-O2", "-std=c++17", "-c", source, "-o", os.devnull], env)))
    if shutil.which("redis-server") and shutil.which("redis-benchmark") and shutil.which("redis-cli"):
        requests = max(10000, int(100000 * scale))
        programs.append((f"redis-server ({requests} requests x 6 commands)", lambda env: run_redis(env, requests)))
    return programs


def geomean(values):
    values = [v for v in values if v and v > 0]
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fmt_ratio(r):
    return "n/a" if r is None or math.isnan(r) else f"{r:.2f}x"


def machine_description():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, Linux {platform.release()}"


# valgrind (3.19, Debian 12) cannot run AVX-512 code, which a native build
# on a recent x86_64 machine contains: runs under callgrind use binaries
# built for x86-64-v3 (AVX2) instead.
VALGRIND_CPU = "x86_64_v3" if platform.machine() == "x86_64" else None


def build(zig, peers, hardening=False, cpu=None):
    cmd = [zig, "build", "install", "bench"] + [f"-D{p}={path}" for p, path in peers.items() if path]
    if hardening:
        cmd.append("-Dbench-hardening=true")
    if cpu:
        cmd.append(f"-Dcpu={cpu}")
    log("building: " + " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True)
    build_c(zig)
    for peer, path in peers.items():
        if path and peer != "mimalloc":
            check_binding(binary("mt", peer), path)


def check_binding(program, library):
    """jemalloc's and tcmalloc's binaries call malloc by its C name, which
    the dynamic linker binds to the first library that defines it: make
    sure that is the peer and not the C library, or the column would be
    glibc's."""
    env = dict(os.environ, LD_DEBUG="bindings")
    proc = subprocess.run([program, "symmetric", "--scale", "0.001"], env=env, capture_output=True, text=True)
    names = {os.path.basename(library), os.path.basename(os.path.realpath(library))}
    bound = [l for l in proc.stderr.splitlines() if f"{os.path.basename(program)} [0] to " in l and "normal symbol `malloc'" in l]
    if not bound or not all(any(n in l.split(" to ", 1)[1] for n in names) for l in bound):
        raise SystemExit(f"{os.path.basename(program)}: malloc is not bound to {library}: {bound[:2]}")


C_SOURCES = os.path.join(ROOT, "bench", "c")


def c_compiler(zig):
    """gcc as a C programmer would use it; `zig cc` where there is none."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    return [cc] if cc else [zig, "cc"]


def build_c(zig):
    """The C workloads (bench/c/*.c), each a plain program calling malloc
    and free, into zig-out/bench/c-<name>; rebuilt when a source is newer."""
    os.makedirs(BIN, exist_ok=True)
    header = os.path.join(C_SOURCES, "bench.h")
    for source in sorted(os.listdir(C_SOURCES)):
        if not source.endswith(".c"):
            continue
        src = os.path.join(C_SOURCES, source)
        out = os.path.join(BIN, "c-" + source[:-2])
        if os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(src), os.path.getmtime(header)):
            continue
        cmd = c_compiler(zig) + ["-O2", "-pthread", "-Wall", "-Wextra", "-Werror", "-o", out, src]
        log("building: " + " ".join(cmd))
        subprocess.run(cmd, cwd=ROOT, check=True)


FIGURES = ["time", "rss", "user", "sys", "faults"]


def median_cell(runs):
    """The median of each figure over the runs of one workload and allocator."""
    cell = {k: statistics.median(r[k] for r in runs) for k in FIGURES}
    cell["metrics"] = {k: statistics.median(r["metrics"][k] for r in runs if k in r["metrics"]) for k in runs[0]["metrics"]}
    cell["runs"] = len(runs)
    return cell


# The sections of the report, in order: (key, title, what a cell measures).
SECTIONS = [
    ("mt", "Zig workloads, multi-threaded build", "Zig programs with each allocator built in (bench/workloads/)."),
    ("st", "Zig workloads, single-threaded build (-fsingle-threaded)", ""),
    ("c", "C workloads under LD_PRELOAD",
     "C programs (bench/c/, built with gcc -O2) run with each allocator's library preloaded; glibc's column preloads the C library itself."),
    ("programs", "Real programs under LD_PRELOAD",
     "Wall time of the program (redis: of redis-benchmark against the server); peak RSS, system time and faults of the program "
     "(redis: of the server). glibc's column preloads the C library itself (Debian's redis-server links jemalloc, which otherwise answers)."),
]


def zig_std_dir(zig):
    """The standard library's directory, as `zig env` prints it (ZON in
    0.17.1, JSON in older versions)."""
    out = subprocess.run([zig, "env"], capture_output=True, text=True, check=True).stdout
    m = re.search(r'"?\.?std_dir"?\s*[:=]\s*"([^"]+)"', out)
    if not m or not os.path.isdir(m.group(1)):
        raise RuntimeError(f"`{zig} env` names no standard library directory")
    return m.group(1)


def measure_section(key, workloads, allocators, runs, measure, start, failures):
    """Runs every workload `runs` times for every allocator, interleaved,
    each round starting one allocator later (A B C, B C A, C A B ...), so
    that drift on a shared machine hits all alike, and so does whatever a
    run leaves to the next (the first runs after another workload or
    another allocator's run were slower: kennel's frontend-1t, always
    first, spread over 1.46-1.93 s while later ones stayed near 1.5 s);
    returns the section's rows: {workload, section, allocator: median cell}."""
    rows = []
    for workload in workloads:
        measured = {a: [] for a in allocators}
        for k in range(1, runs + 1):
            shift = (k - 1) % len(allocators)
            for a in allocators[shift:] + allocators[:shift]:
                try:
                    run = measure(workload, a)
                except RuntimeError as e:
                    log(f"  FAILED: {a}: {e}")
                    failures.append(f"{key} {workload} {a}")
                    continue
                measured[a].append(run)
                log_run(start, workload + (" (st)" if key == "st" else ""), k, runs, a, run)
        for name in INVARIANT_METRICS:
            values = {r["metrics"][name] for m in measured.values() for r in m if name in r["metrics"]}
            if len(values) > 1:
                log(f"  CHECK FAILED: {workload} reports different {name}: {sorted(values)}")
                failures.append(f"{key} {workload} {name}")
        row = {"workload": workload, "section": key}
        row.update({a: median_cell(m) for a, m in measured.items() if m})
        rows.append(row)
    return rows


def fmt_count(n):
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e4:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


def ratios(rows, allocator, key, base="kennel"):
    """allocator's figure over base's, for every row that has both."""
    return [r[allocator][key] / r[base][key] for r in rows if r.get(allocator) and r.get(base) and r[base][key] > 0 and r[allocator][key] > 0]


def render_section(title, note, allocators, rows):
    lines = [f"### {title}", ""]
    if note:
        lines += [note, ""]
    lines.append("| workload | " + " | ".join(allocators) + " |")
    lines.append("| --- | " + " | ".join("---" for _ in allocators) + " |")
    for row in rows:
        base = row.get("kennel")
        cells = []
        for a in allocators:
            cell = row.get(a)
            if cell is None:
                cells.append("—")
                continue
            t = f"{cell['time']:.3f} s"
            m = f"{cell['rss'] / 2**20:.1f} MiB"
            if base:
                t += f" ({cell['time'] / base['time']:.2f}x)"
                m += f" ({cell['rss'] / base['rss']:.2f}x)"
            cells.append(f"{t}<br>{m}<br>sys {cell['sys']:.3f} s, {fmt_count(cell['faults'])} flt")
        lines.append(f"| {row['workload']} | " + " | ".join(cells) + " |")
    lines.append("| **geometric mean, time** | " + " | ".join(fmt_ratio(geomean(ratios(rows, a, "time"))) for a in allocators) + " |")
    lines.append("| **geometric mean, peak RSS** | " + " | ".join(fmt_ratio(geomean(ratios(rows, a, "rss"))) for a in allocators) + " |")
    lines.append("| **geometric mean, minor faults** | " + " | ".join(fmt_ratio(geomean(ratios(rows, a, "faults"))) for a in allocators) + " |")
    # System time is often near zero, where ratios mean nothing: the sum.
    sums = {a: sum(r[a]["sys"] for r in rows if r.get(a)) for a in allocators}
    lines.append("| **system time, sum** | " + " | ".join(f"{sums[a]:.2f} s" + (f" ({sums[a] / sums['kennel']:.2f}x)" if sums.get("kennel") else "")
                                                         for a in allocators) + " |")
    lines.append("")
    return lines


def render_details(rows, allocators_by_section):
    detail_lines = []
    for workload, metric, label in DETAILS:
        for section in ["mt", "st"]:
            row = next((r for r in rows if r["workload"] == workload and r["section"] == section), None)
            if row is None:
                continue
            cells = []
            for a in allocators_by_section[section]:
                cell = row.get(a)
                value = cell["metrics"].get(metric) if cell else None
                cells.append("—" if value is None else f"{a} {value:.3g}")
            tag = "" if section == "mt" else " (single-threaded)"
            detail_lines.append(f"| {label}{tag} | " + ", ".join(cells) + " |")
    if not detail_lines:
        return []
    return ["### Workload figures", "", "| figure | medians |", "| --- | --- |"] + detail_lines + [""]


# The project's targets over the C workloads and the real programs together
# (issue 9): kennel's geometric-mean time and peak RSS against each peer's.
TARGETS = [
    ("time", "mimalloc", 0.85, "<="),
    ("time", "tcmalloc", 1.0, "<"),
    ("rss", "glibc", 1.0, "<="),
]


def render_targets(rows):
    """kennel's figure over the peer's (below 1: kennel better), geometric
    mean over the C workloads and the real programs, against the targets;
    then the workloads where kennel's system time or faults are above the
    best of glibc's and tcmalloc's (the bar for the purge policy)."""
    rows = [r for r in rows if r["section"] in ("c", "programs") and r.get("kennel")]
    if not rows:
        return []
    lines = ["### Targets", "",
             "kennel's figure as a ratio to the peer's (below 1: kennel is better), geometric mean over the C workloads "
             f"and the real programs ({len(rows)} workloads, medians as above):", "",
             "| figure | kennel / peer | target | |", "| --- | --- | --- | --- |"]
    for key, peer, bound, op in TARGETS:
        values = [r["kennel"][key] / r[peer][key] for r in rows if r.get(peer)]
        if not values:
            lines.append(f"| {'time' if key == 'time' else 'peak RSS'} / {peer} | n/a | {op} {bound:.2f} | |")
            continue
        g = geomean(values)
        met = g <= bound if op == "<=" else g < bound
        worst = max(rows, key=lambda r: r["kennel"][key] / r[peer][key] if r.get(peer) else 0)
        lines.append(f"| {'time' if key == 'time' else 'peak RSS'} / {peer} | {g:.3f} | {op} {bound:.2f} | "
                     f"{'met' if met else 'missed'}; worst: {worst['workload']} {worst['kennel'][key] / worst[peer][key]:.2f} |")
    lines.append("")
    return lines


def render_kernel(rows):
    """Workloads where kennel's system time or minor faults exceed the best
    of glibc's and tcmalloc's (system time below 10 ms is not counted)."""
    if not any(r.get("glibc") or r.get("tcmalloc") for r in rows):
        return []
    over = []
    for r in rows:
        k = r.get("kennel")
        peers = [r[p] for p in ("glibc", "tcmalloc") if r.get(p)]
        if not k or not peers:
            continue
        best_sys = min(p["sys"] for p in peers)
        best_faults = min(p["faults"] for p in peers)
        parts = []
        if k["sys"] > max(best_sys, 0.01) * 1.1:
            parts.append(f"sys {k['sys']:.2f} s vs {best_sys:.2f} s")
        # 1,000 faults (4 MiB) of slack: start-up differences are not a trend.
        if k["faults"] > best_faults * 1.1 and k["faults"] - best_faults > 1000:
            parts.append(f"faults {fmt_count(k['faults'])} vs {fmt_count(best_faults)}")
        if parts:
            tag = {"mt": "", "st": " (st)", "c": " (C)", "programs": ""}[r["section"]]
            over.append(f"| {r['workload']}{tag} | " + "; ".join(parts) + " |")
    lines = ["### Kernel cost", "",
             "Workloads where kennel's median system time or minor faults are more than 10% above the best of glibc's and tcmalloc's "
             "(system time under 10 ms, and fewer than 1,000 faults more, not counted):", ""]
    if not over:
        return lines + ["none", ""]
    return lines + ["| workload | kennel vs the best of glibc and tcmalloc |", "| --- | --- |"] + over + [""]


def render(rows, allocators_by_section, command, elapsed, runs_note):
    lines = []
    lines.append(f"Machine: {machine_description()}.  ")
    lines.append(f"Command: `{command}`; {datetime.datetime.now():%Y-%m-%d %H:%M}; took {elapsed / 60:.1f} min; {runs_note}.  ")
    lines.append("Each cell: median wall time (s) and peak RSS (MiB) of the whole process, with the ratio to kennel (lower is better for both); "
                 "then the median system time and minor page faults (flt), the kernel's share: mapping, unmapping and zeroing pages. "
                 "size-sweep's time is projected from its measured ns per pair over the nominal pairs, because each size stops after 20 ms.")
    lines.append("")
    for key, title, note in SECTIONS:
        section_rows = [r for r in rows if r["section"] == key]
        if section_rows:
            lines += render_section(title, note, allocators_by_section[key], section_rows)
    lines += render_details(rows, allocators_by_section)
    lines += render_targets(rows)
    lines += render_kernel(rows)
    return "\n".join(lines)


def write_csv(path, rows, allocators_by_section):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "workload", "allocator", "time_s", "peak_rss_bytes", "user_s", "sys_s", "minor_faults", "runs",
                    "time_ratio_to_kennel", "rss_ratio_to_kennel", "metrics"])
        for row in rows:
            base = row.get("kennel")
            for a in allocators_by_section[row["section"]]:
                cell = row.get(a)
                if cell is None:
                    continue
                w.writerow([
                    row["section"], row["workload"], a, f"{cell['time']:.4f}", int(cell["rss"]),
                    f"{cell['user']:.4f}", f"{cell['sys']:.4f}", int(cell["faults"]), cell["runs"],
                    f"{cell['time'] / base['time']:.4f}" if base else "",
                    f"{cell['rss'] / base['rss']:.4f}" if base else "",
                    ";".join(f"{k}={v:.4g}" for k, v in sorted(cell["metrics"].items()) if not k.startswith(("lifo_", "window_")) or k.endswith("_mean")),
                ])


def write_chart(path, rows, allocators_by_section):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed; no chart (make bench installs it into .venv)")
        return False
    allocators = []
    for key, _, _ in SECTIONS:
        allocators += [a for a in allocators_by_section.get(key, []) if a not in allocators]
    tag = {"mt": "", "st": " (st)", "c": " (C)", "programs": ""}
    labels = [f"{r['workload'].split(' (')[0]}{tag[r['section']]}" for r in rows]
    panels = [
        ("time", "wall time (s)", lambda c: c["time"]),
        ("rss", "peak RSS (MiB)", lambda c: c["rss"] / 2**20),
        # Floored at 1 ms, so that a log scale can show a zero.
        ("sys", "system time (s), 1 ms floor", lambda c: max(c["sys"], 0.001)),
        ("faults", "minor page faults", lambda c: max(c["faults"], 1)),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(14, 0.8 * len(rows)), 4 * len(panels)), sharex=True)
    width = 0.8 / len(allocators)
    for ax, (key, title, value) in zip(axes, panels):
        for i, a in enumerate(allocators):
            xs, ys = [], []
            for j, r in enumerate(rows):
                cell = r.get(a)
                if cell:
                    xs.append(j + (i - len(allocators) / 2 + 0.5) * width)
                    ys.append(value(cell))
            ax.bar(xs, ys, width, label=a)
        ax.set_yscale("log")
        ax.set_title(title + ", log scale; medians")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncol=len(allocators), fontsize=9)
    axes[-1].set_xticks(range(len(rows)))
    axes[-1].set_xticklabels(labels, rotation=35, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ---- The C workloads --------------------------------------------------------

# bench/c/<name>.c, built into zig-out/bench/c-<name>.
C_WORKLOADS = ["large_buffers", "batch_free", "mstress", "small_mix", "realloc_growth", "slot_swap", "big_heap"]


def preload_libraries(peers):
    return {"kennel": os.path.join(ROOT, "zig-out", "lib", "libkennel.so"), **{p: path for p, path in peers.items() if path}}


def run_benchmarks(args, peers):
    present = lambda names: [a for a in names if a not in peers or peers[a]]
    allocators_by_section = {s: present(names) for s, names in ALLOCATORS.items()}
    allocators_by_section["c"] = present(PRELOAD_ALLOCATORS)
    allocators_by_section["programs"] = present(PRELOAD_ALLOCATORS)
    if args.secure:
        allocators_by_section = {"mt": HARDENED_ALLOCATORS, "st": [], "c": [], "programs": []}
    if args.allocators:
        wanted = set(args.allocators.split(","))
        allocators_by_section = {s: [a for a in names if a in wanted or a == "kennel"] for s, names in allocators_by_section.items()}
    only = set(args.only.split(",")) if args.only else None
    # A real program is selected by its first word, or that word's part
    # before a hyphen (redis-server: redis).
    selected = lambda name: only is None or name in only or name.split(" ")[0] in only or name.split(" ")[0].split("-")[0] in only
    start = time.perf_counter()
    failures = []
    rows = []
    if not args.no_zig:
        for section in ["mt", "st"]:
            workloads = [w for w, s in WORKLOADS if s == section and selected(w)]
            if workloads and allocators_by_section[section]:
                rows += measure_section(section, workloads, allocators_by_section[section], args.runs,
                                        lambda w, a, section=section: run_measured(section, a, w, args.scale), start, failures)
    libraries = preload_libraries(peers)
    c_workloads = [w for w in C_WORKLOADS if selected(w)] if not args.no_c else []
    if c_workloads and allocators_by_section["c"]:
        scale = f"{args.scale}"
        rows += measure_section("c", c_workloads, allocators_by_section["c"], args.runs,
                                lambda w, a: launch([os.path.join(BIN, "c-" + w), "--scale", scale], preload_env(a, libraries)), start, failures)
    # Real programs run long; three runs give a median. The short ones
    # (about 1 s) get more: on this shared machine one program's run to
    # run spread reaches 60% (g++ under kennel, 7 runs: 1.02 to 1.64 s,
    # user time alike): kennel/mimalloc on g++ was 1.27 from a median of
    # three, 0.97 from seven interleaved runs an hour later.
    program_runs = min(args.runs, 3)
    short_program_runs = 2 * args.runs - 1
    programs = {name: run for name, run in preload_programs(args.scale) if selected(name)} if not args.no_preload else {}
    if programs and allocators_by_section["programs"]:
        for name in programs:
            runs = short_program_runs if name.startswith(SHORT_PROGRAMS) else program_runs
            rows += measure_section("programs", [name], allocators_by_section["programs"], runs,
                                    lambda w, a: programs[w](preload_env(a, libraries)), start, failures)
    elapsed = time.perf_counter() - start
    command = ("make bench-secure" if args.secure else "make bench") + (" QUICK=1" if args.quick else "")
    if args.only or args.no_zig or args.no_c or args.no_preload or args.allocators or args.runs_given or args.scale_given:
        command = "bench/run.py " + " ".join(sys.argv[1:])
    runs_note = f"{args.runs} interleaved runs per workload and allocator (each round starting with the next), scale {args.scale}" + (
        f" (real programs {program_runs}, {short_program_runs} for g++ and lua5.4)" if programs else "")
    text = render(rows, allocators_by_section, command, elapsed, runs_note)
    print()
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    # A partial run (some workloads, allocators or sections) must not
    # replace the full run's results.
    partial = command.startswith("bench/run.py")
    stem = ("secure-" if args.secure else "") + ("partial" if partial else "quick" if args.quick else "latest")
    with open(os.path.join(RESULTS, f"{stem}.md"), "w") as f:
        f.write(f"# kennel benchmark results ({stem})\n\n{text}\n")
    write_csv(os.path.join(RESULTS, f"{stem}.csv"), rows, allocators_by_section)
    charted = write_chart(os.path.join(RESULTS, f"{stem}.png"), rows, allocators_by_section) if rows else False
    log(f"wrote bench/results/{stem}.md, {stem}.csv" + (f", {stem}.png" if charted else ""))
    if failures:
        log("FAILED runs: " + ", ".join(failures))
    return 1 if failures else 0


def callgrind_instructions(cmd, env=None, options=()):
    """Returns (instructions executed, pairs the program reports)."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *options] + cmd,
        capture_output=True, text=True, env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"valgrind failed on {' '.join(cmd)}: {proc.stderr[-500:]}")
    m = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
    pairs = re.search(r"metric pairs (\d+)", proc.stdout)
    if not m or not pairs:
        raise RuntimeError("no instruction or pair count in the output")
    return int(m.group(1)), int(pairs.group(1))


def instructions_per_pair(cmd, n, repeats=1, env=None, options=()):
    """The difference of two runs with n and 2n pairs, per pair (start-up
    costs cancel out); the median of `repeats` such differences."""
    figures = []
    for _ in range(repeats):
        one, pairs_one = callgrind_instructions(cmd + [str(n)], env, options)
        two, pairs_two = callgrind_instructions(cmd + [str(2 * n)], env, options)
        figures.append((two - one) / (pairs_two - pairs_one))
    return figures


def format_instructions(figures):
    """One figure as is; several as their median and range."""
    if len(figures) == 1:
        return f"{figures[0]:.1f}"
    return f"{statistics.median(figures):.1f} ({min(figures):.0f} to {max(figures):.0f})"


# Large pairs set up and release a page each, and what kennel's purges do
# there depends on the clock (decay periods, waits), which callgrind slows
# about fifty times: a purge that falls in one run of a pair and not in
# the other moves a difference by hundreds of instructions either way
# (kennel: -295 per pair once, 6 to 121 in three tries minutes later,
# 2026-11-27). So the large figure is the median of three, with the range.
INSTR_REPEATS = {"small": 1, "medium": 1, "large": 3}


def run_instructions(args, peers):
    """Instructions per alloc+free pair, by size group."""
    if not shutil.which("valgrind"):
        log("valgrind is not installed (apt-get install valgrind)")
        return 1
    groups = ["small", "medium", "large"]
    n = 10000
    allocators = HARDENED_ALLOCATORS if args.secure else [a for a in ALLOCATORS["mt"] if a not in peers or peers[a]]
    table = {}
    for a in allocators:
        for group in groups:
            figures = instructions_per_pair([binary("mt", a), "instr", group], n, INSTR_REPEATS[group])
            table[(a, group)] = format_instructions(figures)
            log(f"{a:10} {group:7} {table[(a, group)]:>8} instructions per pair")
    lines = ["| allocator | " + " | ".join(f"{g} (8 B-1 KiB)" if g == "small" else f"{g} ({'1-64 KiB' if g == 'medium' else '64 KiB-1 MiB'})" for g in groups) + " |",
             "| --- | " + " | ".join("---" for _ in groups) + " |"]
    for a in allocators:
        lines.append(f"| {a} | " + " | ".join(table[(a, g)] for g in groups) + " |")
    cpu = f"; binaries built for {VALGRIND_CPU}" if VALGRIND_CPU else ""
    zig_title = ("Through std.mem.Allocator, from Zig (LIFO, every size of the group; includes the Allocator interface's own work and, "
                 "for the peers, the wrapper in bench/allocators.zig):")
    c_lines = c_pair_instructions(args, peers)
    text = "\n".join([zig_title, ""] + lines + ([""] + c_lines if c_lines else []))
    print()
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "secure-instructions.md" if args.secure else "instructions.md"), "w") as f:
        f.write("# Instructions per alloc+free pair\n\n")
        command = "make bench-secure" if args.secure else "make bench-instr"
        f.write(f"`{command}`, {datetime.datetime.now():%Y-%m-%d}; counts from valgrind callgrind (independent of machine load{cpu}).\n\n{text}\n")
    return 0


# The C pair counts only what runs inside these functions (and what they
# call): callgrind names every allocator's entry points so, mimalloc's and
# tcmalloc's included, whose malloc is an alias of mi_malloc / tc_malloc.
C_PAIR_ENTRY_POINTS = ["malloc", "free"]


def c_pair_instructions(args, peers):
    """Instructions per malloc+free pair for the allocator alone, from C:
    bench/c/instr_pair.c (a ring of 64 live blocks of 16 B-1 KiB) under
    LD_PRELOAD, callgrind collecting only inside malloc and free, runs of
    n and 2n pairs so that start-up costs cancel out. Returns table lines."""
    program = os.path.join(BIN, "c-instr_pair")
    libraries = preload_libraries(peers)
    if args.secure:
        libraries = {"kennel": libraries["kennel"], "kennel-secure": os.path.join(ROOT, "zig-out", "lib", "libkennel-secure.so")}
        allocators = ["kennel", "kennel-secure"]
    else:
        allocators = [a for a in PRELOAD_ALLOCATORS if a == "glibc" or a in libraries]
    options = [f"--toggle-collect={f}" for f in C_PAIR_ENTRY_POINTS]
    n = 20000
    lines = ["From C, malloc+free for the allocator alone (bench/c/instr_pair.c under LD_PRELOAD, glibc with the C library preloaded: a ring of 64 live "
             "blocks, each step frees the oldest and mallocs 16 B-1 KiB; callgrind counts only inside malloc and free, not the "
             "program's loop):", "", "| allocator | instructions per malloc+free pair |", "| --- | --- |"]
    for a in allocators:
        env = preload_env(a, libraries)
        per_pair, = instructions_per_pair([program], n, env=env, options=options)
        # A bump allocator counts 9 (8 in malloc, a return in free): fewer
        # means the toggles did not match the library's function names.
        if per_pair < 5:
            raise RuntimeError(f"{a}: {per_pair:.1f} instructions per pair: callgrind did not see its malloc and free")
        log(f"{a:10} C pair  {per_pair:8.1f} instructions per pair")
        lines.append(f"| {a} | {per_pair:.1f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zig", default="zig")
    parser.add_argument("--quick", action="store_true", help="a shorter run for a first look")
    parser.add_argument("--runs", type=int, help="runs per workload and allocator (default 5, quick 1)")
    parser.add_argument("--scale", type=float, help="work multiplier (default 1.0, quick 0.3)")
    parser.add_argument("--only", help="comma-separated workloads of any section: Zig (symmetric, ...), C (large_buffers, ...), "
                        "real programs (python3, lua5.4, g++, redis)")
    parser.add_argument("--allocators", help="comma-separated allocators (kennel always runs)")
    parser.add_argument("--instr", action="store_true", help="instruction counts with callgrind instead")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--no-preload", action="store_true", help="skip the real programs under LD_PRELOAD")
    parser.add_argument("--no-c", action="store_true", help="skip the C workloads")
    parser.add_argument("--no-zig", action="store_true", help="skip the Zig workloads")
    parser.add_argument("--secure", action="store_true", help="the hardened build and each of its features against the fast build")
    args = parser.parse_args()
    args.runs_given, args.scale_given = args.runs is not None, args.scale is not None
    if args.runs is None:
        args.runs = 1 if args.quick else (3 if args.secure else 5)
    if args.scale is None:
        args.scale = 0.3 if args.quick else 1.0

    peers = find_peers()
    if args.instr:
        if not args.no_build:
            build(args.zig, peers, hardening=args.secure, cpu=VALGRIND_CPU)
        return run_instructions(args, peers)
    if not args.no_build:
        build(args.zig, peers, hardening=args.secure)
    global STD_DIR
    STD_DIR = zig_std_dir(args.zig)
    status = run_benchmarks(args, peers)
    if args.secure and shutil.which("valgrind"):
        if not args.no_build:
            build(args.zig, peers, hardening=True, cpu=VALGRIND_CPU)
        status |= run_instructions(args, peers)
    return status


if __name__ == "__main__":
    sys.exit(main())
