"""`/etc/os-release` -> OsInfo."""

from __future__ import annotations

import re
import shlex

from ..facts import OsInfo
from ._text import ParseError, split_exit

# Values shlex would return unchanged, or with only their one pair of quotes removed: a word
# without quotes, backslashes or blanks; "..." without a `"` or a backslash; '...' without `'`.
# Everything else goes through shlex (tests/unit/test_parse_fast_paths.py: same answers).
_PLAIN = re.compile(r'[^\s"\'\\]+|"([^"\\]*)"|\'([^\']*)\'')


def _value(raw: str) -> str:
    """The first shell word of `raw` (os-release's quoting), or "" when there is none."""
    plain = _PLAIN.fullmatch(raw)
    if plain is not None:
        quoted = plain.group(1) if plain.group(1) is not None else plain.group(2)
        return raw if quoted is None else quoted
    try:
        parts = shlex.split(raw)
    except ValueError:
        parts = [raw.strip("\"'")]
    return parts[0] if parts else ""


def parse_os_release(text: str) -> OsInfo:
    fields: dict[str, str] = {}
    for line in split_exit(text).body.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _sep, raw = line.partition("=")
        fields[key] = _value(raw)
    if "ID" not in fields:
        raise ParseError("os-release.txt", "no ID= line")
    return OsInfo(
        id=fields["ID"],
        version_id=fields.get("VERSION_ID", ""),
        codename=fields.get("VERSION_CODENAME", ""),
        pretty_name=fields.get("PRETTY_NAME", fields["ID"]),
        id_like=tuple(fields.get("ID_LIKE", "").split()),
    )
