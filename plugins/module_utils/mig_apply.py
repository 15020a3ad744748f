"""Apply a MIG layout on the GPU host itself (the mig role's tasks and its boot unit run this).

    gpuprov-mig --config /etc/gpuprov/mig.json check|apply    # as the mig role installs it
    python3 -m orchestrator.mig_cli --config ... check       # in a gpuprov checkout

`check` is read-only: it reads the GPUs' state, validates the selected layout against their
own `nvidia-smi mig -lgip` / `-lgipp` (orchestrator.mig), and prints what `apply` would do.
`apply` does it: stops GPU clients, switches MIG mode (GPU reset when the change is pending;
reboot only where the reset fails), destroys and re-creates GPU and compute instances where
they differ from the layout, starts the clients again and refreshes the CDI spec. Both print
one JSON object: {"changed", "actions", "reboot_required", "gpus"}.

Standard library only (plus mig.py, parsers/mig.py, parsers/_text.py and errors.py beside it
in the collection's module_utils), so the role can install it on hosts that have no gpuprov
(gpuprov.nvidia.mig_applier writes these files there as the package gpuprov_mig).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import GpuprovError, HostError
from .mig import GpuLayout, gpus_from_smi, parse_config, validate_layout
from .parsers.mig import (
    NOTHING_TO_LIST,
    ComputeInstanceRow,
    GpuInstanceRow,
    parse_lci,
    parse_lgi,
    parse_lgip,
    parse_lgipp,
)

# A command runner: argv -> (exit status, stdout and stderr together).
Runner = Callable[[Sequence[str]], tuple[int, str]]

QUERY = "index,name,pci.device_id,mig.mode.current,mig.mode.pending"


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    return done.returncode, done.stdout + done.stderr


@dataclass(frozen=True)
class GpuState:
    index: int
    name: str
    device_id: int | None
    mig_current: bool | None  # None: [N/A], the GPU has no MIG
    mig_pending: bool | None
    instances: tuple[GpuInstanceRow, ...] = ()
    compute: tuple[ComputeInstanceRow, ...] = ()


@dataclass(frozen=True)
class Options:
    layout: str
    config: Mapping[str, object]
    gpu_clients: tuple[str, ...] = ()
    stop_gpu_containers: bool = False
    cdi_refresh_unit: str = ""
    no_block: bool = False  # at boot: queue unit starts instead of waiting on them


@dataclass
class Outcome:
    changed: bool = False
    reboot_required: bool = False
    actions: list[str] = field(default_factory=list)
    gpus: list[dict[str, object]] = field(default_factory=list)


# --- reading the host -------------------------------------------------------------------


def _mode(text: str) -> bool | None:
    t = text.strip()
    return True if t == "Enabled" else False if t == "Disabled" else None


def parse_query(text: str) -> tuple[GpuState, ...]:
    """`nvidia-smi --query-gpu=QUERY --format=csv,noheader` rows."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 5 or not cells[0].isdigit():
            continue
        try:
            raw_id = int(cells[2], 16)
        except ValueError:
            raw_id = 0
        device_id = (raw_id >> 16 if raw_id > 0xFFFF else raw_id) or None
        out.append(GpuState(int(cells[0]), cells[1], device_id, _mode(cells[3]), _mode(cells[4])))
    return tuple(out)


def _smi(run: Runner, *args: str, host: str) -> str:
    rc, text = run(["nvidia-smi", *args])
    if rc != 0 and not any(n in text for n in NOTHING_TO_LIST):
        raise HostError(
            f"`nvidia-smi {' '.join(args)}` failed (exit {rc}): {text.strip()[:300]}",
            host=host,
            fix="check the driver is loaded (`nvidia-smi`), then re-run",
        )
    return "" if any(n in text for n in NOTHING_TO_LIST) else text


