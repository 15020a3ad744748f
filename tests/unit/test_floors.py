"""One supported ansible-core range, stated alike everywhere (issue 28): pyproject.toml's
dependency, meta/runtime.yml's requires_ansible, every role's min_ansible_version, and the
versions CI installs (constraints/oldest.txt at the floor, constraints/newest.txt below the
cap); the ansible-core running these tests lies inside it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> SpecifierSet:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (core,) = [Requirement(d) for d in deps if Requirement(d).name == "ansible-core"]
    return core.specifier


def _bounds(spec: SpecifierSet) -> tuple[Version, Version]:
    floors = [Version(s.version) for s in spec if s.operator == ">="]
    caps = [Version(s.version) for s in spec if s.operator == "<"]
    assert len(floors) == 1 and len(caps) == 1, f"{spec}: one >= floor and one < cap"
    return floors[0], caps[0]


def _minor(v: Version) -> tuple[int, int]:
    return (v.major, v.minor)


def _pinned(name: str) -> Version:
    text = (ROOT / "constraints" / name).read_text()
    found = re.findall(r"^ansible-core==(\S+)$", text, re.MULTILINE)
    assert len(found) == 1, f"constraints/{name} pins ansible-core once"
    return Version(found[0])


def test_the_floor_and_cap_agree_in_every_place() -> None:
    floor, cap = _bounds(_pyproject())
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    r_floor, r_cap = _bounds(SpecifierSet(runtime))
    assert (_minor(r_floor), _minor(r_cap)) == (_minor(floor), _minor(cap)), runtime
    roles = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/main.yml"))
    assert len(roles) >= 5
    for role in roles:
        meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text())
        given = Version(str(meta["galaxy_info"]["min_ansible_version"]))
        assert _minor(given) == _minor(floor), f"{role}: min_ansible_version {given}"
    oldest, newest = _pinned("oldest.txt"), _pinned("newest.txt")
    assert _minor(oldest) == _minor(floor), f"CI's oldest {oldest} is not the floor {floor}"
    assert newest in _pyproject() and _minor(newest) == (cap.major, cap.minor - 1), (
        f"CI's newest {newest} is not the last release below the cap {cap}"
    )


def test_the_ansible_core_running_the_tests_is_in_the_range() -> None:
    from ansible.release import __version__

    assert Version(__version__) in _pyproject(), __version__
