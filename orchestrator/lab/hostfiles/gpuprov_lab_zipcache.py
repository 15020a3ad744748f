"""Lab hosts only: a bytecode cache for Python modules imported from zip archives.

Written into the lab's host images (orchestrator/lab/images.py) with a .pth file that imports
it at every interpreter start; never imported by the orchestrator. Each Ansible module run
ships its module_utils in a zip (AnsiballZ) that Python's zipimport compiles from source on
every run, because the zip holds no bytecode: on a lab host about 110 ms of a trivial module's
190 ms of CPU (`python3 -X importtime`, ansible-core 2.19, Debian 12), and the lab runs some
3,600 modules per CI run on 2 shared cores. This keeps the code object of each source it
compiled, keyed by the source's SHA-256 and the interpreter's bytecode magic, so the modules
run the same code without compiling it again. Speed only: what a module does is unchanged;
real hosts pay the compile on every run (docs/benchmarks.md says which figures were taken on
lab hosts). Any failure falls back to compiling.
"""

from __future__ import annotations

import _imp
import marshal
import os
import zipimport

# Every interpreter on a lab host imports this module: typing alone would add about 14 ms
# to each start (re, enum, collections), so the annotations' names exist for mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import CodeType
    from typing import Any

CACHE = "/var/cache/gpuprov-lab/zipimport"
_compile: Any = getattr(zipimport, "_compile_source", None)
_fix_co_filename: Any = getattr(_imp, "_fix_co_filename", None)


def _directory() -> str:
    import _frozen_importlib_external  # already loaded: importlib's own

    magic: bytes = _frozen_importlib_external.MAGIC_NUMBER
    return os.path.join(CACHE, magic.hex())


def cached_compile(pathname: str, source: bytes) -> CodeType:
    """zipimport's _compile_source(pathname, source), through the cache."""
    try:
        import hashlib  # here, not at start-up: most interpreters never import from a zip
        from types import CodeType

        folder = _directory()
        name = os.path.join(folder, hashlib.sha256(source).hexdigest())
        try:
            with open(name, "rb") as cached:
                code = marshal.loads(cached.read())
        except FileNotFoundError:
            code = _compile(pathname, source)
            try:
                os.makedirs(folder, exist_ok=True)
                partial = f"{name}.{os.getpid()}.tmp"
                with open(partial, "wb") as out:
                    out.write(marshal.dumps(code))
                os.replace(partial, name)
            except OSError:  # not root (an unprivileged module run): compile, keep nothing
                pass
            return code  # type: ignore[no-any-return]
        if not isinstance(code, CodeType):
            raise TypeError(name)
        # the archive's path differs per run (a temporary folder): tracebacks name this one
        _fix_co_filename(code, pathname)
        return code
    except Exception:
        return _compile(pathname, source)  # type: ignore[no-any-return]


if _compile is not None and _fix_co_filename is not None:
    setattr(zipimport, "_compile_source", cached_compile)  # noqa: B010
