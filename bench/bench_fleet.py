"""Benchmark at fleet scale: detection (and planning) against `ansible -m setup` on 100+ hosts.

The hosts are TEST DOUBLES, light SSH-only ones: ONE container of the lab image runs N sshd's,
each in a mount and UTS namespace of its own with the lab's GPU simulator (tests/lab/gpusim)
booted in it, each on its own address of a lab network (bench/fleet-hosts.sh). They are reached
with real SSH: the client key and every host key are made here and pinned in a known_hosts file
before the first connection (nothing is accepted on first use). Every GPU fact they show is
SIMULATED. No systemd, no Docker inside them (their `systemctl` capture fails; that is a fact of
the double, not of a real host).

For each count (the first N hosts of the fleet), after one warm-up run of each tool, it times
--repeat runs of:
  - `provision detect -i INV` (a new process: start-up, inventory, probe over SSH, table),
  - `detect_hosts()` (the detection library alone, in this process),
  - `ansible all -i INV -m ansible.builtin.setup -f F` (F = min(N, 64): detection's own
    parallelism; ansible.cfg as shipped: pipelining, ControlPersist),
  - planning the detected hosts (`parse_host` + `plan_fleet`, in this process): the decision
    a rerun makes before it touches a host. (Issue 20's converged-skip decision is not on this
    branch; this times planning and says so in its output.)
and records the 1-minute load average before/after and the least MemAvailable seen.

Bounded: at most --max-hosts (200) hosts, the whole run under --max-seconds (default 1500);
the container and its lab network are removed at the end, on Ctrl-C and on a timeout
(`--keep` leaves them; `provision lab down --name NAME` removes them too).

    GPUPROV_LAB=me .venv/bin/python bench/bench_fleet.py --counts 1,16,100 --repeat 3 \
        --json fleet.json
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_detect import Row, _fmt, _timed_call, _tool  # noqa: E402

from orchestrator.lab import engine, images, keys, labnetwork  # noqa: E402
from orchestrator.lab.container import HOST_RIGHTS, LAB_LABEL  # noqa: E402
from orchestrator.lab.hosts import lab_paths, resolve_profile  # noqa: E402

GPUSIM = ROOT / "tests" / "lab" / "gpusim"
PROFILES = ROOT / "tests" / "lab" / "profiles"
FIRST_HOST = 10  # host addresses: .10, .11, ... of the lab's /24 (Docker gives the container .2)
MAX_HOSTS = 200
PARALLEL = 64  # orchestrator.detect.MAX_PARALLEL


@dataclass(frozen=True)
class FleetRow:
    detect: Row
    plan_s: list[float]
    min_mem_available_mib: int
    ansible_unreachable: list[int]  # per timed run: hosts Ansible reported UNREACHABLE
    detect_failed: list[int]  # per timed run: hosts `provision detect` reported unreachable


_SUMMARY = re.compile(r"(\d+) hosts: (\d+) detected, (\d+) unreachable")


def _timed_detect(argv: Sequence[str]) -> tuple[float, int]:
    """`provision detect`; hosts it could not reach (exit 1, counted in its summary line) are
    counted, not fatal, as for Ansible."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    summary = _SUMMARY.search(done.stdout + done.stderr)
    failed = int(summary.group(3)) if summary else -1
    if done.returncode not in (0, 1) or failed < 0 or (done.returncode == 1 and not failed):
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n" + "\n".join(tail))
    return elapsed, failed


