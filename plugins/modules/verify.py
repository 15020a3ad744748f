#!/usr/bin/python
"""gpuprov.nvidia.verify: documentation only. The action plugin plugins/action/verify.py does
the work (on the controller), as for gpuprov.nvidia.plan."""

from __future__ import annotations

DOCUMENTATION = r"""
module: verify
short_description: Verify hosts with the suite C(provision verify) runs
version_added: 0.2.0
description:
  - Probes and plans the host as M(gpuprov.nvidia.plan) does; a host the planner blocks is not
    verified and fails.
  - Then runs gpuprov's one verification suite (C(orchestrator/verify/suite), pytest-testinfra)
    in pytest processes on the controller, through testinfra's Ansible backend and the
    inventory this play runs with, against the hosts' plans (a temporary C(plan.json)), and
    reads its JUnit as C(provision verify) does.
  - Alone, for this host. In the C(gpuprov.nvidia.verify) playbook, in two steps so that one
    suite run serves the play's batch of hosts - each host with O(plan_only), then one task
    (C(run_once)) with O(plans) for all of them, whose C(hosts) result holds each host's
    checks; the playbook's next task fails each host whose checks failed.
  - A failed check fails the task for this host only; skips do not.
options:
  timeout_s:
    description: Seconds the suite may take (for all the hosts of O(plans)).
    type: int
    default: 1800
  plan_only:
    description:
      - Probe and plan this host only and return its plan-document entry as RV(plan); no
        check runs.
    type: bool
    default: false
  plans:
    description:
      - Each host to verify, mapped to its plan-document entry (the RV(plan) of its
        O(plan_only) task). The suite runs once for all of them; the task itself does not
        fail for a host's checks (run it with C(run_once)), RV(hosts) says each host's result.
    type: dict
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

# One suite run for the play's batch (what the gpuprov.nvidia.verify playbook does)
- name: Detect and plan this host
  gpuprov.nvidia.verify:
    plan_only: true
  register: planned

- name: Verify the batch's hosts at once
  gpuprov.nvidia.verify:
    plans: "{{ dict(ansible_play_batch | zip(ansible_play_batch | map('extract', hostvars, ['planned', 'plan']))) }}"
  run_once: true
  register: verified

- name: Fail this host when one of its checks failed
  ansible.builtin.fail:
    msg: "{{ verified.hosts[inventory_hostname].msg }}"
  when: verified.hosts[inventory_hostname].failed | default(false)
"""

RETURN = r"""
plan:
  description: This host's plan-document entry (the variables it is verified against).
  type: dict
  returned: with O(plan_only), when the host is planned and not blocked
hosts:
  description:
    - Per host of O(plans), its result - V(checks), V(summary), V(failed_checks),
      V(statuses), V(seconds) as for one host, and V(failed) with V(msg) when a check
      failed or the suite reported nothing for it.
  type: dict
  returned: with O(plans)
checks:
  description: Every check as the JSON report holds it (C(verify.<test>), status, diagnosis, seconds).
  type: list
  elements: dict
  returned: when the suite ran for this host alone
summary:
  description: Counts by status.
  type: str
  returned: when the suite ran for this host alone
failed_checks:
  description: The failed checks' names.
  type: list
  elements: str
  returned: when the suite ran for this host alone
statuses:
  description: Each check's status by its name.
  type: dict
  returned: when the suite ran for this host alone
seconds:
  description: How long the task took.
  type: float
  returned: when the suite ran for this host alone
msg:
  description: Which checks failed and the first one's diagnosis; or why the host was not verified.
  type: str
  returned: failure
"""
