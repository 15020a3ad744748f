"""Run the GPU check payload in a container, and turn container-runtime errors into diagnoses.

The container gets every GPU (`--gpus all`, or the CDI device `nvidia.com/gpu=all`), the
host's IPC namespace for NCCL's shared memory (`--ipc=host`; a large `--shm-size` where the
host namespace is not allowed), unlimited locked memory, the payload directory mounted
read-only, no network (the checks need none; NCCL bootstraps over loopback), and a timeout
around the whole `docker run`.

It can never outlive the validation: `--init` (tini as PID 1 forwards SIGTERM; python3 as
PID 1 would ignore it), a unique name and the label `gpuprov.validation` with its deadline,
and the staging script removes it on every exit path (`docker rm -f` from an EXIT trap, also
after a timeout, Ctrl-C or a failure); a container of an earlier validation whose deadline has
passed is reported and removed before the next one starts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

DeviceMode = Literal["gpus", "cdi", "none"]
PAYLOAD_MOUNT = "/gpuprov"
TIMEOUT_EXIT = 124  # coreutils timeout(1)
# NCCL pins host memory; NVIDIA's PyTorch images ask for these limits.
DEFAULT_ULIMITS: tuple[str, ...] = ("memlock=-1", "stack=67108864")
LABEL = "gpuprov.validation"
UNTIL_LABEL = "gpuprov.validation.until"  # epoch seconds after which it is a leftover
NAME_PREFIX = "gpuprov-validate-"


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    payload_dir: str  # on the host; holds gpucheck.pyz and spec.json
    devices: DeviceMode = "gpus"  # "none": no GPUs (plumbing tests only)
    ipc_host: bool = True
    shm_size: str = "16g"  # used only when ipc_host is False
    timeout_s: int = 300
    env: Mapping[str, str] | None = None
    python: str = "python3"
    ulimits: tuple[str, ...] = DEFAULT_ULIMITS
    name: str = ""  # "" : no name (plumbing tests); validation always names its container
    until: str = ""  # the UNTIL_LABEL value (a shell expression is fine: "$until")
    network: str = "none"


def docker_run_argv(spec: ContainerSpec, docker: str = "docker") -> list[str]:
    """The `timeout ... docker run` command line for the payload (no shell needed)."""
    argv = ["timeout", "--kill-after=10", str(spec.timeout_s), docker, "run", "--rm", "--init"]
    if spec.name:
        argv += ["--name", spec.name, "--label", f"{LABEL}=1"]
        if spec.until:
            argv += ["--label", f"{UNTIL_LABEL}={spec.until}"]
    if spec.network:
        argv += ["--network", spec.network]
    if spec.devices == "gpus":
        argv += ["--gpus", "all"]
    elif spec.devices == "cdi":
        argv += ["--device", "nvidia.com/gpu=all"]
    argv += ["--ipc=host"] if spec.ipc_host else [f"--shm-size={spec.shm_size}"]
    for limit in spec.ulimits:
        argv += ["--ulimit", limit]
    argv += ["-v", f"{spec.payload_dir}:{PAYLOAD_MOUNT}:ro"]
    for key, value in sorted((spec.env or {}).items()):
        argv += ["-e", f"{key}={value}"]
    argv += ["--entrypoint", spec.python, spec.image]
    argv += [f"{PAYLOAD_MOUNT}/gpucheck.pyz", "--spec", f"{PAYLOAD_MOUNT}/spec.json"]
    return argv


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    fix: str

    def text(self) -> str:
        return f"{self.cause}; fix: {self.fix}"


# (pattern in the runtime's stderr, cause, fix): first match wins, most specific first.
_KNOWN: Sequence[tuple[re.Pattern[str], str, str]] = tuple(
    (re.compile(p, re.IGNORECASE), cause, fix)
    for p, cause, fix in (
        (
            r"could not select device driver .* with capabilities: \[\[gpu\]\]",
            "Docker has no NVIDIA GPU support: the NVIDIA Container Toolkit is missing, or "
            "Docker was not restarted after it was configured",
            "install nvidia-container-toolkit, run `nvidia-ctk runtime configure "
            "--runtime=docker` and `systemctl restart docker` (provision apply does this)",
        ),
        (
            r"unknown or invalid runtime name: nvidia",
            "Docker's daemon.json does not define the `nvidia` runtime",
            "run `nvidia-ctk runtime configure --runtime=docker` and restart Docker",
        ),
        (
            r"unresolvable CDI devices|CDI device injection failed",
            "no CDI specification lists nvidia.com/gpu=all",
            "run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (again after each "
            "driver change), or use --gpus all",
        ),
        (
            r"error gathering device information while adding custom device \"nvidia\.com/gpu",
            "this Docker does not understand CDI device names (needs Docker >= 25 with CDI "
            "enabled)",
            "use `--gpus all` (gpuprov's default) or upgrade Docker and enable the "
            "`cdi` feature in daemon.json",
        ),
        (
            r"nvidia-container-cli: requirement error: unsatisfied condition: cuda>=(?P<need>\S+)",
            "the image needs a newer CUDA than the host driver supports (driver too old)",
            "upgrade the driver branch, or use an image built for the host's CUDA version "
            "(nvidia-smi shows it)",
        ),
        (
            r"nvidia-container-cli: initialization error: (?:nvml error: driver not loaded|"
            r"load library failed: libnvidia-ml)",
            "the NVIDIA driver is not installed or not loaded on the host",
            "install the driver (provision apply) and load it (reboot, or modprobe nvidia); "
            "nvidia-smi must work on the host first",
        ),
        (
            r"nvidia-container-cli: .*driver/library version mismatch|"
            r"Driver/library version mismatch",
            "the loaded kernel module and the driver libraries differ (the driver was "
            "upgraded without a reboot)",
            "reboot the host (or unload and reload the nvidia modules)",
        ),
        (
            r"Failed to initialize NVML: Unknown Error",
            "the container lost access to the GPU device nodes (systemd reloaded the "
            "cgroup device rules under runc)",
            "use CDI (`nvidia-ctk cdi generate`, --device nvidia.com/gpu=all) or set "
            "`no-cgroups`/device rules per the toolkit's troubleshooting guide; restart "
            "the container",
        ),
        (
            r"error setting rlimit",
            "the container runtime may not raise the locked-memory/stack limits (Docker "
            "running rootless or inside a container)",
            "run Docker as root on the host, or raise the limits for the Docker service "
            "(LimitMEMLOCK=infinity); NCCL needs pinned memory",
        ),
        (
            r"Cannot connect to the Docker daemon",
            "the Docker daemon is not running",
            "`systemctl start docker`, or validate with --runtime host",
        ),
        (
            r"pull access denied|manifest unknown|repository does not exist|"
            r"Unable to find image .* locally.*\n.*(error|denied|timeout)|"
            r"dial tcp .*(timeout|refused|no such host)",
            "the validation image is not on the host and could not be pulled",
            "pull it beforehand (`docker pull IMAGE`, or `docker load` on air-gapped hosts) "
            "or set the validation image to one the host has",
        ),
        (
            r"docker: command not found|docker: not found|No such file or directory.*docker|"
            r"executable file not found.*docker",
            "Docker is not installed on the host",
            "install the container runtime (provision apply) or validate with --runtime host",
        ),
        (
            r"exec: \"python3\": executable file not found|python3: not found|"
            r"starting container process caused: exec: \"python3\"",
            "the image has no python3, so the payload cannot run in it",
            "use a PyTorch image (it has python3 and torch)",
        ),
    )
)


# ---- the staging script's container part: leftovers, the image step, cleanup on every exit ----

IMAGE_MARK = "@@gpuprov-image@@"
LEFTOVER_MARK = "@@gpuprov-leftover@@"
BUSY_MARK = "@@gpuprov-busy@@"
EXIT_BUSY = 5
EXIT_PULL_TIMEOUT = 6
EXIT_PULL_FAILED = 7


def container_name(token: str) -> str:
    return f"{NAME_PREFIX}{token}"


def docker_script(run: str, *, name: str, image: str, timeout_s: int, pull_timeout_s: int) -> str:
    """sh lines (after the payload is staged in $d) that: remove leftover validation containers
    whose deadline passed (and stop if one is still within its deadline), make sure the image is
    there (its own step and timeout), run `run` in the background and wait for it, so that a
    signal reaches the trap at once; the EXIT trap removes the container and $d on every path."""
    q_name, q_image = shlex.quote(name), shlex.quote(image)
    fmt = shlex.quote(f'{{{{.Names}}}} {{{{.Label "{UNTIL_LABEL}"}}}} {{{{.Status}}}}')
    return "\n".join(
        [
            f"name={q_name}",
            f"until=$(( $(date +%s) + {timeout_s + 60} ))",
            "pid=",
            "cleanup() {",
            "  trap - EXIT INT TERM HUP",
            '  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; fi',
            '  docker rm -f "$name" >/dev/null 2>&1',
            '  rm -rf "$d"',
            "}",
            "trap cleanup EXIT",
            "trap 'exit 130' INT",
            "trap 'exit 143' TERM",
            "trap 'exit 129' HUP",
            "now=$(date +%s)",
            f"scan=$(docker ps -a --filter label={LABEL} --format {fmt} 2>/dev/null |"
            " while read -r n u st; do",
            "  case \"$u\" in ''|*[!0-9]*) u=0;; esac",
            '  case "$st" in Up*) up=1;; *) up=0;; esac',
            f'  if [ "$up" = 1 ] && [ "$u" -gt "$now" ]; then echo "{BUSY_MARK} $n $u"; '
            f'else echo "{LEFTOVER_MARK} $n"; docker rm -f "$n" >/dev/null 2>&1; fi',
            "done)",
            'if [ -n "$scan" ]; then printf \'%s\\n\' "$scan"; fi',
            f'case "$scan" in *{BUSY_MARK}*) exit {EXIT_BUSY};; esac',
            f"if docker image inspect {q_image} >/dev/null 2>&1; then echo '{IMAGE_MARK} present'",
            "else",
            f"  timeout --kill-after=5 {pull_timeout_s} docker pull {q_image} >&2; prc=$?",
            '  if [ "$prc" -eq 124 ] || [ "$prc" -eq 137 ]; then',
            f"    echo '{IMAGE_MARK} pull-timeout'; exit {EXIT_PULL_TIMEOUT}",
            '  elif [ "$prc" -ne 0 ]; then',
            f'    echo "{IMAGE_MARK} pull-failed $prc"; exit {EXIT_PULL_FAILED}',
            "  fi",
            f"  echo '{IMAGE_MARK} pulled'",
            "fi",
            f"{run} &",
            "pid=$!",
            'wait "$pid"; rc=$?',
            "pid=",
            "exit $rc",
            "",
        ]
    )


@dataclass(frozen=True)
class Staging:
    """What the container part of the staging script reported (its marker lines)."""

    image: str | None  # "present", "pulled", "pull-timeout", "pull-failed <rc>"; None: not run
    leftovers: tuple[str, ...]
    busy: tuple[str, ...]  # "name until-epoch" of validations still within their deadline


def parse_staging(stdout: str) -> Staging:
    image, leftovers, busy = None, [], []
    for line in stdout.splitlines():
        if line.startswith(IMAGE_MARK + " "):
            image = line[len(IMAGE_MARK) + 1 :].strip()
        elif line.startswith(LEFTOVER_MARK + " "):
            leftovers.append(line[len(LEFTOVER_MARK) + 1 :].strip())
        elif line.startswith(BUSY_MARK + " "):
            busy.append(line[len(BUSY_MARK) + 1 :].strip())
    return Staging(image, tuple(leftovers), tuple(busy))


def remove_script(name: str) -> str:
    """Run through a new connection when the first one was cut (Ctrl-C, the executor's timeout):
    the container must not keep the GPUs."""
    return f"docker rm -f {shlex.quote(name)} >/dev/null 2>&1 || true\n"


def diagnose(rc: int, stderr: str, *, timeout_s: int | None = None) -> Diagnosis | None:
    """A diagnosis for a failed `docker run` of the payload; None when nothing matches."""
    if rc == TIMEOUT_EXIT or rc == 128 + 9:
        limit = f" of {timeout_s} s" if timeout_s else ""
        return Diagnosis(
            f"the GPU checks did not finish within the timeout{limit} (a hang in CUDA or NCCL)",
            "run the payload by hand with NCCL_DEBUG=INFO; check nvidia-smi and the kernel "
            "log for Xid errors",
        )
    for pattern, cause, fix in _KNOWN:
        if m := pattern.search(stderr):
            need = m.groupdict().get("need")
            return Diagnosis(cause + (f" (the image needs CUDA {need})" if need else ""), fix)
    if rc == 127:
        return Diagnosis("a command was not found on the host (docker or timeout)", "install it")
    return None