def read_state(run: Runner, host: str) -> dict[int, GpuState]:
    gpus = parse_query(_smi(run, f"--query-gpu={QUERY}", "--format=csv,noheader", host=host))
    if not any(g.mig_current for g in gpus):
        return {g.index: g for g in gpus}
    gis = parse_lgi(_smi(run, "mig", "-lgi", host=host), host=host)
    cis = parse_lci(_smi(run, "mig", "-lci", host=host), host=host)
    return {
        g.index: replace(
            g,
            instances=tuple(i for i in gis if i.gpu == g.index),
            compute=tuple(c for c in cis if c.gpu == g.index),
        )
        for g in gpus
    }


def desired_layouts(
    run: Runner, host: str, opts: Options, state: Mapping[int, GpuState]
) -> tuple[GpuLayout, ...]:
    """Validate the selected layout against the GPUs' own profiles and placements."""
    mig_gpus = [g for g in state.values() if g.mig_current is not None]
    lgip = lgipp = ""
    if mig_gpus:
        lgip = _smi(run, "mig", "-lgip", host=host)
        lgipp = _smi(run, "mig", "-lgipp", host=host)
    gpus = gpus_from_smi(
        parse_lgip(lgip, host=host),
        parse_lgipp(lgipp, host=host),
        {g.index: g.name for g in state.values()},
        {g.index: g.device_id for g in state.values() if g.device_id is not None},
    )
    return validate_layout(host, parse_config(opts.config, host=host), opts.layout, gpus)


# --- comparing --------------------------------------------------------------------------


def mode_converged(want: GpuLayout, have: GpuState) -> bool:
    if not want.mig_enabled:
        return not have.mig_current and not have.mig_pending
    return bool(have.mig_current) and bool(have.mig_pending)


def instances_converged(want: GpuLayout, have: GpuState) -> bool:
    """Same GPU instance profiles (as a multiset), each with one compute instance spanning it
    (`-C` creates that default one; a partial one is named "1c.3g.71gb", not "3g.71gb")."""
    if not want.mig_enabled:
        return True
    if sorted(i.name for i in have.instances) != sorted(i.profile for i in want.instances):
        return False
    for gi in have.instances:
        cis = [c for c in have.compute if c.gpu_instance_id == gi.instance_id]
        if len(cis) != 1 or cis[0].name != gi.name:
            return False
    return True


def create_argument(want: GpuLayout) -> str:
    """`-cgi` argument: profile ids with their solved placement start (`9:4,14:0`)."""
    parts = []
    for i in sorted(want.instances, key=lambda i: (-(i.size or 0), i.start or 0)):
        ref = str(i.profile_id) if i.profile_id is not None else i.profile
        parts.append(f"{ref}:{i.start}" if i.start is not None else ref)
    return ",".join(parts)


def planned_actions(want: GpuLayout, have: GpuState) -> list[str]:
    out: list[str] = []
    n = want.index
    if have.instances and (not want.mig_enabled or not instances_converged(want, have)):
        out.append(f"gpu {n}: destroy {len(have.instances)} GPU instances")
    if not mode_converged(want, have):
        out.append(f"gpu {n}: MIG mode {'on' if want.mig_enabled else 'off'}")
    if want.mig_enabled and not instances_converged(want, have):
        out.append(f"gpu {n}: create {create_argument(want)} with compute instances")
    return out


# --- changing ---------------------------------------------------------------------------


_IN_USE_FIX = "stop what still uses the GPU (`nvidia-smi` lists processes), then re-run"
# mig-parted#181: a loaded nvidia_drm keeps MIG mode from changing.
_MODE_FIX = (
    f"{_IN_USE_FIX}; if nvidia_drm is loaded (`lsmod | grep nvidia_drm`), unload it "
    "(`modprobe -r nvidia_drm`) or keep it from loading, then re-run"
)


def _must(
    run: Runner, host: str, argv: Sequence[str], outcome: Outcome, fix: str = _IN_USE_FIX
) -> None:
    rc, text = run(argv)
    outcome.actions.append(" ".join(argv))
    if rc != 0:
        raise HostError(
            f"`{' '.join(argv)}` failed (exit {rc}): {text.strip()[:300]}", host=host, fix=fix
        )


