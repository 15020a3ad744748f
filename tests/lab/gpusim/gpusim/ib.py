"""Simulated InfiniBand HCAs (profiles with `ib_hcas`, e.g. hgx-h100-ib): everything here is
SIMULATED, shaped from tests/recorded/reference/fabric.yaml (infiniband.checks,
test_double.ib_host), never from a role's variables.

- `ib_hcas` Mellanox PCI functions (vendor 0x15b3, device 0x1021 "MT2910 Family [ConnectX-7]",
  class 0x020700 "Infiniband controller": pciutils/pciids@c1c12547 pci.ids; the addresses are
  placeholders) and, as the kernel's own mlx5 drivers register them at boot,
  /sys/class/infiniband/mlx5_ib<n> (Azure's ND v5 names, infiniband.checks.
  nhc_check_hw_ib) with ports/1/ state "4: ACTIVE", phys_state "5: LinkUp", rate
  "<ib_rate_gbps> Gb/sec (4X NDR)", link_layer "InfiniBand" (the ibstatus shapes of the
  reference), plus placeholder gids/0, lid and sm_lid so that the distribution's real ibstatus
  reads them; /dev/infiniband/uverbs<n> as regular files.
- `ib_bare` (a bare host, issue 47): the PCI functions are there (mlx5_core bound) but the
  RDMA devices and uverbs nodes only while mlx5_ib is loaded: `modprobe mlx5_ib` (simulated
  here, as gpusim/nvlink5.py's modules), or at boot when /etc/modules-load.d lists it (the
  infiniband role writes that file); a real host whose kernel did not autoload mlx5_ib.
- Faults (`gpusim ib missing|rate|down on|off --device N`), as gpusim/efa.py's.
"""

from __future__ import annotations

import shutil

from gpusim import nvlink5
from gpusim.efa import UVERBS
from gpusim.rdma import render_functions, toggle
from gpusim.rdma import write as _write
from gpusim.runtime import Host

VENDOR = 0x15B3
DEVICE = 0x1021  # pci.ids: 15b3 1021 "MT2910 Family [ConnectX-7]"
CLASS = 0x020700  # pci.ids: class 02 "Network controller", subclass 07 "Infiniband controller"
MODULE = "mlx5_ib"  # mlx5's RDMA module (linux-rdma/rdma-core kernel-boot/rdma-hw-modules.rules)
INFINIBAND = "/sys/class/infiniband"
MANIFEST = ".gpusim-ib"
FAULTS = ("missing", "rate", "down")
PREFIX = "mlx5_ib"


def enabled(host: Host) -> bool:
    return host.profile.ib_hcas > 0


def bare(host: Host) -> bool:
    return enabled(host) and host.profile.ib_bare


def boot(host: Host) -> None:
    """A bare host: mlx5_core for the functions; mlx5_ib only when modules-load.d lists it."""
    if not bare(host):
        return
    nvlink5.load(host, "mlx5_core")
    if nvlink5.listed_for_boot(host.paths, MODULE):
        nvlink5.load(host, MODULE)


def registered(host: Host) -> bool:
    """Are the HCAs' RDMA devices registered (always, unless bare and mlx5_ib not loaded)?"""
    return not bare(host) or MODULE in host.state.loaded_modules


def address(position: int) -> str:
    return f"0000:{0x30 + position:02x}:00.0"


def faulted(host: Host, name: str, position: int) -> bool:
    return position in host.state.ib_faults.get(name, [])


def present(host: Host) -> list[int]:
    return [n for n in range(host.profile.ib_hcas) if not faulted(host, "missing", n)]


def _render_pci(host: Host) -> None:
    # the kernel's own mlx5 drivers bind the functions at boot: always linked
    render_functions(
        host.paths.pci_devices,
        MANIFEST,
        [(address(n), n) for n in present(host)],
        vendor=VENDOR,
        device=DEVICE,
        klass=CLASS,
        count=host.profile.ib_hcas,
        driver="mlx5_core",
    )


def _render_class(host: Host) -> None:
    root = host.paths.at(INFINIBAND)
    if not root.is_dir():
        return
    wanted = {f"{PREFIX}{n}": n for n in present(host)} if registered(host) else {}
    for entry in root.iterdir():
        if entry.name.startswith(PREFIX) and entry.name not in wanted:
            shutil.rmtree(entry)
    rate = host.profile.ib_rate_gbps
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
        speed = f"{rate // 2} Gb/sec (4X HDR)" if slow else f"{rate} Gb/sec (4X NDR)"
        _write(port / "rate", speed + "\n")
        _write(port / "link_layer", "InfiniBand\n")
        _write(port / "lid", f"0x{n + 1:x}\n")
        _write(port / "sm_lid", "0x1\n")
        _write(port / "gids" / "0", f"fe80:0000:0000:0000:0000:0000:0000:{n + 1:04x}\n")


def _render_uverbs(host: Host) -> None:
    root = host.paths.at(UVERBS)
    root.mkdir(parents=True, exist_ok=True)
    offset = host.profile.efa_devices
    wanted = {f"uverbs{offset + n}" for n in present(host)} if registered(host) else set()
    known = {f"uverbs{offset + n}" for n in range(host.profile.ib_hcas)}
    for name in known - wanted:
        (root / name).unlink(missing_ok=True)
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
        raise ValueError(f"unknown InfiniBand fault {name!r}; known: {', '.join(FAULTS)}")
    if not 0 <= position < host.profile.ib_hcas:
        last = host.profile.ib_hcas - 1
        raise ValueError(f"--device {position}: the profile has {PREFIX}0..{PREFIX}{last}")
    toggle(host.state.ib_faults, name, on, position)
    return f"ib fault {name} {'on' if on else 'off'} ({PREFIX}{position}, {address(position)})"
