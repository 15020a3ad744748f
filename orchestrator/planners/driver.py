"""The driver planner: branch, version and flavour of the NVIDIA driver, its source and
packages, the fabric services (fabric manager, NVLink5 subnet manager, IMEX) and what a
replaced driver's upgrade is, for the nvidia_driver role (and driver_upgrade, which runs in
its turn)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from ..catalog import (
    Catalog,
    DriverSource,
    GpuModel,
    branch_of,
    parse_version,
    version_at_least,
)
from ..driver_packages import DriverPackages, PackagesUnavailable, driver_packages
from ..errors import PolicyError
from ..facts import HostFacts, LoadedDriver
from ..kernels import kernel_notes
from ..nvlink5 import ImexPlan, Nvlink5Plan, package_format, plan_imex, plan_nvlink5
from ..policy import Policy
from . import HostContext, Notes, RolePlan, os_name

SOURCE_NAMES = {"cuda": "NVIDIA's CUDA repository", "distribution": "the distribution's archive"}
# `uname -m` -> the CUDA repository's architecture directory (reference/packages.yaml: "arch
# dir x86_64 for amd64, sbsa for arm64 servers").
CUDA_ARCH_DIRS = {"x86_64": "x86_64", "aarch64": "sbsa"}
CUDA_REPOS_URL = "https://developer.download.nvidia.com/compute/cuda/repos/"
# The newest branch whose rpm names and module streams are recorded (reference packages.yaml
# cuda_rpm.branches: lt_580 / ge_580 from 580's releases; gaps: "rhel9/rhel10 modules.yaml:
# stream list per branch (>=590)"). dnf hosts at or above this branch are blocked.
DNF_RECORDED_BELOW = 590
# Keys of the role's plan that are always planned, true or false (never the inventory's).
OWNED = ("nvidia_driver_fabricmanager", "nvidia_driver_nvlink5", "nvidia_driver_imex")


@dataclass(frozen=True)
class _DriverChoice:
    branch: int
    version: str | None  # exact version when known (pinned, distribution, already loaded)
    why: str


def _flavour(
    models: Sequence[GpuModel], policy: Policy, notes: Notes, source: DriverSource | None
) -> str:
    """The kernel-module flavour; `source`: the archive the driver comes from (None: NVIDIA's
    repository), whose preferred flavour wins under `auto` where the GPUs allow both."""
    needs_open = sorted({m.model for m in models if m.open_modules == "required"})
    no_open = sorted({m.model for m in models if m.open_modules == "unsupported"})
    if needs_open and no_open:
        notes.blockers.append(
            f"needs both kernel-module flavours: {', '.join(needs_open)} require the open "
            f"modules, {', '.join(no_open)} need the proprietary ones; fix: split these GPUs "
            "across hosts"
        )
        return "open"
    if policy["nvidia_driver_flavour"] == "open" and no_open:
        notes.blockers.append(
            f"nvidia_driver_flavour=open but {', '.join(no_open)} support only the proprietary "
            "modules; fix: set nvidia_driver_flavour to auto or proprietary for this host"
        )
    if policy["nvidia_driver_flavour"] == "proprietary" and needs_open:
        notes.blockers.append(
            f"nvidia_driver_flavour=proprietary but {', '.join(needs_open)} require the open "
            "modules; fix: set nvidia_driver_flavour to auto or open for this host"
        )
    if policy["nvidia_driver_flavour"] != "auto":
        return str(policy["nvidia_driver_flavour"])
    flavour = "proprietary" if no_open else "open"
    preferred = source.preferred_flavour if source is not None else None
    if source and preferred and preferred != flavour and not needs_open and not no_open:
        notes.warnings.append(
            f"{preferred} kernel modules instead of {flavour}: {source.preferred_why} "
            "(catalog); set nvidia_driver_flavour to choose"
        )
        return preferred
    return flavour


def _too_old(models: Sequence[GpuModel], version: str) -> list[GpuModel]:
    """Models whose minimum driver `version` (a full version or a bare branch) does not meet."""
    return [m for m in models if m.min_driver is not None and _below(version, m.min_driver)]


def _check_pinned_branch(
    host: str,
    branch: int,
    version: str | None,
    models: Sequence[GpuModel],
    notes: Notes,
    catalog: Catalog,
) -> None:
    problem = catalog.branch_problem(branch, [m.arch for m in models])
    if problem:
        usable = [
            b.branch
            for b in catalog.ltsb_branches()
            if not catalog.branch_problem(b.branch, [m.arch for m in models])
        ]
        raise PolicyError(
            f"nvidia_driver_branch={branch}: {problem}",
            host=host,
            fix=f"pin an existing branch this host's GPUs support (LTSB: "
            f'{", ".join(map(str, usable)) or "none"}), or set nvidia_driver_branch to "" '
            "to let the planner choose",
        )
    old = _too_old(models, version or str(branch))
    if old:
        needs = ", ".join(f"{m.model} needs >= {m.min_driver}" for m in old)
        raise PolicyError(
            f"nvidia_driver_branch={branch} is too old for this host's GPUs ({needs})",
            host=host,
            fix=f"pin a branch of at least {max(branch_of(m.min_driver or '0') for m in old)}, "
            'or set nvidia_driver_branch to "" to let the planner choose',
        )
    if version is None:
        for m in models:
            if m.min_driver and branch_of(m.min_driver) == branch and "." in m.min_driver:
                notes.warnings.append(
                    f"{m.model} needs >= {m.min_driver}: the role must install at least that "
                    f"release of R{branch}"
                )


def _default_branch(
    models: Sequence[GpuModel], catalog: Catalog, notes: Notes
) -> _DriverChoice | None:
    names = ", ".join(sorted({m.model for m in models}))
    for branch in catalog.ltsb_branches():
        past_last = catalog.branch_problem(branch.branch, [m.arch for m in models])
        if not past_last and not _too_old(models, str(branch.branch)):
            return _DriverChoice(branch.branch, None, f"newest LTSB branch supporting {names}")
    notes.blockers.append(
        f"no LTSB driver branch in the catalog supports {names}; fix: pin "
        "nvidia_driver_branch to a branch that does"
    )
    return None


def _distribution_choice(
    facts: HostFacts,
    policy: Policy,
    models: Sequence[GpuModel],
    catalog: Catalog,
    notes: Notes,
    flavour: str,
    source: DriverSource | None,
) -> _DriverChoice | None:
    os_label = f"{source.os_id} {source.os_version}" if source else os_name(facts)
    if source is None or (not source.any_distribution_branch and not source.distribution):
        fix = (
            f"set nvidia_driver_source=cuda (NVIDIA's {source.cuda_repo} repository) for this host"
            if source and source.cuda_repo
            else "leave nvidia_driver out of gpuprov_roles for this host"
        )
        notes.blockers.append(
            f"the catalog knows no distribution driver for {os_label}; fix: {fix}"
        )
        return None
    if source.any_distribution_branch:
        if policy["nvidia_driver_branch"] is not None:
            return _DriverChoice(
                policy["nvidia_driver_branch"], policy["nvidia_driver_version"], "pinned branch"
            )
        return _default_branch(models, catalog, notes)
    branches = {d.branch for d in source.distribution}
    if (
        policy["nvidia_driver_branch"] is not None
        and policy["nvidia_driver_branch"] not in branches
    ):
        notes.blockers.append(
            f"nvidia_driver_branch={policy['nvidia_driver_branch']} is not in {os_label}'s "
            "archive (it has "
            f"{', '.join(d.version for d in source.distribution)}); fix: pin one of those, or "
            "set nvidia_driver_source=cuda"
        )
        return None
    branch = policy["nvidia_driver_branch"] or source.distribution[-1].branch
    # The archive's releases of that branch with this flavour, newest last.
    offers = sorted(
        (d for d in source.distribution if d.branch == branch and flavour in d.flavours),
        key=lambda d: parse_version(d.version),
    )
    listed = ", ".join(f"{d.version} ({'/'.join(d.flavours)})" for d in source.distribution)
    if policy["nvidia_driver_version"]:
        offers = [d for d in offers if d.version == policy["nvidia_driver_version"]]
    if not offers:
        wanted = policy["nvidia_driver_version"] or f"R{branch}"
        notes.blockers.append(
            f"{os_label}'s archive has no {flavour} driver {wanted} (it has {listed}); fix: pin "
            "one of those versions and flavours, or set nvidia_driver_source=cuda"
        )
        return None
    offer = offers[-1]
    old = _too_old(models, offer.version)
    if old:
        needs = ", ".join(f"{m.model} needs >= {m.min_driver}" for m in old)
        notes.blockers.append(
            f"{os_label}'s archive has driver {offer.version}, too old: {needs}; fix: set "
            "nvidia_driver_source=cuda (NVIDIA's repository) for this host"
        )
        return None
    return _DriverChoice(offer.branch, offer.version, f"{os_label}'s packaged driver")


@dataclass(frozen=True)
class _DriverDecision:
    """What `_choose_driver` decided for the driver role; `_explain_driver` words it."""

    choice: _DriverChoice
    flavour: str
    keep: bool  # the loaded driver already is the plan
    version: str  # exact version, "" for the newest of the branch
    fabric: bool  # the fabric manager is installed
    nvlink5: Nvlink5Plan | None
    imex: ImexPlan | None
    packages: DriverPackages | None


def plan_driver(ctx: HostContext) -> RolePlan | None:
    """The nvidia_driver role (roles.yaml: joins when listed), on a host with known GPUs."""
    if not ctx.known:
        return None
    decision = _choose_driver(ctx)
    return _explain_driver(ctx, decision) if decision is not None else None


def _choose_driver(ctx: HostContext) -> _DriverDecision | None:
    """Branch, version, flavour, fabric services and packages of the driver role; None (with a
    blocker in `notes`) when no driver can be planned."""
    facts, policy, catalog, notes = ctx.facts, ctx.policy, ctx.catalog, ctx.notes
    models, nvswitches = ctx.known, ctx.nvswitches
    for m in models:
        if m.min_driver is None:
            notes.warnings.append(
                f"the catalog has no verified minimum driver for {m.model}; the branch choice "
                "cannot be checked against it"
            )
    source = (
        catalog.source_for(facts.os.id, facts.os.version_id, facts.os.codename)
        if facts.os
        else None
    )
    if source is None:
        # One blocker, whatever the source: no setting makes an unknown OS release work.
        notes.blockers.append(
            f"{os_name(facts)} is not supported by gpuprov's driver role (its repositories "
            f"are not in the catalog); supported: {', '.join(catalog.supported_oses())}; fix: "
            "run one of those, or leave nvidia_driver out of gpuprov_roles for this host"
            + _unsupported_note(facts, catalog)
        )
        return None
    from_archive = policy["nvidia_driver_source"] == "distribution"
    flavour = _flavour(models, policy, notes, source if from_archive else None)
    if policy["nvidia_driver_branch"] is not None:
        _check_pinned_branch(
            facts.host,
            policy["nvidia_driver_branch"],
            policy["nvidia_driver_version"],
            models,
            notes,
            catalog,
        )
    choice = (
        _distribution_choice(facts, policy, models, catalog, notes, flavour, source)
        if from_archive
        else _cuda_choice(facts, policy, models, catalog, notes, source)
    )
    if choice is None:
        return None
    _branch_notes(facts, choice, catalog, notes, ctx.today)
    nvlink5 = plan_nvlink5(facts, models, choice.branch, policy["nvidia_driver_source"])
    imex = plan_imex(models, policy["nvidia_driver_imex_nodes"])
    if nvlink5 is not None:
        notes.warnings += nvlink5.warnings
        notes.blockers += nvlink5.blockers
    if imex is not None:
        notes.blockers += imex.blockers
    on_nvlink5 = nvlink5 is not None and nvlink5.planned
    # A multi-node tray's fabric is managed by its NVLink switch trays: no local fabric manager.
    fabric = imex is None and (nvswitches > 0 or on_nvlink5)
    loaded = facts.loaded_driver
    keep = (
        loaded is not None
        and branch_of(loaded.version) == choice.branch
        and loaded.flavour == flavour
        and choice.version in (None, loaded.version)
        and not _too_old(models, loaded.version)  # e.g. an early R550 release for an H200
    )
    version = loaded.version if keep and loaded else (choice.version or "")
    packages = _packages(
        facts, policy, choice.branch, flavour, fabric, notes, imex=imex is not None
    )
    kernel = kernel_notes(
        facts,
        target=version or str(choice.branch),
        change=not keep,
        prebuilt=bool(packages and packages.prebuilt),
    )
    notes.warnings += kernel.warnings
    notes.blockers += kernel.blockers
    return _DriverDecision(choice, flavour, keep, version, fabric, nvlink5, imex, packages)


def _cuda_choice(
    facts: HostFacts,
    policy: Policy,
    models: Sequence[GpuModel],
    catalog: Catalog,
    notes: Notes,
    source: DriverSource,
) -> _DriverChoice | None:
    """The branch and version from NVIDIA's CUDA repository."""
    if facts.arch and facts.arch not in CUDA_ARCH_DIRS:
        notes.blockers.append(
            f"CPU architecture {facts.arch}: NVIDIA's CUDA repository has directories for "
            f"{', '.join(CUDA_ARCH_DIRS)} only; fix: leave this host out (--limit)"
        )
        return None
    if source.cuda_repo is None:
        has_archive = source.any_distribution_branch or bool(source.distribution)
        fix = (
            "set nvidia_driver_source=distribution (its packaged driver) for this host"
            if has_archive
            else "leave nvidia_driver out of gpuprov_roles for this host"
        )
        notes.blockers.append(
            f"NVIDIA's CUDA repository has no path for {source.os_id} {source.os_version} in "
            f"the catalog; fix: {fix}"
        )
        return None
    if policy["nvidia_driver_branch"] is not None:
        choice = _DriverChoice(
            policy["nvidia_driver_branch"], policy["nvidia_driver_version"], "pinned branch"
        )
    elif policy["nvidia_driver_version"]:  # the version names its branch
        version_branch = branch_of(policy["nvidia_driver_version"])
        _check_pinned_branch(
            facts.host, version_branch, policy["nvidia_driver_version"], models, notes, catalog
        )
        choice = _DriverChoice(version_branch, policy["nvidia_driver_version"], "pinned version")
    else:
        found = _default_branch(models, catalog, notes)
        if found is None:
            return None
        choice = found
    if package_format(facts) == "rpm" and choice.branch >= DNF_RECORDED_BELOW:
        notes.blockers.append(
            f"R{choice.branch} on a dnf host: nothing recorded says what NVIDIA's rpm "
            f"repositories hold for branches >= {DNF_RECORDED_BELOW} (module streams and "
            "package names: tests/recorded/reference/packages.yaml records them up to 580), "
            "and the role would use 580-style names; fix: pin nvidia_driver_branch to 580 "
            "(LTSB) for this host until recorded data exists"
        )
        return None
    return choice


