"""Verification: a pytest-testinfra suite that proves a host is in the planned state.

The suite lives in ``orchestrator/verify/suite/`` (shipped with the package, apart from the
project's own tests): driver (packages at the planned version and held, loaded module, NVML,
nouveau, persistenced, fabric manager, DKMS), runtime (Docker, daemon.json, CDI), MIG (mode and
instances as the planned layout, CDI MIG devices) and host (GPU count, Xid). ``provision
verify`` (and the full pipeline) runs it through :func:`runner.run_suite`, with pytest-xdist
workers chosen from the host count, and folds its JUnit XML (kept in the run's artifact
directory) into the report. It is also usable directly::

    pytest orchestrator/verify/suite --hosts='ansible://gpu_nodes' \
        --ansible-inventory=inventory/p5.ini [--gpuprov-plan artifacts/RUN/plan.json]

or on a GPU host itself, without Ansible (plan variables under "*")::

    pytest orchestrator/verify/suite --hosts=local:// --gpuprov-plan plan.json

Expected values come from the inventory (``host.ansible.get_variables()``) and, when given, the
plan document (``orchestrator/plandoc.py``): the very ``plan.json`` that ``provision apply``
passed to the playbook, or one ``provision verify`` writes from its plan. A part the
plan does not include is skipped with the reason; see docs/verification.md.
"""
