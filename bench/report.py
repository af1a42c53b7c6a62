#!/usr/bin/python3
"""bench/report.py: build the benchmark report from results.jsonl.

  report.py quick OUT        print the issue-3 targets (and write OUT/quick.md)
  report.py full OUT DOCS    write DOCS/benchmarks.md and DOCS/bench/*.png
                             (with their data, DOCS/bench/*.dat)
  report.py replot DIR       render DIR/*.dat (as full writes them) to DIR/*.png
  report.py reads OUT [DOCS]  reads in the elevator (bench/reads.sh): write
                             OUT/reads.md, and with DOCS the build's section
                             of DOCS/benchmarks-reads.md
  report.py cost COST_OUT DOCS  cost per request (bench/cost.sh): write
                             COST_OUT/cost.md, and the "Cost per request"
                             section of DOCS/benchmarks-quick.md

Nothing in the report is typed by hand: every figure is read from
OUT/results.jsonl and OUT/machine.txt, and every ratio pairs two
measurements taken in the same run (same run number, back to back or in the
same pass), then shows the median over runs with the min and max.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys

WORKLOADS = ["seqw4k-qd1", "seqw4k-qd16", "randw4k-qd32", "seqw64k-qd16",
             "seqw1m-qd16", "randr4k-qd16", "mix70-4k-qd16",
             "randw4k-qd16-flush32", "randw4k-qd16-fua"]
SERVERS = ["plugq", "plugq-noop", "plugq-unplugged", "plugq-dispatched",
           "plugq-noop-dispatched", "plugq-unplugged-dispatched",
           "nbdkit-file", "nbdkit-memory", "nbdkit-file-cachewb",
           "nbd-server", "qemu-nbd"]
BACKENDS = {"disk": "file on disk (ext4, page cache)",
            "disk-direct": "file on disk, O_DIRECT (plugq direct=true, qemu-nbd --cache=none)",
            "shm": "file on /dev/shm (tmpfs)",
            "memory": "memory (RAM inside the server)"}
# The stock server each backend's plugq is compared with first.
REFERENCE = {"disk": "nbdkit-file", "shm": "nbdkit-file",
             "memory": "nbdkit-memory", "disk-direct": "plugq-unplugged"}


# --- loading and small statistics -------------------------------------------

def load(out):
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def machine(out):
    path = os.path.join(out, "machine.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n") for line in f]


def pick(recs, **want):
    return [r for r in recs if all(r.get(k) == v for k, v in want.items())]


def by_run(recs, key):
    """run number -> value, for the records that have the key."""
    return {r["run"]: r[key] for r in recs if key in r}


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def fmt_num(v, digits=None):
    if digits is None:
        digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2 if abs(v) >= 1 else 3
    return f"{v:,.{digits}f}"


def fmt_spread(s, digits=None, suffix=""):
    if s is None:
        return "–"
    med, lo, hi = s
    if lo == hi:
        return fmt_num(med, digits) + suffix
    return f"{fmt_num(med, digits)}{suffix} ({fmt_num(lo, digits)}–{fmt_num(hi, digits)})"


def paired_ratio(num_recs, den_recs, key="iops"):
    """Per-run ratio num/den for runs where both exist."""
    num, den = by_run(num_recs, key), by_run(den_recs, key)
    return [num[r] / den[r] for r in sorted(num) if r in den and den[r]]


def cpu_per_mreq(r):
    if r.get("reqs"):
        return r["server_cpu_s"] / r["reqs"] * 1e6
    return None


def derived(recs, fn):
    return spread([fn(r) for r in recs])


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def noise_line(recs):
    other = spread([r.get("other_cpu_pct") for r in recs])
    steal = spread([r.get("steal_pct") for r in recs])
    loads = [r.get("loadavg_before", "") for r in recs] + [r.get("loadavg_after", "") for r in recs]
    load1 = spread([float(str(l).split("/")[0]) for l in loads if l])
    return (f"Other CPU during runs (% of one core, not server nor client; includes "
            f"other users' jobs and kernel writeback): median {fmt_spread(other, 1)}; "
            f"steal {fmt_spread(steal, 1)} %; 1-min load average {fmt_spread(load1, 2)} "
            f"(server and client alone load about 2).")


# --- issue 3 targets (quick mode, and a section of the full report) -----------

def target_rows(recs):
    """(figure, measured spread, target, met?) for the issue-3 targets."""
    def cell(server, backend, wl):
        return pick(recs, server=server, backend=backend, workload=wl)
    rows = []
    plugq_a = cell("plugq", "disk-direct", "seqw4k-qd16")
    merge = spread([r.get("reqs_per_backend_op") for r in plugq_a])
    rows.append(("(a) 4k seq write QD16, file direct=true: client writes per backend write",
                 merge, 16))
    rows.append(("(a) plugq / plugq unplug-thresh=1, IOPS",
                 spread(paired_ratio(plugq_a, cell("plugq-unplugged", "disk-direct", "seqw4k-qd16"))), 4))
    rows.append(("(a) plugq direct=true / nbdkit file (page cache), IOPS",
                 spread(paired_ratio(plugq_a, cell("nbdkit-file", "disk", "seqw4k-qd16"))), None))
    rows.append(("(b) 4k randwrite QD32, memory: plugq / nbdkit memory, IOPS",
                 spread(paired_ratio(cell("plugq", "memory", "randw4k-qd32"),
                                     cell("nbdkit-memory", "memory", "randw4k-qd32"))), 0.9))
    for wl, what in (("randw4k-qd16-flush32", "FLUSH every 32 writes"),
                     ("randw4k-qd16-fua", "FUA on every write")):
        mine = cell("plugq", "disk", wl)
        rows.append((f"(c) 4k randwrite QD16 + {what}, file: plugq / nbdkit file, IOPS",
                     spread(paired_ratio(mine, cell("nbdkit-file", "disk", wl))), 2))
        rows.append((f"(c) {what}: backend flushes per client flush/FUA",
                     spread([r.get("backend_flushes_per_sync") for r in mine]), None))
    # What bounds (c) on this machine: a plugin that does no work, and a
    # perfect group commit with no server in the way.
    flush32, fua = "randw4k-qd16-flush32", "randw4k-qd16-fua"
    rows.append(("(c) ceiling, FLUSH every 32 writes: nbdkit null (does no work) / nbdkit file, IOPS",
                 spread(paired_ratio(cell("nbdkit-null", "disk", flush32),
                                     cell("nbdkit-file", "disk", flush32))), None))
    # bench/syncbound fua's forms of the FUA stream, each over nbdkit file.
    for server, what in (
            ("syncbound-grouped", "ceiling, FUA on every write: no server, 16 writes per fdatasync"),
            ("syncbound-concurrent", "FUA on every write: no server, 16 threads of write+fdatasync"),
            ("syncbound-half-grouped", "FUA on every write: no server, one thread, 8 writes per "
             "fdatasync (one flush at a time, holding none back)"),
            ("syncbound-half-grouped-two", "FUA on every write: no server, two threads, 8 writes "
             "per fdatasync each (two flushes in flight)")):
        rows.append((f"(c) {what} (bench/syncbound) / nbdkit file, IOPS",
                     spread(paired_ratio(cell(server, "disk", fua),
                                         cell("nbdkit-file", "disk", fua))), None))
    return rows


def targets_table(recs):
    rows = []
    for what, s, target in target_rows(recs):
        met = "–" if s is None or target is None else ("yes" if s[0] >= target else "**no**")
        rows.append((what, fmt_spread(s), f"≥ {target}" if target else "", met))
    return table(["figure (median over runs, min–max)", "measured", "target", "met"], rows)


def raw_quick_table(recs):
    rows = []
    for r in sorted(recs, key=lambda r: (r["workload"], r["server"], r["run"])):
        rows.append((r["workload"], r["server"], r["backend"], r["run"], fmt_num(r["iops"]),
                     r.get("lat_us_p50", "–"), r.get("lat_us_p99", "–"),
                     r.get("reqs_per_backend_op", "–"), r.get("backend_flushes_per_sync", "–"),
                     r.get("other_cpu_pct", "–"),
                     f'{r["loadavg_before"]} → {r["loadavg_after"]}' if "loadavg_before" in r else "–"))
    return table(["workload", "server", "backend", "run", "IOPS", "p50 µs", "p99 µs",
                  "client/backend writes", "backend flushes/sync", "other CPU %",
                  "loadavg"], rows)


def quick(out):
    recs = pick(load(out), suite="quick")
    text = "\n\n".join([
        "# plugq issue-3 targets (QUICK=1)",
        "\n".join("    " + l for l in machine(out)),
        targets_table(recs),
        noise_line(recs),
        "## Every measurement",
        raw_quick_table(recs)]) + "\n"
    with open(os.path.join(out, "quick.md"), "w") as f:
        f.write(text)
    print(text)


# --- the full report -----------------------------------------------------------

def matrix_rows(recs, backend):
    rows = []
    for wl in WORKLOADS:
        for server in SERVERS:
            cell = pick(recs, backend=backend, workload=wl, server=server)
            if not cell:
                continue
            rows.append((wl, server,
                         fmt_spread(spread([r["iops"] for r in cell])),
                         fmt_spread(spread([r["MiBps"] for r in cell])),
                         fmt_spread(spread([r["lat_us_p50"] for r in cell])),
                         fmt_spread(spread([r["lat_us_p99"] for r in cell])),
                         fmt_spread(spread([r.get("backend_ops_per_req") for r in cell])),
                         fmt_spread(spread([r.get("backend_flushes_per_sync") for r in cell])),
                         fmt_spread(derived(cell, cpu_per_mreq)),
                         fmt_spread(spread([r.get("other_cpu_pct") for r in cell]), 0)))
    return rows


def matrix_section(recs, backend, plots):
    header = ["workload", "server", "IOPS", "MiB/s", "p50 µs", "p99 µs",
              "backend ops / client op", "backend flushes / sync",
              "server CPU s / M req", "other CPU %"]
    parts = [f"### {BACKENDS.get(backend, backend)}", table(header, matrix_rows(recs, backend))]
    parts += [f"![{backend} {what}](bench/{name})" for what, name in plots]
    return "\n\n".join(parts)


def ratio_section(recs, backend):
    """plugq (deadline, ack=queued) over every other server on this backend."""
    others = [s for s in SERVERS if s != "plugq" and pick(recs, backend=backend, server=s)]
    rows = []
    for wl in WORKLOADS:
        mine = pick(recs, backend=backend, workload=wl, server="plugq")
        if not mine:
            continue
        rows.append([wl] + [fmt_spread(spread(paired_ratio(
            mine, pick(recs, backend=backend, workload=wl, server=s)))) for s in others])
    if not rows or not others:
        return ""
    return (f"#### plugq IOPS as a ratio of each server, {backend} (same run, median (min–max))\n\n"
            + table(["workload"] + [f"÷ {s}" for s in others], rows))


def isolation_section(recs):
    rows = []
    for server in SERVERS:
        on = pick(recs, server=server, mode="flush")
        off = pick(recs, server=server, mode="noflush")
        if not on or not off:
            continue
        rows.append((server,
                     fmt_spread(spread([r["others_iops"] for r in off])),
                     fmt_spread(spread([r["others_iops"] for r in on])),
                     fmt_spread(spread(paired_ratio(on, off, "others_iops")), 3),
                     fmt_spread(spread([r["first_flushes"] / r["runtime"] for r in on])),
                     fmt_spread(spread([r.get("other_cpu_pct") for r in on + off]), 0)))
    if not rows:
        return "No isolation results."
    return table(["server", "7 writers, IOPS without flushing", "with disk 0 flushed every ms",
                  "ratio (same run)", "flushes/s on disk 0", "other CPU %"], rows)


def scale_points(recs, server):
    pts = []
    for n in sorted({r["disks"] for r in recs}):
        cell = pick(recs, server=server, disks=n)
        if cell:
            pts.append((n, spread([r["iops"] for r in cell]),
                        spread([r["rss_kb"] / 1024.0 for r in cell])))
    return pts


def scale_section(recs):
    rows = []
    for server in SERVERS:
        for n, iops, rss in scale_points(recs, server):
            rows.append((server, n, fmt_spread(iops), fmt_spread(rss, 1)))
    if not rows:
        return "No scale results."
    return table(["server", "disks", "total IOPS (4k randwrite, QD4 each)", "server RSS MiB"], rows)


def volflush_section(recs):
    if not recs:
        return "No volume flush results (needs the plugin with linear volumes)."
    rows = []
    for writes in sorted({r["writes_per_member"] for r in recs}):
        cell = pick(recs, writes_per_member=writes)
        rows.append([f"{writes} × 4 KiB"] + [fmt_spread(spread([r[k] for r in cell])) for k in (
            "vol_flush_ms", "member_flush_ms_max", "member_flush_ms_sum", "vol_over_slowest")])
    return table(["queued per member", "volume flush ms", "slowest member's own flush ms",
                  "sum of members' flushes ms", "volume / slowest (target ≤ 1.5)"], rows)


# --- plots ----------------------------------------------------------------------
# Each plot is a .dat file next to its .png: the report writes the data, then
# renders it; `report.py replot DIR` renders existing data again.

BAR_FIGURES = {"iops": "IOPS", "lat_us_p99": "p99 latency µs"}


def need_gnuplot():
    if shutil.which("gnuplot") is None:
        sys.exit("report.py: gnuplot is missing: install Debian's gnuplot-nox "
                 "(scripts/install-deps.sh does)")


def gnuplot(script, cwd):
    subprocess.run(["gnuplot"], input=script, text=True, cwd=cwd, check=True)


def write_bar_dat(recs, backend, key, name, outdir):
    servers = [s for s in SERVERS if pick(recs, backend=backend, server=s)]
    wls = [w for w in WORKLOADS if pick(recs, backend=backend, workload=w)]
    if not servers or not wls:
        return False
    with open(os.path.join(outdir, name + ".dat"), "w") as f:
        f.write("workload " + " ".join(servers) + "\n")
        for wl in wls:
            vals = [spread([r[key] for r in pick(recs, backend=backend, workload=wl, server=s)])
                    for s in servers]
            f.write(wl + " " + " ".join("?" if v is None else f"{v[0]:.3f}" for v in vals) + "\n")
    return True


def plot_bar(name, outdir):
    """NAME.dat (KEY-BACKEND: a workload per row, a server per column) to NAME.png."""
    key, backend = next((k, name[len(k) + 1:]) for k in BAR_FIGURES if name.startswith(k + "-"))
    ylabel = BAR_FIGURES[key]
    with open(os.path.join(outdir, name + ".dat")) as f:
        columns = len(f.readline().split())
    gnuplot(f"""set terminal pngcairo size 1100,480 font ",9"
