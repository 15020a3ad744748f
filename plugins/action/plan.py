"""gpuprov.nvidia.plan: detect this host's GPUs and plan it with gpuprov's own planner.

Runs gpuprov.nvidia.gpu_probe (the probe of `provision detect`) on the host, then, on the
controller, the very code `provision plan` runs: orchestrator.parsers, policy (from the host's
inventory variables) and the planner, which plans each role's variables
(plugins/plugin_utils/planned_here.py). Returns the host's plan-document entry under `vars`
(what `provision apply` passes as -e @plan.json), the ordered roles with their reasons, and
the warnings; a host the planner blocks, or bad policy, fails here, before any role runs. The
planner is the collection's own orchestrator package (ansible_collections.gpuprov.nvidia.
orchestrator, beside plugins/): nothing is put on sys.path, and no gpuprov installed in the
Python environment is needed.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.errors import GpuprovError
from ..plugin_utils.planned_here import ProbeFailed, planned_here


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS: frozenset[str] = frozenset()

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        try:
            here = planned_here(self, task_vars or {})
        except ProbeFailed as exc:
            return {**result, **exc.result}
        except GpuprovError as exc:
            return {**result, "failed": True, "msg": str(exc)}
        plan = here.plan
        result.update(
            changed=False,
            vars=plan.document_vars(),
            roles=[{"name": r.name, "reason": r.reason, "change": r.change} for r in plan.roles],
            plan_warnings=list(plan.warnings),
            gpus=plan.gpu_summary,
        )
        if plan.blocked:
            result.update(failed=True, msg=f"{here.host}: blocked: " + "; ".join(plan.blockers))
        return result
