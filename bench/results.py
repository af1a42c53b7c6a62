#!/usr/bin/python3
"""bench/results.py: turn raw client and server output into key=value pairs,
and append finished measurements to a JSON-lines results file.

The bash scripts run things; every file format (fio JSON, nbdbench's line,
plugq's stats JSON) is read here, with the json module, in one place.

  results.py fio FIO.json             -> iops MiBps lat_us_p50 ... reqs
  results.py fio-mix FIO.json         -> read_iops read_lat_us_p50 ...
                                         write_MBps ... (a two-job run)
  results.py nbdbench OUT.txt         -> the line's pairs plus reqs
  results.py plugq BEFORE.json AFTER.json  -> counter deltas of every disk
  results.py plugq-reads BEFORE.json AFTER.json  -> the same, and every
                                         read or "held" counter the stats have
  results.py rbd-bench OUT.txt BS     -> iops MiBps reqs of `rbd bench`
  results.py stats-time STATS.json    -> the snapshot's timestamp (0 if none)
  results.py callgrind CALLGRIND.OUT  -> ir (instructions, all threads)
  results.py strace STRACE-C.TXT      -> syscalls, and sc_NAME calls of each
  results.py emit RESULTS.jsonl k=v ...   -> one JSON object per line
"""
import json
import re
import sys

KINDS = ("read", "write", "zero", "trim")
COUNTERS = ("requests", "merges", "backend_ops", "bytes", "backend_bytes",
            "ticks_us")
UNPLUG_CAUSES = ("timer", "threshold", "sync", "flush", "full", "drain")


def pairs(d):
    return " ".join(f"{k}={v}" for k, v in d.items())


def fio_pairs(path):
    """Sum the job's directions: fio reports a 70/30 mix per direction, and
    with unified_rw_reporting=mixed under "mixed"."""
    with open(path) as f:
        text = f.read()
    # fio may print notices before the JSON even with --output.
    job = json.loads(text[text.index("{"):])["jobs"][0]
    dirs = [job[d] for d in ("mixed", "read", "write")
            if d in job and job[d].get("total_ios", 0) > 0]
    if not dirs:
        raise SystemExit(f"{path}: no I/O in fio output")
    lat = dirs[0]["lat_ns"]
    pct = lat.get("percentile", {})
    us = lambda key: pct.get(key, 0) / 1000.0
    return {
        "iops": round(sum(d["iops"] for d in dirs)),
        "MiBps": round(sum(d["bw_bytes"] for d in dirs) / 1048576.0, 2),
        "reqs": sum(d["total_ios"] for d in dirs),
        "lat_us_p50": round(us("50.000000"), 1),
        "lat_us_p99": round(us("99.000000"), 1),
        "lat_us_p999": round(us("99.900000"), 1),
        "lat_us_max": round(lat.get("max", 0) / 1000.0, 1),
        "errors": job.get("error", 0),
    }


def fio_mix_pairs(path):
    """A fio run of two jobs without group_reporting (bench/reads.sh's mix):
    the first job's reads and the second job's writes, apart.  MB/s is
    10^6 bytes per second (fio's "MB/s"); latencies are fio's total
    latency (lat_ns, submission to completion), in µs."""
    with open(path) as f:
        text = f.read()
    jobs = json.loads(text[text.index("{"):])["jobs"]
    if len(jobs) != 2:
        raise SystemExit(f"{path}: {len(jobs)} jobs, expected 2 (group_reporting on?)")
    out = {}
    for prefix, job in (("read", jobs[0]), ("write", jobs[1])):
        d = job[prefix]
        if d.get("total_ios", 0) == 0:
            raise SystemExit(f"{path}: job {job.get('jobname')} did no {prefix}s")
        lat = d["lat_ns"]
        pct = lat.get("percentile", {})
        out[f"{prefix}_iops"] = round(d["iops"])
        out[f"{prefix}_MBps"] = round(d["bw_bytes"] / 1e6, 2)
        out[f"{prefix}_reqs"] = d["total_ios"]
        for key, name in (("50.000000", "p50"), ("99.000000", "p99"),
                          ("99.900000", "p999")):
            out[f"{prefix}_lat_us_{name}"] = round(pct.get(key, 0) / 1000.0, 1)
        out[f"{prefix}_lat_us_mean"] = round(lat.get("mean", 0) / 1000.0, 1)
        out["errors"] = out.get("errors", 0) + job.get("error", 0)
    out["reqs"] = out["read_reqs"] + out["write_reqs"]
    return out