set output "{name}.png"
set title "{ylabel}, {backend} (median of runs)"
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set datafile missing "?"
set logscale y
set ylabel "{ylabel} (log)"
set xtics rotate by -25
set key outside right top
set grid ytics
plot for [i=2:{columns}] "{name}.dat" using i:xtic(1) title columnheader(i)
""", outdir)
    return name + ".png"


def write_scale_dat(recs, outdir):
    servers = [s for s in SERVERS if pick(recs, server=s)]
    for s in servers:
        with open(os.path.join(outdir, f"scale-{s}.dat"), "w") as f:
            for n, iops, rss in scale_points(recs, s):
                f.write(f"{n} {iops[0]:.0f} {rss[0]:.1f}\n")
    return servers


def plot_scale(servers, outdir):
    """scale-SERVER.dat (disks, IOPS, RSS MiB per row) to scale.png."""
    iops = ", ".join(f'"scale-{s}.dat" using 1:2 with linespoints title "{s} IOPS"' for s in servers)
    rss = ", ".join(f'"scale-{s}.dat" using 1:3 with linespoints axes x1y2 dashtype 2 title "{s} RSS"'
                    for s in servers)
    gnuplot(f"""set terminal pngcairo size 900,420 font ",9"
set output "scale.png"
set title "N disks, one 4k randwrite QD4 writer each"
set logscale x 2
set xlabel "disks"
set ylabel "total IOPS"
set y2label "server RSS MiB"
set ytics nomirror
set y2tics
set key outside right top
set grid
plot {iops}, {rss}
""", outdir)
    return "scale.png"


def make_plots(recs, outdir):
    need_gnuplot()
    os.makedirs(outdir, exist_ok=True)
    plots = {}
    matrix = pick(recs, suite="matrix")
    for backend in BACKENDS:
        plots[backend] = [(what, plot_bar(f"{key}-{backend}", outdir))
                          for key, what in BAR_FIGURES.items()
                          if write_bar_dat(matrix, backend, key, f"{key}-{backend}", outdir)]
    servers = write_scale_dat(pick(recs, suite="scale"), outdir)
    return plots, plot_scale(servers, outdir) if servers else None


def replot(outdir):
    """Every .dat in outdir rendered again to its .png."""
    need_gnuplot()
    names = sorted(f[:-4] for f in os.listdir(outdir) if f.endswith(".dat"))
    done = [plot_bar(n, outdir) for n in names
            if any(n.startswith(k + "-") for k in BAR_FIGURES)]
    servers = [n[len("scale-"):] for n in names if n.startswith("scale-")]
    if servers:
        done.append(plot_scale([s for s in SERVERS if s in servers], outdir))
    if not done:
        sys.exit(f"report.py: no plot data (*.dat) in {outdir}")
    print("rendered " + " ".join(os.path.join(outdir, d) for d in done))


# --- assembling the page -------------------------------------------------------

def provenance(out):
    """Which build, machine and date the figures come from (machine.txt)."""
    info = dict(line.split(": ", 1) for line in machine(out) if ": " in line)
    return (f"Measured on build **{info.get('build', 'unknown')}**, host "
            f"**{info.get('host', 'unknown')}** ({info.get('cpu', '?')}, "
            f"kernel {info.get('kernel', '?')}), {info.get('date', '?')}.")


def full(out, docs):
    recs = load(out)
    plots, scale_png = make_plots(recs, os.path.join(docs, "bench"))
    matrix = pick(recs, suite="matrix")
    backends = [b for b in BACKENDS if pick(matrix, backend=b)]
    parts = [
        "# plugq benchmarks",
        provenance(out),
        "Generated by `make bench` (bench/run.sh, bench/report.py) from "
        "`bench/out/results.jsonl`; do not edit by hand. Each cell is the median of "
        "the runs with (min–max). Ratios pair two measurements of the same run.",
        "## Machine and settings",
        "\n".join("    " + l for l in machine(out)),
        "## Noise",
        noise_line(recs) + " The machine is shared: compare servers within one run "
        "(the ratio tables), not across reports.",
        "## Issue 3 targets",
        targets_table(matrix),
        "## Throughput, latency, merging and CPU",
        "Backend ops / client op and backend flushes / sync come from plugq's stats "
        "(write.backend_ops / write.requests, flush.backend_flushes / (flush.requests + "
        "fua_requests)); CPU is the server process tree's utime+stime from /proc.",
    ]
    for b in backends:
        parts.append(matrix_section(matrix, b, plots.get(b, [])))
        ratios = ratio_section(matrix, b)
        if ratios:
            parts.append(ratios)
    parts += ["## Isolation: one disk flushed every millisecond",
              "8 file disks on ext4, one nbdbench 4k randwrite writer each; disk 0's writer "
              "also sends a FLUSH every 1 ms.", isolation_section(pick(recs, suite="isolation")),
              "## Scale: many disks in one server", scale_section(pick(recs, suite="scale"))]
    if scale_png:
        parts.append(f"![scale](bench/{scale_png})")
    parts += ["## Linear volume flush (8 file members, data queued on each)",
              volflush_section(pick(recs, suite="volflush"))]
    os.makedirs(docs, exist_ok=True)
    with open(os.path.join(docs, "benchmarks.md"), "w") as f:
        f.write("\n\n".join(parts) + "\n")
    print(f"wrote {os.path.join(docs, 'benchmarks.md')}")


# --- cost per request (bench/cost.sh) --------------------------------------------

COST_LABELS = {
    "plugq:memory": "plugq", "plugq:disk": "plugq", "plugq:disk-direct": "plugq direct=true",
    "plugq:remote": "plugq nbd=", "nbdkit-memory:memory": "nbdkit memory",
    "nbdkit-file:disk": "nbdkit file", "nbdkit-nbd:remote": "nbdkit nbd",
    "qemu-nbd:disk-direct": "qemu-nbd --cache=none", "dd:disk-direct": "dd oflag=direct (no server)",
}
# (row, tool, figure of a record, digits)
COST_ROWS = [
    ("instructions / request", "callgrind", lambda r: r["ir"], 0),
    ("user µs / request", "rusage", lambda r: r["utime_us"], 2),
    ("sys µs / request", "rusage", lambda r: r["stime_us"], 2),
    ("user+sys µs / request", "rusage", lambda r: r["utime_us"] + r["stime_us"], 2),
    ("voluntary context switches / request", "rusage", lambda r: r["nvcsw"], 3),
    ("involuntary context switches / request", "rusage", lambda r: r["nivcsw"], 3),
    ("syscalls / request", "strace", lambda r: r["syscalls"], 2),
]
# Rows from the timed runs' rusage: (row, figure of a record, digits).
COST_TIMED_ROWS = [
    ("user+sys µs / request, timed runs", lambda r: r["utime_us"] + r["stime_us"], 2),
    ("voluntary context switches / request, timed runs", lambda r: r["nvcsw"], 3),
    ("involuntary context switches / request, timed runs", lambda r: r["nivcsw"], 3),
]
# The settings below which a cost run is a test of the bench, not a figure.
COST_SMOKE = {"N": 4000, "RUNS": 3, "RUNTIME": 3}


def cost_label(sb):
    return COST_LABELS.get(sb, sb)


def cost_fixed(recs, tool, wl, sb, disks):
    """(run with the workload's N requests, zero-request run) of one server."""
    server, backend = sb.split(":", 1)
    full = pick(recs, kind="fixed", tool=tool, workload=wl, server=server, backend=backend)
    zero = pick(recs, kind="fixed", tool=tool, workload="zero", server=server,
                backend=backend, disks=disks)
    return (full[-1] if full else None), (zero[-1] if zero else None)


def per_request(recs, tool, wl, sb, disks, fn):
    full, zero = cost_fixed(recs, tool, wl, sb, disks)
    if not full or not zero or not full.get("requests"):
        return None
    try:
        return (fn(full) - fn(zero)) / full["requests"]
    except KeyError:
        return None


def top_syscalls(recs, wl, sb, disks, k=4):
    full, zero = cost_fixed(recs, "strace", wl, sb, disks)
    if not full or not zero:
        return "–"
    per = {name[3:]: (v - zero.get(name, 0)) / full["requests"]
           for name, v in full.items() if name.startswith("sc_")}
    top = sorted(per.items(), key=lambda kv: -kv[1])[:k]
    return ", ".join(f"{name} {v:.2f}" for name, v in top)


def rate_recs(recs, wl, sb, **more):
    server, backend = sb.split(":", 1)
    return pick(recs, kind="rate", workload=wl, server=server, backend=backend, **more)


def timed_per_request(recs, zero, fn):
    """Each timed run's figure per request, the zero-request run subtracted,
    as records keyed by run (for paired_ratio)."""
    out = []
    for r in recs:
        if zero is None or not r.get("reqs") or "utime_us" not in r:
            continue
        out.append({"run": r["run"], "v": (fn(r) - fn(zero)) / r["reqs"]})
    return out


def fmt_opt(v, digits):
    return "–" if v is None else fmt_num(v, digits)


def cost_workload(recs, w):
    wl, disks = w["workload"], w["disks"]
    servers = w["servers"].split()
    measured = [s for s in servers if not s.startswith("dd:")]
    ref = measured[-1]
    others = [s for s in measured if s != ref]
    header = (["per request, server process only"] + [cost_label(s) for s in servers]
              + [f"{cost_label(s)} ÷ {cost_label(ref)}" for s in others])
    rows = []
    for name, tool, fn, digits in COST_ROWS:
        vals = {s: per_request(recs, tool, wl, s, disks, fn) for s in measured}
        ratios = [None if vals[s] is None or not vals[ref] else vals[s] / vals[ref]
                  for s in others]
        rows.append([name] + [fmt_opt(vals.get(s), digits) for s in servers]
                    + [fmt_opt(r, 2) for r in ratios])
    rows.append(["most frequent syscalls / request"]
                + [top_syscalls(recs, wl, s, disks) if s in measured else "–" for s in servers]
                + [""] * len(others))
    mode = {"mode": "flush"} if wl == "W9" else {}
    rate = {s: rate_recs(recs, wl, s, **mode) for s in servers}
    rows.append(["requests/s, median (min–max)"]
                + [fmt_spread(spread([r["iops"] for r in rate[s]])) for s in servers]
                + [fmt_spread(spread(paired_ratio(rate[s], rate[ref])), 2) for s in others])
    for name, fn, digits in COST_TIMED_ROWS:
        per = {s: timed_per_request(rate[s], cost_fixed(recs, "rusage", wl, s, disks)[1], fn)
               for s in measured}
        rows.append([name] + [fmt_spread(spread([p["v"] for p in per[s]]), digits)
                              if s in per else "–" for s in servers]
                    + [fmt_spread(spread(paired_ratio(per[s], per[ref], "v")), 2)
                       for s in others])
    dd = [s for s in servers if s.startswith("dd:")]
    if dd:
        rows.append([f"requests/s ÷ {cost_label(dd[0])}, same run"]
                    + [fmt_spread(spread(paired_ratio(rate[s], rate[dd[0]])), 2)
                       if s in measured else "–" for s in servers] + [""] * len(others))
    if wl == "W9":
        on = {s: rate_recs(recs, wl, s, mode="flush") for s in measured}
        off = {s: rate_recs(recs, wl, s, mode="noflush") for s in measured}
        idle = {s: rate_recs(recs, wl, s, mode="alone") for s in measured}
        for what, recs_of, key in (
                ("requests/s, the other 7 disks, disk 0 written and flushed every ms", on,
                 "others_iops"),
                ("requests/s, the other 7 disks, disk 0 written, no flushes", off, "others_iops"),
                ("requests/s, the other 7 disks, disk 0 idle", idle, "others_iops"),
                ("requests/s, all 8 disks, no flushes", off, "iops"),
                ("FLUSHes/s on disk 0", on, None)):
            vals = [fmt_spread(spread([(r["d0_flushes"] / r["runtime"]) if key is None else r[key]
                                       for r in recs_of[s]])) for s in measured]
            ratios = ([fmt_spread(spread(paired_ratio(recs_of[s], recs_of[ref], key)), 2)
                       for s in others] if key else [""] * len(others))
            rows.append([what] + vals + ["–"] * (len(servers) - len(measured)) + ratios)
        for what, base in (("the other 7: disk 0 flushed ÷ not flushed, same run", off),
                           ("the other 7: disk 0 flushed ÷ idle, same run", idle)):
            rows.append([what]
                        + [fmt_spread(spread(paired_ratio(on[s], base[s], "others_iops")), 3)
                           for s in measured]
                        + ["–"] * (len(servers) - len(measured)) + [""] * len(others))
    title = (f"### {wl}: {w['what']}\n\n"
             f"`nbdbench {w['client']}`, {w['requests']} requests per fixed-count run"
             + (", over 8 disks (one eighth on disk 0)" if disks > 1 else "")
             + "; requests/s " + ("with disk 0 flushed every ms " if wl == "W9" else "")
             + f"from {len(rate[ref])} timed run{'s' if len(rate[ref]) != 1 else ''}.")
    return title + "\n\n" + table(header, rows)


def cost_noise(recs):
    runs = [r for r in recs if r.get("kind") in ("fixed", "rate")]
    load1 = spread([float(str(r[k]).split("/")[0]) for r in runs
                    for k in ("loadavg_before", "loadavg_after") if k in r])
    return f"1-min load average before and after each run: {fmt_spread(load1, 2)}."


def cost_raw(recs):
    rows = []
    for r in recs:
        if r.get("kind") == "fixed":
            fig = {"callgrind": lambda: f"{r['ir']:,} instructions",
                   "rusage": lambda: (f"user {r['utime_us']} µs, sys {r['stime_us']} µs, "
                                      f"cs {r['nvcsw']}/{r['nivcsw']}"),
                   "strace": lambda: f"{r['syscalls']:,} syscalls"}[r["tool"]]()
            rows.append((r["workload"], r["tool"], cost_label(f"{r['server']}:{r['backend']}"),
                         r["requests"], fig, f"{r['loadavg_before']} → {r['loadavg_after']}"))
        elif r.get("kind") == "rate":
            fig = f"{fmt_num(r['iops'])} req/s"
            if "others_iops" in r:
                fig += f" ({r['mode']}: the other 7 {fmt_num(r['others_iops'])})"
            rows.append((r["workload"], f"rate run {r['run']}",
                         cost_label(f"{r['server']}:{r['backend']}"), f"{r['runtime']} s", fig,
                         f"{r['loadavg_before']} → {r['loadavg_after']}"))
    return table(["workload", "measurement", "server", "requests / time", "figure",
                  "load average"], rows)


def cost_text(recs, level):
    """The report; level is the markdown level of its title."""
    meta = (pick(recs, kind="meta") or [{}])[0]
    end = (pick(recs, kind="end") or [{}])[0]
    h = "#" * level
    smoke = [f"{k}={meta.get(k)}" for k, least in COST_SMOKE.items()
             if isinstance(meta.get(k), (int, float)) and meta[k] < least]
    parts = [
        f"{h} Cost per request",
        "Generated by `make -C bench cost` (bench/cost.sh, `report.py cost`); do not edit by "
        "hand. Per request and for the server process only: instructions from "
        "`valgrind --tool=callgrind` (counted from after the server's start and fill), user/sys time and context switches from the server's "
        "wait4() rusage (all its threads), syscalls from `strace -c -f`, each as (run with N "
        "requests − run with none) / N; requests/s from timed runs, median (min–max), ratios "
        "paired within a run. Servers alternate (A B A B …) within each workload. "
        "The user/sys split is the kernel's tick sampling scaled to the exact sum: read "
        "user+sys when they disagree. The timed runs' servers run under the same rusage "
        "wrapper: their rows divide by every request of a timed run (zero-request run "
        "subtracted), many more than N, and give the median over the runs.",
        f"- build **{meta.get('build', '?')}** ({meta.get('plugin', '?')}), {meta.get('date', '?')}\n"
        f"- load average (1/5/15 min) at start {meta.get('loadavg_start', '?')}, at end "
        f"{end.get('loadavg_end', '?')}; {cost_noise(recs)}\n"
        f"- N={meta.get('N')} (1 MiB workloads {meta.get('N_LARGE')}), RUNTIME={meta.get('RUNTIME')} s, "
        f"RUNS={meta.get('RUNS')}, files {meta.get('FILE_SIZE')} (W9: 8 × {meta.get('ISO_SIZE')}), "
        f"memory {meta.get('MEM_SIZE')} used over {meta.get('SPAN')}; took "
        f"{end.get('duration_s', 0) // 60} min {end.get('duration_s', 0) % 60} s\n"
        f"- {meta.get('machine', '?')}; {meta.get('versions', '?')}",
    ]
    if smoke:
        parts.append(f"**Smoke settings ({', '.join(smoke)}): these figures test the bench "
                     "on whatever machine ran it; they are not a measurement.**")
    for w in pick(recs, kind="workload"):
        parts.append(cost_workload(recs, w).replace("### ", "#" * (level + 1) + " ", 1))
    return parts


def replace_section(path, heading, text):
    """Replace the section starting at the line HEADING (up to the next
    heading of the same level) with TEXT, or append it."""
    lines = open(path).read().split("\n") if os.path.exists(path) else []
    level = heading.split(" ")[0]
    try:
        start = lines.index(heading)
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].startswith(level + " ")), len(lines))
        new = lines[:start] + text.rstrip("\n").split("\n") + [""] + lines[end:]
    except ValueError:
        while lines and lines[-1] == "":
            lines.pop()
        new = lines + [""] + text.rstrip("\n").split("\n") + [""]
    with open(path, "w") as f:
        f.write("\n".join(new).rstrip("\n") + "\n")


