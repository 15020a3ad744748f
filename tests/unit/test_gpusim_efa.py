"""The simulator's EFA devices (profile p5.48xlarge-efa, gpusim/efa.py): PCI functions always,
efa_<n> in /sys/class/infiniband and uverbs nodes only once a built efa module is loaded, the
three faults; and the probe's own rdma section, the parser, the planner and fabric health on
what it renders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script, split_output
from orchestrator.validate.fabric import fabric_input, run_fabric

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpusim"))
from gpusim.testing import SimHost  # noqa: E402

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
DEBIAN_12 += "VERSION_CODENAME=bookworm\n# exit=0\n"


def p5(tmp_path: Path, *, module: bool = True) -> SimHost:
    host = SimHost.create(tmp_path, "p5.48xlarge-efa")
    if module:  # what DKMS leaves once it built the EFA installer's module
        kernel = host.paths.kernel_release_file.read_text().strip()
        built = host.root / f"lib/modules/{kernel}/updates/dkms/efa.ko"
        built.parent.mkdir(parents=True, exist_ok=True)
        built.write_bytes(b"\x7fELF simulated")
    host.boot()
    return host


def probed(host: SimHost) -> dict[str, str]:
    script = probe_script().replace(
        "/sys/class/infiniband", str(host.root / "sys/class/infiniband")
    )
    script = script.replace("/dev/infiniband", str(host.root / "dev/infiniband"))
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    raw = host.raw()
    raw[names.RDMA] = split_output("sim", out.stdout)[names.RDMA]
    raw[names.OS_RELEASE] = DEBIAN_12
    return raw


def efa_names(host: SimHost) -> list[str]:
    root = host.root / "sys/class/infiniband"
    return sorted((p.name for p in root.glob("efa_*")), key=lambda n: int(n[4:]))


def test_functions_always_devices_only_with_the_module_loaded(tmp_path: Path) -> None:
    bare = p5(tmp_path / "bare", module=False)
    assert len(list((bare.root / "sys/bus/pci/devices").glob("0000:*"))) == 8 + 4 + 32
    assert efa_names(bare) == []
    refused = bare.modprobe("efa")  # nothing built: the real modprobe answers (not found)
    assert refused.code != 0
    host = p5(tmp_path / "built")
    assert efa_names(host) == [f"efa_{n}" for n in range(32)]
    assert "efa" in (host.root / "proc/modules").read_text().split()
    assert len(list((host.root / "dev/infiniband").glob("uverbs*"))) == 32
    assert host.modprobe("-r", "efa").code == 0 and efa_names(host) == []
    assert host.modprobe("efa").code == 0 and len(efa_names(host)) == 32


def test_the_probe_the_planner_and_fabric_health_on_the_simulated_devices(tmp_path: Path) -> None:
    host = p5(tmp_path)
    facts = parse_host("p5", probed(host))
    assert facts.errors == () and facts.simulated and facts.fabric is not None
    assert len(facts.fabric.devices) == 32 and len(facts.fabric.uverbs) == 32
    assert facts.fabric.devices[0].pci == "0000:10:00.0"
    assert facts.fabric.devices[0].device_id == 0xEFA1
    port = facts.fabric.devices[0].ports[0]
    assert (port.state, port.phys_state, port.rate_gbps) == ("ACTIVE", "LinkUp", 100.0)
    plan = plan_host(facts, load_policy("p5", {}), default_catalog())
    assert [r.name for r in plan.roles][-1] == "efa"
    results = run_fabric(fabric_input(facts, instance_type="p5.48xlarge"))
    bad = [r.diagnosis for r in results if r.status == "fail"]
    # no installer yet: no fi_info and no plugin; the devices and links are fine
    assert bad[0].startswith("p5: no fi_info") and "aws-ofi-nccl plugin is missing" in bad[1]
    assert len(bad) == 2


def test_faults_change_exactly_what_the_checks_read(tmp_path: Path) -> None:
    host = p5(tmp_path)
    assert host.gpusim("efa", "missing", "on", "--device", "31").code == 0
    assert host.gpusim("efa", "rate", "on", "--device", "7").code == 0
    assert host.gpusim("efa", "down", "on", "--device", "3").code == 0
    assert host.gpusim("efa", "rate", "on", "--device", "40").code == 2
    facts = parse_host("p5", probed(host))
    results = run_fabric(fabric_input(facts, instance_type="p5.48xlarge"))
    lines = [r.diagnosis for r in results if r.status == "fail"]
    assert any(ln.startswith("p5: 31 of 32 EFA devices") and "missing efa_31" in ln for ln in lines)
    assert any(ln.startswith("p5: EFA device efa_7 port 1 at 25 Gb/s") for ln in lines)
    assert any(ln.startswith("p5: EFA device efa_3 port 1 is DOWN") for ln in lines)
    assert not (host.root / "sys/bus/pci/devices/0000:2f:00.0").exists()
    host.gpusim("efa", "missing", "off", "--device", "31")
    assert len(efa_names(host)) == 32


def test_simulated_infiniband_hcas_probe_plan_and_health(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path, "hgx-h100-ib")
    host.boot()
    facts = parse_host("ib", probed(host))
    assert facts.errors == () and facts.fabric is not None
    assert [d.name for d in facts.fabric.devices] == [f"mlx5_ib{n}" for n in range(8)]
    assert len(facts.fabric.uverbs) == 8
    port = facts.fabric.devices[0].ports[0]
    assert (port.state, port.rate_gbps, port.link_layer) == ("ACTIVE", 400.0, "InfiniBand")
    plan = plan_host(facts, load_policy("ib", {}), default_catalog())
    assert [r.name for r in plan.roles][-1] == "infiniband" and "efa" not in [
        r.name for r in plan.roles
    ]
    assert [
        r for r in run_fabric(fabric_input(facts, expected_devices=8)) if r.status == "fail"
    ] == []
    assert host.gpusim("ib", "rate", "on", "--device", "5").code == 0
    results = run_fabric(fabric_input(parse_host("ib", probed(host))))
    (bad,) = [r for r in results if r.status == "fail"]
    assert bad.diagnosis.startswith("ib: InfiniBand device mlx5_ib5 port 1 at 200 Gb/s")


def test_a_bare_infiniband_host_gets_the_role_and_its_devices_once_mlx5_ib_loads(
    tmp_path: Path,
) -> None:
    """Profile hgx-h100-ib-bare (issue 47): ConnectX-7 functions of class 0x0207 on the PCI
    bus, no RDMA device until mlx5_ib is loaded (by modprobe, or at boot from
    /etc/modules-load.d, what the infiniband role writes)."""
    host = SimHost.create(tmp_path, "hgx-h100-ib-bare")
    host.boot()
    facts = parse_host("ib", probed(host))
    assert facts.errors == () and facts.fabric is not None and facts.fabric.devices == ()
    hcas = [d for d in facts.pci if d.vendor_id == 0x15B3]
    assert len(hcas) == 8 and {(d.device_id, d.class_code) for d in hcas} == {(0x1021, 0x020700)}
    plan = plan_host(facts, load_policy("ib", {}), default_catalog())
    ib = next(r for r in plan.roles if r.name == "infiniband")
    assert ib.reason.startswith("8 InfiniBand HCAs on the PCI bus (0000:30:00.0,")
    (bad,) = [r for r in run_fabric(fabric_input(facts)) if r.status == "fail"]
    assert bad.name == "ib_devices" and "without an RDMA device" in bad.diagnosis
    assert host.modprobe("mlx5_ib").code == 0
    facts = parse_host("ib", probed(host))
    assert facts.fabric is not None and len(facts.fabric.devices) == 8
    assert [r for r in run_fabric(fabric_input(facts)) if r.status == "fail"] == []
    assert host.modprobe("-r", "mlx5_ib").code == 0
    conf = host.root / "etc/modules-load.d/gpuprov-mlx5-ib.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("mlx5_ib\n")
    host.boot()  # the next boot loads it from modules-load.d
    assert "mlx5_ib" in (host.root / "proc/modules").read_text().split()
    assert len(list((host.root / "sys/class/infiniband").glob("mlx5_ib*"))) == 8
