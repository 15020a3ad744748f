"""The dcgm role in the plan (orchestrator/planners/dcgm.py): opt-in, its CUDA flavour
from the driver's branch (tests/recorded/reference/dcgm.yaml: 580 -> 13; 535, 550, 570 -> 12;
Volta/Pascal/Maxwell on 580 -> 12), on the real 2x H200 capture (driver 580 loaded)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.errors import PolicyError
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.verify.expect import DcgmExpectation, expectation_from_vars

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"
CATALOG = default_catalog()
ROLES = ["nvidia_driver", "docker", "nvidia_container_toolkit", "dcgm"]


def facts():  # type: ignore[no-untyped-def]
    return parse_host("h200", dict(load_host(REAL)))


def test_dcgm_is_opt_in() -> None:
    plan = plan_host(facts(), load_policy("h200", {}), CATALOG)
    assert "dcgm" not in [r.name for r in plan.roles]


@pytest.mark.parametrize(("branch", "major"), [("580", 13), ("570", 12), ("550", 12)])
def test_the_cuda_flavour_follows_the_driver_branch(branch: str, major: int) -> None:
    policy = load_policy("h200", {"gpuprov_roles": ROLES, "nvidia_driver_branch": branch})
    plan = plan_host(facts(), policy, CATALOG)
    role = next(r for r in plan.roles if r.name == "dcgm")
    assert role.vars["dcgm_cuda_major"] == str(major)
    assert f"-cuda{major}" in role.reason and f"R{branch} runs CUDA {major}" in role.reason
    assert [r.name for r in plan.roles][-1] == "dcgm"  # after the driver, in site.yml's order


def test_old_architectures_take_cuda12_on_580() -> None:
    catalog = dataclasses.replace(
        CATALOG,
        gpus=tuple(
            dataclasses.replace(g, arch="volta") if g.sku.startswith("h200") else g
            for g in CATALOG.gpus
        ),
    )
    policy = load_policy("h200", {"gpuprov_roles": ["dcgm"], "dcgm_cuda_major": ""})
    plan = plan_host(facts(), policy, catalog)  # no driver planned: the loaded 580
    role = next(r for r in plan.roles if r.name == "dcgm")
    assert role.vars["dcgm_cuda_major"] == "12" and "volta GPUs" in role.reason


def test_a_set_cuda_major_and_version_are_taken_as_set() -> None:
    policy = load_policy(
        "h200",
        {
            "gpuprov_roles": ROLES,
            "dcgm_cuda_major": "12",
            "dcgm_version": "4.5.2",
            "dcgm_exporter": "container",
        },
    )
    plan = plan_host(facts(), policy, CATALOG)
    role = next(r for r in plan.roles if r.name == "dcgm")
    assert role.vars == {
        "dcgm_version": "4.5.2",
        "dcgm_cuda_major": "12",
        "dcgm_exporter": "container",
        "dcgm_exporter_port": 9400,
    }
    assert "exporter (container) on port 9400" in role.reason
    # verify reads the plan document's entry as the role reads it
    expect = expectation_from_vars("h200", plan.document_vars(), planned=True)
    assert expect.dcgm == DcgmExpectation("4.5.2", 12, "container", 9400)


def test_no_driver_at_all_blocks_the_host_with_a_fix() -> None:
    f = dataclasses.replace(facts(), loaded_driver=None)
    plan = plan_host(f, load_policy("h200", {"gpuprov_roles": ["dcgm"]}), CATALOG)
    assert any("dcgm_cuda_major" in b and "nvidia_driver" in b for b in plan.blockers)


def test_bad_dcgm_values_are_bad_input_or_block_the_host() -> None:
    with pytest.raises(PolicyError, match="dcgm_exporter"):  # the role's spec refuses it
        load_policy("h200", {"gpuprov_roles": ROLES, "dcgm_exporter": "sidecar"})
    # a flavour DCGM does not ship: the role's preflight would refuse it (its vars' list)
    policy = load_policy("h200", {"gpuprov_roles": ROLES, "dcgm_cuda_major": "14"})
    plan = plan_host(facts(), policy, CATALOG)
    assert any(b.startswith("dcgm_cuda_major=14: DCGM ships no -cuda14") for b in plan.blockers)
