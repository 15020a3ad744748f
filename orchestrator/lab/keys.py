"""SSH keys for the lab: root's client key pair and per-host host keys, all made here.

The host keys are generated on this machine and copied into each test host before its
first boot, so the lab writes a pinned known_hosts before any connection: nothing is
trusted on first use.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import LabError

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class KnownHost:
    port: int
    public_key: str  # one line of an OpenSSH .pub file: "<type> <base64> [comment]"


def keygen(path: Path, comment: str) -> Path:
    """An ed25519 key pair at `path` (+ .pub), made once and reused after."""
    if path.exists() and path.with_suffix(".pub").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    proc = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise LabError(
            f"ssh-keygen could not write {path}: {proc.stderr.decode().strip()}",
            fix="install openssh-client (./scripts/engine.sh does) and check the directory",
        )
    return path


def known_hosts_line(entry: KnownHost) -> str:
    """A known_hosts line pinning a host key to 127.0.0.1:<port> (OpenSSH's [host]:port form)."""
    fields = entry.public_key.split()
    if len(fields) < 2:
        raise LabError(f"not an OpenSSH public key: {entry.public_key!r}")
    return f"[{LOOPBACK}]:{entry.port} {fields[0]} {fields[1]}"


def render_known_hosts(entries: Iterable[KnownHost]) -> str:
    lines = sorted(known_hosts_line(e) for e in entries)
    return "".join(f"{line}\n" for line in lines)


def seed_archive(host_key: Path, authorized_key: str) -> bytes:
    """A tar to unpack at a test host's / before its first boot: host key + root's key."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, data: bytes | None, mode: int) -> None:
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.uid = info.gid = 0
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        add("etc/ssh/ssh_host_ed25519_key", host_key.read_bytes(), 0o600)
        add("etc/ssh/ssh_host_ed25519_key.pub", host_key.with_suffix(".pub").read_bytes(), 0o644)
        add("root/.ssh", None, 0o700)
        add("root/.ssh/authorized_keys", authorized_key.encode(), 0o600)
    return buf.getvalue()
