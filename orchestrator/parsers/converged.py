"""The probe's convergence records: ``converged-<role>.json`` (the record a role wrote with
the module gpuprov.nvidia.converged_record, plugins/modules/converged_record.py) and
``converged-<role>-live.txt`` (the same items' state now, printed by probe.sh's
converged_state). Lines are ``KIND NAME VALUE...``; an item is
``(KIND, NAME)``. orchestrator/converged.py decides from these."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import names
from ._text import split_exit

PREFIX = names.CONVERGED_PREFIX
RECORD_SUFFIX = ".json"
LIVE_SUFFIX = "-live.txt"
KINDS = ("file", "pkg", "unit", "module")


@dataclass(frozen=True)
class RoleRecord:
    role: str
    input_digest: str = ""
    state: Mapping[tuple[str, str], str] = field(default_factory=dict)  # item -> recorded line
    live: Mapping[tuple[str, str], str] = field(default_factory=dict)  # item -> line now
    problem: str | None = None  # why the record cannot be used (unreadable, wrong schema)


def item_key(line: str) -> tuple[str, str] | None:
    """("file", "/etc/docker/daemon.json") of a state line; None for anything else."""
    parts = line.split(" ", 2)
    if len(parts) < 3 or parts[0] not in KINDS:
        return None
    return parts[0], parts[1]


def state_lines(lines: list[str] | tuple[str, ...]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for line in lines:
        key = item_key(line.strip())
        if key is not None:
            out[key] = line.strip()
    return out


def parse_record(role: str, text: str, live: str | None) -> RoleRecord:
    out = split_exit(text)
    try:
        data = json.loads(out.body)
    except ValueError as e:
        return RoleRecord(role, problem=f"the record is not JSON ({e})")
    if not isinstance(data, dict) or data.get("schema") != 1 or data.get("role") != role:
        return RoleRecord(role, problem="the record is not a gpuprov convergence record (schema 1)")
    state = data.get("state")
    if not isinstance(state, list) or not all(isinstance(s, str) for s in state):
        return RoleRecord(role, problem="the record's state is not a list of lines")
    recorded = state_lines(state)
    if len(recorded) != len(state):
        return RoleRecord(role, problem="the record has state lines the probe cannot check")
    if live is None:
        return RoleRecord(role, problem="the probe printed no live state for the record")
    live_out = split_exit(live)
    if not live_out.ok:
        return RoleRecord(role, problem=f"the live state probe failed (exit {live_out.exit_code})")
    digest = data.get("input_digest")
    return RoleRecord(
        role,
        input_digest=digest if isinstance(digest, str) else "",
        state=recorded,
        live=state_lines(live_out.body.splitlines()),
    )


def parse_records(raw: Mapping[str, str]) -> dict[str, RoleRecord]:
    """Every role's record among a host's raw outputs (file name -> text)."""
    out: dict[str, RoleRecord] = {}
    for name, text in raw.items():
        if name.startswith(PREFIX) and name.endswith(RECORD_SUFFIX):
            role = name[len(PREFIX) : -len(RECORD_SUFFIX)]
            out[role] = parse_record(role, text, raw.get(f"{PREFIX}{role}{LIVE_SUFFIX}"))
    return out
