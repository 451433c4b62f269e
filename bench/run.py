#!/usr/bin/env python3
"""kennel's benchmark driver (`make bench`).

Builds the workload binaries (bench/main.zig, one per allocator), runs every
workload for every allocator as its own process, several times with the
allocators interleaved (A B C A B C ...) so that drift on a shared machine
hits all of them alike, and reports medians of wall time and peak RSS (the
kernel's VmHWM, which each process reports at exit), each as a ratio to
kennel, with the geometric mean of the ratios per allocator. Writes the same as Markdown and CSV, and a chart, to
bench/results/.

    make bench              full run
    make bench QUICK=1      a short first look
    make bench-instr        instruction counts per alloc+free pair (callgrind)
    make bench-secure       what the hardened build, and each of its features
                            alone, costs against the fast build (time, RSS,
                            instructions per pair)
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
    "mt": ["kennel", "smp", "glibc", "mimalloc", "jemalloc"],
    "st": ["kennel", "glibc", "std-default"],
}
# Extra figures worth a column of their own: (workload, metric, label).
DETAILS = [
    ("size-sweep", "lifo_mean", "size sweep: ns per alloc+free pair, LIFO (mean over sizes)"),
    ("size-sweep", "window_mean", "size sweep: ns per pair, window of 64 live blocks"),
    ("mpsc", "rss_slope", "mpsc: RSS slope over the second half, MB/s"),
    ("fragmentation", "rss_over_live", "fragmentation: RSS at end over live bytes"),
]
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
PEER_LIBRARIES = {"mimalloc": "libmimalloc.so", "jemalloc": "libjemalloc.so"}
# Runtime libraries for LD_PRELOAD (the -dev packages' libraries above are
# the link-time names of the same files).
PRELOAD_LIBRARIES = {"mimalloc": "libmimalloc.so.2", "jemalloc": "libjemalloc.so.2"}
PRELOAD_ALLOCATORS = ["kennel", "glibc", "mimalloc", "jemalloc"]
# make bench-secure: the fast build, the hardened one, each feature alone.
HARDENED_ALLOCATORS = ["kennel", "kennel-secure", "kennel-check-frees", "kennel-encode-lists", "kennel-guard-pages",
                       "kennel-randomize", "kennel-canary", "kennel-fill-freed"]


def log(msg):
    print(msg, flush=True)


def library_present(name):
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    if name in out:
        return True
    return any(
        os.path.exists(os.path.join(d, name))
        for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib"]
    )


def binary(section, allocator):
    return os.path.join(BIN, f"bench-{'st-' if section == 'st' else ''}{allocator}")


def run_measured(section, allocator, workload, scale):
    """Runs one process; returns (wall seconds, peak RSS bytes, metrics)."""
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
    _, status, _ = os.wait4(pid, 0)
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
    return wall, peak, metrics


# ---- Real programs under LD_PRELOAD ----------------------------------------


def launch(cmd, env):
    """Runs cmd under bench-launch; returns (seconds, peak RSS bytes)."""
    proc = subprocess.run([os.path.join(BIN, "bench-launch")] + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = [l for l in proc.stderr.splitlines() if l.startswith("launch ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-300:]}")
    _, seconds, rss, _ = line[-1].split()
    return float(seconds), int(rss)


def preload_env(allocator, libraries):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if allocator != "glibc":
        env["LD_PRELOAD"] = libraries[allocator]
    return env


def run_redis(env, requests):
    """redis-server under the allocator, answering a bounded redis-benchmark
    run (not preloaded); returns (benchmark seconds, server peak RSS)."""
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
    line = [l for l in err.splitlines() if l.startswith("launch ")]
    if bench.returncode != 0 or not line:
        raise RuntimeError(f"redis failed: {bench.stderr[-300:]} {err[-300:]}")
    return seconds, int(line[-1].split()[2])


def preload_programs(scale):
    programs = []
    python = shutil.which("python3")
    lua = shutil.which("lua5.4")
    if python:
        programs.append(("python3 (allocation-heavy script)", lambda env: launch([python, os.path.join(ROOT, "tests/preload/alloc_heavy.py")], env)))
    if lua:
        programs.append(("lua5.4 (table-heavy script)", lambda env: launch([lua, os.path.join(ROOT, "tests/preload/tables.lua")], env)))
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


def library_path(name):
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        if line.strip().startswith(name + " ") and "=>" in line:
            return line.split("=>", 1)[1].strip()
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib"]:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


# valgrind (3.19, Debian 12) cannot run AVX-512 code, which a native build
# on a recent x86_64 machine contains: runs under callgrind use binaries
# built for x86-64-v3 (AVX2) instead.
VALGRIND_CPU = "x86_64_v3" if platform.machine() == "x86_64" else None


def build(zig, peers, hardening=False, cpu=None):
    cmd = [zig, "build", "install", "bench"] + [f"-D{p}={'true' if peers[p] else 'false'}" for p in peers]
    if hardening:
        cmd.append("-Dbench-hardening=true")
    if cpu:
        cmd.append(f"-Dcpu={cpu}")
    log("building: " + " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True)


def zig_std_dir(zig):
    """The standard library's directory, as `zig env` prints it (ZON in
    0.17.1, JSON in older versions)."""
    out = subprocess.run([zig, "env"], capture_output=True, text=True, check=True).stdout
    m = re.search(r'"?\.?std_dir"?\s*[:=]\s*"([^"]+)"', out)
    if not m or not os.path.isdir(m.group(1)):
        raise RuntimeError(f"`{zig} env` names no standard library directory")
    return m.group(1)


def check_invariants(results):
    """Returns how many workloads reported differing INVARIANT_METRICS."""
    failures = 0
    for (workload, section), per_alloc in results.items():
        for name in INVARIANT_METRICS:
            values = {(a, r[2][name]) for a, runs in per_alloc.items() for r in runs if name in r[2]}
            if len({v for _, v in values}) > 1:
                log(f"  CHECK FAILED: {workload} reports different {name}: {sorted(values)}")
                failures += 1
    return failures


def summarize(results):
    """results[(workload, section)][allocator] = list of (wall, rss, metrics)."""
    rows = []
    for (workload, section), per_alloc in results.items():
        row = {"workload": workload, "section": section}
        for allocator, runs in per_alloc.items():
            if not runs:
                continue
            row[allocator] = {
                "time": statistics.median(r[0] for r in runs),
                "rss": statistics.median(r[1] for r in runs),
                "metrics": {k: statistics.median(r[2][k] for r in runs if k in r[2]) for k in runs[0][2]},
            }
        rows.append(row)
    return rows


def render(rows, allocators_by_section, command, elapsed):
    lines = []
    lines.append(f"Machine: {machine_description()}.  ")
    lines.append(f"Command: `{command}`; {datetime.datetime.now():%Y-%m-%d %H:%M}; took {elapsed / 60:.1f} min.  ")
    lines.append("Each cell: median wall time (s) and peak RSS (MiB) of the whole process, with the ratio to kennel (lower is better for both). "
                 "size-sweep's time is projected from its measured ns per pair over the nominal pairs, because each size stops after 20 ms.")
    lines.append("")
    geo = {}
    for section, title in [("mt", "Multi-threaded build"), ("st", "Single-threaded build (-fsingle-threaded)")]:
        allocators = allocators_by_section[section]
        section_rows = [r for r in rows if r["section"] == section]
        if not section_rows:
            continue
        lines.append(f"### {title}")
        lines.append("")
        lines.append("| workload | " + " | ".join(allocators) + " |")
        lines.append("| --- | " + " | ".join("---" for _ in allocators) + " |")
        time_ratios = {a: [] for a in allocators}
        rss_ratios = {a: [] for a in allocators}
        for row in section_rows:
            base = row.get("kennel")
            cells = []
            for a in allocators:
                cell = row.get(a)
                if cell is None:
                    cells.append("—")
                    continue
                if base:
                    tr = cell["time"] / base["time"]
                    rr = cell["rss"] / base["rss"]
                    time_ratios[a].append(tr)
                    rss_ratios[a].append(rr)
                    cells.append(f"{cell['time']:.3f} s ({tr:.2f}x)<br>{cell['rss'] / 2**20:.1f} MiB ({rr:.2f}x)")
                else:
                    cells.append(f"{cell['time']:.3f} s<br>{cell['rss'] / 2**20:.1f} MiB")
            lines.append(f"| {row['workload']} | " + " | ".join(cells) + " |")
        tg = {a: geomean(time_ratios[a]) for a in allocators}
        rg = {a: geomean(rss_ratios[a]) for a in allocators}
        geo[section] = (tg, rg)
        lines.append("| **geometric mean, time** | " + " | ".join(fmt_ratio(tg[a]) for a in allocators) + " |")
        lines.append("| **geometric mean, peak RSS** | " + " | ".join(fmt_ratio(rg[a]) for a in allocators) + " |")
        lines.append("")
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
    if detail_lines:
        lines.append("### Workload figures")
        lines.append("")
        lines.append("| figure | medians |")
        lines.append("| --- | --- |")
        lines.extend(detail_lines)
        lines.append("")
    return "\n".join(lines), geo


def write_csv(path, rows, allocators_by_section):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "workload", "allocator", "time_s", "peak_rss_bytes", "time_ratio_to_kennel", "rss_ratio_to_kennel", "metrics"])
        for row in rows:
            base = row.get("kennel")
            for a in allocators_by_section[row["section"]]:
                cell = row.get(a)
                if cell is None:
                    continue
                w.writerow([
                    row["section"], row["workload"], a, f"{cell['time']:.4f}", int(cell["rss"]),
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
    allocators = allocators_by_section["mt"] + [a for a in allocators_by_section["st"] if a not in allocators_by_section["mt"]]
    labels = [f"{r['workload']}{' (st)' if r['section'] == 'st' else ''}" for r in rows]
    fig, axes = plt.subplots(2, 1, figsize=(14, 9), sharex=True)
    width = 0.8 / len(allocators)
    for ax, key, title in [(axes[0], "time", "wall time (s), log scale"), (axes[1], "rss", "peak RSS (MiB), log scale")]:
        for i, a in enumerate(allocators):
            xs, ys = [], []
            for j, r in enumerate(rows):
                cell = r.get(a)
                if cell:
                    xs.append(j + (i - len(allocators) / 2 + 0.5) * width)
                    ys.append(cell[key] if key == "time" else cell[key] / 2**20)
            ax.bar(xs, ys, width, label=a)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncol=len(allocators), fontsize=9)
    axes[1].set_xticks(range(len(rows)))
    axes[1].set_xticklabels(labels, rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def run_benchmarks(args, peers):
    allocators_by_section = {s: [a for a in names if peers.get(a, True)] for s, names in ALLOCATORS.items()}
    if args.secure:
        allocators_by_section = {"mt": HARDENED_ALLOCATORS, "st": []}
    if args.allocators:
        wanted = set(args.allocators.split(","))
        allocators_by_section = {s: [a for a in names if a in wanted or a == "kennel"] for s, names in allocators_by_section.items()}
    workloads = [w for w in WORKLOADS if (not args.only or w[0] in args.only.split(",")) and allocators_by_section[w[1]]]
    results = {w: {a: [] for a in allocators_by_section[w[1]]} for w in workloads}
    start = time.perf_counter()
    for workload, section in workloads:
        allocators = allocators_by_section[section]
        for k in range(1, args.runs + 1):
            for a in allocators:
                try:
                    wall, rss, metrics = run_measured(section, a, workload, args.scale)
                except RuntimeError as e:
                    log(f"  FAILED: {e}")
                    continue
                results[(workload, section)][a].append((wall, rss, metrics))
                elapsed = time.perf_counter() - start
                tag = "" if section == "mt" else " (st)"
                log(f"[{elapsed / 60:5.1f} min] {workload + tag:22} run {k}/{args.runs}  {a:12} {wall:7.3f} s  {rss / 2**20:8.1f} MiB")
    invariant_failures = check_invariants(results)
    rows = summarize(results)
    preload_rows = []
    if not args.only and not args.no_preload and not args.secure:
        preload_rows = run_preload(args, peers, start)
    elapsed = time.perf_counter() - start
    command = ("make bench-secure" if args.secure else "make bench") + (" QUICK=1" if args.quick else "")
    text, _ = render(rows, allocators_by_section, command, elapsed)
    text += render_preload(preload_rows)
    print()
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    stem = ("secure-" if args.secure else "") + ("quick" if args.quick else "latest")
    with open(os.path.join(RESULTS, f"{stem}.md"), "w") as f:
        f.write(f"# kennel benchmark results ({stem})\n\n{text}\n")
    write_csv(os.path.join(RESULTS, f"{stem}.csv"), rows, allocators_by_section)
    charted = write_chart(os.path.join(RESULTS, f"{stem}.png"), rows, allocators_by_section)
    log(f"wrote bench/results/{stem}.md, {stem}.csv" + (f", {stem}.png" if charted else ""))
    failures = sum(1 for per in results.values() for runs in per.values() if len(runs) < args.runs)
    return 1 if failures or invariant_failures else 0


def run_preload(args, peers, start):
    libraries = {"kennel": os.path.join(ROOT, "zig-out", "lib", "libkennel.so")}
    for name, lib in PRELOAD_LIBRARIES.items():
        path = library_path(lib)
        if path:
            libraries[name] = path
    allocators = [a for a in PRELOAD_ALLOCATORS if a == "glibc" or a in libraries]
    programs = preload_programs(args.scale)
    if not programs:
        log("no real programs installed for the LD_PRELOAD section (python3, lua5.4, redis-server)")
        return []
    rows = []
    # Real programs run long; three runs give a median.
    runs = min(args.runs, 3)
    for name, run in programs:
        results = {a: [] for a in allocators}
        for k in range(1, runs + 1):
            for a in allocators:
                try:
                    results[a].append(run(preload_env(a, libraries)))
                except RuntimeError as e:
                    log(f"  FAILED: {a}: {e}")
                    continue
                wall, rss = results[a][-1]
                log(f"[{(time.perf_counter() - start) / 60:5.1f} min] {name[:22]:22} run {k}/{runs}  {a:12} {wall:7.3f} s  {rss / 2**20:8.1f} MiB")
        row = {"workload": name}
        for a, measured in results.items():
            if measured:
                row[a] = {"time": statistics.median(r[0] for r in measured), "rss": statistics.median(r[1] for r in measured)}
        rows.append(row)
    return rows


def render_preload(rows):
    if not rows:
        return ""
    allocators = [a for a in PRELOAD_ALLOCATORS if any(a in r for r in rows)]
    lines = ["### Real programs under LD_PRELOAD", "",
             "Wall time of the program (redis: of redis-benchmark against the server) and peak RSS of the program (redis: of the server), medians, "
             "with the ratio to kennel. glibc is the program without LD_PRELOAD.", "",
             "| program | " + " | ".join(allocators) + " |", "| --- | " + " | ".join("---" for _ in allocators) + " |"]
    time_ratios = {a: [] for a in allocators}
    rss_ratios = {a: [] for a in allocators}
    for row in rows:
        base = row.get("kennel")
        cells = []
        for a in allocators:
            cell = row.get(a)
            if cell is None:
                cells.append("—")
            elif base:
                tr, rr = cell["time"] / base["time"], cell["rss"] / base["rss"]
                time_ratios[a].append(tr)
                rss_ratios[a].append(rr)
                cells.append(f"{cell['time']:.3f} s ({tr:.2f}x)<br>{cell['rss'] / 2**20:.1f} MiB ({rr:.2f}x)")
            else:
                cells.append(f"{cell['time']:.3f} s<br>{cell['rss'] / 2**20:.1f} MiB")
        lines.append(f"| {row['workload']} | " + " | ".join(cells) + " |")
    lines.append("| **geometric mean, time** | " + " | ".join(fmt_ratio(geomean(time_ratios[a])) for a in allocators) + " |")
    lines.append("| **geometric mean, peak RSS** | " + " | ".join(fmt_ratio(geomean(rss_ratios[a])) for a in allocators) + " |")
    lines.append("")
    return "\n" + "\n".join(lines)


def callgrind_instructions(cmd):
    """Returns (instructions executed, pairs the program reports)."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd,
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"valgrind failed on {' '.join(cmd)}: {proc.stderr[-500:]}")
    m = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
    pairs = re.search(r"metric pairs (\d+)", proc.stdout)
    if not m or not pairs:
        raise RuntimeError("no instruction or pair count in the output")
    return int(m.group(1)), int(pairs.group(1))


