"""`/proc/driver/nvidia/version` -> the loaded kernel module's version and flavour."""

from __future__ import annotations

import re

from ..facts import LoadedDriver
from ._text import ParseError, split_exit

# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 ..."
_NVRM = re.compile(
    r"NVRM(?: version)?:\s*(?:loading\s+)?(?P<desc>NVIDIA .*?Kernel Module.*?)"
    r"\s+(?P<ver>\d+\.\d+(?:\.\d+)?)\s"
)


def parse_nvrm_line(line: str) -> LoadedDriver | None:
    """The NVRM line, also found in the kernel log (`NVRM: loading NVIDIA UNIX ...`)."""
    m = _NVRM.search(line + " ")
    if not m:
        return None
    flavour = "open" if "Open Kernel Module" in m.group("desc") else "proprietary"
    return LoadedDriver(version=m.group("ver"), flavour=flavour, raw=line.strip())


def parse_driver_version(text: str) -> LoadedDriver | None:
    """None when the file is empty (no module loaded); ParseError when it is unrecognised."""
    out = split_exit(text)
    if not out.ok or not out.body.strip():
        return None
    first = out.body.strip().splitlines()[0]
    driver = parse_nvrm_line(first)
    if driver is None:
        raise ParseError("proc-driver-nvidia-version.txt", f"no NVRM version in {first!r}")
    return driver
