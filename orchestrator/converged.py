"""Converged roles: skip what a host already is (issue 20, docs/reruns.md).

Each role, at the end of a successful run, records on the host (the collection's module
``gpuprov.nvidia.converged_record``: ``/var/lib/gpuprov/converged/<role>.json``) the digest
of its inputs that `provision apply` passed it (``gpuprov_role_digests``, computed here by
:func:`input_digest`) and the state it owns, one line per item (``file PATH SHA256``, ``pkg
NAME VERSION WANT``, ``unit NAME ENABLED ACTIVE``, ``module NAME VERSION``) as
``orchestrator/probe.sh``'s ``converged_state`` prints them. The detection probe prints each
record and the same lines live (orchestrator/parsers/converged.py reads both). A role is
converged on a host when the digest it recorded is the plan's and every recorded line is the
live one; `provision apply` then leaves it out for that host (``gpuprov_skip_roles``) and says
"skipped: converged, digest ...". ``--full`` runs every role anyway.

A file two roles record (Docker's daemon.json, where the toolkit registers its runtime) is
expected as the later role (in the site playbook's order) recorded it; when it differs live,
every role that records it runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from . import paths
from .parsers.converged import RoleRecord, parse_records
from .parsers.names import UPGRADE_STATE
from .roletable import default_roles

if TYPE_CHECKING:
    from .apply import ApplyResult
    from .plan import HostPlan

DIGEST_VAR = "gpuprov_role_digests"  # {role: digest}: what each role records
SKIP_VAR = "gpuprov_skip_roles"  # [role]: the converged roles site.yml leaves out
# the record's code: the collection's module gpuprov.nvidia.converged_record and its action
RECORD_CODE = tuple(
    paths.SOURCE_ROOT / "plugins" / kind / "converged_record.py" for kind in ("modules", "action")
)
SCHEMA = 1


def role_inputs(
    role: str, planned: Mapping[str, object], inventory: Mapping[str, object]
) -> dict[str, object]:
    """The variables `role` (and the roles it builds on) receive: the inventory's variables of
    their prefixes, under the plan's (the plan document entry, `planned`, wins as in
    site.yml). The role table (orchestrator/roles.yaml) says what a role builds on."""
    roles = default_roles()
    prefixes = tuple(roles[r].prefix for r in (role, *roles[role].depends_on))
    out: dict[str, object] = {}
    for source in (inventory, planned):
        out.update({k: v for k, v in source.items() if k.startswith(prefixes)})
    return out


@cache
def code_digest(role: str, roles_dir: Path = paths.ROLES_DIR) -> str:
    """sha256 over the role's own files (its documentation aside) and the record task: a new
    gpuprov runs it again."""
    h = hashlib.sha256()
    root = roles_dir / role
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".md"
    )
    record = [(f"@record/{p.parent.name}", p) for p in RECORD_CODE]
    for name, path in [*((str(p.relative_to(root)), p) for p in files), *record]:
        h.update(f"{name}\0".encode())
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


# Left out of the digest: the planner writes the exact driver version only once a driver is
# loaded (an unpinned plan keeps what is there), so the plan that installed the driver ("")
# and every plan after it ("580.159.04") would differ, and the first rerun after a converge
# would run every role again. What the version decides is judged elsewhere: a plan whose
# version or branch differs from the loaded driver changes it (`_must_run`), and the record
# holds the installed packages' versions and the loaded module's (its live state).
NOT_DIGESTED = frozenset({"nvidia_driver_version"})
# Left out of the digest when false: keys the plan always carries (issue 46:
# the plan owns them, so an inventory value never reaches the role) but carried only when
# true before. False is the role's default, the same role run as without the key, so a host
# converged before keeps its digest.
DIGESTED_WHEN_TRUE = frozenset({"nvidia_driver_nvlink5", "nvidia_driver_imex"})


def input_digest(role: str, planned: Mapping[str, object], inventory: Mapping[str, object]) -> str:
    """The digest a role records and a later plan is compared with (one definition: the role
    records what `provision apply` passed, it computes nothing itself)."""
    inputs = role_inputs(role, planned, inventory)
    body = {
        "schema": SCHEMA,
        "role": role,
        "inputs": {
            k: v
            for k, v in inputs.items()
            if k not in NOT_DIGESTED and not (k in DIGESTED_WHEN_TRUE and v is False)
        },
        "code": code_digest(role),
    }
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


@dataclass(frozen=True)
class Decision:
    """Whether one role of one host runs, and why (one line)."""

    role: str
    converged: bool
    digest: str  # the plan's input digest
    why: str

    @property
    def short(self) -> str:
        return self.digest[:12]

    def line(self) -> str:
        if self.converged:
            return f"{self.role} skipped: converged, digest {self.short}"
        return f"{self.role} runs: {self.why}"


def _expected(records: Mapping[str, RoleRecord]) -> dict[tuple[str, str], str]:
    """Each recorded item's expected line: the latest role's (site.yml's order) that records it."""
    out: dict[tuple[str, str], str] = {}
    for role in sorted(records, key=default_roles().position):
        for key, line in records[role].state.items():
            out[key] = line
    return out


def decide_host(
    roles: Iterable[str],
    digests: Mapping[str, str],
    raw: Mapping[str, str],
    *,
    must_run: Mapping[str, str] | None = None,
) -> dict[str, Decision]:
    """Each planned role's decision from the host's probe output (`raw`) and the plan's
    digests; `must_run`: roles the plan itself changes (role -> why), never skipped."""
    records = parse_records(raw)
    expected = _expected({r: rec for r, rec in records.items() if rec.problem is None})
    out: dict[str, Decision] = {}
    for role in roles:
        digest = digests[role]
        rec = records.get(role)
        why = (must_run or {}).get(role)
        if why is None:
            why = _why_not_converged(rec, digest, expected)
        out[role] = Decision(role, why is None, digest, why or "")
    return out


def _why_not_converged(
    rec: RoleRecord | None, digest: str, expected: Mapping[tuple[str, str], str]
) -> str | None:
    if rec is None:
        return "no convergence record on the host"
    if rec.problem is not None:
        return rec.problem
    if rec.input_digest != digest:
        if not rec.input_digest:
            return "the record has no input digest (written by a plain ansible-playbook run)"
        return f"inputs changed (recorded digest {rec.input_digest[:12]}, planned {digest[:12]})"
    for key, line in rec.state.items():
        live = rec.live.get(key)
        want = expected.get(key, line)
        if live != want:
            return f"drift: {want!r} is now {live or 'not reported'!r}"
    return None


def plan_digests(
    roles: Iterable[str], planned: Mapping[str, object], inventory: Mapping[str, object]
) -> dict[str, str]:
    return {r: input_digest(r, planned, inventory) for r in roles}


def with_decisions(
    planned: Mapping[str, object], digests: Mapping[str, str], decisions: Mapping[str, Decision]
) -> dict[str, object]:
    """A host's plan document entry with the digests its roles record and the roles it skips."""
    out = dict(planned)
    out[DIGEST_VAR] = dict(digests)
    out[SKIP_VAR] = [r for r, d in decisions.items() if d.converged]
    return out


def all_converged(roles: Iterable[str], decisions: Mapping[str, Decision]) -> bool:
    return all(r in decisions and decisions[r].converged for r in roles)


@dataclass(frozen=True)
class FleetSkips:
    """The converged-skip decision of one `provision apply`: who runs, with what variables."""

    host_vars: Mapping[str, Mapping[str, object]]  # every target's plan document entry
    decisions: Mapping[str, Mapping[str, Decision]]  # host -> role -> decision
    run: list[str]  # hosts with a role left to run, in the targets' order

    def lines(self, host: str) -> tuple[str, ...]:
        return tuple(d.line() for d in self.decisions.get(host, {}).values() if d.converged)

    def result(self, run_dir: Path, check: bool, ran: ApplyResult | None) -> ApplyResult:
        """The apply result of every target: the playbook's for the hosts it ran on (None:
        it ran on none), an untouched success for the converged ones, each with its skip
        lines. The plan document in `run_dir` covers every target (verification reads it)."""
        from .apply import ApplyResult, HostApplyStats
        from .plandoc import write_plan_document

        plan_file = write_plan_document(run_dir, self.host_vars)
        hosts: dict[str, HostApplyStats] = {}
        for h in self.host_vars:
            stats = ran.hosts.get(h) if ran is not None else None
            hosts[h] = replace(stats or HostApplyStats(), converged=self.lines(h))
        if ran is None:
            return ApplyResult(hosts, "skipped", 0, run_dir, check, plan_file)
        return replace(ran, hosts=hosts, plan_file=plan_file)


def fleet_skips(
    targets: Sequence[str],
    plans: Mapping[str, HostPlan],
    host_vars: Mapping[str, Mapping[str, object]],
    inventory: Mapping[str, Mapping[str, object]],
    raw: Mapping[str, Mapping[str, str]],
    *,
    full: bool = False,
    trusted: bool = True,
) -> FleetSkips:
    """Decide every target's roles (`full`: none is skipped; not `trusted`: the run records
    no input digest, so no later run skips what it converged)."""
    entries: dict[str, Mapping[str, object]] = {}
    decisions: dict[str, dict[str, Decision]] = {}
    run: list[str] = []
    for host in targets:
        plan = plans[host]
        roles = [r.name for r in plan.roles]
        planned = host_vars[host]
        digests = plan_digests(roles, planned, inventory.get(host, {})) if trusted else {}
        decided: dict[str, Decision] = {}
        if not full and trusted:
            decided = decide_host(
                roles, digests, raw.get(host, {}), must_run=_must_run(plan, raw.get(host, {}))
            )
        entries[host] = with_decisions(planned, {r: digests.get(r, "") for r in roles}, decided)
        decisions[host] = decided
        if not all_converged(roles, decided):
            run.append(host)
    return FleetSkips(entries, decisions, run)


def _must_run(plan: HostPlan, raw: Mapping[str, str]) -> dict[str, str]:
    """Roles the plan itself changes: a driver the plan replaces, an unfinished upgrade."""
    out: dict[str, str] = {}
    for role in plan.roles:
        if role.name == "nvidia_driver" and role.change:
            out[role.name] = "the plan changes the loaded driver"
    if UPGRADE_STATE in raw and any(r.name == "nvidia_driver" for r in plan.roles):
        out["nvidia_driver"] = "a driver upgrade is unfinished on the host"
    return out