def nbdbench_pairs(path):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.startswith("mode=")]
    if not lines:
        raise SystemExit(f"{path}: no nbdbench result line")
    d = dict(kv.split("=", 1) for kv in lines[-1].split())
    d["reqs"] = int(d["reads"]) + int(d["writes"])
    return d


def load_stats(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"disks": []}


def disk_counters(disk):
    """Flatten one disk's counters that the bench needs."""
    c = {}
    for kind in KINDS:
        for name in COUNTERS:
            c[f"{kind}.{name}"] = disk.get(kind, {}).get(name, 0)
    c["flush.requests"] = disk.get("flush", {}).get("requests", 0)
    c["flush.backend_flushes"] = disk.get("flush", {}).get("backend_flushes", 0)
    c["fua_requests"] = disk.get("fua_requests", 0)
    c["plugs"] = disk.get("plugs", 0)
    for cause in UNPLUG_CAUSES:
        c[f"unplugs.{cause}"] = disk.get("unplugs", {}).get(cause, 0)
    return c


def summed(stats):
    total = {}
    for disk in stats.get("disks", []):
        for k, v in disk_counters(disk).items():
            total[k] = total.get(k, 0) + v
    return total


def plugq_pairs(before_path, after_path):
    """Counter deltas over the measured window, summed over all disks; the
    ratios the report shows are computed here once."""
    before, after = summed(load_stats(before_path)), summed(load_stats(after_path))
    if not after:
        return {"plugq_stats": 0}
    d = {k: v - before.get(k, 0) for k, v in after.items()}
    out = {"plugq_stats": 1}
    for k in ("write.requests", "write.backend_ops", "write.merges",
              "read.requests", "read.backend_ops", "read.merges",
              "flush.requests", "flush.backend_flushes", "fua_requests",
              "plugs", *(f"unplugs.{c}" for c in UNPLUG_CAUSES)):
        out["q_" + k.replace(".", "_")] = d.get(k, 0)
    reqs = d["read.requests"] + d["write.requests"]
    ops = d["read.backend_ops"] + d["write.backend_ops"]
    if reqs:
        out["backend_ops_per_req"] = round(ops / reqs, 4)
    if ops:
        out["reqs_per_backend_op"] = round(reqs / ops, 2)
    syncs = d["flush.requests"] + d["fua_requests"]
    if syncs:
        out["backend_flushes_per_sync"] = round(d["flush.backend_flushes"] / syncs, 4)
    return out


def flat_counters(obj, path=""):
    """Every number of a disk's stats as "a.b" -> value; a histogram
    (count, total, buckets) gives its count and total only."""
    out = {}
    for k, v in obj.items():
        name = f"{path}.{k}" if path else k
        if isinstance(v, bool) or k in ("config", "buckets"):
            continue
        if isinstance(v, (int, float)):
            out[name] = v
        elif isinstance(v, dict):
            out.update(flat_counters(v, name))
    return out


def is_read_counter(name):
    """The counters bench/reads.sh shows beside plugq's read figures: any
    read counter beyond the generic ones plugq_pairs already gives, and
    anything about writes being held back for reads, whatever the engine
    calls them, so the bench follows the engine as it changes."""
    if re.search(r"(^|[._])(held|holds?|holding)($|[._])", name):
        return True
    if name.startswith("read."):
        return name.split(".", 1)[1] not in COUNTERS + ("errors",)
    return name.startswith("read") and not name.startswith("read_modify")


