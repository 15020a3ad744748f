"""The TEST DOUBLE of Debian's archive for the driver: trixie's contrib, non-free and
non-free-firmware packages of the compute driver, generated from what the archive really holds
(tests/recorded/debian-archive/, recorded by aptrepo/debianrecord.py), never from a role.

Each stand-in keeps its recorded stanza's name, version, architecture, section and every
relation field (Pre-Depends, Depends, Recommends, Provides, Conflicts, Breaks, Replaces, ...)
verbatim, so apt resolves the role's install exactly as against Debian's archive, and the
packages of Debian's main that they depend on (dkms, the kernel headers, debconf, pciutils, ...)
come from Debian's real archive. Files are shipped only where the lab reads them, at the paths
the recorded Contents index gives:

- a DKMS tree (`usr/src/<module>-<version>/dkms.conf` recorded): our own few lines of C built as
  module `<module>` (`nvidia-current`, `nvidia-current-open`), licence "NVIDIA" or, for a
  module named `-open`, "Dual MIT/GPL", the way the simulator reads the flavour;
- `usr/lib/nvidia/current/nvidia-smi`, which the GPU simulator answers for;
- `lib*.so.<version>` marker files (NVML's file name is the userspace version gpusim reads),
  with the recorded `.so.1` and `.so` names as links to them;
- `nvidia-persistenced`'s unit and daemon and `nvidia-modprobe`: the CUDA doubles' stand-ins
  (Debian's unit file is not recorded, only its path).

Everything else a real package ships (GLX alternatives, udev rules, firmware blobs, debconf
questions, maintainer scripts other than DKMS's) is not reproduced: the README.test-double of
each package lists the recorded paths it leaves out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aptrepo.debianrecord import COMPONENTS, RECORDED, parse_stanzas
from aptrepo.packages import Package, PayloadFile
from aptrepo.reference import Origin

ARCHIVE_DIR = "debian"
RECORDED_REL = "tests/recorded/debian-archive"
# The recorded fields a stand-in keeps as they are (the rest: Filename, sizes, hashes,
# Maintainer, Homepage, Description-md5 are the double's own or left out).
KEPT_FIELDS = (
    "Architecture",
    "Multi-Arch",
    "Section",
    "Priority",
    "Pre-Depends",
    "Depends",
    "Recommends",
    "Suggests",
    "Enhances",
    "Provides",
    "Conflicts",
    "Breaks",
    "Replaces",
)
_LIB = re.compile(r"^usr/lib/x86_64-linux-gnu/(?:.*/)?(lib[^/]+?)\.so(?:\.(.+))?$")


@dataclass(frozen=True)
class ArchiveOrigin(Origin):
    """Where a stand-in of Debian's archive comes from: its recorded stanza."""

    suite: str = ""
    component: str = ""
    left_out: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [
            f"Generated from {RECORDED_REL}/{self.suite}/{self.component}.Packages "
            "(Debian's archive, recorded: see that directory's README.md).",
            "Kept verbatim: " + ", ".join(KEPT_FIELDS) + " (where recorded).",
        ]
        if self.left_out:
            lines.append("Recorded paths this stand-in does not ship:")
            lines += [f"  - {path}" for path in self.left_out]
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def short(self) -> str:
        return f"{RECORDED_REL}/{self.suite}/{self.component}.Packages"


@dataclass(frozen=True)
class ArchivePackage:
    suite: str
    component: str
    package: Package

    @property
    def pool_path(self) -> str:
        """Where the .deb lies, relative to the archive's root (Debian's pool layout)."""
        name = self.package.name
        prefix = name[:4] if name.startswith("lib") else name[0]
        return f"pool/{self.component}/{prefix}/{name}"


def suites(recorded: Path = RECORDED) -> list[str]:
    return sorted(p.name for p in recorded.iterdir() if (p / "Release.fields").is_file())


def release_fields(suite: str, recorded: Path = RECORDED) -> dict[str, str]:
    return parse_stanzas((recorded / suite / "Release.fields").read_text())[0]


