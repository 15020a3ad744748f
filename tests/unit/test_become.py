"""Become with a password for detection, validation and verify (orchestrator/connection.py),
and the inventory's become and vault variables (orchestrator/inventory.py).

The transport runs for real (processes, pipes, sudo's prompt answered on stdin); `sudo` and
`ssh` are test doubles on PATH written here: the double sudo asks for the password with the
prompt it is given, as `sudo -S -p` does, and logs its argv; the double ssh logs its argv (one
line per SSH session) and runs the remote command with sh here. The real sudo and OpenSSH
run in tests/lab/test_become_lab.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator import connection
from orchestrator.cli import main
from orchestrator.detect import detect_hosts
from orchestrator.errors import EXIT_BAD_INPUT, InventoryError
from orchestrator.inventory import VaultOptions, load_inventory
from orchestrator.parsers import names
from orchestrator.validate.runner import SubprocessExecutor

PASSWORD = "s3cret pass'word"  # a space and a quote: never split, never quoted into argv
VAULT_PASSWORD = "vault-pw-for-tests"

FAKE_SUDO = """#!/bin/sh
# test double of sudo -S -p PROMPT [-u USER] [-H] CMD...: logs its argv, asks as sudo does
printf '%s\\n' "$*" >> "$FAKE_LOG/sudo"
prompt="" nonint=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) nonint=1; shift;;
    -S|-H) shift;;
    -p|-u) prompt_or_user=$2; [ "$1" = -p ] && prompt=$2; shift 2;;
    *) break;;
  esac
done
if [ "$nonint" = 1 ]; then echo "sudo: a password is required" >&2; exit 1; fi
tries=0
while [ $tries -lt 3 ]; do
  printf '%s' "$prompt" >&2
  IFS= read -r pw || exit 1
  if [ "$pw" = "$FAKE_SUDO_PASSWORD" ]; then exec "$@"; fi
  sleep 1; echo "Sorry, try again." >&2; tries=$((tries+1))
