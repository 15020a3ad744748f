"""Time no-op converges of the runtime roles on a running lab (both roles, then each alone).

`PYTHONPATH=tests/lab .venv/bin/python -m aptrepo.bench_noop --lab rt --runs 3`
The lab must have been converged once (a run that changes something is reported, not timed
as a no-op)."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from aptrepo.converge import converge, lab_repo_vars

PLAYS = {
    "docker + nvidia_container_toolkit": ("docker", "nvidia_container_toolkit"),
    "docker": ("docker",),
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_noop", description=__doc__)
    parser.add_argument("--lab", required=True)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    inventory = Path(".lab") / args.lab / "inventory.ini"
    policy = lab_repo_vars(args.lab)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for label, roles in PLAYS.items():
            times: list[float] = []
            for run in range(args.runs):
                done = converge(inventory.resolve(), roles, policy, Path(tmp) / f"{label}{run}")
                changed = sum(done.changed().values())
                if done.returncode != 0 or changed:
                    print(f"{label}: run {run} rc={done.returncode} changed={changed}: not a no-op")
                    continue
                times.append(done.seconds)
            if times:
                print(
                    f"{label}: {len(done.recap)} hosts, median {statistics.median(times):.1f} s "
                    f"(min {min(times):.1f}, max {max(times):.1f}; {len(times)} runs), "
                    f"load average at start {load:.1f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
