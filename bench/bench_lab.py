"""Benchmark `provision lab up` / `lab down` for a 2-host lab from cached images.

Runs the real CLI (a fresh Python process each time, as a user would), checks that every
host answers Ansible over SSH after `up` and that `down` leaves no container, volume or
network, and prints one Markdown row for docs/benchmarks.md.

    .venv/bin/python bench/bench_lab.py [--runs 5] [--count 2] [--os debian12]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.lab import engine, hosts, images

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LAB = "bench"


def timed(cmd: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=2)
    parser.add_argument("--os", dest="os_name", default="debian12")
    parser.add_argument("--profile", default="p5.48xlarge")
    args = parser.parse_args()

    # Cached images are the premise: build first (not timed).
    images.ensure(images.recipe_for(args.os_name), REPO / ".cache" / "lab")
    hosts.down(LAB)
    provision = str(BIN / "provision")
    lab = ["--name", LAB]
    ups: list[float] = []
    downs: list[float] = []
    for run in range(1, args.runs + 1):
        up = [provision, "lab", "up", *lab, "--count", str(args.count), "--os", args.os_name]
        ups.append(timed([*up, "--profile", args.profile]))
        ping = subprocess.run(
            [
                str(BIN / "ansible"),
                "-i",
                str(hosts.lab_paths(LAB).inventory),
                "lab",
                "-m",
                "ansible.builtin.ping",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if ping.returncode != 0 or ping.stdout.count("SUCCESS") != args.count:
            print(ping.stdout, ping.stderr, file=sys.stderr)
            return 1
        downs.append(timed([provision, "lab", "down", *lab]))
        left = (
            engine.containers({hosts.LAB_LABEL: LAB})
            + engine.volumes({hosts.LAB_LABEL: LAB})
            + engine.networks({hosts.LAB_LABEL: LAB})
        )
        if left:
            print(f"run {run}: lab down left {left}", file=sys.stderr)
            return 1
        print(f"run {run}: up {ups[-1]:.2f} s (SSH + Ansible ping ok), down {downs[-1]:.2f} s")

    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    print(
        f"| lab up, {args.count}x {args.os_name} {args.profile}, cached images "
        f"| median {statistics.median(ups):.2f} s (min {min(ups):.2f}, max {max(ups):.2f}; "
        f"{args.runs} runs) | lab down: median {statistics.median(downs):.2f} s, nothing left "
        f"| {machine} | `.venv/bin/python bench/bench_lab.py --runs {args.runs}` |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
