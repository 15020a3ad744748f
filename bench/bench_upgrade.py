"""Benchmark: a rolling driver upgrade of a lab fleet (`provision apply --serial N`).

Brings up a lab of N Debian 12 p5 hosts (simulated GPUs, real packages), converges every host
at Debian's 535.261.03 (bookworm, proprietary modules, DKMS builds), then moves the fleet's
policy to 535.309.01 (bookworm-security) as a user bumping the driver in the inventory would,
and times `provision apply --serial S`: per host the drain hook, GPU clients stopped, driver +
fabric manager + nscq upgraded in lockstep (DKMS builds again), module reloaded, MIG layout
re-applied (with --mig), CDI refreshed, re-validated, undrain hook. Then `provision verify`.

Prints a Markdown summary: wall time of each phase, and per host when it was drained and
undrained (from the hooks' own log on the host) and what its upgrade state file recorded.

    .venv/bin/python bench/bench_upgrade.py --hosts 4 --serial 2 --mig h100-80gb-mixed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

OLD, NEW = "535.261.03", "535.309.01"
HOOKS = "/var/log/gpuprov-upgrade-hooks.log"
STATE = "/var/lib/gpuprov/upgrade.json"
HOST_VARS = {
    "nvidia_driver_reboot": "allow",  # as tests/lab/test_upgrade_lab.py: reboot if a reload fails
    "driver_upgrade_drain_command": f'echo "drain $(date +%s.%N)" >> {HOOKS}',
    "driver_upgrade_undrain_command": f'echo "undrain $(date +%s.%N)" >> {HOOKS}',
}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + yaml.safe_dump(data, sort_keys=True))


def _provision(inventory: Path, report: Path, *args: str) -> tuple[float, dict[str, Any]]:
    argv = [str(BIN / "provision"), "--inventory", str(inventory), "--report", str(report)]
    start = time.monotonic()
    done = subprocess.run(
        [*argv, *args],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.monotonic() - start
    if not report.exists():
        raise SystemExit(f"provision {' '.join(args)} wrote no report:\n{done.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(report.read_text())
    if data.get("exit_code") != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise SystemExit(f"provision {' '.join(args)} exited {data.get('exit_code')}:\n{tail}")
    return elapsed, data


def _fmt(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def run(hosts_count: int, serial: str, mig: str | None, name: str, work: Path) -> str:
    from orchestrator.lab import hosts
    from orchestrator.lab.running import attach

    work.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    say = lines.append
    start = time.monotonic()
    hosts.down(name)
    hosts.up(name, "p5.48xlarge", hosts_count, "debian12", say=lambda _: None)
    lab = attach(name, "p5.48xlarge")
    up_s = time.monotonic() - start
    inv_dir = lab.inventory.parent
    mig_vars: dict[str, Any] = {}
    if mig:
        fleet = yaml.safe_load((ROOT / "inventory/group_vars/all.yml").read_text())["mig_configs"]
        mig_vars = {"mig_layout": mig, "mig_configs": {mig: fleet[mig]}}
        mig_vars["gpuprov_validation_nccl"] = False  # MIG and the NCCL check do not go together
    for host in lab.hosts:
        _write(inv_dir / "host_vars" / f"{host}.yml", {**HOST_VARS, **mig_vars})
    _write(inv_dir / "group_vars" / "gpu_nodes.yml", {"nvidia_driver_version": OLD})
    print(f"lab {name}: {len(lab.hosts)} hosts up; converging at {OLD}", file=sys.stderr)
    converge_s, _ = _provision(lab.inventory, work / "converge.json", "apply")
    for host in lab.hosts:
        loaded = lab.ssh(host, "cat /proc/driver/nvidia/version").stdout
        if f" {OLD} " not in loaded:
            raise SystemExit(f"{host}: not at {OLD} after the converge: {loaded}")
    # The fleet's policy moves to the new release (group_vars: every host of the lab).
    _write(inv_dir / "group_vars" / "gpu_nodes.yml", {"nvidia_driver_version": NEW})
    print(f"upgrading to {NEW} with --serial {serial}", file=sys.stderr)
    plan_s, plan = _provision(lab.inventory, work / "plan.json", "plan")
    reasons = {
        h: next(r["reason"] for r in v["plan"]["roles"] if r["name"] == "nvidia_driver")
        for h, v in plan["hosts"].items()
    }
    upgrade_start = time.time()
    upgrade_s, _ = _provision(lab.inventory, work / "upgrade.json", "apply", "--serial", serial)
    verify_s, _ = _provision(lab.inventory, work / "verify.json", "verify")

    say(f"| phase ({len(lab.hosts)} hosts) | wall time |")
    say("|---|---|")
    say(f"| lab up | {_fmt(up_s)} |")
    say(f"| converge at {OLD} (`provision apply`, all hosts at once) | {_fmt(converge_s)} |")
    say(f"| `provision plan` | {_fmt(plan_s)} |")
    say(f"| upgrade to {NEW} (`provision apply --serial {serial}`) | {_fmt(upgrade_s)} |")
    say(f"| `provision verify` | {_fmt(verify_s)} |")
    say("")
    say("| host | plan | drained at | undrained at | drained for | steps recorded |")
    say("|---|---|---|---|---|---|")
    for host in lab.hosts:
        hooks = dict(
            line.split()[:2] for line in lab.ssh(host, f"cat {HOOKS}").stdout.splitlines() if line
        )
        state = json.loads(lab.ssh(host, f"cat {STATE}").stdout or "{}")
        drained = float(hooks.get("drain", "nan")) - upgrade_start
        undrained = float(hooks.get("undrain", "nan")) - upgrade_start
        loaded = lab.ssh(host, "cat /proc/driver/nvidia/version").stdout
        if f" {NEW} " not in loaded or state.get("status") != "done":
            raise SystemExit(f"{host}: upgrade not done: {state} / {loaded}")
        say(
            f"| {host} | {reasons[host].split(':')[0]} | +{_fmt(drained)} | +{_fmt(undrained)} "
            f"| {_fmt(undrained - drained)} | {', '.join(state.get('done', []))} |"
        )
    say("")
    say(f"Times are from the start of the upgrade run; reports and artifacts: {work}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--serial", default="2", help="batch size: a count or a percentage")
    p.add_argument("--mig", help="a MIG layout of inventory/group_vars/all.yml for every host")
    p.add_argument("--name", default="upgbench", help="lab name")
    p.add_argument("--work", type=Path, default=ROOT / ".cache" / "bench-upgrade")
    p.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = p.parse_args(argv)
    try:
        print(run(args.hosts, args.serial, args.mig, args.name, args.work))
    finally:
        if not args.keep:
            from orchestrator.lab import hosts

            hosts.down(args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
