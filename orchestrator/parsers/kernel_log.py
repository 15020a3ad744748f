"""Kernel log lines about the driver (`dmesg`, or `journalctl -k`) -> Xid events and notes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..facts import XidEvent
from ._text import split_exit

_STAMP = re.compile(r"^\[\s*(?P<t>\d+\.\d+)\]\s*")
# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+),\s*(?P<text>.*)$")


@dataclass(frozen=True)
class KernelLog:
    lines: tuple[str, ...]
    xids: tuple[XidEvent, ...]

    @property
    def unsigned_module_rejected(self) -> bool:
        """Secure Boot refused an unsigned nvidia module (DKMS without an enrolled key)."""
        return any(
            "Key was rejected by service" in line
            or ("Lockdown" in line and "unsigned module" in line)
            for line in self.lines
        )


def parse_kernel_log(text: str) -> KernelLog:
    lines = tuple(line for line in split_exit(text).body.splitlines() if line.strip())
    xids = []
    for line in lines:
        if m := _XID.search(line):
            stamp = _STAMP.match(line)
            xids.append(
                XidEvent(
                    m["pci"].lower(),
                    int(m["code"]),
                    m["text"].strip(),
                    float(stamp["t"]) if stamp else None,
                )
            )
    return KernelLog(lines, tuple(xids))
