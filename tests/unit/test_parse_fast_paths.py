"""The planning speed-ups give exactly what the slower general code gives.

- `driver_packages`: cached per argument tuple, its templates compiled once: the same role
  variables as a fresh Jinja environment compiling every template (the code before), for every
  OS data file, source, branch and flavour, and the same answer twice from the cache.
- os-release values: the fast match against `shlex.split` (the code before) on every recorded
  os-release line and on quoting cases.
- sysfs PCI lines: the one-match path for the probe's own line against the token scan on
  every recorded line and on variants; the fast path must be the one taken for probe lines.
- A whole fleet (every recorded and derived fixture): the plans equal those made with every
  cache emptied before each host.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import pytest

from orchestrator import driver_packages as dp
from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host, sysfs_pci
from orchestrator.parsers._text import ParseError
from orchestrator.parsers.os_release import _value
from orchestrator.plan import plan_fleet
from orchestrator.policy import load_policy

REPO = Path(__file__).resolve().parents[2]
FIXTURE_DIRS = sorted(
    d
    for root in (REPO / "tests" / "recorded" / "fixtures" / "real", REPO / "tests" / "unit")
    for d in root.rglob("*")
    if d.is_dir() and (d / "os-release.txt").is_file()
)


def test_fixtures_found() -> None:
    assert len(FIXTURE_DIRS) >= 8, FIXTURE_DIRS


# --- driver packages ------------------------------------------------------------------------


def _reference_role_vars(
    os_file: str, overrides: Mapping[str, object], facts: Mapping[str, object]
) -> dict[str, Any]:
    """role_vars as it was: a new environment per call, every template compiled per render."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    dp._tests(env)

    def render(value: object, ctx: Mapping[str, Any]) -> object:
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            try:
                return dp._native(env.from_string(value).render(**ctx))
            except (jinja2.TemplateError, TypeError, ValueError, KeyError):
                return value
        if isinstance(value, list):
            return [render(v, ctx) for v in value]
        if isinstance(value, dict):
            return {k: render(v, ctx) for k, v in value.items()}
        return value

    raw: dict[str, Any] = {
        **dp._load("defaults/main.yml"),
        **dp._load("vars/main.yml"),
        **dp._load(f"vars/{os_file}"),
        **overrides,
        "ansible_facts": dict(facts),
    }
    ctx = dict(raw)
    for _ in range(dp._PASSES):
        ctx = {k: (render(v, ctx) if k in raw else v) for k, v in ctx.items()}
    return ctx


OS_FILES = sorted(
    p.name
    for p in (dp.ROLE / "vars").glob("*.yml")
    if p.name[0].isupper() and p.name != "unsupported.yml"
)


def _facts_for(os_file: str) -> dict[str, object]:
    dist, _, version = os_file.removesuffix(".yml").partition("-")
    family = {"Ubuntu": "Debian", "Debian": "Debian"}.get(dist, "RedHat")
    return {
        "distribution": dist,
        "distribution_version": version,
        "distribution_major_version": version.split(".")[0],
        "os_family": family,
        "architecture": "x86_64",
    }


@pytest.mark.parametrize("os_file", OS_FILES)
@pytest.mark.parametrize("source", ["cuda", "distribution"])
@pytest.mark.parametrize("branch", ["535", "580", "595"])
@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_role_vars_equal_a_fresh_environment(
    os_file: str, source: str, branch: str, flavour: str
) -> None:
    overrides = {
        "nvidia_driver_source": source,
        "nvidia_driver_branch": branch,
        "nvidia_driver_flavour": flavour,
        "nvidia_driver_fabricmanager": True,
        "__nvidia_driver_kernel": "6.8.0-1024-aws",
    }
    facts = _facts_for(os_file)
    expected = _reference_role_vars(os_file, overrides, facts)
    assert dp.role_vars(os_file, overrides, facts) == expected
    assert dp.role_vars(os_file, overrides, facts) == expected  # templates from the cache


def test_role_vars_really_render() -> None:
    """The comparison above is not between two unrendered copies."""
    overrides = {
        "nvidia_driver_source": "cuda",
        "nvidia_driver_branch": "580",
        "nvidia_driver_flavour": "open",
        "nvidia_driver_fabricmanager": True,
        "__nvidia_driver_kernel": "6.8.0-1024-aws",
    }
    v = dp.role_vars("Ubuntu-24.04.yml", overrides, _facts_for("Ubuntu-24.04.yml"))
    assert v["__nvidia_driver_os_supported"] is True
    assert "{{" not in str(v["__nvidia_driver_cuda_repo_url"])


