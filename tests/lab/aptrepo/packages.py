"""The test doubles with real .deb files: which stand-in packages the lab's signed repositories
serve, generated from the reference (aptrepo/reference.py), never from a role's variables.

These are NOT NVIDIA's packages. They carry the names, versions and relations that
tests/recorded/reference/packages.yaml records for NVIDIA's repositories, so that repository
set-up, key checking, version pins, holds, DKMS builds and `nvidia-ctk` calls run for real in
the lab, where NVIDIA's repositories cannot be reached. What each stand-in does (and does not
do) is in README.md, at the top of its file in payload/, and in the package's
/usr/share/doc/<package>/README.test-double (with the reference entries it came from).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aptrepo import contents
from aptrepo import reference as ref
from aptrepo.reference import Origin

NVIDIA_DOWNLOAD = "https://developer.download.nvidia.com/"
TOOLKIT_HOST = "https://nvidia.github.io/"


@dataclass(frozen=True)
class PayloadFile:
    """One file of a stand-in: `source` in payload/ (or literal `content`) at `target`;
    `link` makes `target` a symlink to it instead."""

    source: str
    target: str
    mode: int = 0o644
    content: str | None = None
    link: str | None = None


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    description: str
    repo: str
    origin: Origin
    files: tuple[PayloadFile, ...] = ()
    depends: tuple[str, ...] = ()
    conffiles: tuple[str, ...] = ()
    extra_control: Mapping[str, str] = field(default_factory=dict)
    scripts: Mapping[str, str] = field(default_factory=dict)  # postinst/prerm -> payload file
    substitutions: Mapping[str, str] = field(default_factory=dict)

    @property
    def upstream(self) -> str:
        return self.version.rsplit("-", 1)[0]


# --- Repository directories: the real URLs' paths -----------------------------------------


def cuda_repo_dir(os_key: str) -> str:
    """compute/cuda/repos/<os>/x86_64, from cuda_apt.repositories.<os>.urls.x86_64."""
    url = str(ref.at(f"cuda_apt.repositories.{os_key}.urls")["x86_64"])
    return url.removeprefix(NVIDIA_DOWNLOAD).strip("/")


def cuda_key_file(os_key: str) -> str:
    return str(ref.at(f"cuda_apt.repositories.{os_key}.key_file"))


def toolkit_repo_dir() -> str:
    """libnvidia-container/stable/deb/amd64, from container_toolkit.apt.list_content."""
    line = str(ref.at("container_toolkit.apt.list_content")[0])
    url = next(word for word in line.split() if word.startswith(TOOLKIT_HOST))
    return url.removeprefix(TOOLKIT_HOST).replace("$(ARCH)", "amd64").strip("/")


TOOLKIT_REPO = toolkit_repo_dir()
CUDA_OSES = ("debian12", "debian13")
CUDA_REPOS = tuple(cuda_repo_dir(o) for o in CUDA_OSES)
TOOLKIT_PUBLISHED: tuple[str, ...] = tuple(str(v) for v in ref.selection()["toolkit"])
# The pair the toolkit lab test upgrades across (1.17.8: no CDI refresh units; 1.18.0: units).
TOOLKIT_VERSIONS = (TOOLKIT_PUBLISHED[0], TOOLKIT_PUBLISHED[1])


def debian_revision() -> str:
    """'-1', from cuda_apt.version_scheme.debian_style_packages ('<upstream>-1 in debian12/13')."""
    value = str(ref.at("cuda_apt.version_scheme.debian_style_packages.value"))
    match = re.match(r"<upstream>(-\S+)", value)
    if not match:
        raise ref.ReferenceError(f"no Debian-style revision in {value!r}")
    return match.group(1)


def _describe(what: str, origin: Origin) -> str:
    return f"test double of {what}\n from {ref.REFERENCE_REL}: {origin.short()}"


# --- Debian-style driver packages (cuda_apt.debian_style_names) ---------------------------


@dataclass(frozen=True)
class DebianNames:
    open_kernel: str
    proprietary_kernel: str
    compute: str
    other: tuple[str, ...]
    open_meta: str
    open_meta_branch: str  # with <b>
    proprietary_meta: str
    proprietary_meta_branch: str
    metas_branch_up_to: int
    meta_depends: tuple[str, ...]  # cuda_drivers_580_depends, names only
    dkms_module: str

    def named(self, needle: str) -> str:
        """The one recorded name (of `other`) that contains `needle`."""
        found = [n for n in self.other if needle in n]
        if len(found) != 1:
            raise ref.ReferenceError(f"debian_style_names.other: {needle!r} matches {found}")
        return found[0]


def debian_names() -> DebianNames:
    names = ref.at("cuda_apt.debian_style_names")
    metas = names["metas"]
    pattern = re.compile(r"^(\S+) \(and (\S+) up to (\d+)\)$")
    open_meta = pattern.match(str(metas["open"]))
    prop_meta = pattern.match(str(metas["proprietary"]))
    if not open_meta or not prop_meta:
        raise ref.ReferenceError(f"debian_style_names.metas not understood: {metas}")
    depends = ref.parse_depends(str(names["cuda_drivers_580_depends"]))
    module = re.search(
        r"registered as '([^']+)'", str(ref.at("cuda_rpm.driver_packages.open_module_dkms_name"))
    )
    if not module:
        raise ref.ReferenceError("cuda_rpm.driver_packages.open_module_dkms_name: no name")
    return DebianNames(
        open_kernel=str(names["open_kernel"]),
        proprietary_kernel=str(names["proprietary_kernel"]),
        compute=str(names["compute_userspace"]),
        other=tuple(str(n) for n in names["other"]),
        open_meta=open_meta.group(1),
        open_meta_branch=open_meta.group(2),
        proprietary_meta=prop_meta.group(1),
        proprietary_meta_branch=prop_meta.group(2),
        metas_branch_up_to=int(open_meta.group(3)),
        meta_depends=tuple(d.split()[0] for d in depends),
        dkms_module=module.group(1),
    )


DEBIAN_NAMES_ENTRY = "cuda_apt.debian_style_names"
NO_DEPENDS = "Depends between the Debian-style packages are not recorded (gaps: no verbatim index)"


def _lib_files(upstream: str, stem: str) -> tuple[PayloadFile, ...]:
    directory = "usr/lib/x86_64-linux-gnu"
    content = f"TEST DOUBLE of {stem}.so.{upstream} (tests/lab/aptrepo): not a library\n"
    return (
        PayloadFile("", f"{directory}/{stem}.so.{upstream}", content=content),
        PayloadFile("", f"{directory}/{stem}.so.1", link=f"{stem}.so.{upstream}"),
    )


def _dkms_package(
    names: DebianNames, name: str, upstream: str, version: str, repo: str, flavour: str
) -> Package:
    """A kernel-module package: our own small DKMS module registered as NVIDIA's."""
    licence = "Dual MIT/GPL" if flavour == "open" else "NVIDIA"
    src = f"usr/src/{names.dkms_module}-{upstream}"
    other = names.proprietary_kernel if flavour == "open" else names.open_kernel
    origin = Origin(
        (DEBIAN_NAMES_ENTRY, "cuda_rpm.driver_packages.open_module_dkms_name"),
        (
            "the module is gpuprov's own few lines of C (payload/dkms/nvidia.c), licence "
            f"{licence!r} as the simulator reads it (tests/lab/gpusim/README.md)",
            f"Depends dkms (Debian's); Conflicts {other} (one DKMS module "
            f"{names.dkms_module!r} per version): inferred, not recorded",
        ),
    )
    return Package(
        name,
        version,
        _describe(
            f"NVIDIA's {flavour} kernel module as DKMS source (a tiny module of ours)", origin
        ),
        repo,
        origin,
        files=(
            PayloadFile("dkms/nvidia.c", f"{src}/{names.dkms_module}.c"),
            PayloadFile("dkms/Kbuild", f"{src}/Kbuild"),
            PayloadFile("dkms/dkms.conf", f"{src}/dkms.conf"),
        ),
        depends=("dkms",),
        extra_control={"Conflicts": other},
        scripts={"postinst": "dkms-postinst", "prerm": "dkms-prerm"},
        substitutions={"@LICENSE@": licence, "@MODULE@": names.dkms_module, "@FLAVOUR@": flavour},
    )


