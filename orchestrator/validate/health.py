"""Host health checks: pure functions over a host's facts (never raw text), no CUDA needed.

Each check returns CheckResults with value, limit, unit and, unless it passed, a diagnosis
that says what to do. Limits live in `limits.yaml` beside this file (sources in
../shared/reference/validation.md). The checks run on lab hosts too: the simulator's fault
knobs change exactly these outputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from ..catalog import SAFE_LOADER, Catalog
from ..errors import CatalogError
from ..facts import HostFacts, SmiGpu, XidEvent
from ..parsers.nvlink import NvLinkErrors
from ..parsers.smi_q import SmiQ, SmiQGpu
from ..result import CheckResult, run_timed, verdict

LIMITS_PATH = Path(__file__).with_name("limits.yaml")
_UPSTREAM = re.compile(r"^(?:\d+:)?(\d+\.\d+(?:\.\d+)?)")
# Packages whose version is the driver's (Debian, Ubuntu, NVIDIA's CUDA repository, RPM).
_DRIVER_PACKAGES = re.compile(
    r"^(nvidia-driver|nvidia-open|nvidia-kernel-open-dkms|nvidia-kernel-dkms|nvidia-dkms|"
    r"nvidia-headless|libnvidia-compute|cuda-drivers|kmod-nvidia)"
)
_FABRIC_PACKAGES = re.compile(r"^(nvidia-fabricmanager|nvidia-fabric-manager|libnvidia-nscq)")


@dataclass(frozen=True)
class HealthLimits:
    xid_fail_codes: frozenset[int]
    xid_window_s: float
    nvlink_error_warn: int
    clock_event_warn_bits: Mapping[int, str]
    validation_image: str  # default image for --runtime docker
    payload_timeout_s: int
    payload_deadline_margin_s: int = 45
    image_pull_timeout_s: int = 900
    ecc_sram_correctable_max: int = 10000
    ecc_dram_max: int = 20000000
    row_remap_uncorrectable_max: int = 512


@cache
def load_limits(path: Path = LIMITS_PATH) -> HealthLimits:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        return HealthLimits(
            xid_fail_codes=frozenset(int(c) for c in data["xid_fail_codes"]),
            xid_window_s=float(data["xid_window_s"]),
            nvlink_error_warn=int(data["nvlink_error_warn"]),
            clock_event_warn_bits={
                int(k): str(v) for k, v in data["clock_event_warn_bits"].items()
            },
            validation_image=str(data["validation_image"]),
            payload_timeout_s=int(data["payload_timeout_s"]),
            payload_deadline_margin_s=int(data["payload_deadline_margin_s"]),
            image_pull_timeout_s=int(data["image_pull_timeout_s"]),
            ecc_sram_correctable_max=int(data["ecc_sram_correctable_max"]),
            ecc_dram_max=int(data["ecc_dram_max"]),
            row_remap_uncorrectable_max=int(data["row_remap_uncorrectable_max"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CatalogError(
            f"health limits {path}: cannot load ({exc})",
            fix="restore orchestrator/validate/limits.yaml from the gpuprov release",
        ) from exc


@dataclass(frozen=True)
class HealthInput:
    """What the health checks read about one host."""

    facts: HostFacts
    smi_q: SmiQ | None  # nvidia-smi -q (ECC counters, row remaps, fabric, clock reasons)
    nvlink_errors: tuple[NvLinkErrors, ...]
    has_nvlink_output: bool  # nvidia-smi nvlink -s ran
    expected_gpus: int | None  # None: every GPU on the PCI bus
    nvswitches: int  # NVSwitch endpoints on the PCI bus (catalog ids)
    limits: HealthLimits

    @property
    def host(self) -> str:
        return self.facts.host


def health_input(
    facts: HostFacts,
    catalog: Catalog,
    *,
    expected_gpus: int | None = None,
    limits: HealthLimits | None = None,
) -> HealthInput:
    """What the checks read, from the host's facts (which parse -q and nvlink -e once)."""
    return HealthInput(
        facts=facts,
        smi_q=facts.smi_q,
        nvlink_errors=facts.nvlink_errors,
        has_nvlink_output=facts.has_nvlink_output,
        expected_gpus=expected_gpus,
        nvswitches=facts.nvswitches(catalog),
        limits=limits or load_limits(),
    )