def _timed_ansible(argv: Sequence[str]) -> tuple[float, int]:
    """Ansible's run; a host it could not reach (exit 4) is counted, not fatal: on a loaded
    machine its SSH connections time out first. Any other failure stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    unreachable = done.stdout.count("| UNREACHABLE!")
    if done.returncode not in (0, 4) or (done.returncode == 4 and not unreachable):
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n" + "\n".join(tail))
    return elapsed, unreachable


class Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Timeout


def _mem_available_mib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return -1


@contextlib.contextmanager
def _memory_watch() -> Iterator[list[int]]:
    """The least MemAvailable seen while the block runs (sampled every 0.2 s)."""
    seen = [_mem_available_mib()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            seen[0] = min(seen[0], _mem_available_mib())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


@dataclass(frozen=True)
class Fleet:
    lab: str
    root: Path  # .lab/<lab>/
    container: str
    network: str
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    key: Path
    known_hosts: Path

    def inventory(self, count: int) -> Path:
        path = self.root / f"fleet-{count}.ini"
        lines = [
            f"# bench/bench_fleet.py, lab {self.lab!r}: {count} TEST-DOUBLE host(s), light",
            "# SSH-only hosts in one container; their GPUs are SIMULATED (gpusim).",
            "[gpu_nodes]",
        ]
        pairs = zip(self.names[:count], self.addresses[:count], strict=True)
        lines += [f"{n} ansible_host={a}" for n, a in pairs]
        lines += [
            "",
            "[gpu_nodes:vars]",
            "ansible_user=root",
            f"ansible_ssh_private_key_file={self.key}",
            f"ansible_ssh_common_args='-o UserKnownHostsFile={self.known_hosts}'",
            "",
        ]
        path.write_text("\n".join(lines))
        return path


def _sshd_config(name: str, address: str) -> str:
    return "\n".join(
        [
            "# bench/bench_fleet.py: a TEST-DOUBLE host's sshd (keys only, root by key)",
            f"ListenAddress {address}:22",
            f"HostKey /fleet/{name}/ssh_host_ed25519_key",
            f"PidFile /run/fleet/{name}/sshd.pid",
            "AuthorizedKeysFile /fleet/authorized_keys",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "UseDNS no",
            "Subsystem sftp /usr/lib/openssh/sftp-server",
            "",
        ]
    )


def _subnet(network: str) -> ipaddress.IPv4Network:
    out = engine.docker(
        ["network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}}{{end}}", network]
    )
    return ipaddress.IPv4Network(out.strip())


def up(lab: str, count: int, profile: str, os_name: str, say: bool = True) -> Fleet:
    engine.require_engine()
    root = lab_paths(lab).root
    fleet_dir = root / "fleet"
    shutil.rmtree(fleet_dir, ignore_errors=True)
    fleet_dir.mkdir(parents=True)
    image = images.ensure(images.recipe_for(os_name), ROOT / ".cache" / "lab")
    key = keys.keygen(root / "id_ed25519", f"gpuprov-fleet-{lab}")
    network = labnetwork.ensure(lab, LAB_LABEL)
    subnet = _subnet(network)
    hosts = list(subnet.hosts())
    if FIRST_HOST + count > len(hosts):
        raise SystemExit(f"{count} hosts do not fit in {subnet}")
    names = tuple(f"{lab}-f{i:03d}" for i in range(1, count + 1))
    addresses = tuple(str(hosts[FIRST_HOST - 1 + i]) for i in range(count))
    known = []
    spec = []
    started = time.perf_counter()
    for name, address in zip(names, addresses, strict=True):
        d = fleet_dir / name
        d.mkdir()
        host_key = keys.keygen(d / "ssh_host_ed25519_key", name)
        public = host_key.with_suffix(".pub").read_text().split()
        known.append(f"{address} {public[0]} {public[1]}\n")
        (d / "sshd_config").write_text(_sshd_config(name, address))
        spec.append(f"{name} {address} {subnet.prefixlen}\n")
    (fleet_dir / "spec").write_text("".join(spec))
    (fleet_dir / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    shutil.copy(resolve_profile(profile, PROFILES), fleet_dir / "profile.yaml")
    shutil.copy(ROOT / "bench" / "fleet-hosts.sh", fleet_dir / "fleet-hosts.sh")
    known_hosts = root / "fleet_known_hosts"
    known_hosts.write_text("".join(known))
    if say:
        print(f"fleet: {count} host keys in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    container = f"gpuprov-fleet-{lab}"
    engine.docker(["rm", "--force", container], check=False)
    # the lab hosts' container rights (orchestrator/lab/container.py): everything but loading
    # modules and setting this machine's clock; mount namespaces and the simulator's mounts
    # need SYS_ADMIN, the host addresses NET_ADMIN (in the container's own network namespace)
    engine.docker(
        [
            "run",
            "--detach",
            "--init",
            "--name",
            container,
            "--hostname",
            container,
            "--network",
            network,
            *HOST_RIGHTS,
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/tmp",
            "--memory",
            "4g",
            "--pids-limit",
            "4096",
            "--volume",
            f"{fleet_dir}:/fleet:ro",
            "--volume",
            f"{GPUSIM}:/opt/gpusim:ro",
            "--label",
            f"{LAB_LABEL}={lab}",
            "--entrypoint",
            "/bin/sh",
            image,
            "/fleet/fleet-hosts.sh",
            "/fleet/spec",
        ]
    )
    fleet = Fleet(lab, root, container, network, names, addresses, key, known_hosts)
    _wait_ready(fleet, timeout=max(60.0, count * 1.5))
    if say:
        print(
            f"fleet: {count} hosts answer SSH after {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    return fleet


def _banner(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=2) as s:
            return s.recv(8).startswith(b"SSH-2.0")
    except OSError:
        return False


def _wait_ready(fleet: Fleet, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(fleet.addresses)
    while waiting and time.monotonic() < deadline:
        waiting = [a for a in waiting if not _banner(a)]
        if waiting:
            time.sleep(1)
    if waiting:
        logs = engine.docker(["logs", "--tail", "20", fleet.container], check=False)
        raise SystemExit(
            f"{len(waiting)} fleet host(s) never answered SSH, e.g. {waiting[0]}:\n{logs}"
        )


def down(lab: str, network: str | None) -> None:
    engine.docker(["rm", "--force", f"gpuprov-fleet-{lab}"], check=False)
    if network:
        engine.docker(["network", "rm", network], check=False)
    shutil.rmtree(lab_paths(lab).root / "fleet", ignore_errors=True)


def measure(fleet: Fleet, count: int, repeat: int) -> FleetRow:
    from orchestrator.catalog import default_catalog
    from orchestrator.detect import detect_hosts
    from orchestrator.inventory import load_inventory
    from orchestrator.parsers import parse_host
    from orchestrator.plan import plan_fleet
    from orchestrator.policy import load_policy

    inventory = fleet.inventory(count)
    loaded = load_inventory(inventory)
    found: dict[str, dict[str, str]] = {}

    def library() -> None:
        result = detect_hosts(loaded, progress=False)
        if result.failed:  # counted in the CLI's runs; planning needs every host
            first = next(iter(result.failed.items()))
            print(
                f"bench_fleet: detect_hosts(): {len(result.failed)} failed, e.g. {first}",
                file=sys.stderr,
            )
        found.clear()
        found.update(result.raw)

    catalog = default_catalog()
    hostvars = {h.name: h.vars for h in loaded.hosts}

    def planning() -> None:
        facts = {h: parse_host(h, raw) for h, raw in found.items()}
        policies = {h: load_policy(h, hostvars.get(h, {})) for h in facts}
        plans = plan_fleet(facts, policies, catalog)
        if len(plans) != len(found) or not all(p.simulated for p in plans.values()):
            raise SystemExit("planning lost a host, or a host not marked simulated")

    detect = [*_tool("provision", "orchestrator.cli"), "detect", "-i", str(inventory)]
    ansible = [*_tool("ansible", "ansible.cli.adhoc"), "all", "-i", str(inventory)]
    ansible += ["-m", "ansible.builtin.setup", "-f", str(min(count, PARALLEL))]
    _timed_detect(detect)  # warm-up: caches, ControlPersist masters
    _timed_ansible(ansible)
    library()
    cli: list[float] = []
    lib: list[float] = []
    setup: list[float] = []
    plan: list[float] = []
    unreachable: list[int] = []
    failed: list[int] = []
    load_before = os.getloadavg()[0]
    with _memory_watch() as low:
        for _ in range(repeat):
            seconds, lost = _timed_detect(detect)
            cli.append(seconds)
            failed.append(lost)
            lib.append(_timed_call(library))
            plan.append(_timed_call(planning))
            seconds, lost = _timed_ansible(ansible)
            setup.append(seconds)
            unreachable.append(lost)
    row = Row(count, cli, lib, setup, (load_before, os.getloadavg()[0]))
    return FleetRow(row, plan, low[0], unreachable, failed)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} ({min(values) * 1000:.1f})"


def table(rows: Sequence[FleetRow]) -> str:
    one = next((r for r in rows if r.detect.hosts == 1), None)
    lines = [
        "| hosts | provision detect, s | detect_hosts(), s | ansible setup, s | speed-up "
        "| detect vs 1 host | plan (in process), ms | load avg | least MemAvailable "
        "| unreachable (detect; Ansible) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r.detect
        scale = (
            f"{statistics.median(d.detect_cli_s) / statistics.median(one.detect.detect_cli_s):.2f}x"
            if one
            else "-"
        )
        lines.append(
            f"| {d.hosts} | {_fmt(d.detect_cli_s)} | {_fmt(d.detect_lib_s)} "
            f"| {_fmt(d.ansible_setup_s)} | {d.speedup:.1f}x | {scale} | {_ms(r.plan_s)} "
            f"| {d.load_avg[0]:.1f}-{d.load_avg[1]:.1f} | {r.min_mem_available_mib} MiB "
            f"| {', '.join(map(str, r.detect_failed))}; "
            f"{', '.join(map(str, r.ansible_unreachable))} |"
        )
    lines.append("")
    lines.append(
        "Median (min) after one warm-up; speed-up = ansible / provision detect. Hosts: test "
        "doubles (SSH-only, simulated GPUs). Planning stands in for the converged-skip "
        "decision (not on this branch)."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--counts", default="1,16,100", help="fleet sizes measured, comma-separated")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile", default="p5.48xlarge", help="tests/lab/profiles/<name>.yaml")
    p.add_argument("--os", dest="os_name", default="debian12", choices=("debian12", "debian13"))
    p.add_argument(
        "--name", default=f"{os.environ.get('GPUPROV_LAB', 'bench')}-fleet", help="lab name"
    )
    p.add_argument("--max-seconds", type=int, default=1500, help="stop (and clean up) after")
    p.add_argument("--json", type=Path, help="also write the raw timings here")
    p.add_argument("--keep", action="store_true", help="leave the hosts running afterwards")
    args = p.parse_args(argv)
    counts = sorted({int(c) for c in args.counts.split(",")})
    if not counts or counts[0] < 1 or counts[-1] > MAX_HOSTS:
        p.error(f"--counts: between 1 and {MAX_HOSTS} hosts")
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGTERM, _on_alarm)
    signal.alarm(args.max_seconds)
    rows: list[FleetRow] = []
    fleet: Fleet | None = None
    try:
        fleet = up(args.name, counts[-1], args.profile, args.os_name)
        for count in counts:
            rows.append(measure(fleet, count, args.repeat))
            print(table(rows[-1:]).splitlines()[2], file=sys.stderr)
            if args.json:
                args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    except Timeout:
        print(f"bench_fleet: stopped after {args.max_seconds} s (--max-seconds)", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        if not args.keep:
            network = fleet.network if fleet else f"gpuprov-lab-{args.name}"
            down(args.name, network)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
