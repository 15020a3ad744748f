"""gpuprov.nvidia.verify: verify this host with the suite `provision verify` runs.

The host is probed and planned as `provision` does (plugins/plugin_utils/planned_here.py); its
plan document entry is written to a temporary plan.json (orchestrator/plandoc.py), then the one
verification suite, orchestrator/verify/suite (pytest-testinfra), runs for this host alone in
a pytest process on the controller, through testinfra's own Ansible backend (the inventory
this play runs with: ANSIBLE_INVENTORY), as the suite runs when used directly
(orchestrator.verify.runner.suite_command). Its JUnit is read by the same parse_junit
`provision verify` uses. The controller needs pytest and pytest-testinfra
(meta/ee-requirements.txt). A failed check fails the task, for this host only.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.errors import GpuprovError
from ...orchestrator.plandoc import write_plan_document
from ...orchestrator.verify.runner import SUITE, parse_junit, suite_command
from ..plugin_utils.planned_here import ProbeFailed, checks_result, planned_here

# The collection's root (ansible_collections/gpuprov/nvidia): on the suite's PYTHONPATH, so
# its test modules import `orchestrator` as the collection ships it.
COLLECTION_ROOT = SUITE.parents[2]


def _bad(result: dict[str, Any], msg: str) -> dict[str, Any]:
    return {**result, "failed": True, "msg": msg}


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"timeout_s"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
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
        sources = [str(s) for s in task_vars.get("ansible_inventory_sources") or ()]
        env = {
            **os.environ,
            "ANSIBLE_INVENTORY": ",".join(sources),
            "PYTHONPATH": os.pathsep.join(
                [str(COLLECTION_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        with tempfile.TemporaryDirectory(prefix="gpuprov-verify-") as folder:
            work = Path(folder)
            plan = write_plan_document(work, {here.host: here.plan.document_vars()})
            junit = work / "junit.xml"
            command = suite_command(None, here.host, junit, plan, 1)
            try:
                done = subprocess.run(
                    command,
                    env=env,
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=float(self._task.args.get("timeout_s") or 1800),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return _bad(result, f"{here.host}: the verification suite did not end in time")
            if not junit.exists():
                tail = (done.stdout + done.stderr)[-2000:]
                return _bad(
                    result, f"{here.host}: the verification suite did not run (exit "
                    f"{done.returncode}): {tail}"
                )
            checks = parse_junit(junit.read_text("utf-8")).get(here.host, ())
        if not checks:
            tail = (done.stdout + done.stderr)[-2000:]
            return _bad(result, f"{here.host}: the suite reported nothing for this host: {tail}")
        result.update(changed=False, **checks_result(here.host, "verification", checks, started))
        return result
