#!/usr/bin/python
"""gpuprov.nvidia.validate: documentation only. The action plugin plugins/action/validate.py
does the work (on the controller), as for gpuprov.nvidia.plan."""

from __future__ import annotations

DOCUMENTATION = r"""
module: validate
short_description: Validate this host with the checks C(provision validate) runs
version_added: 0.2.0
description:
  - Probes and plans the host as M(gpuprov.nvidia.plan) does; a host the planner blocks is not
    validated and fails.
  - Then runs, on the controller, gpuprov's one implementation of the validation checks
    (C(orchestrator.validate.runner.validate_host)) - host health and fabric checks over the
    probed facts; the GPU checks (the payload, in a container or with the host's python3) and
    DCGM's diag as sh scripts on the host, through this task's connection. Simulated (lab) GPUs
    skip the CUDA checks, each with its reason.
  - With C(gpuprov_validation_textfile_dir) set for the host, writes the host's Prometheus
    textfile there (C(gpuprov_validation.prom), atomically), as C(provision validate) does.
  - A failed check fails the task for this host only; warnings and skips do not.
options:
  runtime:
    description: Where the GPU checks run; default the policy's C(gpuprov_validation_runtime).
    type: str
    choices: [auto, docker, host]
  image:
    description: The container image for the GPU checks (runtime docker).
    type: str
  dcgm_level:
    description: Also run NVIDIA DCGM's C(dcgmi diag -r N) (the C(dcgm) role installs DCGM).
    type: int
    choices: [1, 2, 3, 4]
attributes:
  action:
    description: Runs on the controller; runs M(gpuprov.nvidia.gpu_probe) and sh scripts on the host.
    support: full
  check_mode:
    description: The checks run; the Prometheus textfile is not written.
    support: partial
  diff_mode:
    description: Nothing to show a diff of.
    support: none
  platform:
    description: Targets hosts with a POSIX sh.
    support: full
    platforms: posix
notes:
  - The scripts bound themselves (C(timeout) around the payload and the diag); the task's
    C(timeout) keyword bounds the whole.
seealso:
  - module: gpuprov.nvidia.plan
  - module: gpuprov.nvidia.verify
author: gpuprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate this host
  gpuprov.nvidia.validate:
  register: validated
"""

RETURN = r"""
checks:
  description: Every check as the JSON report holds it (name, status, value, limit, unit, diagnosis, gpu, seconds).
  type: list
  elements: dict
  returned: when the checks ran
summary:
  description: Counts by status, e.g. C(18 pass 27 skip).
  type: str
  returned: when the checks ran
failed_checks:
  description: The failed checks' names (with C([gpuN]) for per-GPU ones).
  type: list
  elements: str
  returned: when the checks ran
statuses:
  description: Each check's status by its name.
  type: dict
  returned: when the checks ran
textfile:
  description: The Prometheus textfile written, or null.
  type: str
  returned: when the checks ran
seconds:
  description: How long the task took.
  type: float
  returned: when the checks ran
msg:
  description: Which checks failed and the first one's diagnosis; or why the host was not validated.
  type: str
  returned: failure
"""
