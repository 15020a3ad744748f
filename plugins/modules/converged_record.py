#!/usr/bin/python
"""gpuprov.nvidia.converged_record: write a role's convergence record (docs/reruns.md)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: converged_record
short_description: Record the state a gpuprov role converged (the converged-skip of reruns)
description:
  - The last task of each gpuprov role. Writes C(<dir>/<role>.json) (root only, mode 0600) with
    the digest of the role's inputs that C(provision apply) passed and the state the role owns,
    one line per item, as gpuprov's detection probe prints it (orchestrator/probe.sh
    C(converged-state)); the probe prints the same lines live on the next run, and
    C(provision apply) skips the role where both and the inputs match.
  - The record is gpuprov's bookkeeping, not the host's configuration, so writing it is never
    reported as a change (RV(written) says whether the file was rewritten). Check mode writes
    and reads nothing.
  - The action plugin of the same name passes the probe script; use the module through it.
options:
  role:
    description: The role's name (the record's file name).
    type: str
    required: true
  items:
    description: >-
      The state the role owns - C(file PATH), C(pkg NAME), C(unit NAME), C(module NAME).
    type: list
    elements: str
    required: true
  input_digest:
    description: >-
      The digest of the role's inputs (C(provision apply) passes them as gpuprov_role_digests);
      empty from a plain ansible-playbook or AWX run, which a later C(provision) run therefore
      never skips.
    type: str
    default: ""
  script:
    description: The detection probe (orchestrator.probe.probe_script()); the action plugin sets it.
    type: str
    required: true
  dir:
    description: Where the records are kept.
    type: path
    default: /var/lib/gpuprov/converged
author: gpuprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
# The last task of a role (through the action plugin of the same name, which passes the probe):
# the record names the packages, units and files the role owns.
- name: Record the converged Docker
  gpuprov.nvidia.converged_record:
    role: docker
    input_digest: "{{ (gpuprov_role_digests | default({})).docker | default('') }}"
    items:
      - pkg docker.io
      - unit docker.service
      - file /etc/docker/daemon.json
"""

RETURN = r"""
state:
  description: The state lines recorded.
  type: list
  elements: str
  returned: success, not in check mode
written:
  description: Whether the record file was (re)written.
  type: bool
  returned: always
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

SCHEMA = 1  # orchestrator/parsers/converged.py reads this format


def record_text(role: str, input_digest: str, state: list[str]) -> str:
    """The record file's text (as the former task wrote it with to_nice_json)."""
    record = {"schema": SCHEMA, "role": role, "input_digest": input_digest, "state": state}
    return json.dumps(record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "role": {"type": "str", "required": True},
            "items": {"type": "list", "elements": "str", "required": True},
            "input_digest": {"type": "str", "default": ""},
            "script": {"type": "str", "required": True, "no_log": False},
            "dir": {"type": "path", "default": "/var/lib/gpuprov/converged"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, written=False)
    rc, stdout, stderr = module.run_command(
        ["/bin/sh", "-s", "converged-state", *p["items"]], data=p["script"]
    )
    if rc != 0:
        module.fail_json(msg=f"the probe's converged-state exited {rc}: {stderr.strip()[:300]}")
    state = stdout.splitlines()
    text = record_text(p["role"], p["input_digest"], state)
    os.makedirs(p["dir"], mode=0o700, exist_ok=True)
    os.chmod(p["dir"], 0o700)
    dest = os.path.join(p["dir"], f"{p['role']}.json")
    try:
        with open(dest, encoding="utf-8") as f:
            written = f.read() != text
    except OSError:
        written = True
    if written:
        fd, tmp = tempfile.mkstemp(dir=p["dir"], prefix=f".{p['role']}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest)
    module.exit_json(changed=False, written=written, state=state)


if __name__ == "__main__":
    main()
