"""Benchmark no-op reruns on a converged lab (issue 20, docs/reruns.md).

Times, through the real CLI (a new Python process each run, as a user runs it), the whole
pipeline (`provision --inventory INV`: detect, plan, apply, validate, verify) and the apply
command alone (`provision apply`: detect, plan, the converged-skip decision, the playbook when
any role is left), each `--runs` times, with the stages' own spans from the JSON report; with
`--full`, also `provision apply --full` (every role walked, the figure before issue 20). Every
run must end ok with 0 changed tasks. Prints Markdown rows for docs/benchmarks.md.

    .venv/bin/python bench/bench_rerun.py --inventory .lab/NAME/inventory.ini [--runs 5] [--full]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_detect import wait_for_load  # bench/ is this script's first path entry

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(inventory: str, *args: str, noop: bool = True) -> tuple[float, dict[str, Any]]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(BIN / "provision"), *args, "--inventory", inventory, "--json"]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    report: dict[str, Any] = json.loads(done.stdout)
    bad = {
        h: (r["status"], (r.get("apply") or {}).get("changed"))
        for h, r in report["hosts"].items()
        if r["status"] != "ok" or (r.get("apply") or {}).get("changed")
    }
    if bad and noop:
        raise SystemExit(f"{' '.join(cmd)}: not a no-op run: {bad}")
    return seconds, report


def stages(report: dict[str, Any]) -> dict[str, float]:
    """The longest span of each stage over the hosts (they run side by side)."""
    out: dict[str, float] = {}
    for host in report["hosts"].values():
        for name, span in host.get("timings", {}).get("stages", {}).items():
            out[name] = max(out.get(name, 0.0), float(span["seconds"]))
    return out


def skipped(report: dict[str, Any]) -> str:
    lines = [len((r.get("apply") or {}).get("converged", [])) for r in report["hosts"].values()]
    return f"{sum(lines)} role(s) skipped as converged"


def row(what: str, args: list[str], inventory: str, runs: int, limit: float | None) -> str:
    walls: list[float] = []
    spans: dict[str, list[float]] = {}
    last: dict[str, Any] = {}
    before: list[float] = []
    for _ in range(runs):
        before.append(wait_for_load(limit))
        seconds, last = run(inventory, *args)
        walls.append(seconds)
        for name, s in stages(last).items():
            spans.setdefault(name, []).append(s)
    load = os.getloadavg()[0]
    cells = ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in spans.items())
    runs_at = ", ".join(f"{w:.2f} s at {b:.2f}" for w, b in zip(walls, before, strict=True))
    over = [b for b in before if limit is not None and b > limit]
    waited = f"; {len(over)} run(s) started above --settle {limit}" if over else ""
    return (
        f"| {what} | median {statistics.median(walls):.2f} s (min {min(walls):.2f}, max "
        f"{max(walls):.2f}; {runs} runs) | stages (median s): {cells}; {skipped(last)}; "
        f"load avg before each run (1 min): {runs_at}{waited}; after the last {load:.2f} "
        f"| `provision {' '.join(args)} --inventory INV --json` |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", required=True, help="a converged lab's inventory.ini")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="also time `apply --full`")
    parser.add_argument(
        "--settle",
        type=float,
        metavar="LOAD",
        help="start each run once the 1-minute load average is at or below LOAD",
    )
    args = parser.parse_args()
    # warm-up: records written where the code or the plan moved since the last run
    hosts = len(run(args.inventory, "apply", noop=False)[1]["hosts"])
    print(f"| what ({hosts} lab hosts) | wall time | detail | command |")
    print("|---|---|---|---|")
    print(row("no-op pipeline", [], args.inventory, args.runs, args.settle))
    print(row("no-op apply", ["apply"], args.inventory, args.runs, args.settle))
    if args.full:
        full = ["apply", "--full"]
        print(row("apply --full (every role walked)", full, args.inventory, 1, args.settle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
