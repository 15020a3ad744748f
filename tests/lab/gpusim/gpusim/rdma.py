"""What the simulated RDMA NICs (gpusim/efa.py, gpusim/ib.py) share: SIMULATED sysfs files
written only when they change, the PCI functions of a NIC kind kept in step with its
manifest, and a fault table of device positions."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def render_functions(
    devices: Path,
    manifest_name: str,
    functions: Sequence[tuple[str, int]],
    *,
    vendor: int,
    device: int,
    klass: int,
    count: int,
    driver: str | None,
) -> None:
    """PCI functions (address, position) under `devices`: the ones a previous render wrote
    (its manifest) and no longer wanted removed; each with its ids, its NUMA node (first half
    of `count` on 0) and a `driver` link to `driver`, or none while it is None."""
    devices.mkdir(parents=True, exist_ok=True)
    manifest = devices / manifest_name
    wanted = {a for a, _ in functions}
    previous = set(manifest.read_text().split()) if manifest.exists() else set()
    for gone in previous - wanted:
        shutil.rmtree(devices / gone, ignore_errors=True)
    for addr, n in functions:
        d = devices / addr
        write(d / "vendor", f"0x{vendor:04x}\n")
        write(d / "device", f"0x{device:04x}\n")
        write(d / "class", f"0x{klass:06x}\n")
        write(d / "subsystem_vendor", f"0x{vendor:04x}\n")
        write(d / "subsystem_device", "0x0000\n")
        write(d / "numa_node", f"{0 if n < count // 2 else 1}\n")
        link = d / "driver"
        if link.is_symlink() and driver is None:
            link.unlink()
        if driver is not None and not link.is_symlink():
            link.symlink_to(f"../../../bus/pci/drivers/{driver}")
    write(manifest, "".join(f"{a}\n" for a in sorted(wanted)))


def toggle(faults: dict[str, list[int]], name: str, on: bool, position: int) -> None:
    """Turn fault `name` on or off for the device at `position`; an empty entry goes."""
    active = faults.setdefault(name, [])
    if on and position not in active:
        active.append(position)
    elif not on and position in active:
        active.remove(position)
    if not active:
        del faults[name]
