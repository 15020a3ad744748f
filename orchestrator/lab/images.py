"""Test-host images: debootstrap recipes from images.yaml, built once and cached by hash.

A recipe is pure data (suite, mirror, packages, the files written into the tree); its
digest names the image (`gpuprov-lab/debian12:<digest>`), so a recipe change builds a new
image and an unchanged recipe reuses the cached one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..errors import BadInputError, LabError
from . import engine

IMAGE_REPO = "gpuprov-lab"
IMAGE_LABEL = "gpuprov.lab.image"
# Bump when the build steps in `build()` change in a way the recipe data does not show.
BUILD_STEPS = 1

# Runs the GPU simulator's boot hook early at every boot, when the lab mounted one.
GPUSIM_UNIT = """\
[Unit]
Description=GPU simulator boot hook (gpuprov lab: the GPUs on this host are simulated)
DefaultDependencies=no
ConditionPathExists=/opt/gpusim/boot
After=local-fs.target
Before=sysinit.target systemd-udevd.service systemd-modules-load.service
Before=ssh.service docker.service nvidia-persistenced.service nvidia-fabricmanager.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/opt/gpusim/boot

[Install]
WantedBy=sysinit.target
"""

# Speed only (tests/lab/gpusim/gpusim/smiserver.py says why): the simulated nvidia-smi hands
# each call to one server that has the simulator imported; without it a call runs by itself.
GPUSIM_SMI_SOCKET = """\
[Unit]
Description=GPU simulator's nvidia-smi server socket (gpuprov lab: simulated GPUs)
ConditionPathExists=/etc/gpusim/profile.yaml
ConditionPathExists=/opt/gpusim/bin/gpusim

[Socket]
ListenStream=/run/gpusim/smi.sock
SocketMode=0600

[Install]
WantedBy=sockets.target
"""

GPUSIM_SMI_SERVICE = """\
[Unit]
Description=GPU simulator's nvidia-smi server (gpuprov lab: simulated GPUs)
Requires=gpusim-smi.socket

