"""Files written whole or not at all: a temporary file beside the target and a rename.

Apart from orchestrator/report.py (which re-exports write_atomic) so that what the collection's
action plugins import on a controller with ansible-core alone (plandoc for
gpuprov.nvidia.verify) pulls in no terminal library (issue 49: `No module named 'rich'`)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path


def _regular_target(path: Path) -> Path:
    """What a rename may replace: `path` when absent, else the regular file it is or links
    to (the link stays and points at the new file); anything else (a device such as
    /dev/full or /dev/null, a FIFO, /dev/stdout, a directory) is never replaced: OSError.
    The CLI refuses those before any work (orchestrator/inputs.py, output_target); this
    holds when the path changed since."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if path.is_symlink():  # a dangling link: never replaced by a file of ours
            raise OSError(errno.ENOENT, f"{path} links to a file that does not exist") from None
        return path
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"{path} is not a regular file; it was left as it is")
    return Path(os.path.realpath(path))


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` through a temporary file in the same directory and a rename: a
    reader (or a crash, or Ctrl-C) never sees half a report. Only a new file or a regular
    one is written (through a symbolic link: its target); never a device or a pipe."""
    target = _regular_target(Path(path).expanduser())
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
