"""Index-only replays of the Ubuntu repositories the lab cannot boot: the package graphs of
NVIDIA's ubuntu2204/ubuntu2404 CUDA repositories and of Canonical's archive (jammy, noble:
restricted + multiverse), generated from the reference (aptrepo/reference.py).

No .deb exists behind these stanzas: they are for `apt-get install --simulate` only
(aptrepo/replay.py). Relations the reference records are replayed as recorded; the few the
generator adds to connect the graph are named in each stanza's origin notes and in README.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aptrepo import contents
from aptrepo import reference as ref
from aptrepo.packages import Package, fabric_names, pinning_names
from aptrepo.reference import Origin

REPLAY_ROOT = "replay"
SERIES = {"ubuntu2204": "22.04", "ubuntu2404": "24.04"}
INFERRED = "Depends between these packages: inferred from the name scheme, not recorded"


@dataclass(frozen=True)
class ReplayRepo:
    os_key: str  # ubuntu2204 | ubuntu2404
    kind: str  # cuda | canonical

    @property
    def directory(self) -> str:
        return f"{REPLAY_ROOT}/{self.os_key}/{self.kind}"


def replay_repos() -> tuple[ReplayRepo, ...]:
    return tuple(ReplayRepo(o, k) for o in SERIES for k in ("cuda", "canonical"))


def _stanza(name: str, version: str, repo: str, origin: Origin, **control: str) -> Package:
    depends = tuple(ref.parse_depends(control.pop("Depends"))) if "Depends" in control else ()
    return Package(
        name,
        version,
        f"test double (index-only replay) of {name}\n from {ref.REFERENCE_REL}: {origin.short()}",
        repo,
        origin,
        depends=depends,
        extra_control={k.replace("_", "-"): v for k, v in control.items() if v},
    )


# --- NVIDIA CUDA repository, Ubuntu-style names -------------------------------------------


def unsuffixed_from() -> int:
    """The first branch whose names drop '-<b>' (the branch entry with a rename_rule)."""
    branches = ref.at("cuda_apt.branches")
    return min(int(b) for b, e in branches.items() if isinstance(e, dict) and "rename_rule" in e)


def ubuntu_name(pattern: str, branch: str) -> str:
    """nvidia-dkms-<b>-open -> nvidia-dkms-580-open, or nvidia-dkms-open from 590 (rename_rule:
    'branch designation dropped from every Ubuntu package name')."""
    if int(branch) >= unsuffixed_from():
        return pattern.replace("-<b>", "")
    return ref.expand(pattern, branch)


def ubuntu_revision(upstream: str) -> str:
    value = str(ref.at("cuda_apt.version_scheme.ubuntu_style_driver_packages.value"))
    match = re.match(r"<upstream>(-\S+) up to and including (\S+); <upstream>(-\S+) from", value)
    if not match:
        raise ref.ReferenceError(f"ubuntu_style_driver_packages not understood: {value!r}")
    old, last, new = match.groups()
    return old if ref.version_key(upstream) <= ref.version_key(last) else new


def fm_revision() -> str:
    value = str(ref.at("cuda_apt.version_scheme.fabricmanager_family_ubuntu.value"))
    match = re.match(r"<upstream>(-\S+)", value)
    if not match:
        raise ref.ReferenceError(f"fabricmanager_family_ubuntu not understood: {value!r}")
    return match.group(1)


def _also_in_cuda(needle: str) -> tuple[str, str]:
    """(package name, example) of the cuda_apt.also_in_cuda_repo entry that names `needle`."""
    for entry in ref.at("cuda_apt.also_in_cuda_repo"):
        words = re.findall(r"[a-z][a-z0-9.+-]*[a-z0-9]", str(entry["name"]).split("(")[0])
        if needle in words:
            return needle, str(entry.get("example", ""))
    raise ref.ReferenceError(f"cuda_apt.also_in_cuda_repo has no {needle!r}")


def _cuda_driver(branch: str, upstream: str, repo: str) -> list[Package]:
    names = ref.at("cuda_apt.ubuntu_style_names")
    version = upstream + ubuntu_revision(upstream)
    same = f"(= {version})"
    origin = Origin(("cuda_apt.ubuntu_style_names", "cuda_apt.version_scheme"), (INFERRED,))
    n = {
        f"{fl}.{k}": ubuntu_name(str(p), branch)
        for fl in ("open", "proprietary")
        for k, p in names[fl].items()
    }
    common = [ubuntu_name(str(p), branch) for p in names["common"]]
    kernel_common = ubuntu_name("nvidia-kernel-common-<b>", branch)
    compute = ubuntu_name("libnvidia-compute-<b>", branch)
    utils = ubuntu_name("nvidia-utils-<b>", branch)
    compute_utils = ubuntu_name("nvidia-compute-utils-<b>", branch)
    # Canonical's packaging (files.yaml relations): headless-no-dkms pulls compute-utils (the
    # persistence daemon) and NOT nvidia-utils (nvidia-smi); NVIDIA's Ubuntu-style packages
    # are assumed to follow it (lead).
    headless_origin = Origin(
        ("cuda_apt.ubuntu_style_names", "cuda_apt.version_scheme"),
        (INFERRED, f"Depends {compute_utils}, not {utils}: {contents.FILES_REL} relations (lead)"),
    )
    stanzas: list[Package] = []
    for fl in ("open", "proprietary"):
        stanzas += [
            _stanza(n[f"{fl}.kernel_source"], version, repo, origin),
            _stanza(
                n[f"{fl}.dkms"],
                version,
                repo,
                origin,
                Depends=f"dkms, {kernel_common} {same}, {n[f'{fl}.kernel_source']} {same}",
            ),
            _stanza(
                n[f"{fl}.headless_no_dkms"],
                version,
                repo,
                headless_origin,
                Depends=f"{kernel_common} {same}, {compute} {same}, {compute_utils} {same}",
            ),
            _stanza(
                n[f"{fl}.headless"],
                version,
                repo,
                origin,
                Depends=f"{n[f'{fl}.headless_no_dkms']} {same}, {n[f'{fl}.dkms']} {same}",
            ),
            _stanza(
                n[f"{fl}.full"],
                version,
                repo,
                origin,
                Depends=f"{n[f'{fl}.headless']} {same}, {utils} {same}, {compute} {same}",
            ),
        ]
    stanzas += [_stanza(name, version, repo, origin) for name in common]
    # Metas: nvidia-open-<b> as the 580 stanza records it; cuda-drivers-<b> (proprietary).
    rel = ref.relationship("nvidia-open-580 Depends")
    match = re.match(r"nvidia-open-580 Depends (.+); Conflicts (.+)$", str(rel["what"]))
    if not match:
        raise ref.ReferenceError(f"relationships: {rel['what']!r} not understood")
    to_branch = [
        (ubuntu_name(w.replace("580", "<b>"), branch), w)
        for w in re.findall(r"[a-z0-9-]+", match.group(1) + " " + match.group(2))
        if "580" in w
    ]
    rewrite = dict((old, new) for new, old in to_branch)
    depends = " | ".join(rewrite.get(w.strip(), w.strip()) for w in match.group(1).split("|"))
    conflicts = ", ".join(rewrite.get(w.strip(), w.strip()) for w in match.group(2).split(","))
    meta_origin = Origin(
        ("relationships", "cuda_apt.ubuntu_style_names.open.meta"),
        ("the 580 stanza, renamed for other branches (inferred)",),
    )
    stanzas.append(
        _stanza(n["open.meta"], version, repo, meta_origin, Depends=depends, Conflicts=conflicts)
    )
    stanzas.append(
        _stanza(
            n["proprietary.meta"], version, repo, origin, Depends=f"{n['proprietary.full']} {same}"
        )
    )
    for needle in ("nvidia-persistenced", "nvidia-modprobe"):
        name = _also_in_cuda(needle)[0]
        stanzas.append(_stanza(name, version, repo, Origin(("cuda_apt.also_in_cuda_repo",))))
    return stanzas


def _cuda_fabric(branch: str, upstream: str, repo: str) -> list[Package]:
    names = fabric_names(branch)
    version = upstream + fm_revision()
    unsuffixed = fabric_names("580")["fabricmanager"]
    origin = Origin((f"cuda_apt.branches.{branch}", "relationships"))
    stanzas = []
    for key, name in names.items():
        control = {}
        if key == "fabricmanager" and name != unsuffixed:
            control = {"Provides": unsuffixed, "Conflicts": unsuffixed}
        stanzas.append(_stanza(name, version, repo, origin, **control))
    return stanzas


def _pinning_revision() -> str:
    value = str(ref.at("cuda_apt.version_scheme.pinning_package.value"))
    match = re.search(r"e\.g\. \d+(-\S+)", value)
    if not match:
        raise ref.ReferenceError(f"pinning_package not understood: {value!r}")
    return match.group(1)


def cuda_replay(os_key: str) -> list[Package]:
    repo = ReplayRepo(os_key, "cuda").directory
    stanzas: list[Package] = []
    for branch_key, versions in ref.selection()["replay"]["cuda"].items():
        branch = str(branch_key)
        for upstream in versions:
            ref.require_recorded(str(upstream), f"replay {os_key} {branch}")
            stanzas += _cuda_driver(branch, str(upstream), repo)
            stanzas += _cuda_fabric(branch, str(upstream), repo)
        stanza = ref.at("cuda_apt.pinning_package_stanza.value")
        for pattern, kind in pinning_names(branch):
            if kind == "branch":
                stanzas.append(
                    _stanza(
                        pattern,
                        branch + _pinning_revision(),
                        repo,
                        Origin(
                            (
                                f"cuda_apt.branches.{branch}.pinning",
                                "cuda_apt.pinning_package_stanza",
                            )
                        ),
                        Provides=str(stanza["Provides"]),
                        Conflicts=str(stanza["Conflicts"]),
                        Replaces=str(stanza["Replaces"]),
                    )
                )
    name, example = _also_in_cuda("dkms")
    dkms_version = example.split()[0]
    stanzas.append(_stanza(name, dkms_version, repo, Origin(("cuda_apt.also_in_cuda_repo",))))
    return stanzas


# --- Canonical's archive (restricted + multiverse) ----------------------------------------


def canonical_version(upstream: str, series: str) -> str:
    """<upstream>-0ubuntu0.<series>.<n>: the recorded string where there is one, else n=1."""
    scheme = str(ref.at("canonical_archive.version_scheme.value"))
    prefix = scheme.replace("<upstream>", upstream).replace("<series>", series).split("<n>")[0]
    recorded = sorted(
        (v for v in ref.recorded_versions() if v.startswith(prefix)), key=ref.version_key
    )
    return recorded[-1] if recorded else prefix + "1"


def _coupling(name: str, upstream: str) -> str:
    """'<name> (<= X-1), <name> (>= X)' from the recorded nvidia-dkms-595 coupling."""
    text = str(ref.at("canonical_archive.exact_version_coupling.dkms")).split(";")[0]
    match = re.search(r"Depends (\S+) \(<= (\S+?)(-\S+)\), \S+ \(>= (\S+)\)", text)
    if not match:
        raise ref.ReferenceError(f"exact_version_coupling.dkms not understood: {text!r}")
    return f"{name} (<= {upstream}{match.group(3)}), {name} (>= {upstream})"


def _abi_depends(branch: str, upstream: str, objects: str, abi_flavour: str, mv: str) -> str:
    """The recorded 515 ABI stanza's Depends, re-addressed to this branch/kernel/driver."""
    text = str(ref.at("canonical_archive.exact_version_coupling.prebuilt_abi_package_515"))
    match = re.match(r"(\S+) (\S+) Depends: (.+)$", text)
    if not match:
        raise ref.ReferenceError("prebuilt_abi_package_515 not understood")
    old_version, depends = match.group(2), match.group(3)
    old_abi = re.search(r"linux-image-(\S+?)(?= \|)", depends)
    old_upstream = re.search(r"\(>= (\S+)\)\s*$", depends)
    old_objects = re.search(r"(linux-objects-\S+)", depends)
    if not (old_abi and old_upstream and old_objects):
        raise ref.ReferenceError("prebuilt_abi_package_515 Depends not understood")
    depends = depends.replace(old_objects.group(1), objects)
    depends = depends.replace(old_abi.group(1), abi_flavour).replace(old_version, mv)
    depends = depends.replace(old_upstream.group(1), upstream).replace("-515-", f"-{branch}-")
    return depends


