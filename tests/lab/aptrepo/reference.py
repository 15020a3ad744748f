"""The recorded reference the test doubles are generated from (tests/recorded/reference/).

Every package name, version, relation, unit and file of a stand-in is read from
`packages.yaml` here; nothing about NVIDIA's or Canonical's packages is typed into the
generator. `selection.yaml` (beside this file) only chooses WHICH recorded versions and
branches to publish. Where the reference is silent (its `gaps:`), the generator says so in the
package's README.test-double and in README.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "tests" / "recorded" / "reference" / "packages.yaml"
SELECTION = Path(__file__).resolve().with_name("selection.yaml")
REFERENCE_REL = "tests/recorded/reference/packages.yaml"

# A version token as the reference writes them: 580.159.04, 580.159.04-1, 1:3.2.1-1ubuntu2,
# 5.15.0-56.62+1, 580.95.05-0ubuntu0.22.04.2, 610-2ubuntu1.
_VERSION = re.compile(r"(?<![\w.])(?:\d+:)?\d+(?:\.\d+)*(?:-[0-9A-Za-z.+~]+)?(?![\w])")


class ReferenceError(ValueError):
    """The reference or the selection does not say what the generator needs."""


@functools.lru_cache(maxsize=1)
def data() -> Mapping[str, Any]:
    loaded = yaml.safe_load(REFERENCE.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ReferenceError(f"{REFERENCE} is not a mapping")
    return loaded


@functools.lru_cache(maxsize=1)
def selection() -> Mapping[str, Any]:
    loaded = yaml.safe_load(SELECTION.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ReferenceError(f"{SELECTION} is not a mapping")
    return loaded


def _walk(path: str) -> list[Any] | None:
    """The nodes along a dotted path; keys may hold dots themselves ('1.18.0')."""
    node: Any = data()
    nodes = [node]
    parts = path.split(".")
    i = 0
    while i < len(parts):
        if not isinstance(node, dict):
            return None
        for j in range(len(parts), i, -1):
            key = ".".join(parts[i:j])
            if key in node:
                node, i = node[key], j
                nodes.append(node)
                break
        else:
            return None
    return nodes


def at(path: str) -> Any:
    """The entry at a dotted path of packages.yaml, e.g. 'cuda_apt.debian_style_names'."""
    nodes = _walk(path)
    if nodes is None:
        raise ReferenceError(f"{REFERENCE_REL} has no entry {path!r}")
    return nodes[-1]


def _scalars(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _scalars(value)
    elif isinstance(node, list):
        for item in node:
            yield from _scalars(item)
    elif node is not None:
        yield str(node)


@functools.lru_cache(maxsize=1)
def recorded_versions() -> frozenset[str]:
    """Every version-shaped token written anywhere in packages.yaml, with its upstream part
    (epoch and revision stripped) as a token of its own."""
    found: set[str] = set()
    for text in _scalars(data()):
        for token in _VERSION.findall(text):
            plain = token.split(":", 1)[-1]  # '3:575.51-1.fc41' also records '575.51'
            # '5.15.0-56.62+1' (an ABI package of kernel 5.15.0-56.62) records '5.15.0-56.62'.
            found.update({token, plain, plain.split("-", 1)[0], re.sub(r"\+\d+$", "", plain)})
    return frozenset(found)


def require_recorded(version: str, what: str) -> str:
    if version not in recorded_versions():
        raise ReferenceError(f"{what}: version {version!r} is not written in {REFERENCE_REL}")
    return version


def expand(pattern: str, branch: str) -> str:
    return pattern.replace("<b>", branch)


def branch_entry(branch: str) -> dict[str, Any]:
    """cuda_apt.branches.<branch>, with `same_as` resolved (595 is 'same_as: 590')."""
    branches = at("cuda_apt.branches")
    if branch not in branches:
        raise ReferenceError(f"{REFERENCE_REL} records no CUDA apt branch {branch}")
    entry = dict(branches[branch])
    base = entry.pop("same_as", None)
    if base is not None:
        return {**branch_entry(str(base)), **entry}
    return entry


def first_name(value: Any) -> str | None:
    """A name field: 'none' / 'unknown' / absent -> None; a list -> its first entry."""
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        return None
    text = str(value).split()[0]
    return None if text in {"none", "unknown", "not"} else text


def _nearest(path: str, key: str) -> Any:
    """`key` of the entry at `path`, or of its nearest parent that has one."""
    nodes = _walk(path)
    if nodes is None:
        raise ReferenceError(f"{REFERENCE_REL} has no entry {path!r}")
    for node in reversed(nodes):
        if isinstance(node, dict) and key in node:
            return node[key]
    return None


def sources_of(path: str) -> list[str]:
    """The `source:` list of an entry (or of its nearest parent that has one)."""
    source = _nearest(path, "source")
    if source is None:
        return []
    return [str(s) for s in (source if isinstance(source, list) else [source])]


def certainty_of(path: str) -> str:
    value = _nearest(path, "certainty")
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    return "unknown" if value is None else str(value)


def relationship(prefix: str) -> dict[str, Any]:
    """The entry of `relationships:` whose `what` starts with `prefix`."""
    for entry in at("relationships"):
        if str(entry.get("what", "")).startswith(prefix):
            return dict(entry)
    raise ReferenceError(f"{REFERENCE_REL} relationships: no entry starting {prefix!r}")


def parse_depends(text: str) -> list[str]:
    """'a (>= 1), b (>= 1)  -> comment' -> ['a (>= 1)', 'b (>= 1)']."""
    text = text.split("->")[0]
    return [part.strip() for part in re.split(r",\s*(?![^()]*\))", text) if part.strip()]


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


@dataclass(frozen=True)
class Origin:
    """Where a stand-in comes from: the reference entries read, their sources, certainty."""

    entries: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [f"Generated from {REFERENCE_REL}:"]
        for entry in self.entries:
            lines.append(f"  - {entry} (certainty: {certainty_of(entry)})")
            lines += [f"      source: {s}" for s in sources_of(entry)]
        if self.notes:
            lines.append("Not recorded there (the generator's own choice, say so when it matters):")
            lines += [f"  - {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def short(self) -> str:
        return ", ".join(self.entries)
