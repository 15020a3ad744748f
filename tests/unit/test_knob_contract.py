"""issue 26's contract: for every input of every role's argument_specs (and gpuprov's own
knobs, written in the same form), the planner and verification (with and without a plan,
which reads the plan as the roles read it) read a value
exactly as ansible-core's ArgumentSpecValidator does (as a role's validate_argument_spec
runs it): INI-style strings, YAML scalars and bad values alike. A value ansible-core refuses
is one exit-2 error naming the host, the knob, the value and the fix, the same in every
reader. Where ansible-core accepts a value, a reader holds exactly what it read, or refuses
it by one of the planner's own rules (policy._RULES, the MIG layouts), naming the knob."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import EXIT_BAD_INPUT, BadInputError, PolicyError
from orchestrator.knobs import Knob, default_table
from orchestrator.policy import _RULES, Policy, load_policy
from orchestrator.verify.expect import expectation_from_vars

TABLE = default_table()
HOST = "gpu-7"
ORCHESTRATOR_ONLY = {n for n, k in TABLE.knobs.items() if k.set_by}
KNOBS = sorted(n for n in TABLE.knobs if n not in ORCHESTRATOR_ONLY)
RULED = {*_RULES, "mig_layout", "mig_configs"}  # refusals past the type: the planner's
AUTOMATIC = {  # "" (0 for the count): the planner chooses
    "nvidia_driver_branch",
    "nvidia_driver_version",
    "nvidia_container_toolkit_version",
    "mig_layout",
    "gpuprov_cuda_version",
    "gpuprov_validation_expected_gpus",
    "gpuprov_fabric_instance_type",
    "gpuprov_fabric_expected_devices",
    "gpuprov_fabric_link_rate_gbps",
}

# What each reader holds of a knob (the rest it passes on, or does not read): the policy holds
# every knob under its own name (issue 46: no renames).
POLICY = {name: name for name in TABLE.knobs}
EXPECT = {  # knob -> the expectation's field
    "nvidia_driver_version": "driver_version",
    "nvidia_driver_persistenced": "persistenced",
    "nvidia_driver_state_file": "driver_state_file",
    "nvidia_driver_fabricmanager": "fabricmanager",
    "nvidia_container_toolkit_version": "toolkit_version",
    "nvidia_container_toolkit_cdi_spec": "cdi_spec",
    "gpuprov_roles": "roles",
    "gpuprov_validation_expected_gpus": "gpu_count",
}


def _field(record: Any, path: str) -> Any:
    if isinstance(record, Policy):
        return record[path]
    for part in path.split("."):
        record = getattr(record, part) if record is not None else None
    return record


WORDS = st.text(alphabet="abcxyz019_-./ ,=:", max_size=12)
YAML_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2000), st.floats(-10, 1000), WORDS
)
INI_BY_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.sampled_from(
        ["true", "false", "yes", "no", "on", "off", "1", "0", "True", "OFF", "y", "n", "t", "f"]
    ),
    "int": st.integers(-5, 5000).map(str),
    "list": st.lists(
        st.sampled_from(["docker", "mig", "a", "nvidia_driver", "x y"]), min_size=1
    ).map(",".join),
    "dict": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3)).map(json.dumps),
    "path": st.sampled_from(["/etc/x.json", "~/x", "relative/x", "/var/lib/gpuprov/a.json"]),
    "str": WORDS,
    "raw": WORDS,
}
BAD = st.one_of(
    st.sampled_from(["maybe", "eight", "1.5", "{not json", "[1, 2"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["k"]), st.integers(0, 1), max_size=1),
)


def values_for(knob: Knob) -> st.SearchStrategy[Any]:
    choices = st.sampled_from([str(c) for c in knob.choices]) if knob.choices else st.nothing()
    return st.one_of(INI_BY_TYPE[knob.type], YAML_SCALARS, BAD, choices)


def ansible_reads(knob: Knob, value: Any) -> tuple[bool, Any]:
    """ansible-core's own reading of `value` for `knob` (ok, validated value)."""
    result = ArgumentSpecValidator({knob.name: dict(knob.spec)}).validate(
        {knob.name: value}, validate_role_argument_spec=True
    )
    return not result.error_messages, result.validated_parameters.get(knob.name)


# "" or blanks: unset, the planner chooses (the automatic knobs; gpuprov_fabric_instance_type:
# the device count from the inventory or the host alone)
BLANK_IS_UNSET = {*AUTOMATIC, "gpuprov_fabric_instance_type"}


