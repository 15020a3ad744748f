"""The MIG planner: the selected layout of the fleet's mig_configs, checked against each GPU's
own profiles and placements and against validation's multi-GPU NCCL check, before any change
(the mig role; roles.yaml: joins where mig_layout is set)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import mig
from . import HostContext, RolePlan


@dataclass(frozen=True)
class MigPlan:
    """The MIG layouts, parsed and checked once (the planner here, verify's expectation)."""

    layout: str  # a name of `configs`, or "disabled"
    configs: Mapping[str, Any]  # mig_configs as written (the role receives it)
    parsed: mig.MigConfig

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


def plan_mig(ctx: HostContext) -> RolePlan | None:
    facts, policy, notes = ctx.facts, ctx.policy, ctx.notes
    layout = policy["mig_layout"]
    if layout is None:
        notes.warnings.append("mig is in gpuprov_roles but mig_layout is empty: MIG left as is")
        return None
    gpus = [
        mig.gpu_from_catalog(index, model, model.device_ids[0])
        for index, model in enumerate(ctx.models)
        if model is not None  # an unknown GPU already blocks the host
    ]
    # parsed and checked once (an empty mapping: only "disabled")
    parsed = MigPlan.parse(layout, policy["mig_configs"], facts.host).parsed
    layouts = mig.validate_layout(facts.host, parsed, layout, gpus)
    nccl = policy["gpuprov_validation_nccl"]
    notes.blockers.extend(
        c.removeprefix(f"{facts.host}: ")
        for c in mig.conflicts(facts.host, layouts, needs_multi_gpu_nccl=nccl)
    )
    enabled = sum(1 for g in layouts if g.mig_enabled)
    current = {g.mig_mode_current for g in facts.smi_gpus}
    if layout == mig.LAYOUT_DISABLED:
        reason = (
            "layout disabled: MIG already off"
            if current <= {"Disabled", None}
            else "layout disabled: tear MIG down"
        )
    else:
        reason = f"layout {layout}: MIG on {enabled} of {len(gpus)} GPUs"
    return RolePlan(
        "mig", {"mig_layout": layout, "mig_configs": dict(policy["mig_configs"])}, reason
    )
