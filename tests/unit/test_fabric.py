"""The fabric (issue 30): detection's rdma/fi_info/ibstatus parsers, the planner's efa role and
GPUDirect choice, and fabric health, on captures SHAPED from the reference
(tests/unit/data/fabric-shaped/README.md; no real EFA or InfiniBand capture exists) over the
real 2x H200 fixture."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.facts import HostFacts, LoadedDriver
from orchestrator.parsers import parse_host
from orchestrator.parsers.fabric import parse_fi_info, parse_ibstatus, parse_rdma, rate_gbps
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.result import CheckResult
from orchestrator.validate.fabric import fabric_input, run_fabric
from orchestrator.validate.junit import suite_of

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
SHAPED = Path(__file__).resolve().parent / "data" / "fabric-shaped"
PLUGIN = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so"
DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
DEBIAN_12 += "VERSION_CODENAME=bookworm\n# exit=0\n"
ROCKY_9 = 'PRETTY_NAME="Rocky Linux 9.4"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
ROCKY_9 += 'VERSION_ID="9.4"\n# exit=0\n'


def shaped(name: str) -> str:
    return (SHAPED / name).read_text()


def efa_pci(count: int, device: int = 0xEFA1) -> list[str]:
    return [
        f"0000:{0x10 + n:02x}:00.0 vendor=0x1d0f device={device:#06x} class=0x020000 "
        "subsystem_vendor=0x1d0f subsystem_device=0x0000 "
        'current_link_speed="" current_link_width= max_link_speed="" max_link_width= '
        "numa_node=0 driver=efa"
        for n in range(count)
    ]


def efa_rdma(
    count: int = 32,
    *,
    missing: tuple[int, ...] = (),
    rates: dict[int, str] | None = None,
    down: tuple[int, ...] = (),
    plugin: bool = True,
    installer: str | None = "1.41.0",
) -> str:
    """rdma.txt of a p5.48xlarge (32 EFA devices, efa.instance_types), in the probe's format."""
    lines = []
    for n in range(count):
        if n in missing:
            continue
        state = '"1: DOWN" phys_state="3: Disabled"' if n in down else '"4: ACTIVE"'
        state += "" if n in down else ' phys_state="5: LinkUp"'
        rate = (rates or {}).get(n, "100 Gb/sec")
        lines.append(f"device efa_{n} pci=0000:{0x10 + n:02x}:00.0 vendor=0x1d0f device=0xefa1")
        lines.append(f'port efa_{n} 1 state={state} rate="{rate}" link_layer=""')
        lines.append(f"uverbs uverbs{n}")
    lines.append("memlock unlimited")
    if installer:
        lines.append(f"efa_installer {installer}")
    if plugin:
        lines.append(f"ofi_nccl {PLUGIN}")
    return "\n".join(lines) + "\n# exit=0\n"


def fi_info(count: int = 32, missing: tuple[int, ...] = ()) -> str:
    blocks = [
        f"provider: efa\n    fabric: {fabric}\n    domain: efa_{n}-rdm\n    type: FI_EP_RDM\n"
        "    protocol: FI_PROTO_EFA\n"
        for n in range(count)
        if n not in missing
        for fabric in ("efa-direct", "efa")
    ]
    return "".join(blocks) + "# exit=0\n"


def host(
    *,
    efa: int = 0,
    device: int = 0xEFA1,
    rdma: str | None = None,
    fi: str | None = None,
    os_release: str | None = None,
    extra: dict[str, str] | None = None,
) -> HostFacts:
    raw = {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}
    if efa:
        pci = [ln for ln in raw["sysfs-pci-devices.txt"].splitlines() if not ln.startswith("#")]
        raw["sysfs-pci-devices.txt"] = "\n".join(pci + efa_pci(efa, device)) + "\n# exit=0\n"
    if rdma is not None:
        raw["rdma.txt"] = rdma
    if fi is not None:
        raw["fi-info-efa.txt"] = fi
    if os_release:
        raw["os-release.txt"] = os_release
    raw.update(extra or {})
    return parse_host("n1", raw)


# --- detection -----------------------------------------------------------------------------


