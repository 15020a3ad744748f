"""infiniband-vpd.txt -> the host's InfiniBand devices and whether each is an NVLink5
management port.

NVIDIA's driver container takes a host for an NVLink5 system (HGX B200/B300) when the VPD of
one of its InfiniBand devices contains "SW_MNG" (`grep -q SW_MNG
/sys/class/infiniband/*/device/vpd`, tests/recorded/reference/packages.yaml `nvlink5`). The
probe writes one line per device: `<name> SW_MNG`, `<name> -` (no SW_MNG) or
`<name> unreadable` (VPD not readable, e.g. the probe ran without root).
"""

from __future__ import annotations

from ..facts import InfinibandDevice
from . import names
from ._text import ParseError, split_exit

_MARKS = {"SW_MNG": True, "-": False, "unreadable": None}


def parse_infiniband_vpd(text: str) -> tuple[InfinibandDevice, ...]:
    devices = []
    for line in split_exit(text).body.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or fields[1] not in _MARKS:
            raise ParseError(names.INFINIBAND_VPD, f"unexpected line {line.strip()!r}")
        devices.append(InfinibandDevice(name=fields[0], sw_mng=_MARKS[fields[1]]))
    return tuple(devices)
