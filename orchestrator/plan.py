"""The planner: a pure function of a host's facts, its policy and the GPU catalog.

``plan_host`` returns the ordered roles to apply, each with its typed plan (the record of
orchestrator/roleplans.py the planner builds: its variables are what Ansible receives) and a
one-line reason, the host's validation plan, plus warnings (worth reading, not stopping) and
blockers (this host is not touched). ``HostPlan.typed`` gathers the records: the one typed
plan the plan document, the report and verify are made from.
Bad input that makes the whole run wrong (a pinned branch too old for a GPU, a MIG layout
that cannot fit) raises a BadInputError subclass instead, before any host is changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .catalog import (
    Catalog,
    DriverSource,
    GpuModel,
    branch_of,
    parse_version,
    version_at_least,
)
from .driver_packages import DriverPackages, PackagesUnavailable, driver_packages
from .errors import PolicyError
from .fabricplan import plan_fabric
from .facts import HostFacts, PciDevice
from .kernels import kernel_notes
from .nvlink5 import (
    ImexPlan,
    Nvlink5Plan,
    imex_nodes,
    package_format,
    plan_imex,
    plan_nvlink5,
)
from .policy import Policy
from .roleplans import (
    DcgmPlan,
    DockerPlan,
    DriverPlan,
    EfaPlan,
    InfinibandPlan,
    MigPlan,
    ToolkitPlan,
    TypedPlan,
    UpgradePlan,
    ValidationPlan,
)
from .roletable import default_roles
from .sanity import check_captures

SOURCE_NAMES = {"cuda": "NVIDIA's CUDA repository", "distribution": "the distribution's archive"}
# `uname -m` -> the CUDA repository's architecture directory (reference/packages.yaml: "arch
# dir x86_64 for amd64, sbsa for arm64 servers").
CUDA_ARCH_DIRS = {"x86_64": "x86_64", "aarch64": "sbsa"}
CUDA_REPOS_URL = "https://developer.download.nvidia.com/compute/cuda/repos/"
# OSes that Docker's own repository does not serve (tests/recorded/reference/packages.yaml
# docker_ce.rhel: only /linux/rhel, whose $releasever=2023 path is a 404 on Amazon Linux 2023),
# and whose own repositories carry docker (https://docs.aws.amazon.com/linux/al2023/ug/ecs.html:
# "AL2023 includes these packages [containerd, docker] in the core repositories").
NO_DOCKER_CE = {"amzn": "Amazon Linux"}
# RHEL and its rebuilds carry no Docker engine of their own (Docker's docs install it from
# download.docker.com/linux/rhel: tests/recorded/reference/packages.yaml docker_ce.rhel;
# `moby-engine` is Fedora's), so docker_source=distribution there is bad input.
NO_DISTRIBUTION_DOCKER = {"rhel": "RHEL", "rocky": "Rocky Linux", "almalinux": "AlmaLinux"}
# The newest branch whose rpm names and module streams are recorded (reference packages.yaml
# cuda_rpm.branches: lt_580 / ge_580 from 580's releases; gaps: "rhel9/rhel10 modules.yaml:
# stream list per branch (>=590)"). dnf hosts at or above this branch are blocked.
DNF_RECORDED_BELOW = 590


RoleInputs = DriverPlan | DockerPlan | ToolkitPlan | MigPlan | EfaPlan | InfinibandPlan | DcgmPlan
# DCGM 4 ships -cuda12 for these architectures even on 580 (CUDA 13): tests/recorded/reference/
# dcgm.yaml dcgm.compatibility.driver, "Volta/Pascal/Maxwell on 580 must use -cuda12".
DCGM_CUDA12_ARCHS = frozenset({"maxwell", "pascal", "volta"})


@dataclass(frozen=True)
class RolePlan:
    name: str
    vars: Mapping[str, object]  # `typed.role_vars()`: what Ansible receives
    reason: str  # one line: why this role, with these variables
    change: bool = True  # False: the host already matches; the role should report no change
    # nvidia_driver: the packages it installs and holds, and where from (driver_packages)
    packages: Mapping[str, object] | None = None
    packages_line: str = ""
    typed: RoleInputs | None = None  # the role's typed plan (None: built by hand, tests)

    @classmethod
    def of(
        cls,
        name: str,
        typed: RoleInputs,
        reason: str,
        *,
        change: bool = True,
        packages: Mapping[str, object] | None = None,
        packages_line: str = "",
    ) -> RolePlan:
        """The role `name` with the planner's typed plan; its variables are the plan's."""
        return cls(name, typed.role_vars(), reason, change, packages, packages_line, typed)


@dataclass(frozen=True)
class GpuGroup:
    """GPUs of one model on a host."""

    device_id: int
    count: int
    model: str  # catalog model name, or "unknown 10de:xxxx"
    sku: str | None  # None: not in the catalog


@dataclass(frozen=True)
class HostPlan:
    host: str
    simulated: bool
    gpus: tuple[GpuGroup, ...]
    nvswitches: int
    roles: tuple[RolePlan, ...]
    warnings: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()
    arch: str = ""  # the host's CPU architecture (`uname -m`), "" when unknown
    repository: str = ""  # NVIDIA's CUDA repository path for the driver, e.g. "ubuntu2404/sbsa"
    validation: ValidationPlan | None = None  # None: the knob table's defaults
    upgrade: UpgradePlan | None = None  # a loaded driver the plan replaces

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def gpu_summary(self) -> str:
        """ "2x H200 SXM 141GB (simulated)"; "no GPU" when none."""
        text = ", ".join(f"{g.count}x {g.model}" for g in self.gpus) or "no GPU"
        return f"{text} (simulated)" if self.simulated else text

    def role_vars(self) -> dict[str, object]:
        """Every role variable of the plan, plus `gpuprov_roles`: the host's inventory overlay."""
        out: dict[str, object] = {}
        for role in self.roles:
            out.update(role.vars)
        out["gpuprov_roles"] = [r.name for r in self.roles]
        return out

    @property
    def typed(self) -> TypedPlan:
        """The planner's typed plan of this host: its roles' records, as built (not read back
        from their variables), the validation plan and the upgrade."""
        parts = {r.name: r.typed for r in self.roles}
        driver, docker = parts.get("nvidia_driver"), parts.get("docker")
        toolkit, mig_plan = parts.get("nvidia_container_toolkit"), parts.get("mig")
        efa, infiniband = parts.get("efa"), parts.get("infiniband")
        dcgm = parts.get("dcgm")
        return TypedPlan(
            host=self.host,
            roles=tuple(r.name for r in self.roles),
            validation=self.validation or ValidationPlan.default(self.host),
            driver=driver if isinstance(driver, DriverPlan) else None,
            docker=docker if isinstance(docker, DockerPlan) else None,
            toolkit=toolkit if isinstance(toolkit, ToolkitPlan) else None,
            mig=mig_plan if isinstance(mig_plan, MigPlan) else None,
            upgrade=self.upgrade,
            efa=efa if isinstance(efa, EfaPlan) else None,
            infiniband=infiniband if isinstance(infiniband, InfinibandPlan) else None,
            dcgm=dcgm if isinstance(dcgm, DcgmPlan) else None,
        )


