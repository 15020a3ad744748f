"""systemctl-is-active.txt (`UNIT ACTIVE ENABLED` per line) -> ServiceState per unit."""

from __future__ import annotations

from orchestrator.facts import ServiceState
from orchestrator.parsers._text import split_exit


def parse_services(text: str) -> dict[str, ServiceState]:
    states: dict[str, ServiceState] = {}
    for line in split_exit(text).body.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            unit = parts[0].removesuffix(".service")
            states[unit] = ServiceState(
                active=parts[1], enabled=parts[2] if len(parts) > 2 else "unknown"
            )
    return states
