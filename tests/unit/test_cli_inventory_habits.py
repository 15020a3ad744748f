"""Ansible's inventory habits in `provision` (issue 28): several -i merged as ansible-playbook
merges them, ANSIBLE_INVENTORY and ansible.cfg's `inventory =` when no -i is given (read by
ansible-core's configuration manager), -l/-C for --limit/--check, and the exit codes beside
ansible-playbook's in --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import facts_dir

from orchestrator.cli import build_parser, main
from orchestrator.inventory import load_inventory
from orchestrator.verify.runner import suite_command

ROOT = Path(__file__).resolve().parents[2]


def _ini(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return path


def test_several_inventories_merge_as_ansible_merges_them(tmp_path: Path) -> None:
    a = _ini(tmp_path / "a" / "a.ini", "[gpu_nodes]\nnode-a knob_x=from-a shared=a\n")
    b = _ini(tmp_path / "b" / "b.ini", "[gpu_nodes]\nnode-b\nnode-a shared=b\n")
    _ini(tmp_path / "b" / "group_vars" / "gpu_nodes.yml", "from_b_group_vars: 1\n")
    inv = load_inventory([a, b])
    assert inv.names == ("node-a", "node-b")
    node_a = inv.host("node-a")
    assert node_a.vars["knob_x"] == "from-a"
    assert node_a.vars["shared"] == "b"  # the later source wins, as for ansible-playbook
    assert node_a.vars["from_b_group_vars"] == 1  # each source's own group_vars are read
    assert inv.sources == (a, b) and inv.where == f"{a} + {b}"


def test_plan_with_two_inventories_plans_the_hosts_of_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = facts_dir(tmp_path, h100=True)  # hosts h200-real and p5
    a = _ini(tmp_path / "a.ini", "[gpu_nodes]\nh200-real\n")
    b = _ini(tmp_path / "b.ini", "[gpu_nodes]\np5\n")
    rc = main(["-i", str(a), "-i", str(b), "plan", "--facts", str(facts), "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert set(json.loads(captured.out)["hosts"]) == {"h200-real", "p5"}
    # each host's policy came from its inventory: no "h200-real: not in b.ini: default policy"
    assert "warning" not in captured.err and "not in" not in captured.err, captured.err
    # the second inventory's policy is read: a pin too old for p5's H100 is refused
    b.write_text("[gpu_nodes]\np5 nvidia_driver_branch=470\n")
    assert main(["plan", "-i", str(a), "-i", str(b), "--facts", str(facts)]) == 2
    assert "p5: nvidia_driver_branch=470 is too old" in capsys.readouterr().err


def test_ansible_inventory_is_the_inventory_when_no_i_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = facts_dir(tmp_path, h100=True)
    a = _ini(tmp_path / "a.ini", "[gpu_nodes]\nh200-real\n")
    b = _ini(tmp_path / "b.ini", "[gpu_nodes]\np5 nvidia_driver_branch=470\n")
    monkeypatch.setenv("ANSIBLE_INVENTORY", f"{a},{b}")  # Ansible's comma-separated list
    assert main(["plan", "--facts", str(facts)]) == 2
    assert "p5: nvidia_driver_branch=470 is too old" in capsys.readouterr().err
    monkeypatch.setenv("ANSIBLE_INVENTORY", str(tmp_path / "nope.ini"))
    assert main(["plan", "--facts", str(facts)]) == 2
    err = capsys.readouterr().err
    assert "nope.ini does not exist" in err and "ANSIBLE_INVENTORY" in err
    monkeypatch.delenv("ANSIBLE_INVENTORY")
    assert main(["detect"]) == 2
    err = capsys.readouterr().err
    assert "no inventory given" in err and "ANSIBLE_INVENTORY" in err and "ansible.cfg" in err


def test_ansible_cfg_inventory_is_the_inventory_when_no_i_is_given(tmp_path: Path) -> None:
    facts = facts_dir(tmp_path, h100=True)
    here = tmp_path / "project"
    _ini(here / "inv" / "hosts.ini", "[gpu_nodes]\nh200-real\np5 nvidia_driver_branch=470\n")
    # relative to the ansible.cfg's folder, as Ansible reads it
    _ini(here / "ansible.cfg", "[defaults]\ninventory = inv/hosts.ini\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "plan", "--facts", str(facts)],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "p5: nvidia_driver_branch=470 is too old" in run.stderr


def test_l_and_c_are_limit_and_check() -> None:
    parser = build_parser()
    args = parser.parse_args(["apply", "-l", "gpu_nodes:!h1", "-C"])
    assert args.limit == "gpu_nodes:!h1" and args.check is True
    args = parser.parse_args(["-l", "h1", "-C", "-i", "a.ini", "-i", "b.ini"])
    assert (args.limit, args.check, args.inventory) == ("h1", True, ["a.ini", "b.ini"])


def test_l_limits_a_plan_and_c_is_refused_where_check_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = facts_dir(tmp_path, h100=True)
    assert main(["plan", "--facts", str(facts), "-l", "p5", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["hosts"]) == {"p5"}
    assert main(["plan", "--facts", str(facts), "-C"]) == 2
    assert "--check" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"], ["apply", "--help"]])
def test_help_shows_exit_codes_beside_ansible_playbooks(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    assert "exit codes           provision                          ansible-playbook" in out
    assert "  a host failed      1 (a role, a check failed)         2" in out
    assert "  interrupted        130 (Ctrl-C)                       99" in out


def test_the_suite_command_names_one_inventory_or_leaves_several_to_ansible_inventory(
    tmp_path: Path,
) -> None:
    a = _ini(tmp_path / "a.ini", "[gpu_nodes]\nh1\n")
    cmd = suite_command(None, "h1", tmp_path / "j.xml", None, 1)
    assert not any(c.startswith("--ansible-inventory") for c in cmd)
    assert f"--ansible-inventory={a}" in suite_command(a, "h1", tmp_path / "j.xml", None, 1)
