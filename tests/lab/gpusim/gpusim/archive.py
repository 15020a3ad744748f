"""Which Debian kernel ABI a suite ships headers for now (run on the control machine).

Test hosts have no apt lists at first boot, and the driver role reads `uname -r` before its
`apt-get update`; so the lab's preparation step (build-shim) asks Debian's archive for the
ABI that `linux-headers-<arch>` depends on in <suite> itself: the kernel of the suite's point
release, as on a host installed from the current 12.x / 13.x media (not the newer kernel of
<suite>-security: Debian 12's packaged open driver 535.261.03 fails to build against
bookworm-security's 6.1.0-57 headers, `too few arguments to function 'pci_resize_resource'`,
seen in this lab; docs/debian-nvidia-packages.md). It leaves the name in
build/kernel-release.<suite> for boot to present. This only picks a name: the hosts still
verify every package they install with apt.
"""

from __future__ import annotations

import argparse
import lzma
import re
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpusim.kernel import headers_abi

MIRROR = "http://deb.debian.org/debian"
MAX_AGE_S = 12 * 3600


def index_urls(suite: str, arch: str = "amd64") -> list[str]:
    return [f"{MIRROR}/dists/{suite}/main/binary-{arch}/Packages.xz"]


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return lzma.decompress(response.read()).decode(errors="replace")


def resolve(suite: str, fetch: Iterable[str] | None = None) -> str | None:
    texts = list(fetch) if fetch is not None else [_fetch(u) for u in index_urls(suite)]
    return headers_abi(texts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpusim-archive")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("suites", nargs="+")
    args = parser.parse_args(argv)
    status = 0
    for suite in args.suites:
        if not re.fullmatch(r"[a-z]+", suite):
            print(f"gpusim-archive: bad suite name {suite!r}", file=sys.stderr)
            return 2
        target = args.out_dir / f"kernel-release.{suite}"
        if target.exists() and time.time() - target.stat().st_mtime < MAX_AGE_S:
            continue
        try:
            release = resolve(suite)
        except OSError as exc:
            print(
                f"gpusim-archive: {suite}: cannot read Debian's archive ({exc}); lab hosts "
                "will show this machine's kernel release",
                file=sys.stderr,
            )
            status = 0 if target.exists() else status
            continue
        if release is None:
            print(f"gpusim-archive: {suite}: no linux-headers-amd64 found", file=sys.stderr)
            continue
        args.out_dir.mkdir(parents=True, exist_ok=True)
        target.write_text(release + "\n")
        print(f"gpusim-archive: {suite}: kernel {release}")
    return status
