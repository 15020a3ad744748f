"""MIG: GPU and compute instances with the real profile ids and placement rules.

Placement: a GPU instance of a profile may start only at the profile's listed memory
slices and may not overlap another instance's memory slices (the rule the real H200's
`mig -lgipp` shows). GPU instance ids follow the slot ("swizzle") numbering NVML uses:
8 slices -> 0; 4 slices at 0/4 -> 1/2; 2 slices at 0/2/4/6 -> 3..6; 1 slice at 0..6 -> 7..13.

Output layouts of the MIG-enabled listings (-lgi, -lci, -lcip) follow NVIDIA's documented
examples; the real fixture only has the MIG-disabled outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpusim.model import MigProfile
from gpusim.state import ComputeInstance, GpuInstance
from gpusim.view import GpuView

NO_MIG = "No MIG-enabled devices found.\n"
# Compute instance profile ids (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE) by compute slices.
CI_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class MigError(Exception):
    """An operation the real tool refuses; str() is its message, .code its exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class CiProfile:
    id: int
    compute_slices: int
    name: str  # "1c.3g.71gb", or the GI's own name for the full-size profile


def gi_id(profile: MigProfile, start: int) -> int:
    base = {8: 0, 4: 1, 2: 3, 1: 7}[profile.mem_slices]
    return base + start // profile.mem_slices


def _slices(profile: MigProfile, start: int) -> set[int]:
    return set(range(start, start + profile.mem_slices))


def _used(g: GpuView) -> set[int]:
    used: set[int] = set()
    for gi in g.state.gpu_instances:
        p = _profile_by_id(g, gi.profile_id)
        used |= _slices(p, gi.start)
    return used


def _profile_by_id(g: GpuView, profile_id: int) -> MigProfile:
    for p in g.model.mig_profiles:
        if p.id == profile_id:
            return p
    raise MigError(f"Unknown GPU instance profile ID {profile_id}")


def free_count(g: GpuView, profile: MigProfile) -> int:
    """How many more instances of ``profile`` fit beside the existing ones (greedy)."""
    used = _used(g)
    count = 0
    for start in profile.placements:
        if not (_slices(profile, start) & used):
            used |= _slices(profile, start)
            count += 1
    existing = sum(1 for gi in g.state.gpu_instances if gi.profile_id == profile.id)
    return min(count, profile.max - existing)


def _box(width: int, *rows: str) -> tuple[str, list[str]]:
    """The rule line and the heading rows of one of nvidia-smi's boxed MIG tables."""
    rule = "+" + "-" * (width - 2) + "+"
    return rule, [
        rule,
        *(f"| {row}".ljust(width - 1) + "|" for row in rows),
        "|" + "=" * (width - 2) + "|",
    ]


def _name(p: MigProfile) -> str:
    return f"MIG {p.name}"


def list_gi_profiles(gpus: Sequence[GpuView]) -> str:
    capable = [g for g in gpus if g.model.mig_capable]
    if not capable:
        return "No MIG-supported devices found.\n"
    rule = "+" + "-" * 79 + "+"
    out = [
        rule,
        "| GPU instance profiles:".ljust(80) + "|",
        "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                                Free/Total   GiB              CE    JPEG  OFA  |",
        "|" + "=" * 79 + "|",
    ]
    for g in capable:
        for p in g.model.mig_profiles:
            free = free_count(g, p) if g.state.mig_current else p.max
            first = (
                f"|{g.index:>4}  {_name(p):<16}{p.id:>6}     {free}/{p.max}        "
                f"{p.memory_gib:<11}No     "
            )
            column = len(first)
            out.append(f"{first}{p.sm:<7}{p.dec:<6}{p.enc}".ljust(80) + "|")
            out.append(("|" + " " * column + f"{p.ce:<6}{p.jpeg:<6}{p.ofa}").ljust(80) + "|")
            out.append(rule)
    return "\n".join(out) + "\n"


