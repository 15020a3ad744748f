"""Rolling batches for a fleet: how many hosts may be out of service at once (pure).

`--serial` is the batch size Ansible rolls through; `--max-unavailable` caps the hosts out of
service at any time, counting those an unfinished driver upgrade left drained (their state
file, found by detection) that this run does not take up again. As the GPU Operator's upgrade
controller does: batch = min(serial, max unavailable - already unavailable). Hosts outside
`--limit` count too: with --max-unavailable, the pipeline detects the rest of the inventory,
and a host it cannot reach counts as out of service (its state is unknown). Two runs at once
(different `--limit`s) are held to the budget on the hosts themselves: roles/driver_upgrade
claims the drain there and reads every other host's claim first (tasks/claim.yml).

An unfinished upgrade is never left in silence: `still_drained` fails, with "drained by an
unfinished upgrade to X since T", each host detection found drained that this run did not take
up (the driver_upgrade role did not run on it: --tags, a rollout stopped before it...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .errors import BadInputError
from .facts import HostFacts, UpgradeState

if TYPE_CHECKING:
    from .apply import ApplyResult


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
    unknown: Sequence[str] = (),
) -> str | None:
    """The serial to give Ansible (None: every target at once). `unknown`: hosts of the fleet
    detection could not reach; their state is unknown, so they count as out of service."""
    if max_unavailable is None:
        return serial
    away = drained_elsewhere(facts, targets)
    lost = sorted(set(unknown) - set(targets) - set(away))
    budget = count(max_unavailable, fleet_size, "--max-unavailable") - len(away) - len(lost)
    if budget <= 0:
        said = []
        if away:
            verb = "stays" if len(away) == 1 else "stay"
            said.append(f"{', '.join(away)} {verb} drained by an unfinished driver upgrade")
        if lost:
            said.append(f"{', '.join(lost)} cannot be reached (state unknown: out of service)")
        raise BadInputError(
            f"--max-unavailable {max_unavailable} is used up: {'; '.join(said)}",
            fix="finish those first (provision apply --limit HOST resumes them; bring back "
            "the unreachable), or raise --max-unavailable",
        )
    size = count(serial, len(targets), "--serial") if serial else len(targets)
    return str(min(size, budget))


def drained_message(state: UpgradeState) -> str:
    return state.drained_cause


def still_drained(result: ApplyResult, facts: Mapping[str, HostFacts]) -> ApplyResult:
    """The run's result, with each host an unfinished upgrade had drained (at detection) that
    the run did not take up failed, and said so."""
    from .interrupt import upgrade_steps

    hosts = dict(result.hosts)
    seen = upgrade_steps(result.artifact_dir) if result.artifact_dir.is_dir() else {}
    for host, stats in result.hosts.items():
        state = facts[host].upgrade if host in facts else None
        now = seen.get(host)
        if not stats.succeeded and now is not None and now.drained:
            # this run drained it, then lost it (unreachable: a reboot) or failed on it
            note = (
                f"drained mid-upgrade by this run (step {now.step}); "
                f"`provision apply --limit {host}` resumes it"
            )
            hosts[host] = replace(stats, failed_tasks=(*stats.failed_tasks, note))
            continue
        if state is None or not state.drained:
            continue
        if stats.succeeded and "driver_upgrade" in stats.roles:
            continue  # the role finished it (it always does, or fails the host)
        why = "the driver_upgrade role did not run on it"
        if not stats.touched:
            why = "the rollout stopped before this host"
        elif not stats.succeeded:
            why = "this run failed on it"
        message = f"{drained_message(state)}: {why}; `provision apply --limit {host}` finishes it"
        hosts[host] = replace(
            stats,
            failed=stats.failed + (1 if stats.succeeded else 0),
            failed_tasks=(*stats.failed_tasks, message),
        )
    return replace(result, hosts=hosts)