def _branch_notes(
    facts: HostFacts,
    choice: _DriverChoice,
    catalog: Catalog,
    notes: Notes,
    today: dt.date | None,
) -> None:
    branch_info = catalog.branch(choice.branch)
    if branch_info is None:
        notes.warnings.append(f"driver branch R{choice.branch} is not in the catalog")
    elif today is not None and branch_info.is_eol(today):
        notes.warnings.append(
            f"driver branch R{choice.branch} reached end of life in "
            f"{branch_info.eol:%B %Y}; fix: move to a supported LTSB branch"
        )
    if (
        facts.smi
        and facts.loaded_driver
        and facts.smi.driver_version != facts.loaded_driver.version
    ):
        notes.warnings.append(
            f"loaded module is {facts.loaded_driver.version} but NVML reports "
            f"{facts.smi.driver_version}: driver/library mismatch until a reboot"
        )


def _packages(
    facts: HostFacts,
    policy: Policy,
    branch: int,
    flavour: str,
    fabric: bool,
    notes: Notes,
    *,
    imex: bool = False,
) -> DriverPackages | None:
    """The role's package set for this host, for its CPU architecture (a blocker when none)."""
    if facts.os is None:
        return None
    try:
        return driver_packages(
            os_id=facts.os.id,
            version_id=facts.os.version_id,
            family=facts.os.family,
            kernel=facts.kernel,
            source=policy["nvidia_driver_source"],
            branch=branch,
            flavour=flavour,
            fabricmanager=fabric,
            architecture=facts.arch or "x86_64",
            imex=imex,  # GB200/GB300 trays: nvidia-imex at the driver's version
        )
    except PackagesUnavailable as exc:
        notes.blockers.append(
            f"{exc}; fix: choose another nvidia_driver_flavour, nvidia_driver_branch or "
            "nvidia_driver_source for this host (docs/support-matrix.md)"
        )
        return None


