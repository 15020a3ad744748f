"""Validate one host: health checks from its facts, then the GPU payload where CUDA is.

`validate_host` is what `orchestrator.pipeline.run_validate` calls. It needs the host's facts
and raw outputs (from detection), the catalog and the policy, and an `Executor` that runs a
shell script on the host (SSH for real hosts, a local subprocess for `--runtime host` on the
machine itself). Without an executor only the health checks run. On simulated lab hosts the
checks that need CUDA are skipped with "simulated GPU", never passed.
"""

from __future__ import annotations

import base64
import io
import json
import secrets
import shlex
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, Protocol

from ..catalog import Catalog, GpuModel, ValidationFigure
from ..connection import (
    Become,
    BecomeFailed,
    ChannelClosed,
    become_handshake,
    become_words,
)
from ..facts import HostFacts
from ..parsers import names
from ..parsers._text import ParseError
from ..parsers.nccl_tests import parse_nccl_tests
from ..parsers.nvlink import parse_nvlink_status
from ..parsers.smi_list import parse_smi_list
from ..parsers.topo import topology_or_none
from ..policy import Policy
from ..result import SIMULATED, CheckResult, skipped
from . import container, dcgm, nccl, p2p
from .fabric import fabric_input, run_fabric
from .health import HealthLimits, health_input, load_limits, run_health

PAYLOAD = Path(__file__).with_name("payload") / "gpucheck"  # the package; shipped as a zipapp
# The zipapp's own __main__ (python -m zipapp semantics: a zip with __main__.py at its root).
# Guarded: multiprocessing's spawn re-runs it as __mp_main__ in every worker.
_ZIPAPP_MAIN = (
    "import sys\n\nfrom gpucheck.entry import main\n\n"
    'if __name__ == "__main__":\n    sys.exit(main())\n'
)
MARKER = "@@gpuprov-gpucheck@@"
Runtime = Literal["docker", "host"]
P2P = "p2p_bandwidth"  # the catalog figure for per-pair peer copies

# The checks the payload makes (all need CUDA): named here so that a host where the payload
# cannot run still lists each of them, as skipped, in the report.
CUDA_CHECKS: tuple[tuple[str, str], ...] = (
    ("cuda_available", ""),
    ("device_count", "GPUs"),
    ("cuda_build_vs_driver", ""),
    ("device_name", ""),
    ("compute_capability", ""),
    ("arch_list", ""),
    ("peer_access", ""),
    ("mig_devices", ""),
    ("gemm_bf16", "TFLOP/s"),
    ("gemm_bf16_correct", "rel. error"),
    ("fp8", ""),
    ("copy_d2d", "GB/s"),
    ("numa_binding", ""),
    ("copy_h2d", "GB/s"),
    ("p2p_copy", "GB/s"),
    ("nccl_allreduce", "GB/s"),
)
# catalog validation figure -> (payload floor key, factor from the catalog's unit)
_FLOORS: Mapping[str, tuple[str, Mapping[str, float]]] = {
    "bf16_gemm": ("gemm_bf16_tflops", {"TFLOP/s": 1.0}),
    "fp8_gemm": ("gemm_fp8_tflops", {"TFLOP/s": 1.0}),
    "d2d_copy_bandwidth": ("d2d_gbs", {"TB/s": 1000.0, "GB/s": 1.0}),
    # DCGM's memory-bandwidth floor, where no device-copy figure of our own exists (a looser
    # floor: it catches a badly degraded HBM, not a 10 % loss)
    "hbm_bandwidth": ("d2d_gbs", {"TB/s": 1000.0, "GB/s": 1.0}),
    "h2d_bandwidth": ("h2d_gbs", {"GB/s": 1.0}),
}


@dataclass(frozen=True)
class CommandOutput:
    rc: int
    stdout: str
    stderr: str


class Executor(Protocol):
    """Runs a POSIX sh script on the host (script on stdin) and returns its output."""

    def __call__(self, script: str, *, timeout: float) -> CommandOutput: ...


