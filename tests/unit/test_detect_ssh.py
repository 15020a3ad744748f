"""detect_hosts over real SSH (an in-process paramiko server on 127.0.0.1 that runs the
command it is sent with /bin/sh here), connection local, and unreachable hosts."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from _sshserver import Server as SshServer
from _sshserver import closed_port, start

from orchestrator.detect import detect_hosts, probe_command
from orchestrator.factsdir import load_dir, save_dir
from orchestrator.inventory import load_inventory
from orchestrator.parsers import names, parse_host


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    server, listener = start(paramiko.ECDSAKey.generate())
    yield server
    listener.close()


def _known_hosts(path: Path, port: int, key: paramiko.PKey) -> Path:
    path.write_text(f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n")
    return path


def _inventory(tmp_path: Path, sshd: SshServer, known: Path, extra: str = "") -> Path:
    key = tmp_path / "id_ecdsa"
    if not key.exists():
        assert isinstance(sshd.client_key, paramiko.ECDSAKey)
        sshd.client_key.write_private_key_file(str(key))
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"node-1 ansible_host=127.0.0.1 ansible_port={sshd.port}\n"
        f"{extra}"
        "[gpu_nodes:vars]\n"
        f"ansible_user=root\nansible_ssh_private_key_file={key}\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known}'\n"
    )
    return inv


def test_ssh_detection_with_a_known_host_key(tmp_path: Path, sshd: SshServer) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, sshd.host_key)
    result = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known)), progress=False)
    (node,) = result.hosts
    assert node.ok and node.raw is not None, node.error
    assert sshd.commands[-1] == "sh -s"  # one round-trip: the probe on stdin
    assert node.raw[names.UNAME_R].splitlines()[0] == os.uname().release
    facts = parse_host("node-1", node.raw)
    assert facts.errors == () and facts.os is not None


def test_unknown_host_key_is_refused(tmp_path: Path, sshd: SshServer) -> None:
    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    before = len(sshd.commands)
    result = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known)), progress=False)
    error = result.failed["node-1"]
    assert "unknown" in error.message and str(known) in error.message
    assert error.fix is not None and f"ssh-keyscan -p {sshd.port} 127.0.0.1" in error.fix
    assert len(sshd.commands) == before  # nothing ran on the host
    assert known.read_text() == ""  # and the key was not written anywhere


def test_changed_host_key_is_refused(tmp_path: Path, sshd: SshServer) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, paramiko.ECDSAKey.generate())
    result = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known)), progress=False)
    error = result.failed["node-1"]
    assert "does not match" in error.message
    assert error.fix is not None and "ssh-keygen -R" in error.fix


def test_wrong_client_key_is_an_authentication_error(tmp_path: Path, sshd: SshServer) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, sshd.host_key)
    inv = _inventory(tmp_path, sshd, known)
    other = paramiko.ECDSAKey.generate()
    other.write_private_key_file(str(tmp_path / "id_ecdsa"))
    result = detect_hosts(load_inventory(inv), progress=False)
    error = result.failed["node-1"]
    assert "authentication" in error.message and "as root" in error.message
    assert "ansible_ssh_private_key_file" in (error.fix or "")


def test_mixed_fleet_unreachable_host_does_not_stop_the_others(
    tmp_path: Path, sshd: SshServer
) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, sshd.host_key)
    dead_port = closed_port()  # nothing listens there now
    extra = (
        f"node-dead ansible_host=127.0.0.1 ansible_port={dead_port}\n"
        "node-local ansible_connection=local\n"
    )
    inv = load_inventory(_inventory(tmp_path, sshd, known, extra))
    seen: list[str] = []
    result = detect_hosts(inv, progress=False, on_host=lambda h: seen.append(h.host))
    assert [h.host for h in result.hosts] == list(inv.names)  # inventory order kept
    assert sorted(seen) == sorted(inv.names)
    assert set(result.raw) == {"node-1", "node-local"}
    assert "unreachable" in result.failed["node-dead"].message
    assert f"127.0.0.1:{dead_port}" in result.failed["node-dead"].message
    # the saved directory reads back to the same raw outputs
    saved = save_dir(tmp_path / "facts", result.raw)
    assert load_dir(saved) == result.raw
    assert parse_host("node-local", load_dir(saved)["node-local"]).errors == ()


def test_probe_command_uses_sudo_only_when_needed(tmp_path: Path) -> None:
    inv = tmp_path / "b.ini"
    inv.write_text(
        "[g]\n"
        "a ansible_user=ubuntu ansible_become=true\n"
        "b ansible_user=root ansible_become=true\n"
        "c ansible_user=ubuntu\n"
    )
    hosts = load_inventory(inv)
    # -H: the sudo become plugin's default flags (-H -S -n), as Ansible runs sudo
    assert probe_command(hosts.host("a")) == ["sudo", "-n", "-H", "sh", "-s"]
    assert probe_command(hosts.host("b")) == ["sh", "-s"]
    assert probe_command(hosts.host("c")) == ["sh", "-s"]


def test_missing_private_key_file_is_named(tmp_path: Path, sshd: SshServer) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, sshd.host_key)
    inv = _inventory(tmp_path, sshd, known)
    (tmp_path / "id_ecdsa").unlink()
    error = detect_hosts(load_inventory(inv), progress=False).failed["node-1"]
    assert f"private key {tmp_path / 'id_ecdsa'} cannot be read" in error.message


def test_progress_bar_renders_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "local.ini"
    inv.write_text("[g]\nlocal-a ansible_connection=local\nlocal-b ansible_connection=local\n")
    result = detect_hosts(load_inventory(inv), progress=True)
    assert set(result.raw) == {"local-a", "local-b"} and result.failed == {}
    assert capsys.readouterr().out == ""  # the bar goes to stderr, never into stdout


def test_broken_known_hosts_file_is_a_host_error(tmp_path: Path, sshd: SshServer) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAA!!!not-base64\n")
    error = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known)), progress=False).failed[
        "node-1"
    ]
    assert f"known-hosts file {known} cannot be read" in error.message


def test_each_known_hosts_file_is_parsed_once_for_all_hosts(
    tmp_path: Path, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # paramiko's load compares each line with the lines before it: once per host, a
    # 500-line file cost 500 hosts 58 CPU-s of detection, 4 without (docs/benchmarks.md)
    other = paramiko.ECDSAKey.generate()
    others = "".join(f"10.9.0.{i} {other.get_name()} {other.get_base64()}\n" for i in range(40))
    known = tmp_path / "known_hosts"
    right = sshd.host_key
    known.write_text(f"{others}[127.0.0.1]:{sshd.port} {right.get_name()} {right.get_base64()}\n")
    loads: list[str] = []
    real_load = paramiko.HostKeys.load

    def counted(self: paramiko.HostKeys, filename: str) -> None:
        loads.append(filename)
        real_load(self, filename)

    monkeypatch.setattr(paramiko.HostKeys, "load", counted)
    extra = "".join(f"node-{n} ansible_host=127.0.0.1 ansible_port={sshd.port}\n" for n in (2, 3))
    result = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known, extra)), progress=False)
    assert [h.ok for h in result.hosts] == [True, True, True], result.failed
    assert loads.count(str(known)) == 1, loads


def test_a_known_hosts_path_that_is_a_directory_is_not_read(
    tmp_path: Path, sshd: SshServer
) -> None:
    folder = tmp_path / "known_hosts.d"
    folder.mkdir()
    error = detect_hosts(load_inventory(_inventory(tmp_path, sshd, folder)), progress=False).failed[
        "node-1"
    ]
    assert "unknown" in error.message and "cannot be read" not in error.message, error.message


def test_a_known_hosts_file_changed_since_the_last_run_is_read_again(
    tmp_path: Path, sshd: SshServer
) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, paramiko.ECDSAKey.generate())
    inv = load_inventory(_inventory(tmp_path, sshd, known))
    error = detect_hosts(inv, progress=False).failed["node-1"]
    assert "does not match" in error.message, error.message
    _known_hosts(known, sshd.port, sshd.host_key)  # the user fixed the line
    os.utime(known, ns=(1, 1))  # a new version even within the file system's mtime grain
    result = detect_hosts(inv, progress=False)
    assert result.failed == {}, result.failed


# --- each network fault is one clear line per host ----------------------------------------


def _one_host_inventory(tmp_path: Path, port: int) -> Path:
    inv = tmp_path / "one.ini"
    inv.write_text(
        f"[gpu_nodes]\nnode-x ansible_host=127.0.0.1 ansible_port={port} ansible_user=root\n"
    )
    return inv


def _listener(behaviour: str) -> tuple[socket.socket, int]:
    """A TCP port that is 'silent' (accepts, never speaks) or 'drops' (greets, then closes)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held: list[socket.socket] = []

    def run() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            if behaviour == "drops":
                sock.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                sock.recv(4096)
                sock.close()
            else:
                held.append(sock)

    threading.Thread(target=run, daemon=True).start()
    return listener, listener.getsockname()[1]


