"""infiniband-vpd.txt and pci-vpd.txt -> which devices are NVLink5 switch management ports.

NVIDIA's driver container takes a host for an NVLink5 system (HGX B200/B300) when the VPD of
one of its InfiniBand devices contains "SW_MNG" (`grep -q SW_MNG
/sys/class/infiniband/*/device/vpd`, tests/recorded/reference/packages.yaml `nvlink5`). That
path exists only once mlx5_ib is loaded; the same VPD is the `vpd` file of the device's PCI
function, present whatever driver is bound (Linux drivers/pci/vpd.c: a sysfs binary attribute
of mode 0600, so only root reads it). The probe writes one line per device:

- infiniband-vpd.txt: `<ib device> <mark>`, e.g. `mlx5_0 SW_MNG`;
- pci-vpd.txt (Mellanox physical functions, vendor 0x15b3): `<pci address> <mark> [<ib
  device>...]`, the InfiniBand devices being those registered under that function
  (`/sys/bus/pci/devices/<address>/infiniband/`), e.g. `0000:0b:00.0 SW_MNG mlx5_0`.

A mark is `SW_MNG`, `-` (read, no SW_MNG) or `unreadable` (not readable: no root, or an I/O
error).
"""

from __future__ import annotations

import re

from ..facts import InfinibandDevice, VpdFunction
from ..parsers import names
from ..parsers._text import ParseError, split_exit

_MARKS = {"SW_MNG": True, "-": False, "unreadable": None}
_ADDRESS = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _lines(text: str) -> list[list[str]]:
    return [line.split() for line in split_exit(text).body.splitlines() if line.strip()]


def parse_infiniband_vpd(text: str) -> tuple[InfinibandDevice, ...]:
    devices = []
    for fields in _lines(text):
        if len(fields) != 2 or fields[1] not in _MARKS:
            raise ParseError(names.INFINIBAND_VPD, f"unexpected line {' '.join(fields)!r}")
        devices.append(InfinibandDevice(name=fields[0], sw_mng=_MARKS[fields[1]]))
    return tuple(devices)


def parse_pci_vpd(text: str) -> tuple[VpdFunction, ...]:
    functions = []
    for fields in _lines(text):
        if len(fields) < 2 or not _ADDRESS.fullmatch(fields[0]) or fields[1] not in _MARKS:
            raise ParseError(names.PCI_VPD, f"unexpected line {' '.join(fields)!r}")
        functions.append(
            VpdFunction(
                address=fields[0].lower(), sw_mng=_MARKS[fields[1]], infiniband=tuple(fields[2:])
            )
        )
    return tuple(functions)
