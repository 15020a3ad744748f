"""Test hosts: systemd containers reached over SSH on 127.0.0.1 (up, status, down).

Docker labels are the lab's source of truth: every container, volume and network a lab
makes carries `gpuprov.lab=<name>`, so `down` removes exactly those and `status` needs no
state file. Keys, the inventory and the hosts' profile copies live in `.lab/<name>/`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import BadInputError, LabError
from . import (
    container,
    doubles,
    engine,
    images,
    keys,
    labinventory,
    labnetwork,
    sysctl,
)

REPO_ROOT = paths.SOURCE_ROOT  # the checkout, or the wheel's bundle (orchestrator/paths.py)
STATE_ROOT = paths.state_root()  # where the lab writes
LAB_LABEL = container.LAB_LABEL
DEFAULT_LAB = "gpuprov"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
# Generous: on a 2-core machine shared by many labs, a boot can take minutes.
SSH_WAIT_S = 300.0
APTREPO_DIR = REPO_ROOT / "tests" / "lab" / "aptrepo"

Say = Callable[[str], object]


@dataclass(frozen=True)
class LabPaths:
    """Where a lab keeps its files on this machine."""

    root: Path

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.ini"

    def host_dir(self, host: str) -> Path:
        return self.root / "hosts" / host

    def host_key(self, host: str) -> Path:
        return self.host_dir(host) / "ssh_host_ed25519_key"

    def profile(self, host: str) -> Path:
        return self.host_dir(host) / "profile.yaml"


@dataclass(frozen=True)
class LabHost:
    """A test host as `lab status` shows it."""

    name: str
    os: str
    profile: str
    port: int
    state: str


@dataclass(frozen=True)
class Removed:
    containers: tuple[str, ...]
    volumes: tuple[str, ...]
    networks: tuple[str, ...]


def lab_name(value: str | None) -> str:
    """The lab's name: the option, else $GPUPROV_LAB, else "gpuprov"; validated."""
    name = value or os.environ.get("GPUPROV_LAB") or DEFAULT_LAB
    if not NAME_RE.match(name):
        raise BadInputError(
            f"lab name {name!r} is not usable in container names",
            fix="use 1-31 lower-case letters, digits and dashes (e.g. --name driver)",
        )
    return name


def lab_paths(lab: str) -> LabPaths:
    base = Path(os.environ.get("GPUPROV_LAB_DIR") or STATE_ROOT / ".lab")
    return LabPaths(base / lab)


def host_names(lab: str, os_name: str, count: int) -> list[str]:
    """`<lab>-deb12-1`, ...: the lab's name keeps labs apart (container names, fact cache)."""
    short = os_name.replace("debian", "deb")
    return [f"{lab}-{short}-{i}" for i in range(1, count + 1)]


def resolve_profile(profile: str, profiles_dir: Path) -> Path:
    """A profile name (tests/lab/profiles/<name>.yaml) or a path to a profile file."""
    candidate = Path(profile)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate.resolve()
    by_name = profiles_dir / f"{profile}.yaml"
    if by_name.is_file():
        return by_name
    known = sorted(p.stem for p in profiles_dir.glob("*.yaml")) if profiles_dir.is_dir() else []
    raise BadInputError(
        f"no lab profile {profile!r} (looked for {candidate} and {by_name})",
        fix=f"use one of: {', '.join(known) or '(none found)'}, or a path to a profile YAML",
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now; the container keeps it for its whole life."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((keys.LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def ssh_command(paths: LabPaths, port: int, *command: str) -> list[str]:
    """An ssh command line to a test host with the lab's key and pinned known_hosts only."""
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=3",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={paths.known_hosts}",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
        str(paths.key),
        "-p",
        str(port),
        f"root@{keys.LOOPBACK}",
        *command,
    ]


def wait_for_ssh(paths: LabPaths, ports: Mapping[str, int], timeout: float = SSH_WAIT_S) -> None:
    """Return once every host runs a command over SSH; LabError naming the laggards if not,
    early when a host's container keeps exiting (systemd failing to boot)."""
    pending = dict(ports)
    restarts = _restart_counts(pending)
    deadline = time.monotonic() + timeout
    next_look = time.monotonic() + 5
    while pending:
        for host, port in list(pending.items()):
            proc = subprocess.run(
                ssh_command(paths, port, "true"), capture_output=True, timeout=30, check=False
            )
            if proc.returncode == 0:
                del pending[host]
        if not pending:
            return
        if time.monotonic() > next_look:
            next_look = time.monotonic() + 5
            for host, count in _restart_counts(pending).items():
                if count - restarts.get(host, 0) >= 2:
                    raise LabError(
                        f"{host} keeps exiting instead of booting ({count} restarts); last "
                        f"output: {engine.log_tail(host)}",
                        host=host,
                        fix=f"read `docker logs {host}`; `provision lab down` and retry",
                    )
        if time.monotonic() > deadline:
            names = ", ".join(sorted(pending))
            raise LabError(
                f"SSH did not answer within {timeout:.0f} s on {names}",
                fix=f"look at `docker logs {sorted(pending)[0]}`; `provision lab down` and retry",
            )
        time.sleep(0.5)


