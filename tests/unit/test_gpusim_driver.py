"""The driver as the simulator sees it: detected from installed files, loaded by modprobe or
at boot, reported by nvidia-smi only when its userspace is installed; plus boot, kernel
release, profiles and the YAML reader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.parsers import parse_host
from orchestrator.parsers.sysfs_pci import parse_sysfs_pci

REPO = Path(__file__).resolve().parents[2]
GPUSIM = REPO / "tests" / "lab" / "gpusim"
sys.path.insert(0, str(GPUSIM))
from gpusim import driver, kernel, yamlsubset  # noqa: E402
from gpusim.model import load_profile  # noqa: E402
from gpusim.paths import Paths  # noqa: E402
from gpusim.testing import PROFILES_DIR, SimHost, elf_object  # noqa: E402

PROFILES = sorted(PROFILES_DIR.glob("*.yaml"))


@pytest.fixture
def bare(tmp_path: Path) -> SimHost:
    host = SimHost.create(tmp_path, "p5.48xlarge")
    host.boot()
    return host


def test_no_driver_no_nvidia_smi(bare: SimHost) -> None:
    assert not (bare.root / "usr/local/bin/nvidia-smi").exists()
    assert bare.smi("-L").code == 127
    raw = bare.raw()
    assert not any(name.startswith("nvidia-smi") for name in raw)
    facts = parse_host("bare", raw)
    assert facts.loaded_driver is None and facts.smi is None and facts.simulated
    assert len(facts.gpus) == 8 and all(d.driver == "" for d in facts.gpus)


def test_modprobe_without_a_module_is_the_real_failure(bare: SimHost, tmp_path: Path) -> None:
    # No module for the simulated kernel: the shim hands over to the real modprobe, which
    # cannot find one either (this machine's /usr/sbin/modprobe, for a kernel it lacks).
    run = bare.modprobe("nvidia")
    assert run.code != 0


def test_installed_driver_loads_with_modprobe(bare: SimHost) -> None:
    bare.install_driver("535.309.01", "proprietary", module_name="nvidia-current.ko")
    not_loaded = bare.smi("-L")
    assert not_loaded.code == 9 and "couldn't communicate with the NVIDIA driver" in not_loaded.out
    assert bare.modprobe("nvidia").code == 0
    facts = parse_host("p5", bare.raw())
    assert facts.errors == ()
    assert facts.loaded_driver is not None
    assert (facts.loaded_driver.version, facts.loaded_driver.flavour) == (
        "535.309.01",
        "proprietary",
    )
    assert facts.smi is not None and facts.smi.driver_version == "535.309.01"
    assert facts.smi.cuda_version == "12.2"
    assert len(facts.smi_gpus) == 8 and {g.name for g in facts.smi_gpus} == {
        "NVIDIA H100 80GB HBM3"
    }
    assert all(d.driver == "nvidia" for d in facts.gpus)
    assert {d.driver for d in facts.nvidia_bridges} == {"nvidia-nvswitch"}


def test_uvm_needs_nvidia_and_blocks_its_removal(bare: SimHost) -> None:
    bare.install_driver()
    assert bare.modprobe("nvidia-uvm").code == 0
    modules = (bare.root / "proc/modules").read_text()
    assert (
        modules.startswith("nvidia_uvm 1830912 0 - Live")
        and "\nnvidia 14299136 1 nvidia_uvm," in modules
    )
    busy = bare.modprobe("-r", "nvidia")
    assert busy.code == 1 and "in use" in busy.err
    assert bare.modprobe("-r", "nvidia_uvm").code == 0  # and nvidia, now unused
    assert not (bare.root / "proc/driver/nvidia").exists()
    assert (bare.root / "proc/modules").read_text() == ""


def test_upgrade_without_reload_is_a_version_mismatch(bare: SimHost) -> None:
    bare.install_driver("535.309.01")
    bare.modprobe("nvidia")
    bare.install_driver("580.159.04")  # new packages; the old module is still loaded
    run = bare.smi("-L")
    assert run.code == 18 and "Driver/library version mismatch" in run.out
    bare.boot()  # the reboot loads the new module
    assert bare.smi("--version").out.startswith("NVIDIA-SMI version  : 580.159.04")


def test_boot_loads_an_installed_driver_unless_blacklisted(bare: SimHost) -> None:
    bare.install_driver()
    bare.boot()
    assert (bare.root / "proc/driver/nvidia/version").exists()
    blacklist = bare.root / "etc/modprobe.d/blacklist-nvidia.conf"
    blacklist.parent.mkdir(parents=True, exist_ok=True)
    blacklist.write_text("blacklist nvidia\n")
    bare.boot()
    assert not (bare.root / "proc/driver/nvidia/version").exists()


def test_boot_is_repeatable_and_keeps_identities(bare: SimHost) -> None:
    bare.install_driver()
    bare.boot()
    first = bare.smi("-L").out
    sysfs = bare.sysfs_lines()
    bare.boot()
    assert bare.smi("-L").out == first
    assert bare.sysfs_lines() == sysfs
    assert bare.gpusim("status").out.count('"boot_count": 3') == 1


def test_two_hosts_get_different_uuids(tmp_path: Path) -> None:
    a = SimHost.create(tmp_path / "a", "l40s")
    b = SimHost.create(tmp_path / "b", "l40s")
    (b.root / "etc/hostname").write_text("other\n")
    for host in (a, b):
        host.install_driver()
        host.boot()
    assert a.smi("-L").out != b.smi("-L").out


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_every_profile_boots_and_reports_its_gpus(tmp_path: Path, profile: Path) -> None:
    spec = load_profile(profile)
    host = SimHost.create(tmp_path, profile)
    host.install_driver()
    host.boot()
    facts = parse_host(profile.stem, host.raw())
    assert facts.errors == ()
    assert [d.device_id for d in facts.gpus] == [spec.gpu.device_id] * len(spec.gpu_bus_ids)
    assert [g.name for g in facts.smi_gpus] == [spec.gpu.name] * len(spec.gpu_bus_ids)
    switches = [d.device_id for d in facts.nvidia_bridges]
    expected = [spec.switch.device_id] * len(spec.switch_bus_ids) if spec.switch else []
    assert switches == expected


@pytest.mark.parametrize("path", [*PROFILES, GPUSIM / "data" / "models.yaml"], ids=lambda p: p.name)
def test_yaml_subset_reads_data_files_like_pyyaml(path: Path) -> None:
    text = path.read_text()
    assert yamlsubset.loads(text) == yaml.safe_load(text)


def test_yaml_subset_refuses_what_it_does_not_support() -> None:
    with pytest.raises(yamlsubset.YamlSubsetError):
        yamlsubset.loads("a: {b: 1}\n")
    with pytest.raises(yamlsubset.YamlSubsetError):
        yamlsubset.loads("a: 1\n  b: 2\n")


def test_kernel_release_is_the_newest_headers_abi() -> None:
    main = (
        "Package: linux-headers-amd64\nVersion: 6.1.176-1\n"
        "Depends: linux-headers-6.1.0-41-amd64 (= 6.1.176-1)\n\n"
        "Package: linux-headers-6.1.0-41-amd64\nVersion: 6.1.176-1\n"
    )
    security = (
        "Package: linux-headers-amd64\nVersion: 6.1.192-3\n"
        "Depends: linux-headers-6.1.0-57-amd64 (= 6.1.192-3)\n"
    )
    assert kernel.headers_abi([main, security]) == "6.1.0-57-amd64"
    assert kernel.headers_abi([main]) == "6.1.0-41-amd64"
    assert kernel.headers_abi(["Package: bash\nVersion: 5.2\n"]) is None


def test_sysfs_link_speed_format(bare: SimHost) -> None:
    devices = parse_sysfs_pci(bare.sysfs_lines())
    assert {d.link.current_speed_gts for d in devices if d.class_code >> 16 == 0x03} == {32.0}
    config = (bare.root / "sys/bus/pci/devices/0000:53:00.0/config").read_bytes()
    assert config[:4] == bytes.fromhex("de103023") and len(config) == 256


def _exe(host: SimHost, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUSIM_ROOT": str(host.root)}
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)


def test_executables_run_standalone(bare: SimHost) -> None:
    """The files a lab host runs (shebang, own import path, exit codes), as processes."""
    smi = str(GPUSIM / "bin" / "nvidia-smi")
    assert _exe(bare, smi, "-L").returncode == 127  # no driver: no nvidia-smi
    bare.install_driver()
    assert _exe(bare, str(GPUSIM / "boot")).stdout.startswith("gpusim: boot 2, profile p5.48xlarge")
    listed = _exe(bare, smi, "-L")
    assert listed.returncode == 0 and listed.stdout.count("NVIDIA H100 80GB HBM3") == 8
    bad = _exe(bare, smi, "--query-gpu=bogus", "--format=csv")
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stderr
    knobs = _exe(bare, str(GPUSIM / "bin" / "gpusim"), "fault", "list").stdout.split()
    assert "fabric-not-completed" in knobs and "gpu-missing" in knobs
    assert "NVRM: loading" in _exe(bare, str(GPUSIM / "bin" / "dmesg")).stdout


def test_dpkg_hook_follows_the_nvidia_smi_package(bare: SimHost) -> None:
    bare.install_driver()
    shim = bare.root / "usr/local/bin/nvidia-smi"
    assert shim.is_symlink()
    hook = (bare.root / "etc/dpkg/dpkg.cfg.d/gpusim").read_text()
    assert "post-invoke=" in hook and hook.rstrip().endswith("gpusim sync")
    (bare.root / "usr/lib/nvidia/current/nvidia-smi").unlink()  # dpkg removed the package
    assert bare.gpusim("sync").code == 0
    assert not shim.exists() and not shim.is_symlink()


def test_module_metadata_comes_from_its_modinfo_section(tmp_path: Path) -> None:
    module = tmp_path / "nvidia.ko"
    module.write_bytes(
        elf_object(
            {
                b".text": b"\x00version=1.0.0\x00license=GPL\x00" + bytes(4096),
                b".modinfo": b"license=Dual MIT/GPL\x00version=580.159.04\x00",
                b".comment": b"\x00GCC: (Debian 14.2.0-19) 14.2.0\x00",
            }
        )
    )
    paths = Paths(tmp_path / "root")
    kernel_dir = paths.lib_modules / "6.12.118+deb13-amd64" / "updates" / "dkms"
    kernel_dir.mkdir(parents=True)
    module.rename(kernel_dir / "nvidia.ko")
    paths.kernel_release_file.parent.mkdir(parents=True)
    paths.kernel_release_file.write_text("6.12.118+deb13-amd64\n")
    found = driver.installed_module(paths)
    assert found is not None
    assert (found.version, found.flavour) == ("580.159.04", "open")
    assert driver.gcc_line(found) == "GCC version:  gcc version 14.2.0 (Debian 14.2.0-19) "


def test_apt_lists_prefer_the_suites_point_release_kernel(tmp_path: Path) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").write_text(
        "Package: linux-headers-amd64\nVersion: 6.1.176-1\n"
        "Depends: linux-headers-6.1.0-41-amd64 (= 6.1.176-1)\n"
    )
    (lists / "deb.debian.org_debian-security_dists_bookworm-security_main_binary-amd64_Packages"
     ).write_text(
        "Package: linux-headers-amd64\nVersion: 6.1.192-3\n"
        "Depends: linux-headers-6.1.0-57-amd64 (= 6.1.192-3)\n"
    )  # fmt: skip
    assert kernel.from_apt_lists(lists, "bookworm") == "6.1.0-41-amd64"
    assert kernel.from_apt_lists(lists, None) == "6.1.0-57-amd64"


def test_a_parsed_file_is_kept_where_the_commands_keep_their_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On lab hosts (sys.pycache_prefix set by the commands) each data file is parsed once,
    not on every nvidia-smi call; a changed file is parsed again."""
    data = tmp_path / "profile.yaml"
    data.write_text("gpu_model: h100\ncount: 8\n")
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pycache"))
    monkeypatch.setattr(yamlsubset, "_PARSED", {})
    assert yamlsubset.load_path(data) == {"gpu_model": "h100", "count": 8}
    (kept,) = (tmp_path / "pycache" / "yaml").iterdir()
    monkeypatch.setattr(yamlsubset, "_PARSED", {})  # a new call of the command
    monkeypatch.setattr(yamlsubset, "loads", lambda text: pytest.fail("parsed again"))
    assert yamlsubset.load_path(data) == {"gpu_model": "h100", "count": 8}
    monkeypatch.undo()
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pycache"))
    monkeypatch.setattr(yamlsubset, "_PARSED", {})
    data.write_text("gpu_model: h200\ncount: 8\n")
    os.utime(data, ns=(kept.stat().st_mtime_ns, kept.stat().st_mtime_ns + 1))
    assert yamlsubset.load_path(data) == {"gpu_model": "h200", "count": 8}
