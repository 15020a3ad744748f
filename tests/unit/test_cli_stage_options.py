"""Stage options refused consistently, and -u as Ansible users type it (issue 50): a stage that
does not use --artifacts-dir or -v refuses it by name (exit 2, before any host); `-u USER` is
the remote user, as ansible-playbook -u, where the inventory sets no ansible_user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.cli import build_parser, check_arguments, main
from orchestrator.inventory import load_inventory

REAL = Path(__file__).resolve().parents[2] / "tests" / "recorded" / "fixtures" / "real"
INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "p5.ini"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["plan", "--facts", str(REAL), "--artifacts-dir", "x"], "--artifacts-dir"),
        (["plan", "--facts", str(REAL), "-vv"], "-vv"),
        (["detect", "-i", str(INVENTORY), "-v"], "-v"),
        (["validate", "-i", str(INVENTORY), "--artifacts-dir", "x"], "--artifacts-dir"),
        (["verify", "-i", str(INVENTORY), "-vvv"], "-vvv"),
    ],
)
def test_a_stage_refuses_the_options_it_does_not_use(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], no_hosts: list[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"provision: error: {named}: `provision {argv[0]}` does not use it" in err
    assert f"fix: drop {named}" in err
    assert not no_hosts


@pytest.mark.parametrize(
    "argv",
    [
        ["apply", "-i", str(INVENTORY), "--artifacts-dir", "x", "-vv"],
        ["verify", "-i", str(INVENTORY), "--artifacts-dir", "x"],
        ["-i", str(INVENTORY), "--artifacts-dir", "x", "-v"],  # the full run
    ],
)
def test_the_stages_that_use_them_take_them(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    check_arguments(args)  # no BadInputError
    assert args.artifacts_dir == "x"


def test_a_refused_option_is_left_out_of_the_stages_help() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["plan"].format_help()  # type: ignore[union-attr]
    assert "--artifacts-dir" not in text and "--verbose" not in text
    assert "-u REMOTE_USER" in text


@pytest.mark.parametrize("before", [True, False])
def test_u_is_the_remote_user_as_ansible_takes_it(
    before: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANSIBLE_REMOTE_USER", raising=False)
    plan = ["plan", "--facts", str(REAL)]
    argv = ["-u", "root", *plan] if before else [*plan, "-u", "root"]
    assert main(argv) == 0, capsys.readouterr().err
    assert os.environ["ANSIBLE_REMOTE_USER"] == "root"  # what ansible-playbook reads as -u


def test_lab_refuses_u(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-u", "root", "lab", "status"]) == 2
    assert "--remote-user: `provision lab` does not use it" in capsys.readouterr().err


def test_the_remote_user_fills_in_where_the_inventory_names_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpu]\ngpu-01 ansible_host=10.0.0.1\ngpu-02 ansible_user=ubuntu\n")
    monkeypatch.delenv("ANSIBLE_REMOTE_USER", raising=False)
    assert load_inventory(ini).host("gpu-01").user is None  # the SSH default
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "root")
    inv = load_inventory(ini)
    assert inv.host("gpu-01").user == "root"
    assert inv.host("gpu-02").user == "ubuntu"  # the host's ansible_user wins, as in Ansible
