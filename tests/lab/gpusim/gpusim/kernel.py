"""The simulated kernel release: one the image's Debian suite ships headers for."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from gpusim.paths import Paths

GPUSIM_DIR = Path(__file__).resolve().parent.parent


def _version_key(version: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in re.split(r"[.+~-]", version)]


def headers_abi(package_indexes: Iterable[str]) -> str | None:
    """The ABI linux-headers-<arch> depends on across apt Packages indexes (newest wins)."""
    best: tuple[list[int | str], str] | None = None
    for text in package_indexes:
        for stanza in text.split("\n\n"):
            if not re.search(r"^Package: linux-headers-(amd64|arm64)$", stanza, re.M):
                continue
            version = re.search(r"^Version: (\S+)", stanza, re.M)
            depends = re.search(r"^Depends: linux-headers-(\S+-(?:amd64|arm64))", stanza, re.M)
            if version and depends:
                key = _version_key(version.group(1))
                if best is None or key > best[0]:
                    best = (key, depends.group(1))
    return best[1] if best else None


def from_apt_lists(lists_dir: Path, codename: str | None = None) -> str | None:
    """From the host's own apt lists (present after an apt-get update): the suite's own main
    index when there is one (the point release's kernel, as archive.py explains), else any."""
    lists = sorted(lists_dir.glob("*_Packages"))
    own = [p for p in lists if codename and f"_dists_{codename}_main_" in p.name]
    return headers_abi(p.read_text(errors="replace") for p in own or lists)


def codename(paths: Paths) -> str | None:
    try:
        os_release = paths.at("/etc/os-release").read_text()
    except FileNotFoundError:
        return None
    match = re.search(r"^VERSION_CODENAME=(\w+)", os_release, re.M)
    return match.group(1) if match else None


def from_prepared(paths: Paths) -> str | None:
    """What the lab's preparation step resolved from Debian's archive for this suite."""
    suite = codename(paths)
    if not suite:
        return None
    prepared = GPUSIM_DIR / "build" / f"kernel-release.{suite}"
    return prepared.read_text().strip() or None if prepared.exists() else None


def choose(paths: Paths, override: str | None) -> str | None:
    if override:
        return override
    return from_apt_lists(paths.at("/var/lib/apt/lists"), codename(paths)) or from_prepared(paths)


def write(paths: Paths, release: str) -> None:
    paths.kernel_release_file.parent.mkdir(parents=True, exist_ok=True)
    paths.kernel_release_file.write_text(release + "\n")
