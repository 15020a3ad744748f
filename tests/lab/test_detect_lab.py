"""Detection against the lab's test hosts (real sshd, real OpenSSH host keys, simulated GPUs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from orchestrator.detect import detect_hosts
from orchestrator.factsdir import load_dir, save_dir
from orchestrator.inventory import load_inventory
from orchestrator.lab.running import RunningLab
from orchestrator.parsers import names, parse_host

pytestmark = pytest.mark.lab
PROFILE = Path(__file__).resolve().parent / "profiles" / "p5.48xlarge.yaml"


def test_detect_every_lab_host(lab: RunningLab, tmp_path: Path) -> None:
    profile = yaml.safe_load(PROFILE.read_text())
    inventory = load_inventory(lab.inventory)
    result = detect_hosts(inventory, progress=False)
    assert result.failed == {}
    versions = set()
    for host in inventory.names:
        raw = result.raw[host]
        assert names.GPUSIM in raw  # the lab marker: every GPU fact is simulated
        facts = parse_host(host, raw)
        assert facts.simulated and facts.errors == ()
        assert [g.address for g in facts.gpus] == profile["gpu_bus_ids"]
        assert [b.address for b in facts.nvidia_bridges] == profile["nvswitch_bus_ids"]
        assert {g.device_id for g in facts.gpus} == {0x2330}
        assert facts.os is not None and facts.os.id == "debian"
        versions.add(facts.os.version_id)
        assert "nvidia-fabricmanager" in facts.services  # systemd answers on lab hosts
    assert versions == {"12", "13"}
    saved = save_dir(tmp_path / "facts", result.raw)
    assert load_dir(saved) == result.raw


def test_unknown_host_key_is_refused_by_the_lab_host(lab: RunningLab, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inventory = load_inventory(lab.inventory)
    strangers = tuple(dataclasses.replace(h, known_hosts=(str(empty),)) for h in inventory.hosts)
    result = detect_hosts(dataclasses.replace(inventory, hosts=strangers), progress=False)
    assert set(result.failed) == set(inventory.names)
    for error in result.failed.values():
        assert "unknown" in error.message and "ssh-keyscan" in (error.fix or "")
    assert empty.read_text() == ""