def cost(out, docs):
    recs = load_jsonl(os.path.join(out, "results.jsonl"))
    parts = cost_text(recs, 1)
    parts[0] = "# plugq: cost per request"
    text = "\n\n".join(parts + ["## Every measurement", cost_raw(recs)]) + "\n"
    with open(os.path.join(out, "cost.md"), "w") as f:
        f.write(text)
    print(text)
    os.makedirs(docs, exist_ok=True)
    doc = os.path.join(docs, "benchmarks-quick.md")
    replace_section(doc, "## Cost per request", "\n\n".join(cost_text(recs, 2)))
    print(f"wrote {os.path.join(out, 'cost.md')} and the cost section of {doc}")


# --- reads in the elevator (bench/reads.sh, issue 40) -----------------------------

READS_GROUPS = {
    "direct": "direct=true file (O_DIRECT)",
    "pagecache": "file on the page cache",
    "remote": "remote (nbdkit memory behind the delay filter)",
    "rbd": "rbd (throw-away local cluster, librbd's cache off)",
    "s16": "remote, writes that wait (issue 40 part 4)",
    "ceiling": "the server's own limit (memory, no backend)",
}
READS_LABELS = {
    ("direct", "plugq"): "plugq direct=true",
    ("direct", "qemu-nbd-native"): "qemu-nbd cache=none aio=native",
    ("direct", "nbdkit-file-nocache"): "nbdkit file cache=none (not O_DIRECT)",
    ("direct", "fio-direct"): "fio libaio O_DIRECT (no server)",
    ("direct", "nbdkit-bare-direct"): "nbdkit plugin doing only O_DIRECT pread",
    ("pagecache", "plugq"): "plugq file=",
    ("pagecache", "nbdkit-file"): "nbdkit file",
    ("pagecache", "qemu-nbd"): "qemu-nbd cache=writeback",
    ("remote", "plugq"): "plugq nbd=",
    ("remote", "nbdkit-nbd"): "nbdkit nbd",
    ("remote", "remote-alone"): "the remote alone (no server)",
    ("rbd", "plugq"): "plugq rbd=",
    ("rbd", "qemu-nbd"): "qemu-nbd rbd:",
    ("rbd", "rbd-bench"): "rbd bench (no server)",
    ("s16", "plugq-dispatched"): "plugq nbd= ack=dispatched",
    ("s16", "nbdkit-nbd"): "nbdkit nbd",
    ("s16", "remote-alone"): "the remote alone (no server)",
    ("ceiling", "plugq"): "plugq memory=",
    ("ceiling", "nbdkit-null"): "nbdkit null",
}
# Server order in the tables: plugq first, its reference second.
READS_SERVERS = {
    "direct": ["plugq", "qemu-nbd-native", "nbdkit-file-nocache", "fio-direct",
               "nbdkit-bare-direct", "plugq-base"],
    "pagecache": ["plugq", "nbdkit-file", "qemu-nbd", "plugq-base"],
    "remote": ["plugq", "nbdkit-nbd", "remote-alone", "plugq-base"],
    "rbd": ["plugq", "qemu-nbd", "rbd-bench", "plugq-base"],
    "s16": ["plugq-dispatched", "nbdkit-nbd", "remote-alone"],
    "ceiling": ["plugq", "nbdkit-null"],
}
MIX = "mixr4k-qd1-w64k-qd16"


