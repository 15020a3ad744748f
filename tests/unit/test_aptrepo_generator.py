"""The test doubles are generated from the recorded reference, and from nothing else
(tests/lab/aptrepo: reference.py, packages.py, graphs.py). Also: what real apt makes of the
Debian 12 CUDA double (aptrepo.replay.simulate on this machine: its own apt state only)."""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))

from aptrepo import reference  # noqa: E402
from aptrepo.graphs import replay_packages  # noqa: E402
from aptrepo.packages import Package, all_packages, cuda_packages  # noqa: E402
from aptrepo.replay import simulate  # noqa: E402

AMBIGUOUS = re.compile(r"[a-z0-9][a-z0-9.+-]*")


def _published() -> list[Package]:
    return all_packages() + replay_packages()


def _scalars(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _scalars(value)
    elif isinstance(node, list):
        for item in node:
            yield from _scalars(item)
    elif node is not None:
        yield str(node)


_PIECE = re.compile(
    r"(<[a-z -]+>|\[-[a-z]+\]|\d+\.\d+\.\d+-\d+-[a-z0-9]+|\d+\.\d+(?:\.\d+)?"
    r"|(?<![\d.])\d{3}(?![\d.]))"
)
_KERNEL = r"\d+\.\d+\.\d+-\d+-[a-z0-9]+"
_DRIVER = r"\d+\.\d+(?:\.\d+)?"

# Names the doubles use that packages.yaml does not write (gaps the lead may want recorded):
OUTSIDE_REFERENCE = {
    # Canonical's kernel headers (the driver role installs linux-headers-<kernel> for DKMS).
    re.compile(r"linux-headers-" + _KERNEL),
    # Debian's python3: what the nvidia-ctk double (a Python script) runs on.
    re.compile(r"python3"),
}


def _generalize(word: str) -> str:
    """A recorded name or scheme as a regex: <b> (or a literal branch) is any branch,
    <version>/<ver>/<upstream> (or a literal one) any driver version, <uname -r> (or a literal
    kernel release) any kernel, <flavour> any flavour, [-x] optional."""
    out = []
    for piece in _PIECE.split(word):
        if piece in ("<b>",) or re.fullmatch(r"\d{3}", piece):
            out.append(r"\d{3}")
        elif piece in ("<version>", "<ver>", "<upstream>") or re.fullmatch(_DRIVER, piece):
            out.append(_DRIVER)
        elif piece == "<uname -r>" or re.fullmatch(_KERNEL, piece):
            out.append(_KERNEL)
        elif piece in ("<flavour>", "<kver>"):
            out.append(r"[a-z0-9.-]+")
        elif piece.startswith("[-") and piece.endswith("]"):
            out.append(f"(?:{re.escape(piece[1:-1])})?")
        else:
            out.append(re.escape(piece))
    return "".join(out)


def _name_patterns() -> list[re.Pattern[str]]:
    """Every package name or name scheme written in packages.yaml, generalized, plus the 590
    rule ('branch designation dropped from every Ubuntu package name')."""
    text = "\n".join(_scalars(reference.data()))
    words = set(re.findall(r"[a-z][a-z0-9.+-]*(?:(?:<[a-z -]+>|\[-[a-z]+\])[a-z0-9.+-]*)*", text))
    patterns = set()
    for word in words:
        patterns.add(_generalize(word))
        patterns.add(_generalize(re.sub(r"-(<b>|\d{3})(?=-|$)", "", word)))
    return [re.compile(p) for p in patterns] + list(OUTSIDE_REFERENCE)


def _revision_patterns() -> list[re.Pattern[str]]:
    """The revision schemes packages.yaml writes ('<upstream>-1', '<upstream>-0ubuntu0.
    <series>.<n>', '<branch>-<n>ubuntu<m>' with its example revision)."""
    text = "\n".join(_scalars(reference.data()))
    found = set(re.findall(r"<upstream>(-[0-9a-z.<>]*[0-9a-z>])", text))
    found |= set(re.findall(r"e\.g\. \d+(-\d+ubuntu\d+)", text))
    patterns = []
    for revision in found:
        escaped = re.escape(revision).replace(re.escape("<series>"), r"\d\d\.\d\d")
        escaped = escaped.replace(re.escape("<n>"), r"\d+")
        patterns.append(re.compile(escaped + "$"))
    return patterns


def test_every_published_version_is_written_in_the_reference() -> None:
    recorded = reference.recorded_versions()
    revisions = _revision_patterns()
    assert revisions, "no revision scheme found in packages.yaml"
    unexplained = []
    for package in _published():
        version = package.version
        if version in recorded:
            continue
        upstream, _, revision = version.rpartition("-")
        if upstream in recorded and any(p.match(f"-{revision}") for p in revisions):
            continue
        unexplained.append(f"{package.repo}: {package.name} {version}")
    assert unexplained == []


def test_every_published_name_follows_the_reference_name_scheme() -> None:
    patterns = _name_patterns()
    names = set()
    for package in _published():
        names.add(package.name)
        for field in ("Provides", "Conflicts", "Replaces", "Breaks"):
            value = package.extra_control.get(field, "")
            names |= {part.split()[0] for part in value.split(",") if part.strip()}
        for depends in package.depends:
            names |= {alt.split()[0] for alt in depends.split("|")}
    strays = sorted(n for n in names if not any(p.fullmatch(n) for p in patterns))
    assert strays == []


def test_a_changed_reference_changes_the_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    # The names come from packages.yaml at build time: rename the 580 fabric manager there and
    # the Debian 12 double publishes the new name (and Provides it from the 575 package).
    changed = copy.deepcopy(dict(reference.data()))
    changed["cuda_apt"]["branches"]["580"]["fabricmanager"] = "nvidia-fabricmanager-renamed"
    monkeypatch.setattr(reference, "data", lambda: changed)
    packages = cuda_packages("debian12")
    names = {(p.name, p.upstream.split(".")[0]) for p in packages}
    assert ("nvidia-fabricmanager-renamed", "580") in names
    assert ("nvidia-fabricmanager", "580") not in names
    assert ("nvidia-fabricmanager", "595") in names  # 595 is 'same_as: 590', unchanged
    fm575 = next(p for p in packages if p.name == "nvidia-fabricmanager-575")
    assert fm575.extra_control["Conflicts"] == "nvidia-fabricmanager-renamed"


def test_a_version_outside_the_reference_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = copy.deepcopy(dict(reference.selection()))
    chosen["cuda_debian12"]["drivers"]["580"] = ["580.999.99"]
    monkeypatch.setattr(reference, "selection", lambda: chosen)
    with pytest.raises(reference.ReferenceError, match=r"580\.999\.99"):
        cuda_packages("debian12")


def test_the_generator_reads_no_role() -> None:
    code = "\n".join(p.read_text() for p in (REPO / "tests/lab/aptrepo").glob("*.py"))
    assert "roles/" not in code and "nvidia_driver" not in code


def test_every_double_says_test_double_and_names_its_reference_entry() -> None:
    for package in _published():
        assert "test double" in package.description
        assert reference.REFERENCE_REL in package.description
        assert package.origin.entries
        text = package.origin.text()
        assert "source:" in text or "certainty: unknown" in text, package.name


def test_debian12_double_follows_the_580_rename_and_the_590_scheme() -> None:
    packages = {(p.name, p.version): p for p in cuda_packages("debian12")}
    names = {name for name, _ in packages}
    # Below 580 suffixed, from 580 unsuffixed (cuda_apt.branches.*.fabricmanager / nscq).
    assert {"nvidia-fabricmanager-575", "libnvidia-nscq-575"} <= names
    assert {"nvidia-fabricmanager", "nvidia-fabricmanager-dev", "libnvidia-nscq"} <= names
    assert ("nvidia-fabricmanager", "595.91.07-1") in packages
    fm575 = packages[("nvidia-fabricmanager-575", "575.57.08-1")]
    assert fm575.extra_control == {
        "Provides": "nvidia-fabricmanager",
        "Conflicts": "nvidia-fabricmanager",
    }
    pin = packages[("nvidia-driver-pinning-595", "595-1")]
    assert {pin.extra_control[k] for k in ("Provides", "Conflicts", "Replaces")} == {
        "nvidia-driver-pinning"
    }
    (prefs,) = [f for f in pin.files if f.target.startswith("etc/apt/preferences.d/")]
    assert prefs.content is not None
    assert "Pin: version 595.*\nPin-Priority: 1000\n" in prefs.content
    assert "nvidia-fabricmanager" in prefs.content.split("Package: ")[1].split()
    # cuda-drivers-580: '>=' only, as the forum thread records (no upper bound).
    meta = packages[("cuda-drivers-580", "580.159.04-1")]
    assert (
        all(">=" in d for d in meta.depends) and "nvidia-kernel-dkms (>= 580.65.06)" in meta.depends
    )
    kernel = packages[("nvidia-kernel-open-dkms", "580.159.04-1")]
    assert kernel.depends == ("dkms",)
    assert kernel.substitutions["@LICENSE@"] == "Dual MIT/GPL"
    assert packages[("nvidia-kernel-dkms", "580.159.04-1")].substitutions["@LICENSE@"] == "NVIDIA"
    assert kernel.substitutions["@MODULE@"] == "nvidia"  # 'registered as nvidia'


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("aptrepo-sim")


@pytest.mark.ansible
def test_apt_pulls_595_through_cuda_drivers_580_without_a_pinning_package(state: Path) -> None:
    # nv_forum_debian: cuda-drivers-580 has only '>=' Depends and pulls 590+ components.
    # dkms is Debian's (not the CUDA repository's): counted as installed here.
    result = simulate(
        "debian12",
        repos=["cuda"],
        install=["cuda-drivers-580=580.159.04-1"],
        provided=["dkms"],
        state_dir=state,
    )
    assert result.ok, result.output
    assert result.installs["nvidia-kernel-dkms"] == "595.91.07-1"
    pinning = "\n".join(
        f.content or ""
        for p in cuda_packages("debian12")
        if p.name == "nvidia-driver-pinning-580"
        for f in p.files
    )
    pinned = simulate(
        "debian12",
        repos=["cuda"],
        install=["cuda-drivers-580=580.159.04-1"],
        pins=pinning,
        provided=["dkms"],
        state_dir=state,
    )
    assert pinned.ok, pinned.output
    assert pinned.installs["nvidia-kernel-dkms"] == "580.159.04-1"


@pytest.mark.ansible
def test_apt_replaces_the_575_fabric_manager_by_the_580_one(state: Path) -> None:
    result = simulate(
        "debian12",
        repos=["cuda"],
        installed=["nvidia-fabricmanager-575=575.57.08-1"],
        install=["nvidia-fabricmanager=580.159.04-1"],
        state_dir=state,
    )
    assert result.ok, result.output
    assert result.removes == ("nvidia-fabricmanager-575",)  # they cannot be installed together
    held = simulate(
        "debian12",
        repos=["cuda"],
        installed=["nvidia-fabricmanager-575=575.57.08-1"],
        holds=["nvidia-fabricmanager-575"],
        install=["nvidia-fabricmanager=580.159.04-1"],
        state_dir=state,
    )
    assert not held.ok and "held" in held.output