def _meta_depends(names: DebianNames, kernel: str, floor: str) -> tuple[str, ...]:
    swapped = [kernel if n == names.proprietary_kernel else n for n in names.meta_depends]
    return tuple(f"{n} (>= {floor})" for n in swapped)


def _driver_packages(branch: str, upstream: str, floor: str, repo: str) -> list[Package]:
    names = debian_names()
    version = upstream + debian_revision()
    same = f"(= {version})"
    plain = Origin((DEBIAN_NAMES_ENTRY,), (NO_DEPENDS,))
    smi, nvml, cuda = names.named("smi"), names.named("nvidia-ml"), names.named("cuda")
    persistenced, modprobe = names.named("persistenced"), names.named("modprobe")
    packages = [
        _dkms_package(names, names.open_kernel, upstream, version, repo, "open"),
        _dkms_package(names, names.proprietary_kernel, upstream, version, repo, "proprietary"),
        Package(
            names.compute,
            version,
            _describe("NVIDIA's compute userspace (depends on nvidia-smi, NVML, libcuda)", plain),
            repo,
            Origin(
                (DEBIAN_NAMES_ENTRY,),
                (
                    f"Depends {smi}, {nvml}, {cuda} at its own version: inferred (the role "
                    f"installs {names.compute} for the compute userspace), not recorded",
                ),
            ),
            depends=(f"{smi} {same}", f"{nvml} {same}", f"{cuda} {same}"),
        ),
        Package(
            smi,
            version,
            _describe("nvidia-smi (hands over to the lab's GPU simulator)", plain),
            repo,
            plain,
            files=(PayloadFile("nvidia-smi", "usr/bin/nvidia-smi", 0o755),),
            depends=(f"{nvml} {same}",),
        ),
        Package(
            nvml,
            version,
            _describe("NVML (a marker file, no library)", plain),
            repo,
            plain,
            files=_lib_files(upstream, "libnvidia-ml"),
        ),
        Package(
            cuda,
            version,
            _describe("libcuda (a marker file, no library)", plain),
            repo,
            plain,
            files=_lib_files(upstream, "libcuda"),
        ),
        Package(
            persistenced,
            version,
            _describe("nvidia-persistenced (the simulator runs the daemon)", plain),
            repo,
            Origin(
                (DEBIAN_NAMES_ENTRY, "gaps"),
                ("the unit NVIDIA ships is not recorded: payload/nvidia-persistenced.service",),
            ),
            files=(
                PayloadFile("nvidia-persistenced", "usr/bin/nvidia-persistenced", 0o755),
                PayloadFile(
                    "nvidia-persistenced.service",
                    "lib/systemd/system/nvidia-persistenced.service",
                ),
            ),
        ),
        Package(
            modprobe,
            version,
            _describe("nvidia-modprobe (runs modprobe nvidia)", plain),
            repo,
            plain,
            files=(PayloadFile("nvidia-modprobe", "usr/bin/nvidia-modprobe", 0o755),),
        ),
    ]
    # Package shape only: the rest of the recorded names, and those cuda-drivers depends on.
    shaped = [n for n in (*names.other, *names.meta_depends) if n not in {p.name for p in packages}]
    for name in dict.fromkeys(shaped):
        packages.append(
            Package(name, version, _describe(f"{name} (package shape only)", plain), repo, plain)
        )
    meta_origin = Origin(
        (f"{DEBIAN_NAMES_ENTRY}.cuda_drivers_580_depends", f"{DEBIAN_NAMES_ENTRY}.metas"),
        (
            f"floor = the branch's first recorded release ({floor}), as recorded for 580",
            f"{names.open_meta}: {names.proprietary_kernel} swapped for {names.open_kernel} "
            "(inferred)",
        ),
    )
    metas = [
        (names.proprietary_meta, names.proprietary_kernel),
        (names.open_meta, names.open_kernel),
    ]
    if int(branch) <= names.metas_branch_up_to:
        metas += [
            (ref.expand(names.proprietary_meta_branch, branch), names.proprietary_kernel),
            (ref.expand(names.open_meta_branch, branch), names.open_kernel),
        ]
    for name, kernel in metas:
        packages.append(
            Package(
                name,
                version,
                _describe(f"the {name} metapackage ('>=' Depends only)", meta_origin),
                repo,
                meta_origin,
                depends=_meta_depends(names, kernel, floor),
            )
        )
    return packages


