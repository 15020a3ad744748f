"""nvidia-smi's short outputs: the default table, -L, --version, --query-gpu."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from string import Template

from gpusim.model import DATA_DIR
from gpusim.view import GpuView


@dataclass(frozen=True)
class Driver:
    """The driver as nvidia-smi reports it (the loaded module's version)."""

    version: str  # "580.159.04"
    cuda: str  # "13.0"

    @property
    def nvml(self) -> str:
        return ".".join(self.version.split(".")[:2])


def timestamp(now: float | None = None) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))


def mig_device_uuid(g: GpuView, gpu_instance: int, compute_instance: int) -> str:
    import hashlib  # here: only this output hashes

    h = hashlib.sha256(f"{g.state.uuid}/{gpu_instance}/{compute_instance}".encode()).hexdigest()
    return f"MIG-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def list_gpus(gpus: Sequence[GpuView]) -> str:
    """`-L`: one line per GPU, then one per MIG device (compute instance) under it."""
    out = ""
    for g in gpus:
        out += f"GPU {g.index}: {g.model.name} (UUID: {g.state.uuid})\n"
        if not g.state.mig_current:
            continue
        names = {p.id: p.name for p in g.model.mig_profiles}
        profile_of = {gi.id: gi.profile_id for gi in g.state.gpu_instances}
        cis = sorted(g.state.compute_instances, key=lambda c: (c.gpu_instance, c.id))
        for n, ci in enumerate(cis):
            name = f"MIG {names[profile_of[ci.gpu_instance]]}"
            uuid = mig_device_uuid(g, ci.gpu_instance, ci.id)
            out += f"  {name:<16}Device {n:>2}: (UUID: {uuid})\n"
    return out


def version(driver: Driver) -> str:
    return (
        f"NVIDIA-SMI version  : {driver.version}\n"
        f"NVML version        : {driver.nvml}\n"
        f"DRIVER version      : {driver.version}\n"
        f"CUDA Version        : {driver.cuda}\n"
    )


_RULE = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"


def table(gpus: Sequence[GpuView], driver: Driver, now: float | None = None) -> str:
    head = f"NVIDIA-SMI {driver.version}"
    mid = f"Driver Version: {driver.version}"
    tail = f"CUDA Version: {driver.cuda}"
    version_line = f"| {head:<34}{mid:<31}{tail:<23}|"
    frame = Template((DATA_DIR / "table-head.txt.tmpl").read_text())
    lines = [f"{timestamp(now)}       ", frame.substitute(version_line=version_line).rstrip("\n")]
    for g in gpus:
        persistence = "On" if g.state.persistence else "Off"
        ecc = "1" if g.row_remap_pending else "0"
        power = f"{g.model.idle_power_w}W /  {g.model.power_limit_w}W"
        memory = f"0MiB / {g.model.memory_mib}MiB"
        name = g.model.name[:25]
        lines += [
            f"|{g.index:>4}  {name:<29}{persistence:>4}  |   {g.nvml_bus_id} Off | {ecc:>20} |",
            f"| N/A  {g.model.temperature_c:>3}C    P0{power:>24} | {memory:>22} |"
            f"      0%      Default |",
            f"|{'':41}|{'':24}| {g.mig_current.strip('[]'):>20} |",
            _RULE,
        ]
    lines += ["", (DATA_DIR / "table-processes.txt").read_text().rstrip("\n")]
    return "\n".join(lines) + "\n"


def free_mib(g: GpuView) -> int:
    """FB free as nvidia-smi rounds it: the real H200 shows 143771 total, 616 reserved,
    0 used and 143156 free (one MiB more than the difference)."""
    return g.model.memory_mib - g.model.reserved_mib + 1


def _mib(value: int) -> str:
    return f"{value} MiB"


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