@dataclass
class _Notes:
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _DriverChoice:
    branch: int
    version: str | None  # exact version when known (pinned, distribution, already loaded)
    why: str


def _gpu_groups(gpus: Sequence[PciDevice], catalog: Catalog) -> tuple[GpuGroup, ...]:
    counts: dict[int, int] = {}
    for gpu in gpus:
        counts[gpu.device_id] = counts.get(gpu.device_id, 0) + 1
    groups = []
    for device_id, count in counts.items():
        model = catalog.gpu(device_id)
        groups.append(
            GpuGroup(
                device_id=device_id,
                count=count,
                model=model.model if model else f"unknown 10de:{device_id:04x}",
                sku=model.sku if model else None,
            )
        )
    return tuple(groups)


def _nvswitch_count(facts: HostFacts, catalog: Catalog, notes: _Notes, gpus: int) -> int:
    endpoints, per_board = facts.nvswitch_board(catalog)
    if endpoints and gpus == 8 and endpoints != per_board:
        notes.warnings.append(
            f"{endpoints} NVSwitch devices on the PCI bus; an 8-GPU board of this generation "
            f"has {per_board}: check the board (a missing switch lowers NVLink bandwidth)"
        )
    return endpoints


def _flavour(
    models: Sequence[GpuModel], policy: Policy, notes: _Notes, source: DriverSource | None
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
    if policy.driver_flavour == "open" and no_open:
        notes.blockers.append(
            f"nvidia_driver_flavour=open but {', '.join(no_open)} support only the proprietary "
            "modules; fix: set nvidia_driver_flavour to auto or proprietary for this host"
        )
    if policy.driver_flavour == "proprietary" and needs_open:
        notes.blockers.append(
            f"nvidia_driver_flavour=proprietary but {', '.join(needs_open)} require the open "
            "modules; fix: set nvidia_driver_flavour to auto or open for this host"
        )
    if policy.driver_flavour != "auto":
        return policy.driver_flavour
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
    notes: _Notes,
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
    models: Sequence[GpuModel], catalog: Catalog, notes: _Notes
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
    notes: _Notes,
    flavour: str,
    source: DriverSource | None,
) -> _DriverChoice | None:
    os_name = f"{source.os_id} {source.os_version}" if source else _os_name(facts)
    if source is None or (not source.any_distribution_branch and not source.distribution):
        fix = (
            f"set nvidia_driver_source=cuda (NVIDIA's {source.cuda_repo} repository) for this host"
            if source and source.cuda_repo
            else "leave nvidia_driver out of gpuprov_roles for this host"
        )
        notes.blockers.append(f"the catalog knows no distribution driver for {os_name}; fix: {fix}")
        return None
    if source.any_distribution_branch:
        if policy.driver_branch is not None:
            return _DriverChoice(policy.driver_branch, policy.driver_version, "pinned branch")
        return _default_branch(models, catalog, notes)
    branches = {d.branch for d in source.distribution}
    if policy.driver_branch is not None and policy.driver_branch not in branches:
        notes.blockers.append(
            f"nvidia_driver_branch={policy.driver_branch} is not in {os_name}'s archive (it has "
            f"{', '.join(d.version for d in source.distribution)}); fix: pin one of those, or "
            "set nvidia_driver_source=cuda"
        )
        return None
    branch = policy.driver_branch or source.distribution[-1].branch
    # The archive's releases of that branch with this flavour, newest last.
    offers = sorted(
        (d for d in source.distribution if d.branch == branch and flavour in d.flavours),
        key=lambda d: parse_version(d.version),
    )
    listed = ", ".join(f"{d.version} ({'/'.join(d.flavours)})" for d in source.distribution)
    if policy.driver_version:
        offers = [d for d in offers if d.version == policy.driver_version]
    if not offers:
        wanted = policy.driver_version or f"R{branch}"
        notes.blockers.append(
            f"{os_name}'s archive has no {flavour} driver {wanted} (it has {listed}); fix: pin "
            "one of those versions and flavours, or set nvidia_driver_source=cuda"
        )
        return None
    offer = offers[-1]
    old = _too_old(models, offer.version)
    if old:
        needs = ", ".join(f"{m.model} needs >= {m.min_driver}" for m in old)
        notes.blockers.append(
            f"{os_name}'s archive has driver {offer.version}, too old: {needs}; fix: set "
            "nvidia_driver_source=cuda (NVIDIA's repository) for this host"
        )
        return None
    return _DriverChoice(offer.branch, offer.version, f"{os_name}'s packaged driver")


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


