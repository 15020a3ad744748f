"""Each `/proc/driver/nvidia/gpus/*/information` -> what the loaded driver knows per GPU."""

from __future__ import annotations

from dataclasses import dataclass

from ._text import int_value, split_exit, value


@dataclass(frozen=True)
class DriverGpu:
    address: str  # "0000:00:06.0"
    model: str
    uuid: str | None
    vbios: str | None
    minor: int | None
    firmware: str | None  # GSP firmware version; None without GSP
    excluded: bool


def parse_gpus_information(text: str) -> tuple[DriverGpu, ...]:
    blocks: list[dict[str, str]] = []
    for line in split_exit(text).body.splitlines():
        if line.startswith("== "):
            blocks.append({"__path": line[3:].strip()})
        elif ":" in line and blocks:
            key, _, val = line.partition(":")
            blocks[-1][key.strip()] = val.strip()
    return tuple(
        DriverGpu(
            address=(b.get("Bus Location") or b["__path"].rsplit("/", 1)[-1]).lower(),
            model=b.get("Model", ""),
            uuid=value(b.get("GPU UUID", "")),
            vbios=value(b.get("Video BIOS", "")),
            minor=int_value(b.get("Device Minor", "")),
            firmware=value(b.get("GPU Firmware", "")),
            excluded=b.get("GPU Excluded", "No") == "Yes",
        )
        for b in blocks
    )
