"""A test host's container: what `docker create` gets (pure, so the security-relevant
choices are unit-tested)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import keys

LAB_LABEL = "gpuprov.lab"


@dataclass(frozen=True)
class HostSpec:
    """Everything `docker create` needs for one test host."""

    lab: str
    name: str
    os: str
    profile: str
    port: int
    image: str
    network: str
    profile_file: Path
    gpusim_dir: Path | None
    # read-only bind mounts (this machine's path, the host's), e.g. the CPU PyTorch of the
    # multi-node lab (orchestrator/lab/torchdir.py)
    mounts: tuple[tuple[Path, str], ...] = ()
    # Docker's --cpu-shares (default 1024) when set: the host's weight for CPU when the
    # machine is busy (scripts/lab-tests.sh gives the groups off the critical path less)
    cpu_shares: int | None = None

    @property
    def labels(self) -> dict[str, str]:
        return {
            LAB_LABEL: self.lab,
            f"{LAB_LABEL}.host": self.name,
            f"{LAB_LABEL}.os": self.os,
            f"{LAB_LABEL}.profile": self.profile,
            f"{LAB_LABEL}.port": str(self.port),
        }

    @property
    def volumes(self) -> dict[str, str]:
        """Named volume -> mount point. /var/lib/docker: Docker runs inside (overlay2 needs a
        real file system, not the container's overlay); the PCI tree: the simulator's sysfs."""
        return {
            f"{self.name}-docker": "/var/lib/docker",
            f"{self.name}-pci": "/sys/bus/pci/devices",
        }


# What a test host (and the fleet benchmark's container) may do: every capability but loading
# modules into this machine's kernel, setting its clock, and SYS_RESOURCE (see create_args).
HOST_RIGHTS: tuple[str, ...] = (
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_MODULE",
    "--cap-drop",
    "SYS_TIME",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
)


def create_args(spec: HostSpec) -> list[str]:
    """`docker create` arguments for a test host (pure; the security-relevant part is tested).

    systemd runs as PID 1 with every capability except SYS_MODULE (a test host must never
    load a module, such as the nvidia.ko DKMS builds in there, into this machine's kernel),
    SYS_TIME (nor set this machine's clock) and SYS_RESOURCE (`--privileged` fails on
    this kind of machine). SSH is published on
    127.0.0.1 only. `--restart unless-stopped` brings the host back after `reboot` (systemd
    exits; Docker starts the same container again: same port, host keys and disk).
    """
    args = [
        "create",
        "--name",
        spec.name,
        "--hostname",
        spec.name,
        "--network",
        spec.network,
        "--publish",
        f"{keys.LOOPBACK}:{spec.port}:22",
        "--restart",
        "unless-stopped",
        "--stop-signal",
        "SIGRTMIN+3",
        *HOST_RIGHTS,
        "--cgroupns",
        "host",
        "--volume",
        "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "--tmpfs",
        "/tmp",
        "--volume",
        f"{spec.profile_file}:/etc/gpusim/profile.yaml:ro",
    ]
    for volume, target in spec.volumes.items():
        args += ["--volume", f"{volume}:{target}"]
    if spec.gpusim_dir is not None:
        args += ["--volume", f"{spec.gpusim_dir}:/opt/gpusim:ro"]
    for source, target in spec.mounts:
        args += ["--volume", f"{source}:{target}:ro"]
    if spec.cpu_shares is not None:
        args += ["--cpu-shares", str(spec.cpu_shares)]
    for key, value in sorted(spec.labels.items()):
        args += ["--label", f"{key}={value}"]
    return [*args, spec.image]
