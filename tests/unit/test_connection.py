"""One way to reach a host (orchestrator/connection.py): the OpenSSH command line from the
inventory's variables, ProxyJump hops turned into checked ProxyCommands, and detection and
validation through a real jump host (in-process paramiko servers on 127.0.0.1, the real
OpenSSH client)."""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from _sshserver import Server, start

from orchestrator import connection
from orchestrator.detect import detect_hosts, fingerprint
from orchestrator.inventory import load_inventory
from orchestrator.parsers import names
from orchestrator.validate.runner import SubprocessExecutor

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")


def _inv_host(tmp_path: Path, line: str) -> connection.InventoryHost:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\n{line}\n")
    return load_inventory(inv).hosts[0]


def test_the_command_line_puts_gpuprov_checks_first(tmp_path: Path) -> None:
    host = _inv_host(
        tmp_path,
        "n1 ansible_host=10.0.0.5 ansible_port=2200 ansible_user=ubuntu "
        "ansible_ssh_private_key_file=/k/id "
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/kh' "
        "ansible_ssh_extra_args='-o ServerAliveInterval=5'",
    )
    argv = connection.ssh_argv(host, connect_timeout=7)
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    # OpenSSH keeps an option's first value: the inventory cannot turn checking off
    assert argv.index("StrictHostKeyChecking=yes") < argv.index("StrictHostKeyChecking=no")
    assert "UserKnownHostsFile=/kh " in " ".join(argv)
    assert "ConnectTimeout=7" in argv and "ServerAliveInterval=5" in argv
    assert argv[-6:] == ["-o", "ServerAliveInterval=5", "-l", "ubuntu", "--", "10.0.0.5"]
    assert argv[argv.index("-p") + 1] == "2200" and argv[argv.index("-i") + 1] == "/k/id"
    assert not connection.proxied(host)


def test_proxyjump_hops_become_checked_proxy_commands(tmp_path: Path) -> None:
    host = _inv_host(
        tmp_path,
        "n1 ansible_ssh_common_args='-F /cfg -o ProxyJump=ops@outer:2022,inner "
        "-o UserKnownHostsFile=/kh'",
    )
    assert connection.jump_hosts(host) == ("ops@outer:2022", "inner")
    assert connection.proxied(host)
    argv = connection.ssh_argv(host)
    assert not any("proxyjump" in a.lower() for a in argv)
    (pc,) = [a.removeprefix("ProxyCommand=") for a in argv if a.startswith("ProxyCommand=")]
    outer = shlex.split(pc)
    # the nearest hop is reached through the other; both checked against the same files
    assert outer[-3:] == ["-W", "[%h]:%p", "inner"]
    assert "StrictHostKeyChecking=yes" in outer and "UserKnownHostsFile=/kh " in " ".join(outer)
    assert outer[outer.index("-F") + 1] == "/cfg"
    (inner,) = [a.removeprefix("ProxyCommand=") for a in outer if a.startswith("ProxyCommand=")]
    # escaped once: the outer ssh turns %% into %, the inner one expands %h and %p
    inner_argv = shlex.split(inner)
    assert inner_argv[-3:] == ["-W", "[%%h]:%%p", "outer"]
    assert inner_argv[inner_argv.index("-l") + 1] == "ops"
    assert inner_argv[inner_argv.index("-p") + 1] == "2022"
    assert "StrictHostKeyChecking=yes" in inner_argv


def test_a_users_proxy_command_is_kept(tmp_path: Path) -> None:
    host = _inv_host(tmp_path, "n1 ansible_ssh_common_args='-o \"ProxyCommand=nc -X 5 %h %p\"'")
    assert connection.proxied(host) and connection.jump_hosts(host) == ()
    assert "ProxyCommand=nc -X 5 %h %p" in connection.ssh_argv(host)


def test_refused_keys_are_read_back_from_ssh() -> None:
    unknown = (
        "debug1: Connecting to 127.0.0.1 [127.0.0.1] port 2201.\n"
        "debug1: Server host key: ecdsa-sha2-nistp256 SHA256:abc\n"
        "No ECDSA host key is known for [127.0.0.1]:2201 and you have requested strict "
        "checking.\nHost key verification failed.\n"
    )
    assert connection.host_key_problem(unknown) == connection.HostKeyProblem(
        "[127.0.0.1]:2201", "unknown", "ecdsa-sha2-nistp256 SHA256:abc"
    )
    assert connection.host_key_problem("ssh: connect to host x port 22: refused") is None
    assert connection.without_debug(unknown).startswith("No ECDSA host key")


# --- a real jump host ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    target, t_sock = start(paramiko.ECDSAKey.generate())
    bastion, b_sock = start(None)
    yield target, bastion
    t_sock.close()
    b_sock.close()


def _line(server: Server) -> str:
    return (
        f"[127.0.0.1]:{server.port} {server.host_key.get_name()} {server.host_key.get_base64()}\n"
    )


