"""Plan 1,000 hosts from saved facts; target under 1.5 s end to end (issue 20).

Writes a facts directory of N hosts (the real 2x H200 fixture and variants derived from it:
8x H100 + 4 NVSwitch, 8x A100 + 6 NVSwitch, 1x L40S with no driver yet), then times, in one
process: reading the directory (factsdir.load_dir), parsing (parsers.parse_host), planning
(plan.plan_fleet); and, as a user runs it, `provision plan --facts DIR --json` end to end in
a new process (Python start-up and imports included), its wall time and its CPU time (user +
sys, from getrusage of the child: steadier than wall time on a shared machine). Prints one
JSON line per figure.

    .venv/bin/python bench/bench_plan.py [--hosts 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_dir
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_fleet
from orchestrator.policy import load_policy

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
DRIVER_FILES = ("nvidia-smi", "proc-driver-nvidia")


def _pci_line(bus: int, device: int, cls: int) -> str:
    return (
        f"0000:{bus:02x}:00.0 vendor=0x10de device={device:#06x} class={cls:#08x} "
        'subsystem_vendor=0x10de subsystem_device=0x0000 current_link_speed="32.0 GT/s PCIe" '
        'current_link_width=16 max_link_speed="32.0 GT/s PCIe" max_link_width=16 numa_node=0 '
        "driver="
    )


def _variant(
    real: dict[str, str], gpu: int, count: int, switch: tuple[int, int] | None
) -> dict[str, str]:
    raw = {k: v for k, v in real.items() if not k.startswith(DRIVER_FILES)}
    lines = [
        ln
        for ln in real["sysfs-pci-devices.txt"].splitlines()
        if "vendor=0x10de" not in ln and not ln.startswith("# exit")
    ]
    bus = 0x10
    for _ in range(count):
        lines.append(_pci_line(bus, gpu, 0x030200))
        bus += 1
    for _ in range(switch[1] if switch else 0):
        lines.append(_pci_line(bus, switch[0] if switch else 0, 0x068000))
        bus += 1
    raw["sysfs-pci-devices.txt"] = "\n".join(lines) + "\n# exit=0\n"
    return raw


def write_facts(root: Path, hosts: int) -> None:
    real = {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}
    shapes = [
        real,
        _variant(real, 0x2330, 8, (0x22A3, 4)),
        _variant(real, 0x20B0, 8, (0x1AF1, 6)),
        _variant(real, 0x26B9, 1, None),
    ]
    for i in range(hosts):
        d = root / f"node-{i:04d}"
        d.mkdir(parents=True)
        for name, text in shapes[i % len(shapes)].items():
            (d / name).write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    try:
        write_facts(tmp, args.hosts)
        catalog = default_catalog()
        rows: dict[str, list[float]] = {
            "load": [],
            "parse": [],
            "plan": [],
            "in_process": [],
            "cli": [],
            "cli_cpu": [],
        }
        cmd = [str(Path(sys.executable).parent / "provision"), "plan", "--facts", str(tmp)]
        cmd.append("--json")
        for _ in range(args.runs):
            t0 = time.perf_counter()
            raw = load_dir(tmp)
            t1 = time.perf_counter()
            facts = {h: parse_host(h, r) for h, r in raw.items()}
            t2 = time.perf_counter()
            policies = {h: load_policy(h, {}) for h in facts}
            plans = plan_fleet(facts, policies, catalog)
            t3 = time.perf_counter()
            assert len(plans) == args.hosts and not any(p.blocked for p in plans.values())
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            t4 = time.perf_counter()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            assert len(json.loads(proc.stdout)["hosts"]) == args.hosts
            for name, value in (
                ("load", t1 - t0),
                ("parse", t2 - t1),
                ("plan", t3 - t2),
                ("in_process", t3 - t0),
                ("cli", t4 - t3),
                ("cli_cpu", cpu),
            ):
                rows[name].append(value)
        for name, values in rows.items():
            print(
                json.dumps(
                    {
                        "figure": f"{name}_s",
                        "hosts": args.hosts,
                        "median": round(statistics.median(values), 3),
                        "min": round(min(values), 3),
                        "max": round(max(values), 3),
                        "runs": args.runs,
                    }
                )
            )
        return 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
