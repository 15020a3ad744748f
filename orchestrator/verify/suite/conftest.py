"""Fixtures of the verification suite: the expectation for the host under test, and how
`provision verify` reaches its hosts.

Transport: under `provision verify` (orchestrator/verify/runner.py) the hosts are named
`gpuprov://NAME` and reached through orchestrator/verify/backend.py: one session per host
(one `ssh`, one sudo, its password answered once on the channel when sudo asks) for all of its
checks, the sessions opened side by side before the first test (`provision verify`: as soon
as the process has its hosts, while the runner detects and plans). How to reach each host and
its variables come from the runner over an inherited pipe ($GPUPROV_VERIFY_FD, read once
here: never the environment, a file or a command line, since they hold the become password);
the suite needs no ansible-inventory then. A host whose session cannot be opened (unreachable, a
host key, sudo) gets no tests: its one-line error goes to --gpuprov-failed for the runner.

Used directly (`--hosts=ansible://...`, `local://`), testinfra's own backends run the checks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from orchestrator.errors import BadInputError
from orchestrator.inventory import InventoryHost
from orchestrator.plandoc import host_entry, read_plan_document
from orchestrator.verify import backend
from orchestrator.verify.expect import Expectation, expectation_from_vars

_PLAN = pytest.StashKey[dict[str, dict[str, Any]]]()
_PIPE = pytest.StashKey[BinaryIO]()  # from the runner (provision verify)
VERIFY_FD = "GPUPROV_VERIFY_FD"
TRACE = "GPUPROV_VERIFY_TRACE"  # a file: each command's host, seconds and text are added to it
_TUPLES = ("known_hosts", "groups", "become_flags")

backend.register()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpuprov-plan",
        default=None,
        metavar="PATH",
        help="the plan document the hosts were applied with (plan.json in the run's "
        'artifacts: {"gpuprov_plan": {"format": 1, "hosts": {host: {variable: value}}}}; '
        'host "*": any host); its variables override the inventory\'s, as in the playbook',
    )
    parser.addoption(
        "--gpuprov-failed",
        default=None,
        metavar="PATH",
        help="(provision verify) write the hosts whose session could not be opened here, as "
        "JSON {host: error}",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Read the plan document once, before any test: a bad one is a usage error."""
    path = config.getoption("--gpuprov-plan", default=None)
    try:
        config.stash[_PLAN] = read_plan_document(Path(path)) if path else {}
    except BadInputError as e:
        raise pytest.UsageError(str(e)) from e
    fd = os.environ.pop(VERIFY_FD, None)
    if fd:
        pipe = os.fdopen(int(fd), "rb")
        config.stash[_PIPE] = pipe
        first = json.loads(pipe.readline() or b"{}")
        backend.REGISTRY.specs.update(_host_specs(first))
        if first.get("open"):  # provision verify: the sessions open while it detects
            backend.REGISTRY.start_opening(sorted(backend.REGISTRY.specs))
    if os.environ.get(TRACE):
        backend.REGISTRY.trace = []


def _host_specs(data: dict[str, Any]) -> dict[str, backend.HostSpec]:
    out = {}
    for name, spec in data.get("hosts", {}).items():
        fields = dict(spec["host"])
        for key in _TUPLES:
            fields[key] = tuple(fields.get(key) or ())
        out[name] = backend.HostSpec(InventoryHost(**fields), dict(spec.get("vars") or {}))
    return out


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Under `provision verify`: wait for the runner's word (it detects and plans while this
    process starts and collects): which of the hosts to verify, and the plan document. Then
    open their sessions at once; the tests of a host not to verify, or that cannot be
    reached, are deselected (an unreachable host's error is the runner's to report, once)."""
    registry = backend.REGISTRY
    pipe = config.stash.get(_PIPE, None)
    if pipe is None:
        # testinfra's own backends (gpuprov.nvidia.verify: ansible://HOST each): one host's
        # checks back to back, so that its ssh connection (ControlPersist) serves them all;
        # pytest's own order runs each test for every host in turn, and past a few dozen
        # hosts a host's connection has expired before its next test (500 fleet hosts: a new
        # handshake per test, 0.44 s each)
        items.sort(key=_host_of)
        return
    with pipe:
        word = json.loads(pipe.readline() or b'{"keep": []}')  # closed: verify none
    if word.get("plan"):
        try:
            config.stash[_PLAN] = read_plan_document(Path(word["plan"]))
        except BadInputError as e:
            raise pytest.UsageError(str(e)) from e
    registry.keep(set(word.get("keep") or ()))
    registry.open_all(sorted(registry.specs))
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        spec = getattr(item, "callspec", None)
        param = spec.params.get("_testinfra_host") if spec is not None else None
        name = param.backend.get_hostname() if param is not None else None
        (keep if name is None or name in registry.sessions else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _host_of(item: pytest.Item) -> str:
    """The testinfra host a test item runs against ("" for none); sorting on it is stable."""
    spec = getattr(item, "callspec", None)
    param = spec.params.get("_testinfra_host") if spec is not None else None
    return str(param.backend.get_hostname()) if param is not None else ""


def pytest_unconfigure(config: pytest.Config) -> None:
    backend.REGISTRY.close_all()
    trace, where = backend.REGISTRY.trace, os.environ.get(TRACE)
    if trace is not None and where:
        with open(where, "a", encoding="utf-8") as out:
            out.writelines(f"{h}\t{s:.3f}\t{c[:120]!r}\n" for h, s, c in trace)
    path = config.getoption("--gpuprov-failed", default=None)
    if path:
        failed = backend.REGISTRY.failed.items()
        errors = {h: {"message": e.message, "fix": e.fix} for h, e in failed}
        Path(path).write_text(json.dumps(errors), "utf-8")


@pytest.fixture(scope="session")
def plan_vars(pytestconfig: pytest.Config) -> dict[str, dict[str, Any]]:
    return pytestconfig.stash[_PLAN]


@pytest.fixture
def expect(host: Any, plan_vars: dict[str, dict[str, Any]]) -> Expectation:
    """Inventory variables (ansible:// hosts only) overlaid with the host's plan variables,
    as site.yml's first pre-task overlays them; plan variables under "*" apply to any host
    (e.g. `--hosts=local://` on the GPU host)."""
    variables: dict[str, Any] = {}
    if isinstance(host.backend, backend.SessionBackend):
        variables.update(host.backend.variables())
    elif host.backend.get_connection_type() == "ansible":
        variables.update(host.ansible.get_variables())
    name = str(variables.get("inventory_hostname", host.backend.get_hostname()))
    entry = host_entry(plan_vars, name)
    variables.update(entry or {})
    return expectation_from_vars(name, variables, planned=entry is not None)
