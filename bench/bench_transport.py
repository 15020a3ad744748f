"""Benchmark: detection and verification against what they replace, side by side in one run.

On one inventory (the lab's converged hosts: `provision lab up` + `provision -i ...`), each
round times, one after the other (wall, and the CPU of the command and all its children from
getrusage):
  - `provision detect -i INV` (the orchestrator's probe, OpenSSH or paramiko as detect.py picks),
  - `ansible all -i INV -m gpuprov.nvidia.gpu_probe` (the collection's own probe module run by
    Ansible; ad-hoc commands gather no facts, and ANSIBLE_GATHERING=explicit says so again),
  - `ansible all -i INV -m ansible.builtin.setup` (Ansible's full fact gathering),
  - `provision verify -i INV` (detect + plan + the suite over one session per host),
  - the suite the old way: pytest + testinfra's ansible backend, one SSH connection per
    command, pytest-xdist with a worker per host (`orchestrator.verify.runner.suite_command`),
  - `provision -i INV` (the whole no-op pipeline: every role converged), with its stages' spans
    read from its --report (the report's `timings`).
ansible.cfg as shipped (pipelining, ControlPersist: Ansible reuses warm SSH connections, gpuprov
opens new ones). Prints a Markdown table (median, min, max of --repeat rounds after one warm-up
round) with the 1-minute load average before and after, and optionally writes JSON. With
`--settle LOAD`, each command starts only once the 1-minute load average is at or below LOAD
(at most 300 s of waiting), and each row gives the load its runs started at: the commands are
compared at the same low load rather than in the load the previous one left (Ansible's
ControlPersist masters may then have expired between its runs, as they do between a user's).
With `--containers NAME,...` (the lab hosts' Docker containers: `docker ps`), each row also
gives the CPU the command cost on those hosts, from their cgroups (cgroup v1 `cpuacct.usage` or
v2 `cpu.stat`): on lab hosts that share this machine's cores, their work is part of the wall.

    .venv/bin/python bench/bench_transport.py -i .lab/scale/inventory.ini --repeat 5 \
        --containers scale-deb12-1,scale-deb12-2 --json transport.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_detect import _tool, wait_for_load  # noqa: E402
from bench_noop_cpu import container_cpu_ns  # noqa: E402


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s of the command and its children, exit status)."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900
    )
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a host failed a check; anything else is a failure
        tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n" + "\n".join(tail))
    return wall, _children_cpu() - cpu, done.returncode


def stage_spans(report: Path) -> dict[str, float]:
    """The whole run's span of each stage (earliest start to latest end over the hosts)."""
    doc = json.loads(report.read_text())
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    from datetime import datetime

    for host in doc.get("hosts", {}).values():
        for stage, span in (host.get("timings") or {}).get("stages", {}).items():
            start = datetime.fromisoformat(span["start"]).timestamp()
            end = datetime.fromisoformat(span["end"]).timestamp()
            first[stage] = min(first.get(stage, start), start)
            last[stage] = max(last.get(stage, end), end)
    return {s: round(last[s] - first[s], 3) for s in first}


