"""Benchmark: `provision detect` against `ansible -m ansible.builtin.setup` on the same hosts.

Brings up (or reuses) a lab of N simulated GPU hosts with `provision lab up`, then times,
after one warm-up run each:
  - `provision detect -i INV` (the whole CLI: Python start, inventory, probe, parse, report),
  - `detect_hosts()` in this process (the detection library alone),
  - `ansible all -i INV -m ansible.builtin.setup -f N` (ansible.cfg as shipped: pipelining,
    ControlPersist, so Ansible reuses warm SSH connections and detect does not).
Prints a Markdown table (median and min of --repeat runs) and optionally writes JSON.

    .venv/bin/python bench/bench_detect.py --counts 1,8,16 --repeat 5 --json bench/detect.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Row:
    hosts: int
    detect_cli_s: list[float]
    detect_lib_s: list[float]
    ansible_setup_s: list[float]
    load_avg: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after

    @property
    def speedup(self) -> float:
        return statistics.median(self.ansible_setup_s) / statistics.median(self.detect_cli_s)


def _tool(name: str, module: str) -> list[str]:
    """This environment's console script, else the one on PATH, else `python -m module`
    (a `pip install --target` of the wheels, as on the device)."""
    here = BIN / name
    found = str(here) if here.exists() else shutil.which(name)
    return [found] if found else [sys.executable, "-m", module]


def _timed(argv: Sequence[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n" + "\n".join(tail))
    return elapsed


def _timed_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _lab_up(lab: str, count: int, profile: str, os_name: str) -> Path:
    argv = [str(BIN / "provision"), "lab", "up", "--name", lab, "--count", str(count)]
    argv += ["--profile", profile, "--os", os_name]
    done = subprocess.run(argv, cwd=ROOT, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"lab up with {count} host(s) failed:\n{done.stderr.strip()}")
    base = Path(os.environ.get("GPUPROV_LAB_DIR") or ROOT / ".lab")
    inventory = base / lab / "inventory.ini"
    _settle(inventory)
    return inventory


def wait_for_load(limit: float | None, most: float = 300.0) -> float:
    """Wait until this machine's 1-minute load average is at or below `limit` (None: no
    wait), at most `most` seconds; the load average when the wait ended."""
    deadline = time.monotonic() + most
    while limit is not None and os.getloadavg()[0] > limit and time.monotonic() < deadline:
        time.sleep(2)
    return os.getloadavg()[0]


def _settle(inventory: Path, quiet_load: float = 1.5, longest_s: float = 90) -> None:
    """Let new hosts finish booting (`systemctl is-system-running --wait`) and this machine
    calm down, so that a row does not time the tail of `lab up`."""
    argv = [*_tool("ansible", "ansible.cli.adhoc"), "all", "-i", str(inventory), "-f", "50"]
    argv += ["-m", "ansible.builtin.command", "-a", "systemctl is-system-running --wait"]
    subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)  # degraded is fine too
    wait_for_load(quiet_load, longest_s)


def measure(inventory: Path, count: int, repeat: int) -> Row:
    from orchestrator.detect import detect_hosts
    from orchestrator.inventory import load_inventory

    def library() -> None:
        result = detect_hosts(load_inventory(inventory), progress=False)
        if result.failed:
            raise SystemExit(f"detection failed: {result.failed}")

    detect = [*_tool("provision", "orchestrator.cli"), "detect", "-i", str(inventory)]
    ansible = [*_tool("ansible", "ansible.cli.adhoc"), "all", "-i", str(inventory)]
    ansible += ["-m", "ansible.builtin.setup"]
    ansible += ["-f", str(max(count, 5))]
    # warm-up: host keys, caches, ControlPersist
    _timed(detect)
    _timed(ansible)
    library()
    cli, lib, setup = [], [], []
    load_before = os.getloadavg()[0]
    for _ in range(repeat):
        cli.append(_timed(detect))
        lib.append(_timed_call(library))
        setup.append(_timed(ansible))
    return Row(count, cli, lib, setup, (load_before, os.getloadavg()[0]))


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f})"


def table(rows: list[Row]) -> str:
    one = next((r for r in rows if r.hosts == 1), None)
    lines = [
        "| hosts | provision detect, s | detect_hosts(), s | ansible setup, s | speed-up "
        "| detect vs 1 host | load avg |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        scale = (
            f"{statistics.median(r.detect_cli_s) / statistics.median(one.detect_cli_s):.2f}x"
            if one
            else "-"
        )
        lines.append(
            f"| {r.hosts} | {_fmt(r.detect_cli_s)} | {_fmt(r.detect_lib_s)} "
            f"| {_fmt(r.ansible_setup_s)} | {r.speedup:.1f}x | {scale} "
            f"| {r.load_avg[0]:.1f}-{r.load_avg[1]:.1f} |"
        )
    lines.append("")
    lines.append("Median (min) of the timed runs after one warm-up; speed-up = ansible / detect.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--counts", default="1,8,16", help="lab sizes, comma-separated")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile", default="p5.48xlarge")
    p.add_argument("--os", dest="os_name", default="debian12")
    p.add_argument("--name", default="h1bench", help="lab name")
    p.add_argument("--inventory", type=Path, help="measure this inventory instead of a lab")
    p.add_argument("--json", type=Path, help="also write the raw timings here")
    p.add_argument("--down", action="store_true", help="remove the lab afterwards")
    args = p.parse_args(argv)
    rows = []
    if args.inventory:
        from orchestrator.inventory import load_inventory

        rows.append(measure(args.inventory, len(load_inventory(args.inventory).hosts), args.repeat))
    else:
        for count in (int(c) for c in args.counts.split(",")):
            inventory = _lab_up(args.name, count, args.profile, args.os_name)
            rows.append(measure(inventory, count, args.repeat))
            print(table(rows[-1:]).splitlines()[-3], file=sys.stderr)  # progress: the row
            if args.json:
                args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    if args.down and not args.inventory:
        subprocess.run([str(BIN / "provision"), "lab", "down", "--name", args.name], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
