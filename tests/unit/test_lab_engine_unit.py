"""The Docker layer's pure parts, fed with output recorded from a real lab host."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import LabError
from orchestrator.lab import engine, hosts

RECORDED = Path(__file__).resolve().parent / "lab_data" / "docker-inspect-lab-host.json"


def test_parse_inspect_of_a_recorded_lab_host() -> None:
    [container] = engine.parse_inspect(RECORDED.read_text())
    assert container.name == "h3fresh-deb12-1"
    assert container.state == "running"
    assert container.restart_count == 0
    host = hosts.to_lab_host(container)
    assert host == hosts.LabHost("h3fresh-deb12-1", "debian12", "p5.48xlarge", 44927, "running")


def test_parse_inspect_of_nothing_is_no_container() -> None:
    assert engine.parse_inspect("") == []
    assert engine.parse_inspect("[]\n") == []


def test_label_filters_match_value_or_mere_presence() -> None:
    assert engine.label_filters({"gpuprov.lab": "x", "gpuprov.lab.image": ""}) == [
        "--filter",
        "label=gpuprov.lab=x",
        "--filter",
        "label=gpuprov.lab.image",
    ]


def test_a_failing_docker_command_is_a_lab_error_with_the_fix() -> None:
    with pytest.raises(LabError) as err:
        engine.docker(["no-such-subcommand-gpuprov"])
    assert "docker no-such-subcommand-gpuprov" in str(err.value)
    assert err.value.fix is not None and "engine.sh" in err.value.fix


def test_missing_docker_binary_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LabError, match="not installed") as err:
        engine.docker(["info"])
    assert err.value.fix == engine.ENGINE_FIX
