"""Planning Blackwell fleets and their OSes (issue 25): GB200/GB300 trays get nvidia-imex and
no local fabric manager; the catalog's B300/GB300 entries; aarch64 plans name one (sbsa)
repository in header and package line; dnf hosts at >= 590 and docker_source=distribution on
RHEL are refused; Ubuntu 26.04 and RHEL 10 stay blocked with the reason."""

from __future__ import annotations

import pytest
from test_plan import DEBIAN_12, UBUNTU_2204, role, variant
from test_plan_os import AL2023, RHEL_96, ROCKY_94

from orchestrator.catalog import default_catalog
from orchestrator.errors import EXIT_BAD_INPUT, PolicyError
from orchestrator.parsers import names, parse_host
from orchestrator.plan import CUDA_ARCH_DIRS, HostPlan, plan_host
from orchestrator.policy import load_policies, load_policy

GB200, GB300, B300, HGX_B200 = 0x2941, 0x31C2, 0x3182, 0x2909
UBUNTU_2404 = UBUNTU_2204.replace("22.04.5", "24.04.1").replace('"22.04"', '"24.04"')
UBUNTU_2404 = UBUNTU_2404.replace("jammy", "noble")
UBUNTU_2604 = UBUNTU_2204.replace("22.04.5", "26.04").replace('"22.04"', '"26.04"')
UBUNTU_2604 = UBUNTU_2604.replace("jammy", "resolute")
RHEL_10 = RHEL_96.replace("9.6 (Plow)", "10.0 (Coughlan)").replace('"9.6"', '"10.0"')
RHEL_10 = RHEL_10.replace("el9", "el10")


def plan(
    raw: dict[str, str], host: str, imex_nodes_value: object = None, **policy: object
) -> HostPlan:
    facts = parse_host(host, raw)
    if imex_nodes_value is not None:
        policy["nvidia_driver_imex_nodes"] = imex_nodes_value
    return plan_host(facts, load_policy(host, policy), default_catalog())


def tray(
    device: int = GB200, *, arch: str = "aarch64", os_release: str = UBUNTU_2404
) -> dict[str, str]:
    """A GB200/GB300 compute tray: 4 GPUs, Grace (aarch64), no driver yet."""
    raw = variant({device: 4}, os_release=os_release)
    raw[names.UNAME_M] = f"{arch}\n# exit=0\n"
    return raw


# --- GB200 / GB300 trays: IMEX, no local fabric manager ------------------------------------


@pytest.mark.parametrize("device", [GB200, GB300])
def test_a_tray_plans_imex_and_no_local_fabric_manager(device: int) -> None:
    p = plan(tray(device), "tray", imex_nodes_value=["10.0.0.1", "10.0.0.2"])
    assert not p.blockers, p.blockers
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_imex"] is True
    assert driver.vars["nvidia_driver_fabricmanager"] is False
    assert driver.vars["nvidia_driver_nvlink5"] is False  # the plan owns it, true or false
    name = "GB200" if device == GB200 else "GB300"
    assert f"{name} compute tray (multi-node NVLink): nvidia-imex at the driver's version" in (
        driver.reason
    )
    assert "IMEX nodes: 10.0.0.1, 10.0.0.2" in driver.reason
    assert "no local fabric manager" in driver.reason


def test_a_tray_without_imex_nodes_is_blocked_naming_the_input() -> None:
    p = plan(tray(), "tray")
    (blocker,) = [b for b in p.blockers if "IMEX" in b]
    assert "nvidia_driver_imex_nodes is empty" in blocker
    assert "fix: set nvidia_driver_imex_nodes to the IP addresses of every compute tray" in blocker