def _restart_counts(names: Iterable[str]) -> dict[str, int]:
    found = {c.name: c.restart_count for c in engine.containers({LAB_LABEL: ""})}
    return {name: found.get(name, 0) for name in names}


def to_lab_host(container: engine.Container) -> LabHost:
    labels = container.labels
    return LabHost(
        name=labels.get(f"{LAB_LABEL}.host", container.name),
        os=labels.get(f"{LAB_LABEL}.os", "?"),
        profile=labels.get(f"{LAB_LABEL}.profile", "?"),
        port=int(labels.get(f"{LAB_LABEL}.port", "0")),
        state=container.state,
    )


def status(lab: str) -> list[LabHost]:
    return [to_lab_host(c) for c in engine.containers({LAB_LABEL: lab})]


def _write_access(
    lab: str,
    paths: LabPaths,
    hosts: Sequence[LabHost],
    gateway: str,
    repo_vars: Mapping[str, object] | None,
) -> Path:
    """known_hosts (pinned host keys) and the inventory for every host of the lab."""
    entries = [
        keys.KnownHost(h.port, paths.host_key(h.name).with_suffix(".pub").read_text())
        for h in hosts
        if paths.host_key(h.name).with_suffix(".pub").exists()
    ]
    paths.known_hosts.write_text(keys.render_known_hosts(entries))
    return labinventory.write(
        paths.root,
        lab,
        [labinventory.InventoryHost(h.name, h.port, h.os, h.profile) for h in hosts],
        key=paths.key,
        known_hosts=paths.known_hosts,
        gateway=gateway,
        fleet_group_vars=REPO_ROOT / "inventory" / "group_vars",
        repo_vars=repo_vars,
    )


def _prepare_simulator(gpusim: Path) -> None:
    """Run the simulator's own preparation step on this machine (e.g. building its uname
    shim) before hosts boot, when it has one; what it does is the simulator's business."""
    prepare = gpusim / "build-shim"
    if not os.access(prepare, os.X_OK):
        return
    proc = subprocess.run([str(prepare)], capture_output=True, check=False)
    if proc.returncode != 0:
        raise LabError(
            f"{prepare} failed (exit {proc.returncode}): {proc.stderr.decode().strip()}",
            fix="install a C compiler (apt-get install gcc libc6-dev) or read the output",
        )


def _create(spec: container.HostSpec, paths: LabPaths, attempts: int = 3) -> int:
    """Create, seed and start a host; return its SSH port. Another lab starting at the same
    moment may take the free port first: then the start fails and a new port is tried."""
    for volume in spec.volumes:
        engine.docker(["volume", "create", "--label", f"{LAB_LABEL}={spec.lab}", volume])
    seed = keys.seed_archive(paths.host_key(spec.name), paths.key.with_suffix(".pub").read_text())
    attempt = 1
    while True:
        placed = dataclasses.replace(spec, port=free_port())
        engine.docker(container.create_args(placed))
        engine.docker(["cp", "-", f"{spec.name}:/"], stdin=seed)
        try:
            engine.docker(["start", spec.name])
            return placed.port
        except LabError as exc:
            engine.docker(["rm", "--force", spec.name])
            taken = "address already in use" in str(exc) or "already allocated" in str(exc)
            if not taken or attempt >= attempts:
                raise
            attempt += 1


def _cpu_shares(text: str) -> int | None:
    """GPUPROV_LAB_CPU_SHARES: Docker's --cpu-shares for new hosts (2 or more; unset or
    blank: Docker's default, 1024)."""
    if not text.strip():
        return None
    if not text.strip().isdigit() or int(text) < 2:
        raise BadInputError(
            f"GPUPROV_LAB_CPU_SHARES={text!r} is not a CPU weight",
            fix="give a whole number of 2 or more (Docker's default is 1024), or unset it",
        )
    return int(text)


