"""Policy from inventory variables: defaults, Ansible-style coercion, every problem reported."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import EXIT_BAD_INPUT, PolicyError
from orchestrator.policy import DEFAULT_ROLES, Policy, load_policies, load_policy

KNOB_EXAMPLE = r"^# (nvidia_driver|docker|nvidia_container_toolkit|mig|gpuprov)_[a-z_]+: \S"
GROUP_VARS = Path(__file__).resolve().parents[2] / "inventory" / "group_vars" / "all.yml"


def test_defaults() -> None:
    policy = load_policy("n1", {})
    assert policy == Policy(host="n1")
    assert policy.roles == DEFAULT_ROLES
    assert policy.driver_branch is None and policy.driver_source == "cuda"


def test_shipped_group_vars_are_a_valid_policy() -> None:
    variables = yaml.safe_load(GROUP_VARS.read_text())
    policy = load_policy("n1", variables)
    assert policy.roles == tuple(variables["gpuprov_roles"])


def test_documented_knobs_are_valid_when_uncommented() -> None:
    """Every `# knob: value` example in group_vars/all.yml is a valid setting."""
    lines = GROUP_VARS.read_text().splitlines()
    examples = [ln[2:] for ln in lines if re.match(KNOB_EXAMPLE, ln)]
    planner_knobs = {
        "nvidia_driver_branch",
        "nvidia_driver_version",
        "nvidia_driver_source",
        "nvidia_driver_flavour",
        "nvidia_driver_reboot",
        "docker_source",
        "nvidia_container_toolkit_version",
        "nvidia_container_toolkit_default_runtime",
        "mig_layout",
        "gpuprov_cuda_version",
        "gpuprov_validation_nccl",
        "gpuprov_validation_expected_gpus",
        "gpuprov_validation_runtime",
    }
    assert planner_knobs <= {ln.split(":", 1)[0] for ln in examples}  # each one documented
    variables = {**yaml.safe_load(GROUP_VARS.read_text()), **yaml.safe_load("\n".join(examples))}
    policy = load_policy("n1", variables)
    assert policy.driver_branch == 580
    assert policy.mig_layout == "h200-all-3g"


def test_ini_strings_are_coerced_like_ansible() -> None:
    policy = load_policy(
        "n1",
        {
            "nvidia_driver_branch": "580",
            "nvidia_driver_version": "580.159.04",
            "nvidia_container_toolkit_default_runtime": "true",
            "gpuprov_validation_nccl": "no",
            "gpuprov_validation_expected_gpus": "8",
            "nvidia_driver_source": "distribution",
            "nvidia_driver_flavour": "open",
            "nvidia_driver_reboot": "forbid",
        },
    )
    assert policy.driver_branch == 580
    assert policy.driver_version == "580.159.04"
    assert policy.toolkit_default_runtime is True
    assert policy.validation_nccl is False
    assert policy.validation_expected_gpus == 8
    assert (policy.driver_source, policy.driver_flavour, policy.driver_reboot) == (
        "distribution",
        "open",
        "forbid",
    )


def test_empty_means_automatic() -> None:
    policy = load_policy("n1", {"nvidia_driver_branch": "", "nvidia_driver_version": ""})
    assert policy.driver_branch is None and policy.driver_version is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("nvidia_driver_branch", "latest"),
        ("nvidia_driver_branch", [580]),
        ("nvidia_driver_branch", True),
        ("nvidia_driver_branch", 58),
        ("nvidia_driver_version", 580.159),
        ("nvidia_driver_source", "nvidia"),
        ("nvidia_driver_flavour", "closed"),
        ("nvidia_driver_reboot", False),
        ("docker_source", "docker-ce"),
        ("gpuprov_roles", "docker"),
        ("gpuprov_roles", ["nvidia_driver", "cuda"]),
        ("nvidia_container_toolkit_default_runtime", "maybe"),
        ("gpuprov_validation_expected_gpus", "eight"),
        ("mig_configs", ["a"]),
        ("gpuprov_cuda_version", 12.8),
        ("gpuprov_cuda_version", "12"),
    ],
)
def test_wrong_type_names_host_variable_value_and_fix(name: str, value: object) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy("p5-node-01", {name: value})
    text = str(info.value)
    assert text.startswith("p5-node-01: ")
    assert f"{name}={value!r}" in text
    assert "fix: set " + name in text
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_version_must_belong_to_branch() -> None:
    with pytest.raises(PolicyError, match="not a release of nvidia_driver_branch=535"):
        load_policy("n1", {"nvidia_driver_branch": 535, "nvidia_driver_version": "580.159.04"})


def test_mig_layout_must_be_defined() -> None:
    with pytest.raises(PolicyError, match="mig_layout='mixed' is not a key of mig_configs"):
        load_policy("n1", {"mig_layout": "mixed", "mig_configs": {"all-1g": []}})
    assert load_policy("n1", {"mig_layout": "disabled"}).mig_layout == "disabled"


def test_every_problem_of_every_host_in_one_error() -> None:
    with pytest.raises(PolicyError) as info:
        load_policies(
            {
                "a": {"nvidia_driver_branch": "x", "nvidia_driver_reboot": "sometimes"},
                "b": {},
                "c": {"docker_source": 1},
            }
        )
    text = str(info.value)
    assert "bad policy on 2 host(s)" in text
    assert "a: nvidia_driver_branch='x'" in text
    assert "a: nvidia_driver_reboot='sometimes'" in text
    assert "c: docker_source=1" in text
    assert "b:" not in text


def test_the_example_fleet_inventory_is_a_valid_policy() -> None:
    from orchestrator.inventory import load_inventory

    inv = load_inventory(GROUP_VARS.parents[1] / "p5.ini")
    policies = load_policies({h.name: h.vars for h in inv.hosts})
    assert len(policies) == 4
    assert {p.validation_expected_gpus for p in policies.values()} == {8}