def test_rdma_of_an_efa_host_parses_into_typed_facts() -> None:
    fabric = parse_rdma(efa_rdma())
    assert len(fabric.devices) == 32 and len(fabric.uverbs) == 32
    first = fabric.devices[0]
    assert (first.name, first.pci, first.vendor_id, first.device_id) == (
        "efa_0",
        "0000:10:00.0",
        0x1D0F,
        0xEFA1,
    )
    assert first.ports[0].state == "ACTIVE" and first.ports[0].phys_state == "LinkUp"
    assert first.ports[0].rate_gbps == 100.0
    assert fabric.memlock_unlimited and fabric.efa_installer == "1.41.0"
    assert fabric.ofi_nccl == (PLUGIN,)


def test_rdma_of_an_infiniband_host_and_ibstatus_agree() -> None:
    fabric = parse_rdma(shaped("rdma-ib.txt"))
    ports = [p for d in fabric.devices for p in d.ports]
    assert [d.name for d in fabric.devices] == [f"mlx5_ib{n}" for n in range(8)]
    assert {(p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports} == {
        ("ACTIVE", "LinkUp", 400.0, "InfiniBand")
    }
    assert fabric.peermem == ("/sys/module/nvidia_peermem/version",)
    status = parse_ibstatus(shaped("ibstatus.txt"))
    assert [(p.device, p.port, p.state, p.rate_gbps) for p in status] == [
        (p.device, p.port, p.state, p.rate_gbps) for p in ports
    ]


def test_fi_info_counts_each_domain_once_and_knows_the_broken_case() -> None:
    ok = parse_fi_info(shaped("fi-info-efa.txt"))
    assert ok.domains == ("efa_0-rdm", "efa_1-rdm") and ok.ok
    broken = parse_fi_info(shaped("fi-info-efa-broken.txt"))
    assert broken.domains == () and broken.exit_code == 1 and not broken.ok


@pytest.mark.parametrize(
    ("text", "gbps"), [("400 Gb/sec (4X NDR)", 400.0), ("100 Gb/sec", 100.0), ("", None)]
)
def test_rate(text: str, gbps: float | None) -> None:
    assert rate_gbps(text) == gbps


@pytest.mark.parametrize(
    "line",
    ["device", "port efa_0 x state=1", "port efa_9 1 state=4", "gadget 3", "device efa_0 pci"],
)
def test_a_line_the_parser_cannot_read_costs_that_line_only(line: str) -> None:
    """Issue 48: one unknown rdma.txt line dropped the whole fabric (a ParseError)."""
    good = efa_rdma(2).replace("# exit=0\n", "")
    fabric = parse_rdma(good + line + "\n# exit=0\n")
    assert [d.name for d in fabric.devices] == ["efa_0", "efa_1"]
    assert fabric.unread and fabric.unread[0].startswith(line.split()[0])


def test_an_unknown_rdma_line_keeps_the_fabric_and_the_plan_names_the_file() -> None:
    facts = host(efa=2, rdma=efa_rdma(2).replace("# exit=0", "gadget 3\n# exit=0"))
    assert facts.fabric is not None and len(facts.fabric.devices) == 2
    assert not any(e.startswith("rdma.txt") for e in facts.errors)
    _reasons, warnings = plan_of(facts)
    assert any(
        w.startswith("rdma.txt: 1 line(s) not understood") and "'gadget 3'" in w for w in warnings
    ), warnings


def test_the_host_parser_joins_fi_info_and_ibstatus() -> None:
    facts = host(efa=2, rdma=efa_rdma(2), fi=shaped("fi-info-efa.txt"))
    assert facts.fabric is not None and facts.fabric.fi_info is not None
    assert facts.fabric.fi_info.domains == ("efa_0-rdm", "efa_1-rdm")
    assert facts.fabric.ibstatus is None  # no ibstatus on the host
    assert host().fabric is None  # the real fixture predates the capture


# --- planning ------------------------------------------------------------------------------


def plan_of(facts: HostFacts, **knobs: object) -> tuple[dict[str, str], tuple[str, ...]]:
    p = plan_host(facts, load_policy(facts.host, knobs), default_catalog())
    return {r.name: r.reason for r in p.roles}, p.warnings


# Sha256 of an installer the role does not pin: the plan blocks without one (tested below it is
# not the subject), so these cases give one.
SHA = "0" * 64


def test_efa_joins_the_plan_and_says_gpudirect_is_not_dmabuf_on_efa1_with_installer_1_41() -> None:
    """Issue 47 item 8: the installer the role pins (1.41.0) bundles aws-ofi-nccl 1.14.2, which
    turns DMA-BUF off on EFA device ids 0xefa0-0xefa2, open modules or not."""
    facts = host(efa=32, rdma=efa_rdma(installer=None))
    assert facts.loaded_driver is not None and facts.loaded_driver.flavour == "open"
    reasons, _ = plan_of(facts)
    assert "efa" in reasons and list(reasons)[-1] == "efa"
    reason = reasons["efa"]
    assert reason.startswith("32 EFA devices on the PCI bus (1d0f:efa1): install the EFA")
    assert (
        "GPUDirect RDMA by peer memory, not DMA-BUF: aws-ofi-nccl 1.14.2 (EFA installer 1.41.0)"
        in reason
    )
    assert "here 0xefa1; DMA-BUF from aws-ofi-nccl 1.19.2" in reason
    assert "pinned by the efa module through efa_nv_peermem" in reason
    assert "dmabuf" not in reason and "-g" not in reason
    plan = plan_host(facts, load_policy("n1", {}), default_catalog())
    # nothing in the role chooses GPUDirect: it gets the installer version only
    assert next(r for r in plan.roles if r.name == "efa").vars == {
        "efa_installer_version": "1.41.0"
    }


def test_efa_gpudirect_by_dmabuf_where_the_bundled_plugin_uses_it() -> None:
    facts = host(efa=32, rdma=efa_rdma(installer=None))
    newer = {"efa_installer_version": "1.50.0", "efa_installer_sha256": SHA}
    reasons, _ = plan_of(facts, **newer)
    assert (
        "GPUDirect RDMA by DMA-BUF: aws-ofi-nccl 1.21.1 (EFA installer 1.50.0) on 0xefa1, "
        "the open kernel modules on Linux 6.18" in reasons["efa"]
    )
    # a later EFA generation keeps DMA-BUF with 1.14.2 already
    efa3 = host(efa=16, device=0xEFA3, rdma=efa_rdma(16, installer=None))
    reasons, _ = plan_of(efa3)
    assert (
        "GPUDirect RDMA by DMA-BUF: aws-ofi-nccl 1.14.2 (EFA installer 1.41.0) on 0xefa3"
        in reasons["efa"]
    )


def test_efa_peer_memory_where_the_plugin_would_use_dmabuf_but_the_driver_or_kernel_cannot() -> (
    None
):
    facts = host(efa=32, rdma=efa_rdma())
    proprietary = dataclasses.replace(
        facts, loaded_driver=LoadedDriver("580.159.04", "proprietary", "")
    )
    knobs = {
        "nvidia_driver_flavour": "proprietary",
        "efa_installer_version": "1.50.0",
        "efa_installer_sha256": SHA,
    }
    reasons, _ = plan_of(proprietary, **knobs)
    assert (
        "GPUDirect RDMA by peer memory, not DMA-BUF: aws-ofi-nccl 1.21.1 (EFA installer "
        "1.50.0) uses DMA-BUF on 0xefa1, but not with the proprietary kernel modules"
        in reasons["efa"]
    )
    assert (
        "nvidia.ko's nvidia_p2p_* (efa_nv_peermem loads with the open modules only)"
        in reasons["efa"]
    )
    old_kernel = dataclasses.replace(facts, kernel="5.10.0-30-amd64")
    reasons, _ = plan_of(old_kernel, efa_installer_version="1.50.0", efa_installer_sha256=SHA)
    assert "but not with Linux 5.10 (the plugin's floors: Linux >= 5.12" in reasons["efa"]


def test_efa_gpudirect_unknown_where_the_installers_plugin_is_not_recorded() -> None:
    facts = host(efa=32, rdma=efa_rdma(installer=None))
    reasons, _ = plan_of(facts, efa_installer_version="1.36.0")
    assert (
        "GPUDirect RDMA path unknown: the aws-ofi-nccl that EFA installer 1.36.0 bundles "
        "is not recorded" in reasons["efa"]
    )


def test_the_fleets_expected_gpudirect_blocks_a_host_that_will_not_run_it() -> None:
    facts = host(efa=32, rdma=efa_rdma(installer=None))
    plan = plan_host(
        facts, load_policy("n1", {"gpuprov_fabric_efa_gpudirect": "dmabuf"}), default_catalog()
    )
    (blocker,) = plan.blockers
    assert blocker.startswith(
        "gpuprov_fabric_efa_gpudirect=dmabuf, but GPUDirect RDMA by peer memory"
    )
    assert "the EFA installer's -g has not chosen GPUDirect since 1.14.0" in blocker
    assert "EFA installer 1.50.0 bundles 1.21.1" in blocker
    plan = plan_host(
        facts, load_policy("n1", {"gpuprov_fabric_efa_gpudirect": "peermem"}), default_catalog()
    )
    assert plan.blockers == ()
    unknown = {"gpuprov_fabric_efa_gpudirect": "peermem", "efa_installer_version": "1.36.0"}
    plan = plan_host(facts, load_policy("n1", unknown), default_catalog())
    assert [b for b in plan.blockers if "path unknown" in b]


def test_efa_gpudirect_is_retired_for_the_fleet_knob() -> None:
    from orchestrator.errors import PolicyError

    with pytest.raises(
        PolicyError, match=r"efa_gpudirect .* did you mean gpuprov_fabric_efa_gpudirect"
    ):
        load_policy("n1", {"efa_gpudirect": "peermem"})


def test_an_installed_version_is_checked_not_reinstalled_and_the_inventory_wins() -> None:
    facts = host(efa=32, rdma=efa_rdma(installer="1.41.0"))
    reasons, _ = plan_of(facts)
    assert "EFA installer 1.41.0 present: the role checks it" in reasons["efa"]
    reasons, _ = plan_of(facts, efa_installer_version="1.36.0")
    assert "EFA installer 1.41.0 -> 1.36.0" in reasons["efa"]


def test_nothing_on_hosts_without_such_nics() -> None:
    reasons, warnings = plan_of(host())
    assert "efa" not in reasons
    assert not [w for w in warnings if "EFA" in w or "InfiniBand" in w]


def test_infiniband_hosts_get_the_role_and_nvlink5_management_ports_are_not_hcas() -> None:
    facts = host(rdma=shaped("rdma-ib.txt"))  # peermem loaded, open modules, Linux 6.8
    plan = plan_host(facts, load_policy("n1", {}), default_catalog())
    ib = next(r for r in plan.roles if r.name == "infiniband")
    assert ib.reason.startswith("8 InfiniBand HCAs (mlx5_ib0, mlx5_ib1")
    # the role's own default stack (issue 46: no second knob with another default)
    assert "the distribution's rdma-core" in ib.reason and "GPUDirect RDMA by dmabuf" in ib.reason
    assert ib.vars == {"infiniband_stack": "distribution", "infiniband_gpudirect": "dmabuf"}
    assert "efa" not in [r.name for r in plan.roles]
    doca = {"infiniband_stack": "doca", "infiniband_doca_base_url": "https://doca.example/"}
    reasons, _ = plan_of(facts, **doca)
    assert "DOCA-OFED" in reasons["infiniband"]
    vpd = "mlx5_ib0 SW_MNG\n# exit=0\n"
    facts = host(rdma=shaped("rdma-ib.txt"), extra={"infiniband-vpd.txt": vpd})
    reasons, _ = plan_of(facts)
    assert reasons["infiniband"].startswith("7 InfiniBand HCAs (mlx5_ib1,")


def test_infiniband_gpudirect_peermem_with_doca_only() -> None:
    from orchestrator.errors import PolicyError

    facts = host(rdma=shaped("rdma-ib.txt"))
    prop = dataclasses.replace(facts, kernel="5.10.0-30-amd64")
    doca = {"infiniband_stack": "doca", "infiniband_doca_base_url": "https://doca.example/"}
    plan = plan_host(prop, load_policy("n1", doca), default_catalog())
    assert next(r for r in plan.roles if r.name == "infiniband").vars["infiniband_gpudirect"] == (
        "peermem"
    )
    _, warnings = plan_of(prop, infiniband_stack="distribution")
    assert any(w.startswith("no GPUDirect RDMA path on this InfiniBand host") for w in warnings)
    policy = load_policy(
        "n1", {"infiniband_stack": "distribution", "infiniband_gpudirect": "peermem"}
    )
    with pytest.raises(PolicyError, match="nvidia_peermem needs MOFED"):
        plan_host(facts, policy, default_catalog())


def test_efa_is_not_planned_where_the_role_has_no_os_data() -> None:
    reasons, warnings = plan_of(host(efa=4, rdma=efa_rdma(4), os_release=ROCKY_9))
    assert "efa" not in reasons
    assert any("OS data for Debian and Ubuntu only" in w for w in warnings)


def test_gdrcopy_asked_is_said_not_done() -> None:
    _, warnings = plan_of(host(efa=4, rdma=efa_rdma(4)), gpuprov_fabric_gdrcopy=True)
    assert any("GDRCopy is not built by gpuprov yet" in w for w in warnings)


def test_fabric_knobs_are_bad_input_when_wrong() -> None:
    from orchestrator.errors import PolicyError

    with pytest.raises(PolicyError, match="gpuprov_fabric_expected_devices"):
        load_policy("n1", {"gpuprov_fabric_expected_devices": -1})
    with pytest.raises(PolicyError, match="gpuprov_fabric_efa_gpudirect"):
        load_policy("n1", {"gpuprov_fabric_efa_gpudirect": "rdma"})
    with pytest.raises(PolicyError, match="gpuprov_fabric_efa_gpudirect"):
        load_policy("n1", {"gpuprov_fabric_efa_gpudirect": "none"})  # -g never turned it off


# --- fabric health -------------------------------------------------------------------------


def health(facts: HostFacts, **expect: object) -> list[CheckResult]:
    return run_fabric(fabric_input(facts, **expect))  # type: ignore[arg-type]


def failures(results: list[CheckResult]) -> list[str]:
    return [r.diagnosis for r in results if r.status == "fail"]


def healthy_p5(**changes: object) -> HostFacts:
    return host(efa=32, rdma=efa_rdma(**changes), fi=fi_info())  # type: ignore[arg-type]


def test_a_healthy_p5_passes() -> None:
    results = health(healthy_p5(), instance_type="p5.48xlarge")
    assert {r.name for r in results} == {
        "efa_devices",
        "efa_uverbs",
        "efa_link",
        "efa_provider",
        "efa_plugin",
        "memlock",
        "gpudirect",
    }
    assert failures(results) == [], results
    assert {suite_of(r) for r in results} == {"fabric"}


def test_a_removed_device_is_named() -> None:
    facts = host(efa=31, rdma=efa_rdma(missing=(31,)), fi=fi_info(missing=(31,)))
    (line,) = failures(health(facts, instance_type="p5.48xlarge"))
    assert line.startswith("n1: 31 of 32 EFA devices (a p5.48xlarge has 32): missing efa_31;")
    assert "\n" not in line
    (line,) = failures(health(facts, expected_devices=32))
    assert "(gpuprov_fabric_expected_devices): missing efa_31" in line


def test_a_missing_plugin_is_named() -> None:
    (line,) = failures(health(healthy_p5(plugin=False), instance_type="p5.48xlarge"))
    assert line.startswith("n1: the aws-ofi-nccl plugin is missing (none of libnccl-net-ofi.so")
    assert "fall back to TCP sockets" in line


def test_a_link_at_the_wrong_rate_or_down_is_named() -> None:
    results = health(healthy_p5(rates={7: "25 Gb/sec"}), instance_type="p5.48xlarge")
    (bad,) = [r for r in results if r.status == "fail"]
    assert bad.label == "efa_link[efa_7]" and suite_of(bad) == "fabric"
    assert bad.diagnosis.startswith("n1: EFA device efa_7 port 1 at 25 Gb/s, expected 100 Gb/s")
    assert "(the rate of 31 of the host's 32 EFA ports)" in bad.diagnosis
    (line,) = failures(health(healthy_p5(down=(3,))))
    assert line.startswith("n1: EFA device efa_3 port 1 is DOWN (Disabled), not ACTIVE/LinkUp")
    # the inventory's rate: every port below it fails
    lines = failures(health(healthy_p5(), link_rate_gbps=200))
    assert len(lines) == 32 and "expected 200 Gb/s (gpuprov_fabric_link_rate_gbps)" in lines[0]


def test_no_efa_provider_is_named() -> None:
    facts = host(efa=32, rdma=efa_rdma(), fi=shaped("fi-info-efa-broken.txt"))
    (line,) = failures(health(facts))
    assert line.startswith("n1: `fi_info -p efa -t FI_EP_RDM` lists no efa provider (exit 1)")
    facts = host(efa=32, rdma=efa_rdma(), fi=fi_info(missing=(5,)))
    (line,) = failures(health(facts))
    assert "has no efa RDM domain for efa_5" in line
    (line,) = failures(health(host(efa=32, rdma=efa_rdma())))
    assert line.startswith("n1: no fi_info")


def test_an_expected_efa_host_without_any_device_fails() -> None:
    (line,) = failures(health(host(), instance_type="p5.48xlarge"))
    assert line.startswith("n1: 0 of 32 EFA devices (a p5.48xlarge has 32): missing efa_0, efa_1")


def test_no_fabric_checks_on_hosts_without_such_nics() -> None:
    assert health(host()) == []


def test_efa_gpudirect_health_reports_what_the_installed_plugin_does() -> None:
    """Issue 47 item 8: on a p5-shaped host (0xefa1) with installer 1.41.0 the value is peer
    memory, not DMA-BUF, open modules or not; the proprietary modules are no failure on EFA
    (the efa module pins GPU memory through nvidia.ko's P2P API, no nvidia_peermem)."""
    facts = healthy_p5()
    assert facts.loaded_driver is not None and facts.loaded_driver.flavour == "open"
    (gd,) = [r for r in health(facts) if r.name == "gpudirect"]
    assert (gd.status, gd.value) == ("pass", "peermem")
    prop = dataclasses.replace(facts, loaded_driver=LoadedDriver("580.159.04", "proprietary", ""))
    (gd,) = [r for r in health(prop) if r.name == "gpudirect"]
    assert (gd.status, gd.value) == ("pass", "peermem")
    newer = healthy_p5(installer="1.50.0")
    (gd,) = [r for r in health(newer) if r.name == "gpudirect"]
    assert (gd.status, gd.value) == ("pass", "dmabuf")
    unknown = healthy_p5(installer="1.36.0")
    (gd,) = [r for r in health(unknown) if r.name == "gpudirect"]
    assert gd.status == "skip" and "EFA installer 1.36.0 bundles is not recorded" in gd.diagnosis
    (gd,) = [
        r for r in health(dataclasses.replace(facts, loaded_driver=None)) if r.name == "gpudirect"
    ]
    assert gd.status == "skip"


def test_infiniband_health() -> None:
    facts = host(rdma=shaped("rdma-ib.txt"))
    results = health(facts, expected_devices=8)
    assert failures(results) == []
    assert {r.name for r in results} == {"ib_devices", "ib_link", "memlock", "gpudirect"}
    slow = shaped("rdma-ib.txt").replace(
        'port mlx5_ib2 1 state="4: ACTIVE" phys_state="5: LinkUp" rate="400 Gb/sec (4X NDR)"',
        'port mlx5_ib2 1 state="4: ACTIVE" phys_state="5: LinkUp" rate="200 Gb/sec (4X HDR)"',
    )
    (line,) = failures(health(host(rdma=slow), link_rate_gbps=400))
    assert line.startswith("n1: InfiniBand device mlx5_ib2 port 1 at 200 Gb/s, expected 400")
    (line,) = failures(health(host(rdma=slow), expected_devices=9, link_rate_gbps=100))
    assert line.startswith("n1: 8 of 9 InfiniBand HCAs")