def _inventory(tmp_path: Path, target: Server, bastion: Server, known: Path) -> Path:
    key = tmp_path / "id_ecdsa"
    assert isinstance(target.client_key, paramiko.ECDSAKey)
    target.client_key.write_private_key_file(str(key))
    inv = tmp_path / "hosts.ini"
    # the target's address is one only the jump host can be asked to forward to
    inv.write_text(
        "[gpu_nodes]\n"
        f"node-1 ansible_host=127.0.0.1 ansible_port={target.port} ansible_user=root "
        f"ansible_ssh_private_key_file={key} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known} "
        f"-o ProxyJump=jump@127.0.0.1:{bastion.port}'\n"
    )
    return inv


@needs_ssh
def test_detection_and_validation_go_through_the_jump_host(
    tmp_path: Path, servers: tuple[Server, Server]
) -> None:
    target, bastion = servers
    known = tmp_path / "known_hosts"
    known.write_text(_line(target) + _line(bastion))
    inventory = load_inventory(_inventory(tmp_path, target, bastion, known))
    before = len(bastion.forwarded)
    result = detect_hosts(inventory, progress=False)
    (node,) = result.hosts
    assert node.ok and node.raw is not None, node.error
    assert target.commands[-1] == "sh -s"  # still one round-trip
    assert bastion.forwarded[before:] == [("127.0.0.1", target.port)]
    assert names.UNAME_R in node.raw
    # validation's executor takes the same route
    out = SubprocessExecutor(tuple(connection.ssh_argv(inventory.hosts[0])))(
        "echo through-the-bastion", timeout=30
    )
    assert (out.rc, out.stdout) == (0, "through-the-bastion\n"), out.stderr
    assert len(bastion.forwarded) == before + 2


@needs_ssh
def test_an_unknown_jump_host_key_stops_the_run_with_its_fingerprint(
    tmp_path: Path, servers: tuple[Server, Server]
) -> None:
    target, bastion = servers
    known = tmp_path / "known_hosts"
    known.write_text(_line(target))  # the target's key only: the bastion's is unknown
    ran = len(target.commands)
    result = detect_hosts(load_inventory(_inventory(tmp_path, target, bastion, known)))
    error = result.failed["node-1"]
    assert f"host key of [127.0.0.1]:{bastion.port}" in error.message
    assert "unknown" in error.message and fingerprint(bastion.host_key) in error.message
    assert "through jump@127.0.0.1" in error.message
    assert len(target.commands) == ran  # nothing ran on the host
    assert known.read_text() == _line(target)  # and no key was written


RAW_PLAY = """\
- name: Through the jump host
  hosts: all
  gather_facts: false
  tasks:
    - name: Say where
      ansible.builtin.command: echo ansible-through-the-bastion
      changed_when: false
"""


@pytest.mark.ansible
@needs_ssh
@pytest.mark.parametrize("bastion_known", [True, False])
def test_ansible_takes_the_same_checked_route(
    tmp_path: Path,
    servers: tuple[Server, Server],
    bastion_known: bool,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    from orchestrator.apply import AnsibleOptions, new_run_dir, run_playbook

    # a master connection of its own (ControlPersist would reuse the other case's), in a short
    # folder: a Unix socket's path holds 107 bytes, and ssh adds 17 to it while it creates the
    # master. Under CI's basetemp tmp_path/cp came to 110 ("... too long for Unix domain
    # socket": unreachable after login, CI 2026-12-02, reproduced here with that basetemp).
    control_dir = Path(tempfile.mkdtemp(prefix="gpuprov-cp-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(control_dir, ignore_errors=True))
    monkeypatch.setenv("ANSIBLE_SSH_CONTROL_PATH_DIR", str(control_dir))

    target, bastion = servers
    known = tmp_path / "known_hosts"
    known.write_text(_line(target) + (_line(bastion) if bastion_known else ""))
    inv = _inventory(tmp_path, target, bastion, known)
    host = load_inventory(inv).hosts[0]
    routes = {"node-1": connection.ansible_common_args(host)}
    assert routes["node-1"] is not None and "ProxyJump" not in routes["node-1"]
    playbook = tmp_path / "play.yml"
    playbook.write_text(RAW_PLAY)
    before = len(bastion.forwarded)
    result = run_playbook(
        inventories=[inv],
        hosts=["node-1"],
        host_vars={},
        run_dir=new_run_dir(tmp_path / "artifacts"),
        playbook=playbook,
        routes={k: v for k, v in routes.items() if v},
        cwd=tmp_path,
        options=AnsibleOptions(extra_vars=(f"ansible_python_interpreter={sys.executable}",)),
    )
    stdout = (result.artifact_dir / "ansible" / "stdout").read_text()
    stats = result.hosts["node-1"]
    if bastion_known:
        assert stats.succeeded and stats.ok == 1, (stats, stdout)
        assert any(sys.executable in c for c in target.commands)
        assert len(bastion.forwarded) > before
    else:  # an unknown jump-host key: unreachable, never accepted
        assert stats.unreachable == 1, (stats, stdout)
        # the hop refused the jump host's key before asking it to forward anything
        assert len(bastion.forwarded) == before and "Connection closed" in stdout
        assert known.read_text() == _line(target)