def _gpu_label(gpu: SmiGpu) -> str:
    return f"GPU {gpu.index} ({gpu.bus_id})"


def _q_for(h: HealthInput, gpu: SmiGpu) -> SmiQGpu | None:
    if h.smi_q is None:
        return None
    return next((q for q in h.smi_q.gpus if q.bus_id == gpu.bus_id), None)


def _no_smi(name: str, h: HealthInput) -> list[CheckResult]:
    return [
        CheckResult(
            name,
            "fail",
            None,
            None,
            "",
            f"{h.host}: nvidia-smi gave no GPUs, so this cannot be checked; install and load "
            "the driver (provision apply), then validate again",
        )
    ]


def _per_gpu(
    name: str, h: HealthInput, check: Callable[[SmiGpu], Iterable[CheckResult]]
) -> list[CheckResult]:
    """`check` over every GPU nvidia-smi lists; one failure (`name`) where it lists none."""
    if not h.facts.smi_gpus:
        return _no_smi(name, h)
    return [r for g in h.facts.smi_gpus for r in check(g)]


# ---- the checks -----------------------------------------------------------------------------


def check_gpu_count(h: HealthInput) -> list[CheckResult]:
    pci = len(h.facts.gpus)
    smi = len(h.facts.smi_gpus)
    expected = h.expected_gpus if h.expected_gpus is not None else pci
    if expected == 0:
        return [
            CheckResult(
                "gpu_count",
                "fail",
                0,
                ">= 1",
                "GPUs",
                f"{h.host}: no NVIDIA GPU on the PCI bus; check that this is a GPU host (and, "
                "in a VM, that the GPUs are passed through)",
            )
        ]
    if smi == expected and pci >= expected:
        return [CheckResult("gpu_count", "pass", smi, expected, "GPUs")]
    if pci < expected:
        why = (
            f"{h.host}: {pci} NVIDIA GPUs on the PCI bus, {expected} expected: a GPU fell off "
            "the bus or is not seated/powered; check dmesg for Xid 79, reseat or RMA the GPU, "
            "then power-cycle the host"
        )
    elif smi == 0 and h.facts.smi is None:
        why = (
            f"{h.host}: nvidia-smi is absent or failing, {expected} GPUs expected; install the "
            "driver (provision apply) or read `nvidia-smi` for the error"
        )
    else:
        why = (
            f"{h.host}: nvidia-smi sees {smi} of {expected} GPUs (PCI bus: {pci}): the driver "
            "did not initialise a GPU; check dmesg for NVRM errors and Xids, then reboot; "
            "if it persists, drain the host and RMA the GPU"
        )
    return [CheckResult("gpu_count", "fail", smi, expected, "GPUs", why)]


def check_nvlink(h: HealthInput) -> list[CheckResult]:
    if not h.has_nvlink_output:
        return [CheckResult("nvlink_active", "skip", None, None, "links", "nvidia-smi absent")]
    out: list[CheckResult] = []
    if h.facts.nvlink_inactive:
        links = ", ".join(f"GPU {g} link {link}" for g, link in h.facts.nvlink_inactive)
        out.append(
            CheckResult(
                "nvlink_active",
                "fail",
                len(h.facts.nvlink_inactive),
                0,
                "inactive links",
                f"{h.host}: NVLink inactive: {links}; check the fabric manager (systemctl "
                "status nvidia-fabricmanager) and nvidia-smi -q Fabric State, reset the GPUs "
                "(nvidia-smi -r) or reboot; if links stay down, the baseboard needs service",
            )
        )
    else:
        out.append(CheckResult("nvlink_active", "pass", 0, 0, "inactive links"))
    limit = h.limits.nvlink_error_warn
    noisy = [
        (e.gpu, e.link, name, count)
        for e in h.nvlink_errors
        for name, count in e.counters.items()
        if count >= limit
    ]
    if noisy:
        worst = max(c for *_unused, c in noisy)
        where = ", ".join(f"GPU {g} link {link} {n} {c}" for g, link, n, c in noisy[:6])
        out.append(
            CheckResult(
                "nvlink_errors",
                "warn",
                worst,
                limit,
                "errors/link",
                f"{h.host}: NVLink error counters at or above {limit}: {where}; watch them "
                "(nvidia-smi nvlink -e), and run dcgmi diag -r 3 if they grow",
            )
        )
    elif h.nvlink_errors:
        out.append(CheckResult("nvlink_errors", "pass", 0, limit, "errors/link"))
    return out


