"""probe.sh: its captures match the fixture names, it runs here, and its stream splits back."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.detect import probe_command
from orchestrator.errors import HostError
from orchestrator.factsdir import load_host
from orchestrator.inventory import InventoryHost
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.mig import parse_lci, parse_lgi
from orchestrator.parsers.smi_list import parse_smi_list
from orchestrator.probe import probe_script, split_output

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
CAPTURED = Path(__file__).resolve().parent / "fixtures_derived"
SHELLS = [s for s in ("sh", "dash", "bash") if shutil.which(s)]


def run_probe(shell: str = "sh", path: str | None = None, *args: str) -> str:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        [shell, "-s", *args],
        input=probe_script(),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


def test_probe_captures_are_the_known_file_names() -> None:
    script = probe_script()
    captured = set(re.findall(r"\bcapo? (\S+\.(?:txt|csv))", script))
    assert captured == set(names.PROBE_FILES)


@pytest.mark.parametrize("shell", SHELLS)
def test_probe_runs_here_and_splits_into_files(shell: str) -> None:
    raw = split_output("local", run_probe(shell))
    for name in (names.OS_RELEASE, names.UNAME_R, names.SYSFS_PCI, names.SECURE_BOOT):
        assert name in raw
        assert raw[name].rstrip().splitlines()[-1].startswith("# exit=")
    assert raw[names.UNAME_R].splitlines()[0] == os.uname().release
    assert raw[names.UNAME_M].splitlines()[0] == os.uname().machine  # same round-trip
    assert parse_host("local", raw).arch == os.uname().machine
    assert raw[names.OS_RELEASE].startswith(Path("/etc/os-release").read_text().splitlines()[0])
    facts = parse_host("local", raw)
    assert facts.errors == ()
    assert len(facts.pci) == len(list(Path("/sys/bus/pci/devices").iterdir()))
    assert not any(n.startswith("nvidia-smi") for n in raw)  # no GPU tool on this machine


def test_captured_probe_output_parses() -> None:
    text = (CAPTURED / "probe-debian12-docker-nogpu.out").read_text()
    facts = parse_host("dev", split_output("dev", text))
    assert facts.os is not None and facts.os.codename == "bookworm"
    assert facts.gpus == () and facts.loaded_driver is None and facts.smi is None
    assert facts.secure_boot is None
    assert facts.runtime.docker_version == "20.10.24+dfsg1"
    assert facts.runtime.docker_cgroup_driver == "cgroupfs"
    assert "runc" in facts.runtime.docker_runtimes and "nvidia" not in facts.runtime.docker_runtimes
    assert facts.packages["docker.io"] == "20.10.24+dfsg1-1+deb12u1+b6"
    assert "docker-ce" not in facts.packages  # known to dpkg, not installed
    assert facts.services == {}  # no systemd as PID 1 there
    assert facts.runtime.docker_active is True  # the daemon answered docker info
    assert facts.uptime_s is not None and facts.errors == ()


def _fake_nvidia_smi(bindir: Path) -> None:
    """An nvidia-smi that replays the real fixture (simulated): args -> fixture file."""
    table = {
        "": "nvidia-smi.txt",
        "-L": "nvidia-smi-L.txt",
        "--version": "nvidia-smi-version.txt",
        "-q": "nvidia-smi-q.txt",
        "topo -m": "nvidia-smi-topo-m.txt",
        "nvlink -s": "nvidia-smi-nvlink-s.txt",
        "nvlink -e": "nvidia-smi-nvlink-e.txt",
        "mig -lgip": "nvidia-smi-mig-lgip.txt",
        "mig -lgipp": "nvidia-smi-mig-lgipp.txt",
        "mig -lgi": "nvidia-smi-mig-lgi.txt",
        "mig -lcip": "nvidia-smi-mig-lcip.txt",
    }
    cases = "\n".join(f'    "{args}") f={REAL / file} ;;' for args, file in table.items())
    script = f"""#!/bin/sh
case "$*" in
    --query-gpu=*) f={REAL / "nvidia-smi-query-gpu.csv"} ;;
{cases}
    *) echo "unknown: $*"; exit 2 ;;