def _explain_driver(ctx: HostContext, decision: _DriverDecision) -> RolePlan:
    """The driver role's variables and one-line reason, from the decision."""
    facts, policy, notes = ctx.facts, ctx.policy, ctx.notes
    choice, flavour, version = decision.choice, decision.flavour, decision.version
    loaded = facts.loaded_driver
    if decision.keep and loaded:
        action = f"no change: {loaded.version} {flavour} already loaded"
    else:
        target = version or f"R{choice.branch}"
        action = f"install {target} {flavour} from {SOURCE_NAMES[policy['nvidia_driver_source']]}"
        action += f" ({choice.why})"
        if loaded is not None:
            newer = parse_version(version or f"{choice.branch}.999")
            verb = "upgrade" if newer > parse_version(loaded.version) else "replace"
            if newer < parse_version(loaded.version):
                verb = "downgrade"
                notes.warnings.append(f"driver downgrade from {loaded.version} to {target}")
            action = (
                f"{verb} {loaded.version} {loaded.flavour} -> {target} {flavour} "
                f"({choice.why}; from {SOURCE_NAMES[policy['nvidia_driver_source']]}), rolling: "
                "drained, GPU jobs waited for, clients stopped, driver + fabric manager + nscq in "
                "lockstep, re-validated, undrained; resumable (driver_upgrade)"
            )
            if policy["nvidia_driver_reboot"] == "forbid":
                notes.warnings.append(
                    "a loaded driver is replaced and nvidia_driver_reboot=forbid: if its modules "
                    "cannot be unloaded the host stays 'reboot required' (not ok)"
                )
        if facts.secure_boot:
            notes.warnings.append(
                "Secure Boot is on: modules built by DKMS must be signed with an enrolled key "
                "(prebuilt signed modules avoid this)"
            )
    _check_cuda(policy, version or str(choice.branch), ctx.catalog, notes)
    nvlink5, imex = decision.nvlink5, decision.imex
    if imex is not None:
        fabric_reason = imex.reason
    elif nvlink5 is not None:
        fabric_reason = nvlink5.reason
    else:
        fabric_reason = _fabric_reason(facts, ctx.nvswitches)
    if (
        decision.fabric
        and policy["nvidia_driver_source"] == "distribution"
        and facts.os
        and facts.os.id == "debian"
    ):
        notes.warnings.append(
            "Debian's archive has no fabric manager: nvidia-fabricmanager and libnvidia-nscq come "
            f"from NVIDIA's repository at exactly {version or f'the R{choice.branch} release'}"
        )
    driver = {
        "nvidia_driver_branch": str(choice.branch),
        "nvidia_driver_version": version,
        "nvidia_driver_flavour": flavour,
        "nvidia_driver_source": policy["nvidia_driver_source"],
        "nvidia_driver_fabricmanager": decision.fabric,
        "nvidia_driver_nvlink5": nvlink5 is not None and nvlink5.planned,
        # GB200/GB300 trays: nvidia_driver_imex (the node list stays the inventory's)
        "nvidia_driver_imex": imex is not None,
        "nvidia_driver_reboot": policy["nvidia_driver_reboot"],
        "nvidia_driver_persistenced": policy["nvidia_driver_persistenced"],
        "nvidia_driver_state_file": policy["nvidia_driver_state_file"],
    }
    packages = decision.packages
    return RolePlan(
        "nvidia_driver",
        driver,
        reason=f"{action}; {fabric_reason}",
        change=not decision.keep,
        packages=packages.to_dict() if packages else None,
        packages_line=packages.summary() if packages else "",
    )


