"""Verification: a pytest-testinfra suite that proves a host is in the planned state.

The suite lives in ``orchestrator/verify/suite/`` (shipped with the package, apart from the
project's own tests). ``provision verify`` runs it through :func:`runner.run_suite`; it is
also usable directly::

    pytest orchestrator/verify/suite --hosts='ansible://gpu_nodes' \
        --ansible-inventory=inventory/p5.ini [--gpuprov-expect expect.json]

Expected values come from the inventory (``host.ansible.get_variables()``) and, when given, a
JSON file of per-host plan variables written by ``provision verify`` from the plan.
"""
