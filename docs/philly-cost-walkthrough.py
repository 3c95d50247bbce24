#!/usr/bin/env python3
"""Summarise the cost-per-unit section over the Philly trace, for docs/philly-cost-walkthrough.md.

Usage: python3 docs/philly-cost-walkthrough.py REPORT.json DECISIONS.jsonl

REPORT.json is `bursar report --by config --cost-per-unit --prices docs/philly-cost/prices.toml --format
json`; DECISIONS.jsonl the decisions of `bursar eval` with docs/philly-cost/policies. Prints Markdown:
the section's size, which modelled GPU type ranks first at each GPU count and how many of those
rankings are separated (the cheapest type's slowest run still cheaper than the other's fastest), the
median scaling efficiency per type and GPU count, the largest configuration's rows, and the advice
alerts by kind. Every throughput figure in it is MODELLED (bursar import --model-throughput).
"""
import collections
import json
import statistics
import sys


def main():
    report, decisions = sys.argv[1], sys.argv[2]
    c = json.load(open(report))["cost_per_unit"]
    print(f"runs with (modelled) throughput: {c['runs']:,} in {len(c['configs'])} configurations "
          f"({c['runs_without_config']} without a configuration, {c['runs_without_gpu_type']} without a GPU type)\n")

    wins = collections.defaultdict(lambda: [0, 0, 0])  # gpus -> [a first, b first, separated]
    scaling = collections.defaultdict(list)
    for cfg in c["configs"]:
        by_count = collections.defaultdict(list)
        for row in cfg["rows"]:
            by_count[row["gpus"]].append(row)
            if row["scaling_efficiency"] is not None and row["gpus"] != row["scaling_base_gpus"]:
                scaling[(row["gpu_type"], row["scaling_base_gpus"], row["gpus"])].append(row["scaling_efficiency"])
        for g, rows in by_count.items():
            ranked = [r for r in rows if r["rank"] is not None]
            if len(ranked) < 2:
                continue
            first = min(ranked, key=lambda r: r["rank"])
            w = wins[g]
            w[0 if first["gpu_type"] == "modelled-a" else 1] += 1
            w[2] += 1 if first["separated"] else 0

    print("| GPUs | configurations with both types | modelled-a cheaper | modelled-b cheaper | separated |")
    print("|---:|---:|---:|---:|---:|")
    for g in sorted(wins):
        a, b, s = wins[g]
        print(f"| {g} | {a + b} | {a} | {b} | {s} |")
    total = [sum(w[i] for w in wins.values()) for i in range(3)]
    print(f"| all | {total[0] + total[1]} | {total[0]} | {total[1]} | {total[2]} |\n")

    print("| GPU type | from → to GPUs | configurations | median scaling efficiency |")
    print("|---|---|---:|---:|")
    for (t, base, g), v in sorted(scaling.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if len(v) >= 5:
            print(f"| {t} | {base} → {g} | {len(v)} | {statistics.median(v) * 100:.0f}% |")
    print()

    big = c["configs"][0]
    print(f"The largest configuration, `{big['config']}` ({big['runs']} runs):\n")
    print("| GPU type | GPUs | runs | tokens/s per GPU (min–max) | on demand per 1k | rank | scaling |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for r in big["rows"]:
        od = next((x["per_1k"] for x in r["cost"] if x["mode"] == "on_demand"), None)
        rank = "-" if r["rank"] is None else f"{r['rank']}" + (" (overlaps)" if r["separated"] is False else "")
        sc = "-" if r["scaling_efficiency"] is None else f"{r['scaling_efficiency'] * 100:.0f}% of {r['scaling_base_gpus']}"
        odt = "-" if od is None else f"{od:.3g}"
        print(f"| {r['gpu_type']} | {r['gpus']} | {r['runs']} | {r['throughput_per_gpu']:,.0f} "
              f"({r['min_per_gpu']:,.0f}–{r['max_per_gpu']:,.0f}) | {odt} | {rank} | {sc} |")
    print()

    kinds = collections.Counter()
    for line in open(decisions):
        d = json.loads(line)
        if d["decision"] != "alert":
            continue
        # One alert decision per job joins the reasons of every policy that alerted: count each.
        for reason in d["reason"].split("; job "):
            kind = "cheaper GPU type" if "less per unit of work" in reason else "poor scaling"
            policy = d["policies"][0] if len(d["policies"]) == 1 else None
            if policy is None:
                policy = "advice/gpu-choice" if kind == "poor scaling" else "(both policies)"
            kinds[(kind, policy)] += 1
    print("| advice alert | policies | count |")
    print("|---|---|---:|")
    for (k, p), n in sorted(kinds.items()):
        print(f"| {k} | {p} | {n:,} |")


if __name__ == "__main__":
    main()