def repository(
    facts: HostFacts,
    policy: Policy,
    catalog: Catalog,
    roles: Sequence[RolePlan],
    notes: Notes,
) -> str:
    """The plan header's repository: the package line's own (the role's rendered URL), so the
    two cannot disagree; the catalog's path where no package set was computed."""
    if "nvidia_driver" not in policy["gpuprov_roles"]:
        return ""
    driver = next((r for r in roles if r.name == "nvidia_driver"), None)
    url = str((driver.packages or {}).get("repository", "")) if driver else ""
    path = url.partition(CUDA_REPOS_URL)[2].strip("/") if CUDA_REPOS_URL in url else ""
    if path and facts.arch == "aarch64" and not path.endswith("/sbsa"):
        notes.warnings.append(
            f"NVIDIA's CUDA repository directory {path}: only sbsa is recorded for arm64 "
            "servers (tests/recorded/reference/packages.yaml cuda_apt.layout); this one is a "
            "lead (the nvidia_driver role's OS data names it)"
        )
    return path or cuda_repository(facts, policy, catalog)


def cuda_repository(facts: HostFacts, policy: Policy, catalog: Catalog) -> str:
    """The CUDA repository path the driver comes from, for the host's OS and CPU
    ("ubuntu2404/sbsa"); "" when the driver does not come from NVIDIA's repository."""
    source = (
        catalog.source_for(facts.os.id, facts.os.version_id, facts.os.codename)
        if facts.os
        else None
    )
    if policy["nvidia_driver_source"] != "cuda" or source is None or not source.cuda_repo:
        return ""
    return f"{source.cuda_repo}/{CUDA_ARCH_DIRS.get(facts.arch, 'x86_64')}"


