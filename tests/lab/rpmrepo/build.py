"""Write the doubles' sources (specs, modulemd YAML, build.sh) and build them on a lab host."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

from rpmrepo.model import Repo, os_repositories, repositories
from rpmrepo.render import modules_yaml, spec, spec_sources

HERE = Path(__file__).resolve().parent
# What the lab host needs from Debian's archive to build and to use the doubles.
HOST_PACKAGES = ("dnf", "dnf-plugins-core", "rpm", "createrepo-c", "gnupg")


def sources(repos: Sequence[Repo]) -> dict[str, str]:
    """Relative path -> content of every file build.sh reads."""
    out: dict[str, str] = {"build.sh": (HERE / "build.sh").read_text(encoding="utf-8")}
    for repo in repos:
        for rpm in repo.rpms:
            out[f"src/{repo.path}/{rpm.name}-{rpm.version}-{rpm.release}.spec"] = spec(rpm)
            for name, content in spec_sources(rpm).items():
                out[f"src/{repo.path}/{name}"] = content
        if repo.streams:
            out[f"src/{repo.path}/modules.yaml"] = modules_yaml(repo)
    return out


def tarball(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in sorted(files.items()):
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_on_host(ssh: Sequence[str], served_root: str, timeout: float = 600) -> str:
    """Install the tools, unpack the sources and build the repositories under `served_root`
    on the host that the ssh argv `ssh` reaches. Returns build.sh's last line."""
    repos = repositories(served_root) + os_repositories()
    script = (
        "set -eu; export DEBIAN_FRONTEND=noninteractive;"
        " command -v createrepo_c >/dev/null || { apt-get update -qq &&"
        f" apt-get install -y -qq --no-install-recommends {' '.join(HOST_PACKAGES)} >/dev/null; }};"
        f" rm -rf {served_root} /tmp/gpuprov-rpmrepo-src; mkdir -p /tmp/gpuprov-rpmrepo-src;"
        " tar -x -C /tmp/gpuprov-rpmrepo-src;"
        f" sh /tmp/gpuprov-rpmrepo-src/build.sh /tmp/gpuprov-rpmrepo-src/src {served_root}"
    )
    done = subprocess.run(
        [*ssh, script],
        input=tarball(sources(repos)),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"building the rpm test doubles failed (rc={done.returncode}):\n"
            f"{done.stderr.decode(errors='replace')[-3000:]}"
        )
    return done.stdout.decode().strip().splitlines()[-1]
