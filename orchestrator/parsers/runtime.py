"""Container runtime probes: `docker info`, daemon.json, CDI specs, `nvidia-ctk --version`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ._text import ParseError, split_exit

_CTK = re.compile(r"version\s+v?(?P<v>\d+\.\d+\.\d+\S*)")


@dataclass(frozen=True)
class DockerInfo:
    server_version: str | None  # None: the daemon did not answer
    runtimes: tuple[str, ...]
    default_runtime: str | None
    cgroup_driver: str | None
    cgroup_version: str | None
    cdi_spec_dirs: tuple[str, ...]
    server_errors: tuple[str, ...]


def parse_docker_info(text: str) -> DockerInfo:
    body = split_exit(text).body.strip()
    start = body.find("{")
    if start < 0:
        return DockerInfo(None, (), None, None, None, (), (body,) if body else ())
    try:
        data: dict[str, Any] = json.loads(body[start : body.rfind("}") + 1])
    except json.JSONDecodeError as exc:
        raise ParseError("docker-info.txt", f"not JSON: {exc}") from exc
    runtimes = data.get("Runtimes") or {}
    return DockerInfo(
        server_version=data.get("ServerVersion") or None,
        runtimes=tuple(sorted(runtimes)),
        default_runtime=data.get("DefaultRuntime") or None,
        cgroup_driver=data.get("CgroupDriver") or None,
        cgroup_version=data.get("CgroupVersion") or None,
        cdi_spec_dirs=tuple(data.get("CDISpecDirs") or ()),
        server_errors=tuple(data.get("ServerErrors") or ()),
    )


def parse_daemon_json(text: str) -> dict[str, object] | None:
    """/etc/docker/daemon.json; None when empty. A broken file is an error (docker won't start)."""
    body = split_exit(text).body.strip()
    if not body:
        return None
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ParseError(
            "docker-daemon-json.txt", f"/etc/docker/daemon.json is not JSON: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise ParseError("docker-daemon-json.txt", "/etc/docker/daemon.json is not an object")
    return data


def parse_cdi_specs(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in split_exit(text).body.splitlines() if line.strip())


def parse_ctk_version(text: str) -> str | None:
    out = split_exit(text)
    m = _CTK.search(out.body)
    return m["v"] if out.ok and m else None