def canonical_replay(os_key: str) -> list[Package]:
    series = SERIES[os_key]
    repo = ReplayRepo(os_key, "canonical").directory
    chosen = ref.selection()["replay"]
    server = [str(n) for n in ref.at("canonical_archive.server_driver_packages.names")]
    origin = Origin(
        ("canonical_archive.server_driver_packages", "canonical_archive.version_scheme"),
        (INFERRED,),
    )
    coupled_origin = Origin(("canonical_archive.exact_version_coupling",))
    stanzas: list[Package] = []
    for branch_key, versions in chosen["canonical"].items():
        branch = str(branch_key)
        published = [ref.require_recorded(str(v), f"canonical {branch}") for v in versions]
        for upstream in published:
            version = canonical_version(upstream, series)
            same = f"(= {version})"
            n = {p: ref.expand(p, branch) for p in server}
            kc = n["nvidia-kernel-common-<b>-server"]
            for pattern, name in n.items():
                control: dict[str, str] = {}
                if pattern == "nvidia-kernel-common-<b>-server":
                    control["Provides"] = f"{kc}-{upstream}"
                elif pattern.startswith(("nvidia-dkms-", "nvidia-kernel-source-")):
                    dkms = "dkms, " if pattern.startswith("nvidia-dkms-") else ""
                    control["Depends"] = dkms + _coupling(kc, upstream)
                elif pattern.startswith("nvidia-headless-no-dkms-"):
                    control["Depends"] = (
                        f"{kc} {same}, {n['libnvidia-compute-<b>-server']} {same}, "
                        f"{n['nvidia-compute-utils-<b>-server']} {same}"
                    )
                elif pattern.startswith("nvidia-headless-"):
                    suffix = pattern.removeprefix("nvidia-headless-<b>-server")
                    no_dkms = n["nvidia-headless-no-dkms-<b>-server" + suffix]
                    dkms_name = n["nvidia-dkms-<b>-server" + suffix]
                    control["Depends"] = f"{no_dkms} {same}, {dkms_name} {same}"
                stanzas.append(
                    _stanza(
                        name,
                        version,
                        repo,
                        coupled_origin
                        if "Depends" in control and "<=" in control["Depends"]
                        else origin,
                        **control,
                    )
                )
            # Multiverse fabric manager (source fabric-manager-<b>): the virtual kernel-common.
            fm_origin = Origin(
                (
                    "canonical_archive.fabric_manager_multiverse",
                    "canonical_archive.libnvidia_nscq_in_archive",
                )
            )
            for pattern in ref.at("canonical_archive.fabric_manager_multiverse.names"):
                if str(pattern).startswith("cuda-drivers-"):
                    continue  # its Depends are not recorded
                stanzas.append(
                    _stanza(
                        ref.expand(str(pattern), branch),
                        version,
                        repo,
                        fm_origin,
                        Depends=f"{kc}-{upstream}",
                    )
                )
            nscq = str(ref.at("canonical_archive.libnvidia_nscq_in_archive.value")).split()[0]
            stanzas.append(
                _stanza(
                    ref.expand(nscq, branch), version, repo, fm_origin, Depends=f"{kc}-{upstream}"
                )
            )
        stanzas += _prebuilt(branch, published, series, repo)
    stanzas += kernel_stanzas(repo)
    name, example = _also_in_cuda("dkms")
    stanzas.append(
        _stanza(
            name,
            example.split()[0],
            repo,
            Origin(
                ("cuda_apt.also_in_cuda_repo",),
                ("dkms's version in Canonical's archive is not recorded: the CUDA pool's",),
            ),
        )
    )
    return stanzas