# --- Fabric manager family (cuda_apt.branches.<b>) ----------------------------------------


def fabric_names(branch: str) -> dict[str, str]:
    """{'fabricmanager': ..., 'fabricmanager_dev': ..., 'nscq': ...} the branch records."""
    entry = ref.branch_entry(branch)
    found = {
        key: ref.first_name(entry.get(key))
        for key in ("fabricmanager", "fabricmanager_dev", "nscq")
    }
    return {key: name for key, name in found.items() if name}


def _fabric(branch: str, upstream: str, repo: str) -> list[Package]:
    names = fabric_names(branch)
    version = upstream + debian_revision()
    entry = f"cuda_apt.branches.{branch}"
    unsuffixed = ref.first_name(ref.branch_entry("580")["fabricmanager"]) or ""
    packages: list[Package] = []
    fm = names["fabricmanager"]
    control: dict[str, str] = {}
    notes: list[str] = []
    if fm != unsuffixed:
        rel = ref.relationship("Do suffixed FM packages")
        control = {"Provides": unsuffixed, "Conflicts": unsuffixed}
        notes.append(
            f"Provides/Conflicts {unsuffixed}: relationships '{rel['what']}' "
            f"(certainty {rel['certainty']})"
        )
    origin = Origin((entry, "relationships"), tuple(notes))
    packages.append(
        Package(
            fm,
            version,
            _describe("NVIDIA fabric manager (starts only at the loaded driver's version)", origin),
            repo,
            origin,
            files=(
                PayloadFile("nv-fabricmanager", "usr/bin/nv-fabricmanager", 0o755),
                PayloadFile(
                    "nvidia-fabricmanager.service",
                    "lib/systemd/system/nvidia-fabricmanager.service",
                ),
            ),
            extra_control=control,
        )
    )
    imex = ref.first_name(ref.branch_entry(branch).get("imex"))
    if imex:
        packages.append(_imex(imex, version, entry, repo))
    plain = Origin((entry,))
    for key in ("fabricmanager_dev", "nscq"):
        if key in names:
            packages.append(
                Package(
                    names[key],
                    version,
                    _describe(f"{names[key]} (package shape only)", plain),
                    repo,
                    plain,
                )
            )
    return packages