# field -> (unit for the header, value). A unit's suffix is stripped by "nounits".
QUERY_FIELDS: dict[str, tuple[str, Callable[[GpuView, Driver], str]]] = {
    "index": ("", lambda g, d: str(g.index)),
    "count": ("", lambda g, d: ""),  # filled in by query() with the GPU count
    "name": ("", lambda g, d: g.model.name),
    "pci.bus_id": ("", lambda g, d: g.nvml_bus_id),
    "pci.domain": ("", lambda g, d: f"0x{int(g.state.bus_id.split(':')[0], 16):04X}"),
    "pci.bus": ("", lambda g, d: f"0x{g.state.bus_id.split(':')[1].upper()}"),
    "pci.device_id": ("", lambda g, d: f"0x{g.model.device_id:04X}10DE"),
    "pci.sub_device_id": ("", lambda g, d: f"0x{g.model.subsystem_device_id:04X}10DE"),
    "uuid": ("", lambda g, d: g.state.uuid),
    "serial": ("", lambda g, d: g.state.serial),
    "driver_version": ("", lambda g, d: d.version),
    "vbios_version": ("", lambda g, d: g.model.vbios),
    "memory.total": ("MiB", lambda g, d: _mib(g.model.memory_mib)),
    "memory.reserved": ("MiB", lambda g, d: _mib(g.model.reserved_mib)),
    "memory.used": ("MiB", lambda g, d: _mib(0)),
    "memory.free": ("MiB", lambda g, d: _mib(free_mib(g))),
    "mig.mode.current": ("", lambda g, d: g.mig_current),
    "mig.mode.pending": ("", lambda g, d: g.mig_pending),
    "persistence_mode": ("", lambda g, d: _enabled(g.state.persistence)),
    "ecc.mode.current": ("", lambda g, d: _enabled(g.model.ecc)),
    "ecc.mode.pending": ("", lambda g, d: _enabled(g.model.ecc)),
    "ecc.errors.uncorrected.volatile.total": (
        "",
        lambda g, d: "1" if g.row_remap_pending else "0",
    ),
    "ecc.errors.uncorrected.aggregate.total": (
        "",
        lambda g, d: "1" if g.row_remap_pending else "0",
    ),
    "compute_cap": ("", lambda g, d: g.model.compute_cap),
    "power.limit": ("W", lambda g, d: f"{g.model.power_limit_w:.2f} W"),
    "power.draw": ("W", lambda g, d: f"{g.model.idle_power_w:.2f} W"),
    "clocks.max.sm": ("MHz", lambda g, d: f"{g.model.sm_clock_max_mhz} MHz"),
    "clocks.current.sm": ("MHz", lambda g, d: f"{g.model.sm_clock_idle_mhz} MHz"),
    "clocks.max.memory": ("MHz", lambda g, d: f"{g.model.memory_clock_mhz} MHz"),
    "pcie.link.gen.current": ("", lambda g, d: str(g.pcie_gen)),
    "pcie.link.gen.gpucurrent": ("", lambda g, d: str(g.pcie_gen)),
    "pcie.link.width.current": ("", lambda g, d: str(g.pcie_width)),
    "pcie.link.gen.max": ("", lambda g, d: str(g.model.pcie_gen)),
    "pcie.link.gen.gpumax": ("", lambda g, d: str(g.model.pcie_gen)),
    "pcie.link.width.max": ("", lambda g, d: str(g.model.pcie_width)),
    "retired_pages.pending": ("", lambda g, d: "[N/A]"),
    "remapped_rows.pending": ("", lambda g, d: _yes_no(g.row_remap_pending)),
    "remapped_rows.failure": ("", lambda g, d: "No"),
    "clocks_event_reasons.active": ("", lambda g, d: "0x0000000000000001"),
    "temperature.gpu": ("", lambda g, d: str(g.model.temperature_c)),
    "utilization.gpu": ("%", lambda g, d: "0 %"),
    "compute_mode": ("", lambda g, d: "Default"),
    "pstate": ("", lambda g, d: "P0"),
}
ALIASES = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "persistence-mode": "persistence_mode",
}


class QueryError(ValueError):
    """A field nvidia-smi does not know."""


def query(
    fields: Sequence[str], gpus: Sequence[GpuView], driver: Driver, *, header: bool, units: bool
) -> str:
    resolved = []
    for field in fields:
        key = ALIASES.get(field, field)
        if key not in QUERY_FIELDS:
            raise QueryError(f'Field "{field}" is not a valid field to query.')
        resolved.append((field, key))
    lines = []
    if header:
        cols = []
        for field, key in resolved:
            unit = QUERY_FIELDS[key][0]
            cols.append(f"{field} [{unit}]" if unit else field)
        lines.append(", ".join(cols))
    for g in gpus:
        values = []
        for _field, key in resolved:
            unit, getter = QUERY_FIELDS[key]
            value = str(len(gpus)) if key == "count" else getter(g, driver)
            if unit and not units and value.endswith(f" {unit}"):
                value = value[: -len(unit) - 1]
            values.append(value)
        lines.append(", ".join(values))
    return "".join(line + "\n" for line in lines)