def test_imex_nodes_as_ansible_reads_them() -> None:
    """The knob is read with the policy (the role's argument_specs, then the IP rule): no
    side path past it (issue 46)."""
    nodes = load_policy("h", {"nvidia_driver_imex_nodes": "10.0.0.1,10.0.0.2"})  # INI
    assert nodes["nvidia_driver_imex_nodes"] == ("10.0.0.1", "10.0.0.2")
    assert load_policy("h", {})["nvidia_driver_imex_nodes"] == ()
    # ansible-core splits "a, b" into "a" and " b" and the role's preflight refuses " b"; so
    # does the planner (it dropped blanks and stripped: a plan the role then refused)
    for bad in (["tray-1"], {"a": 1}, "10.0.0.1, 10.0.0.2", "", [""]):
        with pytest.raises(PolicyError) as err:
            load_policy("h", {"nvidia_driver_imex_nodes": bad})
        assert err.value.exit_code == EXIT_BAD_INPUT
        assert "nvidia_driver_imex_nodes" in str(err.value) and "h" in str(err.value)


def test_bad_imex_nodes_anywhere_stop_the_fleet_before_any_plan() -> None:
    variables = {"a": {}, "b": {"nvidia_driver_imex_nodes": ["node-b"]}}
    with pytest.raises(PolicyError, match="not an IP address") as err:
        load_policies(variables)
    assert "b: nvidia_driver_imex_nodes" in str(err.value)


def test_hgx_boards_are_not_trays() -> None:
    raw = variant({HGX_B200: 8}, os_release=DEBIAN_12)
    raw[names.INFINIBAND_VPD] = "mlx5_0 SW_MNG\n# exit=0\n"
    driver = role(plan(raw, "b200"), "nvidia_driver")
    assert driver.vars["nvidia_driver_imex"] is False
    assert driver.vars["nvidia_driver_fabricmanager"] is True


# --- the catalog's Blackwell entries ------------------------------------------------------


def test_b300_and_gb300_are_in_the_catalog_with_their_fabric() -> None:
    catalog = default_catalog()
    b300, gb300, gb200 = catalog.gpu(B300), catalog.gpu(GB300), catalog.gpu(GB200)
    assert b300 is not None and gb300 is not None and gb200 is not None
    assert (b300.model, b300.compute_capability, b300.min_driver) == ("B300", "10.3", "580.82.07")
    assert (gb300.model, gb300.arch, gb300.open_modules) == ("GB300", "blackwell", "required")
    assert gb300.min_driver == "580.82.07"
    assert b300.fabric is not None and b300.fabric.kind == "nvlink5"
    assert b300.fabric.board_gpus == 8
    assert gb300.fabric is not None and gb300.fabric.kind == "imex"
    assert gb200.fabric is not None and gb200.fabric.kind == "imex"
    hgx = catalog.gpu(HGX_B200)
    assert hgx is not None and hgx.fabric is not None and hgx.fabric.kind == "nvlink5"
    # no Blackwell validation floor without a source or a measurement (docs/validation.md)
    for model in catalog.gpus:
        if model.arch == "blackwell":
            assert model.validation == (), model.sku


# --- aarch64: one repository, the sbsa one, in header and package line ----------------------


@pytest.mark.parametrize(("arch", "directory"), list(CUDA_ARCH_DIRS.items()))
@pytest.mark.parametrize(
    "os_release",
    [UBUNTU_2204, UBUNTU_2404, RHEL_96, ROCKY_94],
    ids=["u2204", "u2404", "rhel9", "rocky9"],
)
def test_header_and_package_line_name_one_repository(
    arch: str, directory: str, os_release: str
) -> None:
    raw = variant(
        {0x2335: 2}, os_release=os_release + ("" if "exit" in os_release else "# exit=0\n")
    )
    raw[names.UNAME_M] = f"{arch}\n# exit=0\n"
    p = plan(raw, "h")
    assert p.repository.endswith(f"/{directory}"), p.repository
    driver = role(p, "nvidia_driver")
    assert driver.packages is not None
    url = str(driver.packages["repository"])
    assert url.endswith(f"/compute/cuda/repos/{p.repository}/"), (url, p.repository)
    other = "x86_64" if directory == "sbsa" else "sbsa"
    assert f"/{other}/" not in driver.packages_line
    assert f"/{directory}/" in driver.packages_line


