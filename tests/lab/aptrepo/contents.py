"""Contents-style file lists of the test doubles, and a simulated install that says which
files a package set puts on a host.

The file lists come from tests/recorded/reference/files.yaml (which package ships
nvidia-smi, nvidia-persistenced, nv-fabricmanager, nvidia-imex, with sources and certainty),
never from a role's variables. `contents_index` writes them as Debian's `Contents-<arch>`
does (`path  section/package,...`); `simulate` follows Depends/Requires through a double's
packages (the first alternative that exists, or one already installed or provided; versions
are not compared: what is checked is which files a set can provide, not which release) and
returns the installed names and their files.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FILES = Path(__file__).resolve().parents[2] / "recorded" / "reference" / "files.yaml"
FILES_REL = "tests/recorded/reference/files.yaml"

# `-<f>`: '-<b>', '-<b>-server' or nothing (files.yaml header); `<b>`: a branch number.
_PLACEHOLDERS = {"-<f>": r"(?:-[0-9]+(?:-server)?)?", "<b>": r"[0-9]+"}


class ContentsError(ValueError):
    """files.yaml does not say what is asked."""


@dataclass(frozen=True)
class FileEntry:
    pattern: str
    formats: tuple[str, ...]
    files: tuple[str, ...]
    certainty: str
    extra: Mapping[str, str]

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        text = re.escape(self.pattern)
        for placeholder, regex in _PLACEHOLDERS.items():
            text = text.replace(re.escape(placeholder), regex)
        return re.compile(text + r"\Z")


@functools.lru_cache(maxsize=1)
def entries() -> tuple[FileEntry, ...]:
    data = yaml.safe_load(FILES.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ContentsError(f"{FILES_REL}: no `files:` list")
    out = []
    for item in data["files"]:
        certainty = item.get("certainty")
        extra = {k: str(v) for k, v in item.items() if k in ("unit", "node_config", "config")}
        out.append(
            FileEntry(
                pattern=str(item["package"]),
                formats=tuple(str(f) for f in item["formats"]),
                files=tuple(str(f) for f in item["files"]),
                certainty=str(certainty),
                extra=extra,
            )
        )
    return tuple(out)


def entry_for(name: str, fmt: str) -> FileEntry | None:
    """The files.yaml entry of package `name` in format `fmt` (apt | rpm), if any."""
    found = [e for e in entries() if fmt in e.formats and e.regex.match(name)]
    if len(found) > 1:
        raise ContentsError(f"{FILES_REL}: {name} ({fmt}) matches {[e.pattern for e in found]}")
    return found[0] if found else None


def files_of(name: str, fmt: str) -> tuple[str, ...]:
    entry = entry_for(name, fmt)
    return entry.files if entry else ()


def contents_index(names: Iterable[tuple[str, str]], fmt: str = "apt") -> str:
    """Debian's Contents format for (package, section) pairs: one line per file."""
    owners: dict[str, list[str]] = {}
    for name, section in names:
        for path in files_of(name, fmt):
            owners.setdefault(path.lstrip("/"), []).append(f"{section}/{name}")
    width = max((len(p) for p in owners), default=0)
    return "".join(
        f"{path.ljust(width)}   {','.join(sorted(set(pkgs)))}\n"
        for path, pkgs in sorted(owners.items())
    )


@dataclass(frozen=True)
class Node:
    """One package of a double, as the simulated install sees it."""

    name: str
    depends: tuple[str, ...]  # clauses, 'a (>= 1) | b'
    provides: tuple[str, ...]


@dataclass(frozen=True)
class Install:
    installed: tuple[str, ...]
    missing: tuple[str, ...]  # requested or depended-on names nothing in the double satisfies
    files: Mapping[str, tuple[str, ...]]  # path -> packages shipping it

    def provides(self, basename: str) -> bool:
        return any(Path(path).name == basename for path in self.files)


def _names(clause: str) -> list[str]:
    """'a (>= 1) | b:any' -> ['a', 'b']; rpm 'kernel-core = 5.14' -> ['kernel-core']."""
    return [re.split(r"[\s(:=<>]", alt.strip(), maxsplit=1)[0] for alt in clause.split("|")]


def simulate(requested: Sequence[str], nodes: Sequence[Node], fmt: str) -> Install:
    by_name = {n.name: n for n in nodes}
    providers: dict[str, list[str]] = {}
    for node in nodes:
        for virtual in node.provides:
            providers.setdefault(virtual, []).append(node.name)
    installed: dict[str, None] = {}
    missing: list[str] = []

    def satisfied(name: str) -> bool:
        return name in installed or any(p in installed for p in providers.get(name, ()))

    def pick(name: str) -> str | None:
        if name in by_name:
            return name
        return (providers.get(name) or [None])[0]

    queue = [[name] for name in requested]
    while queue:
        alternatives = queue.pop(0)
        if any(satisfied(a) for a in alternatives):
            continue
        chosen = next((p for p in map(pick, alternatives) if p), None)
        if chosen is None:
            missing.append(" | ".join(alternatives))
            continue
        installed[chosen] = None
        queue += [_names(clause) for clause in by_name[chosen].depends]
    files: dict[str, list[str]] = {}
    for name in installed:
        for path in files_of(name, fmt):
            files.setdefault(path, []).append(name)
    return Install(
        tuple(installed), tuple(missing), {k: tuple(v) for k, v in sorted(files.items())}
    )


def apt_nodes(packages: Iterable[Any]) -> list[Node]:
    """Nodes of aptrepo Packages (.deb doubles and index-only replays)."""
    nodes = []
    for p in packages:
        provides = str(p.extra_control.get("Provides", ""))
        nodes.append(
            Node(
                p.name,
                tuple(p.depends),
                tuple(n for c in provides.split(",") if c.strip() for n in _names(c)),
            )
        )
    return nodes
