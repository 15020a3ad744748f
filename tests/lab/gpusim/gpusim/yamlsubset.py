"""A reader for the small YAML subset the profiles and models.yaml use (stdlib only).

Test hosts have no PyYAML. Supported: block mappings and sequences by indentation, flow
sequences of scalars (``[0, 1]``), comments, plain/quoted scalars, ints (decimal and ``0x``),
floats, booleans, null. A unit test checks this reader agrees with PyYAML on every data file.
"""

from __future__ import annotations

import marshal
import os
import re
import sys
from dataclasses import dataclass

Scalar = str | int | float | bool | None
Node = Scalar | list["Node"] | dict[str, "Node"]

_INT = re.compile(r"^[-+]?(0x[0-9a-fA-F]+|[0-9]+)$")
_FLOAT = re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")


class YamlSubsetError(ValueError):
    """The text uses YAML this reader does not support (or is not YAML)."""


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int
    text: str


def _strip_comment(raw: str) -> str:
    quote = ""
    for i, ch in enumerate(raw):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or raw[i - 1] in " \t"):
            return raw[:i].rstrip()
    return raw.rstrip()


def scalar(text: str) -> Scalar:
    """The value of one plain or quoted scalar."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT.match(text):
        return int(text, 0) if not re.match(r"^[-+]?0[0-9]", text) else int(text, 10)
    if _FLOAT.match(text):
        return float(text)
    return text


def _split_flow(inner: str) -> list[str]:
    parts: list[str] = []
    current = ""
    quote = ""
    for ch in inner:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            parts.append(current)
            current = ""
            continue
        current += ch
    parts.append(current)
    return parts


def _value(text: str, line: _Line) -> Node:
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlSubsetError(f"line {line.number}: unclosed flow sequence")
        inner = text[1:-1].strip()
        return [scalar(part.strip()) for part in _split_flow(inner)] if inner else []
    if text.startswith("{"):
        raise YamlSubsetError(f"line {line.number}: flow mappings are not supported")
    return scalar(text)


def _split_key(text: str, line: _Line) -> tuple[str, str]:
    match = re.match(r"^([^:#'\"]+|'[^']*'|\"[^\"]*\"):(\s+(.*))?$", text)
    if not match:
        raise YamlSubsetError(f"line {line.number}: expected 'key: value', got {text!r}")
    key = scalar(match.group(1).strip())
    return str(key), (match.group(3) or "").strip()


def _block(lines: list[_Line], pos: int, indent: int) -> tuple[Node, int]:
    if lines[pos].text.startswith("- ") or lines[pos].text == "-":
        return _sequence(lines, pos, indent)
    return _mapping(lines, pos, indent)


def _sequence(lines: list[_Line], pos: int, indent: int) -> tuple[Node, int]:
    items: list[Node] = []
    while pos < len(lines) and lines[pos].indent == indent and lines[pos].text.startswith("-"):
        line = lines[pos]
        rest = line.text[1:].strip()
        if not rest:
            item, pos = _block(lines, pos + 1, lines[pos + 1].indent)
        elif re.match(r"^[^\[\"']+?:(\s|$)", rest):
            # "- key: value" starts a mapping whose keys sit at the column after "- ".
            inner = indent + (len(line.text) - len(rest))
            lines[pos] = _Line(line.number, inner, rest)
            item, pos = _mapping(lines, pos, inner)
        else:
            item, pos = _value(rest, line), pos + 1
        items.append(item)
    return items, pos


def _mapping(lines: list[_Line], pos: int, indent: int) -> tuple[Node, int]:
    result: dict[str, Node] = {}
    while pos < len(lines) and lines[pos].indent == indent:
        line = lines[pos]
        if line.text.startswith("-"):
            break
        key, rest = _split_key(line.text, line)
        pos += 1
        if rest:
            result[key] = _value(rest, line)
        elif pos < len(lines) and (
            lines[pos].indent > indent
            or (lines[pos].indent == indent and lines[pos].text.startswith("-"))
        ):
            result[key], pos = _block(lines, pos, lines[pos].indent)
        else:
            result[key] = None
    if pos < len(lines) and lines[pos].indent > indent:
        raise YamlSubsetError(f"line {lines[pos].number}: unexpected indentation")
    return result, pos


def loads(text: str) -> Node:
    """Parse ``text``; raises YamlSubsetError on anything outside the subset."""
    lines: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip() in ("---", "..."):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError(f"line {number}: tabs in indentation")
        stripped = _strip_comment(raw)
        if stripped.strip():
            indent = len(stripped) - len(stripped.lstrip(" "))
            lines.append(_Line(number, indent, stripped.strip()))
    if not lines:
        return None
    node, pos = _block(lines, 0, lines[0].indent)
    if pos != len(lines):
        raise YamlSubsetError(f"line {lines[pos].number}: unexpected content")
    return node


_PARSED: dict[str, Node] = {}


def load_path(path: os.PathLike[str] | str) -> Node:
    """The file at `path`, parsed once per process. Where the gpusim commands keep their
    bytecode in a cache (lab hosts: sys.pycache_prefix), the parsed value is kept beside it,
    keyed by the file's path, size and modification time, so a command called many times (a
    probe runs nvidia-smi about ten times) parses each file once. Speed only."""
    name = os.fspath(path)
    if name in _PARSED:
        return _PARSED[name]
    folder = os.path.join(sys.pycache_prefix, "yaml") if sys.pycache_prefix else None
    cached = None
    if folder is not None:
        st = os.stat(name)
        flat = name.strip("/").replace("/", "%")
        cached = os.path.join(folder, f"{flat}.{st.st_size}.{st.st_mtime_ns}.marshal")
        try:
            with open(cached, "rb") as f:
                node: Node = marshal.load(f)
            _PARSED[name] = node
            return node
        except (OSError, EOFError, ValueError, TypeError):
            pass
    with open(name, encoding="utf-8") as f:
        node = loads(f.read())
    if cached is not None:
        try:
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            partial = f"{cached}.{os.getpid()}.tmp"
            with open(partial, "wb") as out:
                marshal.dump(node, out)
            os.replace(partial, cached)
        except OSError:
            pass
    _PARSED[name] = node
    return node
