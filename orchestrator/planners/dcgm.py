"""The DCGM planner (opt-in: `dcgm` in gpuprov_roles): DCGM 4 with the -cuda<N> flavour of
the driver's CUDA major, its exporter, and what the dcgm role's preflight refuses (a version
that is not DCGM 4's, a host without apt, a driver from the distribution's archive where
NVIDIA's CUDA repository, DCGM's source, is never added, DCGM 3 that may not be removed),
blocking the host here, with the fix, before any change."""

from __future__ import annotations

import re

from ..catalog import branch_of
from . import HostContext, RolePlan, role_data

# DCGM 4 ships -cuda12 for these architectures even on 580 (CUDA 13): tests/recorded/reference/
# dcgm.yaml dcgm.compatibility.driver, "Volta/Pascal/Maxwell on 580 must use -cuda12".
DCGM_CUDA12_ARCHS = frozenset({"maxwell", "pascal", "volta"})


def plan_dcgm(ctx: HostContext) -> RolePlan | None:
    facts, policy, notes = ctx.facts, ctx.policy, ctx.notes
    loaded = facts.loaded_driver
    planned = ctx.planned_var("nvidia_driver", "nvidia_driver_branch")
    branch = int(planned) if planned else (branch_of(loaded.version) if loaded else None)
    major = str(policy["dcgm_cuda_major"] or "").strip()  # "": the driver's
    if major:
        why = f"dcgm_cuda_major={major}"
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
            for m, floor in ctx.catalog.cuda_compat_min_driver.items()
            if branch >= int(str(floor).split(".", maxsplit=1)[0])
        ]
        major = str(max(majors, default=0))
        why = f"R{branch} runs CUDA {major}"
        old = sorted({m.arch for m in ctx.known} & DCGM_CUDA12_ARCHS)
        if int(major) > 12 and old:
            major, why = "12", f"{'/'.join(old)} GPUs take DCGM's CUDA 12 flavour on R{branch}"
    notes.blockers.extend(_preflight(ctx, major))
    version, exporter = str(policy["dcgm_version"] or "").strip(), policy["dcgm_exporter"]
    port = policy["dcgm_exporter_port"]
    shown = f"; exporter ({exporter}) on port {port}" if exporter != "none" else ""
    reason = f"DCGM 4 {version or '(newest, then held)'} with -cuda{major}: {why}" + shown
    plan = {
        "dcgm_version": version,
        "dcgm_cuda_major": major,
        "dcgm_exporter": exporter,
        "dcgm_exporter_port": port,
    }
    return RolePlan("dcgm", plan, reason)


def _preflight(ctx: HostContext, major: str) -> list[str]:
    """What roles/dcgm/tasks/preflight.yml asserts, checked against the plan and the facts."""
    facts, policy = ctx.facts, ctx.policy
    data = role_data("dcgm", "vars/main.yml")
    problems = []
    version, epoch = str(policy["dcgm_version"] or "").strip(), data["__dcgm_epoch"]
    if version and not re.fullmatch(rf"({epoch}:)?4\.[0-9]+\.[0-9]+(-[0-9A-Za-z.~+]+)?", version):
        problems.append(
            f'dcgm_version "{version}" is not a DCGM 4 version: the dcgm role installs DCGM 4 '
            f'only; fix: set dcgm_version to one such as "4.6.0" or "{epoch}:4.6.0-1", or "" '
            "for the newest"
        )
    if facts.os is None or facts.os.family != "debian":
        name = facts.os.pretty_name if facts.os else "an unknown OS"
        problems.append(
            f"the dcgm role supports apt hosts (Debian, Ubuntu) only, not {name}; fix: leave "
            "dcgm out of gpuprov_roles for this host"
        )
    if major not in data["__dcgm_cuda_majors"]:
        problems.append(
            f"dcgm_cuda_major={major}: DCGM ships no -cuda{major} flavour (it ships "
            f"{', '.join(data['__dcgm_cuda_majors'])}); fix: set dcgm_cuda_major to one of those, "
            'or to "" (the driver\'s CUDA major)'
        )
    source = ctx.planned_var("nvidia_driver", "nvidia_driver_source")
    if source == "distribution":
        problems.append(
            "dcgm with nvidia_driver_source=distribution: DCGM comes from NVIDIA's CUDA "
            "repository, which the driver role adds only for nvidia_driver_source=cuda; fix: "
            "set nvidia_driver_source=cuda for this host, or leave dcgm out of gpuprov_roles"
        )
    if data["__dcgm_dcgm3_package"] in facts.packages and not policy["dcgm_remove_dcgm3"]:
        problems.append(
            f"DCGM 3 ({data['__dcgm_dcgm3_package']}) is installed and dcgm_remove_dcgm3=false: "
            "the dcgm role stops there; fix: set dcgm_remove_dcgm3=true (DCGM 4 replaces it), "
            "or leave dcgm out of gpuprov_roles for this host"
        )
    return problems