def contents(recorded: Path = RECORDED) -> dict[str, list[str]]:
    """Package name -> its recorded paths (Contents-amd64 of the first suite)."""
    by_package: dict[str, list[str]] = {}
    for suite in suites(recorded):
        index = recorded / suite / "Contents-amd64"
        if not index.is_file():
            continue
        for line in index.read_text().splitlines():
            path, _, owners = line.rpartition(" ")
            for owner in owners.split(","):
                by_package.setdefault(owner.rsplit("/", 1)[-1], []).append(path)
    return by_package


def _files(
    name: str, upstream: str, paths: list[str]
) -> tuple[list[PayloadFile], dict[str, str], dict[str, str], list[str]]:
    """The files a stand-in ships, its maintainer scripts and substitutions, the paths left out."""
    files: list[PayloadFile] = []
    scripts: dict[str, str] = {}
    substitutions: dict[str, str] = {}
    left_out: list[str] = []
    libs = {m.group(1): p for p in paths if (m := _LIB.match(p)) and m.group(2) == upstream}
    for path in paths:
        dkms = re.match(rf"^usr/src/(.+)-{re.escape(upstream)}/dkms\.conf$", path)
        lib = _LIB.match(path)
        if dkms:
            module = dkms.group(1)
            src = path.rsplit("/", 1)[0]
            licence = "Dual MIT/GPL" if module.endswith("-open") else "NVIDIA"
            files += [
                PayloadFile("dkms/nvidia.c", f"{src}/{module}.c"),
                PayloadFile("dkms/Kbuild", f"{src}/Kbuild"),
                PayloadFile("dkms/dkms.conf", path),
            ]
            scripts = {"postinst": "dkms-postinst", "prerm": "dkms-prerm"}
            flavour = "open" if module.endswith("-open") else "proprietary"
            substitutions = {"@LICENSE@": licence, "@MODULE@": module, "@FLAVOUR@": flavour}
        elif path == "usr/lib/nvidia/current/nvidia-smi":
            files.append(PayloadFile("nvidia-smi", path, 0o755))
        elif lib and lib.group(2) == upstream:
            stem = lib.group(1)
            content = f"TEST DOUBLE of {stem}.so.{upstream} (Debian's {name}): not a library\n"
            files.append(PayloadFile("", path, content=content))
        elif lib and lib.group(1) in libs:
            # libX.so.1 / libX.so: links to the versioned file, as the real package has them
            target = libs[lib.group(1)].rsplit("/", 1)[-1]
            files.append(PayloadFile("", path, link=target))
        elif path == "usr/lib/systemd/system/nvidia-persistenced.service":
            files.append(PayloadFile("nvidia-persistenced.service", path))
        elif path in ("usr/bin/nvidia-persistenced", "usr/bin/nvidia-modprobe"):
            files.append(PayloadFile(path.rsplit("/", 1)[-1], path, 0o755))
        else:
            left_out.append(path)
    return files, scripts, substitutions, left_out


def _upstream(version: str) -> str:
    """550.163.01-2 -> 550.163.01 (no epoch in these packages; a native version stays)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def archive_packages(recorded: Path = RECORDED) -> list[ArchivePackage]:
    """Every recorded stanza of every suite and component, as a stand-in."""
    paths = contents(recorded)
    out: list[ArchivePackage] = []
    for suite in suites(recorded):
        for component in COMPONENTS:
            index = recorded / suite / f"{component}.Packages"
            text = index.read_text() if index.is_file() else ""
            for stanza in parse_stanzas(text) if text.strip() else []:
                name, version = stanza["Package"], stanza["Version"]
                upstream = _upstream(version)
                files, scripts, substitutions, left_out = _files(
                    name, upstream, paths.get(name, [])
                )
                synopsis = stanza.get("Description", name).split("\n", 1)[0]
                origin = ArchiveOrigin(
                    (), suite=suite, component=component, left_out=tuple(left_out)
                )
                package = Package(
                    name,
                    version,
                    f"{synopsis}\n Test double of Debian's {name} {version} ({suite} "
                    f"{component}), from {RECORDED_REL}.",
                    f"{ARCHIVE_DIR}/{component}",
                    origin,
                    files=tuple(files),
                    extra_control={k: stanza[k] for k in KEPT_FIELDS if k in stanza},
                    scripts=scripts,
                    substitutions=substitutions,
                )
                out.append(ArchivePackage(suite, component, package))
    return out