def mbps(r):
    return r["MiBps"] * 1.048576 if "MiBps" in r else None


# (workload, figure, value of a record, lower is better)
READS_FIGURES = [
    (MIX, "mixed: 4K random reads QD1 beside 64K sequential writes QD16: reads/s",
     lambda r: r.get("read_iops"), False),
    (MIX, "mixed: read p50 µs", lambda r: r.get("read_lat_us_p50"), True),
    (MIX, "mixed: read p99 µs", lambda r: r.get("read_lat_us_p99"), True),
    (MIX, "mixed: writes MB/s", lambda r: r.get("write_MBps"), False),
    ("seqr4k-qd16", "4K sequential reads QD16, reads/s", lambda r: r.get("iops"), False),
    ("randr4k-qd16", "4K random reads QD16, reads/s", lambda r: r.get("iops"), False),
    ("seqr64k-qd16", "64K sequential reads QD16, MB/s", mbps, False),
    ("randr4k-qd1", "idle: 4K random reads QD1, reads/s", lambda r: r.get("iops"), False),
    ("randr4k-qd1", "idle: read p50 µs", lambda r: r.get("lat_us_p50"), True),
    ("randr4k-qd1", "idle: read p99 µs", lambda r: r.get("lat_us_p99"), True),
    ("seqw4k-qd16-nbdbench", "4K sequential writes QD16 (nbdbench), writes/s",
     lambda r: r.get("iops"), False),
]


