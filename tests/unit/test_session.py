"""One shell per host for many commands (orchestrator/session.py): the framing holds for any
output, a command cannot break the session, and a host that cannot be reached or a shell
that dies is one clear error. Local shells here; OpenSSH to a closed port for the refusal."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.inventory import InventoryHost, load_inventory
from orchestrator.session import SessionLost, open_session, session_argv


def _host(tmp_path: Path, line: str = "node-1 ansible_connection=local") -> InventoryHost:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\n{line}\n")
    return load_inventory(inv).hosts[0]


def test_commands_share_one_shell_and_keep_their_streams_apart(tmp_path: Path) -> None:
    session = open_session(_host(tmp_path))
    try:
        pid = session.run("echo $PPID").stdout  # each command's parent: the session's shell
        out = session.run("printf 'a\\nb'; printf 'oops' >&2; exit 3")
        assert (out.rc, out.stdout, out.stderr) == (3, b"a\nb", b"oops")
        assert session.run("echo $PPID").stdout == pid  # `exit` ended the command, not the shell
        binary = session.run("printf '\\000\\377\\n\\n'")
        assert binary.stdout == b"\x00\xff\n\n" and binary.rc == 0
        assert session.run("cat").stdout == b""  # stdin is /dev/null, not the session's input
        big = session.run("head -c 300000 /dev/zero")
        assert len(big.stdout) == 300000
        for i in range(50):
            assert session.run(f"echo {i}").stdout == f"{i}\n".encode()
    finally:
        session.close()
    assert session.proc.returncode == 0


def test_a_shell_that_dies_fails_the_command_with_one_error(tmp_path: Path) -> None:
    session = open_session(_host(tmp_path))
    try:
        with pytest.raises(SessionLost) as info:
            session.run("kill -9 $PPID")
        assert info.value.host == "node-1" and "lost the connection" in info.value.message
    finally:
        session.close()


def test_a_command_past_its_deadline_ends_the_session(tmp_path: Path) -> None:
    session = open_session(_host(tmp_path))
    started = time.monotonic()
    with pytest.raises(SessionLost, match="longer than 1 s"):
        session.run("sleep 30", timeout=1)
    assert session.proc.poll() is not None
    assert time.monotonic() - started < 4  # ended at once, not after the shell's 5 s


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_an_unreachable_host_is_one_line_naming_the_port(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = _host(
        tmp_path,
        f"node-1 ansible_host=127.0.0.1 ansible_port={port} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known}'",
    )
    with pytest.raises(HostError) as info:
        open_session(host, timeout=10)
    error = info.value
    assert error.host == "node-1" and error.message.startswith("unreachable: 127.0.0.1:")
    assert "Connection refused" in error.message and "\n" not in error.message
    assert "Traceback" not in str(error)


def test_the_session_goes_through_the_hosts_ssh_and_become(tmp_path: Path) -> None:
    host = _host(
        tmp_path,
        "node-1 ansible_host=10.0.0.9 ansible_user=admin ansible_become=true "
        "ansible_ssh_common_args='-o ProxyJump=bastion'",
    )
    argv = session_argv(host, None)
    assert argv[0] == "ssh" and "StrictHostKeyChecking=yes" in argv
    assert any(a.startswith("ProxyCommand=") for a in argv) and argv[-2] == "10.0.0.9"
    assert argv[-1] == "sh -s"
    from orchestrator.connection import become_of

    become = become_of(host)
    assert session_argv(host, become)[-1] == "sudo -n -H sh -s"  # ansible_become_flags default
