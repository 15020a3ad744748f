"""Secrets never stay on disk: what ansible-runner records of a run, without them.

ansible-runner writes `artifacts/<run>/ansible/command` before Ansible starts: the command line
(with every `-e` as typed, `-e ansible_become_password=...` included) and the whole process
environment (cloud keys, tokens). `scrub_command_file` rewrites it: each inline `-e` value
becomes REDACTED (an `@file` reference and gpuprov's own `{"gpuprov_...": ...}` are kept), and
the environment keeps only Ansible's and ansible-runner's settings and PATH, without any whose
name says it holds a secret. The watchdog (orchestrator/watchdog.py) runs it before
ansible-playbook starts, and apply runs it again when the run ends, however it ends.
Passwords asked by -K and --ask-vault-pass never reach it: ansible-runner types them into
Ansible's prompts (apply.AnsibleOptions.passwords).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

REDACTED = "<redacted by gpuprov>"
_SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL", re.IGNORECASE)
_KEEP_ENV = ("ANSIBLE_", "RUNNER_")


# The role variables provision sets itself as extra variables: --max-unavailable's drain
# budget, checked by roles/driver_upgrade on the hosts (tasks/claim.yml).
ROLE_VARS_SET_BY_PROVISION = ("driver_upgrade_max_unavailable", "driver_upgrade_fleet")


def is_own_var(name: str) -> bool:
    """An extra variable provision passes itself (gpuprov_*, and ROLE_VARS_SET_BY_PROVISION)."""
    return name.startswith("gpuprov_") or name in ROLE_VARS_SET_BY_PROVISION


def _ours(value: str) -> bool:
    """gpuprov's own extra variables (`{"gpuprov_serial": ...}`): no secret in them."""
    try:
        data = json.loads(value)
    except ValueError:
        return False
    return isinstance(data, dict) and all(is_own_var(str(k)) for k in data)


def scrub_command(command: Sequence[str]) -> list[str]:
    """The command line with each inline -e/--extra-vars value redacted."""
    out: list[str] = []
    redact_next = False
    for arg in command:
        if redact_next:
            out.append(arg if arg.startswith("@") or _ours(arg) else REDACTED)
            redact_next = False
        elif arg in ("-e", "--extra-vars"):
            out.append(arg)
            redact_next = True
        elif arg.startswith("--extra-vars="):
            value = arg.partition("=")[2]
            out.append(arg if value.startswith("@") or _ours(value) else f"--extra-vars={REDACTED}")
        elif arg.startswith("-e") and len(arg) > 2 and not arg.startswith("-e@"):
            out.append(f"-e{REDACTED}" if not _ours(arg[2:]) else arg)
        else:
            out.append(arg)
    return out


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(_KEEP_ENV) or k == "PATH") and not _SECRET_NAME.search(k)
    }


def scrub_command_file(path: Path) -> None:
    """Rewrite ansible-runner's `command` file in place (0600), without secrets."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    if isinstance(data.get("env"), dict):
        data["env"] = scrub_env(data["env"])
    if isinstance(data.get("command"), list):
        data["command"] = scrub_command([str(a) for a in data["command"]])
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(tmp, path)