def reads_label(group, server):
    if server == "plugq-base":
        return "plugq, BASE_PLUGIN"
    return READS_LABELS.get((group, server), server)


def reads_values(cells, group, server, wl, fn):
    """run -> value of one cell."""
    out = {}
    for r in pick(cells, group=group, server=server, workload=wl):
        v = fn(r)
        if v is not None:
            out[r["run"]] = v
    return out


def ratio_spread(num, den):
    return spread([num[r] / den[r] for r in sorted(num) if r in den and den[r]])


def fmt_x(s):
    """A ratio spread as 0.73x (0.70–0.81)."""
    if s is None:
        return "–"
    med, lo, hi = s
    if f"{lo:.2f}" == f"{hi:.2f}":
        return f"{med:.2f}x"
    return f"{med:.2f}x ({lo:.2f}–{hi:.2f})"


def reads_group_table(cells, group):
    servers = [s for s in READS_SERVERS[group] if pick(cells, group=group, server=s)]
    if not servers:
        return None
    me = servers[0]
    others = servers[1:]
    header = (["figure"] + [reads_label(group, s) for s in servers]
              + [f"{reads_label(group, me)} ÷ {reads_label(group, s)}" for s in others])
    rows = []
    for wl, what, fn, _ in READS_FIGURES:
        vals = {s: reads_values(cells, group, s, wl, fn) for s in servers}
        if not any(vals.values()):
            continue
        rows.append([what]
                    + [fmt_spread(spread(list(vals[s].values()))) if vals[s] else "–"
                       for s in servers]
                    + [fmt_x(ratio_spread(vals[me], vals[s])) for s in others])
    return table(header, rows)


