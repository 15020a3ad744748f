"""Issue 46: one contract from inventory to task. Each case of the issue's "Why" (each failed
on the code before it), and every planned role's variables over the golden matrix of hosts and
inventories (tests/unit/plancases.py) read by ansible-core's own validator against the role's
meta/argument_specs.yml: a plan that is made is one the roles accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.vault import VaultLib, VaultSecret
from plancases import cases
from test_fabric import efa_pci, efa_rdma, fi_info, shaped
from test_plan import DEBIAN_12, real_raw, variant
from test_plan_os import AL2023, ROCKY_94

from orchestrator.catalog import default_catalog
from orchestrator.errors import EXIT_BAD_INPUT, GpuprovError, InventoryError, PolicyError
from orchestrator.inventory import VaultOptions, load_inventory
from orchestrator.parsers import parse_host
from orchestrator.pipeline import _plan
from orchestrator.plan import HostPlan
from orchestrator.roletable import default_roles

ROOT = Path(__file__).resolve().parents[2]
B200, H100, NVSWITCH3 = 0x2901, 0x2330, 0x22A3
DOCA_URL = "https://doca.example/"  # any site: the role fetches <base>/<pinned file>


def plan(raw: dict[str, str], extra_vars: dict[str, Any] | None = None, **knobs: Any) -> HostPlan:
    """The host planned as `provision plan` plans it (pipeline._plan), -e included."""
    facts = {"n1": parse_host("n1", raw)}
    _, plans = _plan(facts, {"n1": knobs}, default_catalog(), extra_vars=extra_vars)
    return plans["n1"]


def names(p: HostPlan) -> list[str]:
    return [r.name for r in p.roles]


def ib_host() -> dict[str, str]:
    return {**real_raw(), "rdma.txt": shaped("rdma-ib.txt")}


def efa_host() -> dict[str, str]:
    raw = real_raw()
    pci = [ln for ln in raw["sysfs-pci-devices.txt"].splitlines() if not ln.startswith("#")]
    raw["sysfs-pci-devices.txt"] = "\n".join(pci + efa_pci(32)) + "\n# exit=0\n"
    return {**raw, "rdma.txt": efa_rdma(), "fi-info-efa.txt": fi_info()}


# --- every planned role's inputs, as the role's own argument_specs reads them ----------------


def _spec(role: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return dict(doc["argument_specs"]["main"]["options"])


def test_every_planned_role_input_is_one_its_role_accepts() -> None:
    specs = {r.name: _spec(r.name) for r in default_roles().rows}
    checked = 0
    for name, raw, hostvars in cases():
        try:
            p = plan(raw, **hostvars)
        except GpuprovError:
            continue  # bad input: nothing is applied
        for role in p.roles:
            result = ArgumentSpecValidator(specs[role.name]).validate(
                dict(role.vars), validate_role_argument_spec=True
            )
            assert not result.error_messages, (name, role.name, result.error_messages)
            assert result.validated_parameters | dict(role.vars) == result.validated_parameters
            checked += 1
    assert checked > 800


# --- the cases of the issue ---------------------------------------------------------------


def test_infiniband_stack_in_the_inventory_is_what_is_planned() -> None:
    """It was planned as doca: the planner read gpuprov_fabric_infiniband_stack instead."""
    ib = plan(ib_host(), infiniband_stack="distribution").role("infiniband")
    assert ib is not None and ib.vars["infiniband_stack"] == "distribution"
    default = plan(ib_host()).role("infiniband")  # the role's own default
    assert default is not None and default.vars["infiniband_stack"] == "distribution"
    with pytest.raises(PolicyError, match=r"gpuprov_fabric_infiniband_stack .*not a knob"):
        plan(ib_host(), gpuprov_fabric_infiniband_stack="doca")


def test_doca_without_its_download_site_blocks_the_host_before_any_change() -> None:
    p = plan(ib_host(), infiniband_stack="doca")
    assert any("infiniband_stack=doca needs infiniband_doca_base_url" in b for b in p.blockers)
    assert not plan(ib_host(), infiniband_stack="doca", infiniband_doca_base_url=DOCA_URL).blocked
    deb = plan(  # the role pins no doca-host package for Debian 12
        {**ib_host(), "os-release.txt": DEBIAN_12},
        infiniband_stack="doca",
        infiniband_doca_base_url=DOCA_URL,
    )
    assert any("pins no doca-host package for debian12" in b for b in deb.blockers)


def test_an_efa_installer_without_a_pinned_sha256_blocks_the_host() -> None:
    p = plan(efa_host(), efa_installer_version="1.42.0")
    (blocker,) = [b for b in p.blockers if "EFA installer 1.42.0" in b]
    assert "no sha256 to verify its tarball" in blocker and "1.41.0" in blocker
    sha = "a" * 64
    assert not plan(efa_host(), efa_installer_version="1.42.0", efa_installer_sha256=sha).blocked
    assert not plan(efa_host(), efa_installer_version="1.41.0").blocked


@pytest.mark.parametrize("os_release", [ROCKY_94 + "# exit=0\n", AL2023 + "# exit=0\n"])
def test_dcgm_off_apt_hosts_blocks_the_host(os_release: str) -> None:
    raw = variant({0x2335: 2}, os_release=os_release)
    p = plan(raw, gpuprov_roles=["nvidia_driver", "docker", "nvidia_container_toolkit", "dcgm"])
    assert any("the dcgm role supports apt hosts (Debian, Ubuntu) only" in b for b in p.blockers)


def test_dcgm_with_the_distribution_driver_or_dcgm3_version_blocks_the_host() -> None:
    roles = ["nvidia_driver", "dcgm"]
    ubuntu = variant({0x2335: 2})  # Ubuntu 22.04: its archive has the driver
    p = plan(ubuntu, gpuprov_roles=roles, nvidia_driver_source="distribution")
    assert any("dcgm with nvidia_driver_source=distribution" in b for b in p.blockers), p.blockers
    p = plan(real_raw(), gpuprov_roles=roles, dcgm_version="3.3.5")
    assert any('dcgm_version "3.3.5" is not a DCGM 4 version' in b for b in p.blockers)
    assert not plan(real_raw(), gpuprov_roles=roles, dcgm_version="4.5.2").blocked


def test_e_outranks_the_plan_so_it_is_planned_with_and_never_contradicts_it() -> None:
    b200 = variant({B200: 8})
    with pytest.raises(PolicyError) as err:  # 535 predates B200: refused as in group_vars
        plan(b200, extra_vars={"nvidia_driver_branch": "535"})
    assert err.value.exit_code == EXIT_BAD_INPUT and "nvidia_driver_branch=535" in str(err.value)
    with pytest.raises(PolicyError, match="nvidia_driver_branch=535"):
        plan(b200, nvidia_driver_branch="535")
    # a value the planner decides: -e would win over it in Ansible, so it is bad input
    with pytest.raises(PolicyError) as err:
        plan(real_raw(), extra_vars={"nvidia_driver_flavour": "auto"})
    text = str(err.value)
    assert "nvidia_driver_flavour='auto' (-e) contradicts the plan's" in text
    assert "nvidia_driver_flavour='open'" in text and text.startswith("n1: ")
    # -e that agrees with the plan, or sets what the plan does not own, is fine
    assert plan(real_raw(), extra_vars={"nvidia_driver_branch": "580"}).role("nvidia_driver")
    assert plan(real_raw(), extra_vars={"docker_users": ["ci"]}).role("docker")


@pytest.mark.parametrize(
    ("name", "given", "planned"),
    [
        ("nvidia_driver_nvlink5", True, False),
        ("nvidia_driver_imex", True, False),
        ("nvidia_driver_fabricmanager", False, True),  # the board has NVSwitches
    ],
)
def test_what_the_plan_owns_in_an_h100_inventory_never_reaches_the_role(
    name: str, given: bool, planned: bool
) -> None:
    hgx = variant({H100: 8}, (NVSWITCH3, 4))
    with pytest.raises(PolicyError) as err:
        plan(hgx, **{name: given})
    text = f"{name}={given} (the inventory) contradicts the plan's {name}={planned}"
    assert text in str(err.value)
    driver = plan(hgx).role("nvidia_driver")
    assert driver is not None and driver.vars[name] is planned  # owned: always in the plan


def _vault(value: str, password: str = "pw") -> str:
    lib = VaultLib([("default", VaultSecret(password.encode()))])
    return lib.encrypt(value).decode()


@pytest.mark.parametrize("secret", [None, "wrong", "corrupt"])
def test_a_knob_that_cannot_be_decrypted_is_bad_input(tmp_path: Path, secret: str | None) -> None:
    body = _vault("570") if secret != "corrupt" else "$ANSIBLE_VAULT;1.1;AES256\n6162630a\n"
    inv = tmp_path / "hosts.yml"
    vaulted = "".join(f"            {line}\n" for line in body.splitlines())
    inv.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n"
        f"          nvidia_driver_branch: !vault |\n{vaulted}"
    )
    vault = VaultOptions(password=secret if secret == "wrong" else "pw")
    with pytest.raises(InventoryError) as err:
        load_inventory(inv, vault=VaultOptions() if secret is None else vault)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert "n1" in str(err.value) and "nvidia_driver_branch" in str(err.value)
    good = load_inventory(inv, vault=VaultOptions(password="pw")) if secret != "corrupt" else None
    assert good is None or good.host("n1").vars["nvidia_driver_branch"] == "570"


def test_a_knob_in_capitals_gets_the_did_you_mean() -> None:
    with pytest.raises(PolicyError) as err:
        plan(real_raw(), NVIDIA_DRIVER_BRANCH="580")
    assert "did you mean nvidia_driver_branch?" in str(err.value)


def test_a_knob_whose_template_fails_is_one_clear_line() -> None:
    with pytest.raises(PolicyError) as err:
        plan(real_raw(), nvidia_driver_branch="{{ undefined_var }}")
    text = str(err.value)
    assert "nvidia_driver_branch='{{ undefined_var }}' is a template that cannot be resolved" in (
        text
    )
    assert "fix: set nvidia_driver_branch to a value" in text


def test_gpuprov_roles_without_a_detected_role_leaves_it_out_with_a_warning() -> None:
    assert "efa" in names(plan(efa_host()))  # unset: efa joins where EFA is detected
    listed = plan(efa_host(), gpuprov_roles=["nvidia_driver", "docker"])
    assert names(listed) == ["nvidia_driver", "docker"]
    assert any(
        w.startswith("efa is not in gpuprov_roles, which the inventory sets")
        for w in (listed.warnings)
    )
    ib = plan(ib_host(), gpuprov_roles=["nvidia_driver"])
    assert names(ib) == ["nvidia_driver"] and any("infiniband is not in" in w for w in ib.warnings)
    mig = {"all": [{"devices": "all", "mig-enabled": False}]}
    with_mig = plan(real_raw(), gpuprov_roles=["nvidia_driver"], mig_layout="all", mig_configs=mig)
    assert "mig" not in names(with_mig)
    assert any(w.startswith("mig is not in gpuprov_roles") for w in with_mig.warnings)


def test_provision_plan_takes_e_and_refuses_what_contradicts_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`provision plan -e` previews what apply with the same -e does (it was refused: plan
    did not use -e)."""
    from orchestrator.cli import main

    facts = tmp_path / "facts"
    (facts / "n1").mkdir(parents=True)
    for name, text in real_raw().items():
        (facts / "n1" / name).write_text(text)
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\nn1\n")
    base = ["plan", "-i", str(inv), "--facts", str(facts)]
    assert main([*base, "-e", "nvidia_driver_branch=580"]) == 0
    assert main([*base, "-e", "nvidia_driver_flavour=auto"]) == EXIT_BAD_INPUT
    assert "nvidia_driver_flavour='auto' (-e) contradicts the plan's" in capsys.readouterr().err
