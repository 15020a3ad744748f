"""`nvidia-smi -L` -> GPUs and MIG devices with their UUIDs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._text import split_exit

_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)")
_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>[^)]+)\)")


@dataclass(frozen=True)
class ListedMigDevice:
    index: int
    profile: str  # "1g.18gb"
    uuid: str  # "MIG-..."


@dataclass(frozen=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    mig_devices: tuple[ListedMigDevice, ...] = ()


def parse_smi_list(text: str) -> tuple[ListedGpu, ...]:
    gpus: list[ListedGpu] = []
    for line in split_exit(text).body.splitlines():
        if m := _GPU.match(line):
            gpus.append(ListedGpu(int(m["index"]), m["name"], m["uuid"]))
        elif (m := _MIG.match(line)) and gpus:
            last = gpus[-1]
            mig = ListedMigDevice(int(m["index"]), m["profile"], m["uuid"])
            gpus[-1] = ListedGpu(last.index, last.name, last.uuid, (*last.mig_devices, mig))
    return tuple(gpus)