def list_gi_placements(gpus: Sequence[GpuView]) -> str:
    out = ""
    for g in gpus:
        for p in g.model.mig_profiles:
            starts = ",".join(str(s) for s in p.placements)
            label = "Placements:" if len(p.placements) > 1 else "Placement :"
            out += f"GPU {g.index:>2} Profile ID {p.id:>2} {label} {{{starts}}}:{p.mem_slices}\n"
    return out or "No MIG-supported devices found.\n"


def _enabled(gpus: Sequence[GpuView]) -> list[GpuView]:
    return [g for g in gpus if g.model.mig_capable and g.state.mig_current]


def list_gpu_instances(gpus: Sequence[GpuView]) -> str:
    enabled = _enabled(gpus)
    if not enabled:
        return NO_MIG
    rows = [(g, gi) for g in enabled for gi in sorted(g.state.gpu_instances, key=lambda i: i.id)]
    if not rows:
        return "No GPU instances found: Not Found\n"
    width = 56
    rule, out = _box(
        width,
        "GPU instances:",
        "GPU   Name             Profile  Instance   Placement",
        "                         ID       ID       Start:Size",
    )
    for g, gi in rows:
        p = _profile_by_id(g, gi.profile_id)
        line = f"|{g.index:>4}  {_name(p):<16}{p.id:>6}{gi.id:>9}{gi.start:>11}:{p.mem_slices}"
        out += [line.ljust(width - 1) + "|", rule]
    return "\n".join(out) + "\n"


def ci_profiles(p: MigProfile) -> list[CiProfile]:
    """Compute instance profiles inside a GPU instance: every size up to the GI's."""
    sizes = [s for s in (1, 2, 3, 4, 6, 7, 8) if s <= p.compute_slices and s in CI_PROFILE_IDS]
    result = []
    for size in sizes:
        name = p.name if size == p.compute_slices else f"{size}c.{p.name}"
        result.append(CiProfile(CI_PROFILE_IDS[size], size, name))
    return result


def _ci_profile(p: MigProfile, profile_id: int | None) -> CiProfile:
    profiles = ci_profiles(p)
    if profile_id is None:
        return profiles[-1]
    for c in profiles:
        if c.id == profile_id:
            return c
    raise MigError(f"Invalid compute instance profile ID {profile_id}", 2)


def list_compute_instances(gpus: Sequence[GpuView]) -> str:
    enabled = _enabled(gpus)
    if not enabled:
        return NO_MIG
    rows = [
        (g, ci)
        for g in enabled
        for ci in sorted(g.state.compute_instances, key=lambda c: (c.gpu_instance, c.id))
    ]
    if not rows:
        return "No compute instances found: Not Found\n"
    width = 70
    rule, out = _box(
        width,
        "Compute instances:",
        "GPU     GPU       Name             Profile   Instance   Placement",
        "      Instance                       ID        ID       Start:Size",
        "        ID",
    )
    for g, ci in rows:
        gi = _gi(g, ci.gpu_instance)
        c = _ci_profile(_profile_by_id(g, gi.profile_id), ci.profile_id)
        line = (
            f"|{g.index:>4}{gi.id:>7}       {'MIG ' + c.name:<19}{c.id:>6}{ci.id:>10}"
            f"{ci.start:>11}:{c.compute_slices}"
        )
        out += [line.ljust(width - 1) + "|", rule]
    return "\n".join(out) + "\n"


