"""The only place that calls the Docker CLI: typed results, errors as LabError."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import LabError

ENGINE_FIX = "run ./scripts/engine.sh (installs docker.io and starts dockerd)"


@dataclass(frozen=True)
class Container:
    """One container as `docker inspect` reports it."""

    name: str
    state: str
    labels: Mapping[str, str]
    restart_count: int


def docker(
    args: Sequence[str], *, stdin: bytes | None = None, check: bool = True, timeout: float = 600
) -> str:
    """Run `docker ARGS`; return stdout. A failure raises LabError naming the command."""
    try:
        proc = subprocess.run(
            ["docker", *args],
            input=stdin,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise LabError("the docker command is not installed", fix=ENGINE_FIX) from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`docker {' '.join(args)}` did not finish within {timeout:.0f} s") from exc
    out = proc.stdout.decode(errors="replace")
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise LabError(
            f"`docker {' '.join(args)}` failed (exit {proc.returncode}): {err}",
            fix="check `docker info`; " + ENGINE_FIX,
        )
    return out


def require_engine() -> None:
    """Fail early, with the fix, when no Docker engine answers."""
    try:
        docker(["info", "--format", "{{.ServerVersion}}"], timeout=30)
    except LabError as exc:
        raise LabError("no Docker engine answers", fix=ENGINE_FIX) from exc


def label_filters(labels: Mapping[str, str]) -> list[str]:
    """`--filter label=k=v` arguments that select exactly the objects carrying `labels`."""
    args: list[str] = []
    for key, value in sorted(labels.items()):
        # An empty value selects objects that carry the key at all.
        args += ["--filter", f"label={key}={value}" if value else f"label={key}"]
    return args


def parse_inspect(text: str) -> list[Container]:
    """Containers from `docker inspect` JSON (pure; tested with recorded output)."""
    items = json.loads(text) if text.strip() else []
    return [
        Container(
            name=str(item["Name"]).lstrip("/"),
            state=str(item["State"]["Status"]),
            labels=dict(item["Config"].get("Labels") or {}),
            restart_count=int(item.get("RestartCount", 0)),
        )
        for item in items
    ]


def containers(labels: Mapping[str, str]) -> list[Container]:
    """Every container, running or not, that carries all of `labels`."""
    ids = docker(["ps", "-aq", *label_filters(labels)]).split()
    if not ids:
        return []
    return sorted(parse_inspect(docker(["inspect", *ids])), key=lambda c: c.name)


def volumes(labels: Mapping[str, str]) -> list[str]:
    return sorted(docker(["volume", "ls", "-q", *label_filters(labels)]).split())


def networks(labels: Mapping[str, str]) -> list[str]:
    out = docker(["network", "ls", "--format", "{{.Name}}", *label_filters(labels)])
    return sorted(out.split())


def images(labels: Mapping[str, str]) -> list[str]:
    """`repository:tag` of every image that carries all of `labels`."""
    out = docker(["images", "--format", "{{.Repository}}:{{.Tag}}", *label_filters(labels)])
    return sorted(set(out.split()))


def image_exists(tag: str) -> bool:
    return bool(docker(["images", "-q", tag]).strip())


def import_tree(root: Path, tag: str, changes: Sequence[str]) -> None:
    """`tar -C root -c . | docker import`: stream a root file system tree into an image."""
    args = ["docker", "import"]
    for change in changes:
        args += ["--change", change]
    with subprocess.Popen(
        ["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
    ) as tar:
        proc = subprocess.run([*args, "-", tag], stdin=tar.stdout, capture_output=True, check=False)
    if tar.returncode != 0 or proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise LabError(
            f"importing {root} as image {tag} failed (tar exit {tar.returncode}, "
            f"docker exit {proc.returncode}): {err}",
            fix="check free disk space and `docker info`",
        )


def log_tail(name: str, lines: int = 5) -> str:
    """The last lines a container wrote (stdout and stderr), on one line; "(none)" if none."""
    proc = subprocess.run(
        ["docker", "logs", "--tail", str(lines), name], capture_output=True, text=True, check=False
    )
    return " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-lines:]) or "(none)"


def network_subnets(attempts: int = 5) -> list[str]:
    """The IPv4 subnets of every Docker network on this engine. A network another lab removes
    between the listing and the inspection (CI's lab groups start and stop labs at the same
    time) is listed again instead of failing the caller."""
    for attempt in range(1, attempts + 1):
        ids = docker(["network", "ls", "-q"]).split()
        if not ids:
            return []
        try:
            fmt = "{{range .IPAM.Config}}{{.Subnet}} {{end}}"
            out = docker(["network", "inspect", "--format", fmt, *ids])
        except LabError as exc:
            if "not found" not in str(exc) or attempt == attempts:
                raise
            continue
        return [s for s in out.split() if "." in s]
    return []  # not reached: the last attempt returns or raises


def network_gateway(name: str) -> str:
    """The IPv4 gateway of a Docker network: this machine as its containers see it."""
    out = docker(
        ["network", "inspect", "--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}", name]
    )
    gateways = [g for g in out.split() if "." in g]
    if not gateways:
        raise LabError(f"network {name} has no IPv4 gateway", fix="`provision lab down` and retry")
    return gateways[0]