def test_driver_packages_cache_gives_the_uncached_answer() -> None:
    args: dict[str, Any] = {
        "os_id": "ubuntu",
        "version_id": "24.04",
        "family": "debian",
        "kernel": "6.8.0-1024-aws",
        "source": "cuda",
        "branch": 580,
        "flavour": "open",
        "fabricmanager": True,
    }
    dp.driver_packages.cache_clear()
    dp._template.cache_clear()
    uncached = dp.driver_packages.__wrapped__(**args)
    first = dp.driver_packages(**args)
    assert dp.driver_packages(**args) is first  # from the cache
    assert first == uncached
    assert first.driver and first.fabricmanager  # a real answer, not an empty one
    other = dp.driver_packages(**{**args, "flavour": "proprietary"})
    assert other != first  # the flavour is part of the key


# --- os-release -------------------------------------------------------------------------------


def _shlex_value(raw: str) -> str:
    try:
        parts = shlex.split(raw)
    except ValueError:
        parts = [raw.strip("\"'")]
    return parts[0] if parts else ""


RECORDED_VALUES = sorted(
    {
        line.strip().partition("=")[2]
        for d in FIXTURE_DIRS
        for line in (d / "os-release.txt").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
)
TRICKY = [
    "",
    "ubuntu",
    '"Ubuntu 24.04.1 LTS"',
    "'single quoted'",
    '""',
    "''",
    '"a"b',
    'a"b c"',
    '"unbalanced',
    "'unbalanced",
    "two words",
    " leading",
    '"esc \\" aped"',
    "back\\slash",
    '"$HOME `x`"',
    "#hash",
    'x=y"',
    "'it''s'",
    '"tab\there"',
]


@pytest.mark.parametrize("raw", RECORDED_VALUES + TRICKY)
def test_os_release_value_equals_shlex(raw: str) -> None:
    assert _value(raw) == _shlex_value(raw)


def test_recorded_os_release_values_seen() -> None:
    assert '"Ubuntu 24.04.1 LTS"' in RECORDED_VALUES or any(" " in v for v in RECORDED_VALUES)
    assert len(RECORDED_VALUES) > 10


# --- sysfs PCI lines ----------------------------------------------------------------------------

RECORDED_LINES = sorted(
    {
        line
        for d in FIXTURE_DIRS
        if (d / "sysfs-pci-devices.txt").is_file()
        for line in (d / "sysfs-pci-devices.txt").read_text().splitlines()
        if line.strip() and not line.startswith("# exit")
    }
)


def _variants(line: str) -> list[str]:
    return [
        line,
        line.replace('current_link_speed="32.0 GT/s PCIe"', 'current_link_speed="Unknown"'),
        line.replace('max_link_speed="32.0 GT/s PCIe"', 'max_link_speed=""'),
        line.rsplit(" driver=", 1)[0] + " driver=",
        line.rsplit(" driver=", 1)[0] + " driver=nvidia",
        line + " extra=1",  # not the probe's line: token scan
        line + " ",
        line.replace(" ", "  ", 1),
        line.replace("numa_node=", "numa_node=-1 numa_node=", 1),  # a repeated key
        line.upper().replace("VENDOR", "vendor"),
    ]


def _fields_of(line: str) -> dict[str, str]:
    return sysfs_pci._scan(line, "line")[1]


@pytest.mark.parametrize("line", sorted({v for ln in RECORDED_LINES for v in _variants(ln)}))
def test_pci_line_fast_path_equals_token_scan(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        fast = sysfs_pci.parse_pci_line(line, 1)
    except ParseError as exc:
        fast_error: str | None = exc.message
    else:
        fast_error = None
    # the same line through the token scan only
    monkeypatch.setattr(sysfs_pci, "_PROBE_LINE", _NeverMatches())
    try:
        slow = sysfs_pci.parse_pci_line(line, 1)
    except ParseError as exc:
        assert fast_error == exc.message
    else:
        assert fast_error is None
        assert fast == slow


class _NeverMatches:
    def fullmatch(self, line: str) -> None:
        return None


def test_probe_lines_take_the_fast_path() -> None:
    assert len(RECORDED_LINES) >= 20
    for line in RECORDED_LINES:
        match = sysfs_pci._PROBE_LINE.fullmatch(line)
        assert match is not None, line
        assert dict(zip(sysfs_pci._KEYS, match.groups()[1:], strict=True)) == _fields_of(line)


# --- a whole fleet -----------------------------------------------------------------------------


def _clear_caches() -> None:
    dp.driver_packages.cache_clear()
    dp._template.cache_clear()


def test_fleet_plans_equal_with_caches_emptied_per_host() -> None:
    raw = {d.name: load_host(d) for d in FIXTURE_DIRS}
    catalog = default_catalog()
    facts = {h: parse_host(h, r) for h, r in raw.items()}
    policies = {h: load_policy(h, {}) for h in facts}
    _clear_caches()
    together = plan_fleet(facts, policies, catalog)
    one_by_one = {}
    for host in facts:
        _clear_caches()
        one_by_one.update(plan_fleet({host: facts[host]}, {host: policies[host]}, catalog))
    assert together == one_by_one
    assert any(r.packages for p in together.values() for r in p.roles)  # packages were planned
    assert len(together) == len(FIXTURE_DIRS)