def _imex(name: str, version: str, entry: str, repo: str) -> Package:
    """nvidia-imex(-<b>): the files, unit and node file path of files.yaml (aptrepo/contents.py)."""
    found = contents.entry_for(name, "apt")
    if found is None:
        raise ref.ReferenceError(f"{contents.FILES_REL} has no file list for {name}")
    binary, ctl = found.files
    origin = Origin(
        (entry,),
        (
            f"files, unit {found.extra['unit']} and node file {found.extra['node_config']}: "
            f"{contents.FILES_REL} ({found.certainty})",
            "the daemon is gpuprov's own script (payload/nvidia-imex); NVIDIA's unit: not recorded",
        ),
    )
    return Package(
        name,
        version,
        _describe("NVIDIA IMEX (starts only at the loaded driver's version, with nodes)", origin),
        repo,
        origin,
        files=(
            PayloadFile("nvidia-imex", binary.lstrip("/"), 0o755),
            PayloadFile("nvidia-imex-ctl", ctl.lstrip("/"), 0o755),
            PayloadFile("nvidia-imex.service", f"lib/systemd/system/{found.extra['unit']}"),
        ),
        substitutions={"@NODES@": found.extra["node_config"]},
    )


# --- Pinning packages (>= 575 where recorded) ---------------------------------------------


