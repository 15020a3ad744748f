"""Converge roles on a lab's hosts with ansible-playbook, the way the lab tests need it:
the test-double repository served on the lab's network, its policy as extra variables, and
the PLAY RECAP parsed per host."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aptrepo.policy import lab_policy
from aptrepo.serve import ensure_served

REPO = Path(__file__).resolve().parents[3]
STATE_DIR = REPO / ".lab" / ".aptrepo"
RECAP = re.compile(
    r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class HostRecap:
    ok: int
    changed: int
    unreachable: int
    failed: int


@dataclass(frozen=True)
class Run:
    returncode: int
    recap: Mapping[str, HostRecap]
    output: str
    seconds: float

    def changed(self) -> dict[str, int]:
        return {host: r.changed for host, r in self.recap.items()}


def lab_network(lab_name: str) -> str:
    return f"gpuprov-lab-{lab_name}"


def lab_repo_vars(lab_name: str) -> dict[str, object]:
    """Serve the test doubles on the lab's own network gateway; the policy pointing there.

    Not on the default bridge's 172.17.0.1: once the docker role has run, the lab host's own
    Docker owns 172.17.0.1 (its docker0) and the host can no longer reach this machine there.
    """
    return lab_policy(ensure_served(STATE_DIR, network=lab_network(lab_name)))


def parse_recap(output: str) -> dict[str, HostRecap]:
    tail = output[output.rfind("PLAY RECAP") :]
    return {
        m["host"]: HostRecap(
            int(m["ok"]), int(m["changed"]), int(m["unreachable"]), int(m["failed"])
        )
        for m in RECAP.finditer(tail)
    }


def converge(
    inventory: Path,
    roles: Sequence[str],
    extra_vars: Mapping[str, object],
    workdir: Path,
    *,
    check: bool = False,
    limit: str | None = None,
    timeout: float = 1800,
) -> Run:
    """Apply `roles` (in order) to the inventory's gpu_nodes; return the parsed result."""
    workdir.mkdir(parents=True, exist_ok=True)
    playbook = workdir / "converge.yml"
    play = [{"name": "Converge", "hosts": "gpu_nodes", "gather_facts": True, "roles": list(roles)}]
    playbook.write_text(json.dumps(play))
    variables = workdir / "vars.json"
    variables.write_text(json.dumps(dict(extra_vars)))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory)]
    argv += ["-e", f"@{variables}", str(playbook)]
    argv += ["--check", "--diff"] if check else []
    argv += ["--limit", limit] if limit else []
    start = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=REPO,
        env={**_env(), "ANSIBLE_ROLES_PATH": str(REPO / "roles")},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    return Run(done.returncode, parse_recap(output), output, time.monotonic() - start)


def _env() -> dict[str, str]:
    # The caller's ANSIBLE_* settings would change what is tested; ansible.cfg applies.
    return {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}


# A one-binary rootfs (static busybox from Debian's archive), built into an image with a
# Dockerfile FROM scratch: nothing comes from a registry. No network: a nested Docker 26
# (Debian 13) cannot configure IPv6 on the container interface inside a lab host.
BUILD_AND_RUN = """set -e
export DEBIAN_FRONTEND=noninteractive
command -v busybox >/dev/null || apt-get install -y -q busybox-static >/dev/null
ctx=$(mktemp -d)
mkdir -p "$ctx/rootfs/bin"
cp "$(command -v busybox)" "$ctx/rootfs/bin/busybox"
tar -C "$ctx/rootfs" -cf "$ctx/rootfs.tar" .
printf '%s\\n' 'FROM scratch' 'ADD rootfs.tar /' 'CMD ["/bin/busybox"]' >"$ctx/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t {tag} "$ctx" >/dev/null
rm -rf "$ctx"
docker run --rm --network none --runtime={runtime} {tag} \\
  /bin/busybox echo hello from a locally built image
"""
