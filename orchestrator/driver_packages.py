"""The driver packages a host gets, read from the nvidia_driver role's own OS data.

One source of truth: the role's `vars/<OS>.yml`, `vars/main.yml` and `defaults/main.yml` are
rendered here with Jinja, as Ansible renders them for the role (the same variables and the
same first-found order as `tasks/preflight.yml` and `tasks/select.yml`). Nothing about
package names is written in Python. The exact versions are resolved on the host (the role's
`resolve-*.yml`), so the plan names packages and the version rule, and `apply --check`
shows the versions.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import yaml

from . import paths
from .catalog import SAFE_LOADER

ROLE = paths.ROLES_DIR / "nvidia_driver"

# /etc/os-release ID -> Ansible's `distribution` / `os_family` (the names of the OS data files).
_DISTRIBUTION = {
    "ubuntu": "Ubuntu",
    "debian": "Debian",
    "rhel": "RedHat",
    "rocky": "Rocky",
    "almalinux": "AlmaLinux",
    "amzn": "Amazon",
}
_FAMILY = {"debian": "Debian", "redhat": "RedHat"}
_PASSES = 8  # nesting depth of variables that refer to variables


@dataclass(frozen=True)
class DriverPackages:
    """What the role installs and holds on one host."""

    pkg_mgr: str  # apt | dnf
    first: tuple[str, ...]  # installed before the driver (the >= 590 branch pinning package)
    driver: tuple[str, ...]  # at the driver's exact version (glob `=<version>-*`)
    fabricmanager: tuple[str, ...]  # at the driver's exact version too
    imex: tuple[str, ...]  # nvidia-imex (+ nvidia-modprobe) at the driver's exact version
    unversioned: tuple[str, ...]  # at the archive's version
    prebuilt: tuple[str, ...]  # preferred kernel-module package (when the archive has it)
    dkms: tuple[str, ...]  # exact-version DKMS package installed when `prebuilt` is missing
    repository: str  # where the driver packages come from
    fabricmanager_repository: str  # where the fabric manager comes from ("" without one)

    @property
    def held(self) -> tuple[str, ...]:
        modules = self.prebuilt or self.dkms
        return (
            *self.first,
            *self.driver,
            *self.fabricmanager,
            *self.imex,
            *modules,
            *self.unversioned,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "pkg_mgr": self.pkg_mgr,
            "install_first": list(self.first),
            "driver": list(self.driver),
            "fabricmanager": list(self.fabricmanager),
            "imex": list(self.imex),
            "unversioned": list(self.unversioned),
            "prebuilt_modules": list(self.prebuilt),
            "dkms_modules": list(self.dkms),
            "held": list(self.held),
            "version_match": "<version>-* (glob, never a fixed revision)",
            "repository": self.repository,
            "fabricmanager_repository": self.fabricmanager_repository,
        }

    def summary(self) -> str:
        """One line for the plan table."""
        parts = []
        if self.first:
            parts.append(f"first {', '.join(self.first)}")
        exact = [*self.driver, *self.fabricmanager, *self.imex]
        parts.append(f"=<version>-*: {', '.join(exact)}")
        if self.prebuilt:
            parts.append(
                f"modules {', '.join(self.prebuilt)} (prebuilt, at the release its "
                f"kernel-common allows), else {', '.join(self.dkms)} (DKMS)"
            )
        if self.unversioned:
            parts.append(", ".join(self.unversioned))
        where = f"from {self.repository}"
        if self.fabricmanager and self.fabricmanager_repository != self.repository:
            where += f"; fabric manager from {self.fabricmanager_repository}"
        return f"{'; '.join(parts)}; all held; {where}"


class PackagesUnavailable(ValueError):
    """The role's OS data has no packages for this OS, source, branch and flavour."""


@functools.cache
def _load(name: str) -> Mapping[str, Any]:
    data = yaml.load((ROLE / name).read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}
    if not isinstance(data, dict):
        raise PackagesUnavailable(f"{ROLE / name} is not a mapping")
    return data


def os_vars_file(os_id: str, version_id: str, family: str) -> str | None:
    """The OS data file the role loads (tasks/preflight.yml's first_found order)."""
    dist = _DISTRIBUTION.get(os_id, os_id.capitalize())
    major = version_id.split(".")[0]
    for name in (f"{dist}-{version_id}.yml", f"{dist}-{major}.yml"):
        if (ROLE / "vars" / name).is_file():
            return name
    fam = _FAMILY.get(family)
    if fam and (ROLE / "vars" / f"{fam}-{major}.yml").is_file():
        return f"{fam}-{major}.yml"
    return None


def _tests(env: jinja2.Environment) -> None:
    env.tests["search"] = lambda value, pattern: re.search(pattern, str(value)) is not None
    env.tests["match"] = lambda value, pattern: re.match(pattern, str(value)) is not None


def _native(text: str) -> object:
    """Ansible's conversion of a rendered string that is a list or mapping literal."""
    stripped = text.strip()
    if stripped[:1] in "[{" or stripped in ("True", "False"):
        try:
            return ast.literal_eval(stripped)
        except (ValueError, SyntaxError):
            return stripped
    return stripped


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    _tests(env)
    return env


