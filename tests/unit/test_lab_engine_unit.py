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


def test_a_network_removed_between_listing_and_inspection_is_listed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CI on 2026-12-02: group d's lab listed the networks while group b's removed one of them;
    # the daemon's answer below is the one CI printed
    listings = [["25931ea639ef", "26256beccae6"], ["25931ea639ef"]]
    calls: list[list[str]] = []

    def fake(args: list[str], **_: object) -> str:
        calls.append(list(args))
        if args[:2] == ["network", "ls"]:
            return "\n".join(listings.pop(0)) + "\n"
        if "26256beccae6" in args:
            raise LabError(
                f"`docker {' '.join(args)}` failed (exit 1): "
                "Error response from daemon: network 26256beccae6 not found"
            )
        return "10.213.0.0/24 \n"

    monkeypatch.setattr(engine, "docker", fake)
    assert engine.network_subnets() == ["10.213.0.0/24"]
    assert [c[:2] for c in calls] == [["network", "ls"], ["network", "inspect"]] * 2


def test_other_inspection_failures_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(args: list[str], **_: object) -> str:
        if args[:2] == ["network", "ls"]:
            return "abc\n"
        raise LabError("`docker network inspect` failed (exit 1): permission denied")

    monkeypatch.setattr(engine, "docker", fake)
    with pytest.raises(LabError, match="permission denied"):
        engine.network_subnets()