def run_instructions(args, peers):
    """Instructions per alloc+free pair, by size group: the difference of two
    runs with n and 2n pairs per size, so start-up costs cancel out."""
    if not shutil.which("valgrind"):
        log("valgrind is not installed (apt-get install valgrind)")
        return 1
    groups = ["small", "medium", "large"]
    n = 10000
    allocators = HARDENED_ALLOCATORS if args.secure else [a for a in ALLOCATORS["mt"] if peers.get(a, True)]
    table = {}
    for a in allocators:
        for group in groups:
            cmd = [binary("mt", a), "instr", group]
            one, pairs_one = callgrind_instructions(cmd + [str(n)])
            two, pairs_two = callgrind_instructions(cmd + [str(2 * n)])
            per_pair = (two - one) / (pairs_two - pairs_one)
            table[(a, group)] = per_pair
            log(f"{a:10} {group:7} {per_pair:8.1f} instructions per pair")
    lines = ["| allocator | " + " | ".join(f"{g} (8 B-1 KiB)" if g == "small" else f"{g} ({'1-64 KiB' if g == 'medium' else '64 KiB-1 MiB'})" for g in groups) + " |",
             "| --- | " + " | ".join("---" for _ in groups) + " |"]
    for a in allocators:
        lines.append(f"| {a} | " + " | ".join(f"{table[(a, g)]:.1f}" for g in groups) + " |")
    text = "\n".join(lines)
    print()
    cpu = f"; binaries built for {VALGRIND_CPU}" if VALGRIND_CPU else ""
    print(f"Instructions per alloc+free pair through std.mem.Allocator (valgrind callgrind, LIFO, every size of the group; includes the Allocator interface's own work{cpu}):")
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "secure-instructions.md" if args.secure else "instructions.md"), "w") as f:
        f.write("# Instructions per alloc+free pair\n\n")
        command = "make bench-secure" if args.secure else "make bench-instr"
        f.write(f"`{command}`, {datetime.datetime.now():%Y-%m-%d}; counts from valgrind callgrind (independent of machine load{cpu}).\n\n{text}\n")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zig", default="zig")
    parser.add_argument("--quick", action="store_true", help="a shorter run for a first look")
    parser.add_argument("--runs", type=int, help="runs per workload and allocator (default 5, quick 1)")
    parser.add_argument("--scale", type=float, help="work multiplier (default 1.0, quick 0.3)")
    parser.add_argument("--only", help="comma-separated workloads")
    parser.add_argument("--allocators", help="comma-separated allocators (kennel always runs)")
    parser.add_argument("--instr", action="store_true", help="instruction counts with callgrind instead")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--no-preload", action="store_true", help="skip the real programs under LD_PRELOAD")
    parser.add_argument("--secure", action="store_true", help="the hardened build and each of its features against the fast build")
    args = parser.parse_args()
    if args.runs is None:
        args.runs = 1 if args.quick else (3 if args.secure else 5)
    if args.scale is None:
        args.scale = 0.3 if args.quick else 1.0

    peers = {}
    for name, lib in PEER_LIBRARIES.items():
        peers[name] = library_present(lib)
        if not peers[name]:
            log(f"{name} is not installed ({lib} not found): skipping it (apt-get install lib{name}-dev)")
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
