"""Parses Prometheus text from stdin with prometheus_client's parser (not ctxsync's
code) and checks what holds for any exposition: every sample in a declared family,
histograms with cumulative buckets ending in +Inf equal to _count, and a _sum. Prints
the families as JSON for the Rust test to check values; exits non-zero on a violation."""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def check_histogram(family):
    series = {}
    for sample in family.samples:
        labels = {k: v for k, v in sample.labels.items() if k != "le"}
        key = tuple(sorted(labels.items()))
        entry = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
        if sample.name == family.name + "_bucket":
            entry["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name == family.name + "_sum":
            entry["sum"] = sample.value
        elif sample.name == family.name + "_count":
            entry["count"] = sample.value
        else:
            fail(f"{family.name}: unexpected sample {sample.name}")
    if not series:
        fail(f"{family.name}: a histogram without series")
    for key, entry in series.items():
        where = f"{family.name}{dict(key)}"
        bounds = [le for le, _ in entry["buckets"]]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            fail(f"{where}: bucket bounds not increasing: {bounds}")
        if not bounds or not math.isinf(bounds[-1]):
            fail(f"{where}: no +Inf bucket")
        counts = [count for _, count in entry["buckets"]]
        if any(b < a for a, b in zip(counts, counts[1:])):
            fail(f"{where}: buckets not cumulative: {counts}")
        if entry["count"] is None or entry["sum"] is None:
            fail(f"{where}: missing _count or _sum")
        if counts[-1] != entry["count"]:
            fail(f"{where}: +Inf {counts[-1]} != _count {entry['count']}")
        if entry["sum"] < 0:
            fail(f"{where}: negative _sum")


def main():
    families = []
    for family in text_string_to_metric_families(sys.stdin.read()):
        if family.type not in ("counter", "gauge", "histogram"):
            fail(f"{family.name}: type {family.type} (a sample outside a declared family?)")
        if not family.documentation:
            fail(f"{family.name}: no HELP")
        for sample in family.samples:
            if family.type == "counter" and sample.value < 0:
                fail(f"{sample.name}: a negative counter")
        if family.type == "histogram":
            check_histogram(family)
        families.append(
            {
                "name": family.name,
                "type": family.type,
                "samples": [
                    {"name": s.name, "labels": s.labels, "value": s.value}
                    for s in family.samples
                ],
            }
        )
    names = [f["name"] for f in families]
    if len(names) != len(set(names)):
        fail(f"a family declared twice: {names}")
    json.dump(families, sys.stdout)


main()
