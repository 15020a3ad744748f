"""The lab's `nvidia-ctk` test double (tests/lab/aptrepo/payload/nvidia-ctk): the calls the
nvidia_container_toolkit role makes, fed the real H200 fixture's `nvidia-smi -L` and a MIG
variant derived from it, against temporary daemon.json / config.toml files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CTK = REPO / "tests" / "lab" / "aptrepo" / "payload" / "nvidia-ctk"
REAL = REPO / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
MIG = REPO / "tests" / "unit" / "fixtures_derived" / "h200x2-mig"


def _listing(fixture: Path) -> str:
    """`nvidia-smi -L` output of a fixture, without the trailing `# exit=N` line."""
    lines = (fixture / "nvidia-smi-L.txt").read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("# exit=")) + "\n"


def _fake_smi(bin_dir: Path, listing: str, rc: int = 0) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "listing.txt").write_text(listing)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncat "{bin_dir / "listing.txt"}"\nexit {rc}\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)


def ctk(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.run(
        [sys.executable, str(CTK), *args], capture_output=True, text=True, env=env, check=False
    )


def test_cdi_generate_lists_every_gpu_of_the_real_fixture(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", _listing(REAL))
    done = ctk("cdi", "generate", path=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(done.stdout)
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["cdiVersion"] == "0.5.0"
    names = {
        d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]
    }
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in _listing(REAL).splitlines()]
    assert names == {
        "0": ["/dev/nvidia0"],
        uuids[0]: ["/dev/nvidia0"],
        "1": ["/dev/nvidia1"],
        uuids[1]: ["/dev/nvidia1"],
        "all": ["/dev/nvidia0", "/dev/nvidia1"],
    }


def test_cdi_generate_is_byte_stable_so_the_role_can_compare(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", _listing(REAL))
    first = ctk("cdi", "generate", path=tmp_path / "bin").stdout
    assert first == ctk("cdi", "generate", path=tmp_path / "bin").stdout
    out = tmp_path / "cdi" / "nvidia.yaml"
    assert ctk("cdi", "generate", f"--output={out}", path=tmp_path / "bin").returncode == 0
    assert out.read_text() == first
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_cdi_generate_names_mig_devices_after_their_gpu(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", _listing(MIG))
    spec = yaml.safe_load(ctk("cdi", "generate", path=tmp_path / "bin").stdout)
    names = [d["name"] for d in spec["devices"]]
    assert [n for n in names if n.startswith("0:")] == ["0:0", "0:1", "0:2", "0:3"]
    assert "MIG-0a1b2c3d-0000-5000-8000-000000000003" in names
    assert not [n for n in names if n.startswith("1:")]


def test_cdi_generate_fails_like_the_real_tool_without_a_driver(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", "NVIDIA-SMI has failed because it couldn't communicate\n", rc=9)
    done = ctk("cdi", "generate", path=tmp_path / "bin")
    assert done.returncode != 0
    assert "failed to initialize NVML" in done.stderr


def test_runtime_configure_docker_keeps_keys_it_does_not_own(tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"dns": ["192.0.2.53"], "log-driver": "json-file"}))
    assert ctk("runtime", "configure", "--runtime=docker", f"--config={config}").returncode == 0
    data = json.loads(config.read_text())
    assert data == {
        "dns": ["192.0.2.53"],
        "log-driver": "json-file",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }


def test_runtime_configure_docker_sets_and_clears_the_default(tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    args = ("runtime", "configure", "--runtime=docker", f"--config={config}")
    assert ctk(*args, "--set-as-default").returncode == 0
    assert json.loads(config.read_text())["default-runtime"] == "nvidia"
    assert ctk(*args).returncode == 0
    assert "default-runtime" not in json.loads(config.read_text())


def test_runtime_configure_docker_refuses_invalid_json(tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    config.write_text('{"dns": ["192.0.2.53"],')
    done = ctk("runtime", "configure", "--runtime=docker", f"--config={config}")
    assert done.returncode != 0
    assert config.read_text() == '{"dns": ["192.0.2.53"],'


def test_runtime_configure_containerd_adds_the_runtime_once(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("version = 2\n")
    args = ("runtime", "configure", "--runtime=containerd", f"--config={config}")
    assert ctk(*args).returncode == 0
    once = config.read_text()
    assert ctk(*args).returncode == 0
    assert config.read_text() == once
    assert once.count("containerd.runtimes.nvidia]") == 1
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in once


def test_version_reports_the_package_version_placeholder() -> None:
    # The build substitutes @VERSION@ with the package's upstream version (aptrepo tests).
    done = ctk("--version")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version @VERSION@"


@pytest.mark.parametrize(
    "argv", [("runtime", "configure", "--runtime=crio", "--config=/nonexistent/x"), ("bogus",)]
)
def test_unsupported_calls_fail(argv: tuple[str, ...]) -> None:
    assert ctk(*argv).returncode != 0