def check_fabric(h: HealthInput) -> list[CheckResult]:
    """Fabric state must be Completed where NVSwitches are, or where the GPU reports one."""
    states = [(g, g.fabric_state) for g in h.facts.smi_gpus]
    reported = [(g, s) for g, s in states if s not in (None, "N/A")]
    if not reported:
        if h.nvswitches and not h.facts.smi_gpus:
            return _no_smi("fabric_state", h)
        if h.nvswitches:
            return [
                CheckResult(
                    "fabric_state",
                    "fail",
                    "N/A",
                    "Completed",
                    "",
                    f"{h.host}: {h.nvswitches} NVSwitches but no GPU reports a fabric state; "
                    "upgrade the driver to one that reports it and check nvidia-fabricmanager",
                )
            ]
        return [CheckResult("fabric_state", "skip", None, None, "", "no NVSwitch fabric")]
    bad = [(g, s) for g, s in reported if s != "Completed"]
    erred = [
        g
        for g, s in reported
        if s == "Completed" and g.fabric_status not in (None, "N/A", "Success")
    ]
    if not bad and erred:
        which = ", ".join(f"{_gpu_label(g)}: {g.fabric_status}" for g in erred)
        return [
            CheckResult(
                "fabric_state",
                "fail",
                f"Completed, {erred[0].fabric_status}",
                "Completed, Success",
                "",
                f"{h.host}: fabric registration completed with an error ({which}): the GPU "
                "is not usable over NVLink; restart nvidia-fabricmanager, check journalctl -u "
                "nvidia-fabricmanager, and reset the GPU or reboot if the status stays",
            )
        ]
    if not bad:
        return [CheckResult("fabric_state", "pass", "Completed", "Completed", "")]
    which = ", ".join(f"{_gpu_label(g)}: {s}" for g, s in bad)
    return [
        CheckResult(
            "fabric_state",
            "fail",
            bad[0][1],
            "Completed",
            "",
            f"{h.host}: fabric not Completed ({which}); CUDA jobs fail until it is: start "
            "nvidia-fabricmanager (same version as the driver) with systemctl enable --now "
            "nvidia-fabricmanager, then check journalctl -u nvidia-fabricmanager",
        )
    ]


def _upstream(version: str) -> str | None:
    m = _UPSTREAM.match(version)
    return m.group(1) if m else None


def check_fabric_manager(h: HealthInput) -> list[CheckResult]:
    if not h.nvswitches:
        return [CheckResult("fabric_manager", "skip", None, None, "", "no NVSwitch on this host")]
    state = h.facts.services.get("nvidia-fabricmanager")
    active = state.active if state else "not probed"
    why = (
        f"{h.host}: nvidia-fabricmanager is {active} on a host with {h.nvswitches} "
        "NVSwitches; install the fabric manager of the driver's exact version and "
        "systemctl enable --now nvidia-fabricmanager"
    )
    return [verdict("fabric_manager", bool(state and state.running), active, "active", "", why)]


def _xid_age(h: HealthInput, stamp: float | None) -> float | None:
    if stamp is None or h.facts.uptime_s is None:
        return None
    return max(0.0, h.facts.uptime_s - stamp)