def commands(inventory: Path, hosts: Sequence[str], work: Path) -> dict[str, list[str]]:
    from orchestrator.probe import probe_script
    from orchestrator.verify.runner import suite_command

    provision = _tool("provision", "orchestrator.cli")
    ansible = [*_tool("ansible", "ansible.cli.adhoc"), "all", "-i", str(inventory)]
    ansible += ["-f", str(max(5, len(hosts)))]
    old = suite_command(
        inventory, ",ansible://".join(hosts), work / "old-junit.xml", None, len(hosts)
    )
    return {
        "provision detect": [*provision, "detect", "-i", str(inventory)],
        # the module takes the probe as its argument, as the plan action passes it (raw: the
        # ad-hoc command templates its arguments, and the probe holds Docker format strings)
        "ansible -m gpuprov.nvidia.gpu_probe": [
            *ansible, "-m", "gpuprov.nvidia.gpu_probe",
            "-a", json.dumps({"script": "{% raw %}" + probe_script() + "{% endraw %}"}),
        ],
        "ansible -m setup": [*ansible, "-m", "ansible.builtin.setup"],
        "provision verify": [*provision, "verify", "-i", str(inventory)],
        "suite on testinfra's ansible backend (before)": old,
        "provision (no-op)": [
            *provision, "-i", str(inventory), "--report", str(work / "noop.json"),
        ],
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-i", "--inventory", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip", default="", help="comma-separated row names to leave out")
    p.add_argument("--json", type=Path, help="also write the raw timings here")
    p.add_argument(
        "--settle",
        type=float,
        metavar="LOAD",
        help="start each command once the 1-minute load average is at or below LOAD",
    )
    p.add_argument(
        "--containers",
        default="",
        help="comma-separated Docker containers of the hosts (lab): add each command's CPU on them",
    )
    args = p.parse_args(argv)
    from orchestrator.inventory import load_inventory

    hosts = [h.name for h in load_inventory(args.inventory).hosts]
    env = {
        **os.environ,
        "ANSIBLE_GATHERING": "explicit",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    containers = [c.strip() for c in args.containers.split(",") if c.strip()]
    container_cpu_ns(containers)  # a name without a container or counter stops here (none: 0)
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as tmp:
        work = Path(tmp)
        rows = {k: v for k, v in commands(args.inventory, hosts, work).items() if k not in skip}
        for argv in rows.values():  # warm-up: caches, ControlPersist masters
            timed(argv, env)
        results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in rows}
        host_cpu: dict[str, list[float]] = {k: [] for k in rows}
        started_at: dict[str, list[float]] = {k: [] for k in rows}
        spans: list[dict[str, float]] = []
        load = [os.getloadavg()[0]]
        for _ in range(args.repeat):
            for name, argv in rows.items():
                started_at[name].append(wait_for_load(args.settle))
                before = container_cpu_ns(containers)
                results[name].append(timed(argv, env))
                host_cpu[name].append((container_cpu_ns(containers) - before) / 1e9)
                if name == "provision (no-op)":
                    spans.append(stage_spans(work / "noop.json"))
            load.append(os.getloadavg()[0])
    lines = [
        f"{len(hosts)} hosts ({', '.join(hosts)}), {args.repeat} rounds; load avg (1 min) "
        f"{min(load):.1f}-{max(load):.1f} (per round: {', '.join(f'{x:.1f}' for x in load)})",
        "",
        "| command | wall s: median (min-max) | CPU s: median (min-max) | exit "
        "| load at start (1 min) |" + (" hosts' CPU s: median (min-max) |" if containers else ""),
        "|---|---|---|---|---|" + ("---|" if containers else ""),
    ]
    for name, runs in results.items():
        wall = [r[0] for r in runs]
        cpu = [r[1] for r in runs]
        at = started_at[name]
        lines.append(
            f"| `{name}` | {statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f}) "
            f"| {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) "
            f"| {','.join(sorted({str(r[2]) for r in runs}))} | {min(at):.2f}-{max(at):.2f} |"
        )
        if containers:
            hc = host_cpu[name]
            lines[-1] += f" {statistics.median(hc):.2f} ({min(hc):.2f}-{max(hc):.2f}) |"
    if spans:
        lines += ["", "No-op `provision`, each stage's span over the hosts (s), per round:"]
        for stage in spans[0]:
            values = [s.get(stage, 0.0) for s in spans]
            lines.append(f"- {stage}: {', '.join(f'{v:.2f}' for v in values)}")
    print("\n".join(lines))
    if args.json:
        data = {
            "hosts": hosts,
            "load": load,
            "results": results,
            "load_at_start": started_at,
            "host_cpu": host_cpu if containers else None,
            "noop_stages": spans,
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