done
echo "sudo: 3 incorrect password attempts" >&2
exit 1
"""

FAKE_SSH = """#!/bin/sh
# test double of ssh: one log line per session, the remote command run with sh here
printf '%s\\n' "$*" >> "$FAKE_LOG/ssh"
for last; do :; done
case " $* " in *" -v "*) echo "debug1: Sending command: $last" >&2;; esac  # as ssh -v does
exec sh -c "$last"
"""


@pytest.fixture
def doubles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sudo", FAKE_SUDO), ("ssh", FAKE_SSH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    log.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_SUDO_PASSWORD", PASSWORD)
    return log


def _lines(log: Path, name: str) -> list[str]:
    path = log / name
    return path.read_text().splitlines() if path.exists() else []


def _vaulted(value: str, name: str, tmp_path: Path) -> str:
    secret = tmp_path / "vault-pass"
    secret.write_text(VAULT_PASSWORD + "\n")
    done = subprocess.run(
        ["ansible-vault", "encrypt_string", "--vault-password-file", str(secret), value,
         "--name", name],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def _inventory(tmp_path: Path, host_line: str, extra: str = "") -> Path:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\n{host_line}\n{extra}")
    return inv


def _ssh_host(tmp_path: Path, password: str = PASSWORD) -> Path:
    return _inventory(
        tmp_path,
        "node-1 ansible_host=10.0.0.1 ansible_user=admin ansible_become=true "
        f"ansible_become_password={password!r}",
    )


# --- the transport --------------------------------------------------------------------------


def test_detection_becomes_with_the_password_in_one_ssh_session(
    tmp_path: Path, doubles: Path
) -> None:
    inventory = load_inventory(_ssh_host(tmp_path))
    (host,) = inventory.hosts
    assert host.become_password == PASSWORD
    result = detect_hosts(inventory, progress=False)
    (node,) = result.hosts
    assert node.ok and node.raw is not None, node.error
    assert names.UNAME_R in node.raw
    sessions = _lines(doubles, "ssh")
    assert len(sessions) == 1  # still one round-trip
    (sudo,) = _lines(doubles, "sudo")
    assert sudo.startswith("-S -p [gpuprov become ") and sudo.endswith("exec sh -s")
    for line in [*sessions, sudo]:  # never on a command line
        assert PASSWORD not in line and "s3cret" not in line


def test_a_wrong_password_fails_the_host_at_once(tmp_path: Path, doubles: Path) -> None:
    inventory = load_inventory(_ssh_host(tmp_path, password="not-it"))
    start = time.monotonic()
    result = detect_hosts(inventory, progress=False)
    took = time.monotonic() - start
    error = result.failed["node-1"]
    assert "sudo to root failed: the password was not accepted" in error.message
    assert "ansible_become_password" in (error.fix or "")
    assert "not-it" not in str(error)
    assert took < 10  # one try (the double waits 1 s), not sudo's three


def test_sudo_that_never_answers_is_time_bounded(tmp_path: Path, doubles: Path) -> None:
    (tmp_path / "bin" / "sudo").write_text("#!/bin/sh\nsleep 60\n")
    host = load_inventory(_ssh_host(tmp_path)).hosts[0]
    become = connection.become_of(host)
    assert become is not None
    proc = subprocess.Popen(
        connection.become_words(become),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    start = time.monotonic()
    with pytest.raises(connection.BecomeFailed, match="did not answer within 2 s"):
        connection.become_handshake(proc, become, "node-1", timeout=2)
    assert time.monotonic() - start < 5 and proc.poll() is not None  # killed


def test_without_a_password_sudo_never_waits(tmp_path: Path, doubles: Path) -> None:
    inv = _inventory(
        tmp_path, "node-1 ansible_connection=local ansible_become=true ansible_become_user=gpu"
    )
    error = detect_hosts(load_inventory(inv), progress=False).failed["node-1"]
    assert "a password is required" in error.message
    assert "-K" in (error.fix or "") and "ansible_become_password" in (error.fix or "")
    assert _lines(doubles, "sudo") == ["-n -H -u gpu sh -s"]  # -H: Ansible's default flags


def test_validation_runs_its_scripts_as_root_through_sudo(tmp_path: Path, doubles: Path) -> None:
    host = load_inventory(_ssh_host(tmp_path)).hosts[0]
    become = connection.become_of(host)
    execute = SubprocessExecutor(tuple(connection.ssh_argv(host)), become=become, ssh=True)
    out = execute("echo validated; echo on-stderr >&2; exit 3\n", timeout=30)
    assert (out.rc, out.stdout, out.stderr.strip()) == (3, "validated\n", "on-stderr")
    assert len(_lines(doubles, "ssh")) == 1
    wrong = SubprocessExecutor(
        tuple(connection.ssh_argv(host)),
        become=connection.Become("root", (), "not-it"),
        ssh=True,
    )("echo never\n", timeout=30)
    assert wrong.rc == 1 and "not accepted" in wrong.stderr and "never" not in wrong.stdout


def test_the_become_user_and_flags_reach_sudo(tmp_path: Path, doubles: Path) -> None:
    inv = _inventory(
        tmp_path,
        f"node-1 ansible_connection=local ansible_become=true ansible_become_user=gpuadmin "
        f"ansible_become_flags='-H -S -n' ansible_become_password={PASSWORD!r}",
    )
    result = detect_hosts(load_inventory(inv), progress=False)
    assert result.failed == {}
    (sudo,) = _lines(doubles, "sudo")
    assert sudo.startswith("-S -p [gpuprov become ") and " -H -u gpuadmin sh -c " in sudo
    assert _lines(doubles, "ssh") == []  # local: no SSH at all


def test_the_password_is_not_in_the_hosts_repr_or_variables(tmp_path: Path) -> None:
    host = load_inventory(_ssh_host(tmp_path)).hosts[0]
    assert PASSWORD not in repr(host) and "ansible_become_password" not in host.vars
    assert PASSWORD not in repr(connection.become_of(host))


# --- the inventory ----------------------------------------------------------------------------


def test_ask_become_pass_is_the_fallback_and_the_inventory_wins(tmp_path: Path) -> None:
    inv = _inventory(
        tmp_path,
        "a ansible_become=true\nb ansible_become=true ansible_become_pass=from-inventory",
    )
    hosts = load_inventory(inv, become_password="from-K")
    assert hosts.host("a").become_password == "from-K"
    assert hosts.host("b").become_password == "from-inventory"


def test_user_flags_and_password_resolve_as_ansibles_sudo_plugin_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSIBLE_BECOME_USER", "svc")  # the plugin's env, under host variables
    inv = _inventory(
        tmp_path,
        "a ansible_become=true ansible_sudo_pass=legacy-name\n"
        "b ansible_become=true ansible_sudo_user=other ansible_become_flags='-E -n'",
    )
    hosts = load_inventory(inv)
    a, b = hosts.host("a"), hosts.host("b")
    assert (a.become_user, a.become_flags, a.become_password) == ("svc", ("-H",), "legacy-name")
    assert (b.become_user, b.become_flags, b.become_password) == ("other", ("-E",), None)
    assert "ansible_sudo_pass" not in a.vars


@pytest.mark.ansible
def test_a_vault_inline_value_and_a_vault_encrypted_vars_file(tmp_path: Path) -> None:
    vaulted = _vaulted(PASSWORD, "ansible_become_password", tmp_path)
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        a:\n"
        "          ansible_become: true\n"
        + "".join(f"          {line}\n" for line in vaulted.splitlines())
        + "    other:\n      hosts:\n        b:\n"
    )
    group_vars = tmp_path / "group_vars"
    group_vars.mkdir()
    (group_vars / "other.yml").write_text("ansible_become: true\nansible_become_pass: in-file\n")
    subprocess.run(
        ["ansible-vault", "encrypt", "--vault-password-file", str(tmp_path / "vault-pass"),
         str(group_vars / "other.yml")],
        check=True, capture_output=True,
    )  # fmt: skip
    hosts = load_inventory(inv, vault=VaultOptions(password_files=(str(tmp_path / "vault-pass"),)))
    assert hosts.host("a").become_password == PASSWORD
    assert hosts.host("b").become_password == "in-file"
    # the password as --ask-vault-pass gives it: the same
    asked = load_inventory(inv, vault=VaultOptions(password=VAULT_PASSWORD))
    assert asked.host("a").become_password == PASSWORD
    # no vault secret, or a wrong one: bad input naming the host and the fix
    with pytest.raises(InventoryError, match="host b could not be read") as exc:
        load_inventory(inv)
    assert "--vault-password-file" in str(exc.value) and exc.value.exit_code == EXIT_BAD_INPUT
    with pytest.raises(InventoryError, match="Decryption failed"):
        load_inventory(inv, vault=VaultOptions(password="wrong"), limit="a")
    with pytest.raises(InventoryError, match="a: ansible_become_password is vault-encrypted"):
        load_inventory(inv, limit="a")


def test_su_and_other_methods_are_refused_naming_host_and_method(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, "node-7 ansible_become=true ansible_become_method=su")
    with pytest.raises(InventoryError, match="ansible_become_method='su'") as exc:
        load_inventory(inv)
    assert exc.value.host == "node-7" and "sudo" in str(exc.value.fix)
    # without ansible_become the method is never used: no error
    _inventory(tmp_path, "node-7 ansible_become=false ansible_become_method=su")
    assert load_inventory(inv).hosts[0].become is False


def test_every_stage_takes_the_vault_and_become_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path, "node-7 ansible_become=true ansible_become_method=doas")
    for stage in ("detect", "plan", "validate", "verify"):
        code = main([stage, "-i", str(inv), "--vault-password-file", "/nonexistent"])
        err = capsys.readouterr().err
        assert code == EXIT_BAD_INPUT, err
        assert "vault password could not be read" in err  # read, not refused as an option
    assert main(["detect", "-i", str(inv)]) == EXIT_BAD_INPUT
    assert "node-7: ansible_become_method='doas'" in capsys.readouterr().err
    assert main(["-K", "lab", "status"]) == EXIT_BAD_INPUT  # lab reads no inventory


def test_ask_become_pass_asks_once_for_detect_and_validate(
    tmp_path: Path, doubles: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import getpass

    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return PASSWORD

    monkeypatch.setattr(getpass, "getpass", ask)
    inv = _inventory(
        tmp_path, "node-1 ansible_connection=local ansible_become=true ansible_become_user=gpu"
    )
    assert main(["detect", "-i", str(inv), "-K", "--json"]) == 0, capsys.readouterr().err
    assert asked == ["BECOME password: "]
    assert PASSWORD not in capsys.readouterr().out  # nor in the report
    (sudo,) = _lines(doubles, "sudo")
    assert sudo.startswith("-S -p [gpuprov become ") and PASSWORD not in sudo


def test_a_password_that_cannot_be_asked_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import getpass

    def closed(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr(getpass, "getpass", closed)
    inv = _inventory(tmp_path, "node-1 ansible_connection=local")
    assert main(["detect", "-i", str(inv), "--ask-vault-pass"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--ask-vault-pass: no password could be read" in err and "Traceback" not in err


def test_verify_becomes_once_per_host_in_one_ssh_session(
    tmp_path: Path, doubles: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.verify.runner import VERIFY_FD, run_suite

    inv = _inventory(
        tmp_path,
        "node-1 ansible_host=10.0.0.1 ansible_user=admin ansible_become=true\n"
        "node-2 ansible_host=10.0.0.2 ansible_user=admin ansible_become=true",
    )
    hosts = load_inventory(inv, become_password=PASSWORD)
    assert all(connection.become_of(h) is not None for h in hosts.hosts)
    run = run_suite(list(hosts.hosts), tmp_path / "verify", processes=2)
    assert set(run.results) == {"node-1", "node-2"}, run
    assert all(r.name != "verify.connection" for rs in run.results.values() for r in rs), run
    # the whole suite: one SSH session and one sudo (its password answered once) per host
    sudo = _lines(doubles, "sudo")
    assert len(sudo) == 2 and all(line.startswith("-S -p [gpuprov become ") for line in sudo)
    sessions = _lines(doubles, "ssh")
    assert len(sessions) == 2
    assert any("10.0.0.1" in s for s in sessions) and any("10.0.0.2" in s for s in sessions)
    for line in [*sudo, *sessions]:
        assert "s3cret" not in line
    assert VERIFY_FD not in os.environ
    for log in (tmp_path / "verify").glob("verify-*"):
        assert "s3cret" not in log.read_text(errors="replace")