def check_xid(h: HealthInput) -> list[CheckResult]:
    if not h.facts.xids:
        return [CheckResult("xid_errors", "pass", 0, 0, "Xid events")]
    window = h.limits.xid_window_s
    serious: list[XidEvent] = []
    other: list[XidEvent] = []
    for x in h.facts.xids:
        age = _xid_age(h, x.uptime_s)
        recent = age is None or age <= window  # unknown age: treat as recent
        (serious if x.code in h.limits.xid_fail_codes and recent else other).append(x)
    codes = ", ".join(sorted({f"{x.code} on {x.pci}" for x in (serious or other)}))
    if serious:
        first = serious[0]
        return [
            CheckResult(
                "xid_errors",
                "fail",
                len(serious),
                0,
                "Xid events",
                f"{h.host}: Xid {codes} ({first.text[:80]}); drain the host, collect "
                "nvidia-bug-report.sh, reset the GPU or reboot; Xid 79/74/48/63/64/94/95 "
                "repeating means the GPU needs service",
            )
        ]
    return [
        CheckResult(
            "xid_errors",
            "warn",
            len(other),
            0,
            "Xid events",
            f"{h.host}: Xid {codes} in the kernel log (not in the failing list, or older "
            f"than {window / 3600:.0f} h); usually an application fault; watch for repeats",
        )
    ]


def check_ecc(h: HealthInput) -> list[CheckResult]:
    def one(g: SmiGpu) -> list[CheckResult]:
        mode = g.ecc_mode_current
        pending = f" (pending: {g.ecc_mode_pending})" if g.ecc_mode_pending else ""
        why = (
            f"{h.host}: ECC is {mode}{pending} on {_gpu_label(g)}; enable it with "
            f"nvidia-smi -i {g.index} -e 1 and reboot (or reset the GPU)"
        )
        return [
            verdict("ecc_mode", mode == "Enabled", mode, "Enabled", "", why, g.index),
            _ecc_counts(h, g),
        ]

    return _per_gpu("ecc_mode", h, one)


def _ecc_counts(h: HealthInput, g: SmiGpu) -> CheckResult:
    """aznhc's thresholds (limits.yaml): any SRAM uncorrectable, volatile or aggregate, fails;
    SRAM correctable above its limit fails; any DRAM counter above its limit fails; DRAM
    uncorrectable below it warns (a row remap handles it after a reset)."""
    lim = h.limits
    q = _q_for(h, g)
    vol = q.ecc_volatile if q else None
    agg = q.ecc_aggregate if q else None

    def worst(*values: int | None) -> int:
        return max((v for v in values if v is not None), default=0)

    def both(field: str) -> int:
        return worst(*(getattr(scope, field) for scope in (vol, agg) if scope is not None))

    sram_unc = both("sram_uncorrectable")
    sram_cor = both("sram_correctable")
    dram = max(both("dram_correctable"), both("dram_uncorrectable"))
    dram_unc = worst(vol.dram_uncorrectable if vol else None, g.ecc_uncorrected_volatile)
    label = _gpu_label(g)
    if sram_unc:
        return CheckResult(
            "ecc_uncorrectable",
            "fail",
            sram_unc,
            0,
            "SRAM errors",
            f"{h.host}: {sram_unc} uncorrectable SRAM ECC errors on {label} (volatile or "
            "aggregate, i.e. also before the last driver load); drain the host, reset the "
            "GPU; if they recur, RMA the GPU",
            gpu=g.index,
        )
    if sram_cor > lim.ecc_sram_correctable_max:
        return CheckResult(
            "ecc_uncorrectable",
            "fail",
            sram_cor,
            lim.ecc_sram_correctable_max,
            "SRAM correctable",
            f"{h.host}: {sram_cor} correctable SRAM ECC errors on {label}, above "
            f"{lim.ecc_sram_correctable_max}: the SRAM is failing; drain the host and RMA "
            "the GPU",
            gpu=g.index,
        )
    if dram > lim.ecc_dram_max:
        return CheckResult(
            "ecc_uncorrectable",
            "fail",
            dram,
            lim.ecc_dram_max,
            "DRAM errors",
            f"{h.host}: {dram} DRAM ECC errors on {label}, above {lim.ecc_dram_max}: the HBM "
            "is failing; drain the host and RMA the GPU",
            gpu=g.index,
        )
    if dram_unc:
        return CheckResult(
            "ecc_uncorrectable",
            "warn",
            dram_unc,
            0,
            "DRAM errors",
            f"{h.host}: {dram_unc} uncorrectable memory errors on {label} since "
            "the driver loaded; a row remap handles them after a GPU reset (see "
            "row_remap)",
            gpu=g.index,
        )
    return CheckResult("ecc_uncorrectable", "pass", 0, 0, "errors", gpu=g.index)


