"""`nvidia-smi -q` (text) -> per-GPU health: fabric, ECC, row remapper, clocks events.

The text is an indented tree ("Key : value" leaves, bare section names); `parse_tree` builds
it once and the typed extractors below read the parts validation needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ._text import ParseError, int_value, split_exit, value
from .smi_query_gpu import normalise_bus_id

_GPU_HEADER = re.compile(r"GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")


@dataclass
class Node:
    key: str
    value: str | None = None
    children: list[Node] = field(default_factory=list)

    def child(self, *path: str) -> Node | None:
        node: Node | None = self
        for key in path:
            if node is None:
                return None
            node = next((c for c in node.children if c.key == key), None)
        return node

    def get(self, *path: str) -> str | None:
        node = self.child(*path)
        return None if node is None or node.value is None else value(node.value)


@dataclass(frozen=True)
class EccCounts:
    """One scope (volatile or aggregate) of `ECC Errors`; None where not reported."""

    sram_correctable: int | None
    sram_uncorrectable: int | None  # parity + SEC-DED (Hopper) or the single SRAM counter
    dram_correctable: int | None
    dram_uncorrectable: int | None


@dataclass(frozen=True)
class RowRemap:
    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None


@dataclass(frozen=True)
class SmiQGpu:
    bus_id: str  # "0000:00:06.0"
    product_name: str
    architecture: str | None
    persistence_mode: str | None
    mig_mode_current: str | None
    mig_mode_pending: str | None
    ecc_mode_current: str | None
    ecc_mode_pending: str | None
    ecc_volatile: EccCounts
    ecc_aggregate: EccCounts
    retired_pages_pending: str | None
    row_remap: RowRemap
    fabric_state: str | None  # "Completed", "In Progress", "Not Started"; None: N/A
    fabric_status: str | None  # "Success" or an error; None: N/A
    recovery_action: str | None  # "None", "GPU Reset", "Node Reboot", "Drain P2P"
    clocks_event_reasons_active: tuple[str, ...]  # e.g. ("Idle",), ("HW Thermal Slowdown",)
    temperature_c: int | None
    virtualization_mode: str | None  # "Pass-Through" in a VM, "None" on bare metal


@dataclass(frozen=True)
class SmiQ:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[SmiQGpu, ...]


def parse_tree(text: str) -> Node:
    """The indentation tree of `nvidia-smi -q`; GPU sections are children of the root."""
    root = Node("")
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in split_exit(text).body.splitlines():
        stripped = raw.strip()
        if not stripped or raw[0] == "=":
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if indent == 0 and (header := _GPU_HEADER.match(raw)):
            node = Node("GPU", header["bus"])
        else:
            key, sep, val = stripped.partition(" : ")
            if sep:
                node = Node(key.rstrip(), val.strip())
            elif stripped.endswith(":"):  # "Key :" with an empty value
                node = Node(stripped[:-1].rstrip(), "")
            else:
                node = Node(stripped)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


_FABRIC = "\n    Fabric\n"


def fabric_states(text: str) -> dict[str, tuple[str | None, str | None]]:
    """Bus id -> (Fabric State, Fabric Status), found with str.find instead of building the
    whole tree (what `parse_host` needs from -q; far cheaper than `parse_smi_q`)."""
    out = split_exit(text)
    if not out.ok:
        return {}
    body = out.body
    states: dict[str, tuple[str | None, str | None]] = {}
    at = body.find(_FABRIC)
    while at >= 0:
        gpu = body.rfind("\nGPU ", 0, at)
        header = _GPU_HEADER.match(body, gpu + 1, body.find("\n", gpu + 1)) if gpu >= 0 else None
        lines = body[at + len(_FABRIC) :].split("\n", 2)[:2]
        fields = {}
        for line in lines:
            key, _sep, val = line.partition(" : ")
            fields[key.strip()] = val
        if header:
            bus = normalise_bus_id(header["bus"])
            states[bus] = (value(fields.get("State", "")), value(fields.get("Status", "")))
        at = body.find(_FABRIC, at + 1)
    return states


def _yes(text: str | None) -> bool | None:
    return None if text is None else text == "Yes"


def _sum(*counts: int | None) -> int | None:
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _ecc(scope: Node | None) -> EccCounts:
    if scope is None:
        return EccCounts(None, None, None, None)

    def n(key: str) -> int | None:
        return int_value(scope.get(key) or "")

    return EccCounts(
        sram_correctable=n("SRAM Correctable"),
        sram_uncorrectable=_sum(
            n("SRAM Uncorrectable"), n("SRAM Uncorrectable Parity"), n("SRAM Uncorrectable SEC-DED")
        ),
        dram_correctable=n("DRAM Correctable"),
        dram_uncorrectable=n("DRAM Uncorrectable"),
    )


def _gpu(node: Node) -> SmiQGpu:
    reasons = node.child("Clocks Event Reasons") or node.child("Clocks Throttle Reasons")
    active: list[str] = []
    if reasons is not None:
        todo = list(reasons.children)
        while todo:
            c = todo.pop(0)
            if c.value == "Active":
                active.append(c.key)
            todo[0:0] = c.children
    remap = node.child("Remapped Rows")
    return SmiQGpu(
        bus_id=normalise_bus_id(node.value or ""),
        product_name=node.get("Product Name") or "",
        architecture=node.get("Product Architecture"),
        persistence_mode=node.get("Persistence Mode"),
        mig_mode_current=node.get("MIG Mode", "Current"),
        mig_mode_pending=node.get("MIG Mode", "Pending"),
        ecc_mode_current=node.get("ECC Mode", "Current"),
        ecc_mode_pending=node.get("ECC Mode", "Pending"),
        ecc_volatile=_ecc(node.child("ECC Errors", "Volatile")),
        ecc_aggregate=_ecc(node.child("ECC Errors", "Aggregate")),
        retired_pages_pending=node.get("Retired Pages", "Pending Page Blacklist")
        or node.get("Retired Pages", "Pending"),
        row_remap=RowRemap(
            correctable=int_value(remap.get("Correctable Error") or "") if remap else None,
            uncorrectable=int_value(remap.get("Uncorrectable Error") or "") if remap else None,
            pending=_yes(remap.get("Pending")) if remap else None,
            failure=_yes(remap.get("Remapping Failure Occurred")) if remap else None,
        ),
        fabric_state=node.get("Fabric", "State"),
        fabric_status=node.get("Fabric", "Status"),
        recovery_action=node.get("GPU Recovery Action"),
        clocks_event_reasons_active=tuple(active),
        temperature_c=int_value(node.get("Temperature", "GPU Current Temp") or ""),
        virtualization_mode=node.get("GPU Virtualization Mode", "Virtualization Mode"),
    )


def parse_smi_q(text: str) -> SmiQ:
    out = split_exit(text)
    if not out.ok:
        return SmiQ(None, None, None, ())
    root = parse_tree(out.body)
    gpus = tuple(_gpu(c) for c in root.children if c.key == "GPU")
    attached = int_value(root.get("Attached GPUs") or "")
    if attached is not None and attached != len(gpus):
        raise ParseError("nvidia-smi-q.txt", f"{attached} GPUs attached but {len(gpus)} sections")
    return SmiQ(root.get("Driver Version"), root.get("CUDA Version"), attached, tuple(gpus))