esac
sed '/^# exit=/d' "$f"
"""
    tool = bindir / "nvidia-smi"
    tool.write_text(script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_probe_nvidia_smi_branch_round_trips_the_real_fixture(tmp_path: Path) -> None:
    """`sh -s record` (detect --save) captures the real fixture's whole nvidia-smi set."""
    _fake_nvidia_smi(tmp_path)
    raw = split_output("h200", run_probe("sh", f"{tmp_path}:{os.environ['PATH']}", "record"))
    real = load_host(REAL)
    smi_files = [n for n in real if n.startswith("nvidia-smi") and not n.endswith(".xml")]
    assert len(smi_files) == 12
    for name in smi_files:
        assert raw[name] == real[name], name
    assert raw[names.SMI_MIG_LCI].startswith("unknown: mig -lci")


def test_detection_runs_nvidia_smi_only_for_what_the_parsers_read(tmp_path: Path) -> None:
    """Plain `sh -s` leaves out the record-only captures (each nvidia-smi is an NVML start);
    the facts parsed from it equal those of the whole record."""
    _fake_nvidia_smi(tmp_path)
    path = f"{tmp_path}:{os.environ['PATH']}"
    raw = split_output("h200", run_probe("sh", path))
    record = split_output("h200", run_probe("sh", path, "record"))
    record_only = {names.SMI, *(n for n in record if n.startswith("nvidia-smi-mig-"))}
    assert len(record_only) == 6
    assert set(record) - set(raw) == record_only
    facts, whole = (replace(parse_host("h200", r), uptime_s=None) for r in (raw, record))
    assert facts == whole and facts.errors == ()
    host = InventoryHost("h", "h", 22, "root", None, "ssh", (), (), become=False)
    assert probe_command(host, record=True) == ["sh", "-s", "record"]


def test_split_output_rejects_a_cut_stream() -> None:
    whole = run_probe()
    with pytest.raises(HostError, match="stopped inside"):
        split_output("h", whole[: whole.index("# exit=", 200)])
    with pytest.raises(HostError, match="before its last line"):
        split_output("h", whole.replace("@@gpuprov-probe@@ done", ""))
    with pytest.raises(HostError, match="no output"):
        split_output("h", "")


def test_split_output_keeps_content_that_looks_like_markers() -> None:
    stream = (
        "@@gpuprov-probe@@ begin a.txt\n@@gpuprov-probe@@ end b.txt\nx\n# exit=0\n"
        "@@gpuprov-probe@@ end a.txt\n@@gpuprov-probe@@ done\n"
    )
    assert split_output("h", stream) == {"a.txt": "@@gpuprov-probe@@ end b.txt\nx\n# exit=0\n"}


def test_a_tool_reading_stdin_does_not_eat_the_probe(tmp_path: Path) -> None:
    """`sh -s` reads the script from stdin: a command that reads stdin must get /dev/null."""
    tool = tmp_path / "mokutil"
    tool.write_text("#!/bin/sh\ncat >/dev/null\necho SecureBoot enabled\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    done = subprocess.run(
        ["sh", "-s"],
        input=probe_script() + "echo after-the-probe\n",
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout.rstrip().endswith("@@gpuprov-probe@@ done\nafter-the-probe")
    assert parse_host("h", split_output("h", done.stdout)).secure_boot is True


def test_captured_probe_of_a_simulated_lab_host_with_mig() -> None:
    """The probe's stdout on a lab host (gpusim, SIMULATED p5: 8x H100 + 4 NVSwitch, driver
    580 loaded, MIG enabled with instances), captured 2026-11-29: every output parses."""
    text = (CAPTURED / "probe-lab-p5-mig-simulated.out").read_text()
    raw = split_output("lab", text)
    facts = parse_host("lab", raw)
    assert facts.simulated and facts.errors == ()
    assert len(facts.gpus) == 8 and len(facts.nvidia_bridges) == 4
    assert facts.loaded_driver is not None and facts.loaded_driver.flavour == "open"
    assert {g.mig_mode_current for g in facts.smi_gpus} == {"Enabled"}
    assert {g.device_id for g in facts.smi_gpus} == {0x2330}
    gis = parse_lgi(raw[names.SMI_MIG_LGI])
    cis = parse_lci(raw[names.SMI_MIG_LCI])
    assert len(gis) == len(cis) == 32
    listed = parse_smi_list(raw[names.SMI_L])
    assert sum(len(g.mig_devices) for g in listed) == len(gis)
    assert "Compute instance profiles:" in raw[names.SMI_MIG_LCIP]  # captured (nothing parses it)