def pinning_names(branch: str) -> list[tuple[str, str]]:
    """(name pattern, what it pins) per recorded pinning package of the branch:
    'nvidia-driver-pinning-580' pins the branch; 'nvidia-driver-pinning-<version>' a release."""
    value = ref.branch_entry(branch).get("pinning")
    items = value if isinstance(value, list) else [value]
    found: list[tuple[str, str]] = []
    for item in items:
        name = ref.first_name(item)
        if name and name.endswith("-<version>"):
            found.append((name, "version"))
        elif name and name.startswith("nvidia-driver-pinning-"):
            found.append((name, "branch"))
    return found


def pinning_priority() -> int:
    effect = str(ref.at("cuda_apt.pinning_package_stanza.value")["effect"])
    match = re.search(r"priority (\d+)", effect)
    if not match:
        raise ref.ReferenceError(f"pinning_package_stanza: no priority in {effect!r}")
    return int(match.group(1))


def pinning_preferences(packages: list[str], pin: str) -> str:
    header = (
        "# TEST DOUBLE (tests/lab/aptrepo) of the preferences file NVIDIA's pinning package\n"
        "# installs (packages.yaml cuda_apt.pinning_package_stanza: priority "
        f"{pinning_priority()}).\n"
    )
    return header + (
        f"Package: {' '.join(sorted(packages))}\nPin: version {pin}\n"
        f"Pin-Priority: {pinning_priority()}\n"
    )


def _pinning(branch: str, upstream: str | None, pinned: list[str], repo: str) -> Package:
    stanza = ref.at("cuda_apt.pinning_package_stanza.value")
    patterns = dict(pinning_names(branch))
    if upstream is None:
        name = next(p for p, kind in patterns.items() if kind == "branch")
        pin, version = f"{branch}.*", branch + debian_revision()
    else:
        name = next(p for p, kind in patterns.items() if kind == "version")
        name, pin, version = (
            name.replace("<version>", upstream),
            f"{upstream}-*",
            upstream + debian_revision(),
        )
    path = f"etc/apt/preferences.d/{name}"
    origin = Origin(
        (f"cuda_apt.branches.{branch}.pinning", "cuda_apt.pinning_package_stanza"),
        (
            f"version {version}: the Debian revision of the pinning package is not recorded",
            f"file name /{path} and its package list are not recorded",
        ),
    )
    return Package(
        name,
        version,
        _describe(f"NVIDIA's driver pinning package (apt preferences, {pin})", origin),
        repo,
        origin,
        files=(PayloadFile("", path, content=pinning_preferences(pinned, pin)),),
        conffiles=(f"/{path}",),
        extra_control={k: str(stanza[k]) for k in ("Provides", "Conflicts", "Replaces")},
    )


def _floor(branch: str, published: list[str]) -> str:
    recorded = [str(v) for v in ref.branch_entry(branch).get("example_driver_versions", [])]
    return min([*recorded, *published], key=ref.version_key)


