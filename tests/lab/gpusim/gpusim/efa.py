"""Simulated AWS EFA devices (profiles with `efa_devices`, e.g. p5.48xlarge-efa): everything
here is SIMULATED, shaped from tests/recorded/reference/fabric.yaml (efa.host_checks,
test_double.efa_host), never from the efa role's variables.

- The PCI bus: `efa_devices` functions of vendor 0x1d0f (host_checks.pci_ids) and the
  profile's `efa_device_id` (which id an instance exposes is a gap in the reference: the
  profile picks one). Their PCI addresses and class code are placeholders.
- The kernel module `efa`: `modprobe efa` loads it (simulated, like the NVIDIA modules) only
  when a built module file exists for the simulated kernel, i.e. after DKMS built the EFA
  installer's module; at boot it loads by itself (udev would, for the functions).
- While it is loaded: /sys/class/infiniband/efa_<n> (the driver's naming, host_checks.sysfs)
  with `device` linking to its PCI function and ports/1/{state,phys_state,rate}
  ("4: ACTIVE", "5: LinkUp", "<rate> Gb/sec": the shapes fabric.yaml gives for ibstatus),
  and /dev/infiniband/uverbs<n> (regular files: no device node is made).
- Faults (`gpusim efa missing|rate|down on|off --device N`): a device leaves the PCI bus; its
  port trains at a quarter of the profile's rate; its port is DOWN.

fi_info is not simulated here: the EFA installer's test double (tests/lab/efa) installs a
stand-in that lists the efa devices this module presents.
"""

from __future__ import annotations

import shutil

from gpusim.rdma import render_functions, toggle
from gpusim.rdma import write as _write
from gpusim.runtime import Host

MODULE = "efa"
SIZE = 143360  # shapes the /proc/modules line only (not measured)
ADDRESS = 0xFFFFFFFFC1200000
VENDOR = 0x1D0F
CLASS = 0x020000  # placeholder: the reference gives no class code for EFA functions
INFINIBAND = "/sys/class/infiniband"
UVERBS = "/dev/infiniband"
MANIFEST = ".gpusim-efa"  # the PCI functions this module wrote (sysfs.py keeps its own)
FAULTS = ("missing", "rate", "down")


def enabled(host: Host) -> bool:
    return host.profile.efa_devices > 0


def canonical(name: str) -> str | None:
    return MODULE if name.removesuffix(".ko") == MODULE else None


def address(position: int) -> str:
    """A placeholder PCI address per device, clear of the profiles' GPUs and NVSwitches."""
    return f"0000:{0x10 + position:02x}:00.0"


def module_installed(host: Host) -> bool:
    """A built efa module for the simulated kernel (DKMS installs it under /lib/modules)."""
    from gpusim import driver as drv

    root = host.paths.at(f"/lib/modules/{drv.kernel_release(host.paths)}")
    return root.is_dir() and any(root.rglob("efa.ko*"))


def loaded(host: Host) -> bool:
    return MODULE in host.state.loaded_modules


def load(host: Host) -> None:
    if not loaded(host):
        host.state.loaded_modules.append(MODULE)


def unload(host: Host) -> None:
    if loaded(host):
        host.state.loaded_modules.remove(MODULE)


def boot(host: Host) -> None:
    if enabled(host) and module_installed(host):
        load(host)


def module_lines(host: Host) -> list[str]:
    return [f"{MODULE} {SIZE} 0 - Live 0x{ADDRESS:016x}"] if loaded(host) else []


def faulted(host: Host, name: str, position: int) -> bool:
    return position in host.state.efa_faults.get(name, [])


def present(host: Host) -> list[int]:
    return [n for n in range(host.profile.efa_devices) if not faulted(host, "missing", n)]


def _render_pci(host: Host) -> None:
    render_functions(
        host.paths.pci_devices,
        MANIFEST,
        [(address(n), n) for n in present(host)],
        vendor=VENDOR,
        device=host.profile.efa_device_id,
        klass=CLASS,
        count=host.profile.efa_devices,
        driver=MODULE if loaded(host) else None,
    )


def _render_class(host: Host) -> None:
    root = host.paths.at(INFINIBAND)
    if not root.is_dir():
        return
    wanted = {f"efa_{n}": n for n in present(host)} if loaded(host) else {}
    for entry in root.iterdir():
        if entry.name.startswith("efa_") and entry.name not in wanted:
            shutil.rmtree(entry) if not entry.is_symlink() else entry.unlink()
    rate = host.profile.efa_rate_gbps
    for name, n in wanted.items():
        d = root / name
        d.mkdir(exist_ok=True)
        link = d / "device"
        if not link.is_symlink():
            link.symlink_to(host.paths.pci_devices / address(n))
        down = faulted(host, "down", n)
        slow = faulted(host, "rate", n)
        port = d / "ports" / "1"
        _write(port / "state", "1: DOWN\n" if down else "4: ACTIVE\n")
        _write(port / "phys_state", "3: Disabled\n" if down else "5: LinkUp\n")
        _write(port / "rate", f"{rate // 4 if slow else rate} Gb/sec\n")


def _render_uverbs(host: Host) -> None:
    root = host.paths.at(UVERBS)
    wanted = {f"uverbs{n}" for n in present(host)} if loaded(host) else set()
    if not wanted and not root.is_dir():
        return
    root.mkdir(parents=True, exist_ok=True)
    for n in range(host.profile.efa_devices):  # its own nodes only (gpusim/ib.py numbers after)
        if f"uverbs{n}" not in wanted:
            (root / f"uverbs{n}").unlink(missing_ok=True)
    for name in wanted:
        _write(root / name, "gpusim: simulated uverbs node (not a device)\n")


def render(host: Host) -> None:
    if not enabled(host):
        return
    _render_pci(host)
    _render_class(host)
    _render_uverbs(host)


def set_fault(host: Host, name: str, on: bool, position: int) -> str:
    if name not in FAULTS:
        raise ValueError(f"unknown EFA fault {name!r}; known: {', '.join(FAULTS)}")
    if not 0 <= position < host.profile.efa_devices:
        raise ValueError(
            f"--device {position}: the profile has efa_0..efa_{host.profile.efa_devices - 1}"
        )
    toggle(host.state.efa_faults, name, on, position)
    return f"efa fault {name} {'on' if on else 'off'} (efa_{position}, {address(position)})"
