#!/usr/bin/env python3
"""Summaries of a `sinkscope tasks` run (scripts/press/tasks.sh) for docs/findings.md.

    python3 scripts/press/tasks_table.py RUN_DIR

Prints (1) per press at each ratio, query-agnostic, token by token with its own sinks: each task's
share of prompts whose truth ranked first, and the mean NLL change of the truth over all prompts;
(2) per setting (± 4 pinned sinks, token vs 16-token blocks, agnostic vs aware) at each ratio,
averaged over the presses that run it: the share ranked first over all tasks and the NLL change.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

r = json.loads((Path(sys.argv[1]) / "tasks.json").read_text())
tasks = []
for p in r["prompts"]:
    if p["task"] not in tasks:
        tasks.append(p["task"])
base = {o["prompt"]: o for o in r["outcomes"] if o["arm"] == 0}


def name(press):
    return "pyramidkv" if press["budget"]["rule"] == "pyramid" else press["kind"]


def setting(arm):
    p = arm["press"]
    own = {"streaming_llm": 4, "expected_attention": 4}.get(p["kind"], 0)
    parts = ["S=4" if p["sinks"] != own else "own S", "B=16" if p.get("block") else "token", "aware" if arm["query_aware"] else "agnostic"]
    return " · ".join(parts)


cells = defaultdict(list)  # (press, ratio, setting, task) -> [(first, dnll)]
for o in r["outcomes"]:
    arm = r["arms"][o["arm"]]
    if arm["press"] is None:
        continue
    task = r["prompts"][o["prompt"]]["task"]
    key = (name(arm["press"]), arm["press"]["ratio"], setting(arm), task)
    cells[key].append((o["rank"] == 1, o["answer_nll"] - base[o["prompt"]]["answer_nll"]))

none = defaultdict(list)
for o in base.values():
    none[r["prompts"][o["prompt"]]["task"]].append(o["rank"] == 1)
ratios = sorted({k[1] for k in cells})
presses = list(dict.fromkeys(k[0] for k in cells))
mean = lambda xs: sum(xs) / len(xs)
print(f"uncompressed: " + ", ".join(f"{t} {100 * mean(none[t]):.0f}%" for t in tasks))
print()
print("| press | ratio | " + " | ".join(tasks) + " | Δ NLL |")
print("|---" * (len(tasks) + 3) + "|")
for press in presses:
    for ratio in ratios:
        row = [cells.get((press, ratio, "own S · token · agnostic", t), []) for t in tasks]
        if not any(row):
            continue
        firsts = " | ".join(f"{100 * mean([a for a, _ in c]):.0f}%" for c in row)
        d = mean([b for c in row for _, b in c])
        print(f"| {press} | {ratio} | {firsts} | {d:+.2f} |")
print()
settings = list(dict.fromkeys(k[2] for k in cells))
print("| setting | " + " | ".join(f"ratio {x}: first / Δ NLL" for x in ratios) + " | presses |")
print("|---" * (len(ratios) + 2) + "|")
for s in settings:
    out, n = [], set()
    for ratio in ratios:
        vals = [v for k, vs in cells.items() if k[1] == ratio and k[2] == s for v in vs]
        n |= {k[0] for k in cells if k[1] == ratio and k[2] == s}
        out.append(f"{100 * mean([a for a, _ in vals]):.0f}% / {mean([b for _, b in vals]):+.2f}")
    print(f"| {s} | " + " | ".join(out) + f" | {len(n)} |")