@dataclass(frozen=True)
class SubprocessExecutor:
    """`argv` + `sh -s`, script on stdin: `()` runs locally, `("sudo", "-n")` locally as
    root, an ssh command line (optionally ending in `sudo -n`) on that host. `become`: the
    host's sudo with a password (orchestrator/connection.py), answered on stdin before the
    script; `ssh`: `argv` is an ssh command line (the become command is quoted for it)."""

    argv: tuple[str, ...] = ()
    become: Become | None = None
    ssh: bool = False

    def __call__(self, script: str, *, timeout: float) -> CommandOutput:
        # sh -s traps TERM/INT and removes a running validation container; so on a timeout or
        # Ctrl-C it gets SIGTERM and a moment to clean up before SIGKILL.
        words = become_words(self.become)
        proc = subprocess.Popen(
            # ssh joins these into one remote command line
            [*self.argv, shlex.join(words)] if self.ssh else [*self.argv, *words],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        with _LIVE_LOCK:
            _LIVE.add(proc)
        out, err = b"", b""
        try:
            if self.become is not None and self.become.password is not None:
                start = time.monotonic()
                try:
                    out, err = become_handshake(proc, self.become, "", min(timeout, 30))
                except BecomeFailed as exc:
                    return CommandOutput(1, "", exc.message)
                except ChannelClosed as exc:
                    return CommandOutput(255, "", exc.stderr)
                timeout = max(1.0, timeout - (time.monotonic() - start))
            more, more_err = proc.communicate(script.encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            rest, rest_err = _wind_down(proc)
            return CommandOutput(124, _text(out) + rest, _text(err) + rest_err + "\n(timed out)")
        except KeyboardInterrupt:
            _wind_down(proc)
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
        return CommandOutput(proc.returncode, _text(out + more), _text(err + more_err))


# Validations run in worker threads (one per host); Ctrl-C reaches only the main thread, which
# calls interrupt_running(): every running script gets SIGTERM (its trap removes the container)
# and each run_payload then removes its container once more through a new connection.
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()
INTERRUPTED = threading.Event()


def interrupt_running() -> None:
    INTERRUPTED.set()
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        proc.terminate()


def _wind_down(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> tuple[str, str]:
    proc.terminate()
    try:
        out, err = proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return _text(out), _text(err)


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


@dataclass(frozen=True)
class Target:
    """What the payload is asked to check on one host (pure: from facts, catalog, policy)."""

    model: GpuModel | None
    ranks: int
    spec: Mapping[str, Any]
    figures: tuple[ValidationFigure, ...]  # the all-reduce figures that apply
    nvlinks: Mapping[tuple[int, int], int] = field(default_factory=dict)  # topo -m NV# pairs
    p2p_floor: ValidationFigure | None = None


def gpu_model(facts: HostFacts, catalog: Catalog) -> GpuModel | None:
    """The catalog model of the host's GPUs (the first GPU's; hosts are homogeneous)."""
    for dev in facts.gpus:
        model = catalog.gpu(dev.device_id)
        if model is not None:
            return model
    return None


def payload_target(
    facts: HostFacts,
    raw: Mapping[str, str],
    catalog: Catalog,
    policy: Policy,
    *,
    nvls: bool = False,
    nccl_tests: bool = False,
    timeout_s: int = 300,
    deadline_margin_s: int = 45,
) -> Target:
    model = gpu_model(facts, catalog)
    expected = policy["gpuprov_validation_expected_gpus"] or len(facts.gpus) or len(facts.smi_gpus)
    mig = _mig_devices(raw)
    topo = raw.get(names.SMI_TOPO)
    figures = nccl.floor_figures(model, expected, nvls)
    floors: dict[str, float] = {}
    ordered = sorted(model.validation if model else (), key=lambda f: f.check == "hbm_bandwidth")
    for fig in ordered:
        if fig.check in _FLOORS:
            key, units = _FLOORS[fig.check]
            if fig.unit in units and key not in floors:
                floors[key] = round(
                    fig.limit(catalog.validation_floor_fraction) * units[fig.unit], 3
                )
    names_seen = {g.name for g in facts.smi_gpus}
    spec: dict[str, Any] = {
        "host": facts.host,
        "expected_count": expected,
        "expected_name": names_seen.pop() if len(names_seen) == 1 else None,
        "expected_cc": model.compute_capability if model else None,
        "fp8": bool(model and model.fp8),
        "nvlink": _has_nvlink(raw),
        "mig_devices": mig,
        "floors": floors,
        "allreduce": {
            "enabled": policy["gpuprov_validation_nccl"]
            and expected > 1
            and not mig
            and not nccl_tests,
            "min_bytes": 1 << 20,
            "max_bytes": nccl.sweep_max_bytes(figures),
            "factor": 4,
            "iters": 20,
            "warmup": 5,
        },
        "p2p": {"enabled": expected > 1 and not mig, "bytes": 256 << 20, "iters": 5},
        "numa": numa_affinity(topo),
        "timeout_s": timeout_s,
        # The payload's own deadline ends well before the outer kill, so that a hang is
        # reported by the payload (every finished check, the stuck GPU and phase), not lost.
        "deadline_s": max(30, timeout_s - deadline_margin_s),
    }
    p2p_floor = next((f for f in (model.validation if model else ()) if f.check == P2P), None)
    return Target(model, expected, spec, figures, p2p.nvlink_pairs(topo), p2p_floor)


def numa_affinity(topo_text: str | None) -> dict[str, dict[str, str | None]]:
    """GPU index -> its CPUs and NUMA node, from `nvidia-smi topo -m` (what each payload worker
    pins itself to before the host-to-device copies)."""
    topo = topology_or_none(topo_text)
    if topo is None:
        return {}
    return {
        gpu[3:]: {"cpus": topo.cpu_affinity.get(gpu), "node": topo.numa_affinity.get(gpu)}
        for gpu in topo.gpus
        if topo.cpu_affinity.get(gpu)
    }


def _mig_devices(raw: Mapping[str, str]) -> list[str]:
    if names.SMI_L not in raw:
        return []
    try:
        return [m.uuid for g in parse_smi_list(raw[names.SMI_L]) for m in g.mig_devices]
    except ParseError:
        return []


def _has_nvlink(raw: Mapping[str, str]) -> bool:
    if names.SMI_NVLINK_S not in raw:
        return False
    try:
        return any(g.links for g in parse_nvlink_status(raw[names.SMI_NVLINK_S]))
    except ParseError:
        return False


def choose_runtime(facts: HostFacts, policy: Policy, requested: str | None) -> Runtime:
    """--runtime, else policy; "auto": Docker where it runs with NVIDIA support, else host."""
    wanted = requested or policy["gpuprov_validation_runtime"]
    if wanted in ("docker", "host"):
        return "docker" if wanted == "docker" else "host"
    rt = facts.runtime
    gpu_ready = "nvidia" in rt.docker_runtimes or bool(rt.cdi_specs) or bool(rt.toolkit_version)
    return "docker" if rt.docker_active and gpu_ready else "host"


@cache
def payload_zipapp() -> bytes:
    """The payload package as one runnable zip (`python3 gpucheck.pyz --spec ...`), with
    fixed timestamps so the same sources give the same bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        files = [("__main__.py", _ZIPAPP_MAIN)] + [
            (f"gpucheck/{p.name}", p.read_text(encoding="utf-8"))
            for p in sorted(PAYLOAD.glob("*.py"))
        ]
        for name, text in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, text)
    return buf.getvalue()


def stage_script(spec: Mapping[str, Any], run: str) -> str:
    """A sh script that writes the payload (the zipapp, base64 in a here-document) and its
    spec to a private temp dir, then runs `run` (which refers to that dir as $d), and removes
    the dir."""
    payload = base64.encodebytes(payload_zipapp()).decode("ascii")
    return "\n".join(
        [
            "set -eu",
            'd=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-validate.XXXXXX")',
            "trap 'rm -rf \"$d\"' EXIT",
            "base64 -d > \"$d/gpucheck.pyz\" <<'GPUPROV_PAYLOAD_EOF'",
            payload.rstrip("\n"),
            "GPUPROV_PAYLOAD_EOF",
            "cat > \"$d/spec.json\" <<'GPUPROV_SPEC_EOF'",
            json.dumps(spec, indent=1),
            "GPUPROV_SPEC_EOF",
            'chmod 0755 "$d"; chmod 0644 "$d/gpucheck.pyz" "$d/spec.json"',
            "set +e",
            run,
            "rc=$?",
            "exit $rc",
            "",
        ]
    )


def host_command(python: str = "python3") -> str:
    env = " ".join(f"{k}={v}" for k, v in nccl.NVLS_OFF_ENV.items())
    return f'env {env} {python} "$d/gpucheck.pyz" --spec "$d/spec.json"'


def docker_command(
    image: str,
    devices: container.DeviceMode,
    timeout_s: int,
    ulimits: tuple[str, ...] = container.DEFAULT_ULIMITS,
    *,
    name: str = "",
) -> str:
    spec = container.ContainerSpec(
        image=image,
        payload_dir="__GPUPROV_DIR__",
        devices=devices,
        timeout_s=timeout_s,
        env=nccl.NVLS_OFF_ENV,
        ulimits=ulimits,
        name=name,
        until="__GPUPROV_UNTIL__" if name else "",
    )
    line = shlex.join(container.docker_run_argv(spec))
    return line.replace("__GPUPROV_DIR__", '"$d"').replace("__GPUPROV_UNTIL__", '"$until"')


def parse_payload_output(stdout: str) -> dict[str, Any] | None:
    """The framed JSON document from the payload's stdout; None when absent or broken."""
    begin, end = f"{MARKER} begin\n", f"\n{MARKER} end"
    if begin not in stdout or end not in stdout:
        return None
    body = stdout.split(begin, 1)[1].split(end, 1)[0]
    try:
        doc = json.loads(body)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def judge_payload(
    doc: Mapping[str, Any], target: Target, catalog: Catalog, *, host: str
) -> list[CheckResult]:
    """The payload's own results, plus the all-reduce sweep judged against the floors."""
    results = []
    for item in doc.get("results", []):
        try:
            results.append(CheckResult.from_dict(item))
        except (KeyError, ValueError) as exc:
            results.append(
                CheckResult("payload_output", "fail", str(item)[:120], None, "", str(exc))
            )
    if target.spec["allreduce"]["enabled"]:
        ranks = int(doc.get("ranks") or 0)
        if ranks > 1:
            try:
                points = nccl.points_from_payload(doc.get("sweep", []))
            except (KeyError, ValueError) as exc:
                points = ()
                results.append(CheckResult("payload_output", "fail", None, None, "", str(exc)))
            figures = nccl.floor_figures(target.model, ranks, False)
            results += nccl.check_allreduce(
                points,
                ranks,
                figures,
                catalog.validation_floor_fraction,
                host=host,
                source="torch.distributed sweep",
            )
    if int(doc.get("version") or 0) < 2 and int(doc.get("ranks") or 0) > 1:
        results.append(
            skipped(
                "p2p_copy", "payload version 1 (a recording) measured no peer copies", unit="GB/s"
            )
        )
    elif target.spec.get("p2p", {}).get("enabled") and int(doc.get("ranks") or 0) > 1:
        try:
            pairs = p2p.pairs_from_payload(doc.get("p2p", []))
        except (KeyError, ValueError) as exc:
            pairs = ()
            results.append(CheckResult("payload_output", "fail", None, None, "", str(exc)))
        if not any(r.name == "p2p_copy" for r in results):  # the payload reports a hang itself
            fig = target.p2p_floor
            results += p2p.check_p2p(
                pairs,
                int(doc.get("ranks") or 0),
                target.nvlinks,
                fig.limit(catalog.validation_floor_fraction) if fig else None,
                host=host,
                floor_source=fig.source if fig else "",
            )
    return results


def _not_run(reason: str) -> list[CheckResult]:
    return [skipped(name, reason, unit=unit) for name, unit in CUDA_CHECKS]


def run_payload(
    execute: Executor,
    target: Target,
    catalog: Catalog,
    *,
    host: str,
    runtime: Runtime,
    image: str,
    devices: container.DeviceMode = "gpus",
    timeout_s: int = 300,
    ulimits: tuple[str, ...] = container.DEFAULT_ULIMITS,
    pull_timeout_s: int = 900,
    token: str | None = None,
) -> list[CheckResult]:
    """Stage the payload on the host, run it (container or host python3), judge the output."""
    name = container.container_name(token or secrets.token_hex(6))
    if runtime == "docker":
        run = docker_command(image, devices, timeout_s, ulimits, name=name)
        script = stage_script(
            target.spec,
            container.docker_script(
                run, name=name, image=image, timeout_s=timeout_s, pull_timeout_s=pull_timeout_s
            ),
        )
        outer = timeout_s + pull_timeout_s + 60
    else:
        script = stage_script(target.spec, f"timeout --kill-after=10 {timeout_s} {host_command()}")
        outer = timeout_s + 60
    try:
        out = execute(script, timeout=outer)
        if INTERRUPTED.is_set():  # Ctrl-C in the main thread while this host ran
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        if runtime == "docker":  # the first connection is gone: make sure of it from a new one
            execute(container.remove_script(name), timeout=60)
        raise
    if runtime == "docker" and out.rc == container.TIMEOUT_EXIT and "(timed out)" in out.stderr:
        execute(container.remove_script(name), timeout=60)
    before: list[CheckResult] = []
    if runtime == "docker":
        before, stop = _staging_results(
            container.parse_staging(out.stdout), out, host, image, pull_timeout_s
        )
        if stop:
            return before
    doc = parse_payload_output(out.stdout)
    if doc is None:
        diag = container.diagnose(out.rc, out.stderr, timeout_s=timeout_s)
        last = next((ln for ln in reversed(out.stderr.strip().splitlines()) if ln.strip()), "")
        where = "in the container" if runtime == "docker" else "on the host"
        text = (
            f"{host}: {diag.text()}"
            if diag
            else f"{host}: the GPU check payload failed {where} (exit {out.rc}): {last[:300]}"
        )
        return [*before, CheckResult("gpu_payload", "fail", f"exit {out.rc}", "exit 0", "", text)]
    return before + judge_payload(doc, target, catalog, host=host)


def _staging_results(
    staged: container.Staging, out: CommandOutput, host: str, image: str, pull_timeout_s: int
) -> tuple[list[CheckResult], bool]:
    """The container steps before the payload: leftovers, another validation, the image.
    Returns the results and whether the payload could not run because of them."""
    results = []
    if staged.leftovers:
        results.append(
            CheckResult(
                "leftover_container",
                "warn",
                len(staged.leftovers),
                0,
                "containers",
                f"{host}: removed {len(staged.leftovers)} leftover gpuprov validation "
                f"container(s) past their deadline ({', '.join(staged.leftovers)}): an earlier "
                "validation was cut off and its container kept the GPUs",
            )
        )
    elif staged.image is not None or staged.busy:
        results.append(CheckResult("leftover_container", "pass", 0, 0, "containers"))
    if staged.busy:
        results.append(
            CheckResult(
                "validation_busy",
                "fail",
                ", ".join(staged.busy),
                "no other validation",
                "",
                f"{host}: another gpuprov validation is running here (container, deadline "
                f"epoch: {', '.join(staged.busy)}); wait for it to end, or remove it with "
                "docker rm -f if it is not yours",
            )
        )
        return results, True
    if staged.image is None:
        return results, False  # the script stopped earlier; the payload's diagnosis says why
    if staged.image == "pull-timeout":
        results.append(
            CheckResult(
                "validation_image",
                "fail",
                "pull timed out",
                f"{pull_timeout_s} s",
                "",
                f"{host}: image pull timed out after {pull_timeout_s} s ({image}); not a GPU "
                "problem: pull it beforehand (docker pull, or docker load on air-gapped hosts), "
                "or raise validation_image_pull_timeout_s",
            )
        )
        return results, True
    if staged.image.startswith("pull-failed"):
        diag = container.diagnose(0, out.stderr)
        results.append(
            CheckResult(
                "validation_image",
                "fail",
                staged.image,
                "present or pulled",
                "",
                f"{host}: "
                + (diag.text() if diag else f"the validation image {image} could not be pulled"),
            )
        )
        return results, True
    results.append(CheckResult("validation_image", "pass", staged.image, "present or pulled", ""))
    return results, False


def run_nccl_tests(
    execute: Executor, target: Target, catalog: Catalog, *, host: str, timeout_s: int = 300
) -> list[CheckResult]:
    """nccl-tests' all_reduce_perf on the host (where installed) instead of our sweep."""
    max_bytes = int(target.spec["allreduce"]["max_bytes"])
    cmd = nccl.nccl_tests_command(target.ranks, max_bytes)
    out = execute(f"timeout {timeout_s} {cmd}\n", timeout=timeout_s + 30)
    if out.rc == 127 or "not found" in out.stderr:
        return [
            CheckResult(
                "nccl_allreduce",
                "fail",
                "absent",
                "all_reduce_perf",
                "",
                f"{host}: all_reduce_perf is not on the host's PATH; install nccl-tests or "
                "validate with the built-in torch.distributed sweep",
            )
        ]
    result = parse_nccl_tests(out.stdout)
    return nccl.check_nccl_tests(
        result, target.ranks, target.figures, catalog.validation_floor_fraction, host=host
    )


def validate_host(
    facts: HostFacts,
    raw: Mapping[str, str],
    *,
    catalog: Catalog,
    policy: Policy,
    execute: Executor | None = None,
    runtime: str | None = None,
    image: str | None = None,
    use_nccl_tests: bool = False,
    limits: HealthLimits | None = None,
    progress: Callable[[str], None] | None = None,
    dcgm_level: int | None = None,
) -> list[CheckResult]:
    """Every validation check for one host: health first, then the CUDA checks, then (with
    `dcgm_level`) NVIDIA DCGM's `dcgmi diag -r N` (orchestrator/validate/dcgm.py).

    runtime: "docker" | "host" | None (policy's gpuprov_validation_runtime, "auto").
    image: the container image for --runtime docker (default: limits.yaml's).
    progress: told, as it happens, what this host's validation is doing (a line of text).
    """
    say = progress or (lambda _msg: None)
    results = _own_checks(
        facts, raw, catalog, policy, execute, runtime, image, use_nccl_tests, limits, say
    )
    if dcgm_level is None:
        return results
    if execute is None:
        return [*results, skipped(dcgm.RUN_CHECK, "not run: no connection to the host")]
    say(f"DCGM diag level {dcgm_level}, deadline {dcgm.diag_command(dcgm_level)[1]:.0f} s")
    found = dcgm.run_dcgm(execute, facts, dcgm_level, simulated=facts.simulated)
    bad = [r.label for r in found if r.status == "fail"]
    say(
        f"DCGM: {len(found)} results, {len(bad)} failed"
        + (f" ({', '.join(bad[:4])})" if bad else "")
    )
    return [*results, *found]


def _own_checks(
    facts: HostFacts,
    raw: Mapping[str, str],
    catalog: Catalog,
    policy: Policy,
    execute: Executor | None,
    runtime: str | None,
    image: str | None,
    use_nccl_tests: bool,
    limits: HealthLimits | None,
    say: Callable[[str], None],
) -> list[CheckResult]:
    """gpuprov's own checks: health, then the GPU payload where CUDA is."""
    limits = limits or load_limits()
    health = run_health(
        health_input(
            facts, catalog, expected_gpus=policy["gpuprov_validation_expected_gpus"], limits=limits
        )
    )
    health += run_fabric(  # EFA / InfiniBand hosts only (validate/fabric.py)
        fabric_input(
            facts,
            expected_devices=policy["gpuprov_fabric_expected_devices"],
            instance_type=policy["gpuprov_fabric_instance_type"],
            link_rate_gbps=policy["gpuprov_fabric_link_rate_gbps"],
        )
    )
    bad = [r.label for r in health if r.status == "fail"]
    say(
        f"health checks: {len(health)} run, {len(bad)} failed"
        + (f" ({', '.join(bad[:4])})" if bad else "")
    )
    if facts.simulated:
        return health + _not_run(SIMULATED)
    if execute is None:
        return health + _not_run("not run: no connection to the host (health checks only)")
    if not facts.smi_gpus:
        return health + _not_run("not run: no working NVIDIA driver (see gpu_count)")
    target = payload_target(
        facts,
        raw,
        catalog,
        policy,
        nccl_tests=use_nccl_tests,
        timeout_s=limits.payload_timeout_s,
        deadline_margin_s=limits.payload_deadline_margin_s,
    )
    chosen = choose_runtime(facts, policy, runtime)
    where = f"container {image or limits.validation_image}" if chosen == "docker" else "host"
    say(f"GPU checks on {target.ranks} GPUs ({where}), deadline {target.spec['deadline_s']} s")
    results = run_payload(
        execute,
        target,
        catalog,
        host=facts.host,
        runtime=chosen,
        image=image or limits.validation_image,
        timeout_s=limits.payload_timeout_s,
        pull_timeout_s=limits.image_pull_timeout_s,
    )
    if use_nccl_tests and target.ranks > 1 and policy["gpuprov_validation_nccl"]:
        results += run_nccl_tests(
            execute, target, catalog, host=facts.host, timeout_s=limits.payload_timeout_s
        )
    bad = [r.label for r in results if r.status == "fail"]
    say(
        f"GPU checks: {len(results)} results, {len(bad)} failed"
        + (f" ({', '.join(bad[:4])})" if bad else "")
    )
    return health + results


__all__ = ["CommandOutput", "Executor", "SubprocessExecutor", "validate_host"]
