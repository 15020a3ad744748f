"""Record what Debian's archive really holds for the driver: the Packages stanzas (verbatim) of
trixie's contrib, non-free and non-free-firmware packages the compute driver is made of, and
their Contents lines, into tests/recorded/debian-archive/ (its README says when and from where).

    PYTHONPATH=tests/lab python -m aptrepo record-debian [--mirror URL]

The selection is Debian's own: the ROOTS below (Debian's package names for a headless compute
driver, proprietary and open kernel modules) and every package of those components their
Depends and Pre-Depends reach (the first alternative, or a package that Provides it). A root
the archive does not hold fails the recording. Nothing here reads a role. The lab's test
double of the archive (aptrepo/debianarchive.py) is generated from these files only.
"""

from __future__ import annotations

import gzip
import lzma
import urllib.request
from collections.abc import Iterable
from pathlib import Path

RECORDED = Path(__file__).resolve().parents[2] / "recorded" / "debian-archive"
MIRROR = "http://deb.debian.org/debian"
SUITES = ("trixie", "trixie-updates")
COMPONENTS = ("contrib", "non-free", "non-free-firmware")
# Debian's names for the compute driver (trixie, branch 550): the kernel module as DKMS source
# (proprietary, non-free; open, contrib), nvidia-smi, NVML, libcuda, the GSP firmware, the
# persistence daemon and nvidia-modprobe.
ROOTS = (
    "nvidia-kernel-dkms",
    "nvidia-open-kernel-dkms",
    "nvidia-smi",
    "libnvidia-ml1",
    "libcuda1",
    "firmware-nvidia-gsp",
    "nvidia-persistenced",
    "nvidia-modprobe",
)
# The Release fields kept (not the hashes: the double writes its own).
RELEASE_FIELDS = ("Origin", "Label", "Suite", "Version", "Codename", "Date", "Components")


class RecordError(RuntimeError):
    """The archive did not answer, or lacks a root package."""


def parse_stanzas(text: str) -> list[dict[str, str]]:
    """deb822 paragraphs as ordered field -> value (continuation lines kept, joined by \\n)."""
    stanzas: list[dict[str, str]] = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            stanzas.append(fields)
    return stanzas


def relation_names(value: str) -> list[str]:
    """The first alternative's package name of each relation in a Depends-like field."""
    names = []
    for relation in value.split(","):
        first = relation.split("|")[0].strip().split(" ")[0].split(":")[0]
        if first:
            names.append(first)
    return names


def closure(stanzas: Iterable[dict[str, str]], roots: Iterable[str]) -> list[dict[str, str]]:
    """The stanzas of `roots` and of every package their Depends/Pre-Depends reach here."""
    by_name: dict[str, list[dict[str, str]]] = {}
    providers: dict[str, list[dict[str, str]]] = {}
    for stanza in stanzas:
        by_name.setdefault(stanza["Package"], []).append(stanza)
        for provided in relation_names(stanza.get("Provides", "")):
            providers.setdefault(provided, []).append(stanza)
    missing = [r for r in roots if r not in by_name]
    if missing:
        raise RecordError(f"the archive holds no package {', '.join(missing)}")
    chosen: dict[str, dict[str, str]] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        for stanza in by_name.get(name) or providers.get(name) or []:
            if stanza["Package"] in chosen:
                continue
            chosen[stanza["Package"]] = stanza
            for field in ("Pre-Depends", "Depends"):
                todo += relation_names(stanza.get(field, ""))
    return [chosen[name] for name in sorted(chosen)]


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data: bytes = response.read()
    except OSError as exc:
        raise RecordError(f"{url}: {exc}") from exc
    if url.endswith(".xz"):
        return lzma.decompress(data)
    if url.endswith(".gz"):
        return gzip.decompress(data)
    return data


def _render(stanza: dict[str, str]) -> str:
    return "".join(f"{key}: {value}\n" for key, value in stanza.items())


def record(mirror: str = MIRROR, dest: Path = RECORDED) -> list[str]:
    """Fetch and write the recording; returns the recorded package names of the first suite."""
    everything: dict[tuple[str, str], list[dict[str, str]]] = {}
    releases: dict[str, dict[str, str]] = {}
    for suite in SUITES:
        release = parse_stanzas(_fetch(f"{mirror}/dists/{suite}/Release").decode())[0]
        releases[suite] = {k: release[k] for k in RELEASE_FIELDS if k in release}
        for component in COMPONENTS:
            url = f"{mirror}/dists/{suite}/{component}/binary-amd64/Packages.xz"
            everything[suite, component] = parse_stanzas(_fetch(url).decode())
    first = SUITES[0]
    pool = [s for c in COMPONENTS for s in everything[first, c]]
    chosen = {s["Package"] for s in closure(pool, ROOTS)}
    # a later suite (updates) keeps the stanzas of the same packages, if any
    for suite in SUITES:
        folder = dest / suite
        folder.mkdir(parents=True, exist_ok=True)
        fields = releases[suite]
        (folder / "Release.fields").write_text(_render(fields))
        for component in COMPONENTS:
            kept = [s for s in everything[suite, component] if s["Package"] in chosen]
            kept.sort(key=lambda s: (s["Package"], s["Version"]))
            (folder / f"{component}.Packages").write_text("\n".join(_render(s) for s in kept))
    lines = []
    for component in COMPONENTS:
        url = f"{mirror}/dists/{first}/{component}/Contents-amd64.gz"
        for line in _fetch(url).decode().splitlines():
            path, _, owners = line.rpartition(" ")
            path = path.strip()
            names = {owner.rsplit("/", 1)[-1] for owner in owners.split(",")}
            if not names & chosen:
                continue
            # a DKMS source tree is kept as its dkms.conf (the rest is NVIDIA's sources)
            if path.startswith("usr/src/") and not path.endswith("/dkms.conf"):
                continue
            if path.startswith("usr/share/doc/"):
                continue
            lines.append(f"{path} {owners}")
    (dest / first / "Contents-amd64").write_text("".join(f"{line}\n" for line in sorted(lines)))
    return sorted(chosen)
