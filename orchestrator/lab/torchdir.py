"""A CPU PyTorch for the lab's hosts, installed once here and mounted read-only into each.

The multi-node all-reduce (`provision validate --multinode`) needs torch on every host; the
lab's Debian 12 hosts have none, and installing a 190 MB wheel on each would cost minutes of
a 2-core machine per host. So pip installs the CPU build once, into a cache directory of
this machine (`--target`, with its dependencies), and every host mounts that directory
read-only at Debian's site directory for local packages, which the hosts' own
`/usr/bin/python3` (3.11) has on its path: torch imports there as it would from a
`pip install` on the host, and nothing is written into the hosts. What runs on it is
labelled "simulated: CPU gloo collective, no GPU".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .. import paths
from ..errors import LabError

# The CPU build of PyTorch 2.13.0 for CPython 3.11 that this machine and CI's carry
# (/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl, on pip's find-links).
TORCH = "torch==2.13.0"
PYTHON = "3.11"  # Debian 12's python3, the lab image's (orchestrator/lab/images.yaml)
# Debian's python3 puts /usr/local/lib/python3.X/dist-packages on sys.path (locally
# installed packages, kept apart from the distribution's /usr/lib/python3/dist-packages).
TARGET = f"/usr/local/lib/python{PYTHON}/dist-packages"


def cache_dir() -> Path:
    return paths.state_root() / ".cache" / "lab" / f"torch-{TORCH.split('==')[1]}-cpu-py311"


def ensure(*, say: Callable[[str], object] = print, root: Path | None = None) -> Path:
    """The installed directory (pip install --target, byte-compiled, once: 3 min 20 s on
    this machine at a load average of about 10)."""
    final = root or cache_dir()
    if (final / "torch" / "__init__.py").is_file():
        return final
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"lab: installing {TORCH} (CPU) for Python {PYTHON} into {final} (once)")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--python-version",
            PYTHON,
            "--target",
            str(tmp),
            TORCH,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise LabError(
            f"pip could not install {TORCH} for Python {PYTHON}: {last}",
            fix="put the CPU wheel (torch-2.13.0+cpu-cp311-...whl) on pip's find-links, or "
            "run without --with-torch",
        )
    tmp.rename(final)
    return final


def mount(directory: Path) -> tuple[Path, str]:
    """The read-only bind mount of the directory into a host."""
    return (directory, TARGET)