def test_aarch64_amazon_linux_names_the_roles_directory_and_says_it_is_a_lead() -> None:
    raw = variant({0x2335: 2}, os_release=AL2023 + "# exit=0\n")
    raw[names.UNAME_M] = "aarch64\n# exit=0\n"
    p = plan(raw, "h")
    assert p.repository == "amzn2023/aarch64"  # the role's OS data: $(uname -m), a lead
    assert any("amzn2023/aarch64" in w and "lead" in w for w in p.warnings), p.warnings


def test_a_gb200_tray_plan_names_the_sbsa_repository() -> None:
    p = plan(tray(), "tray", imex_nodes_value=["10.0.0.1"])
    assert p.repository == "ubuntu2404/sbsa"
    assert "/ubuntu2404/sbsa/" in role(p, "nvidia_driver").packages_line


# --- dnf >= 590, docker_source on RHEL, new OS releases -----------------------------------


@pytest.mark.parametrize("os_release", [RHEL_96, ROCKY_94, AL2023])
def test_dnf_hosts_at_590_or_later_are_blocked_until_recorded(os_release: str) -> None:
    raw = variant({0x2335: 2}, os_release=os_release + "# exit=0\n")
    p = plan(raw, "h", nvidia_driver_branch=595)
    assert any(
        "R595 on a dnf host" in b and "fix: pin nvidia_driver_branch to 580" in b
        for b in p.blockers
    ), p.blockers
    assert not any("dnf host" in b for b in plan(raw, "h").blockers)  # 580 (default) plans


def test_apt_hosts_at_595_are_not_blocked_by_the_dnf_rule() -> None:
    p = plan(variant({0x2335: 2}, os_release=UBUNTU_2204), "h", nvidia_driver_branch=595)
    assert not any("dnf host" in b for b in p.blockers)


@pytest.mark.parametrize("os_release", [RHEL_96, ROCKY_94])
def test_distribution_docker_on_rhel_is_bad_input(os_release: str) -> None:
    raw = variant({0x2335: 2}, os_release=os_release + "# exit=0\n")
    with pytest.raises(PolicyError) as err:
        plan(raw, "h", docker_source="distribution")
    text = str(err.value)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert "h" in text and "docker_source=distribution" in text
    assert "set docker_source to docker" in text
    # Amazon Linux keeps its own Docker (docker_source=distribution is right there)
    al = variant({0x2335: 2}, os_release=AL2023 + "# exit=0\n")
    assert role(plan(al, "h", docker_source="distribution"), "docker").vars == {
        "docker_source": "distribution"
    }


@pytest.mark.parametrize(
    ("os_release", "name", "why"),
    [
        (UBUNTU_2604, "Ubuntu 26.04", "repos/ubuntu2604"),
        (RHEL_10 + "# exit=0\n", "RHEL 10", "repos/rhel10"),
    ],
)
def test_new_os_releases_stay_blocked_with_the_reason(os_release: str, name: str, why: str) -> None:
    p = plan(variant({0x2335: 2}, os_release=os_release), "h")
    (blocker,) = [b for b in p.blockers if "not supported by gpuprov's driver role" in b]
    assert f"({name}: NVIDIA publishes {why}" in blocker
    assert "the nvidia_driver role has no" in blocker


def test_plan_host_default_keeps_the_old_call() -> None:
    facts = parse_host("h", variant({0x2335: 2}))
    assert plan_host(facts, load_policy("h", {}), default_catalog()).roles


def test_a_grace_capture_without_uname_m_is_planned_for_aarch64() -> None:
    """Issue 47 item 7: a GB200/GH200 capture without `uname -m` was planned from the x86_64
    repository; the catalog says these superchips carry Grace (aarch64)."""
    raw = tray()
    del raw[names.UNAME_M]
    p = plan(raw, "tray", imex_nodes_value=["10.0.0.1"])
    assert p.arch == "aarch64" and p.repository == "ubuntu2404/sbsa"
    assert any(w.startswith("CPU architecture aarch64 from the GPUs (GB200") for w in p.warnings)
    wrong = plan(tray(arch="x86_64"), "tray", imex_nodes_value=["10.0.0.1"])
    assert any("`uname -m` says x86_64 but GB200 is a Grace superchip" in b for b in wrong.blockers)
    assert plan(variant({0x2335: 2}), "h200").arch == ""  # no Grace: nothing derived