def _unsupported_note(facts: HostFacts, catalog: Catalog) -> str:
    """Why an OS release NVIDIA does publish drivers for is still not planned (catalog
    `not_yet_supported`); "" for any other release."""
    pending = catalog.pending(facts.os.id, facts.os.version_id) if facts.os else None
    return f" ({pending.name}: {pending.reason})" if pending else ""


def _below(target: str, minimum: str) -> bool:
    """`target` (a full version, or a bare branch meaning any release of it) is too old."""
    if "." in target:
        return not version_at_least(target, minimum)
    return int(target) < branch_of(minimum)


def _check_cuda(policy: Policy, target: str, catalog: Catalog, notes: Notes) -> None:
    """The driver must run the CUDA version the workloads are built with (gpuprov_cuda_version)."""
    cuda = policy["gpuprov_cuda_version"]
    if cuda is None:
        return
    full = catalog.cuda_min_driver.get(cuda)
    floor = catalog.cuda_compat_min_driver.get(cuda.split(".", maxsplit=1)[0])
    shown = target if "." in target else f"R{target}"
    if full is None and floor is None:
        raise PolicyError(
            f"gpuprov_cuda_version={cuda} is not in the catalog's CUDA table",
            host=policy.host,
            fix="use a version listed under cuda_min_driver in orchestrator/catalog.yaml",
        )
    if floor is not None and _below(target, floor):
        notes.blockers.append(
            f"driver {shown} cannot run CUDA {cuda} applications "
            f"(CUDA {cuda.split('.', maxsplit=1)[0]}.x "
            f"needs >= {floor}); fix: pin a newer nvidia_driver_branch or source"
        )
    elif full is not None and _below(target, full):
        notes.warnings.append(
            f"driver {shown} is below CUDA {cuda}'s minimum {full}: CUDA {cuda} applications "
            "run through minor-version compatibility only"
        )
    elif full is not None and "." not in target and int(target) == branch_of(full):
        notes.warnings.append(
            f"CUDA {cuda} needs >= {full}: install at least that R{target} release"
        )


