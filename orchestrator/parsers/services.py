"""systemctl-is-active.txt (`UNIT ACTIVE ENABLED` per line) -> ServiceState per unit.

The probe writes it from one `systemctl show` call; without systemd (a container whose PID 1
is not systemd) it holds systemctl's message and a non-zero exit, which yields no units.
"""

from __future__ import annotations

from ..facts import ServiceState
from ._text import split_exit


def parse_services(text: str) -> dict[str, ServiceState]:
    out = split_exit(text)
    if not out.ok:
        return {}
    states: dict[str, ServiceState] = {}
    for line in out.body.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith((".service", ".path", ".socket")):
            unit = parts[0].removesuffix(".service")
            states[unit] = ServiceState(active=parts[1], enabled=parts[2])
    return states
