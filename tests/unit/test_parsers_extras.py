"""The extra probes (packages, services, Docker, toolkit, Secure Boot) and error handling."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import H200 as REAL

from orchestrator.errors import BadInputError
from orchestrator.factsdir import load_dir, load_host, save_dir
from orchestrator.parsers import names, parse_host, split_exit
from orchestrator.parsers._text import ParseError, int_value, value
from orchestrator.parsers.driver_version import parse_driver_version
from orchestrator.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status
from orchestrator.parsers.packages import parse_dpkg_query, parse_rpm_query
from orchestrator.parsers.runtime import (
    parse_cdi_specs,
    parse_ctk_version,
    parse_daemon_json,
    parse_docker_info,
)
from orchestrator.parsers.secure_boot import parse_secure_boot
from orchestrator.parsers.services import parse_services
from orchestrator.parsers.smi_list import parse_smi_list
from orchestrator.parsers.smi_q import parse_smi_q
from orchestrator.parsers.smi_query_gpu import normalise_bus_id, parse_query_gpu
from orchestrator.parsers.smi_version import parse_smi_version
from orchestrator.parsers.sysfs_pci import parse_sysfs_pci
from orchestrator.parsers.topo import parse_topo

DPKG = """\
libnvidia-compute-580:amd64\t580.159.04-0ubuntu1\thold\tinstalled
nvidia-driver-580-server-open\t580.159.04-0ubuntu1\thold\tinstalled
nvidia-fabricmanager-580\t580.159.04-1\tinstall\tinstalled
nvidia-container-toolkit\t1.17.8-1\thold\tinstalled
docker-ce\t\tunknown\tnot-installed
nvidia-driver-535\t535.261.03-0ubuntu1\tdeinstall\tconfig-files
# exit=1
"""


def test_split_exit() -> None:
    out = split_exit("a\nb\n# exit=9\n")
    assert (out.body, out.exit_code, out.ok) == ("a\nb\n", 9, False)
    assert split_exit("# exit=0\n") == split_exit("# exit=0").__class__("", 0)
    assert split_exit("no trailer\n").exit_code is None and split_exit("x").ok
    assert split_exit("x\n\n# exit=0\n").body == "x\n\n"  # blank lines of the output kept


def test_no_value_spellings() -> None:
    assert value("[N/A]") is None and value("N/A") is None and value("[Not Supported]") is None
    assert value(" Enabled ") == "Enabled"
    assert int_value("143771 MiB") == 143771 and int_value("0x233510DE") == 0x233510DE
    assert int_value("[N/A]") is None and int_value("garbage") is None


def test_normalise_bus_id() -> None:
    assert normalise_bus_id("00000000:00:06.0") == "0000:00:06.0"
    assert normalise_bus_id("00000001:AB:00.0") == "0001:ab:00.0"
    with pytest.raises(ParseError, match="DOMAIN:BUS"):
        normalise_bus_id("06.0")


def test_dpkg_versions_and_holds() -> None:
    pkgs = parse_dpkg_query(DPKG)
    assert dict(pkgs.versions) == {
        "libnvidia-compute-580": "580.159.04-0ubuntu1",
        "nvidia-driver-580-server-open": "580.159.04-0ubuntu1",
        "nvidia-fabricmanager-580": "580.159.04-1",
        "nvidia-container-toolkit": "1.17.8-1",
    }
    assert pkgs.held == {
        "libnvidia-compute-580",
        "nvidia-driver-580-server-open",
        "nvidia-container-toolkit",
    }


def test_rpm_versions_and_versionlock() -> None:
    pkgs = parse_rpm_query(
        "nvidia-driver\t580.65.06-1.el9\nnvidia-fabric-manager\t580.65.06-1\n"
        "docker-ce\t27.3.1-1.el9\n"
        "#versionlock nvidia-driver-3:580.65.06-1.el9.*\n"
        "#versionlock 0:nvidia-fabric-manager-580.65.06-1.*\n# exit=0\n"
    )
    assert pkgs.versions["docker-ce"] == "27.3.1-1.el9"
    assert pkgs.held == {"nvidia-driver", "nvidia-fabric-manager"}


def test_services() -> None:
    states = parse_services(
        "nvidia-persistenced.service active enabled\n"
        "nvidia-fabricmanager.service inactive not-found\n"
        "docker.service failed enabled\n# exit=0\n"
    )
    assert states["nvidia-persistenced"].running
    assert states["nvidia-fabricmanager"].enabled == "not-found"
    assert states["docker"].active == "failed" and not states["docker"].running
    no_systemd = "System has not been booted with systemd as init system (PID 1).\n# exit=1\n"
    assert parse_services(no_systemd) == {}


def test_docker_info_with_nvidia_runtime() -> None:
    info = parse_docker_info(
        '{"ServerVersion":"27.3.1","DefaultRuntime":"nvidia","CgroupDriver":"systemd",'
        '"CgroupVersion":"2","Runtimes":{"nvidia":{"path":"nvidia-container-runtime"},'
        '"runc":{"path":"runc"}},"CDISpecDirs":["/etc/cdi","/var/run/cdi"]}\n# exit=0\n'
    )
    assert (info.server_version, info.default_runtime) == ("27.3.1", "nvidia")
    assert info.runtimes == ("nvidia", "runc") and info.cgroup_driver == "systemd"
    assert info.cdi_spec_dirs == ("/etc/cdi", "/var/run/cdi")


def test_docker_info_daemon_down() -> None:
    info = parse_docker_info(
        '{"ServerErrors":["Cannot connect to the Docker daemon at unix:///var/run/docker.sock."]'
        ',"ClientInfo":{"Version":"27.3.1"}}\n# exit=1\n'
    )
    assert info.server_version is None and info.runtimes == ()
    assert info.server_errors and "Cannot connect" in info.server_errors[0]
    with pytest.raises(ParseError, match="not JSON"):
        parse_docker_info('{"ServerVersion": \n# exit=0\n')


def test_daemon_json_cdi_ctk_secure_boot() -> None:
    assert parse_daemon_json('{"default-runtime": "nvidia"}\n# exit=0\n') == {
        "default-runtime": "nvidia"
    }
    assert parse_daemon_json("\n# exit=0\n") is None
    with pytest.raises(ParseError, match=r"daemon\.json is not JSON"):
        parse_daemon_json('{"runtimes": {\n# exit=0\n')
    assert parse_cdi_specs("/etc/cdi/nvidia.yaml\n# exit=0\n") == ("/etc/cdi/nvidia.yaml",)
    ctk = "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d\n# exit=0\n"
    assert parse_ctk_version(ctk) == "1.17.8"
    assert parse_ctk_version("sh: nvidia-ctk: not found\n# exit=127\n") is None
    assert parse_secure_boot("SecureBoot enabled\n# exit=0\n") is True
    assert parse_secure_boot("SecureBoot disabled\n# exit=0\n") is False
    assert parse_secure_boot("efivar SecureBoot=1\n# exit=0\n") is True
    assert parse_secure_boot("efivar SecureBoot=0\n# exit=0\n") is False
    assert parse_secure_boot("EFI variables are not supported on this system\n# exit=0\n") is None


def test_proprietary_nvrm_line_and_no_driver() -> None:
    driver = parse_driver_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n# exit=0\n"
    )
    assert driver is not None and (driver.version, driver.flavour) == ("535.261.03", "proprietary")
    assert (
        parse_driver_version("cat: /proc/driver/nvidia/version: No such file\n# exit=1\n") is None
    )
    with pytest.raises(ParseError, match="no NVRM version"):
        parse_driver_version("something else\n# exit=0\n")


def test_nvidia_smi_without_a_loaded_driver() -> None:
    failing = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n# exit=9\n"
    )
    assert parse_smi_version(failing) is None
    assert parse_query_gpu(failing) == ()
    raw = load_host(REAL)
    raw.pop(names.PROC_DRIVER_VERSION)
    for name in (names.SMI, names.SMI_VERSION, names.SMI_QUERY_GPU, names.SMI_L):
        raw[name] = failing
    facts = parse_host("h", raw)
    assert facts.smi is None and facts.smi_gpus == ()
    # plain `nvidia-smi` is captured only for a record (detect --save): not reported twice
    assert len(facts.errors) == 3
    assert facts.errors[0].startswith("nvidia-smi-L.txt: exit 9: NVIDIA-SMI has failed")


def test_query_gpu_with_the_pre_r535_reasons_field() -> None:
    text = (
        "index, name, pci.bus_id, pci.device_id, clocks_throttle_reasons.active\n"
        "0, Tesla V100-SXM2-32GB, 00000000:1A:00.0, 0x1DB510DE, 0x0000000000000004\n"
    )
    (gpu,) = parse_query_gpu(text)
    assert (gpu.device_id, gpu.bus_id, gpu.clocks_event_reasons) == (0x1DB5, "0000:1a:00.0", 4)
    assert gpu.memory_total_mib is None and gpu.compute_cap is None
    with pytest.raises(ParseError, match="header"):
        parse_query_gpu("0, NVIDIA H200, 00000000:00:06.0\n")
    with pytest.raises(ParseError, match="fields"):
        parse_query_gpu(text + "1, x\n")


def test_malformed_outputs_become_host_errors_not_crashes() -> None:
    raw = load_host(REAL)
    raw[names.SYSFS_PCI] = 'broken "line\n# exit=0\n'
    raw[names.SMI_TOPO] = "no table here\n# exit=0\n"
    raw[names.OS_RELEASE] = "NAME=Nothing\n# exit=0\n"
    facts = parse_host("h", raw)
    assert facts.pci == () and facts.os is None
    assert any("sysfs-pci-devices.txt" in e for e in facts.errors)
    assert any("os-release.txt: no ID=" in e for e in facts.errors)
    with pytest.raises(ParseError):
        parse_sysfs_pci("0000:00:06.0 device=0x2335\n")
    with pytest.raises(ParseError, match="header"):
        parse_topo(raw[names.SMI_TOPO])


def test_lab_marker_sets_simulated() -> None:
    raw = load_host(REAL)
    assert not parse_host("h", raw).simulated
    raw[names.GPUSIM] = "name: p5.48xlarge\n# exit=0\n"
    assert parse_host("h", raw).simulated


def test_factsdir_round_trip_replaces_stale_files(tmp_path: Path) -> None:
    real = load_host(REAL)
    save_dir(tmp_path, {"node-1": real})
    assert load_dir(tmp_path) == {"node-1": real}
    no_smi = {k: v for k, v in real.items() if not k.startswith("nvidia-smi")}
    save_dir(tmp_path, {"node-1": no_smi})  # driver removed since: nvidia-smi files must go
    assert load_dir(tmp_path) == {"node-1": no_smi}
    assert not list(tmp_path.glob(".*"))  # no staging directories left behind


def test_factsdir_errors(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        load_dir(tmp_path / "missing")
    with pytest.raises(BadInputError, match="no host directories"):
        load_dir(tmp_path)
    (tmp_path / "empty-host").mkdir()
    with pytest.raises(BadInputError, match="empty-host"):
        load_dir(tmp_path)
    with pytest.raises(BadInputError, match="cannot be a file name"):
        save_dir(tmp_path / "out", {"../escape": {"a.txt": "x"}})


def test_outputs_of_a_failed_nvidia_smi_parse_to_nothing() -> None:
    """What a lab host whose driver packages are installed but not loaded answers (exit 9)."""
    failing = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    failing += "# exit=9\n"
    assert parse_topo(failing).devices == ()
    assert parse_nvlink_status(failing) == () and parse_nvlink_errors(failing) == ()
    assert parse_smi_list(failing) == ()
    assert parse_smi_q(failing).gpus == ()


def test_a_blank_link_speed_is_no_speed() -> None:
    """A quoted link speed of blanks (the property test's cut capture with a space put into
    `current_link_speed=""`) is unknown, not an IndexError."""
    line = (
        "0000:00:01.0 vendor=0x1af4 device=0x1042 class=0x010000 subsystem_vendor=0x1af4 "
        'subsystem_device=0x1042 current_link_speed=" " current_link_width= '
        'max_link_speed=" " max_link_width= numa_node=-1 driver=virtio-pci\n# exit=0\n'
    )
    (device,) = parse_sysfs_pci(line)
    assert device.link.current_speed_gts is None and device.link.max_speed_gts is None
