"""Checks a Prometheus text exposition of plugq's counters.

parse() reads it with Debian's python3-prometheus-client parser
(prometheus_client.parser), then checks what that parser lets through
but node_exporter's textfile collector and the exposition format rules
want: HELP and TYPE before each family's samples, every family's samples
together, counters named *_total, no sample twice, histogram buckets
ascending and cumulative with le="+Inf" equal to _count.  It returns
{(sample name, frozenset of label items): value}.

Run as a script: promcheck.py FILE checks FILE and prints the number of
samples.
"""

import math
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _structure(text):
    """HELP, then TYPE, then the family's samples, one family at a time."""
    declared = {}                 # family -> type
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in declared, f"line {n}: family {name} declared twice"
            current = ("help", name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert current == ("help", name), f"line {n}: TYPE {name} without HELP before it"
            declared[name] = kind
            current = name
            continue
        sample = re.split(r"[{ ]", line, 1)[0]
        assert current in declared, f"line {n}: sample before any TYPE"
        kind = declared[current]
        allowed = {current}
        if kind == "histogram":
            allowed = {current + s for s in ("_bucket", "_sum", "_count")}
        assert sample in allowed, f"line {n}: {sample} is outside its family {current}"
        assert sample.startswith("plugq_"), f"line {n}: {sample} lacks the plugq_ prefix"
        if kind == "counter":
            assert sample.endswith("_total"), f"line {n}: counter {sample} not named *_total"
    assert text.endswith("\n"), "the exposition does not end in a newline"
    return declared


def _histograms(samples, declared):
    for fam, kind in declared.items():
        if kind != "histogram":
            continue
        series = {}
        for (name, labels), v in samples.items():
            if name == fam + "_bucket":
                rest = frozenset(kv for kv in labels if kv[0] != "le")
                le = float(dict(labels)["le"])
                series.setdefault(rest, []).append((le, v))
        assert series, f"histogram {fam} has no buckets"
        for rest, buckets in series.items():
            buckets.sort()
            assert math.isinf(buckets[-1][0]), f"{fam}{dict(rest)}: no +Inf bucket"
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), f"{fam}{dict(rest)}: buckets not cumulative"
            count = samples[(fam + "_count", rest)]
            assert counts[-1] == count, f"{fam}{dict(rest)}: +Inf {counts[-1]} != count {count}"
            assert (fam + "_sum", rest) in samples, f"{fam}{dict(rest)}: no _sum"


def parse(text):
    declared = _structure(text)
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert NAME.match(s.name), f"bad metric name {s.name!r}"
            key = (s.name, frozenset(s.labels.items()))
            assert key not in samples, f"sample {s.name}{s.labels} appears twice"
            samples[key] = s.value
    _histograms(samples, declared)
    return samples


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels}"
    return samples[key]


if __name__ == "__main__":
    print(len(parse(open(sys.argv[1]).read())))
