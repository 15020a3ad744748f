"""Saved raw facts: `DIR/<host>/<file>`, the layout of ../shared/fixtures/real/<host>/.

`provision detect --save DIR` writes it; `provision plan --facts DIR` reads it back. A missing
file means the tool is absent on that host, so saving replaces a host's directory whole
(a stale nvidia-smi output from an earlier run must not survive a driver removal).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .errors import BadInputError

RawFacts = dict[str, str]  # file name -> text


def _on_disk(name: str) -> str:
    """A host or file name as it lies on disk: its UTF-8 bytes, whatever the locale. Under
    LANG=C Python's file-system encoding may be ASCII; os.fsdecode keeps the bytes."""
    return os.fsdecode(name.encode("utf-8", "surrogateescape"))


def _from_disk(entry: str, where: Path) -> str:
    """A name read from disk -> the text it spells in UTF-8 (as an inventory's host names
    are read), never the surrogates an ASCII locale decodes non-ASCII bytes to."""
    try:
        return os.fsencode(entry).decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(
            f"{where}: the name {entry!r} is not UTF-8",
            fix="rename it to the host's inventory name (inventories are UTF-8 text)",
        ) from None


def _check_name(kind: str, name: str, where: Path) -> None:
    if not name or name.startswith(".") or "/" in name or "\0" in name:
        raise BadInputError(
            f"{kind} name {name!r} cannot be a file name under {where}",
            fix="use inventory host names without '/' and not starting with '.'",
        )


def load_host(path: Path) -> RawFacts:
    raw: RawFacts = {}
    # os.scandir: the file type comes with the name (no stat per file; 25,000 files for a
    # 1,000-host directory)
    with os.scandir(path) as entries:
        files = sorted(e.name for e in entries if e.name[:1] != "." and e.is_file())
    for name in files:
        f = path / name
        try:
            raw[_from_disk(name, path)] = f.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise BadInputError(
                f"saved facts file {f} cannot be read: {exc.strerror}",
                fix=f"fix its permissions (chmod u+r {f}) or re-run `provision detect --save`",
            ) from exc
    return raw


def load_dir(path: str | os.PathLike[str]) -> dict[str, RawFacts]:
    """Every `<host>/` directory under `path` -> its raw outputs."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise BadInputError(
            f"facts directory {root} does not exist or is not a directory",
            fix="pass a directory written by `provision detect --save DIR`",
        )
    with os.scandir(root) as entries:
        names = sorted(e.name for e in entries if e.name[:1] != "." and e.is_dir())
    hosts = {_from_disk(name, root): load_host(root / name) for name in names}
    if not hosts:
        raise BadInputError(
            f"facts directory {root} holds no host directories",
            fix="expected DIR/<host>/<file> as `provision detect --save DIR` writes it",
        )
    empty = sorted(h for h, files in hosts.items() if not files)
    if empty:
        raise BadInputError(
            f"facts directory {root}: host directories without files: {', '.join(empty)}",
            fix="remove them or re-run `provision detect --save DIR`",
        )
    return hosts


def save_host(root: Path, host: str, raw: Mapping[str, str]) -> Path:
    _check_name("host", host, root)
    for name in raw:
        _check_name("file", name, root / host)
    root.mkdir(parents=True, exist_ok=True)
    disk = _on_disk(host)
    staging = Path(tempfile.mkdtemp(prefix=f".{disk}.", dir=root))
    for name, text in raw.items():
        (staging / _on_disk(name)).write_text(text, encoding="utf-8")
    target = root / disk
    # each capture is written whole before it takes the host's name: DIR/<host>/ is never
    # a half-written mix of the old and the new outputs
    old = Path(tempfile.mkdtemp(prefix=f".{disk}.old.", dir=root)) if target.exists() else None
    if old is not None:
        target.replace(old / disk)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old)
    return target


def save_dir(path: str | os.PathLike[str], raw_by_host: Mapping[str, Mapping[str, str]]) -> Path:
    """Write `path/<host>/<file>` for every host; each host's directory is replaced whole."""
    root = Path(path).expanduser()
    for host, raw in raw_by_host.items():
        save_host(root, host, raw)
    return root
