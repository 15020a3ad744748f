"""gpuprov.nvidia's dpkg filters: what one `dpkg-query` says, so a role calls the apt and
dpkg_selections modules only where something differs.

A no-op `ansible.builtin.apt` install opens python-apt's cache of every package the sources
offer: 2.7-2.9 CPU-seconds on a Debian 12 lab host, against 0.35 for the `dpkg-query` command
that answers the same question for the packages a role names (docs/benchmarks.md). The roles
read the installed state once with

    dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' NAME...

and give its stdout to these filters. They only ever say "nothing to do" where the module
would have done nothing: anything they cannot read (another format, an unknown package, a
version operator other than `=`) counts as different, and the module runs as before.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

# db:Status-Abbrev: the wanted selection, the package state, the error flag (dpkg-query(1)).
_WANT = {"u": "unknown", "i": "install", "h": "hold", "r": "deinstall", "p": "purge"}
# Package states in which `apt` would remove something (not n: not-installed,
# c: config-files only, which apt's remove leaves as it is).
_PRESENT = set("iUFWht")


def _rows(stdout: Any) -> dict[str, list[tuple[str, str]]]:
    """name -> [(version, Status-Abbrev)], from the query's lines (a name may have one line
    per architecture)."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for line in str(stdout or "").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or len(parts[2]) < 2:
            continue
        name, version, status = parts
        rows.setdefault(name.strip(), []).append((version.strip(), status))
    return rows


def _spec(spec: Any) -> tuple[str, str | None]:
    """`name` or `name=version` (apt's form; the version may hold `*` wildcards)."""
    text = str(spec).strip()
    name, sep, version = text.partition("=")
    return name, (version if sep else None)


def dpkg_missing(stdout: Any, specs: Iterable[Any]) -> list[str]:
    """The apt specs (`name`, `name=version`, `name=version-*`) not installed at that version:
    what `ansible.builtin.apt: name=SPECS state=present` would install or change."""
    rows = _rows(stdout)
    missing = []
    for spec in specs:
        name, version = _spec(spec)
        ok = any(
            status[1] == "i"
            and (len(status) < 3 or status[2] == " ")
            and (version is None or fnmatch.fnmatchcase(installed, version))
            for installed, status in rows.get(name, [])
        )
        # any other operator (>=, <) or qualifier is left to apt
        if not ok or any(c in name for c in "<>:"):
            missing.append(str(spec))
    return missing


def dpkg_present(stdout: Any, names: Iterable[Any]) -> list[str]:
    """The names installed in any state apt's removal acts on: what
    `ansible.builtin.apt: name=NAMES state=absent` would remove."""
    rows = _rows(stdout)
    return [
        str(n) for n in names if any(status[1] in _PRESENT for _v, status in rows.get(str(n), []))
    ]


def dpkg_selection_differs(stdout: Any, names: Iterable[Any], selection: str) -> list[str]:
    """The names whose dpkg selection is not SELECTION (hold, install, deinstall, purge),
    including names the query did not list: what `ansible.builtin.dpkg_selections` would
    change, one name at a time."""
    if selection not in _WANT.values():
        raise ValueError(f"dpkg_selection_differs: unknown selection {selection!r}")
    rows = _rows(stdout)
    return [
        str(n)
        for n in names
        if not rows.get(str(n))
        or any(_WANT.get(status[0]) != selection for _v, status in rows[str(n)])
    ]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "dpkg_missing": dpkg_missing,
            "dpkg_present": dpkg_present,
            "dpkg_selection_differs": dpkg_selection_differs,
        }
