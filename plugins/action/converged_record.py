"""gpuprov.nvidia.converged_record: the module of the same name, given gpuprov's probe.

The state lines of the record come from the detection probe's own `converged-state`
(orchestrator/probe.sh), the function that prints them live on the next run, so the recorded
and the live state are read by one piece of code. The probe is read here, on the controller,
from the collection (ansible_collections.gpuprov.nvidia.orchestrator.probe).
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.probe import probe_script


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = {**self._task.args, "script": probe_script()}
        done: dict[str, Any] = self._execute_module(
            module_name="gpuprov.nvidia.converged_record",
            module_args=args,
            task_vars=task_vars or {},
        )
        return {**result, **done}
