"""Which network NCCL ran over in the multi-node all-reduce, from NCCL's own log (issue 47).

A fabric host's all-reduce that falls back to TCP sockets still passes on values, and its
bandwidth is only reported: without this check a fleet whose EFA plugin never loaded, or
whose HCAs were never used, would validate. So, per host of the run:

- `host_net`: what kind of fabric the host has (EFA or InfiniBand, from its facts as fabric
  health reads them) and the environment that points NCCL at it (the EFA plugin's directory
  on the library path; the InfiniBand HCAs by name), plus NCCL's INFO log of INIT and NET;
- `networks_in_log`: the network names in NCCL's "Using network <name>" lines;
- `judge`: the `multinode_transport` result: on a fabric host the expected network passes,
  "Socket" fails with one line saying what ran and why it matters, anything else warns.

The names and the log line are multinode.yaml's `nccl_net` (sourced there from NCCL's and
aws-ofi-nccl's code). Pure functions: the payload writes the log and sends the names back
(payload/gpucheck/multinode.py), multinode_launch.py wires them in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from ..catalog import SAFE_LOADER
from ..errors import CatalogError
from ..fabric import (
    FabricCatalog,
    default_fabric,
    efa_devices,
    efa_functions,
    ib_functions,
    ib_hcas,
)
from ..facts import HostFacts
from ..result import CheckResult
from .multinode import SETTINGS_PATH

FabricKind = Literal["efa", "infiniband", ""]
CHECK = "multinode_transport"


@dataclass(frozen=True)
class NcclNet:
    """multinode.yaml `nccl_net`."""

    log_env: Mapping[str, str]
    using_line: str
    expected: Mapping[str, tuple[str, ...]]
    socket: str


@dataclass(frozen=True)
class HostNet:
    """One host's fabric as the all-reduce sees it, and the environment its ranks get."""

    kind: FabricKind
    env: Mapping[str, str] = field(default_factory=dict)
    detail: str = ""  # the devices, in words ("8 InfiniBand HCAs (mlx5_ib0, ...)")


def load_nccl_net(path: Path = SETTINGS_PATH) -> NcclNet:
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)["nccl_net"]
        return NcclNet(
            log_env={str(k): str(v) for k, v in doc["log_env"].items()},
            using_line=str(doc["using_line"]),
            expected={str(k): tuple(str(n) for n in v) for k, v in doc["expected"].items()},
            socket=str(doc["socket"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise CatalogError(
            f"multi-node settings {path}: no usable nccl_net ({exc})",
            fix="restore orchestrator/validate/multinode.yaml from the gpuprov release",
        ) from exc


def _plugin_dirs(facts: HostFacts, cat: FabricCatalog) -> list[str]:
    """Where the host's aws-ofi-nccl libraries are (the probe lists them), else the
    catalog's plugin directory."""
    found = facts.fabric.ofi_nccl if facts.fabric else ()
    libraries = set(cat.plugin_libraries)
    dirs = sorted({os.path.dirname(p) for p in found if os.path.basename(p) in libraries})
    return dirs or [cat.plugin_dir]


def host_net(facts: HostFacts, net: NcclNet, cat: FabricCatalog | None = None) -> HostNet:
    """EFA where the host has EFA functions or devices, InfiniBand where it has HCAs, else
    none; the environment points NCCL at that fabric and turns its INFO log on."""
    cat = cat or default_fabric()
    env = dict(net.log_env)
    functions, devices = efa_functions(facts, cat), efa_devices(facts, cat)
    if functions or devices:
        dirs = _plugin_dirs(facts, cat)
        env["LD_LIBRARY_PATH"] = ":".join(dirs)
        count = len(devices) or len(functions)
        return HostNet("efa", env, f"{count} EFA devices, plugin in {', '.join(dirs)}")
    hcas = ib_hcas(facts, cat)
    if hcas:
        names = [d.name for d in hcas]
        env["NCCL_IB_HCA"] = "=" + ",".join(names)
        return HostNet("infiniband", env, f"{len(names)} InfiniBand HCAs ({', '.join(names)})")
    functions = ib_functions(facts, cat)
    if functions:  # HCAs on the PCI bus without an RDMA device: NCCL cannot use them
        return HostNet("infiniband", env, f"{len(functions)} InfiniBand HCAs with no RDMA device")
    return HostNet("", env, "no EFA or InfiniBand")


def stand_in(net: NcclNet, cat: FabricCatalog | None = None) -> dict[str, object]:
    """What the lab's CPU stand-in needs to name the network NCCL would take (the payload's
    stand_in_network): the plugin's libraries and name, NCCL's IB and Socket names."""
    cat = cat or default_fabric()
    return {
        "plugin_libraries": list(cat.plugin_libraries),
        "plugin_name": net.expected["efa"][0],
        "ib_name": net.expected["infiniband"][0],
        "socket_name": net.socket,
    }


def networks_in_log(lines: Iterable[str], net: NcclNet) -> tuple[str, ...]:
    """The distinct network names of NCCL's "Using network <name>" lines, in first-seen order."""
    seen: dict[str, None] = {}
    for line in lines:
        at = line.find(net.using_line)
        if at >= 0:
            name = line[at + len(net.using_line) :].strip()
            if name:
                seen[name] = None
    return tuple(seen)


def judge(host: str, hn: HostNet, seen: tuple[str, ...] | None, net: NcclNet) -> CheckResult:
    """The host's `multinode_transport`: which network NCCL's log says its ranks used."""
    if seen is None or not seen:
        return CheckResult(
            CHECK,
            "warn" if hn.kind else "skip",
            "not logged",
            None,
            "",
            f"{host}: NCCL's log named no network (the ranks stopped before NCCL set up its "
            "network, or NCCL_DEBUG was overridden): which transport ran is unknown",
        )
    value = ",".join(seen)
    if not hn.kind:
        return CheckResult(CHECK, "pass", value, None, "")
    expected = net.expected.get(hn.kind, ())
    want = f"NET/{expected[0]}" if expected else "the fabric"
    if net.socket in seen:
        fabric = "the EFA plugin" if hn.kind == "efa" else "the InfiniBand HCAs"
        why = (
            "aws-ofi-nccl did not load from " + hn.env.get("LD_LIBRARY_PATH", "its directory")
            if hn.kind == "efa"
            else "no HCA of "
            + hn.env.get("NCCL_IB_HCA", "the host").lstrip("=")
            + " had an ACTIVE port"
        )
        return CheckResult(
            CHECK,
            "fail",
            value,
            want,
            "",
            f"{host}: NCCL ran over TCP sockets (NET/{net.socket}), not {fabric} ({want}; "
            f"{hn.detail}): {why}",
        )
    if all(name in expected for name in seen):
        return CheckResult(CHECK, "pass", value, want, "")
    return CheckResult(
        CHECK,
        "warn",
        value,
        want,
        "",
        f"{host}: NCCL ran over NET/{value}, not {want} ({hn.detail})",
    )


__all__ = [
    "HostNet",
    "NcclNet",
    "host_net",
    "judge",
    "load_nccl_net",
    "networks_in_log",
    "stand_in",
]
