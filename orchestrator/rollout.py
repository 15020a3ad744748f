"""Rolling batches for a fleet: how many hosts may be out of service at once (pure).

`--serial` is the batch size Ansible rolls through; `--max-unavailable` caps the hosts out of
service at any time, counting those an unfinished driver upgrade left drained (their state
file, found by detection) that this run does not take up again. As the GPU Operator's upgrade
controller does: batch = min(serial, max unavailable - already unavailable).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .errors import BadInputError
from .facts import HostFacts


def count(value: str, total: int, option: str) -> int:
    """`3` -> 3; `25%` -> a quarter of `total`, rounded down, at least 1."""
    text = value.strip()
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 < percent <= 100:
                raise ValueError(text)
            return max(1, math.floor(total * percent / 100))
        number = int(text)
        if number < 1:
            raise ValueError(text)
        return number
    except ValueError:
        raise BadInputError(
            f"{option} {value!r} is neither a host count (>= 1) nor a percentage (0-100%]",
            fix=f"pass {option} 2 or {option} 25%",
        ) from None


def drained_elsewhere(facts: Mapping[str, HostFacts], targets: Sequence[str]) -> list[str]:
    """Hosts an unfinished upgrade left drained, outside this run's targets."""
    return sorted(
        h
        for h, f in facts.items()
        if f.upgrade is not None and f.upgrade.drained and h not in targets
    )


def batch_size(
    serial: str | None,
    max_unavailable: str | None,
    targets: Sequence[str],
    facts: Mapping[str, HostFacts],
    fleet_size: int,
) -> str | None:
    """The serial to give Ansible (None: every target at once)."""
    if max_unavailable is None:
        return serial
    away = drained_elsewhere(facts, targets)
    budget = count(max_unavailable, fleet_size, "--max-unavailable") - len(away)
    if budget <= 0:
        raise BadInputError(
            f"--max-unavailable {max_unavailable} is used up: {', '.join(away)} "
            f"{'stays' if len(away) == 1 else 'stay'} drained by an unfinished driver upgrade",
            fix="finish those first (provision apply --limit HOST resumes them), or raise "
            "--max-unavailable",
        )
    size = count(serial, len(targets), "--serial") if serial else len(targets)
    return str(min(size, budget))