def kernels() -> dict[str, dict[str, str]]:
    return {
        str(k): {a: str(b) for a, b in v.items()}
        for k, v in ref.selection()["replay"]["kernels"].items()
    }


def kernels_without_prebuilt() -> dict[str, dict[str, str]]:
    """Kernels the replay carries with no prebuilt NVIDIA module (none recorded for them)."""
    return {
        str(k): {a: str(b) for a, b in v.items()}
        for k, v in ref.selection()["replay"]["kernels_without_prebuilt"].items()
    }


def kernel_stanzas(repo: str) -> list[Package]:
    """linux-image-<abi>-<flavour> and linux-headers-<abi>-<flavour> of every replay kernel."""
    origin = Origin(
        (
            "canonical_archive.exact_version_coupling.prebuilt_abi_package_515",
            "canonical_archive.prebuilt_modules.flavour_meta_depends_example",
            "canonical_archive.nvidia_kernels",
        )
    )
    stanzas = []
    for flavour, kernel in (kernels() | kernels_without_prebuilt()).items():
        abi = f"{kernel['abi']}-{flavour}"
        for pattern in ("linux-image-{}", "linux-headers-{}"):
            stanzas.append(_stanza(pattern.format(abi), kernel["version"], repo, origin))
    return stanzas


def _prebuilt(branch: str, published: list[str], series: str, repo: str) -> list[Package]:
    names = ref.at("canonical_archive.prebuilt_modules.abi_specific")
    origin = Origin(
        ("canonical_archive.prebuilt_modules", "canonical_archive.exact_version_coupling"),
        (
            "-generic ABI packages built against the branch's older release, -aws against "
            "the newer (selection.yaml); current ABI Depends: lead (the 2022 pattern)",
        ),
    )
    stanzas: list[Package] = []
    for flavour, kernel in kernels().items():
        upstream = published[0] if flavour == "generic" else published[-1]
        abi_flavour = f"{kernel['abi']}-{flavour}"
        mv = kernel["modules_version"]
        signatures = str(names["signatures"]).replace("<uname -r>", abi_flavour).split()[0]
        stanzas.append(_stanza(signatures, mv, repo, origin))
        kc = ref.expand("nvidia-kernel-common-<b>-server", branch)
        for module_flavour, key in (("-open", "open"), ("", "proprietary")):
            abi_pkg = str(names[key]).replace("<b>", branch).replace("<uname -r>", abi_flavour)
            objects = (
                str(names["objects"]).replace("<b>", branch).replace("[-open]", module_flavour)
            )
            objects = objects.replace("<uname -r>", abi_flavour)
            stanzas.append(_stanza(objects, mv, repo, origin))
            stanzas.append(
                _stanza(
                    abi_pkg,
                    mv,
                    repo,
                    origin,
                    Depends=_abi_depends(branch, upstream, objects, abi_flavour, mv),
                )
            )
            meta = abi_pkg.removesuffix(f"-{abi_flavour}") + f"-{flavour}"
            stanzas.append(
                _stanza(meta, mv, repo, origin, Depends=f"{abi_pkg} (= {mv}), {kc} (>= {upstream})")
            )
    return stanzas


def replay_packages() -> list[Package]:
    stanzas: list[Package] = []
    for os_key in SERIES:
        stanzas += cuda_replay(os_key) + canonical_replay(os_key)
    return stanzas