def up(
    lab: str,
    profile: str,
    count: int,
    os_name: str,
    *,
    say: Say = print,
    mounts: Sequence[tuple[Path, str]] = (),
) -> Path:
    """Start `count` hosts of `os_name` with `profile` (reusing running ones); return the
    inventory path. Hosts of the lab with another OS stay and stay in the inventory.
    `mounts`: read-only bind mounts for new hosts (this machine's path, the host's)."""
    if count < 1:
        raise BadInputError(f"--count {count} starts no host", fix="give --count 1 or more")
    recipe = images.recipe_for(os_name)
    profile_src = resolve_profile(profile, REPO_ROOT / "tests" / "lab" / "profiles")
    profile_name = profile_src.stem
    engine.require_engine()
    sysctl.check_inotify(sysctl.inotify_limits())
    cpu_shares = _cpu_shares(os.environ.get("GPUPROV_LAB_CPU_SHARES", ""))
    paths = lab_paths(lab)
    paths.root.mkdir(parents=True, exist_ok=True)
    image = images.ensure(recipe, STATE_ROOT / ".cache" / "lab", say=say)
    client_key_is_new = not paths.key.exists()
    keys.keygen(paths.key, f"gpuprov-lab-{lab}")
    network = labnetwork.ensure(lab, LAB_LABEL)
    gpusim = REPO_ROOT / "tests" / "lab" / "gpusim"
    if not gpusim.is_dir():
        say(f"lab: warning: {gpusim} is missing; the hosts get no GPU simulator")
    _prepare_simulator(gpusim)

    existing = {h.name: h for h in status(lab)}
    started: dict[str, int] = {}
    for name in host_names(lab, os_name, count):
        old = existing.get(name)
        if old is not None:
            if old.profile != profile_name:
                raise BadInputError(
                    f"lab {lab!r} already has {name} with profile {old.profile}, "
                    f"not {profile_name}",
                    host=name,
                    fix=f"`provision lab down --name {lab}` first, or use another --name",
                )
            if client_key_is_new or not paths.host_key(name).exists():
                raise LabError(
                    f"the host runs, but its keys under {paths.root} are gone: "
                    "the lab cannot pin its host key or log in",
                    host=name,
                    fix=f"`provision lab down --name {lab}`, then `lab up` again",
                )
            if old.state != "running":
                engine.docker(["start", name])
            started[name] = old.port
            continue
        keys.keygen(paths.host_key(name), name)
        paths.profile(name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(profile_src, paths.profile(name))
        spec = container.HostSpec(
            lab=lab,
            name=name,
            os=os_name,
            profile=profile_name,
            port=0,
            image=image,
            network=network,
            profile_file=paths.profile(name),
            gpusim_dir=gpusim if gpusim.is_dir() else None,
            mounts=tuple(mounts),
            cpu_shares=cpu_shares,
        )
        started[name] = _create(spec, paths)
    repo_vars = doubles.serve(APTREPO_DIR, _aptrepo_state(), network)
    if repo_vars is not None:
        repo_vars, dropped = doubles.split_owned(repo_vars)
        if dropped:
            say(
                f"lab: warning: kept the lab's own {', '.join(dropped)} over the test-double "
                "repository's"
            )
    inventory = _write_access(lab, paths, status(lab), engine.network_gateway(network), repo_vars)
    wait_for_ssh(paths, started)
    return inventory


def down(lab: str) -> Removed:
    """Remove every container, volume and network labelled with the lab, its files under
    .lab/<lab>/ and its hosts' cached Ansible facts."""
    found = engine.containers({LAB_LABEL: lab})
    names = tuple(c.name for c in found)
    if names:
        engine.docker(["rm", "--force", "--volumes", *names])
    vols = tuple(engine.volumes({LAB_LABEL: lab}))
    if vols:
        engine.docker(["volume", "rm", *vols])
    nets = tuple(engine.networks({LAB_LABEL: lab}))
    for net in nets:
        doubles.stop(APTREPO_DIR, _aptrepo_state(), net)  # the lab's own repository server
    if nets:
        engine.docker(["network", "rm", *nets])
    shutil.rmtree(lab_paths(lab).root, ignore_errors=True)
    forget_facts((to_lab_host(c).name for c in found), STATE_ROOT / ".cache" / "facts")
    return Removed(names, vols, nets)


def _aptrepo_state() -> Path:
    """Shared by every lab (a lab name cannot start with a dot)."""
    return lab_paths(".aptrepo").root


def forget_facts(hosts: Iterable[str], cache: Path) -> list[Path]:
    """Drop the hosts' cached Ansible facts: a new host of the same name must not inherit
    the old one's. ansible-core 2.19's jsonfile cache names files `s1_<host>` (a format
    prefix), older ones `<host>`; lab host names hold no `_`, so the match is exact."""
    names = set(hosts)
    gone = [
        path
        for path in (cache.iterdir() if cache.is_dir() else [])
        if path.name in names or path.name.rpartition("_")[2] in names
    ]
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


def render_status(lab: str, hosts: Sequence[LabHost]) -> str:
    """The `lab status` table (pure)."""
    if not hosts:
        return f"lab {lab}: no hosts (start some with `provision lab up --name {lab}`)\n"
    header = ("HOST", "OS", "PROFILE (simulated GPUs)", "SSH", "STATE")
    rows = [
        (h.name, h.os, h.profile, f"{keys.LOOPBACK}:{h.port}", h.state)
        for h in sorted(hosts, key=lambda h: h.name)
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    lines.append(f"lab {lab}: {len(hosts)} host(s); GPUs are simulated (gpusim), not real.")
    return "\n".join(lines) + "\n"