def check_row_remap(h: HealthInput) -> list[CheckResult]:
    def one(g: SmiGpu) -> list[CheckResult]:
        q = _q_for(h, g)
        pending = (q.row_remap.pending if q else None) or g.remapped_rows_pending == "Yes"
        failure = (q.row_remap.failure if q else None) or g.remapped_rows_failure == "Yes"
        remapped = (q.row_remap.uncorrectable if q else None) or 0
        if not failure and remapped > h.limits.row_remap_uncorrectable_max:
            return [
                CheckResult(
                    "row_remap",
                    "fail",
                    remapped,
                    h.limits.row_remap_uncorrectable_max,
                    "rows remapped (uncorrectable)",
                    f"{h.host}: {remapped} rows remapped for uncorrectable errors on "
                    f"{_gpu_label(g)}, above {h.limits.row_remap_uncorrectable_max}: the HBM "
                    "is failing; drain the host and RMA the GPU",
                    gpu=g.index,
                )
            ]
        if failure:
            why = (
                f"{h.host}: row remapping failed on {_gpu_label(g)} (no spare rows left): "
                "drain the host and RMA the GPU"
            )
            return [CheckResult("row_remap", "fail", "failure", "none", "", why, g.index)]
        if pending:
            why = (
                f"{h.host}: a row remap is pending on {_gpu_label(g)}; reset the GPU "
                f"(stop its users, nvidia-smi -r -i {g.index}) or reboot to apply it"
            )
            return [CheckResult("row_remap", "fail", "pending", "none", "", why, g.index)]
        if g.remapped_rows_pending is None and q is None:
            why = "not reported by this GPU"
            return [CheckResult("row_remap", "skip", None, None, "", why, gpu=g.index)]
        return [CheckResult("row_remap", "pass", "none", "none", "", gpu=g.index)]

    return _per_gpu("row_remap", h, one)


def check_pcie(h: HealthInput) -> list[CheckResult]:
    """Link speed and width at their maximum: sysfs first, nvidia-smi where sysfs shows none."""
    out = []
    smi_by_bus = {g.bus_id: g for g in h.facts.smi_gpus}
    for position, dev in enumerate(sorted(h.facts.gpus, key=lambda d: d.address)):
        link = dev.link
        smi = smi_by_bus.get(dev.address)
        gpu = smi.index if smi else position  # nvidia-smi numbers GPUs in PCI bus order
        if link.current_speed_gts is not None and link.max_speed_gts is not None:
            value = f"{link.current_speed_gts:g} GT/s x{link.current_width}"
            limit = f"{link.max_speed_gts:g} GT/s x{link.max_width}"
            degraded = link.degraded
        elif smi and smi.pcie_gen_current and smi.pcie_gen_max:
            value = f"Gen{smi.pcie_gen_current} x{smi.pcie_width_current}"
            limit = f"Gen{smi.pcie_gen_max} x{smi.pcie_width_max}"
            degraded = smi.pcie_gen_current < smi.pcie_gen_max or (smi.pcie_width_current or 0) < (
                smi.pcie_width_max or 0
            )
        else:
            out.append(
                CheckResult("pcie_link", "skip", None, None, "", f"{dev.address}: not reported")
            )
            continue
        why = (
            f"{h.host}: GPU {dev.address} PCIe link at {value}, below its maximum "
            f"{limit}: host-to-device copies slow down; reseat the GPU or its riser, "
            "check the slot's BIOS setting, and look for AER errors in dmesg"
        )
        out.append(verdict("pcie_link", not degraded, value, limit, "", why, gpu))
    return out


