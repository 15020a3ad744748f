"""The simulator's NVLink5 fabric (profile hgx-b200): the SW_MNG management port in
/sys/class/infiniband, mlx5_core at boot, ib_umad by modprobe or modules-load.d, Fabric State
Completed only with the fabric manager running and both modules loaded; and the probe's own
shell section, the parser and the planner on what it renders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.smi_q import fabric_states
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script, split_output

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpusim"))
from gpusim.testing import SimHost  # noqa: E402

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
DEBIAN_12 += "VERSION_CODENAME=bookworm\n# exit=0\n"


def b200(tmp_path: Path) -> SimHost:
    host = SimHost.create(tmp_path, "hgx-b200")
    host.install_driver()
    host.boot()
    return host


def modules(host: SimHost) -> list[str]:
    return [line.split()[0] for line in (host.root / "proc/modules").read_text().splitlines()]


def fabric(host: SimHost) -> set[str]:
    return {state for state, _ in fabric_states(host.smi("-q").captured).values()}


def fabricmanager(host: SimHost, running: bool) -> None:
    flag = host.root / "run/gpusim/fabricmanager-active"
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch() if running else flag.unlink(missing_ok=True)


def test_boot_shows_the_management_port_and_its_driver(tmp_path: Path) -> None:
    host = b200(tmp_path)
    vpd = host.root / "sys/class/infiniband/mlx5_0/device/vpd"
    assert b"SW_MNG" in vpd.read_bytes()
    assert "mlx5_core" in modules(host) and "ib_umad" not in modules(host)
    assert "nvidia" in modules(host)


def test_fabric_needs_ib_umad_and_the_fabric_manager(tmp_path: Path) -> None:
    host = b200(tmp_path)
    assert fabric(host) == {"Not Started"}
    fabricmanager(host, True)
    assert fabric(host) == {"Not Started"}  # ib_umad not loaded: the precheck fails
    assert host.modprobe("ib_umad").code == 0
    assert "ib_umad" in modules(host)
    assert fabric(host) == {"Completed"}
    fabricmanager(host, False)
    assert fabric(host) == {"Not Started"}
    assert host.modprobe("-r", "ib_umad").code == 0
    assert "ib_umad" not in modules(host)


def test_modules_load_d_loads_ib_umad_at_boot(tmp_path: Path) -> None:
    host = b200(tmp_path)
    conf = host.root / "etc/modules-load.d/ib-umad.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("# as the driver role writes it\nib_umad\n")
    host.boot()  # a reboot
    assert {"mlx5_core", "ib_umad", "nvidia"} <= set(modules(host))


def test_other_profiles_have_no_infiniband(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path, "p5.48xlarge")
    host.boot()
    assert not (host.root / "sys/class/infiniband").exists()
    assert names.INFINIBAND_VPD not in host.raw()


def test_the_probe_section_and_the_planner_on_the_simulated_port(tmp_path: Path) -> None:
    host = b200(tmp_path)
    infiniband = host.root / "sys/class/infiniband"
    script = probe_script().replace("/sys/class/infiniband", str(infiniband))
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    probed = split_output("sim", out.stdout)[names.INFINIBAND_VPD]
    raw = host.raw()
    assert raw[names.INFINIBAND_VPD] == probed == "mlx5_0 SW_MNG\n# exit=0\n"
    raw[names.OS_RELEASE] = DEBIAN_12
    facts = parse_host("b200", raw)
    assert facts.errors == ()
    assert facts.nvlink5 and facts.nvlink5_missing_modules == ("ib_umad",)
    assert facts.simulated
    p = plan_host(facts, load_policy("b200", {}), default_catalog())
    driver = next(r for r in p.roles if r.name == "nvidia_driver")
    assert driver.vars["nvidia_driver_nvlink5"] is True
    assert driver.vars["nvidia_driver_fabricmanager"] is True
    assert p.gpu_summary == "8x HGX B200 (simulated)"
