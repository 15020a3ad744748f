"""Fixtures of the verification suite: the expectation for the host under test, and become
with a password for the hosts that need one.

Become: testinfra's ssh backend runs `sudo /bin/sh -c CMD` with nothing on stdin, which can
only work with passwordless sudo. For a host whose sudo wants a password, `provision verify`
hands the suite the host's become (user, flags, password) over an inherited pipe
($GPUPROV_BECOME_FD, read once here; pytest-xdist workers get it through their worker input,
never the environment or a file); that host's commands then run as orchestrator/connection.py
runs them, the password answered on the SSH channel's stdin when sudo asks.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.connection import Become, become_handshake, become_words
from orchestrator.errors import BadInputError
from orchestrator.plandoc import host_entry, read_plan_document
from orchestrator.verify.expect import Expectation, expectation_from_vars

_PLAN = pytest.StashKey[dict[str, dict[str, Any]]]()
_BECOME = pytest.StashKey[dict[str, dict[str, Any]]]()
BECOME_FD = "GPUPROV_BECOME_FD"


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
    config.stash[_BECOME] = _read_become(config)


def _read_become(config: pytest.Config) -> dict[str, dict[str, Any]]:
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        return dict(json.loads(worker.get("gpuprov_become", "{}")))
    fd = os.environ.pop(BECOME_FD, None)
    if not fd:
        return {}
    with os.fdopen(int(fd), "rb") as pipe:
        return dict(json.loads(pipe.read() or b"{}"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # pytest-xdist: each worker's input
    node.workerinput["gpuprov_become"] = json.dumps(node.config.stash[_BECOME])


def _run_become(backend: Any, become: Become, command: str, *args: str, **_: Any) -> Any:
    """testinfra's SshBackend.run, with sudo's prompt answered on stdin (connection.py)."""
    remote = shlex.join(become_words(become, ("sh", "-c", backend.quote(command, *args))))
    ssh, ssh_args = backend._build_ssh_command(remote)
    proc = subprocess.Popen(
        backend.quote(" ".join(ssh), *ssh_args),
        shell=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = become_handshake(proc, become, backend.get_hostname())
    more, more_err = proc.communicate(b"", timeout=600)
    result = backend.result(proc.returncode, backend.encode(command), out + more, err + more_err)
    if proc.returncode == 255:
        raise RuntimeError(result)
    return result


@pytest.fixture(scope="module")
def host(_testinfra_host: Any, pytestconfig: pytest.Config) -> Any:
    """testinfra's host; an ansible:// host whose become needs a password runs its commands
    through `_run_become`."""
    spec = pytestconfig.stash[_BECOME].get(str(_testinfra_host.backend.get_hostname()))
    backend = _testinfra_host.backend
    if spec and backend.get_connection_type() == "ansible":
        inner = backend.ansible_runner.get_host(
            backend.host, ssh_config=backend.ssh_config, ssh_identity_file=backend.ssh_identity_file
        )
        if inner is not None and inner.backend.NAME in ("ssh", "safe-ssh"):
            become = Become(spec["user"], tuple(spec["flags"]), spec["password"])
            inner.backend.run = functools.partial(_run_become, inner.backend, become)
    return _testinfra_host


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