def _nb(opts: Options) -> list[str]:
    return ["--no-block"] if opts.no_block else []


def _gpu_containers(run: Runner) -> list[str]:
    rc, ids = run(["docker", "ps", "-q"])
    if rc != 0 or not ids.strip():
        return []  # no Docker, or not running (at boot the unit runs before it)
    fmt = "{{.Id}} {{.HostConfig.Runtime}} {{json .HostConfig.DeviceRequests}}"
    rc, text = run(["docker", "inspect", "--format", fmt, *ids.split()])
    return [
        line.split()[0][:12]
        for line in text.splitlines()
        if line.strip() and (" nvidia " in f" {line} " or '"nvidia"' in line or "gpu" in line)
    ]


def _stop_clients(run: Runner, host: str, opts: Options, outcome: Outcome) -> list[list[str]]:
    """Stop what holds the GPUs; return the commands that start them again."""
    restart: list[list[str]] = []
    for unit in opts.gpu_clients:
        if run(["systemctl", "is-active", "--quiet", unit])[0] == 0:
            _must(run, host, ["systemctl", "stop", unit], outcome)
            restart.append(["systemctl", "start", *_nb(opts), unit])
    containers = _gpu_containers(run)
    if containers and not opts.stop_gpu_containers:
        raise HostError(
            f"GPU containers are running ({', '.join(containers)}); a MIG change needs the GPUs",
            host=host,
            fix="stop them, or set mig_stop_gpu_containers: true to let the role stop them",
        )
    if containers:
        _must(run, host, ["docker", "stop", *containers], outcome)
        restart.append(["docker", "start", *containers])
    return restart


def _set_mode(run: Runner, host: str, want: GpuLayout, have: GpuState, out: Outcome) -> bool:
    """Switch MIG mode; reset the GPU if the change is pending. False: a reboot is needed."""
    n = str(want.index)
    if have.mig_pending != want.mig_enabled:
        mode = ["nvidia-smi", "-i", n, "-mig", "1" if want.mig_enabled else "0"]
        _must(run, host, mode, out, _MODE_FIX)
    now = read_state(run, host)[want.index]
    if now.mig_current == want.mig_enabled:
        return True
    rc, _unused = run(["nvidia-smi", "-i", n, "-r"])
    out.actions.append(f"nvidia-smi -i {n} -r" + ("" if rc == 0 else f" (failed, exit {rc})"))
    return rc == 0 and read_state(run, host)[want.index].mig_current == want.mig_enabled


def apply(run: Runner, host: str, opts: Options, *, dry_run: bool) -> Outcome:
    state = read_state(run, host)
    wanted = desired_layouts(run, host, opts, state)
    outcome = Outcome(
        gpus=[
            {"index": w.index, "counts": w.counts(), "create": create_argument(w)} for w in wanted
        ]
    )
    work = [w for w in wanted if planned_actions(w, state[w.index])]
    if dry_run or not work:
        outcome.changed = bool(work)
        outcome.actions = [a for w in work for a in planned_actions(w, state[w.index])]
        return outcome
    outcome.changed = True
    restart = _stop_clients(run, host, opts, outcome)
    try:
        for want in work:
            have = state[want.index]
            n = str(want.index)
            if have.instances:
                if have.compute:
                    _must(run, host, ["nvidia-smi", "mig", "-i", n, "-dci"], outcome)
                _must(run, host, ["nvidia-smi", "mig", "-i", n, "-dgi"], outcome)
            if not mode_converged(want, have) and not _set_mode(run, host, want, have, outcome):
                outcome.reboot_required = True
                continue
            if want.mig_enabled:
                cgi = ["nvidia-smi", "mig", "-i", n, "-cgi", create_argument(want), "-C"]
                _must(run, host, cgi, outcome)
    finally:
        for argv in restart:
            _must(run, host, argv, outcome)
    if opts.cdi_refresh_unit and run(["systemctl", "cat", opts.cdi_refresh_unit])[0] == 0:
        _must(run, host, ["systemctl", "restart", *_nb(opts), opts.cdi_refresh_unit], outcome)
    if not outcome.reboot_required:
        after = read_state(run, host)
        left = [a for w in wanted for a in planned_actions(w, after[w.index])]
        if left:
            raise HostError(
                f"MIG layout {opts.layout!r} still differs after apply: {'; '.join(left)}",
                host=host,
                fix="run `gpuprov-mig check` on the host and compare",
            )
    return outcome