def _choose_driver(
    facts: HostFacts,
    policy: Policy,
    models: Sequence[GpuModel],
    nvswitches: int,
    catalog: Catalog,
    notes: _Notes,
    today: dt.date | None,
    imex_nodes: Sequence[str],
) -> _DriverDecision | None:
    """Branch, version, flavour, fabric services and packages of the driver role; None (with a
    blocker in `notes`) when no driver can be planned."""
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
            f"{_os_name(facts)} is not supported by gpuprov's driver role (its repositories "
            f"are not in the catalog); supported: {', '.join(catalog.supported_oses())}; fix: "
            "run one of those, or leave nvidia_driver out of gpuprov_roles for this host"
            + _unsupported_note(facts, catalog)
        )
        return None
    from_archive = policy.driver_source == "distribution"
    flavour = _flavour(models, policy, notes, source if from_archive else None)
    if policy.driver_branch is not None:
        _check_pinned_branch(
            facts.host, policy.driver_branch, policy.driver_version, models, notes, catalog
        )
    choice = (
        _distribution_choice(facts, policy, models, catalog, notes, flavour, source)
        if from_archive
        else _cuda_choice(facts, policy, models, catalog, notes, source)
    )
    if choice is None:
        return None
    _branch_notes(facts, choice, catalog, notes, today)
    nvlink5 = plan_nvlink5(facts, models, choice.branch, policy.driver_source)
    imex = plan_imex(models, imex_nodes)
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
    notes: _Notes,
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
    if policy.driver_branch is not None:
        choice = _DriverChoice(policy.driver_branch, policy.driver_version, "pinned branch")
    elif policy.driver_version:  # the version names its branch
        version_branch = branch_of(policy.driver_version)
        _check_pinned_branch(
            facts.host, version_branch, policy.driver_version, models, notes, catalog
        )
        choice = _DriverChoice(version_branch, policy.driver_version, "pinned version")
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
    notes: _Notes,
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
    notes: _Notes,
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
            source=policy.driver_source,
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