def cuda_packages(os_key: str) -> list[Package]:
    """The Debian CUDA repository double of `os_key` (cuda_<os_key> in selection.yaml)."""
    chosen = ref.selection()[f"cuda_{os_key}"]
    repo = cuda_repo_dir(os_key)
    packages: list[Package] = []
    for branch, versions in (chosen.get("fabricmanager_only") or {}).items():
        for upstream in versions:
            packages += _fabric(str(branch), ref.require_recorded(str(upstream), os_key), repo)
    for branch_key, versions in (chosen.get("drivers") or {}).items():
        branch = str(branch_key)
        published = [ref.require_recorded(str(v), f"{os_key} {branch}") for v in versions]
        floor = _floor(branch, published)
        for upstream in published:
            driver = _driver_packages(branch, upstream, floor, repo)
            fabric = _fabric(branch, upstream, repo)
            packages += driver + fabric
            pinned = [p.name for p in driver + fabric if "pinning" not in p.name]
            if any(kind == "version" for _, kind in pinning_names(branch)):
                packages.append(_pinning(branch, upstream, pinned, repo))
        if any(kind == "branch" for _, kind in pinning_names(branch)):
            pinned = [p.name for p in _driver_packages(branch, published[0], floor, repo)]
            pinned += [p.name for p in _fabric(branch, published[0], repo)]
            packages.append(_pinning(branch, None, pinned, repo))
    return packages


# --- Container toolkit (container_toolkit) ------------------------------------------------


def _behaviour(version: str) -> dict[str, Any]:
    """container_toolkit.behaviour_by_version.<upstream>, 'as 1.18.0' resolved."""
    table = ref.at("container_toolkit.behaviour_by_version")
    upstream = version.rsplit("-", 1)[0]
    if upstream not in table:
        raise ref.ReferenceError(f"container_toolkit.behaviour_by_version has no {upstream}")
    entry = dict(table[upstream])
    same = re.match(r"as (\d+\.\d+\.\d+)", str(entry.get("units", "")))
    if same:
        base = {k: v for k, v in table[same.group(1)].items() if k not in ("source", "certainty")}
        entry = {**base, **entry}
    return entry


def _unit(sections: list[tuple[str, list[tuple[str, str]]]]) -> str:
    lines = [
        "# TEST DOUBLE unit (tests/lab/aptrepo), generated from packages.yaml",
        "# container_toolkit.behaviour_by_version.",
    ]
    for title, items in sections:
        lines += ["", f"[{title}]", *[f"{k}={v}" for k, v in items]]
    return "\n".join(lines) + "\n"


def cdi_refresh_units(version: str) -> dict[str, str]:
    """{unit file name: content} for toolkit releases that ship the CDI refresh units."""
    behaviour = _behaviour(version)
    service = behaviour.get("service")
    if not isinstance(service, dict):
        return {}
    unit: list[tuple[str, str]] = [
        ("Description", "Refresh NVIDIA CDI specification (gpuprov lab test double)")
    ]
    unit += [("ConditionPathExists", str(c)) for c in service.get("ConditionPathExists", [])]
    svc: list[tuple[str, str]] = [("Type", str(service["Type"]))]
    svc += [
        (k, str(service[k]))
        for k in ("Environment", "EnvironmentFile", "ExecCondition", "ExecStart")
    ]
    path_items = [("PathChanged", str(p)) for p in behaviour["path_unit"]["PathChanged"]]
    install = [("WantedBy", str(service["WantedBy"]))]
    return {
        "nvidia-cdi-refresh.service": _unit(
            [("Unit", unit), ("Service", svc), ("Install", install)]
        ),
        "nvidia-cdi-refresh.path": _unit(
            [
                (
                    "Unit",
                    [
                        (
                            "Description",
                            "Trigger a CDI refresh on driver changes (gpuprov lab test double)",
                        )
                    ],
                ),
                ("Path", path_items),
                ("Install", install),
            ]
        ),
    }