def _read(path: str) -> Any:
    if path == "-":
        return json.load(sys.stdin)
    with open(path, encoding="utf-8") as fh:
        if not path.endswith((".yml", ".yaml")):
            return json.load(fh)
        import yaml  # only for files a person hands in; hosts get JSON from the role

        return yaml.safe_load(fh)


def load_options(path: str, *, layout: str | None = None, no_block: bool = False) -> Options:
    """The layout document the role writes (`-`: read it from stdin); or, with `layout`, a
    mig-parted file (`version: v1`, `mig-configs`) or a group_vars file with `mig_configs`
    (YAML needs PyYAML)."""
    doc = _read(path)
    if "mig-configs" in doc:
        doc = {"layout": layout, "config": doc}
    elif "mig_configs" in doc:
        doc = {"layout": layout, "config": {"version": "v1", "mig-configs": doc["mig_configs"]}}
    return Options(
        layout=str(layout or doc["layout"]),
        config=doc["config"],
        gpu_clients=tuple(doc.get("gpu_clients", ())),
        stop_gpu_containers=bool(doc.get("stop_gpu_containers", False)),
        cdi_refresh_unit=str(doc.get("cdi_refresh_unit", "")),
        no_block=no_block,
    )


@dataclass(frozen=True)
class CliOutcome:
    """What the gpuprov-mig command prints and its exit status. The command itself (print,
    exit) is orchestrator/mig_cli.py, written on hosts as gpuprov_mig/__main__.py by
    gpuprov.nvidia.mig_applier: Ansible's rules keep printing and exiting out of module_utils."""

    code: int
    stdout: str = ""
    stderr: str = ""


class _Done(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code, self.text = code, text


class _Parser(argparse.ArgumentParser):
    """argparse that hands its usage, help and errors back instead of printing and exiting."""

    def _print_message(self, message: str, file: Any = None) -> None:
        raise _Done(0, message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _Done(status, message or "")

    def error(self, message: str) -> Any:
        raise _Done(2, f"{self.format_usage()}{self.prog}: error: {message}\n")


def cli(argv: Sequence[str], run: Runner = run_command) -> CliOutcome:
    """The gpuprov-mig command: its arguments in, what it prints and its exit status out."""
    parser = _Parser(prog="gpuprov-mig", description=(__doc__ or "").split("\n", maxsplit=1)[0])
    parser.add_argument("--config", default="/etc/gpuprov/mig.json")
    parser.add_argument("--host", default=socket.gethostname(), help="name used in messages")
    parser.add_argument("--layout", help="layout name (overrides the file's)")
    parser.add_argument(
        "--no-block", action="store_true", help="queue unit starts (the boot unit uses this)"
    )
    parser.add_argument("command", choices=("check", "apply"))
    try:
        args = parser.parse_args(list(argv))
    except _Done as done:  # --help (stdout, 0) or a usage error (stderr, 2)
        return CliOutcome(done.code, *((done.text, "") if done.code == 0 else ("", done.text)))
    try:
        opts = load_options(args.config, layout=args.layout, no_block=args.no_block)
        outcome = apply(run, args.host, opts, dry_run=args.command == "check")
    except GpuprovError as exc:
        return CliOutcome(exc.exit_code, stderr=f"gpuprov-mig: error: {exc}\n")
    except (OSError, ValueError, KeyError, ImportError) as exc:
        return CliOutcome(2, stderr=f"gpuprov-mig: error: cannot read {args.config}: {exc}\n")
    return CliOutcome(0, stdout=json.dumps(outcome.__dict__, sort_keys=True) + "\n")
