#!/usr/bin/env python3
"""Summarise `bursar eval` decisions over an imported trace, for docs/philly-walkthrough.md.

Usage: python3 docs/philly-walkthrough.py EVENTS.jsonl DECISIONS.jsonl

Reads the imported events (to know each job's GPUs and end time) and the decisions, and prints Markdown
tables: decisions by kind, decisions by project and kind, the policies behind denials and reclaims, and the
GPU-hours the reclaim decisions would have returned (gpus x (job end - reclaim time), for reclaims that came
before the job's recorded end).
"""
import collections
import datetime
import json
import sys


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def main():
    events, decisions = sys.argv[1], sys.argv[2]
    gpus, end, submit = {}, {}, {}
    for line in open(events):
        e = json.loads(line)
        if e["type"] == "job.submitted":
            gpus[e["job"]["id"]] = e["job"]["gpus"]
            submit[e["job"]["id"]] = e["job"]["project"]
        elif e["type"] == "job.finished":
            end[e["job_id"]] = ts(e["time"])
    by_kind = collections.Counter()
    by_project = collections.defaultdict(collections.Counter)
    by_policy = collections.Counter()
    saved = collections.defaultdict(float)
    alerts_idle = collections.Counter()
    admissions = 0
    for line in open(decisions):
        d = json.loads(line)
        kind = d["decision"] + (" (dry run)" if d.get("dry_run") else "")
        by_kind[kind] += 1
        project = d.get("project") or "-"
        by_project[project][kind] += 1
        if d.get("admission"):
            admissions += 1
        if d["decision"] in ("deny", "reclaim", "require_approval", "alert", "defer"):
            for p in d.get("policies", []):
                by_policy[(d["decision"], p)] += 1
        if d["decision"] == "reclaim" and not d.get("dry_run"):
            j = d.get("job_id")
            if j in end and j in gpus:
                left = end[j] - ts(d["time"])
                if left > 0:
                    for p in d.get("policies", []):
                        saved[p] += gpus[j] * left / 3600.0
    kinds = sorted(by_kind)
    print(f"admission decisions: {admissions} for {len(gpus)} submissions\n")
    print("| decision | count |\n|---|---:|")
    for k in kinds:
        print(f"| {k} | {by_kind[k]:,} |")
    print("\n| project | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for p in sorted(by_project):
        print(f"| {p} | " + " | ".join(f"{by_project[p][k]:,}" for k in kinds) + " |")
    print("\n| decision | policy | count |\n|---|---|---:|")
    for (k, p), n in sorted(by_policy.items(), key=lambda x: -x[1]):
        print(f"| {k} | {p} | {n:,} |")
    print("\n| reclaiming policy | GPU-hours returned before the job's recorded end |\n|---|---:|")
    for p, h in sorted(saved.items(), key=lambda x: -x[1]):
        print(f"| {p} | {h:,.0f} |")


if __name__ == "__main__":
    main()