def _fault(tmp_path: Path, port: int) -> str:
    result = detect_hosts(
        load_inventory(_one_host_inventory(tmp_path, port)), progress=False, connect_timeout=1
    )
    error = result.failed["node-x"]
    text = str(error)
    assert "Traceback" not in text and len(error.message.splitlines()) == 1
    return text


def test_refused_port_says_connection_refused(tmp_path: Path) -> None:
    port = closed_port()
    text = _fault(tmp_path, port)
    assert f"connection refused by 127.0.0.1:{port}" in text
    assert "sshd runs" in text


def test_silent_port_is_not_no_existing_session(tmp_path: Path) -> None:
    listener, port = _listener("silent")
    try:
        text = _fault(tmp_path, port)
    finally:
        listener.close()
    assert "No existing session" not in text
    assert f"no SSH server answered on 127.0.0.1:{port}" in text


def test_dropped_connection_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    listener, port = _listener("drops")
    try:
        text = _fault(tmp_path, port)
    finally:
        listener.close()
    assert f"the SSH connection to 127.0.0.1:{port} was dropped" in text
    assert "Traceback" not in capfd.readouterr().err  # paramiko's thread logs nothing


def test_timed_out_connection(tmp_path: Path) -> None:
    from orchestrator.detect import _ssh_error
    from orchestrator.inventory import InventoryHost

    host = InventoryHost("n", "10.0.0.1", 22, "root", None, "ssh", ("/k",), (), False)
    error = _ssh_error(host, TimeoutError("timed out"))
    assert error.message == "unreachable: connecting to 10.0.0.1:22 timed out"


