#!/usr/bin/python
"""gpuprov.nvidia.gpu_probe: run gpuprov's detection probe on the host (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_probe
short_description: Run gpuprov's detection probe (probe.sh) on the host
description:
  - Runs the POSIX sh probe the orchestrator runs over SSH (orchestrator/probe.sh) - OS, kernel,
    Secure Boot, GPUs and NVSwitches from sysfs, driver, nvidia-smi facts, Docker, toolkit - and
    returns its output. Changes nothing; check mode runs it too.
  - The action plugin gpuprov.nvidia.plan passes the script and parses the output with
    gpuprov's parsers; use that one.
options:
  script:
    description: The probe script (orchestrator.probe.probe_script()).
    type: str
    required: true
author: gpuprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
# gpuprov.nvidia.plan runs this module and parses its output; on its own it returns the raw
# captures, e.g. to keep them for a bug report. In a checkout the probe is orchestrator/probe.sh.
- name: Run gpuprov's detection probe
  gpuprov.nvidia.gpu_probe:
    script: "{{ lookup('ansible.builtin.file', playbook_dir ~ '/../orchestrator/probe.sh') }}"
  register: probe

- name: Keep its output on the controller
  ansible.builtin.copy:
    content: "{{ probe.stdout }}"
    dest: "probe-{{ inventory_hostname }}.txt"
    mode: "0644"
  delegate_to: localhost
"""

RETURN = r"""
stdout:
  description: The probe's captures, between its begin/end marker lines.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={"script": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    rc, stdout, stderr = module.run_command(["/bin/sh", "-s"], data=module.params["script"])
    if rc != 0:
        module.fail_json(msg=f"the detection probe exited {rc}: {stderr.strip()[:300]}", rc=rc)
    module.exit_json(changed=False, stdout=stdout)


if __name__ == "__main__":
    main()