# The plugq stats columns: always reads and backend reads; read merges and
# the engine's own read / held counters only when its stats have them.
def reads_stats_table(cells):
    recs = [r for r in cells if r.get("plugq_stats") == 1]
    if not recs:
        return None
    extra = sorted({k for r in recs for k in r if k.startswith("qx_")})
    merges = any("q_read_merges" in r for r in recs)
    header = ["group", "workload", "server", "client reads", "backend reads",
              "client reads per backend read", "client writes per backend write"]
    if merges:
        header.append("read merges")
    header += [k[3:] for k in extra]
    rows = []
    wls = list(dict.fromkeys(f[0] for f in READS_FIGURES))
    order = [(g, wl, s) for g in READS_GROUPS for wl in wls
             for s in READS_SERVERS[g] if s.startswith("plugq")]
    for g, wl, s in order:
        c = pick(recs, group=g, workload=wl, server=s)
        if not c:
            continue
        med = lambda key: spread([r[key] for r in c if key in r])
        per = lambda a, b: spread([r[a] / r[b] for r in c if r.get(b)])
        row = [g, wl, reads_label(g, s), fmt_spread(med("q_read_requests"), 0),
               fmt_spread(med("q_read_backend_ops"), 0),
               fmt_spread(per("q_read_requests", "q_read_backend_ops"), 2),
               fmt_spread(per("q_write_requests", "q_write_backend_ops"), 2)]
        if merges:
            row.append(fmt_spread(med("q_read_merges"), 0))
        row += [fmt_spread(med(k), 1 if k.endswith("_mean_us") else 0) for k in extra]
        rows.append(row)
    return table(header, rows)


def reads_ceiling_table(cells):
    rows = []
    def add(what, vals, digits=None):
        if vals:
            rows.append((what, fmt_spread(spread(list(vals.values())), digits)))
    iops = lambda r: r.get("iops")
    add("server: plugq memory=, 4K random reads QD16, reads/s",
        reads_values(cells, "ceiling", "plugq", "randr4k-qd16", iops))
    add("server: nbdkit null, 4K random reads QD16, reads/s",
        reads_values(cells, "ceiling", "nbdkit-null", "randr4k-qd16", iops))
    for g, s, what in (("direct", "fio-direct", "direct=true file: fio libaio O_DIRECT"),
                       ("remote", "remote-alone", "remote: fio straight on the remote"),
                       ("rbd", "rbd-bench", "rbd: rbd bench, 16 threads, librbd cache off")):
        v = reads_values(cells, g, s, "seqr64k-qd16", iops)
        add(f"{what}, 64K sequential reads QD16, reads/s", v)
        add(f"{what}, 64K sequential reads QD16, MB/s",
            reads_values(cells, g, s, "seqr64k-qd16", mbps))
        add(f"{what}: sixteen 4K reads per 64K read, 4K reads/s",
            {r: 16 * x for r, x in v.items()})
    add("direct=true file: fio libaio O_DIRECT, 4K random reads QD16, reads/s",
        reads_values(cells, "direct", "fio-direct", "randr4k-qd16", iops))
    add("direct=true file: an nbdkit plugin doing only O_DIRECT pread, 4K random reads QD16, reads/s",
        reads_values(cells, "direct", "nbdkit-bare-direct", "randr4k-qd16", iops))
    add("remote: fio straight on the remote, the mix: reads/s",
        reads_values(cells, "remote", "remote-alone", MIX, lambda r: r.get("read_iops")))
    add("remote: fio straight on the remote, the mix: read p99 µs",
        reads_values(cells, "remote", "remote-alone", MIX, lambda r: r.get("read_lat_us_p99")))
    add("remote: fio straight on the remote, the mix: writes MB/s",
        reads_values(cells, "remote", "remote-alone", MIX, lambda r: r.get("write_MBps")))
    add(f"remote with the S16 latency: nbdbench straight on it, 4K sequential writes QD16, writes/s",
        reads_values(cells, "s16", "remote-alone", "seqw4k-qd16-nbdbench", iops))
    return table(["ceiling (same run)", "median (min–max)"], rows) if rows else None


def reads_per_run(pick, ds):
    """Per run, pick (min or max) of several run -> value maps (runs in all)."""
    ds = [d for d in ds if d]
    if not ds:
        return {}
    runs = set.intersection(*(set(d) for d in ds))
    return {r: pick(d[r] for d in ds) for r in runs}


def reads_min(*ds):
    return reads_per_run(min, ds)


def reads_max(*ds):
    return reads_per_run(max, ds)


