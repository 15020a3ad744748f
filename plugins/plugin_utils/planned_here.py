"""This host detected and planned on the controller, for the collection's action plugins.

The module gpuprov.nvidia.gpu_probe runs gpuprov's probe (orchestrator/probe.sh) on the host;
its output goes through the code `provision detect` and `provision plan` run: the parsers, the
policy from the host's own inventory variables (not the play's role defaults) and the planner.
plan, validate and verify start here, so each sees the host exactly as `provision` does.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.catalog import default_catalog
from ...orchestrator.facts import HostFacts
from ...orchestrator.knobs import default_table
from ...orchestrator.parsers import parse_host
from ...orchestrator.plan import HostPlan, plan_host
from ...orchestrator.policy import Policy, load_policy
from ...orchestrator.probe import probe_script, split_output
from ...orchestrator.result import STATUSES, CheckResult


@dataclass(frozen=True)
class PlannedHere:
    host: str
    raw: Mapping[str, str]  # the probe's captures, by file name
    facts: HostFacts
    own: Mapping[str, Any]  # the host's variables named like a knob
    policy: Policy
    plan: HostPlan


class ProbeFailed(Exception):
    """The probe module failed; `result` is its task result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(str(result.get("msg", "the detection probe failed")))
        self.result = result


def planned_here(
    action: ActionBase, task_vars: Mapping[str, Any], *, as_written: bool = False
) -> PlannedHere:
    """Probe the task's host and plan it; GpuprovError for bad policy, ProbeFailed when the
    probe could not run. `as_written`: the host's variables untemplated, as `provision` reads
    the inventory (a value that refers to facts is passed on as written; validate and verify
    gather no facts), else templated as the play sees them (site.yml, after its facts)."""
    host = str(task_vars["inventory_hostname"])
    probe = action._execute_module(  # noqa: SLF001  # ActionBase's way to run a module
        module_name="gpuprov.nvidia.gpu_probe",
        module_args={"script": probe_script()},
        task_vars=dict(task_vars),
    )
    if probe.get("failed") or probe.get("unreachable"):
        raise ProbeFailed(probe)
    hostvars = task_vars["hostvars"]
    own_all = hostvars.raw_get(host) if as_written else hostvars[host]
    table = default_table()
    own = {k: own_all[k] for k in own_all if table.is_guarded(str(k))}
    raw = split_output(host, str(probe.get("stdout", "")))
    facts = parse_host(host, raw)
    policy = load_policy(host, own)
    plan = plan_host(
        facts,
        policy,
        default_catalog(),
        today=dt.datetime.now(dt.UTC).date(),
        hostvars=own,
    )
    return PlannedHere(host, raw, facts, own, policy, plan)


def checks_result(
    host: str, what: str, checks: Sequence[CheckResult], started: float
) -> dict[str, Any]:
    """A host's checks as the validate and verify tasks return them: every check, a summary,
    the failed ones; a failed check fails the task, naming the first few (`what`: the stage's
    word, "validation" or "verification")."""
    bad = [c for c in checks if c.status == "fail"]
    out: dict[str, Any] = {
        "checks": [c.to_dict() for c in checks],
        "summary": " ".join(
            f"{n} {s}" for s in STATUSES if (n := sum(c.status == s for c in checks))
        ),
        "failed_checks": [c.label for c in bad],
        "statuses": {c.label: c.status for c in checks},
        "seconds": round(time.monotonic() - started, 3),
    }
    if bad:
        first = bad[0].diagnosis or bad[0].label
        out.update(
            failed=True,
            msg=f"{host}: {len(bad)} {what} check(s) failed "
            f"({', '.join(c.label for c in bad[:8])}): {first}",
        )
    return out