CDI_REFRESH_POSTINST = """#!/bin/sh
# TEST DOUBLE (tests/lab/aptrepo): what packages.yaml records for toolkit >= 1.18.0
# (container_toolkit.behaviour_by_version.1.18.0.enabled_at_install).
set -e
if [ "$1" = configure ]; then
  state=$(systemctl is-system-running 2>/dev/null || true)
  if [ "$state" = running ] || [ "$state" = degraded ]; then
    systemctl daemon-reload
    systemctl enable --now nvidia-cdi-refresh.path nvidia-cdi-refresh.service || true
    systemctl start nvidia-cdi-refresh.service || true
  fi
fi
"""


def _toolkit(version: str) -> list[Package]:
    names = [str(n) for n in ref.at("container_toolkit.packages")]
    toolkit, base, tools, lib = names
    control = ref.at("container_toolkit.debian_control")
    upstream = version.rsplit("-", 1)[0]
    key = "Depends_1.17.8" if ref.version_key(upstream) < (1, 18) else "Depends_1.18.0+"
    depends = tuple(
        d.replace("@VERSION@", version).replace("@LIBNVIDIA_CONTAINER_TOOLS_VERSION@", version)
        for d in ref.parse_depends(str(control[toolkit][key]))
    )
    behaviour = _behaviour(version)
    entry = "container_toolkit"
    units = cdi_refresh_units(version)
    files = [
        PayloadFile("nvidia-ctk", "usr/bin/nvidia-ctk", 0o755),
        PayloadFile("nvidia-container-runtime", "usr/bin/nvidia-container-runtime", 0o755),
        *[PayloadFile("", f"etc/systemd/system/{n}", content=c) for n, c in units.items()],
    ]
    dropin = str(behaviour.get("containerd_drop_in_default", ""))
    base_origin = Origin(
        (f"{entry}.debian_control", f"{entry}.behaviour_by_version.{upstream}"),
        (
            "Depends python3: the nvidia-ctk double is a Python script",
            "config.toml 'imports' of the drop-in: inferred, not recorded",
        ),
    )
    plain = Origin((f"{entry}.packages",))
    breaks = str(control[toolkit]["Breaks_Replaces"])
    extra = {"Breaks": breaks, "Replaces": breaks}
    return [
        Package(lib, version, _describe(f"{lib} (package shape only)", plain), TOOLKIT_REPO, plain),
        Package(
            tools,
            version,
            _describe(f"{tools} (nvidia-container-cli --version/info)", plain),
            TOOLKIT_REPO,
            plain,
            files=(PayloadFile("nvidia-container-cli", "usr/bin/nvidia-container-cli", 0o755),),
        ),
        Package(
            base,
            version,
            _describe(f"{base} (nvidia-ctk, nvidia-container-runtime)", base_origin),
            TOOLKIT_REPO,
            base_origin,
            files=tuple(files),
            depends=("python3",),
            extra_control={"Breaks": str(control[base]["Breaks"])},
            scripts={"postinst": "cdi-refresh-postinst"} if units else {},
            substitutions={"@CONTAINERD_DROPIN@": dropin if dropin.startswith("/") else ""},
        ),
        Package(
            toolkit,
            version,
            _describe(
                f"{toolkit} (dependency shape of the real package)",
                Origin((f"{entry}.debian_control",)),
            ),
            TOOLKIT_REPO,
            Origin((f"{entry}.debian_control",)),
            depends=depends,
            extra_control={k: v for k, v in extra.items() if v},
        ),
    ]


def all_packages() -> list[Package]:
    """Every stand-in package with a .deb, with the repository directory it is published in."""
    packages: list[Package] = []
    for version in TOOLKIT_PUBLISHED:
        packages += _toolkit(ref.require_recorded(version, "toolkit"))
    for os_key in CUDA_OSES:
        packages += cuda_packages(os_key)
    return packages


GENERATED_SCRIPTS = {"cdi-refresh-postinst": CDI_REFRESH_POSTINST}