def reads_targets(cells, meta):
    """(target text, per-run measured, per-run reference, factor, op,
    per-run ceiling, ceiling text, key for "all at once")."""
    iops = lambda r: r.get("iops")
    v = lambda g, s, wl, fn=iops: reads_values(cells, g, s, wl, fn)
    server_limit = v("ceiling", "plugq", "randr4k-qd16")
    out = []
    for g, peer, plain in (("direct", "qemu-nbd-native", "qemu-nbd"),
                           ("pagecache", "nbdkit-file", "nbdkit file"),
                           ("remote", "nbdkit-nbd", "nbdkit nbd"),
                           ("rbd", "qemu-nbd", "qemu-nbd rbd:")):
        idle = v(g, "plugq", "randr4k-qd1")
        idle_p99 = v(g, "plugq", "randr4k-qd1", lambda r: r.get("lat_us_p99"))
        reads_ceil, reads_ceil_what = idle, "plugq's idle QD1 reads/s"
        p99_floor, p99_floor_what = idle_p99, "plugq's idle QD1 p99"
        writes_ceil, writes_ceil_what = None, ""
        # Where the bench ran the mix straight on the backend (the remote,
        # no server), that is a ceiling too: what any server in front of
        # it can reach.
        alone = lambda fn: v(g, "remote-alone", MIX, fn)
        alone_reads = alone(lambda r: r.get("read_iops"))
        if alone_reads:
            reads_ceil = reads_min(idle, alone_reads)
            reads_ceil_what = "the smaller of plugq's idle QD1 reads/s and the mix on the remote alone"
            p99_floor = reads_max(idle_p99, alone(lambda r: r.get("read_lat_us_p99")))
            p99_floor_what = "the larger of plugq's idle QD1 p99 and the mix on the remote alone"
            writes_ceil = alone(lambda r: r.get("write_MBps"))
            writes_ceil_what = "the mix on the remote alone"
        reads = (f"mixed on {g}: read IOPS ≥ 1.0x {plain}", v(g, "plugq", MIX, lambda r: r.get("read_iops")),
                 v(g, peer, MIX, lambda r: r.get("read_iops")), 1.0, ">=", reads_ceil,
                 reads_ceil_what, g)
        p99 = lambda f: (f"mixed on {g}: read p99 ≤ {f}x {plain}",
                         v(g, "plugq", MIX, lambda r: r.get("read_lat_us_p99")),
                         v(g, peer, MIX, lambda r: r.get("read_lat_us_p99")), f, "<=",
                         p99_floor, p99_floor_what, g)
        writes = lambda f: (f"mixed on {g}: writes ≥ {f}x {plain} (MB/s)",
                            v(g, "plugq", MIX, lambda r: r.get("write_MBps")),
                            v(g, peer, MIX, lambda r: r.get("write_MBps")), f, ">=",
                            writes_ceil, writes_ceil_what, g)
        if g == "pagecache":
            out += [p99(1.5), writes(0.9)]
        else:
            out += [reads, p99(1.0), writes(1.0)]
    fio64 = v("direct", "fio-direct", "seqr64k-qd16")
    out.append(("4K sequential reads QD16 on direct=true ≥ 2.0x qemu-nbd",
                v("direct", "plugq", "seqr4k-qd16"), v("direct", "qemu-nbd-native", "seqr4k-qd16"),
                2.0, ">=", reads_min(server_limit, {r: 16 * x for r, x in fio64.items()}),
                "the smaller of plugq memory= 4K QD16 and 16 x the file's 64K reads/s", None))
    today = float(meta.get("RBD_SEQ_TODAY", 18600))
    rbd_seq = v("rbd", "plugq", "seqr4k-qd16")
    rbd64 = v("rbd", "rbd-bench", "seqr64k-qd16")
    out.append((f"4K sequential reads QD16 on rbd ≥ 2.0x plugq's rate before issue 40 ({today:,.0f}/s)",
                rbd_seq, {r: today for r in rbd_seq}, 2.0, ">=",
                reads_min(server_limit, {r: 16 * x for r, x in rbd64.items()}),
                "the smaller of plugq memory= 4K QD16 and 16 x rbd bench's 64K reads/s", None))
    out.append(("4K random reads QD16 on direct=true ≥ 1.0x qemu-nbd",
                v("direct", "plugq", "randr4k-qd16"), v("direct", "qemu-nbd-native", "randr4k-qd16"),
                1.0, ">=", reads_min(server_limit, v("direct", "fio-direct", "randr4k-qd16"),
                                     v("direct", "nbdkit-bare-direct", "randr4k-qd16")),
                "the smallest of plugq memory= 4K QD16, fio O_DIRECT 4K random QD16 and an "
                "nbdkit plugin doing only O_DIRECT pread", None))
    out.append(("idle QD1 random read p50 on direct=true ≤ 1.05x the build before (BASE_PLUGIN)",
                v("direct", "plugq", "randr4k-qd1", lambda r: r.get("lat_us_p50")),
                v("direct", "plugq-base", "randr4k-qd1", lambda r: r.get("lat_us_p50")),
                1.05, "<=", None, "", None))
    out.append(("ack=dispatched S16 on the remote ≥ 1.0x nbdkit nbd",
                v("s16", "plugq-dispatched", "seqw4k-qd16-nbdbench"),
                v("s16", "nbdkit-nbd", "seqw4k-qd16-nbdbench"), 1.0, ">=",
                v("s16", "remote-alone", "seqw4k-qd16-nbdbench"), "the remote alone", None))
    return out


def reads_target_rows(cells, meta):
    """The targets table, and per group the runs where all its mixed
    targets were met at once."""
    rows, together = [], {}
    for what, mine, ref, factor, op, ceil, ceil_what, key in reads_targets(cells, meta):
        runs = sorted(r for r in mine if r in ref and ref[r])
        if not runs:
            rows.append((what, "not measured", "–", "–", "–"))
            if key:
                together.setdefault(key, {})["missing"] = True
            continue
        ratio, applied, ceil_x, met = [], [], [], {}
        for r in runs:
            t = factor * ref[r]
            c = ceil.get(r) if ceil else None
            if c is not None and op == ">=":
                ceil_x.append(c / ref[r])
                t = min(t, 0.8 * c)
            elif c is not None and op == "<=":
                ceil_x.append(c / ref[r])
                t = max(t, c / 0.8)
            ratio.append(mine[r] / ref[r])
            applied.append(t / ref[r])
            met[r] = mine[r] >= t if op == ">=" else mine[r] <= t
        if key:
            t = together.setdefault(key, {})
            for r in runs:
                t[r] = t.get(r, True) and met[r]
            t.setdefault("targets", 0)
            t["targets"] += 1
        med_ratio, med_applied = statistics.median(ratio), statistics.median(applied)
        ok = med_ratio >= med_applied if op == ">=" else med_ratio <= med_applied
        sign = "≥" if op == ">=" else "≤"
        capped = abs(med_applied - factor) > 1e-9
        ceiling_text = (f"{ceil_what}: {fmt_x(spread(ceil_x))}" if ceil_x else "–")
        target_text = f"{sign} {med_applied:.2f}x" + (
            " (0.8 of the ceiling)" if capped and op == ">=" else
            " (1.25x the floor)" if capped else "")
        verdict = "yes" if ok else "**no**"
        if capped:
            plain_ok = med_ratio >= factor if op == ">=" else med_ratio <= factor
            verdict += f" (plain {sign} {factor}x: {'yes' if plain_ok else 'no'})"
        rows.append((what, f"{fmt_x(spread(ratio))}; {fmt_spread(spread([mine[r] for r in runs]))}",
                     ceiling_text, target_text,
                     f"{verdict}, {sum(met.values())}/{len(runs)} runs"))
    for key, t in together.items():
        runs = [r for r in t if isinstance(r, int)]
        if t.get("missing") or not runs or t.get("targets", 0) < 2:
            continue
        rows.append((f"mixed on {key}: all {t['targets']} targets in the same run", "", "", "",
                     f"{sum(t[r] for r in runs)}/{len(runs)} runs"))
    return table(["target (issue 40)", "plugq ÷ reference; plugq's figure",
                  "ceiling (÷ reference)", "target applied", "met (medians), runs met"], rows)