def _expected(name: str, value: Any) -> Any:
    if name in AUTOMATIC and value in ("", 0):
        return None
    if name in BLANK_IS_UNSET and isinstance(value, str) and not value.strip():
        return None
    if name == "nvidia_driver_branch":
        return int(value)
    if name in ("gpuprov_roles", "nvidia_driver_imex_nodes"):
        return tuple(value)
    return value.strip() if name in AUTOMATIC and isinstance(value, str) else value


def _outcome(read: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", read()
    except PolicyError as e:
        assert e.exit_code == EXIT_BAD_INPUT
        return "refused", str(e)
    except BadInputError as e:  # a MIG layout past its type: the layout engine's decision
        return "decided", str(e)


def _roles_for(knob: Knob) -> list[str]:
    owner = knob.owner if knob.owner in TABLE["gpuprov_roles"].choices else "nvidia_driver"
    return ["nvidia_driver", "docker", "nvidia_container_toolkit", owner]


def check_one(name: str, value: Any) -> None:
    role_knob = TABLE.knobs[name]
    planner_knob = TABLE.reading(planner=True)[name]
    variables = (
        {name: value}
        if name == "gpuprov_roles"
        else {
            "gpuprov_roles": _roles_for(role_knob),
            name: value,
        }
    )
    readers = {
        "planner": (planner_knob, lambda: load_policy(HOST, {name: value}), POLICY),
        "verify": (planner_knob, lambda: expectation_from_vars(HOST, {name: value}), EXPECT),
        "verify with a plan": (
            role_knob,
            lambda: expectation_from_vars(HOST, variables, planned=True),
            EXPECT,
        ),
    }
    messages: dict[str, set[str]] = {}
    for reader, (knob, read, holds) in readers.items():
        ok, read_value = ansible_reads(knob, None if value is None else value)
        outcome, got = _outcome(read)
        where = f"{reader}: {name}={value!r}"
        if value is None:  # unset: the default
            assert outcome == "ok", where
            continue
        if not ok:
            assert outcome == "refused", f"{where}: ansible-core refuses it, {reader} took it"
            assert f"{name}={value!r}" in got and f"fix: set {name} to " in got, got
            assert got.startswith(f"{HOST}: "), got
            messages.setdefault(json.dumps(dict(knob.spec), sort_keys=True), set()).add(got)
            continue
        if outcome == "decided":
            assert name in ("mig_layout", "mig_configs"), f"{where}: {got}"
            continue
        if outcome != "ok":
            assert name in RULED and name in got, f"{where}: ansible-core reads {read_value!r}"
            continue
        if name in holds:
            held = _field(got, holds[name])
            assert held == _expected(name, read_value), f"{where}: ansible-core {read_value!r}"
    for texts in messages.values():  # one error, whoever reads the knob with that spec
        assert len(texts) == 1, texts


@pytest.mark.parametrize("name", KNOBS)
def test_every_knob_reads_as_ansible_core_reads_it(name: str) -> None:
    knob = TABLE.knobs[name]

    @settings(
        max_examples=int(os.environ.get("GPUPROV_KNOB_EXAMPLES", "8")),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(value=values_for(knob))
    def run(value: Any) -> None:
        check_one(name, value)

    run()


@pytest.mark.parametrize(
    ("name", "value", "read"),
    [
        ("nvidia_driver_persistenced", "false", False),
        ("nvidia_driver_persistenced", "off", False),
        ("nvidia_driver_persistenced", "yes", True),
        ("nvidia_container_toolkit_default_runtime", 1, True),
        ("gpuprov_validation_expected_gpus", "8", 8),
        ("gpuprov_roles", "nvidia_driver,docker", ("nvidia_driver", "docker")),
        ("nvidia_driver_branch", 580, 580),
    ],
)
def test_the_issue_examples(name: str, value: Any, read: Any) -> None:
    """The disagreements issue 26 names, as every reader now reads them."""
    check_one(name, value)
    assert load_policy(HOST, {name: value})[name] == read


def test_a_bad_value_is_the_same_error_in_every_reader() -> None:
    variables = {"gpuprov_roles": ["nvidia_driver"], "nvidia_driver_persistenced": "sometimes"}
    errors = []
    for read in (
        lambda: load_policy(HOST, variables),
        lambda: expectation_from_vars(HOST, variables),
        lambda: expectation_from_vars(HOST, variables, planned=True),
    ):
        with pytest.raises(PolicyError) as err:
            read()
        errors.append(str(err.value))
    assert len(set(errors)) == 1
    assert errors[0].startswith(f"{HOST}: bad policy:\n  nvidia_driver_persistenced='sometimes'")
    assert "fix: set nvidia_driver_persistenced to true or false" in errors[0]
