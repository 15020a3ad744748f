"""A matrix of planner cases over every recorded and derived fixture: facts x inventory
variables, planned through the pipeline's own planning call (orchestrator.pipeline._plan), and
rendered as `provision plan --json` renders them (each host's plan) plus each host's entry of
the plan document (plan.json). tests/unit/test_plan_golden.py holds the output to the golden
file in tests/unit/data/plan-golden.json, so a change to the planner that was meant to change
nothing is proven to change nothing.

    python tests/unit/plancases.py --write   # rewrite the golden file (review the diff!)
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_fabric import efa_pci, efa_rdma, fi_info, shaped  # noqa: E402
from test_plan import DEBIAN_12, DEBIAN_13, UBUNTU_2204, real_raw, variant  # noqa: E402
from test_plan_os import AL2023, RHEL_96, ROCKY_94  # noqa: E402

from orchestrator.catalog import default_catalog  # noqa: E402
from orchestrator.factsdir import load_host  # noqa: E402
from orchestrator.parsers import names, parse_host  # noqa: E402

GOLDEN = HERE / "data" / "plan-golden.json"
TODAY = dt.date(2026, 12, 5)  # end-of-life warnings depend on the date
REAL_DIR = HERE.parents[0] / "recorded" / "fixtures" / "real"
DERIVED_DIR = HERE / "fixtures_derived"
UBUNTU_2404 = UBUNTU_2204.replace("22.04.5", "24.04.1").replace('"22.04"', '"24.04"')
UBUNTU_2404 = UBUNTU_2404.replace("jammy", "noble")
H100, H200, B200, GB200, L40S = 0x2330, 0x2335, 0x2901, 0x2941, 0x26B9
NVSWITCH3 = 0x22A3
DCGM = ["nvidia_driver", "docker", "nvidia_container_toolkit", "dcgm"]
MIG = {
    "mig_layout": "all-1g",
    "mig_configs": {"all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]},
}

Raw = dict[str, str]


def _fixture_dirs() -> Iterator[tuple[str, Raw]]:
    for root in (REAL_DIR, DERIVED_DIR):
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            yield d.name, dict(load_host(d))


def _with(raw: Raw, **files: str) -> Raw:
    return {**raw, **files}


def _efa_host() -> Raw:
    raw = real_raw()
    pci = [ln for ln in raw["sysfs-pci-devices.txt"].splitlines() if not ln.startswith("#")]
    raw["sysfs-pci-devices.txt"] = "\n".join(pci + efa_pci(32)) + "\n# exit=0\n"
    raw["rdma.txt"] = efa_rdma()
    raw["fi-info-efa.txt"] = fi_info()
    return raw


def _hosts() -> Iterator[tuple[str, Raw]]:
    yield from _fixture_dirs()
    hgx = {H100: 8}
    for os_name, release in (
        ("ubuntu2204", UBUNTU_2204),
        ("ubuntu2404", UBUNTU_2404),
        ("debian12", DEBIAN_12),
        ("debian13", DEBIAN_13),
        ("rocky94", ROCKY_94),
        ("rhel96", RHEL_96),
        ("al2023", AL2023),
    ):
        yield f"hgx-h100-{os_name}", variant(hgx, (NVSWITCH3, 4), os_release=release)
    yield "l40s-ubuntu2404", variant({L40S: 4}, os_release=UBUNTU_2404)
    yield "h200-with-driver-debian12", variant({H200: 2}, os_release=DEBIAN_12, with_driver=True)
    yield "hgx-b200-ubuntu2404", variant({B200: 8}, os_release=UBUNTU_2404)
    tray = variant({GB200: 4}, os_release=UBUNTU_2404)
    tray[names.UNAME_M] = "aarch64\n# exit=0\n"
    yield "gb200-tray-ubuntu2404", tray
    yield "efa-p5-like", _efa_host()
    yield "ib-hgx-like", _with(real_raw(), **{"rdma.txt": shaped("rdma-ib.txt")})
    yield "simulated-p5", variant(hgx, (NVSWITCH3, 4), simulated=True)


POLICIES: Mapping[str, Mapping[str, Any]] = {
    "default": {},
    "distribution": {"nvidia_driver_source": "distribution"},
    "branch580": {"nvidia_driver_branch": "580"},
    "version": {"nvidia_driver_version": "580.126.20"},
    "proprietary": {"nvidia_driver_flavour": "proprietary"},
    "dcgm": {"gpuprov_roles": DCGM},
    "dcgm-exporter": {"gpuprov_roles": DCGM, "dcgm_exporter": "host", "dcgm_cuda_major": "12"},
    "runtime": {
        "docker_source": "distribution",
        "nvidia_container_toolkit_default_runtime": True,
        "nvidia_container_toolkit_version": "1.17.8",
    },
    "driver-only": {"gpuprov_roles": ["nvidia_driver"]},
    "mig": MIG,
    "validation": {
        "gpuprov_validation_nccl": False,
        "gpuprov_validation_expected_gpus": 2,
        "gpuprov_cuda_version": "12.8",
        "gpuprov_validation_runtime": "host",
    },
    "fabric": {"gpuprov_fabric_efa_gpudirect": "peermem", "infiniband_gpudirect": "dmabuf"},
    "imex": {"nvidia_driver_imex_nodes": ["10.0.0.1", "10.0.0.2"]},
}


def cases() -> Iterator[tuple[str, Raw, Mapping[str, Any]]]:
    for host, raw in _hosts():
        for policy, hostvars in POLICIES.items():
            yield f"{host}/{policy}", raw, hostvars


def run_case(raw: Raw, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """One host planned as `provision plan` plans it: its plan, or the bad input it is."""
    from orchestrator import report
    from orchestrator.errors import GpuprovError
    from orchestrator.pipeline import _document_vars, _plan

    facts = {"node": parse_host("node", raw)}
    try:
        _, plans = _plan(facts, {"node": dict(hostvars)}, default_catalog(), today=TODAY)
    except GpuprovError as exc:
        return {"bad_input": str(exc)}
    return {
        "plan": report.plan_dict(plans["node"]),
        "document": _document_vars(["node"], plans)["node"],
    }


def render(run: Callable[[Raw, Mapping[str, Any]], dict[str, Any]] = run_case) -> str:
    out = {name: run(raw, hostvars) for name, raw, hostvars in cases()}
    return json.dumps(out, indent=1, sort_keys=True, default=str) + "\n"


if __name__ == "__main__":
    text = render()
    if "--write" in sys.argv:
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN} ({len(json.loads(text))} cases)")
    else:
        sys.stdout.write(text)
