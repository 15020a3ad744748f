"""`nvidia-smi -q` (text, optionally `-d SECTIONS`) and `-q -x` (XML).

The per-GPU layout is the real H200 host's output (data/q-gpu.*.tmpl, made from the
fixture) with the values that depend on the model, the state and the faults filled in.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from string import Template

from gpusim.model import DATA_DIR
from gpusim.smi_basic import Driver, free_mib, timestamp
from gpusim.view import GpuView

# `-d` names -> top-level per-GPU sections of the text output that they keep.
DISPLAY_SECTIONS: dict[str, tuple[str, ...]] = {
    "MEMORY": ("FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"),
    "UTILIZATION": ("Utilization",),
    "ECC": ("ECC Mode", "ECC Errors"),
    "TEMPERATURE": ("Temperature",),
    "POWER": ("GPU Power Readings", "GPU Memory Power Readings ", "Module Power Readings"),
    "CLOCK": ("Clocks", "Applications Clocks", "Default Applications Clocks", "Max Clocks"),
    "COMPUTE": ("Compute Mode",),
    "PIDS": ("Processes",),
    "PERFORMANCE": ("Performance State", "Clocks Event Reasons"),
    "PAGE_RETIREMENT": ("Retired Pages",),
    "ROW_REMAPPER": ("Remapped Rows",),
    "ACCOUNTING": ("Accounting Mode", "Accounting Mode Buffer Size"),
    "ENCODER_STATS": ("Encoder Stats",),
    "FBC_STATS": ("FBC Stats",),
    "FABRIC": ("Fabric",),
}


class DisplayError(ValueError):
    """An unknown `-d` section name."""


def _template(name: str) -> Template:
    return Template((DATA_DIR / name).read_text())


def values(g: GpuView, driver: Driver, fabric: tuple[str, str]) -> dict[str, str]:
    m = g.model
    domain, bus, devfn = g.state.bus_id.split(":")
    device = devfn.split(".")[0]
    free = free_mib(g)
    return {
        "bus_id": g.nvml_bus_id,
        "name": m.name,
        "architecture": m.architecture,
        "persistence": "Enabled" if g.state.persistence else "Disabled",
        "mig_current": g.mig_current.strip("[]"),
        "mig_pending": g.mig_pending.strip("[]"),
        "serial": g.state.serial,
        "uuid": g.state.uuid,
        "pdi": g.state.pdi,
        "minor": str(g.index),
        "vbios": m.vbios,
        "board_id": f"0x{int(bus, 16) * 256 + int(device, 16):x}",
        "board_part_number": m.board_part_number,
        "gpu_part_number": m.gpu_part_number,
        "module_id": str(g.state.module_id),
        "inforom_image": m.inforom_image,
        "driver_version": driver.version,
        "pci_bus": f"0x{bus.upper()}",
        "pci_device": f"0x{device.upper()}",
        "pci_domain": f"0x{domain.upper()}",
        "pci_device_id": f"0x{m.device_id:04X}10DE",
        "pci_sub_system_id": f"0x{m.subsystem_device_id:04X}10DE",
        "pci_bus_hex": bus.upper(),
        "pci_device_hex": device.upper(),
        "pci_domain_hex": domain.upper(),
        "pci_device_id_hex": f"{m.device_id:04X}10DE",
        "pci_sub_system_id_hex": f"{m.subsystem_device_id:04X}10DE",
        "pcie_gen": str(g.pcie_gen),
        "pcie_gen_max": str(m.pcie_gen),
        "pcie_width_x": f"{g.pcie_width}x",
        "pcie_width_max_x": f"{m.pcie_width}x",
        "memory_total": f"{m.memory_mib} MiB",
        "memory_reserved": f"{m.reserved_mib} MiB",
        "memory_free": f"{free} MiB",
        "bar1_total": f"{m.bar1_mib} MiB",
        "bar1_free": f"{m.bar1_mib - 1} MiB",
        "ecc_mode": "Enabled" if m.ecc else "Disabled",
        "dram_uncorrectable": "1" if g.row_remap_pending else "0",
        "remapped_unc": "1" if g.row_remap_pending else "0",
        "remap_pending": "Yes" if g.row_remap_pending else "No",
        "temperature": f"{m.temperature_c} C",
        "power_draw": f"{m.idle_power_w:.2f} W",
        "power_limit": f"{m.power_limit_w:.2f} W",
        "power_min": f"{m.power_min_w:.2f} W",
        "sm_clock": f"{m.sm_clock_idle_mhz} MHz",
        "sm_clock_max": f"{m.sm_clock_max_mhz} MHz",
        "mem_clock": f"{m.memory_clock_mhz} MHz",
        "video_clock": f"{m.video_clock_mhz} MHz",
        "video_clock_max": f"{m.video_clock_max_mhz} MHz",
        "fabric_state": fabric[0],
        "fabric_status": fabric[1],
        "supported_clocks": _supported_clocks(g),
    }


def _supported_clocks(g: GpuView) -> str:
    m = g.model
    clocks = range(m.sm_clock_max_mhz, m.sm_clock_idle_mhz - 1, -15)
    lines = [
        "\t\t<supported_clocks>",
        "\t\t\t<supported_mem_clock>",
        f"\t\t\t\t<value>{m.memory_clock_mhz} MHz</value>",
        *(f"\t\t\t\t<supported_graphics_clock>{c} MHz</supported_graphics_clock>" for c in clocks),
        "\t\t\t</supported_mem_clock>",
        "\t\t</supported_clocks>",
    ]
    return "\n".join(lines)


def _filter(block: str, sections: Sequence[str]) -> str:
    """Keep the GPU line and the top-level sections `-d` asked for (with their children)."""
    keep = {name.rstrip() for d in sections for name in DISPLAY_SECTIONS[d]}
    out: list[str] = []
    keeping = False
    for line in block.splitlines():
        if line.startswith("GPU "):
            out.append(line)
            continue
        if line.startswith("    ") and not line.startswith("     "):
            keeping = line[4:].split(" : ")[0].rstrip() in keep
        if keeping:
            out.append(line)
    return "\n".join(out) + "\n"


def _header(gpus: Sequence[GpuView], driver: Driver, now: float | None) -> str:
    def row(key: str, value: str) -> str:
        return f"{key:<55}: {value}\n"

    return (
        "\n==============NVSMI LOG==============\n\n"
        + row("Timestamp", timestamp(now))
        + row("Driver Version", driver.version)
        + row("CUDA Version", driver.cuda)
        + "\n"
        + row("Attached GPUs", str(len(gpus)))
    )


def text(
    gpus: Sequence[GpuView],
    driver: Driver,
    fabric: tuple[str, str],
    display: Sequence[str] = (),
    now: float | None = None,
) -> str:
    for d in display:
        if d not in DISPLAY_SECTIONS:
            raise DisplayError(f"Invalid combination of input arguments. -d {d} is not valid.")
    template = _template("q-gpu.txt.tmpl")
    out = _header(gpus, driver, now)
    for g in gpus:
        block = template.substitute(values(g, driver, fabric))
        out += (_filter(block, display) if display else block) + "\n"
    return out


def xml(
    gpus: Sequence[GpuView], driver: Driver, fabric: tuple[str, str], now: float | None = None
) -> str:
    template = _template("q-gpu.xml.tmpl")
    out = (
        '<?xml version="1.0" ?>\n'
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n'
        "<nvidia_smi_log>\n"
        f"\t<timestamp>{timestamp(now)}</timestamp>\n"
        f"\t<driver_version>{driver.version}</driver_version>\n"
        f"\t<cuda_version>{driver.cuda}</cuda_version>\n"
        f"\t<attached_gpus>{len(gpus)}</attached_gpus>\n"
    )
    for g in gpus:
        out += template.substitute(values(g, driver, fabric)) + "\t</gpu>\n\n"
    return out + "</nvidia_smi_log>\n"


def template_path(name: str) -> Path:
    return DATA_DIR / name