def reads_runs_text(recs):
    starts = {r["run"]: r for r in pick(recs, kind="run")}
    ends = {r["run"]: r for r in pick(recs, kind="run_end")}
    lines = []
    for run in sorted(starts):
        s, e = starts[run], ends.get(run, {})
        lines.append(f"- run {run}: {s.get('start', '?')}–{e.get('end', '?')}, load average "
                     f"(1/5/15 min) {s.get('loadavg_start', '?')} at the start, "
                     f"{e.get('loadavg_end', '?')} at the end")
    return "\n".join(lines)


def reads_text(recs, level, with_raw):
    meta = (pick(recs, kind="meta") or [{}])[0]
    end = (pick(recs, kind="end") or [{}])[0]
    cells = pick(recs, kind="cell")
    h = "#" * level
    dur = end.get("duration_s", 0)
    parts = [
        f"{h} Build {meta.get('build', '?')}",
        f"Generated by `make -C bench reads` (bench/reads.sh, `report.py reads`); do not edit by "
        f"hand. Medians over the runs with (min–max); every ratio pairs two measurements of the "
        f"same run, servers interleaved (A B A B, the order flipping every run).",
        f"- build **{meta.get('build', '?')}** ({meta.get('plugin', '?')})"
        + (f"; BASE_PLUGIN build **{meta['base_build']}** ({meta.get('base_plugin')})"
           if meta.get("base_build", "-") != "-" else "")
        + f"\n- {meta.get('date', '?')}, host {meta.get('host', '?')}: {meta.get('machine', '?')}; "
        f"disk {meta.get('disk', '?')}\n- {meta.get('versions', '?')}\n"
        f"- RUNS={meta.get('RUNS')}, RUNTIME={meta.get('RUNTIME')} s (the mix "
        f"{meta.get('MIX_RUNTIME')} s), file {meta.get('FILE_SIZE')}, rbd image "
        f"{meta.get('RBD_SIZE')}, memory disk {meta.get('MEM_SIZE')}, remote "
        f"{meta.get('REMOTE_SIZE')} with {meta.get('REMOTE_LAT')} per read and write "
        f"(S16: {meta.get('S16_LAT')} per write)"
        + (f", PLUGQ_ARGS `{meta['plugq_args']}`" if meta.get("plugq_args") else "")
        + f"; took {dur // 60} min {dur % 60} s\n" + reads_runs_text(recs),
    ]
    if meta.get("quick") == 1:
        parts.append("**QUICK=1: a check that the bench runs, not a measurement.**")
    for s in pick(recs, kind="skip"):
        parts.append(f"{READS_GROUPS.get(s['group'], s['group'])}: skipped: {s['reason']}.")
    parts += [f"{h}# Targets",
              "Every ratio is plugq ÷ the reference in the same run. A target above 0.8 of its "
              "measured ceiling becomes 0.8 of the ceiling (the issue's rule: 2.0x unless the "
              "ceiling is below 2.5x); a latency target below 1.25x its floor (plugq's own "
              "idle QD1 p99) becomes 1.25x the floor.",
              reads_target_rows(cells, meta)]
    for g, what in READS_GROUPS.items():
        t = reads_group_table(cells, g)
        if t:
            parts += [f"{h}# {what}", t]
    t = reads_ceiling_table(cells)
    if t:
        parts += [f"{h}# Ceilings", t]
    t = reads_stats_table(cells)
    if t:
        parts += [f"{h}# plugq's stats (medians per run)",
                  "From each plugq run's stats= file, the whole run (the memory disk's fill "
                  "counts as writes). Columns past the first five appear when the engine's "
                  "stats have them: read merges, and any read or held-write counter.", t]
    parts.append(noise_line(cells))
    if with_raw:
        parts += [f"{h}# Every measurement", reads_raw_table(cells)]
    return parts


def reads_raw_table(cells):
    rows = []
    for r in cells:
        fig = (f"{fmt_num(r['read_iops'])} reads/s, p50 {r['read_lat_us_p50']} µs, p99 "
               f"{r['read_lat_us_p99']} µs; writes {fmt_num(r['write_MBps'])} MB/s"
               if "read_iops" in r else
               f"{fmt_num(r.get('iops', 0))}/s, {fmt_num(mbps(r) or 0)} MB/s, p50 "
               f"{r.get('lat_us_p50', '–')} µs, p99 {r.get('lat_us_p99', '–')} µs")
        rows.append((r["run"], r["group"], r["workload"], reads_label(r["group"], r["server"]),
                     fig, r.get("other_cpu_pct", "–"),
                     f"{r.get('loadavg_before', '?')} → {r.get('loadavg_after', '?')}"))
    return table(["run", "group", "workload", "server", "figures", "other CPU %",
                  "load average"], rows)


def insert_section(path, heading, text, intro_end="## Build "):
    """Replace the section HEADING of PATH with TEXT, or put it before the
    first section whose heading starts with INTRO_END (newest first)."""
    lines = open(path).read().split("\n") if os.path.exists(path) else []
    if heading in lines:
        replace_section(path, heading, text)
        return
    at = next((i for i, l in enumerate(lines) if l.startswith(intro_end)), len(lines))
    new = lines[:at] + text.rstrip("\n").split("\n") + [""] + lines[at:]
    with open(path, "w") as f:
        f.write("\n".join(new).rstrip("\n") + "\n")


def reads(out, docs=None):
    recs = load_jsonl(os.path.join(out, "results.jsonl"))
    parts = reads_text(recs, 2, True)
    text = "# plugq: reads in the elevator (issue 40)\n\n" + "\n\n".join(parts) + "\n"
    with open(os.path.join(out, "reads.md"), "w") as f:
        f.write(text)
    print(text)
    if docs:
        os.makedirs(docs, exist_ok=True)
        doc = os.path.join(docs, "benchmarks-reads.md")
        section = reads_text(recs, 2, False)
        insert_section(doc, section[0], "\n\n".join(section))
        print(f"wrote {os.path.join(out, 'reads.md')} and the section \"{section[0]}\" of {doc}")


def load_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv):
    if len(argv) >= 4 and argv[1] == "cost":
        cost(argv[2], argv[3])
    elif len(argv) >= 3 and argv[1] == "quick":
        quick(argv[2])
    elif len(argv) >= 4 and argv[1] == "full":
        full(argv[2], argv[3])
    elif len(argv) >= 3 and argv[1] == "replot":
        replot(argv[2])
    elif len(argv) >= 3 and argv[1] == "reads":
        reads(argv[2], argv[3] if len(argv) >= 4 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
