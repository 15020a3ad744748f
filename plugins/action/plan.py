"""gpuprov.nvidia.plan: detect this host's GPUs and plan it with gpuprov's own planner.

Runs gpuprov.nvidia.gpu_probe (the probe of `provision detect`) on the host, then, on the
controller, the very code `provision plan` runs: orchestrator.parsers, policy (from the host's
inventory variables) and the planner, which plans each role's variables. Returns the host's
plan-document entry under `vars` (what `provision apply` passes as -e @plan.json), the ordered
roles with their reasons, and the warnings; a host the planner blocks, or bad policy, fails
here, before any role runs. The planner is the collection's own orchestrator package
(ansible_collections.gpuprov.nvidia.orchestrator, beside plugins/): nothing is put on
sys.path, and no gpuprov installed in the Python environment is needed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.catalog import default_catalog
from ...orchestrator.errors import GpuprovError
from ...orchestrator.knobs import default_table
from ...orchestrator.parsers import parse_host
from ...orchestrator.plan import plan_host
from ...orchestrator.policy import load_policy
from ...orchestrator.probe import probe_script, split_output


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS: frozenset[str] = frozenset()

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        host = str(task_vars["inventory_hostname"])
        probe = self._execute_module(
            module_name="gpuprov.nvidia.gpu_probe",
            module_args={"script": probe_script()},
            task_vars=task_vars,
        )
        if probe.get("failed"):
            return {**result, **probe}
        # The host's own variables (inventory, group_vars, host_vars), not the play's role
        # defaults: the same policy `provision` reads from the inventory.
        own = task_vars["hostvars"][host]
        table = default_table()
        policy_vars = {k: own[k] for k in own if table.is_guarded(str(k))}
        try:
            facts = parse_host(host, split_output(host, str(probe.get("stdout", ""))))
            policy = load_policy(host, policy_vars)
            plan = plan_host(
                facts,
                policy,
                default_catalog(),
                today=dt.datetime.now(dt.UTC).date(),
                hostvars=policy_vars,
            )
        except GpuprovError as exc:
            return {**result, "failed": True, "msg": str(exc)}
        result.update(
            changed=False,
            vars=plan.document_vars(),
            roles=[{"name": r.name, "reason": r.reason, "change": r.change} for r in plan.roles],
            plan_warnings=list(plan.warnings),
            gpus=plan.gpu_summary,
        )
        if plan.blocked:
            result.update(failed=True, msg=f"{host}: blocked: " + "; ".join(plan.blockers))
        return result
