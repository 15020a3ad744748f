"""Lab SSH keys: pinned known_hosts lines and the tar that seeds a host before first boot."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import LabError
from orchestrator.lab import keys


def test_known_hosts_line_pins_the_key_to_the_loopback_port() -> None:
    line = keys.known_hosts_line(keys.KnownHost(40022, "ssh-ed25519 AAAAC3Nz host-a\n"))
    assert line == "[127.0.0.1]:40022 ssh-ed25519 AAAAC3Nz"


def test_render_known_hosts_one_line_per_host_sorted() -> None:
    text = keys.render_known_hosts(
        [keys.KnownHost(40023, "ssh-ed25519 BBBB b"), keys.KnownHost(40022, "ssh-ed25519 AAAA a")]
    )
    assert text == "[127.0.0.1]:40022 ssh-ed25519 AAAA\n[127.0.0.1]:40023 ssh-ed25519 BBBB\n"


def test_garbage_public_key_is_refused() -> None:
    with pytest.raises(LabError, match="not an OpenSSH public key"):
        keys.known_hosts_line(keys.KnownHost(1, "garbage"))


def test_keygen_makes_a_pair_once_and_reuses_it(tmp_path: Path) -> None:
    key = keys.keygen(tmp_path / "hosts" / "h1" / "ssh_host_ed25519_key", "h1")
    pub = key.with_suffix(".pub").read_text()
    assert pub.startswith("ssh-ed25519 ") and pub.rstrip().endswith(" h1")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    keys.keygen(key, "h1")
    assert key.with_suffix(".pub").read_text() == pub


def test_seed_archive_has_private_modes_and_root_ownership(tmp_path: Path) -> None:
    key = keys.keygen(tmp_path / "ssh_host_ed25519_key", "h1")
    data = keys.seed_archive(key, "ssh-ed25519 AAAA lab\n")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {
            "etc/ssh/ssh_host_ed25519_key",
            "etc/ssh/ssh_host_ed25519_key.pub",
            "root/.ssh",
            "root/.ssh/authorized_keys",
        }
        assert members["etc/ssh/ssh_host_ed25519_key"].mode == 0o600
        assert members["root/.ssh"].isdir() and members["root/.ssh"].mode == 0o700
        assert members["root/.ssh/authorized_keys"].mode == 0o600
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
        auth = tar.extractfile("root/.ssh/authorized_keys")
        assert auth is not None and auth.read() == b"ssh-ed25519 AAAA lab\n"
        host = tar.extractfile("etc/ssh/ssh_host_ed25519_key")
        assert host is not None and host.read() == key.read_bytes()