def check_persistence(h: HealthInput) -> list[CheckResult]:
    def one(g: SmiGpu) -> list[CheckResult]:
        why = (
            f"{h.host}: persistence mode is {g.persistence_mode} on {_gpu_label(g)}: each job "
            "pays the driver's start-up and GPU state is lost between jobs; enable "
            "nvidia-persistenced (systemctl enable --now nvidia-persistenced)"
        )
        mode = g.persistence_mode
        return [verdict("persistence", mode == "Enabled", mode, "Enabled", "", why, g.index)]

    return _per_gpu("persistence", h, one)


def check_clocks(h: HealthInput) -> list[CheckResult]:
    def one(g: SmiGpu) -> list[CheckResult]:
        bits = g.clocks_event_reasons
        if bits is None:
            return [CheckResult("clock_events", "skip", None, None, "", "not reported", g.index)]
        active = [n for b, n in sorted(h.limits.clock_event_warn_bits.items()) if bits & b]
        value = f"{bits:#x}"
        if not active:
            return [CheckResult("clock_events", "pass", value, "no slowdown", "", gpu=g.index)]
        why = (
            f"{h.host}: {', '.join(active)} active on {_gpu_label(g)}; check "
            "cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)"
        )
        return [CheckResult("clock_events", "warn", value, "no slowdown", "", why, g.index)]

    return _per_gpu("clock_events", h, one)


def check_driver_coherence(h: HealthInput) -> list[CheckResult]:
    """Kernel module = NVML = driver package = fabric manager / NSCQ (exact versions)."""
    f = h.facts
    seen: dict[str, str] = {}
    if f.loaded_driver:
        seen["kernel module"] = f.loaded_driver.version
    if f.smi:
        seen["NVML (nvidia-smi)"] = f.smi.driver_version
    for pkg, version in sorted(f.packages.items()):
        upstream = _upstream(version)
        if upstream and (_DRIVER_PACKAGES.match(pkg) or _FABRIC_PACKAGES.match(pkg)):
            seen[f"package {pkg}"] = upstream
    if not seen:
        return [CheckResult("driver_coherence", "skip", None, None, "", "no driver found")]
    versions = sorted(set(seen.values()))
    value = " / ".join(versions)
    if len(versions) == 1:
        return [CheckResult("driver_coherence", "pass", value, "all equal", "")]
    parts = ", ".join(f"{k} {v}" for k, v in seen.items())
    module = seen.get("kernel module")
    packages = {v for k, v in seen.items() if k.startswith("package ")}
    if module and packages and module not in packages:
        fix = "the packages changed under a loaded module: reboot (or reload the driver)"
    else:
        fix = (
            "install the fabric manager / NSCQ / driver packages at one exact version "
            "(provision apply pins and holds them), then reboot"
        )
    return [
        CheckResult(
            "driver_coherence",
            "fail",
            value,
            "all equal",
            "",
            f"{h.host}: driver versions differ ({parts}); {fix}",
        )
    ]


HealthCheck = Callable[[HealthInput], list[CheckResult]]

CHECKS: tuple[HealthCheck, ...] = (
    check_gpu_count,
    check_nvlink,
    check_fabric,
    check_fabric_manager,
    check_xid,
    check_ecc,
    check_row_remap,
    check_pcie,
    check_persistence,
    check_clocks,
    check_driver_coherence,
)


# The names the health checks report under (the JUnit suite "health").
CHECK_NAMES = frozenset(
    {
        "gpu_count",
        "nvlink_active",
        "nvlink_errors",
        "fabric_state",
        "fabric_manager",
        "xid_errors",
        "ecc_mode",
        "ecc_uncorrectable",
        "row_remap",
        "pcie_link",
        "persistence",
        "clock_events",
        "driver_coherence",
    }
)


def run_health(h: HealthInput) -> list[CheckResult]:
    """Every host health check, in a stable order."""
    return run_timed(CHECKS, h)
