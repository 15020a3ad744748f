"""gpuprov.nvidia.verify: verify hosts with the suite `provision verify` runs.

Three ways, one suite (orchestrator/verify/suite, pytest-testinfra, through testinfra's own
Ansible backend and the inventory the play runs with: ANSIBLE_INVENTORY), its JUnit read by
the parse_junit `provision verify` uses:

- `plan_only`: this host probed and planned as `provision` does
  (plugins/plugin_utils/planned_here.py); returns its plan-document entry (`plan`). A host the
  planner blocks fails here, not verified.
- `plans` ({host: plan-document entry}, from the `plan_only` step of each host; the task runs
  once, `run_once`): the suite for all of those hosts at once, in a few pytest processes on the
  controller (orchestrator.verify.runner.processes_for: the hosts dealt as `provision verify`
  deals them), against one plan.json; returns each host's result under `hosts`. One run for
  the play's batch instead of a pytest per host (issue 49: 100 hosts took 638.7 s that way,
  one Python, pytest, testinfra and `ansible-inventory --list` per host). This task fails
  only when the suite could not run at all; a host's failed checks are in its entry (the
  playbook's next task fails that host only).
- neither: this host alone, planned and verified in one task (ad hoc:
  `ansible HOST -m gpuprov.nvidia.verify`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.errors import GpuprovError
from ...orchestrator.verify.runner import SUITE, run_ansible_suites
from ..plugin_utils.planned_here import ProbeFailed, checks_result, planned_here

# The collection's root (ansible_collections/gpuprov/nvidia): on the suite's PYTHONPATH, so
# its test modules import `orchestrator` as the collection ships it.
COLLECTION_ROOT = SUITE.parents[2]


def _bad(result: dict[str, Any], msg: str) -> dict[str, Any]:
    return {**result, "failed": True, "msg": msg}


def _suite_env(task_vars: Mapping[str, Any]) -> dict[str, str]:
    sources = [str(s) for s in task_vars.get("ansible_inventory_sources") or ()]
    return {
        **os.environ,
        "ANSIBLE_INVENTORY": ",".join(sources),
        "PYTHONPATH": os.pathsep.join(
            [str(COLLECTION_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"timeout_s", "plan_only", "plans"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        timeout = float(args.get("timeout_s") or 1800)
        if args.get("plans") is not None:
            return self._batch(result, args["plans"], task_vars, timeout)
        started = time.monotonic()
        try:
            here = planned_here(self, task_vars, as_written=True)
        except ProbeFailed as exc:
            return {**result, **exc.result}
        except GpuprovError as exc:
            return _bad(result, str(exc))
        if here.plan.blocked:
            blocked = "; ".join(here.plan.blockers)
            return _bad(result, f"{here.host}: blocked, not verified: {blocked}")
        if args.get("plan_only"):
            result.update(changed=False, plan=here.plan.document_vars())
            return result
        plans = {here.host: here.plan.document_vars()}
        try:
            found, tail = run_ansible_suites(plans, _suite_env(task_vars), timeout, processes=1)
        except subprocess.TimeoutExpired:
            return _bad(result, f"{here.host}: the verification suite did not end in time")
        except GpuprovError as exc:
            return _bad(result, f"{here.host}: {exc}")
        checks = found.get(here.host, ())
        if not checks:
            return _bad(result, f"{here.host}: the suite reported nothing for this host: {tail}")
        result.update(changed=False, **checks_result(here.host, "verification", checks, started))
        return result

    def _batch(
        self, result: dict[str, Any], plans: Any, task_vars: Mapping[str, Any], timeout: float
    ) -> dict[str, Any]:
        """The suite for the hosts of `plans` at once. This task runs once for the batch, and a
        failed run_once task stops every host of the batch before its own next task (its
        set_stats included): so it does not fail; what went wrong is each host's entry."""
        if not isinstance(plans, Mapping) or not all(
            isinstance(v, Mapping) for v in plans.values()
        ):
            return _bad(
                result,
                "plans: a mapping of each host to its plan-document entry (the `plan` the "
                "plan_only step returns) is needed",
            )
        started = time.monotonic()
        names: Sequence[str] = [str(h) for h in plans]
        found: dict[str, Any] = {}
        why = ""
        try:
            found, tail = run_ansible_suites(
                {str(h): v for h, v in plans.items()}, _suite_env(task_vars), timeout
            )
            why = f"the suite reported nothing for this host: {tail}"
        except subprocess.TimeoutExpired:
            why = f"the verification suite did not end within {timeout:.0f} s"
        except (GpuprovError, OSError) as exc:
            why = f"the verification suite could not run: {exc}"
        hosts: dict[str, dict[str, Any]] = {}
        for name in names:
            checks = found.get(name, ())
            if checks:
                hosts[name] = checks_result(name, "verification", checks, started)
            else:
                hosts[name] = {"failed": True, "msg": f"{name}: {why}"}
        result.update(changed=False, hosts=hosts)
        return result
