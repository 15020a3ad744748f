"""The plan document: one JSON file of every host's planned role variables.

`provision apply` passes it to ansible-playbook as extra variables (``-e @plan.json``), the
top of Ansible's variable precedence; the first pre-task of ``playbooks/site.yml``
(``playbooks/tasks/plan.yml``) copies the running host's entry into host facts, which beat
inventory, group_vars and host_vars alike. ``provision verify`` hands the same file to the
verification suite (``--gpuprov-plan``), so what is verified is what was applied.

Shape (``format`` changes when the shape does)::

    {"gpuprov_plan": {"format": 1, "hosts": {"<host>": {"<variable>": <value>, ...}}}}

The key ``"*"`` under ``hosts`` stands for any host (the suite run with ``--hosts=local://``
on a GPU host itself).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import BadInputError, OutputError

FORMAT = 1
VARIABLE = "gpuprov_plan"
ANY_HOST = "*"
FILE_NAME = "plan.json"

HostVars = Mapping[str, Mapping[str, object]]


def plan_document(host_vars: HostVars) -> dict[str, object]:
    """The document for `host_vars` ({host: {variable: value}})."""
    return {VARIABLE: {"format": FORMAT, "hosts": {h: dict(v) for h, v in host_vars.items()}}}


def write_plan_document(directory: Path, host_vars: HostVars) -> Path:
    """Write ``plan.json`` into `directory`, whole or not at all (a temporary file and a
    rename: Ansible never reads half a plan); return its path. A write that fails (a full
    disk) is an OutputError naming the path, before Ansible starts."""
    from .atomic import write_atomic

    path = directory / FILE_NAME
    try:
        write_atomic(path, json.dumps(plan_document(host_vars), indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise OutputError(
            f"the plan document could not be written to {path}: {exc.strerror or exc}; "
            "nothing was applied",
            fix=f"free space in {directory} or pass --artifacts-dir DIR",
        ) from exc
    return path


def read_plan_document(path: Path) -> dict[str, dict[str, Any]]:
    """{host: {variable: value}} from a plan document; BadInputError when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInputError(
            f"{path}: not a readable JSON plan document ({e})",
            fix="pass the plan.json that `provision apply` wrote into the run's artifacts",
        ) from e
    body = data.get(VARIABLE) if isinstance(data, dict) else None
    hosts = body.get("hosts") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(hosts, dict):
        raise BadInputError(
            f"{path}: not a gpuprov plan document of format {FORMAT} "
            f'({{"{VARIABLE}": {{"format": {FORMAT}, "hosts": {{...}}}}}})',
            fix="pass the plan.json that `provision apply` wrote into the run's artifacts",
        )
    if not all(isinstance(v, dict) for v in hosts.values()):
        raise BadInputError(
            f"{path}: every host's entry must be a mapping of variables",
            fix="pass the plan.json that `provision apply` wrote into the run's artifacts",
        )
    return {str(h): dict(v) for h, v in hosts.items()}


def host_entry(hosts: Mapping[str, dict[str, Any]], host: str) -> dict[str, Any] | None:
    """The host's planned variables (or those for any host); None when the plan has none."""
    if host in hosts:
        return hosts[host]
    return hosts.get(ANY_HOST)
