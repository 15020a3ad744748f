"""Serve the test-double repository over HTTP to the lab's containers, from this machine.

The server binds to the Docker network's gateway address only (default: the `bridge`
network's), so the lab hosts on that network reach it and no other network does. One
server per network (labs side by side each have theirs), recorded in
`server-<network>.json` under the state directory; `ensure_served` reuses a live one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from aptrepo.build import BuiltRepo, build_repo

DEFAULT_PORT = 8089


class AptRepoServeError(RuntimeError):
    """The repository server could not be started (names the address and the cause)."""


@dataclass(frozen=True)
class ServedRepo:
    """What the lab writes into its policy: where the repositories are and their key."""

    base_url: str  # e.g. http://172.17.0.1:8089
    fingerprint: str
    pid: int
    toolkit_dir: str
    cuda_dirs: tuple[str, ...]

    @property
    def key_url(self) -> str:
        return f"{self.base_url}/gpgkey"

    def replay_url(self, os_key: str, kind: str) -> str:
        """An index-only Ubuntu replay (kind: cuda | canonical); for apt-get --simulate."""
        return f"{self.base_url}/replay/{os_key}/{kind}"

    @property
    def toolkit_url(self) -> str:
        return f"{self.base_url}/{self.toolkit_dir}"

    @property
    def toolkit_base_url(self) -> str:
        """The stable channel's URL, as NVIDIA's: apt appends deb/$(ARCH)."""
        return self.toolkit_url.rsplit("/deb/", 1)[0]

    def cuda_url(self, os_id: str) -> str:
        """The CUDA repository double for `debian12` or `debian13`, at NVIDIA's path."""
        match = [d for d in self.cuda_dirs if f"/{os_id}/" in f"/{d}/"]
        if not match:
            raise AptRepoServeError(f"no test-double CUDA repository for {os_id!r}")
        return f"{self.base_url}/{match[0]}"


def _docker_inspect(network: str, template: str) -> str:
    done = subprocess.run(
        ["docker", "network", "inspect", network, "-f", template],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise AptRepoServeError(
            f"cannot inspect Docker network {network!r}: {done.stderr.strip()}; "
            "is the engine up (scripts/engine.sh)?"
        )
    return done.stdout.strip()


def gateway_address(network: str = "bridge") -> str:
    """The host's address on a Docker network: its IPAM gateway, else its bridge's address."""
    address = _docker_inspect(network, "{{range .IPAM.Config}}{{.Gateway}}{{end}}")
    if address:
        return address
    bridge = _docker_inspect(network, '{{index .Options "com.docker.network.bridge.name"}}')
    if not bridge or bridge == "<no value>":
        bridge = "br-" + _docker_inspect(network, "{{.Id}}")[:12]
    done = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", bridge],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = done.stdout.split()
    if done.returncode != 0 or "inet" not in fields:
        raise AptRepoServeError(f"no IPv4 address on {bridge}, the bridge of network {network!r}")
    return fields[fields.index("inet") + 1].split("/")[0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/gpgkey", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _record_path(state_dir: Path, network: str) -> Path:
    return state_dir / f"server-{network}.json"


def _record(state_dir: Path, network: str) -> dict[str, object] | None:
    path = _record_path(state_dir, network)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None


def ensure_served(
    state_dir: Path, *, network: str = "bridge", port: int = DEFAULT_PORT
) -> ServedRepo:
    """Build the repository if needed and make sure a server for it answers; idempotent."""
    repo = build_repo(state_dir)
    address = gateway_address(network)
    url = f"http://{address}:{port}"
    record = _record(state_dir, network)
    pid = record.get("pid") if record else None
    same = isinstance(pid, int) and record is not None and record.get("url") == url
    if same and isinstance(pid, int) and _alive(pid) and _answers(url):
        return _served(repo, url, pid)
    stop(state_dir, network)
    with socket.socket() as probe:
        if probe.connect_ex((address, port)) == 0:
            raise AptRepoServeError(f"{address}:{port} is already taken by another process")
    argv = [sys.executable, "-m", "http.server", "--bind", address]
    argv += ["--directory", str(repo.root), str(port)]
    with _record_path(state_dir, network).with_suffix(".log").open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    for _ in range(50):
        if _answers(url):
            record_text = json.dumps({"pid": process.pid, "url": url})
            _record_path(state_dir, network).write_text(record_text)
            return _served(repo, url, process.pid)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    raise AptRepoServeError(
        f"the repository server on {url} did not answer; "
        f"see {_record_path(state_dir, network).with_suffix('.log')}"
    )


def _served(repo: BuiltRepo, url: str, pid: int) -> ServedRepo:
    return ServedRepo(url, repo.fingerprint, pid, repo.toolkit_dir, repo.cuda_dirs)


def stop(state_dir: Path, network: str = "bridge") -> bool:
    """Stop the server for `network` recorded in state_dir; True when one was running."""
    record = _record(state_dir, network)
    _record_path(state_dir, network).unlink(missing_ok=True)
    pid = record.get("pid") if record else None
    if not isinstance(pid, int) or not _alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(30):
        if not _alive(pid):
            break
        time.sleep(0.1)
    return True