def _explain_driver(
    facts: HostFacts,
    policy: Policy,
    decision: _DriverDecision,
    nvswitches: int,
    catalog: Catalog,
    notes: _Notes,
) -> RolePlan:
    """The driver role's typed plan, variables and one-line reason, from the decision."""
    choice, flavour, version = decision.choice, decision.flavour, decision.version
    loaded = facts.loaded_driver
    if decision.keep and loaded:
        action = f"no change: {loaded.version} {flavour} already loaded"
    else:
        target = version or f"R{choice.branch}"
        action = f"install {target} {flavour} from {SOURCE_NAMES[policy.driver_source]}"
        action += f" ({choice.why})"
        if loaded is not None:
            newer = parse_version(version or f"{choice.branch}.999")
            verb = "upgrade" if newer > parse_version(loaded.version) else "replace"
            if newer < parse_version(loaded.version):
                verb = "downgrade"
                notes.warnings.append(f"driver downgrade from {loaded.version} to {target}")
            action = (
                f"{verb} {loaded.version} {loaded.flavour} -> {target} {flavour} "
                f"({choice.why}; from {SOURCE_NAMES[policy.driver_source]}), rolling: drained, "
                "GPU jobs waited for, clients stopped, driver + fabric manager + nscq in "
                "lockstep, re-validated, undrained; resumable (driver_upgrade)"
            )
            if policy.driver_reboot == "forbid":
                notes.warnings.append(
                    "a loaded driver is replaced and nvidia_driver_reboot=forbid: if its modules "
                    "cannot be unloaded the host stays 'reboot required' (not ok)"
                )
        if facts.secure_boot:
            notes.warnings.append(
                "Secure Boot is on: modules built by DKMS must be signed with an enrolled key "
                "(prebuilt signed modules avoid this)"
            )
    _check_cuda(policy, version or str(choice.branch), catalog, notes)
    nvlink5, imex = decision.nvlink5, decision.imex
    if imex is not None:
        fabric_reason = imex.reason
    elif nvlink5 is not None:
        fabric_reason = nvlink5.reason
    else:
        fabric_reason = _fabric_reason(facts, nvswitches)
    if (
        decision.fabric
        and policy.driver_source == "distribution"
        and facts.os
        and facts.os.id == "debian"
    ):
        notes.warnings.append(
            "Debian's archive has no fabric manager: nvidia-fabricmanager and libnvidia-nscq come "
            f"from NVIDIA's repository at exactly {version or f'the R{choice.branch} release'}"
        )
    driver = DriverPlan(
        branch=choice.branch,
        version=version or None,
        flavour=flavour,
        source=policy.driver_source,
        fabricmanager=decision.fabric,
        reboot=policy.driver_reboot,
        persistenced=policy.driver_persistenced,
        state_file=policy.driver_state_file,
        change=not decision.keep,
        nvlink5=nvlink5 is not None and nvlink5.planned,
        # GB200/GB300 trays: nvidia_driver_imex (the node list stays the inventory's)
        imex=imex is not None,
    )
    packages = decision.packages
    role_vars = dict(driver.role_vars())
    return RolePlan(
        "nvidia_driver",
        role_vars,
        reason=f"{action}; {fabric_reason}",
        change=not decision.keep,
        packages=packages.to_dict() if packages else None,
        packages_line=packages.summary() if packages else "",
        typed=driver,
    )