def test_unknown_host_key_shows_the_offered_fingerprint(tmp_path: Path, sshd: SshServer) -> None:
    import base64
    import hashlib

    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    result = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known)), progress=False)
    digest = hashlib.sha256(sshd.host_key.asbytes()).digest()
    expected = "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    message = result.failed["node-1"].message
    assert f"offered {sshd.host_key.get_name()} {expected}" in message


def test_changed_host_key_shows_the_offered_fingerprint(tmp_path: Path, sshd: SshServer) -> None:
    known = _known_hosts(tmp_path / "known_hosts", sshd.port, paramiko.ECDSAKey.generate())
    result = detect_hosts(load_inventory(_inventory(tmp_path, sshd, known)), progress=False)
    assert "offered ecdsa-sha2-nistp256 SHA256:" in result.failed["node-1"].message


def test_ctrl_c_during_detection_does_not_wait_for_hung_probes(tmp_path: Path) -> None:
    import time

    listener, silent = _listener("silent")
    refused = closed_port()
    inv = tmp_path / "two.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"hung ansible_host=127.0.0.1 ansible_port={silent} ansible_user=root\n"
        f"gone ansible_host=127.0.0.1 ansible_port={refused} ansible_user=root\n"
    )

    def interrupt(result: object) -> None:
        raise KeyboardInterrupt  # as Ctrl-C lands in the main thread

    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            detect_hosts(load_inventory(inv), progress=False, connect_timeout=6, on_host=interrupt)
    finally:
        listener.close()
    assert time.monotonic() - start < 4  # not the 6 s the silent port holds the probe
