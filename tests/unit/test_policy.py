"""Policy from inventory variables: defaults, Ansible-style coercion, every problem reported."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import EXIT_BAD_INPUT, PolicyError
from orchestrator.knobs import default_table
from orchestrator.policy import load_policies, load_policy

KNOB_EXAMPLE = (
    r"^# (nvidia_driver|docker|nvidia_container_toolkit|mig|efa|infiniband|gpuprov)_[a-z_]+: \S"
)
GROUP_VARS = Path(__file__).resolve().parents[2] / "inventory" / "group_vars" / "all.yml"


def test_defaults() -> None:
    policy = load_policy("n1", {})
    assert policy["gpuprov_roles"] == tuple(default_table().default("gpuprov_roles"))
    assert policy["gpuprov_roles"] == ("nvidia_driver", "docker", "nvidia_container_toolkit")
    assert policy["nvidia_driver_branch"] is None and policy["nvidia_driver_source"] == "cuda"
    assert not policy.listed  # gpuprov_roles unset: detected roles join


def test_shipped_group_vars_are_a_valid_policy() -> None:
    variables = yaml.safe_load(GROUP_VARS.read_text())
    policy = load_policy("n1", variables)
    assert "gpuprov_roles" not in variables  # unset: a plain ansible-playbook run plans
    assert policy["gpuprov_roles"] == load_policy("n1", {})["gpuprov_roles"]


def test_documented_knobs_are_their_defaults_when_uncommented() -> None:
    """Every `# knob: value` line of group_vars/all.yml, uncommented, is the default: the same
    policy as setting nothing; every knob the planner reads is documented there."""
    lines = GROUP_VARS.read_text().splitlines()
    examples = [ln[2:] for ln in lines if re.match(KNOB_EXAMPLE, ln)]
    documented = {ln.split(":", 1)[0] for ln in examples}
    readers = {n for n, k in default_table().policy.items() if not k.set_by}
    # set, not commented: mig_configs; gpuprov_roles set is not its default (the whole list)
    assert readers - documented == {"mig_configs", "gpuprov_roles"}
    variables = yaml.safe_load(GROUP_VARS.read_text())
    uncommented = {**variables, **yaml.safe_load("\n".join(examples))}
    assert load_policy("n1", uncommented) == load_policy("n1", variables)


def test_empty_means_automatic() -> None:
    policy = load_policy("n1", {"nvidia_driver_branch": "", "nvidia_driver_version": ""})
    assert policy["nvidia_driver_branch"] is None and policy["nvidia_driver_version"] is None


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
        ("gpuprov_roles", "docker,cuda"),
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
    assert load_policy("n1", {"mig_layout": "disabled"})["mig_layout"] == "disabled"


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
    assert {p["gpuprov_validation_expected_gpus"] for p in policies.values()} == {8}


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("nvidia_driver_brnch", "nvidia_driver_branch"),
        ("gpuprov_validation_expected_gpu", "gpuprov_validation_expected_gpus"),
        ("gpuprov_gpu_count", None),
        ("docker_sorce", "docker_source"),
        ("nvidia_container_toolkit_verison", "nvidia_container_toolkit_version"),
        ("mig_layot", "mig_layout"),
        ("driver_upgrade_drain_comand", "driver_upgrade_drain_command"),
    ],
)
def test_an_unknown_knob_is_bad_input_with_the_closest_name(name: str, closest: str | None) -> None:
    with pytest.raises(PolicyError) as err:
        load_policies(
            {"gpu-7": {name: "550", "unrelated_var": 1}},
            origins={"gpu-7": {name: "inventory/host_vars/gpu-7.yml:3:8"}},
        )
    assert err.value.exit_code == EXIT_BAD_INPUT
    text = str(err.value)
    assert f"gpu-7: {name} (set in inventory/host_vars/gpu-7.yml:3:8) is not a knob" in text
    assert (f"did you mean {closest}?" in text) == (closest is not None)
    assert "unrelated_var" not in text  # only names shaped like a knob are checked


def test_every_role_input_and_gpuprov_knob_is_accepted() -> None:
    """Role inputs the planner does not read pass through untouched; no false alarms."""
    table = default_table()
    variables = {n: k.default for n, k in table.knobs.items() if n not in table.policy}
    assert load_policy("n1", variables) == load_policy("n1", {})


def test_version_alone_implies_its_branch() -> None:
    policy = load_policy("n1", {"nvidia_driver_version": "535.261.03"})
    assert (policy["nvidia_driver_branch"], policy["nvidia_driver_version"]) == (535, "535.261.03")
    with pytest.raises(PolicyError, match="is not a full driver version"):
        load_policy("n1", {"nvidia_driver_version": "5.1"})
