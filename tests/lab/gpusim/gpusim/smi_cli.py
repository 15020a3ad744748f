"""The simulated `nvidia-smi`: argument handling and dispatch (formats live in smi_*)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpusim import driver as drv
from gpusim import jobs, mig, smi_basic, smi_full, smi_links
from gpusim.runtime import Host, host_session
from gpusim.smi_basic import Driver
from gpusim.view import GpuView, fabric_state, gpus

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


@dataclass
class Result:
    out: str = ""
    err: str = ""
    code: int = 0


@dataclass
class Args:
    words: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)  # "-i" -> "0", "-q" -> ""


_VALUED = {
    "-i",
    "--id",
    "-d",
    "--display",
    "-pm",
    "--persistence-mode",
    "-mig",
    "--multi-instance-gpu",
    "--query-gpu",
    "--query-compute-apps",
    "--format",
    "-gi",
    "-ci",
    "-cgi",
    "-cci",
    "-f",
    "--filename",
    "-dgi",
    "-dci",
}
# Options whose value is optional (only taken when it does not look like another option).
_OPTIONAL_VALUE = {"-dgi", "-dci", "-cci"}


def parse(argv: Sequence[str]) -> Args:
    args = Args()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if not eq and name in _VALUED and i + 1 < len(argv):
                nxt = argv[i + 1]
                if name not in _OPTIONAL_VALUE or not nxt.startswith("-"):
                    value = nxt
                    i += 1
            args.options[name] = value
        else:
            args.words.append(word)
        i += 1
    return args


def _select(views: list[GpuView], spec: str | None) -> list[GpuView]:
    if spec is None:
        return views
    chosen = []
    for token in spec.split(","):
        token = token.strip()
        for g in views:
            if token in (str(g.index), g.state.uuid, g.nvml_bus_id, g.state.bus_id):
                chosen.append(g)
                break
        else:
            raise LookupError(token)
    return chosen


def _mig_mode(targets: list[GpuView], enable: bool, drm_loaded: bool) -> Result:
    """`-mig 0|1`. The change waits for a GPU reset where the GPU needs one (A100), and
    while nvidia_drm holds the GPUs (a client the driver cannot reset around)."""
    out = ""
    word = "enable" if enable else "disable"
    for g in targets:
        if not g.model.mig_capable:
            out += (
                f"Unable to {word} MIG Mode for GPU {g.nvml_bus_id}: Not Supported\n"
                "Treating as warning and moving on.\n"
            )
            continue
        g.state.mig_pending = enable
        if (g.model.mig_reset_required or drm_loaded) and g.state.mig_current != enable:
            out += (
                f"Warning: MIG mode is in pending {word} state for GPU {g.nvml_bus_id}:"
                "In use by another client\n"
                f"{g.nvml_bus_id} is currently being used by one or more other processes "
                "(e.g. CUDA application or a monitoring application such as another instance "
                "of nvidia-smi). Please first kill all processes using the device and retry the "
                "command or reboot the system to make MIG mode effective.\n"
            )
            continue
        g.state.mig_current = enable
        if not enable:
            g.state.gpu_instances.clear()
            g.state.compute_instances.clear()
        out += f"{'Enabled' if enable else 'Disabled'} MIG Mode for GPU {g.nvml_bus_id}\n"
    return Result(out + "All done.\n")


def _persistence(targets: list[GpuView], enable: bool) -> Result:
    out = ""
    for g in targets:
        g.state.persistence = enable
        word = "Enabled" if enable else "Disabled"
        out += f"{word} Legacy persistence mode for GPU {g.nvml_bus_id}.\n"
    return Result(out + "All done.\n")


def reset_gpu(g: GpuView) -> None:
    """What a GPU reset does: pending MIG mode applies, instances are gone."""
    g.state.mig_current = g.state.mig_pending
    g.state.gpu_instances.clear()
    g.state.compute_instances.clear()


def _reset(targets: list[GpuView]) -> Result:
    """`-r`: the named GPUs, or every GPU when none is named (nothing uses a simulated GPU)."""
    out = ""
    for g in targets:
        reset_gpu(g)
        out += f"GPU {g.nvml_bus_id} was successfully reset.\n"
    return Result(out + "All done.\n")


def _mig(args: Args, targets: list[GpuView]) -> Result:
    o = args.options
    listings: dict[str, Callable[[Sequence[GpuView]], str]] = {
        "-lgip": mig.list_gi_profiles,
        "--list-gpu-instance-profiles": mig.list_gi_profiles,
        "-lgipp": mig.list_gi_placements,
        "--list-gpu-instance-possible-placements": mig.list_gi_placements,
        "-lgi": mig.list_gpu_instances,
        "--list-gpu-instances": mig.list_gpu_instances,
        "-lci": mig.list_compute_instances,
        "--list-compute-instances": mig.list_compute_instances,
        "-lcip": mig.list_ci_profiles,
        "--list-compute-instance-profiles": mig.list_ci_profiles,
    }
    for flag, lister in listings.items():
        if flag in o:
            return Result(lister(targets))
    out = ""
    try:
        if "-cgi" in o:
            for g in targets:
                for token in o["-cgi"].split(","):
                    gi = mig.create_gpu_instance(g, token)
                    p = mig.profile_of(g, gi)
                    out += (
                        f"Successfully created GPU instance ID {gi.id:>2} on GPU {g.index:>2} "
                        f"using profile MIG {p.name} (ID {p.id:>2})\n"
                    )
                    if "-C" in o:
                        ci, c = mig.create_compute_instance(g, gi, None)
                        out += (
                            f"Successfully created compute instance ID {ci.id:>2} on GPU "
                            f"{g.index:>2} GPU instance ID {gi.id:>2} using profile MIG "
                            f"{c.name} (ID {c.id:>2})\n"
                        )
            return Result(out)
        if "-dgi" in o:
            gi_spec = o.get("-gi") or o["-dgi"]
            for g in targets:
                instances = (
                    [mig.gpu_instance(g, int(x)) for x in gi_spec.split(",")]
                    if gi_spec
                    else list(g.state.gpu_instances)
                )
                for gi in sorted(instances, key=lambda i: i.id):
                    mig.destroy_gpu_instance(g, gi)
                    out += (
                        f"Successfully destroyed GPU instance ID {gi.id:>2} from GPU {g.index:>2}\n"
                    )
            if not out:
                return Result("", "No GPU instances found: Not Found\n", 6)
            return Result(out)
        if "-cci" in o:
            ids = [int(x) for x in o["-cci"].split(",")] if o["-cci"] else [None]
            for g in targets:
                gis = (
                    [mig.gpu_instance(g, int(x)) for x in o["-gi"].split(",")]
                    if o.get("-gi")
                    else list(g.state.gpu_instances)
                )
                for gi in gis:
                    for profile_id in ids:
                        ci, c = mig.create_compute_instance(g, gi, profile_id)
                        out += (
                            f"Successfully created compute instance ID {ci.id:>2} on GPU "
                            f"{g.index:>2} GPU instance ID {gi.id:>2} using profile MIG "
                            f"{c.name} (ID {c.id:>2})\n"
                        )
            return Result(out)
        if "-dci" in o:
            ci_spec = o.get("-ci") or o["-dci"]
            gi_filter = {int(x) for x in o["-gi"].split(",")} if o.get("-gi") else None
            for g in targets:
                for ci in sorted(g.state.compute_instances, key=lambda c: (c.gpu_instance, c.id)):
                    if gi_filter is not None and ci.gpu_instance not in gi_filter:
                        continue
                    if ci_spec and ci.id not in {int(x) for x in ci_spec.split(",")}:
                        continue
                    g.state.compute_instances.remove(ci)
                    out += (
                        f"Successfully destroyed compute instance ID {ci.id:>2} from GPU "
                        f"{g.index:>2} GPU instance ID {ci.gpu_instance:>2}\n"
                    )
            if not out:
                return Result("", "No compute instances found: Not Found\n", 6)
            return Result(out)
    except mig.MigError as exc:
        return Result(out, f"{exc}\n", exc.code)
    return Result("", BAD_ARGS, 2)


def run_loaded(host: Host, argv: Sequence[str], driver: Driver) -> Result:
    args = parse(argv)
    o = args.options
    all_gpus = gpus(host.profile, host.state)
    try:
        targets = _select(all_gpus, o.get("-i", o.get("--id")))
    except LookupError:
        return Result("", "No devices were found\n", 6)
    if args.words[:1] == ["topo"]:
        return (
            Result(smi_links.topo(all_gpus, host.profile)) if "-m" in o else Result("", BAD_ARGS, 2)
        )
    if args.words[:1] == ["nvlink"]:
        if "-s" in o or "--status" in o:
            return Result(smi_links.nvlink_status(targets))
        if "-e" in o or "--error-counters" in o:
            return Result(smi_links.nvlink_errors(targets))
        return Result("", BAD_ARGS, 2)
    if args.words[:1] == ["mig"]:
        return _mig(args, targets)
    if args.words:
        return Result("", BAD_ARGS, 2)
    if "--version" in o:
        return Result(smi_basic.version(driver))
    if "-L" in o or "--list-gpus" in o:
        return Result(smi_basic.list_gpus(targets))
    if "--query-gpu" in o:
        fmt = o.get("--format", "")
        parts = fmt.split(",")
        if "csv" not in parts:
            return Result("", "Please specify the format with --format=csv\n", 2)
        try:
            return Result(
                smi_basic.query(
                    [f.strip() for f in o["--query-gpu"].split(",") if f.strip()],
                    targets,
                    driver,
                    header="noheader" not in parts,
                    units="nounits" not in parts,
                )
            )
        except smi_basic.QueryError as exc:
            return Result("", f"{exc}\n", 2)
    if "--query-compute-apps" in o:
        parts = o.get("--format", "").split(",")
        if "csv" not in parts:
            return Result("", "Please specify the format with --format=csv\n", 2)
        try:
            return Result(
                jobs.query(
                    [f.strip() for f in o["--query-compute-apps"].split(",") if f.strip()],
                    jobs.live_jobs(host.paths),
                    targets,
                    header="noheader" not in parts,
                    units="nounits" not in parts,
                )
            )
        except jobs.QueryError as exc:
            return Result("", f"{exc}\n", 2)
    if "-q" in o or "--query" in o:
        # only -q shows the fabric (a `systemctl is-active` on NVSwitch profiles)
        fabric = fabric_state(host.profile, host.state, host.paths)
        if "-x" in o or "--xml-format" in o:
            return Result(smi_full.xml(targets, driver, fabric))
        display = [
            d.strip().upper() for d in o.get("-d", o.get("--display", "")).split(",") if d.strip()
        ]
        try:
            return Result(smi_full.text(targets, driver, fabric, display))
        except smi_full.DisplayError as exc:
            return Result("", f"{exc}\n", 2)
    for flag in ("-pm", "--persistence-mode"):
        if flag in o:
            if o[flag] not in ("0", "1", "ENABLED", "DISABLED"):
                return Result("", BAD_ARGS, 2)
            return _persistence(targets, o[flag] in ("1", "ENABLED"))
    for flag in ("-mig", "--multi-instance-gpu"):
        if flag in o:
            if o[flag] not in ("0", "1", "ENABLED", "DISABLED"):
                return Result("", BAD_ARGS, 2)
            enable = o[flag] in ("1", "ENABLED")
            return _mig_mode(targets, enable, "nvidia_drm" in host.state.loaded_modules)
    if "-r" in o or "--gpu-reset" in o:
        return _reset(targets)
    if not o:
        return Result(smi_basic.table(targets, driver))
    return Result("", BAD_ARGS, 2)


def run(argv: Sequence[str]) -> Result:
    with host_session() as host:
        paths = host.paths
        if not drv.smi_package_installed(paths):
            return Result("", "nvidia-smi: command not found\n", 127)
        if not host.state.driver_loaded:
            return Result(NO_DRIVER, "", 9)
        nvml = drv.nvml_version(paths)
        if nvml is not None and nvml != host.state.loaded_version:
            short = ".".join(nvml.split(".")[:2])
            return Result(
                f"Failed to initialize NVML: Driver/library version mismatch\n"
                f"NVML library version: {short}\n",
                "",
                18,
            )
        version = host.state.loaded_version
        return run_loaded(host, argv, Driver(version, drv.cuda_version(version)))


def main(argv: Sequence[str] | None = None) -> int:
    result = run(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(result.out)
    sys.stderr.write(result.err)
    return result.code
