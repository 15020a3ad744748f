"""`provision lab ...` options and dispatch (Docker replaced by recorded answers)."""

from __future__ import annotations

import pytest

from orchestrator import cli
from orchestrator.errors import EXIT_BAD_INPUT
from orchestrator.lab import engine, hosts


def test_lab_subcommands_take_a_name() -> None:
    parser = cli.build_parser()
    for command in ("up", "status", "down"):
        args = parser.parse_args(["lab", command, "--name", "driver"])
        assert (args.stage, args.lab_command, args.name) == ("lab", command, "driver")
    args = parser.parse_args(["lab", "images", "--os", "debian13"])
    assert (args.lab_command, args.lab_os) == ("images", "debian13")


def test_up_defaults_to_a_two_node_p5_on_debian12() -> None:
    args = cli.build_parser().parse_args(["lab", "up"])
    assert (args.profile, args.count, args.lab_os, args.name) == (
        "p5.48xlarge",
        2,
        "debian12",
        None,
    )


def test_status_prints_the_table_for_the_env_selected_lab(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUPROV_LAB", "mig")
    monkeypatch.setattr(engine, "require_engine", lambda: None)
    seen: list[str] = []

    def status(lab: str) -> list[hosts.LabHost]:
        seen.append(lab)
        return [hosts.LabHost("mig-deb12-1", "debian12", "p4d.24xlarge", 40000, "running")]

    monkeypatch.setattr(hosts, "status", status)
    assert cli.main(["lab", "status"]) == 0
    assert seen == ["mig"]
    out = capsys.readouterr().out
    assert "mig-deb12-1" in out and "p4d.24xlarge" in out and "simulated" in out


def test_bad_count_is_bad_input_before_touching_docker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_docker() -> None:
        raise AssertionError("docker was called")

    monkeypatch.setattr(engine, "require_engine", no_docker)
    assert cli.main(["lab", "up", "--name", "t", "--count", "0"]) == EXIT_BAD_INPUT
    assert "--count 0 starts no host" in capsys.readouterr().err


def test_unknown_profile_is_bad_input_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["lab", "up", "--name", "t", "--profile", "nope"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "no lab profile 'nope'" in err and "p5.48xlarge" in err
