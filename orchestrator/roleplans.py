"""A typed plan per role: what the report shows, what verify expects, what Ansible receives.

The planner (orchestrator/plan.py) builds these records itself: one frozen record per role
(driver, docker, toolkit, MIG) plus the host's validation plan and, when a loaded driver is
replaced, its upgrade, gathered as ``HostPlan.typed`` (a :class:`TypedPlan`). Each role's
variables (``RolePlan.vars``, what Ansible receives) are the record's :meth:`role_vars`; the
report reads the records' fields, never those strings. The plan document
(orchestrator/plandoc.py) is :meth:`TypedPlan.document_vars`; :meth:`TypedPlan.from_vars`
reads it back as the roles read it (orchestrator/knobs.py, with the planner's rules of
orchestrator/policy.py), where the document
crosses a process boundary (verify's suite, on its side): the two round-trip. The MIG layouts
are parsed and checked once (:meth:`MigPlan.parse`, orchestrator/mig.py) and carried as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import mig
from .knobs import KnobTable, default_table
from .policy import bad_policy, decide

if TYPE_CHECKING:  # the suite imports this module on hosts that need none of these
    from .facts import LoadedDriver


@dataclass(frozen=True)
class DriverPlan:
    branch: int
    version: str | None  # exact upstream version; None: the newest of the branch
    flavour: str  # open | proprietary
    source: str  # cuda | distribution
    fabricmanager: bool
    reboot: str  # allow | forbid
    persistenced: bool
    state_file: str  # the role's record of what it installed and held
    change: bool = True  # False: the loaded driver already is the plan
    nvlink5: bool = False  # NVLink5 switch trays: the subnet manager before the fabric manager
    imex: bool = False  # GB200/GB300 compute trays: nvidia-imex, no local fabric manager

    def role_vars(self) -> dict[str, object]:
        return {
            "nvidia_driver_branch": str(self.branch),
            "nvidia_driver_version": self.version or "",
            "nvidia_driver_flavour": self.flavour,
            "nvidia_driver_source": self.source,
            "nvidia_driver_fabricmanager": self.fabricmanager,
            **({"nvidia_driver_nvlink5": True} if self.nvlink5 else {}),
            **({"nvidia_driver_imex": True} if self.imex else {}),
            "nvidia_driver_reboot": self.reboot,
            "nvidia_driver_persistenced": self.persistenced,
            "nvidia_driver_state_file": self.state_file,
        }

    @property
    def summary(self) -> str:
        """ "R580 open (no change) +FM" """
        text = f"R{self.branch} {self.flavour}"
        text += " (no change)" if not self.change else ""
        return text + (" +FM" if self.fabricmanager else "")


@dataclass(frozen=True)
class UpgradePlan:
    """A loaded driver replaced by the plan's (driver_upgrade's drain/lockstep path)."""

    from_version: str
    from_flavour: str
    to_version: str | None  # None: the newest of the branch
    to_branch: int
    to_flavour: str

    @classmethod
    def of(cls, driver: DriverPlan | None, loaded: LoadedDriver | None) -> UpgradePlan | None:
        """The upgrade `driver` makes of the `loaded` one (None: none loaded, or kept)."""
        if driver is None or not driver.change or loaded is None:
            return None
        return cls(loaded.version, loaded.flavour, driver.version, driver.branch, driver.flavour)


@dataclass(frozen=True)
class DockerPlan:
    source: str  # docker | distribution

    def role_vars(self) -> dict[str, object]:
        return {"docker_source": self.source}


@dataclass(frozen=True)
class ToolkitPlan:
    version: str | None  # None: the newest, then held
    default_runtime: bool
    cdi_spec: str

    def role_vars(self) -> dict[str, object]:
        return {
            "nvidia_container_toolkit_version": self.version or "",
            "nvidia_container_toolkit_default_runtime": self.default_runtime,
            "nvidia_container_toolkit_cdi_spec": self.cdi_spec,
        }


@dataclass(frozen=True)
class DcgmPlan:
    version: str | None  # None: the newest DCGM 4, then held
    cuda_major: int  # the -cuda<N> flavour: the CUDA major the driver supports
    exporter: str  # none | host | container
    exporter_port: int

    def role_vars(self) -> dict[str, object]:
        return {
            "dcgm_version": self.version or "",
            "dcgm_cuda_major": str(self.cuda_major),
            "dcgm_exporter": self.exporter,
            "dcgm_exporter_port": self.exporter_port,
        }


@dataclass(frozen=True)
class MigPlan:
    layout: str  # a name of `configs`, or "disabled"
    configs: Mapping[str, Any]  # mig_configs as written (the role receives it)
    parsed: mig.MigConfig  # the same, parsed and checked once

    def role_vars(self) -> dict[str, object]:
        return {"mig_layout": self.layout, "mig_configs": dict(self.configs)}

    def document(self) -> dict[str, object]:
        """The mig-parted v1 document of these layouts (the applier's input)."""
        return _mig_document(self.configs)

    @classmethod
    def parse(cls, layout: str, configs: Mapping[str, Any], host: str | None) -> MigPlan:
        """Parse and check the layouts once (MigLayoutError: bad input)."""
        return cls(layout, dict(configs), mig.parse_config(_mig_document(configs), host=host))


def _mig_document(configs: Mapping[str, Any]) -> dict[str, object]:
    # `disabled` needs no definition (orchestrator.mig); a mig-parted document needs one.
    body = dict(configs) or {mig.LAYOUT_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    return {"version": "v1", "mig-configs": body}


@dataclass(frozen=True)
class EfaPlan:
    """The efa role's plan (orchestrator/fabricplan.py decides it)."""

    version: str  # the EFA installer version
    gpudirect: str  # dmabuf | peermem | none

    def role_vars(self) -> dict[str, object]:
        return {"efa_installer_version": self.version, "efa_gpudirect": self.gpudirect}


@dataclass(frozen=True)
class InfinibandPlan:
    """The infiniband role's plan (orchestrator/fabricplan.py decides it)."""

    stack: str  # distribution | doca
    gpudirect: str  # dmabuf | peermem

    def role_vars(self) -> dict[str, object]:
        return {"infiniband_stack": self.stack, "infiniband_gpudirect": self.gpudirect}


@dataclass(frozen=True)
class ValidationPlan:
    nccl: bool  # the multi-GPU NCCL all_reduce check is required
    expected_gpus: int | None  # None: every GPU on the PCI bus
    runtime: str  # auto | docker | host
    cuda_version: str | None

    @classmethod
    def default(cls, host: str = "") -> ValidationPlan:
        """The knob table's defaults (a plan built without a policy)."""
        return TypedPlan.from_vars(host, {"gpuprov_roles": []}).validation

    def document_vars(self) -> dict[str, object]:
        return {
            "gpuprov_validation_nccl": self.nccl,
            "gpuprov_validation_expected_gpus": self.expected_gpus or 0,
            "gpuprov_validation_runtime": self.runtime,
            "gpuprov_cuda_version": self.cuda_version or "",
        }


@dataclass(frozen=True)
class TypedPlan:
    host: str
    roles: tuple[str, ...]
    validation: ValidationPlan
    driver: DriverPlan | None = None
    docker: DockerPlan | None = None
    toolkit: ToolkitPlan | None = None
    mig: MigPlan | None = None
    upgrade: UpgradePlan | None = None
    efa: EfaPlan | None = None
    infiniband: InfinibandPlan | None = None
    dcgm: DcgmPlan | None = None

    def role_vars(self) -> dict[str, object]:
        """What the roles receive: each role's variables, plus `gpuprov_roles`."""
        out: dict[str, object] = {}
        parts = (self.driver, self.docker, self.toolkit, self.mig, self.efa)
        for part in (*parts, self.infiniband, self.dcgm):
            if part is not None:
                out.update(part.role_vars())
        out["gpuprov_roles"] = list(self.roles)
        return out

    def document_vars(self) -> dict[str, object]:
        """The host's entry of the plan document: role variables and the validation plan."""
        return {**self.role_vars(), **self.validation.document_vars()}

    @classmethod
    def from_vars(
        cls,
        host: str,
        variables: Mapping[str, Any],
        *,
        change: bool = True,
        table: KnobTable | None = None,
    ) -> TypedPlan:
        """Read a host's plan variables (a plan document entry, over inventory variables);
        what they leave unset is the table's default. PolicyError when one is wrong."""
        v, problems = decide(table or default_table(), variables, planner=False)
        if "nvidia_driver" in v["gpuprov_roles"] and v["nvidia_driver_branch"] is None:
            problems.append('nvidia_driver_branch="" in the plan is not a branch number')
        if problems:
            raise bad_policy(host, problems)
        roles = v["gpuprov_roles"]
        driver = docker = toolkit = mig_plan = None
        if "nvidia_driver" in roles:
            driver = DriverPlan(
                branch=v["nvidia_driver_branch"],
                version=v["nvidia_driver_version"],
                flavour=v["nvidia_driver_flavour"],
                source=v["nvidia_driver_source"],
                fabricmanager=v["nvidia_driver_fabricmanager"],
                reboot=v["nvidia_driver_reboot"],
                persistenced=v["nvidia_driver_persistenced"],
                state_file=v["nvidia_driver_state_file"],
                change=change,
                nvlink5=v["nvidia_driver_nvlink5"],
                imex=v["nvidia_driver_imex"],
            )
        if "docker" in roles:
            docker = DockerPlan(v["docker_source"])
        if "nvidia_container_toolkit" in roles:
            toolkit = ToolkitPlan(
                version=v["nvidia_container_toolkit_version"],
                default_runtime=v["nvidia_container_toolkit_default_runtime"],
                cdi_spec=v["nvidia_container_toolkit_cdi_spec"],
            )
        if "mig" in roles:
            layout = v["mig_layout"] or mig.LAYOUT_DISABLED
            mig_plan = MigPlan.parse(layout, v["mig_configs"], host)
        efa = None
        if "efa" in roles:
            efa = EfaPlan(v["efa_installer_version"], v["efa_gpudirect"])
        infiniband = None
        if "infiniband" in roles:
            infiniband = InfinibandPlan(v["infiniband_stack"], v["infiniband_gpudirect"])
        dcgm = None
        if "dcgm" in roles:
            major = str(v["dcgm_cuda_major"] or "").strip()
            dcgm = DcgmPlan(
                version=v["dcgm_version"] or None,
                cuda_major=int(major) if major.isdigit() else 0,
                exporter=v["dcgm_exporter"],
                exporter_port=v["dcgm_exporter_port"],
            )
        validation = ValidationPlan(
            nccl=v["gpuprov_validation_nccl"],
            expected_gpus=v["gpuprov_validation_expected_gpus"],
            runtime=v["gpuprov_validation_runtime"],
            cuda_version=v["gpuprov_cuda_version"],
        )
        return cls(
            host,
            roles,
            validation,
            driver,
            docker,
            toolkit,
            mig_plan,
            efa=efa,
            infiniband=infiniband,
            dcgm=dcgm,
        )