def _fabric_reason(facts: HostFacts, nvswitches: int) -> str:
    if nvswitches:
        return f"fabric manager: {nvswitches} NVSwitch devices on the PCI bus"
    states = {g.fabric_state for g in facts.smi_gpus if g.fabric_state}
    if states == {"Completed"}:
        return (
            "fabric manager: not needed, no NVSwitch on the PCI bus (GPUs report fabric "
            "state Completed: the fabric is managed outside this host, e.g. by the hypervisor)"
        )
    return "fabric manager: not needed, no NVSwitch on the PCI bus"


@dataclass(frozen=True)
class UpgradePlan:
    """A loaded driver replaced by the plan's (driver_upgrade's drain/lockstep path)."""

    from_version: str
    from_flavour: str
    to_version: str | None  # None: the newest of the branch
    to_branch: int
    to_flavour: str

    @classmethod
    def of(cls, driver: RolePlan | None, loaded: LoadedDriver | None) -> UpgradePlan | None:
        """The upgrade the planned `driver` makes of the `loaded` one (None: none loaded, or
        kept)."""
        if driver is None or not driver.change or loaded is None:
            return None
        v = driver.vars
        return cls(
            loaded.version,
            loaded.flavour,
            str(v["nvidia_driver_version"]) or None,
            int(str(v["nvidia_driver_branch"])),
            str(v["nvidia_driver_flavour"]),
        )


def summary(driver: RolePlan) -> str:
    """ "R580 open (no change) +FM": the driver role's plan in a table cell."""
    v = driver.vars
    text = f"R{v['nvidia_driver_branch']} {v['nvidia_driver_flavour']}"
    text += " (no change)" if not driver.change else ""
    return text + (" +FM" if v["nvidia_driver_fabricmanager"] else "")