def _repository(
    facts: HostFacts,
    policy: Policy,
    catalog: Catalog,
    roles: Sequence[RolePlan],
    notes: _Notes,
) -> str:
    """The plan header's repository: the package line's own (the role's rendered URL), so the
    two cannot disagree; the catalog's path where no package set was computed."""
    if "nvidia_driver" not in policy.roles:
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
    if policy.driver_source != "cuda" or source is None or not source.cuda_repo:
        return ""
    return f"{source.cuda_repo}/{CUDA_ARCH_DIRS.get(facts.arch, 'x86_64')}"


def _unsupported_note(facts: HostFacts, catalog: Catalog) -> str:
    """Why an OS release NVIDIA does publish drivers for is still not planned (catalog
    `not_yet_supported`); "" for any other release."""
    pending = catalog.pending(facts.os.id, facts.os.version_id) if facts.os else None
    return f" ({pending.name}: {pending.reason})" if pending else ""


def _os_name(facts: HostFacts) -> str:
    """ "Ubuntu 20.04.6 LTS (ubuntu 20.04)": what os-release calls it, and its id/version."""
    if facts.os is None:
        return "an unknown OS (no os-release)"
    return f"{facts.os.pretty_name} ({facts.os.id} {facts.os.version_id or facts.os.codename})"


def _below(target: str, minimum: str) -> bool:
    """`target` (a full version, or a bare branch meaning any release of it) is too old."""
    if "." in target:
        return not version_at_least(target, minimum)
    return int(target) < branch_of(minimum)