[Service]
ExecStart=/opt/gpusim/bin/gpusim smi-server
"""

# A container shares the kernel's boot id, so ansible.builtin.reboot would never see a
# reboot finish; give every boot of a test host its own id, as a real reboot would.
BOOT_ID_UNIT = """\
[Unit]
Description=Per-boot boot id for a gpuprov lab host (containers share the kernel's)
DefaultDependencies=no
Before=sysinit.target systemd-journald.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'cat /proc/sys/kernel/random/uuid > /run/gpuprov-boot-id && \
mount --bind /run/gpuprov-boot-id /proc/sys/kernel/random/boot_id'

[Install]
WantedBy=sysinit.target
"""

SSHD_CONFIG = """\
# gpuprov lab: key-only root login with the host key the lab generated and pinned.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""


# Speed only (hostfiles/gpuprov_lab_zipcache.py says why): Python on the lab hosts keeps the
# bytecode of what it compiles from zip archives (Ansible's module payloads). Debian's
# interpreters read .pth files in /usr/lib/python3/dist-packages at start-up.
ZIPCACHE_MODULE = "gpuprov_lab_zipcache"
ZIPCACHE_DIR = "usr/lib/python3/dist-packages"


def _zipcache_source() -> str:
    return (
        resources.files("orchestrator.lab")
        .joinpath("hostfiles", f"{ZIPCACHE_MODULE}.py")
        .read_text()
    )


@dataclass(frozen=True)
class Recipe:
    """Everything that decides what a test-host image contains."""

    os: str
    suite: str
    mirror: str
    security_mirror: str
    components: tuple[str, ...]
    packages: tuple[str, ...]

    def files(self) -> dict[str, str]:
        """Files written into the debootstrapped tree: path -> content."""
        components = " ".join(self.components)
        sources = (
            f"Types: deb\nURIs: {self.mirror}\n"
            f"Suites: {self.suite} {self.suite}-updates\nComponents: {components}\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {self.security_mirror}\n"
            f"Suites: {self.suite}-security\nComponents: {components}\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        return {
            "etc/apt/sources.list.d/debian.sources": sources,
            "etc/ssh/sshd_config.d/gpuprov-lab.conf": SSHD_CONFIG,
            "etc/systemd/system/gpusim-boot.service": GPUSIM_UNIT,
            "etc/systemd/system/gpusim-smi.socket": GPUSIM_SMI_SOCKET,
            "etc/systemd/system/gpusim-smi.service": GPUSIM_SMI_SERVICE,
            "etc/systemd/system/gpuprov-boot-id.service": BOOT_ID_UNIT,
            # Empty: systemd makes a machine id per host at its first boot.
            "etc/machine-id": "",
            f"{ZIPCACHE_DIR}/{ZIPCACHE_MODULE}.py": _zipcache_source(),
            f"{ZIPCACHE_DIR}/{ZIPCACHE_MODULE}.pth": f"import {ZIPCACHE_MODULE}\n",
        }

    def links(self) -> dict[str, str]:
        """Symlinks in the tree (what `systemctl enable` would make): path -> target."""
        wants = "etc/systemd/system/sysinit.target.wants"
        return {
            f"{wants}/gpusim-boot.service": "/etc/systemd/system/gpusim-boot.service",
            f"{wants}/gpuprov-boot-id.service": "/etc/systemd/system/gpuprov-boot-id.service",
            "etc/systemd/system/sockets.target.wants/gpusim-smi.socket": (
                "/etc/systemd/system/gpusim-smi.socket"
            ),
        }

    @property
    def digest(self) -> str:
        blob = json.dumps(
            {
                "steps": BUILD_STEPS,
                "os": self.os,
                "suite": self.suite,
                "mirror": self.mirror,
                "security_mirror": self.security_mirror,
                "components": self.components,
                "packages": self.packages,
                "files": self.files(),
                "links": self.links(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPO}/{self.os}:{self.digest}"


def parse_recipes(data: Mapping[str, Any]) -> dict[str, Recipe]:
    """Recipes per OS from the images.yaml mapping."""
    try:
        return {
            os_name: Recipe(
                os=os_name,
                suite=str(entry["suite"]),
                mirror=str(entry.get("mirror", data["mirror"])),
                security_mirror=str(entry.get("security_mirror", data["security_mirror"])),
                components=tuple(str(c) for c in entry.get("components", data["components"])),
                packages=tuple(str(p) for p in data["packages"] + entry.get("packages", [])),
            )
            for os_name, entry in data["os"].items()
        }
    except (KeyError, TypeError) as exc:
        raise BadInputError(
            f"orchestrator/lab/images.yaml is malformed: missing or wrong key {exc}",
            fix="give `mirror`, `security_mirror`, `components`, `packages` and `os.<name>.suite`",
        ) from exc


def load_recipes() -> dict[str, Recipe]:
    text = resources.files("orchestrator.lab").joinpath("images.yaml").read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise BadInputError("orchestrator/lab/images.yaml is not a mapping")
    return parse_recipes(data)


def recipe_for(os_name: str) -> Recipe:
    recipes = load_recipes()
    if os_name not in recipes:
        raise BadInputError(
            f"no lab image recipe for OS {os_name!r}",
            fix=f"use one of {', '.join(sorted(recipes))}",
        )
    return recipes[os_name]


def write_tree(recipe: Recipe, root: Path) -> None:
    """Turn a fresh debootstrap tree into a test-host image tree (no host keys, no apt cache)."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    for rel, content in recipe.files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(0o644)
    for rel, target in recipe.links().items():
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    for cache in ("var/cache/apt", "var/lib/apt/lists"):
        for item in (root / cache).glob("*"):
            if item.is_file():
                item.unlink()


def build(recipe: Recipe, cache_dir: Path, *, log: Path) -> str:
    """Debootstrap `recipe` from scratch and import it into Docker; return the image tag."""
    if shutil.which("debootstrap") is None:
        raise LabError("debootstrap is not installed", fix=engine.ENGINE_FIX)
    work = cache_dir / "build" / f"{recipe.os}-{recipe.digest}"
    debs = cache_dir / "debs" / recipe.suite
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    debs.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--cache-dir={debs}",
        f"--include={','.join(recipe.packages)}",
        recipe.suite,
        str(work / "rootfs"),
        recipe.mirror,
    ]
    try:
        with log.open("w") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise LabError(
                f"debootstrap of {recipe.suite} for the {recipe.os} image failed "
                f"(exit {proc.returncode})",
                fix=f"read {log}; check that {recipe.mirror} is reachable",
            )
        write_tree(recipe, work / "rootfs")
        engine.import_tree(
            work / "rootfs",
            recipe.tag,
            ['CMD ["/sbin/init"]', "ENV container=docker", f"LABEL {IMAGE_LABEL}={recipe.os}"],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return recipe.tag


def ensure(recipe: Recipe, cache_dir: Path, *, say: Callable[[str], object] = print) -> str:
    """The image tag for `recipe`, building it first when the cache lacks it.

    Several labs may start at once (one per helper, or per CI job): a lock per OS makes one
    of them build while the others wait and then find the image.
    """
    if engine.image_exists(recipe.tag):
        return recipe.tag
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / f"{recipe.os}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if engine.image_exists(recipe.tag):
            return recipe.tag
        log = cache_dir / "logs" / f"{recipe.os}.log"
        say(f"lab: building image {recipe.tag} with debootstrap (about a minute; log: {log})")
        return build(recipe, cache_dir, log=log)


def stale(recipes: Mapping[str, Recipe]) -> list[str]:
    """Cached lab images that no current recipe names (left by earlier recipes)."""
    current = {r.tag for r in recipes.values()}
    return [tag for tag in engine.images({IMAGE_LABEL: ""}) if tag not in current]
