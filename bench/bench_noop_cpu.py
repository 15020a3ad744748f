"""CPU of a no-op `provision apply --full` on a converged lab: wall time, this machine's CPU
(the provision process and its children: ansible-playbook and its workers) and the CPU the
lab hosts spent (their containers' cgroup counters), per run.

The lab is CPU-bound in CI (docs/benchmarks.md, "CI time, 2026-12-02"): what a converge costs
in CPU-seconds, not only in seconds, is what decides CI's time.

    .venv/bin/python bench/bench_noop_cpu.py --inventory .lab/NAME/inventory.ini [--runs 3]

Every run must end ok with 0 changed tasks (the lab converged before); a run that changes
something is reported and not counted. Prints a Markdown row for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def container_cpu_ns(names: list[str]) -> int:
    """The containers' CPU time so far (cgroup v1 cpuacct or v2 cpu.stat), in nanoseconds."""
    total = 0
    for name in names:
        cid = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        v2 = [
            Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"),
            Path(f"/sys/fs/cgroup/docker/{cid}/cpu.stat"),
        ]
        if v1.exists():
            total += int(v1.read_text())
            continue
        for stat in v2:
            if stat.exists():
                fields = dict(line.split() for line in stat.read_text().splitlines())
                total += int(fields["usage_usec"]) * 1000
                break
        else:
            raise SystemExit(f"bench_noop_cpu: no CPU counter found for container {name}")
    return total


def _hosts(inventory: str) -> list[str]:
    out = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", inventory, "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    return sorted(data.get("_meta", {}).get("hostvars", {}))


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_noop_cpu", description=__doc__)
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    hosts = _hosts(args.inventory)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(BIN / "provision"), "apply", "--full", "--inventory", args.inventory, "--json"]
    rows: list[tuple[float, float, float]] = []
    load = os.getloadavg()[0]
    for run in range(args.runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        host_before = container_cpu_ns(hosts)
        start = time.monotonic()
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        host_cpu = (container_cpu_ns(hosts) - host_before) / 1e9
        here = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        report = json.loads(done.stdout) if done.stdout.strip() else {"hosts": {}}
        changed = sum((r.get("apply") or {}).get("changed") or 0 for r in report["hosts"].values())
        print(
            f"run {run}: exit {done.returncode}, {wall:.1f} s, this machine {here:.1f} CPU-s, "
            f"lab hosts {host_cpu:.1f} CPU-s, changed {changed}"
        )
        if done.returncode != 0 or changed:
            print(f"run {run}: not a no-op; not counted", file=sys.stderr)
            continue
        rows.append((wall, here, host_cpu))
    if not rows:
        return 1
    wall, here, host = (statistics.median(col) for col in zip(*rows, strict=True))
    print(
        f"| no-op `provision apply --full`, {len(hosts)} host(s) | {wall:.1f} s | "
        f"{here:.1f} CPU-s here + {host:.1f} CPU-s in the hosts = {here + host:.1f} | "
        f"median of {len(rows)} runs; load average at start {load:.1f} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
