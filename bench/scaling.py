#!/usr/bin/env python3
"""Thread scaling: the multi-threaded workloads of `make bench` on 2 to N
threads, for kennel and each peer, on a machine with more cores than the
2-core development machines (`bench/run.py` runs every workload at the
machine's core count; this runs each at several counts).

It runs binaries already built (`zig build install bench`; see run.py for
the peers' -D options), so that they can be built on one machine and run on
another:

    bench/scaling.py --threads 2,4,8,16 --runs 3 --budget-s 420 \\
        --bin zig-out/bench --kennel zig-out/lib/libkennel.so \\
        --peers /usr/lib/x86_64-linux-gnu --std <zig's lib/std> --out scaling

Zig workloads run with each allocator built in (bench-<allocator>); the C
workloads run under LD_PRELOAD (glibc without). Every run goes through
bench-launch (wall time, peak RSS, user and system time, minor faults).
Runs are interleaved (run 1 of every cell, then run 2, ...), and a run that
would start after --budget-s is skipped, so a time-limited machine still
gives medians of every cell, over fewer runs. Writes <out>.md and <out>.csv.
"""

import argparse
import csv
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as driver  # noqa: E402  (parse_launch, geomean, machine_description)

ZIG_WORKLOADS = ["symmetric", "asymmetric", "mpsc", "larson", "xmalloc", "cache-scratch", "thread-churn", "frontend"]
ZIG_ALLOCATORS = ["kennel", "smp", "glibc", "mimalloc", "jemalloc", "tcmalloc"]
C_WORKLOADS = ["batch_free", "mstress", "realloc_growth"]
C_ALLOCATORS = ["kennel", "glibc", "mimalloc", "jemalloc", "tcmalloc"]
PEER_FILES = {"mimalloc": "libmimalloc.so.2", "jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}


def cells(args):
    """(workload, section, allocator, threads, argv, env) of every run."""
    out = []
    env_base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if args.peers:
        # The Zig binaries of mimalloc, jemalloc and tcmalloc link the peer
        # by its soname: found here when carried to another machine.
        env_base["LD_LIBRARY_PATH"] = args.peers
    for threads in args.threads:
        for w in ZIG_WORKLOADS:
            if w == "frontend" and not args.std:
                continue
            for a in ZIG_ALLOCATORS:
                program = os.path.join(args.bin, f"bench-{a}")
                if not os.path.exists(program):
                    continue
                argv = [program, w, "--threads", str(threads), "--scale", str(args.scale)]
                if w == "frontend":
                    argv += ["--input", args.std]
                out.append((w, "zig", a, threads, argv, env_base))
        for w in C_WORKLOADS:
            program = os.path.join(args.bin, f"c-{w}")
            if not os.path.exists(program):
                continue
            for a in C_ALLOCATORS:
                env = dict(env_base)
                if a == "kennel":
                    env["LD_PRELOAD"] = args.kennel
                elif a != "glibc":
                    lib = os.path.join(args.peers or "", PEER_FILES[a])
                    if not os.path.exists(lib):
                        continue
                    env["LD_PRELOAD"] = lib
                argv = [program, "--threads", str(threads), "--scale", str(args.scale)]
                out.append((w, "c", a, threads, argv, env))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="2,4,8,16")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--budget-s", type=float, default=0, help="start no run after this many seconds (0: no limit)")
    p.add_argument("--bin", default=os.path.join(driver.ROOT, "zig-out", "bench"))
    p.add_argument("--kennel", default=os.path.join(driver.ROOT, "zig-out", "lib", "libkennel.so"))
    p.add_argument("--peers", help="directory holding libmimalloc.so.2, libjemalloc.so.2, libtcmalloc_minimal.so.4")
    p.add_argument("--std", help="Zig's lib/std, the frontend workload's input")
    p.add_argument("--out", default=os.path.join(driver.RESULTS, "scaling"))
    args = p.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    launcher = os.path.join(args.bin, "bench-launch")
    todo = cells(args)
    results = {}
    failures = []
    start = time.monotonic()
    for k in range(args.runs):
        for w, section, a, threads, argv, env in todo:
            if args.budget_s and time.monotonic() - start > args.budget_s:
                break
            proc = driver.subprocess.run([launcher] + argv, env=env, stdout=driver.subprocess.DEVNULL, stderr=driver.subprocess.PIPE, text=True)
            figures = driver.parse_launch(proc.stderr)
            if proc.returncode != 0 or not figures or figures["status"] != 0:
                failures.append(f"{w} {a} {threads}t: {proc.stderr[-200:].strip()}")
                continue
            results.setdefault((w, section, threads), {}).setdefault(a, []).append(figures)
        driver.log(f"run {k + 1} done at {time.monotonic() - start:.0f} s")
    write(args, results, failures, time.monotonic() - start)
    return 1 if failures else 0


