"""`/etc/os-release` -> OsInfo."""

from __future__ import annotations

import shlex

from orchestrator.facts import OsInfo
from orchestrator.parsers._text import ParseError, split_exit


def parse_os_release(text: str) -> OsInfo:
    fields: dict[str, str] = {}
    for line in split_exit(text).body.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = [raw.strip("\"'")]
        fields[key] = parts[0] if parts else ""
    if "ID" not in fields:
        raise ParseError("os-release.txt", "no ID= line")
    return OsInfo(
        id=fields["ID"],
        version_id=fields.get("VERSION_ID", ""),
        codename=fields.get("VERSION_CODENAME", ""),
        pretty_name=fields.get("PRETTY_NAME", fields["ID"]),
        id_like=tuple(fields.get("ID_LIKE", "").split()),
    )