def _check_cuda(policy: Policy, target: str, catalog: Catalog, notes: _Notes) -> None:
    """The driver must run the CUDA version the workloads are built with (gpuprov_cuda_version)."""
    cuda = policy.cuda_version
    if cuda is None:
        return
    full = catalog.cuda_min_driver.get(cuda)
    floor = catalog.cuda_compat_min_driver.get(cuda.split(".")[0])
    shown = target if "." in target else f"R{target}"
    if full is None and floor is None:
        raise PolicyError(
            f"gpuprov_cuda_version={cuda} is not in the catalog's CUDA table",
            host=policy.host,
            fix="use a version listed under cuda_min_driver in orchestrator/catalog.yaml",
        )
    if floor is not None and _below(target, floor):
        notes.blockers.append(
            f"driver {shown} cannot run CUDA {cuda} applications (CUDA {cuda.split('.')[0]}.x "
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


def _runtime_roles(facts: HostFacts, policy: Policy, notes: _Notes) -> list[RolePlan]:
    roles: list[RolePlan] = []
    docker = facts.runtime.docker_version
    if "docker" in policy.roles:
        docker_source = policy.docker_source
        distro = NO_DOCKER_CE.get(facts.os.id) if facts.os else None
        if distro and docker_source == "docker":
            notes.warnings.append(
                f"Docker's repository has no {distro} path: Docker from {distro}'s own "
                "repository (docker_source=distribution)"
            )
            docker_source = "distribution"
        refused = NO_DISTRIBUTION_DOCKER.get(facts.os.id) if facts.os else None
        if refused and docker_source == "distribution":
            raise PolicyError(
                f"docker_source=distribution on {refused} ({_os_name(facts)}): {refused} ships "
                "no Docker engine (moby-engine is Fedora's); Docker comes from Docker's "
                "repository (download.docker.com/linux/rhel)",
                host=facts.host,
                fix="set docker_source to docker for this host",
            )
        source = "Docker's repository" if docker_source == "docker" else "the distribution"
        installed = _docker_package_source(facts.packages)
        if installed and installed != docker_source:
            package = "docker.io" if "docker.io" in facts.packages else "docker"
            other = f"the distribution's {package}" if installed == "distribution" else "Docker CE"
            notes.warnings.append(
                f"{other} is installed but docker_source={docker_source}: the role "
                "switches packages (containers stop); set docker_source to keep what is there"
            )
        reason = (
            f"Docker {docker} present: the role converges its packages and daemon.json"
            if docker
            else f"install Docker from {source}"
        )
        roles.append(RolePlan.of("docker", DockerPlan(docker_source), reason))
    elif docker is None and "nvidia_container_toolkit" in policy.roles:
        notes.warnings.append(
            "nvidia_container_toolkit is planned without docker and no Docker is installed: "
            "the toolkit has no runtime to configure"
        )
    if "nvidia_container_toolkit" in policy.roles:
        tk = facts.runtime.toolkit_version
        wanted = policy.toolkit_version or ""
        if tk and (not wanted or wanted in tk):
            reason = f"toolkit {tk} present: the role checks the runtime and the CDI spec"
        else:
            reason = f"install nvidia-container-toolkit {wanted or '(newest, then held)'}"
            reason += " and configure the Docker runtime and a CDI spec"
        toolkit = ToolkitPlan(
            version=wanted or None,
            default_runtime=policy.toolkit_default_runtime,
            cdi_spec=policy.toolkit_cdi_spec,
        )
        roles.append(RolePlan.of("nvidia_container_toolkit", toolkit, reason))
    elif policy.toolkit_default_runtime:
        notes.blockers.append(
            "nvidia_container_toolkit_default_runtime=true but nvidia_container_toolkit is not "
            "in gpuprov_roles; fix: add the role, or set the default runtime to false"
        )
    return roles


def _docker_package_source(packages: Mapping[str, str]) -> str | None:
    """Which source the installed Docker came from, by package name (None: none installed)."""
    if "docker-ce" in packages:
        return "docker"
    if "docker.io" in packages or "docker" in packages:  # Debian/Ubuntu, Amazon Linux
        return "distribution"
    return None


def _mig_role(
    facts: HostFacts, policy: Policy, models: Sequence[GpuModel | None], notes: _Notes
) -> RolePlan | None:
    if policy.mig_layout is None:
        if "mig" in policy.roles:
            notes.warnings.append("mig is in gpuprov_roles but mig_layout is empty: MIG left as is")
        return None
    # Imported here: the MIG layout engine is only needed when a layout is asked for.
    from . import mig

    gpus = [
        mig.gpu_from_catalog(index, model, model.device_ids[0])
        for index, model in enumerate(models)
        if model is not None  # an unknown GPU already blocks the host
    ]
    # parsed and checked once; the typed plan carries it (an empty mapping: only "disabled")
    mig_plan = MigPlan.parse(policy.mig_layout, policy.mig_configs, facts.host)
    layouts = mig.validate_layout(facts.host, mig_plan.parsed, policy.mig_layout, gpus)
    notes.blockers.extend(
        c.removeprefix(f"{facts.host}: ")
        for c in mig.conflicts(facts.host, layouts, needs_multi_gpu_nccl=policy.validation_nccl)
    )
    enabled = sum(1 for g in layouts if g.mig_enabled)
    current = {g.mig_mode_current for g in facts.smi_gpus}
    if policy.mig_layout == mig.LAYOUT_DISABLED:
        reason = (
            "layout disabled: MIG already off"
            if current <= {"Disabled", None}
            else "layout disabled: tear MIG down"
        )
    else:
        reason = f"layout {policy.mig_layout}: MIG on {enabled} of {len(gpus)} GPUs"
    return RolePlan.of("mig", mig_plan, reason)


def _dcgm_role(
    facts: HostFacts,
    policy: Policy,
    known: Sequence[GpuModel],
    driver: DriverPlan | None,
    catalog: Catalog,
    notes: _Notes,
) -> RolePlan | None:
    """DCGM 4 (opt-in: `dcgm` in gpuprov_roles), its -cuda<N> flavour from the driver."""
    if "dcgm" not in policy.roles:
        return None
    loaded = facts.loaded_driver
    branch = driver.branch if driver else (branch_of(loaded.version) if loaded else None)
    if policy.dcgm_cuda_major is not None:
        major, why = int(policy.dcgm_cuda_major), f"dcgm_cuda_major={policy.dcgm_cuda_major}"
    elif branch is None:
        notes.blockers.append(
            "dcgm is in gpuprov_roles but no driver is planned or loaded to choose DCGM's CUDA "
            "flavour from; fix: add nvidia_driver to gpuprov_roles, or set dcgm_cuda_major"
        )
        return None
    else:
        # the highest CUDA major whose minor-version compatibility floor the branch reaches
        majors = [
            int(m)
            for m, floor in catalog.cuda_compat_min_driver.items()
            if branch >= int(str(floor).split(".")[0])
        ]
        major = max(majors, default=0)
        why = f"R{branch} runs CUDA {major}"
        old = sorted({m.arch for m in known} & DCGM_CUDA12_ARCHS)
        if major > 12 and old:
            major, why = 12, f"{'/'.join(old)} GPUs take DCGM's CUDA 12 flavour on R{branch}"
    exporter = (
        f"; exporter ({policy.dcgm_exporter}) on port {policy.dcgm_exporter_port}"
        if policy.dcgm_exporter != "none"
        else ""
    )
    reason = (
        f"DCGM 4 {policy.dcgm_version or '(newest, then held)'} with -cuda{major}: {why}" + exporter
    )
    plan = DcgmPlan(policy.dcgm_version, major, policy.dcgm_exporter, policy.dcgm_exporter_port)
    return RolePlan.of("dcgm", plan, reason)


def plan_host(
    facts: HostFacts,
    policy: Policy,
    catalog: Catalog,
    *,
    today: dt.date | None = None,
    imex_nodes_value: object = None,
) -> HostPlan:
    """Plan one host. `today` enables end-of-life warnings (None keeps the plan date-free).
    `imex_nodes_value`: the host's `nvidia_driver_imex_nodes` as the inventory gives it (the
    GB200/GB300 trays' IMEX node list; bad values are bad input)."""
    notes = _Notes()
    nodes = imex_nodes(facts.host, imex_nodes_value)
    gpus = sorted(facts.gpus, key=lambda d: d.address)
    models = [catalog.gpu(d.device_id) for d in gpus]
    for dev, model in zip(gpus, models, strict=True):
        if model is None:
            notes.blockers.append(
                f"unknown GPU: PCI device 10de:{dev.device_id:04x} at {dev.address} is not in "
                "the catalog; fix: add it to orchestrator/catalog.yaml from a trusted source, "
                "or leave this host out (--limit)"
            )
    pci_errors = [e for e in facts.errors if e.startswith("sysfs-pci-devices.txt")]
    if not gpus and pci_errors:  # the capture is broken, not the host: say what is broken
        notes.blockers.append(
            f"PCI devices unknown: {pci_errors[0]}; fix: re-run `provision detect` (with "
            "--save DIR, check DIR/<host>/sysfs-pci-devices.txt), or repair the saved file"
        )
    elif not gpus:
        notes.blockers.append(
            "no NVIDIA GPU on the PCI bus; fix: check the host (passthrough, BIOS) or leave "
            "it out of gpu_nodes"
        )
    known = [m for m in models if m is not None]
    nvswitches = _nvswitch_count(facts, catalog, notes, len(gpus))
    roles: list[RolePlan] = []
    if "nvidia_driver" in policy.roles and known:
        decision = _choose_driver(facts, policy, known, nvswitches, catalog, notes, today, nodes)
        if decision is not None:
            roles.append(_explain_driver(facts, policy, decision, nvswitches, catalog, notes))
    roles.extend(_runtime_roles(facts, policy, notes))
    mig_role = _mig_role(facts, policy, models, notes)
    if mig_role:
        roles.append(mig_role)
    driver_plan = next((r.typed for r in roles if isinstance(r.typed, DriverPlan)), None)
    for name, typed, reason in plan_fabric(facts, policy, driver_plan, notes.warnings):
        roles.append(RolePlan.of(name, typed, reason))  # orchestrator/fabricplan.py
    dcgm_role = _dcgm_role(facts, policy, known, driver_plan, catalog, notes)
    if dcgm_role:
        roles.append(dcgm_role)
    notes.warnings.extend(f"detection: {e}" for e in facts.errors)
    check_captures(facts, catalog, notes.warnings, notes.blockers)  # orchestrator/sanity.py
    if facts.simulated:
        notes.warnings.append("simulated host: GPU facts come from the lab's GPU simulator")
    roles.sort(key=lambda r: default_roles().position(r.name))
    driver = next((r.typed for r in roles if isinstance(r.typed, DriverPlan)), None)
    repository = _repository(facts, policy, catalog, roles, notes)
    return HostPlan(
        host=facts.host,
        simulated=facts.simulated,
        gpus=_gpu_groups(gpus, catalog),
        nvswitches=nvswitches,
        roles=tuple(roles),
        warnings=tuple(dict.fromkeys(notes.warnings)),
        blockers=tuple(notes.blockers),
        arch=facts.arch,
        repository=repository,
        validation=ValidationPlan(
            nccl=policy.validation_nccl,
            expected_gpus=policy.validation_expected_gpus,
            runtime=policy.validation_runtime,
            cuda_version=policy.cuda_version,
        ),
        upgrade=UpgradePlan.of(driver, facts.loaded_driver),
    )


def plan_fleet(
    facts: Mapping[str, HostFacts],
    policies: Mapping[str, Policy],
    catalog: Catalog,
    *,
    today: dt.date | None = None,
    imex_nodes: Mapping[str, object] | None = None,
) -> dict[str, HostPlan]:
    """Plan every host; bad input anywhere raises before any plan is returned. `imex_nodes`:
    per host, its inventory's `nvidia_driver_imex_nodes`."""
    return {
        host: plan_host(
            facts[host],
            policies[host],
            catalog,
            today=today,
            imex_nodes_value=(imex_nodes or {}).get(host),
        )
        for host in sorted(facts)
    }