@functools.lru_cache(maxsize=4096)
def _template(text: str) -> jinja2.Template:
    """A template compiled once per source text (compiling is most of a render's cost)."""
    return _environment().from_string(text)


def _render(value: object, ctx: Mapping[str, Any]) -> object:
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        try:
            return _native(_template(value).render(**ctx))
        except (jinja2.TemplateError, TypeError, ValueError, KeyError):
            return value  # depends on something not known at plan time (host facts)
    if isinstance(value, list):
        return [_render(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: _render(v, ctx) for k, v in value.items()}
    return value


def role_vars(
    os_file: str, overrides: Mapping[str, object], facts: Mapping[str, object]
) -> dict[str, Any]:
    """The role's defaults, constants and OS data with `overrides`, rendered."""
    raw: dict[str, Any] = {
        **_load("defaults/main.yml"),
        **_load("vars/main.yml"),
        **_load(f"vars/{os_file}"),
        **overrides,
        "ansible_facts": dict(facts),
    }
    ctx = dict(raw)
    for _round in range(_PASSES):
        ctx = {k: (_render(v, ctx) if k in raw else v) for k, v in ctx.items()}
    return ctx


def _bool(value: object) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "1")


def _strs(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@functools.lru_cache(maxsize=256)
def driver_packages(
    *,
    os_id: str,
    version_id: str,
    family: str,
    kernel: str,
    source: str,
    branch: int,
    flavour: str,
    fabricmanager: bool,
    architecture: str = "x86_64",
    imex: bool = False,
) -> DriverPackages:
    """The packages the role installs and holds; PackagesUnavailable when it has none.

    Cached: the answer depends only on these arguments and the role's files (read once), and
    a fleet has few distinct combinations (1,000 hosts: 6 ms each -> once per combination).
    """
    os_file = os_vars_file(os_id, version_id, family)
    where = f"{os_id} {version_id}"
    if os_file is None:
        raise PackagesUnavailable(f"the nvidia_driver role has no OS data for {where}")
    facts = {
        "distribution": _DISTRIBUTION.get(os_id, os_id),
        "distribution_version": version_id,
        "distribution_major_version": version_id.split(".")[0],
        "os_family": _FAMILY.get(family, family),
        "architecture": architecture,
    }
    v = role_vars(
        os_file,
        {
            "nvidia_driver_source": source,
            "nvidia_driver_branch": str(branch),
            "nvidia_driver_flavour": flavour,
            "nvidia_driver_fabricmanager": fabricmanager,
            "nvidia_driver_imex": imex,
            "__nvidia_driver_kernel": kernel or "<kernel>",
        },
        facts,
    )
    if not v.get("__nvidia_driver_os_supported"):
        raise PackagesUnavailable(f"the nvidia_driver role does not support {where}")
    if source not in _strs(v.get("__nvidia_driver_sources_supported")):
        raise PackagesUnavailable(f"the nvidia_driver role has no {source} packages on {where}")
    sets = v["__nvidia_driver_package_sets"][source]
    scheme = str(v.get("__nvidia_driver_branch_scheme", "default"))
    flavours = sets.get(str(branch)) or sets.get(scheme) or sets.get("default") or {}
    chosen = flavours.get(flavour)
    if not isinstance(chosen, dict):
        have = ", ".join(flavours) or "none"
        raise PackagesUnavailable(
            f"the nvidia_driver role's {source} packages on {where} have no {flavour} kernel "
            f"modules for branch {branch} (flavours there: {have}); the reference "
            "(tests/recorded/reference/packages.yaml) records no such package names"
        )
    fm = _strs(v.get("__nvidia_driver_fabricmanager_os_packages")) if fabricmanager else ()
    imex_set = _strs(v.get("__nvidia_driver_imex_packages")) if imex else ()
    if imex and (source != "cuda" or branch < int(v["__nvidia_driver_imex_first_branch"])):
        raise PackagesUnavailable(
            f"the nvidia_driver role installs nvidia-imex only from NVIDIA's CUDA repository and "
            f"from branch {v['__nvidia_driver_imex_first_branch']} on (the reference records no "
            f"nvidia-imex before, nor in a distribution's archive); asked: {source} {branch}"
        )
    cuda = str(v.get("__nvidia_driver_cuda_repo_url", "")).strip()
    archive = "the distribution's archive"
    return DriverPackages(
        pkg_mgr=str(v.get("__nvidia_driver_pkg_mgr", "")),
        first=_strs(v.get("__nvidia_driver_pinning_packages")),
        driver=_strs(chosen.get("versioned")),
        fabricmanager=fm,
        imex=imex_set,
        unversioned=_strs(chosen.get("unversioned")),
        prebuilt=_strs(chosen.get("prebuilt")),
        dkms=_strs(chosen.get("dkms_versioned")),
        repository=f"NVIDIA's CUDA repository {cuda}" if source == "cuda" else archive,
        fabricmanager_repository=(
            ("" if not fm else archive)
            if _bool(v.get("__nvidia_driver_fabricmanager_in_archive"))
            else (f"NVIDIA's CUDA repository {cuda}" if fm else "")
        ),
    )
