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
gives medians of every cell, over fewer runs (the last thread counts lose
runs first: cells run in a fixed order). Writes <out>.md and <out>.csv;
`--from-csv FILE` writes the tables again from a CSV this script wrote.

asymmetric (two threads) and mpsc (four producers, one consumer) run a
fixed number of threads whatever --threads says: they are run and shown
for the record, and left out of the geometric means.
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as driver  # noqa: E402  (parse_launch, geomean, machine_description)

ZIG_WORKLOADS = ["symmetric", "asymmetric", "mpsc", "larson", "xmalloc", "cache-scratch", "thread-churn", "frontend"]
# kennel-libc: kennel in a program linked with libc, as the peers' are
# (pthreads with cached stacks, thread-exit callbacks); kennel's own binary
# has no libc, and Zig's threads then map a stack for every thread.
ZIG_ALLOCATORS = ["kennel", "kennel-libc", "smp", "glibc", "mimalloc", "jemalloc", "tcmalloc"]
C_WORKLOADS = ["batch_free", "mstress", "realloc_growth"]
# Workloads whose thread count is fixed (--threads is ignored).
FIXED_THREADS = {"asymmetric", "mpsc"}
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
    p.add_argument("--from-csv", help="write the tables again from this CSV (written by this script) and exit")
    args = p.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    if args.from_csv:
        results, elapsed = read_csv(args.from_csv)
        args.threads = sorted({t for (_, _, t) in results})
        write(args, results, [], elapsed)
        return 0
    # Without the library, ld.so only warns and the kennel column would
    # measure glibc.
    if not os.path.exists(args.kennel):
        sys.exit(f"scaling: no kennel library at {args.kennel}")
    launcher = os.path.join(args.bin, "bench-launch")
    todo = cells(args)
    results = {}
    failures = []
    start = time.monotonic()
    for k in range(args.runs):
        if args.budget_s and time.monotonic() - start > args.budget_s:
            break
        for w, section, a, threads, argv, env in todo:
            if args.budget_s and time.monotonic() - start > args.budget_s:
                break
            proc = subprocess.run([launcher] + argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            figures = driver.parse_launch(proc.stderr)
            if proc.returncode != 0 or not figures or figures["status"] != 0:
                failures.append(f"{w} {a} {threads}t: {proc.stderr[-200:].strip()}")
                continue
            results.setdefault((w, section, threads), {}).setdefault(a, []).append(figures)
        driver.log(f"run {k + 1} done at {time.monotonic() - start:.0f} s")
    write(args, results, failures, time.monotonic() - start)
    return 1 if failures else 0


def read_csv(path):
    """Results from a CSV of `write`: each cell's medians as one run
    repeated `runs` times (so the tables show the same medians and counts)."""
    results = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            run = {"time": float(row["time_s"]), "rss": float(row["peak_rss_mib"]) * 2**20,
                   "sys": float(row["sys_s"]), "faults": float(row["minor_faults"])}
            cell = results.setdefault((row["workload"], row["section"], int(row["threads"])), {})
            cell[row["allocator"]] = [run] * int(row["runs"])
    return results, 0.0


def write(args, results, failures, elapsed):
    header = [
        f"Machine: {driver.machine_description()}.  ",
        f"Command: `bench/scaling.py --threads {','.join(map(str, args.threads))} --runs {args.runs} --scale {args.scale}"
        f"{f' --budget-s {args.budget_s:g}' if args.budget_s else ''}`; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; took {elapsed / 60:.1f} min.  ",
    ]
    if args.from_csv and os.path.exists(args.out + ".md"):
        # Keep the machine and command of the run that made the CSV.
        with open(args.out + ".md") as f:
            old = [l.rstrip("\n") for l in f.readlines()[1:3]]
        if len(old) == 2 and old[0].startswith("Machine:"):
            header = old
    lines = ["# kennel thread scaling", *header,
             "Each cell: median wall time in seconds (runs), and the ratio to kennel's (lower is better). "
             "Zig workloads with each allocator built in; C workloads under LD_PRELOAD. "
             "asymmetric and mpsc run a fixed number of threads whatever the count asked (shown, not in the means).",
             ""]
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
                name = f"{w} (fixed threads)" if w in FIXED_THREADS else w
                lines.append(f"| {name} | {threads} | " + " | ".join(out) + " |")
        lines.append("")
    for title, sections in (("Zig workloads", ("zig",)), ("Zig and C workloads", ("zig", "c"))):
        lines.append(f"## Geometric mean of time over the {title}, ratio to kennel, per thread count (workloads)")
        lines.append("| threads | " + " | ".join(ZIG_ALLOCATORS) + " |")
        lines.append("| --- |" + " --- |" * len(ZIG_ALLOCATORS))
        for threads in args.threads:
            out = []
            for a in ZIG_ALLOCATORS:
                ratios = []
                for (w, section, t), cell in results.items():
                    if t == threads and section in sections and w not in FIXED_THREADS and a in cell and "kennel" in cell:
                        ratios.append(statistics.median(r["time"] for r in cell[a]) / statistics.median(r["time"] for r in cell["kennel"]))
                out.append(f"{driver.geomean(ratios):.2f}x ({len(ratios)})" if ratios else "-")
            lines.append(f"| {threads} | " + " | ".join(out) + " |")
        lines.append("")
    if failures:
        lines += ["## Failed runs", *[f"- {f}" for f in failures]]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
    if not args.from_csv:
        with open(args.out + ".csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["workload", "section", "threads", "allocator", "runs", "time_s", "peak_rss_mib", "sys_s", "minor_faults"])
            w.writerows(rows)
    driver.log(f"wrote {args.out}.md" + ("" if args.from_csv else f" and {args.out}.csv"))


if __name__ == "__main__":
    sys.exit(main())
