#!/usr/bin/python
"""gpuprov.nvidia.verify: documentation only. The action plugin plugins/action/verify.py does
the work (on the controller), as for gpuprov.nvidia.plan."""

from __future__ import annotations

DOCUMENTATION = r"""
module: verify
short_description: Verify this host with the suite C(provision verify) runs
version_added: 0.2.0
description:
  - Probes and plans the host as M(gpuprov.nvidia.plan) does; a host the planner blocks is not
    verified and fails.
  - Then runs gpuprov's one verification suite (C(orchestrator/verify/suite), pytest-testinfra)
    for this host alone, in a pytest process on the controller, through testinfra's Ansible
    backend and the inventory this play runs with, against the host's plan (a temporary
    C(plan.json)), and reads its JUnit as C(provision verify) does.
  - A failed check fails the task for this host only; skips do not.
options:
  timeout_s:
    description: Seconds the suite may take for this host.
    type: int
    default: 1800
attributes:
  action:
    description: Runs on the controller.
    support: full
  check_mode:
    description: Changes nothing; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing to show a diff of.
    support: none
  platform:
    description: Targets hosts testinfra reaches with the inventory's connection settings.
    support: full
    platforms: posix
notes:
  - Needs pytest and pytest-testinfra on the controller (C(meta/ee-requirements.txt)).
  - testinfra reads the inventory with C(ansible-inventory); a become password or vault it
    would need to ask for is not available to it.
seealso:
  - module: gpuprov.nvidia.validate
author: gpuprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Verify this host
  gpuprov.nvidia.verify:
"""

RETURN = r"""
checks:
  description: Every check as the JSON report holds it (C(verify.<test>), status, diagnosis, seconds).
  type: list
  elements: dict
  returned: when the suite ran
summary:
  description: Counts by status.
  type: str
  returned: when the suite ran
failed_checks:
  description: The failed checks' names.
  type: list
  elements: str
  returned: when the suite ran
statuses:
  description: Each check's status by its name.
  type: dict
  returned: when the suite ran
seconds:
  description: How long the task took.
  type: float
  returned: when the suite ran
msg:
  description: Which checks failed and the first one's diagnosis; or why the host was not verified.
  type: str
  returned: failure
"""
