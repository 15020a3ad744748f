"""The simulated PCI bus: /sys/bus/pci/devices/<addr>/ for every GPU and NVSwitch."""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from gpusim.model import Profile
from gpusim.state import State
from gpusim.view import pcie_gen_speed, present_positions

NVIDIA = 0x10DE
MANIFEST = ".gpusim-devices"


@dataclass(frozen=True)
class PciFunction:
    address: str
    device_id: int
    subsystem_device_id: int
    pci_class: int
    numa_node: int
    link_gen: int
    link_gen_max: int
    link_width: int
    link_width_max: int
    driver: str  # "" while no driver is bound


def config_space(f: PciFunction) -> bytes:
    """A 256-byte type-0 configuration header (what lspci reads from `config`)."""
    header = bytearray(256)
    struct.pack_into("<HHHHB", header, 0, NVIDIA, f.device_id, 0x0006, 0x0010, 0xA1)
    header[0x09:0x0C] = f.pci_class.to_bytes(3, "little")
    struct.pack_into("<HH", header, 0x2C, NVIDIA, f.subsystem_device_id)
    return bytes(header)


def functions(profile: Profile, state: State) -> list[PciFunction]:
    driver_gpu = "nvidia" if state.driver_loaded else ""
    result = []
    for position in present_positions(profile, state):
        gen = profile.gpu.pcie_gen
        degraded = state.fault("pcie-degraded", position)
        result.append(
            PciFunction(
                address=profile.gpu_bus_ids[position],
                device_id=profile.gpu.device_id,
                subsystem_device_id=profile.gpu.subsystem_device_id,
                pci_class=0x030200,
                numa_node=profile.gpu_numa_nodes[position],
                link_gen=gen - 1 if degraded else gen,
                link_gen_max=gen,
                link_width=profile.gpu.pcie_width,
                link_width_max=profile.gpu.pcie_width,
                driver=driver_gpu,
            )
        )
    if profile.switch is not None:
        for address in profile.switch_bus_ids:
            result.append(
                PciFunction(
                    address=address,
                    device_id=profile.switch.device_id,
                    subsystem_device_id=profile.switch.subsystem_device_id,
                    pci_class=profile.switch.pci_class,
                    numa_node=0,
                    link_gen=profile.gpu.pcie_gen,
                    link_gen_max=profile.gpu.pcie_gen,
                    link_width=2,
                    link_width_max=2,
                    driver="nvidia-nvswitch" if state.driver_loaded else "",
                )
            )
    return result


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def render(devices_dir: Path, profile: Profile, state: State) -> None:
    """Make devices_dir hold exactly the profile's present functions (idempotent)."""
    devices_dir.mkdir(parents=True, exist_ok=True)
    wanted = functions(profile, state)
    manifest = devices_dir / MANIFEST
    previous = manifest.read_text().split() if manifest.exists() else []
    for address in set(previous) - {f.address for f in wanted}:
        shutil.rmtree(devices_dir / address, ignore_errors=True)
    for f in wanted:
        d = devices_dir / f.address
        d.mkdir(exist_ok=True)
        _write(d / "vendor", f"0x{NVIDIA:04x}\n")
        _write(d / "device", f"0x{f.device_id:04x}\n")
        _write(d / "class", f"0x{f.pci_class:06x}\n")
        _write(d / "subsystem_vendor", f"0x{NVIDIA:04x}\n")
        _write(d / "subsystem_device", f"0x{f.subsystem_device_id:04x}\n")
        _write(d / "current_link_speed", pcie_gen_speed(f.link_gen) + "\n")
        _write(d / "max_link_speed", pcie_gen_speed(f.link_gen_max) + "\n")
        _write(d / "current_link_width", f"{f.link_width}\n")
        _write(d / "max_link_width", f"{f.link_width_max}\n")
        _write(d / "numa_node", f"{f.numa_node}\n")
        cls = f.pci_class
        _write(
            d / "modalias",
            f"pci:v0000{NVIDIA:04X}d0000{f.device_id:04X}sv0000{NVIDIA:04X}"
            f"sd0000{f.subsystem_device_id:04X}bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}"
            f"i{cls & 0xFF:02X}\n",
        )
        config = d / "config"
        if not config.exists() or config.read_bytes() != config_space(f):
            config.write_bytes(config_space(f))
        link = d / "driver"
        target = f"../../../bus/pci/drivers/{f.driver}"
        if link.is_symlink() and (not f.driver or str(link.readlink()) != target):
            link.unlink()
        if f.driver and not link.is_symlink():
            link.symlink_to(target)
    _write(manifest, "".join(f"{f.address}\n" for f in wanted))