def plugq_read_pairs(before_path, after_path):
    """plugq_pairs, minus q_read_merges when the stats have no read merge
    counter, plus qx_NAME deltas of every counter is_read_counter picks
    (NAME with "." as "_"; a histogram's mean as qx_NAME_mean_us)."""
    before, after = load_stats(before_path), load_stats(after_path)
    out = plugq_pairs(before_path, after_path)
    if not out.get("plugq_stats"):
        return out
    if not any("merges" in d.get("read", {}) for d in after["disks"]):
        out.pop("q_read_merges", None)

    def sums(stats):
        total = {}
        for disk in stats.get("disks", []):
            for k, v in flat_counters(disk).items():
                if is_read_counter(k):
                    total[k] = total.get(k, 0) + v
        return total
    b, a = sums(before), sums(after)
    for k in sorted(a):
        out["qx_" + k.replace(".", "_")] = a[k] - b.get(k, 0)
    for k in sorted(a):
        if k.endswith(".count") and k[:-6] + ".total" in a:
            n = a[k] - b.get(k, 0)
            t = a[k[:-6] + ".total"] - b.get(k[:-6] + ".total", 0)
            if n:
                out["qx_" + k[:-6].replace(".", "_") + "_mean_us"] = round(t / n, 1)
    return out


def callgrind_pairs(path):
    """The totals: line of a callgrind output file (events: Ir, so the
    first number is instructions executed, every thread summed)."""
    with open(path) as f:
        for line in f:
            if line.startswith("totals:"):
                return {"ir": int(line.split()[1])}
    raise SystemExit(f"{path}: no totals: line (did valgrind finish?)")


def strace_pairs(path, top=None):
    """strace -c -f's table: the total calls, and each syscall's (TOP of them).
    Columns: % time, seconds, usecs/call, calls, [errors,] syscall."""
    calls = {}
    total = None
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 5 or not fields[3].isdigit():
                continue
            if fields[-1] == "total":
                total = int(fields[3])
            else:
                calls[fields[-1]] = int(fields[3])
    if total is None:
        raise SystemExit(f"{path}: no total line (did strace finish?)")
    out = {"syscalls": total}
    for name, n in sorted(calls.items(), key=lambda kv: -kv[1])[:top]:
        out[f"sc_{name}"] = n
    return out


def rbd_bench_pairs(path, bs):
    """`rbd bench`'s closing line: "elapsed: S ops: N ops/sec: R bytes/sec: ..."."""
    with open(path) as f:
        m = re.search(r"elapsed:\s*([\d.]+)\s+ops:\s*(\d+)\s+ops/sec:\s*([\d.]+)", f.read())
    if not m:
        raise SystemExit(f"{path}: no 'elapsed: ... ops/sec:' line from rbd bench")
    rate = float(m.group(3))
    return {"iops": round(rate), "MiBps": round(rate * int(bs) / 1048576.0, 2),
            "reqs": int(m.group(2)), "elapsed_s": float(m.group(1))}


def stats_time(path):
    return load_stats(path).get("timestamp", 0)


def number(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def emit(path, kvs):
    rec = {}
    for kv in kvs:
        k, _, v = kv.partition("=")
        rec[k] = number(v)
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "fio":
        print(pairs(fio_pairs(args[0])))
    elif cmd == "fio-mix":
        print(pairs(fio_mix_pairs(args[0])))
    elif cmd == "plugq-reads":
        print(pairs(plugq_read_pairs(args[0], args[1])))
    elif cmd == "nbdbench":
        print(pairs(nbdbench_pairs(args[0])))
    elif cmd == "plugq":
        print(pairs(plugq_pairs(args[0], args[1])))
    elif cmd == "callgrind":
        print(pairs(callgrind_pairs(args[0])))
    elif cmd == "strace":
        print(pairs(strace_pairs(args[0])))
    elif cmd == "rbd-bench":
        print(pairs(rbd_bench_pairs(args[0], args[1])))
    elif cmd == "stats-time":
        print(stats_time(args[0]))
    elif cmd == "emit":
        emit(args[0], args[1:])
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
