"""Fault knobs: each changes exactly what the real tools would show for that failure."""

from __future__ import annotations

from gpusim import kmod
from gpusim.runtime import Host, uptime
from gpusim.state import FAULTS

XID_TEXT = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
    63: "Row remapping event: pending.",
    64: "Row remapping failure.",
    74: "NVLink Error.",
    94: "Contained ECC error.",
    95: "Uncontained ECC error.",
}
DESCRIPTIONS = {
    "gpu-missing": "GPU leaves the PCI bus: gone from sysfs, nvidia-smi and /proc",
    "nvlink-inactive": "nvlink -s shows <inactive> links; topo -m loses NV#",
    "xid": "an NVRM Xid line in the kernel log (dmesg)",
    "row-remap-pending": "-q Remapped Rows Pending: Yes, one uncorrectable DRAM error",
    "pcie-degraded": "the GPU's PCIe link trains one generation below its maximum",
    "fabric-not-completed": "-q Fabric State: Not Started on every GPU",
    "dcgm-memory-mismatch": "dcgmi diag (test double): the GPU's memory test fails, DCGM error 58",
}


class FaultError(ValueError):
    """Unknown knob or GPU."""


def default_position(host: Host, name: str) -> int:
    return len(host.profile.gpu_bus_ids) - 1 if name == "gpu-missing" else 0


def xid_line(bus_id: str, xid: int) -> str:
    domain, bus, devfn = bus_id.split(":")
    device = devfn.split(".")[0]
    text = XID_TEXT.get(xid, "Graphics Exception")
    return (
        f"NVRM: Xid (PCI:{domain}:{bus}:{device}): {xid}, pid='<unknown>', name=<unknown>, {text}"
    )


def set_fault(host: Host, name: str, on: bool, position: int | None = None, xid: int = 79) -> str:
    if name not in FAULTS:
        raise FaultError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    count = len(host.profile.gpu_bus_ids)
    pos = default_position(host, name) if position is None else position
    if not 0 <= pos < count:
        raise FaultError(f"--gpu {pos}: the profile has GPUs 0..{count - 1}")
    state = host.state
    active = state.faults.setdefault(name, [])
    bus_id = host.profile.gpu_bus_ids[pos]
    if on and pos not in active:
        active.append(pos)
        if name == "xid":
            state.xid_codes[str(pos)] = xid
            state.log(xid_line(bus_id, xid), uptime(host.paths))
    elif not on and pos in active:
        active.remove(pos)
        if name == "xid":
            code = state.xid_codes.pop(str(pos), xid)
            line = xid_line(bus_id, code)
            state.kernel_log = [entry for entry in state.kernel_log if entry.text != line]
    if not active:
        del state.faults[name]
    kmod.render(host)
    return f"fault {name} {'on' if on else 'off'} (GPU slot {pos}, {bus_id})"
