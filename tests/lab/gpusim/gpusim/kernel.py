"""The simulated kernel release: one the image's Debian suite ships headers for."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpusim.paths import Paths


def _version_key(version: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in re.split(r"[.+~-]", version)]


def from_apt_lists(lists_dir: Path) -> str | None:
    """The ABI linux-headers-<arch> depends on in the apt lists (newest version wins)."""
    best: tuple[list[int | str], str] | None = None
    for packages in sorted(lists_dir.glob("*_Packages")):
        for stanza in packages.read_text(errors="replace").split("\n\n"):
            if not re.search(r"^Package: linux-headers-(amd64|arm64)$", stanza, re.M):
                continue
            version = re.search(r"^Version: (\S+)", stanza, re.M)
            depends = re.search(r"^Depends: linux-headers-(\S+-(?:amd64|arm64))", stanza, re.M)
            if version and depends:
                key = _version_key(version.group(1))
                if best is None or key > best[0]:
                    best = (key, depends.group(1))
    return best[1] if best else None


def from_apt_cache() -> str | None:
    try:
        result = subprocess.run(
            ["apt-cache", "depends", "linux-headers-amd64"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return None
    match = re.search(r"Depends: linux-headers-(\S+-amd64)", result.stdout)
    return match.group(1) if match else None


def choose(paths: Paths, override: str | None) -> str | None:
    if override:
        return override
    return from_apt_lists(paths.at("/var/lib/apt/lists")) or (
        None if paths.simulated_root else from_apt_cache()
    )


def write(paths: Paths, release: str) -> None:
    paths.kernel_release_file.parent.mkdir(parents=True, exist_ok=True)
    paths.kernel_release_file.write_text(release + "\n")
