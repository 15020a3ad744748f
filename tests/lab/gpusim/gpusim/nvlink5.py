"""A simulated NVLink5 fabric (HGX B200/B300 profiles with `nvlink5_ports`): the NVSwitch
management ports as InfiniBand devices whose VPD says SW_MNG (what NVIDIA's driver container
and gpuprov's probe check), and the two kernel modules the fabric manager needs first,
mlx5_core (loaded at boot, as udev would for the ports) and ib_umad (loaded by `modprobe
ib_umad`, or at boot when /etc/modules-load.d lists it: systemd-modules-load does not run in
a container); mlx5_ib the same way as ib_umad (the driver role loads both). Everything here
is SIMULATED; the VPD bytes are ours, not a real device's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from gpusim.paths import Paths
from gpusim.runtime import Host

# Sizes only shape the simulated /proc/modules listing (not measured).
MODULES = {"mlx5_core": 2428928, "mlx5_ib": 552960, "ib_umad": 45056}
ADDRESSES = {
    "mlx5_core": 0xFFFFFFFFC1100000,
    "mlx5_ib": 0xFFFFFFFFC1080000,
    "ib_umad": 0xFFFFFFFFC1000000,
}
# What the fabric manager's NVLink5 precheck waits for (packages.yaml nvlink5.prerequisites).
PRECHECK = ("mlx5_core", "ib_umad")
INFINIBAND = "/sys/class/infiniband"
# A PCI VPD large-resource layout (identifier string, read-only section) carrying SW_MNG.
VPD = b"\x82\x1agpusim simulated NVLink5 port\x90\x0cV2\x06SW_MNG\x78\x00"


def canonical(name: str) -> str | None:
    name = name.replace("-", "_").removesuffix(".ko")
    return name if name in MODULES else None


def enabled(host: Host) -> bool:
    return bool(host.profile.nvlink5_ports)


def load(host: Host, name: str) -> None:
    if name not in host.state.loaded_modules:
        host.state.loaded_modules.append(name)


def unload(host: Host, name: str) -> None:
    if name in host.state.loaded_modules:
        host.state.loaded_modules.remove(name)


def listed_for_boot(paths: Paths, name: str) -> bool:
    """Does /etc/modules-load.d (or /usr/lib/modules-load.d) list the module?"""
    for directory in ("/etc/modules-load.d", "/usr/lib/modules-load.d"):
        d = paths.at(directory)
        for conf in sorted(d.glob("*.conf")) if d.is_dir() else []:
            words = [ln.split("#")[0].strip() for ln in conf.read_text().splitlines()]
            if name in words:
                return True
    return False


def boot(host: Host) -> None:
    """At boot: mlx5_core for the ports; mlx5_ib and ib_umad when modules-load.d asks."""
    if not enabled(host):
        return
    load(host, "mlx5_core")
    for name in ("mlx5_ib", "ib_umad"):
        if listed_for_boot(host.paths, name):
            load(host, name)


def module_lines(host: Host) -> list[str]:
    return [
        f"{name} {MODULES[name]} 0 - Live 0x{ADDRESSES[name]:016x}"
        for name in MODULES
        if name in host.state.loaded_modules
    ]


def ready(host: Host) -> bool:
    """What the fabric manager's NVLink5 precheck needs: both modules loaded."""
    return all(name in host.state.loaded_modules for name in PRECHECK)


def render(host: Host) -> None:
    """<infiniband>/<port>/device/vpd for every port of the profile, while mlx5_core is
    loaded (without the driver the class is empty, as on a real host)."""
    root = host.paths.at(INFINIBAND)
    if not root.is_dir():
        return
    wanted = set(host.profile.nvlink5_ports) if "mlx5_core" in host.state.loaded_modules else set()
    for entry in root.iterdir():  # its own ports only (gpusim/efa.py keeps efa_<n>)
        if entry.name in set(host.profile.nvlink5_ports) - wanted:
            shutil.rmtree(entry)
    for port in sorted(wanted):
        vpd = root / port / "device" / "vpd"
        vpd.parent.mkdir(parents=True, exist_ok=True)
        if not vpd.exists() or vpd.read_bytes() != VPD:
            vpd.write_bytes(VPD)


def _mounted(target: str) -> bool:
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4] == target for line in handle)


def mount_class(paths: Paths) -> None:
    """Make /sys/class/infiniband writable on a lab host (its sysfs is read-only and has no
    such class): a tmpfs over /sys/class with every real class bound back into it."""
    if _mounted(INFINIBAND):
        return
    if os.path.isdir(INFINIBAND):  # the machine has InfiniBand: hide it behind ours
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0755", "gpusim", INFINIBAND], check=True
        )
        return
    original = paths.run_dir / "sys-class"
    original.mkdir(parents=True, exist_ok=True)
    if not _mounted(str(original)):
        subprocess.run(["mount", "--bind", "/sys/class", str(original)], check=True)
    if not _mounted("/sys/class"):
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0755", "gpusim", "/sys/class"], check=True
        )
        for entry in sorted(os.listdir(original)):
            target = Path("/sys/class") / entry
            target.mkdir()
            subprocess.run(["mount", "--bind", str(original / entry), str(target)], check=True)
    Path(INFINIBAND).mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "gpusim", INFINIBAND], check=True)
