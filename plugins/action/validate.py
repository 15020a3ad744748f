"""gpuprov.nvidia.validate: validate this host with the checks `provision validate` runs.

The host is probed and planned as `provision` does (plugins/plugin_utils/planned_here.py); a
host the planner blocks is not validated and fails. Then, on the controller, the one
implementation of the checks, orchestrator.validate.runner.validate_host: the host health and
fabric checks over the parsed facts, and the GPU payload (container or host python3) and
DCGM's diag as sh scripts run on the host through this task's own Ansible connection (become
as the play sets it). With gpuprov_validation_textfile_dir set, the host's Prometheus textfile
is written there (orchestrator/validate/textfile.py), as `provision validate` writes it. A
failed check fails the task, for this host only.
"""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase

from ...orchestrator.catalog import default_catalog
from ...orchestrator.errors import GpuprovError
from ...orchestrator.validate.runner import CommandOutput, validate_host
from ...orchestrator.validate.textfile import directory_of, publish
from ..plugin_utils.planned_here import ProbeFailed, checks_result, planned_here

RUNTIMES = ("auto", "docker", "host")


class _OnTheHost:
    """validate_host's Executor: a sh script on the host's stdin, over the task's connection.
    The scripts bound themselves (`timeout` around the payload and the diag); the task's
    `timeout` keyword bounds the whole."""

    def __init__(self, action: ActionBase) -> None:
        self._action = action

    def __call__(self, script: str, *, timeout: float) -> CommandOutput:
        done = self._action._low_level_execute_command(  # noqa: SLF001  # ActionBase's own
            "/bin/sh -s", sudoable=True, in_data=script.encode()
        )
        return CommandOutput(int(done["rc"]), str(done["stdout"]), str(done["stderr"]))


def _bad(result: dict[str, Any], msg: str) -> dict[str, Any]:
    return {**result, "failed": True, "msg": msg}


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"runtime", "image", "dcgm_level"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        runtime = args.get("runtime")
        if runtime is not None and runtime not in RUNTIMES:
            return _bad(result, f"runtime={runtime!r}: must be one of {', '.join(RUNTIMES)}")
        level = args.get("dcgm_level")
        try:
            dcgm_level = None if level in (None, "") else int(level)
        except (TypeError, ValueError):
            dcgm_level = 0
        if dcgm_level is not None and dcgm_level not in (1, 2, 3, 4):
            return _bad(result, f"dcgm_level={level!r}: must be 1, 2, 3 or 4")
        started = time.monotonic()
        try:
            here = planned_here(self, task_vars or {}, as_written=True)
        except ProbeFailed as exc:
            return {**result, **exc.result}
        except GpuprovError as exc:
            return _bad(result, str(exc))
        if here.plan.blocked:
            blocked = "; ".join(here.plan.blockers)
            return _bad(result, f"{here.host}: blocked, not validated: {blocked}")
        execute = _OnTheHost(self)
        checks = validate_host(
            here.facts,
            here.raw,
            catalog=default_catalog(),
            policy=here.policy,
            execute=execute,
            runtime=None if runtime in (None, "auto") else str(runtime),
            image=str(args["image"]) if args.get("image") else None,
            dcgm_level=dcgm_level,
        )
        directory = directory_of(here.own)
        written = False
        if directory and not self._task.check_mode:
            extra = publish(execute, directory, here.host, checks, time.time())
            written = not extra
            checks += extra
        result.update(
            changed=written,
            textfile=f"{directory.rstrip('/')}/gpuprov_validation.prom" if written else None,
            **checks_result(here.host, "validation", checks, started),
        )
        return result