def list_ci_profiles(gpus: Sequence[GpuView]) -> str:
    enabled = _enabled(gpus)
    if not enabled:
        return NO_MIG
    rows = [(g, gi) for g in enabled for gi in sorted(g.state.gpu_instances, key=lambda i: i.id)]
    if not rows:
        return "No GPU instances found: Not Found\n"
    width = 88
    rule, out = _box(
        width,
        "Compute instance profiles:",
        "GPU     GPU       Name             Profile  Instances   Exclusive       Shared",
        "      Instance                       ID     Free/Total     SM       DEC   ENC   OFA",
        "        ID                                                          CE    JPEG",
    )
    for g, gi in rows:
        p = _profile_by_id(g, gi.profile_id)
        used = sum(
            _ci_profile(p, c.profile_id).compute_slices
            for c in g.state.compute_instances
            if c.gpu_instance == gi.id
        )
        for c in ci_profiles(p):
            total = p.compute_slices // c.compute_slices
            free = (p.compute_slices - used) // c.compute_slices
            sm = p.sm * c.compute_slices // p.compute_slices
            first = (
                f"|{g.index:>4}{gi.id:>7}       {'MIG ' + c.name:<19}{c.id:>5}"
                f"      {free}/{total}           {sm:<9}"
            )
            column = len(first)
            out.append(f"{first}{p.dec:<6}{p.enc:<6}{p.ofa}".ljust(width - 1) + "|")
            out.append(("|" + " " * (column - 1) + f"{p.ce:<6}{p.jpeg}").ljust(width - 1) + "|")
            out.append(rule)
    return "\n".join(out) + "\n"


def _gi(g: GpuView, gi_id_: int) -> GpuInstance:
    for gi in g.state.gpu_instances:
        if gi.id == gi_id_:
            return gi
    raise MigError(f"Unable to find GPU instance ID {gi_id_:>2} on GPU {g.index:>2}: Not Found")


def create_gpu_instance(g: GpuView, token: str) -> GpuInstance:
    """Create one GPU instance ("19", "1g.18gb", "19:4" = at start slice 4)."""
    spec, _, at = token.partition(":")
    profile = g.model.mig_profile(spec)
    if profile is None:
        raise MigError(
            f"Unable to create a GPU instance on GPU {g.index:>2} using profile "
            f"{spec}: Invalid Argument"
        )
    if not g.state.mig_current:
        raise MigError(
            f"Unable to create a GPU instance on GPU {g.index:>2} using profile "
            f"{profile.id}: Not Supported"
        )
    used = _used(g)
    existing = sum(1 for gi in g.state.gpu_instances if gi.profile_id == profile.id)
    starts = [int(at)] if at else list(profile.placements)
    for start in starts:
        if start in profile.placements and not (_slices(profile, start) & used):
            if existing >= profile.max:
                break
            gi = GpuInstance(id=gi_id(profile, start), profile_id=profile.id, start=start)
            g.state.gpu_instances.append(gi)
            return gi
    raise MigError(
        f"Unable to create a GPU instance on GPU {g.index:>2} using profile "
        f"{profile.id}: Insufficient Resources"
    )


def create_compute_instance(
    g: GpuView, gi: GpuInstance, profile_id: int | None
) -> tuple[ComputeInstance, CiProfile]:
    p = _profile_by_id(g, gi.profile_id)
    c = _ci_profile(p, profile_id)
    taken: set[int] = set()
    for ci in g.state.compute_instances:
        if ci.gpu_instance == gi.id:
            size = _ci_profile(p, ci.profile_id).compute_slices
            taken |= set(range(ci.start, ci.start + size))
    for start in range(0, p.compute_slices - c.compute_slices + 1, c.compute_slices):
        if not taken & set(range(start, start + c.compute_slices)):
            ids = {ci.id for ci in g.state.compute_instances if ci.gpu_instance == gi.id}
            new = ComputeInstance(gi.id, min(set(range(8)) - ids), c.id, start)
            g.state.compute_instances.append(new)
            return new, c
    raise MigError(
        f"Unable to create a compute instance on GPU {g.index:>2} GPU instance ID "
        f"{gi.id:>2} using profile {c.id}: Insufficient Resources"
    )


def destroy_gpu_instance(g: GpuView, gi: GpuInstance) -> None:
    if any(ci.gpu_instance == gi.id for ci in g.state.compute_instances):
        raise MigError(
            f"Unable to destroy GPU instance ID {gi.id:>2} from GPU {g.index:>2}: "
            "In use by another client"
        )
    g.state.gpu_instances.remove(gi)


def gpu_instance(g: GpuView, gi_id_: int) -> GpuInstance:
    return _gi(g, gi_id_)


def profile_of(g: GpuView, gi: GpuInstance) -> MigProfile:
    return _profile_by_id(g, gi.profile_id)
