#!/usr/bin/python
"""gpuprov.nvidia.plan: documentation only. The action plugin plugins/action/plan.py does the
work (on the controller); this file is what `ansible-doc gpuprov.nvidia.plan` reads, as
ansible-core documents its own action plugins (e.g. ansible.builtin.template)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: plan
short_description: Detect this host's GPUs and plan it with gpuprov's planner
version_added: 0.2.0
description:
  - Runs M(gpuprov.nvidia.gpu_probe) (the probe of C(provision detect)) on the host, then, on
    the controller, the code C(provision plan) runs - gpuprov's parsers, the policy and the
    planner - on its output.
  - The policy is the host's own variables (inventory, C(group_vars), C(host_vars)) named like
    a knob (C(gpuprov_*) or a role's prefix), not the play's role defaults; the knobs are
    listed in the collection's C(inventory/group_vars/all.yml). An unknown or invalid knob
    fails the task with the fix.
  - Returns the host's plan-document entry under RV(vars) (what C(provision apply) passes as
    C(-e @plan.json)), the ordered roles with their reasons, and the warnings. A host the
    planner blocks fails here, before any role runs.
  - The site playbook (gpuprov.nvidia.site) runs it as its first pre-task when no plan document
    was passed (C(playbooks/tasks/plan-here.yml)).
  - The C(orchestrator) package comes from the collection (beside C(plugins/)), else from the
    controller's Python environment.
options: {}
attributes:
  action:
    description: Runs on the controller; runs M(gpuprov.nvidia.gpu_probe) on the host.
    support: full
  check_mode:
    description: Changes nothing; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing to show a diff of.
    support: none
  platform:
    description: Targets hosts with a POSIX sh (the probe reads sysfs and runs nvidia-smi if found).
    support: full
    platforms: posix
notes:
  - The task takes no arguments; everything comes from the host and its variables.
  - Needs, on the controller, Python 3.11 or later and the collection's requirements
    (C(meta/execution-environment.yml)).
seealso:
  - module: gpuprov.nvidia.gpu_probe
author: gpuprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Detect the GPUs and plan this host
  gpuprov.nvidia.plan:
  register: planned

- name: Take the planned variables as host facts
  ansible.builtin.set_fact:
    "{{ item.key }}": "{{ item.value }}"
  loop: "{{ planned.vars | dict2items }}"
  loop_control:
    label: "{{ item.key }}"
"""

RETURN = r"""
vars:
  description:
    - The host's entry of the plan document - every role variable, C(gpuprov_roles) and the
      validation plan (C(gpuprov_validation_*), C(gpuprov_cuda_version)).
  type: dict
  returned: success
roles:
  description: The roles the host needs, in order.
  type: list
  elements: dict
  returned: success
  contains:
    name:
      description: The role's name (e.g. C(nvidia_driver)).
      type: str
    reason:
      description: Why the planner chose it.
      type: str
    change:
      description: Whether the role is expected to change the host.
      type: bool
plan_warnings:
  description: The planner's warnings for this host.
  type: list
  elements: str
  returned: success
gpus:
  description: The GPUs found, e.g. C(2x H200 SXM 141GB); C(no GPU) when none.
  type: str
  returned: success
  sample: 2x H200 SXM 141GB
msg:
  description: Why the host is blocked, or what in the policy is wrong.
  type: str
  returned: failure
"""
