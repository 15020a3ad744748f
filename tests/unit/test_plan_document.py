"""Each role's plan: its variables under the role's own names, as the planner decides them,
carried in the plan document, read by verify as the roles read them; the MIG layouts are
parsed and checked once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_nvlink5 import b200_raw
from test_plan import plan as plan_raw

from orchestrator import mig, pipeline
from orchestrator import report as rep
from orchestrator.catalog import default_catalog
from orchestrator.errors import PolicyError
from orchestrator.parsers import parse_host
from orchestrator.plan import HostPlan, plan_host
from orchestrator.planners.driver import UpgradePlan
from orchestrator.planners.mig import MigPlan
from orchestrator.policy import load_policy
from orchestrator.report import _plan_cell
from orchestrator.verify.expect import expectation_from_vars

REAL = Path(__file__).resolve().parents[2] / "tests" / "recorded" / "fixtures" / "real"
H200 = REAL / "h200x2-ubuntu2404-580"
LAYOUTS = {"h200-all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 2}}]}
MIG_POLICY: dict[str, object] = {
    "gpuprov_roles": ["nvidia_driver", "docker", "nvidia_container_toolkit", "mig"],
    "mig_layout": "h200-all-3g",
    "mig_configs": LAYOUTS,
    "gpuprov_validation_expected_gpus": "2",
    "gpuprov_validation_nccl": False,  # a MIG layout conflicts with the NCCL check
}


def _facts():  # type: ignore[no-untyped-def]
    return parse_host("h200", {p.name: p.read_text() for p in H200.iterdir() if p.is_file()})


def _plan(**policy: object) -> HostPlan:
    return plan_host(_facts(), load_policy("h200", policy), default_catalog())


def test_the_planner_plans_each_role_under_its_own_names_on_the_real_h200() -> None:
    plan = _plan(**MIG_POLICY)
    assert plan.role("nvidia_driver").vars == {  # type: ignore[union-attr]
        "nvidia_driver_branch": "580",
        "nvidia_driver_version": "580.159.04",
        "nvidia_driver_flavour": "open",
        "nvidia_driver_source": "cuda",
        "nvidia_driver_fabricmanager": False,
        "nvidia_driver_nvlink5": False,
        "nvidia_driver_imex": False,
        "nvidia_driver_reboot": "forbid",
        "nvidia_driver_persistenced": True,
        "nvidia_driver_state_file": "/var/lib/gpuprov/nvidia_driver.json",
    }
    assert plan.role("docker").vars == {"docker_source": "docker"}  # type: ignore[union-attr]
    assert plan.role("nvidia_container_toolkit").vars == {  # type: ignore[union-attr]
        "nvidia_container_toolkit_version": "",
        "nvidia_container_toolkit_default_runtime": False,
        "nvidia_container_toolkit_cdi_spec": "/etc/cdi/nvidia.yaml",
    }
    assert plan.upgrade is None  # the loaded driver is the plan's
    assert plan.role("mig").vars["mig_layout"] == "h200-all-3g"  # type: ignore[union-attr]
    assert plan.document_vars()["gpuprov_validation_expected_gpus"] == 2
    assert plan.document_vars()["gpuprov_validation_nccl"] is False
    assert _plan_cell(plan) == "R580 open (no change), docker, nvidia_container_toolkit, mig"


def test_verify_reads_the_plan_document_as_the_roles_read_it() -> None:
    plan = _plan(**MIG_POLICY)
    document = plan.document_vars()
    expect = expectation_from_vars("h200", document, planned=True)
    assert expect.gpu_count == 2
    assert (expect.driver_version, expect.driver_flavour) == ("580.159.04", "open")
    assert expect.fabricmanager is False and expect.mig_layout == "h200-all-3g"
    assert expect.mig is not None and set(expect.mig.parsed.layouts) == {"h200-all-3g"}


def test_a_replaced_driver_is_an_upgrade_plan() -> None:
    plan = _plan(nvidia_driver_version="580.200.01")
    assert plan.upgrade == UpgradePlan("580.159.04", "open", "580.200.01", 580, "open")
    assert plan.role("nvidia_driver").change  # type: ignore[union-attr]


def test_inventory_role_inputs_reach_the_document_and_verify() -> None:
    """Role inputs the planner passes on (not decides) are in the plan as the inventory set
    them, read as the role reads them: the document carries them, so the role and verify see
    the same value."""
    plan = _plan(
        nvidia_driver_persistenced="false",  # an INI inventory's string
        nvidia_container_toolkit_cdi_spec="/var/run/cdi/nvidia.yaml",
    )
    document = plan.document_vars()
    assert document["nvidia_driver_persistenced"] is False
    assert document["nvidia_container_toolkit_cdi_spec"] == "/var/run/cdi/nvidia.yaml"
    # the inventory the suite reads says otherwise: the plan's entry decides
    inventory = {"nvidia_driver_persistenced": True, "nvidia_container_toolkit_cdi_spec": "/x"}
    expect = expectation_from_vars("h200", {**inventory, **document}, planned=True)
    assert (expect.persistenced, expect.cdi_spec) == (False, "/var/run/cdi/nvidia.yaml")


def test_nvlink5_reaches_the_plan_document() -> None:
    """The planner's NVLink5 decision is in the document, true or false: the plan owns it."""
    p = plan_raw(b200_raw(), "b200")
    document = pipeline._document_vars(["b200"], {"b200": p})["b200"]
    assert document["nvidia_driver_nvlink5"] is True and document["nvidia_driver_imex"] is False


def test_the_mig_layouts_are_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning, the plan document `provision apply` writes, the report's JSON and tables:
    the MIG layouts are parsed exactly once, by the planner."""
    parses: list[Any] = []
    real_parse = mig.parse_config

    def counting_parse(*args: Any, **kwargs: Any) -> mig.MigConfig:
        parses.append(args)
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(mig, "parse_config", counting_parse)
    plan = _plan(**MIG_POLICY)
    assert len(parses) == 1
    pipeline._document_vars(["h200"], {"h200": plan})
    rep.plan_document({"h200": plan})
    rep.render_plans(Console(quiet=True), {"h200": plan})
    _plan_cell(plan)
    assert len(parses) == 1


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
        expectation_from_vars("n1", {"gpuprov_roles": ["nvidia_driver"], name: value}, planned=True)
    assert name in str(err.value) and "n1" in str(err.value)


def test_the_mig_document_is_built_in_one_place() -> None:
    plan = MigPlan.parse("disabled", {}, "n1")
    assert plan.document() == {
        "version": "v1",
        "mig-configs": {"disabled": [{"devices": "all", "mig-enabled": False}]},
    }
