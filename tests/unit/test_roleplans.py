"""Typed plans per role: read once from the planner's result, carried in the plan document,
read back by verify; the report shows their fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.errors import PolicyError
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.report import _plan_cell
from orchestrator.roleplans import DriverPlan, MigPlan, TypedPlan, UpgradePlan, typed_plan
from orchestrator.verify.expect import expectation_from_vars

REAL = Path(__file__).resolve().parents[2] / "tests" / "recorded" / "fixtures" / "real"
H200 = REAL / "h200x2-ubuntu2404-580"
LAYOUTS = {"h200-all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 2}}]}


def _facts():  # type: ignore[no-untyped-def]
    return parse_host("h200", {p.name: p.read_text() for p in H200.iterdir() if p.is_file()})


def test_the_real_h200_plan_typed_and_round_tripped() -> None:
    facts = _facts()
    policy = load_policy(
        "h200",
        {
            "gpuprov_roles": ["nvidia_driver", "docker", "nvidia_container_toolkit", "mig"],
            "mig_layout": "h200-all-3g",
            "mig_configs": LAYOUTS,
            "gpuprov_validation_expected_gpus": "2",
            "gpuprov_validation_nccl": False,  # a MIG layout conflicts with the NCCL check
        },
    )
    plan = plan_host(facts, policy, default_catalog())
    typed = typed_plan(plan, policy, facts.loaded_driver)
    assert typed.driver == DriverPlan(
        branch=580,
        version="580.159.04",
        flavour="open",
        source="cuda",
        fabricmanager=False,
        reboot="forbid",
        persistenced=True,
        state_file="/var/lib/gpuprov/nvidia_driver.json",
        change=False,
    )
    assert typed.upgrade is None  # the loaded driver is the plan's
    assert typed.mig is not None and typed.mig.layout == "h200-all-3g"
    assert set(typed.mig.parsed.layouts) == {"h200-all-3g"}
    assert (typed.validation.expected_gpus, typed.validation.nccl) == (2, False)
    assert typed.role_vars() == plan.role_vars()  # what Ansible gets is the planner's
    document = typed.document_vars()
    assert document["gpuprov_validation_expected_gpus"] == 2
    back = TypedPlan.from_vars("h200", document, change=False)
    assert back == typed.__class__(**{**typed.__dict__, "upgrade": None})
    # verify reads the same document: the expected GPU count comes from the plan
    assert expectation_from_vars("h200", document).gpu_count == 2
    assert _plan_cell(plan) == "R580 open (no change), docker, nvidia_container_toolkit, mig"


def test_a_replaced_driver_is_an_upgrade_plan() -> None:
    facts = _facts()
    policy = load_policy("h200", {"nvidia_driver_version": "580.200.01"})
    plan = plan_host(facts, policy, default_catalog())
    typed = typed_plan(plan, policy, facts.loaded_driver)
    assert typed.upgrade == UpgradePlan("580.159.04", "open", "580.200.01", 580, "open")
    assert typed.driver is not None and typed.driver.change


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("nvidia_driver_flavour", "auto"),  # a policy value, never a plan value
        ("nvidia_driver_fabricmanager", "sometimes"),
        ("gpuprov_validation_expected_gpus", -1),
        ("gpuprov_roles", ["nvidia_driver", "slurm"]),
    ],
)
def test_a_wrong_plan_value_is_bad_input(name: str, value: object) -> None:
    with pytest.raises(PolicyError) as err:
        TypedPlan.from_vars("n1", {"gpuprov_roles": ["nvidia_driver"], name: value})
    assert name in str(err.value) and "n1" in str(err.value)


def test_the_mig_document_is_built_in_one_place() -> None:
    plan = MigPlan.parse("disabled", {}, "n1")
    assert plan.document() == {
        "version": "v1",
        "mig-configs": {"disabled": [{"devices": "all", "mig-enabled": False}]},
    }
