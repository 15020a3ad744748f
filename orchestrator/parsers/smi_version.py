"""`nvidia-smi --version` -> NvSmiInfo."""

from __future__ import annotations

from ..facts import NvSmiInfo
from ._text import ParseError, split_exit


def parse_smi_version(text: str) -> NvSmiInfo | None:
    """None when nvidia-smi failed (no driver loaded: exit 9 and a message)."""
    out = split_exit(text)
    fields: dict[str, str] = {}
    for line in out.body.splitlines():
        key, sep, val = line.partition(":")
        if sep:
            fields[key.strip().lower()] = val.strip()
    if not out.ok and "driver version" not in fields:
        return None
    if "driver version" not in fields:
        raise ParseError("nvidia-smi-version.txt", "no 'DRIVER version' line")
    return NvSmiInfo(
        smi_version=fields.get("nvidia-smi version", ""),
        nvml_version=fields.get("nvml version", ""),
        driver_version=fields["driver version"],
        cuda_version=fields.get("cuda version", ""),
    )
