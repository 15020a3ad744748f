"""Fixtures of the verification suite: the expectation for the host under test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.verify.expect import Expectation, expectation_from_vars


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpuprov-expect",
        default=None,
        metavar="PATH",
        help="JSON {host: {variable: value}} of plan variables that override the inventory's "
        '("*": any host)',
    )


@pytest.fixture(scope="session")
def plan_vars(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    path = request.config.getoption("--gpuprov-expect")
    if not path:
        return {}
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise pytest.UsageError(f"{path}: expected a JSON object keyed by host name")
    return data


@pytest.fixture
def expect(host: Any, plan_vars: dict[str, dict[str, Any]]) -> Expectation:
    """Inventory variables (ansible:// hosts only) overlaid with the host's plan variables;
    plan variables under "*" apply to any host (e.g. `--hosts=local://` on the GPU host)."""
    variables: dict[str, Any] = {}
    if host.backend.get_connection_type() == "ansible":
        variables.update(host.ansible.get_variables())
    name = str(variables.get("inventory_hostname", host.backend.get_hostname()))
    variables.update(plan_vars.get(name, plan_vars.get("*", {})))
    return expectation_from_vars(name, variables)