def write(args, results, failures, elapsed):
    lines = [
        "# kennel thread scaling",
        f"Machine: {driver.machine_description()}.  ",
        f"Command: `bench/scaling.py --threads {','.join(map(str, args.threads))} --runs {args.runs} --scale {args.scale}`; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; took {elapsed / 60:.1f} min.  ",
        "Each cell: median wall time in seconds (runs), and the ratio to kennel's (lower is better). "
        "Zig workloads with each allocator built in; C workloads under LD_PRELOAD.",
        "",
    ]
    rows = []
    for section, workloads, allocators in (("zig", ZIG_WORKLOADS, ZIG_ALLOCATORS), ("c", C_WORKLOADS, C_ALLOCATORS)):
        lines.append(f"## {'Zig' if section == 'zig' else 'C'} workloads")
        lines.append("| workload | threads | " + " | ".join(allocators) + " |")
        lines.append("| --- | --- |" + " --- |" * len(allocators))
        for w in workloads:
            for threads in args.threads:
                cell = results.get((w, section, threads))
                if not cell or "kennel" not in cell:
                    continue
                base = statistics.median(r["time"] for r in cell["kennel"])
                out = []
                for a in allocators:
                    runs = cell.get(a)
                    if not runs:
                        out.append("-")
                        continue
                    t = statistics.median(r["time"] for r in runs)
                    rss = statistics.median(r["rss"] for r in runs) / 2**20
                    out.append(f"{t:.3f} s ({len(runs)}), {t / base:.2f}x")
                    rows.append([w, section, threads, a, len(runs), f"{t:.4f}", f"{rss:.1f}",
                                 f"{statistics.median(r['sys'] for r in runs):.3f}", statistics.median(r["faults"] for r in runs)])
                lines.append(f"| {w} | {threads} | " + " | ".join(out) + " |")
        lines.append("")
    lines.append("## Geometric mean of time, ratio to kennel, per thread count")
    lines.append("| threads | " + " | ".join(ZIG_ALLOCATORS) + " |")
    lines.append("| --- |" + " --- |" * len(ZIG_ALLOCATORS))
    for threads in args.threads:
        out = []
        for a in ZIG_ALLOCATORS:
            ratios = []
            for (w, section, t), cell in results.items():
                if t == threads and a in cell and "kennel" in cell:
                    ratios.append(statistics.median(r["time"] for r in cell[a]) / statistics.median(r["time"] for r in cell["kennel"]))
            out.append(f"{driver.geomean(ratios):.2f}x ({len(ratios)})" if ratios else "-")
        lines.append(f"| {threads} | " + " | ".join(out) + " |")
    if failures:
        lines += ["", "## Failed runs", *[f"- {f}" for f in failures]]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "section", "threads", "allocator", "runs", "time_s", "peak_rss_mib", "sys_s", "minor_faults"])
        w.writerows(rows)
    driver.log(f"wrote {args.out}.md and {args.out}.csv")


if __name__ == "__main__":
    sys.exit(main())
