"""Fixtures of the verification suite: the expectation for the host under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import BadInputError
from orchestrator.plandoc import host_entry, read_plan_document
from orchestrator.verify.expect import Expectation, expectation_from_vars

_PLAN = pytest.StashKey[dict[str, dict[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpuprov-plan",
        default=None,
        metavar="PATH",
        help="the plan document the hosts were applied with (plan.json in the run's "
        'artifacts: {"gpuprov_plan": {"format": 1, "hosts": {host: {variable: value}}}}; '
        'host "*": any host); its variables override the inventory\'s, as in the playbook',
    )


def pytest_configure(config: pytest.Config) -> None:
    """Read the plan document once, before any test: a bad one is a usage error."""
    path = config.getoption("--gpuprov-plan", default=None)
    try:
        config.stash[_PLAN] = read_plan_document(Path(path)) if path else {}
    except BadInputError as e:
        raise pytest.UsageError(str(e)) from e


@pytest.fixture(scope="session")
def plan_vars(pytestconfig: pytest.Config) -> dict[str, dict[str, Any]]:
    return pytestconfig.stash[_PLAN]


@pytest.fixture
def expect(host: Any, plan_vars: dict[str, dict[str, Any]]) -> Expectation:
    """Inventory variables (ansible:// hosts only) overlaid with the host's plan variables,
    as site.yml's first pre-task overlays them; plan variables under "*" apply to any host
    (e.g. `--hosts=local://` on the GPU host)."""
    variables: dict[str, Any] = {}
    if host.backend.get_connection_type() == "ansible":
        variables.update(host.ansible.get_variables())
    name = str(variables.get("inventory_hostname", host.backend.get_hostname()))
    entry = host_entry(plan_vars, name)
    variables.update(entry or {})
    return expectation_from_vars(name, variables, planned=entry is not None)
