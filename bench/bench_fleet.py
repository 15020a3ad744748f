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
`--pipeline` times the no-op pipeline stage by stage instead; `--checks` times
`provision validate` / `verify` against the playbooks gpuprov.nvidia.validate / verify (issue
49) and compares each host's check names and statuses.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, cast

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
ADDRESSES = 200  # addresses used; past 200 hosts, the next 200 listen on port 2201, then 2202...
MAX_HOSTS = 1000
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
    ports: tuple[int, ...]
    key: Path
    known_hosts: Path

    def inventory(self, count: int) -> Path:
        path = self.root / f"fleet-{count}.ini"
        lines = [
            f"# bench/bench_fleet.py, lab {self.lab!r}: {count} TEST-DOUBLE host(s), light",
            "# SSH-only hosts in one container; their GPUs are SIMULATED (gpusim).",
            "[gpu_nodes]",
        ]
        rows = zip(self.names[:count], self.addresses[:count], self.ports[:count], strict=True)
        lines += [f"{n} ansible_host={a} ansible_port={p}" for n, a, p in rows]
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


def _port(index: int) -> int:
    """Host `index` (0-based): port 22 for the first ADDRESSES hosts, then 2201, 2202, ..."""
    group = index // ADDRESSES
    return 22 if group == 0 else 2200 + group


def _sshd_config(name: str, address: str, port: int) -> str:
    return "\n".join(
        [
            "# bench/bench_fleet.py: a TEST-DOUBLE host's sshd (keys only, root by key)",
            f"ListenAddress {address}:{port}",
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
    if FIRST_HOST + min(count, ADDRESSES) > len(hosts):
        raise SystemExit(f"{count} hosts do not fit in {subnet}")
    names = tuple(f"{lab}-f{i:04d}" for i in range(1, count + 1))
    addresses = tuple(str(hosts[FIRST_HOST - 1 + i % ADDRESSES]) for i in range(count))
    ports = tuple(_port(i) for i in range(count))
    known = []
    spec = []
    started = time.perf_counter()
    for name, address, port in zip(names, addresses, ports, strict=True):
        d = fleet_dir / name
        d.mkdir()
        host_key = keys.keygen(d / "ssh_host_ed25519_key", name)
        public = host_key.with_suffix(".pub").read_text().split()
        where = address if port == 22 else f"[{address}]:{port}"
        known.append(f"{where} {public[0]} {public[1]}\n")
        (d / "sshd_config").write_text(_sshd_config(name, address, port))
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
            f"{max(4, count // 100 + 2)}g",
            "--pids-limit",
            str(max(4096, count * 12)),
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
    fleet = Fleet(lab, root, container, network, names, addresses, ports, key, known_hosts)
    # the simulator boots a few hosts at a time (a Python start each): minutes for 500 hosts,
    # so only the first host is waited for here; each row waits for its own hosts (ready())
    ready(fleet, 1)
    if say:
        print(
            f"fleet: {count} hosts answer SSH after {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    return fleet


def attach(lab: str, count: int) -> Fleet | None:
    """The fleet `--keep` left running, when it has at least `count` hosts; else None."""
    root = lab_paths(lab).root
    container = f"gpuprov-fleet-{lab}"
    spec = root / "fleet" / "spec"
    running = engine.docker(
        ["inspect", "--format", "{{.State.Running}}", container], check=False
    ).strip()
    if running != "true" or not spec.exists():
        return None
    rows = [line.split() for line in spec.read_text().splitlines() if line.strip()]
    if len(rows) < count:
        return None
    network = f"gpuprov-lab-{lab}"
    names = tuple(r[0] for r in rows)
    addresses = tuple(r[1] for r in rows)
    ports = tuple(_port(i) for i in range(len(rows)))
    fleet = Fleet(
        lab, root, container, network, names, addresses, ports, root / "id_ed25519",
        root / "fleet_known_hosts",
    )  # fmt: skip
    ready(fleet, 1)
    return fleet


def ready(fleet: Fleet, count: int) -> None:
    """Wait until the first `count` hosts answer SSH (the later ones may still boot)."""
    part = replace(
        fleet,
        names=fleet.names[:count],
        addresses=fleet.addresses[:count],
        ports=fleet.ports[:count],
    )
    _wait_ready(part, timeout=max(600.0, count * 6.0))


def _banner(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=10) as s:
            return s.recv(8).startswith(b"SSH-2.0")
    except OSError:
        return False


def _wait_ready(fleet: Fleet, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(zip(fleet.addresses, fleet.ports, strict=True))
    while waiting and time.monotonic() < deadline:
        waiting = [(a, p) for a, p in waiting if not _banner(a, p)]
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


# --- the whole no-op pipeline, stage by stage ------------------------------------------------

STAGES = ("inventory", "detect", "plan", "converged-skip", "validate", "verify", "report")


def _rss_kib(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
    return total


def _descendants(root: int) -> list[int]:
    """`root` and every process below it (this machine's /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


@contextlib.contextmanager
def _peak_rss(interval: float = 0.25) -> Iterator[list[int]]:
    """The largest RSS sum of this process and its descendants (ssh, pytest) seen while the
    block runs, in KiB, sampled every `interval` s (shared pages counted in each process)."""
    peak = [_rss_kib([os.getpid()])]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(interval):
            peak[0] = max(peak[0], _rss_kib(_descendants(os.getpid())))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
        peak[0] = max(peak[0], _rss_kib(_descendants(os.getpid())))


@dataclass(frozen=True)
class StageRun:
    wall_s: float
    cpu_s: float  # this process and its waited-for children (ssh, pytest), user + system
    peak_rss_mib: float  # this process and its descendants


@dataclass(frozen=True)
class PipelineRow:
    hosts: int
    stages: dict[str, list[StageRun]]  # stage -> one per run
    load_avg: tuple[float, float]
    container_mib: tuple[int, int]  # the fleet container's memory cgroup, before and after
    outcome: dict[str, int]  # what the runs decided: skipped/run hosts, checks failed...


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _container_mib(fleet: Fleet) -> int:
    """The fleet container's memory use (cgroup v2's memory.current, else v1's usage)."""
    for path in ("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes"):
        out = engine.docker(["exec", fleet.container, "cat", path], check=False).strip()
        if out.isdigit():
            return int(out) // (1 << 20)
    return -1


def pipeline_once(inventory: Path, workdir: Path) -> tuple[dict[str, StageRun], dict[str, int]]:
    """The no-op pipeline of `provision` (orchestrator/pipeline.py's own stage functions, in
    this process): load the inventory, detect, plan, the converged-skip decision (the playbook
    is not run: see the outcome), validate's checks, verify (its pytest processes and
    sessions), the report document. Returns each stage's figures and what was decided."""
    from rich.console import Console

    from orchestrator import converged, pipeline, plandoc
    from orchestrator import report as rep
    from orchestrator.catalog import default_catalog

    console = Console(stderr=True, highlight=False)
    opts = pipeline.StageOptions(json=True)  # validate's own defaults otherwise
    runs: dict[str, StageRun] = {}
    state: dict[str, object] = {}

    def stage(name: str, fn: Callable[[], object]) -> object:
        cpu, start = _cpu(), time.perf_counter()
        with _peak_rss() as peak:
            value = fn()
        runs[name] = StageRun(time.perf_counter() - start, _cpu() - cpu, peak[0] / 1024)
        state[name] = value
        return value

    fleet: Any = stage("inventory", lambda: pipeline._load_inventory(str(inventory), None))
    detected: Any = stage("detect", lambda: pipeline._detect(fleet, console))
    policies, plans = cast(
        tuple[Any, Any],
        stage(
            "plan",
            lambda: pipeline._plan(
                detected.facts, fleet.hostvars, default_catalog(), fleet.origins
            ),
        ),
    )
    targets = [h for h in fleet.hosts if h in plans and not plans[h].blocked]
    skips: Any = stage(
        "converged-skip",
        lambda: converged.fleet_skips(
            targets,
            plans,
            pipeline._document_vars(targets, plans),
            fleet.hostvars,
            detected.raw,
        ),
    )
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    plan_file = plandoc.write_plan_document(workdir, skips.host_vars)
    validation: Any = stage(
        "validate",
        lambda: pipeline._validation(fleet, targets, detected, plans, policies, opts),
    )
    verification: Any = stage(
        "verify",
        lambda: pipeline._verify_hosts(
            fleet, targets, plans, policies, workdir, plan_file, console
        ),
    )

    def report() -> object:
        reports = rep.host_reports(
            fleet.hosts,
            facts=detected.facts,
            detect_errors=detected.errors,
            plans=plans,
            validation=validation,
            verification=verification,
        )
        return json.dumps(rep.report_document(rep.RunReport("all", reports)))

    stage("report", report)
    checks = [c for v in verification.values() for c in v.checks]
    outcome = {
        "detected": len(detected.facts),
        "unreachable": len(detected.errors),
        "planned": len(targets),
        "converged (apply skipped)": len(targets) - len(skips.run),
        "roles left to run": len(skips.run),
        "validate failed": sum(1 for v in validation.values() if v.failed),
        "verify checks": len(checks),
        "verify checks failed": sum(1 for c in checks if c.status == "fail"),
        "verify unreachable": sum(1 for c in checks if c.name == "verify.connection"),
    }
    return runs, outcome


def measure_pipeline(fleet: Fleet, count: int, repeat: int) -> PipelineRow:
    inventory = fleet.inventory(count)
    workdir = fleet.root / f"fleet-run-{count}"
    pipeline_once(inventory, workdir)  # warm-up: caches, the hosts' first sessions
    load_before = os.getloadavg()[0]
    before = _container_mib(fleet)
    stages: dict[str, list[StageRun]] = {s: [] for s in STAGES}
    outcome: dict[str, int] = {}
    for _ in range(repeat):
        runs, outcome = pipeline_once(inventory, workdir)
        for name, run in runs.items():
            stages[name].append(run)
    return PipelineRow(
        count, stages, (load_before, os.getloadavg()[0]), (before, _container_mib(fleet)), outcome
    )


def pipeline_table(rows: Sequence[PipelineRow]) -> str:
    first = rows[0] if rows else None
    head = "| stage | " + " | ".join(f"{r.hosts} hosts: wall s / CPU s / peak MiB" for r in rows)
    lines = [head + " |", "|---|" + "---|" * len(rows)]
    for name in (*STAGES, "total"):
        cells = []
        for r in rows:
            if name == "total":
                per_run = [
                    sum(r.stages[s][i].wall_s for s in STAGES)
                    for i in range(len(r.stages["detect"]))
                ]
                cpu = [
                    sum(r.stages[s][i].cpu_s for s in STAGES)
                    for i in range(len(r.stages["detect"]))
                ]
                peak = max(x.peak_rss_mib for s in STAGES for x in r.stages[s])
            else:
                per_run = [x.wall_s for x in r.stages[name]]
                cpu = [x.cpu_s for x in r.stages[name]]
                peak = max(x.peak_rss_mib for x in r.stages[name])
            cells.append(
                f"{statistics.median(per_run):.2f} / {statistics.median(cpu):.2f} / {peak:.0f}"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if first is not None and len(rows) > 1:
        lines.append("")
        lines.append(
            "Growth of each stage's median wall time against the first row, per host added:"
        )
        for name in (*STAGES,):
            base = statistics.median(x.wall_s for x in first.stages[name])
            parts = []
            for r in rows[1:]:
                now = statistics.median(x.wall_s for x in r.stages[name])
                per = (now - base) / (r.hosts - first.hosts) * 1000
                parts.append(f"{r.hosts}: {now / base if base else 0:.1f}x ({per:.1f} ms/host)")
            lines.append(f"- {name}: " + ", ".join(parts))
    lines.append("")
    for r in rows:
        lines.append(
            f"- {r.hosts} hosts: load avg {r.load_avg[0]:.1f}-{r.load_avg[1]:.1f}; fleet "
            f"container {r.container_mib[0]}-{r.container_mib[1]} MiB; "
            + ", ".join(f"{k} {v}" for k, v in r.outcome.items())
        )
    return "\n".join(lines)


CHECK_RUNS = ("provision validate", "playbook validate", "provision verify", "playbook verify")


@dataclass(frozen=True)
class ChecksRow:
    hosts: int
    runs: dict[str, StageRun]  # one timed run each
    exit_codes: dict[str, int]
    failed_hosts: dict[str, int]  # hosts each run reported failed
    differing_hosts: dict[str, int]  # hosts whose check names/statuses differ from provision's
    load_avg: tuple[float, float]


def _timed_process(argv: Sequence[str], env: dict[str, str]) -> tuple[StageRun, int, str]:
    """`argv` in a session of its own: stopped (--max-seconds, SIGTERM), its whole process
    group goes too (ansible-playbook's forks, their pytest processes), not the leader alone."""
    cpu, start = _cpu(), time.perf_counter()
    with _peak_rss() as peak:
        proc = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    run = StageRun(time.perf_counter() - start, _cpu() - cpu, peak[0] / 1024)
    return run, proc.returncode, out


def _label(check: dict[str, Any]) -> str:
    return check["name"] if check["gpu"] is None else f"{check['name']}[gpu{check['gpu']}]"


def measure_checks(fleet: Fleet, count: int) -> ChecksRow:
    """`provision validate` / `verify` (new processes) against ansible-playbook
    playbooks/validate.yml / verify.yml (the checkout's ansible.cfg, forks min(N, 64)) on the
    first `count` hosts, one run each; each host's check names and statuses compared."""
    inventory = fleet.inventory(count)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_SHOW_CUSTOM_STATS": "True",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
    }
    runs: dict[str, StageRun] = {}
    codes: dict[str, int] = {}
    failed: dict[str, int] = {}
    differ: dict[str, int] = {}
    expected: dict[str, dict[str, dict[str, str]]] = {}
    load_before = os.getloadavg()[0]
    for name in CHECK_RUNS:
        tool, stage = name.split()
        part = "validation" if stage == "validate" else "verification"
        if tool == "provision":
            report = fleet.root / f"checks-{stage}-{count}.json"
            argv = [
                str(bin_dir / "provision"),
                stage,
                "-i",
                str(inventory),
                "--report",
                str(report),
            ]
            runs[name], codes[name], _ = _timed_process(argv, env)
            hosts = json.loads(report.read_text())["hosts"]
            failed[name] = sum(1 for r in hosts.values() if r["status"] != "ok")
            expected[stage] = {
                h: {_label(c): c["status"] for c in r[part]["checks"]} for h, r in hosts.items()
            }
        else:
            forks = str(min(count, PARALLEL))
            playbook = str(ROOT / "playbooks" / f"{stage}.yml")
            argv = [str(bin_dir / "ansible-playbook"), "-i", str(inventory), "-f", forks, playbook]
            runs[name], codes[name], out = _timed_process(argv, env)
            line = next(ln for ln in out.splitlines() if ln.strip().startswith("RUN:"))
            stats = json.loads(line.split("RUN:", 1)[1])[f"gpuprov_{part}"]
            failed[name] = sum(1 for s in stats.values() if s["status"] != "ok")
            seen = {h: s["checks"] for h, s in stats.items()}
            want = expected.get(stage, {})
            odd = sorted(h for h in want.keys() | seen.keys() if want.get(h) != seen.get(h))
            differ[name] = len(odd)
            for h in odd[:3]:  # what differs, for the reader (2026-12-06: 467 of 500, unread)
                mine, theirs = want.get(h) or {}, seen.get(h) or {}
                diff = {
                    c: (mine.get(c), theirs.get(c))
                    for c in sorted(mine.keys() | theirs.keys())
                    if mine.get(c) != theirs.get(c)
                }
                print(f"  {name}: {h} (provision, playbook): {diff}", file=sys.stderr)
        print(f"  {count} hosts, {name}: {runs[name].wall_s:.1f} s", file=sys.stderr)
    return ChecksRow(count, runs, codes, failed, differ, (load_before, os.getloadavg()[0]))


def checks_table(rows: Sequence[ChecksRow]) -> str:
    head = "| run | " + " | ".join(f"{r.hosts} hosts: wall s / CPU s / peak MiB" for r in rows)
    lines = [head + " |", "|---|" + "---|" * len(rows)]
    for name in CHECK_RUNS:
        cells = [
            f"{r.runs[name].wall_s:.1f} / {r.runs[name].cpu_s:.1f} / "
            f"{r.runs[name].peak_rss_mib:.0f}"
            for r in rows
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for r in rows:
        lines.append(
            f"- {r.hosts} hosts: load avg {r.load_avg[0]:.1f}-{r.load_avg[1]:.1f}; exit codes "
            + ", ".join(f"{k} {v}" for k, v in r.exit_codes.items())
            + "; hosts failed "
            + ", ".join(f"{k} {v}" for k, v in r.failed_hosts.items())
            + "; hosts whose checks differ from provision's "
            + ", ".join(f"{k} {v}" for k, v in r.differing_hosts.items())
        )
    return "\n".join(lines)


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
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the hosts running afterwards (and use those a --keep run left, when they "
        "are enough)",
    )
    p.add_argument(
        "--pipeline",
        action="store_true",
        help="time the whole no-op pipeline stage by stage (wall, CPU, peak memory) instead of "
        "detection against ansible -m setup",
    )
    p.add_argument(
        "--checks",
        action="store_true",
        help="time provision validate/verify against the playbooks gpuprov.nvidia.validate/"
        "verify (issue 49), one run each, and compare each host's checks",
    )
    args = p.parse_args(argv)
    counts = sorted({int(c) for c in args.counts.split(",")})
    if not counts or counts[0] < 1 or counts[-1] > MAX_HOSTS:
        p.error(f"--counts: between 1 and {MAX_HOSTS} hosts")
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGTERM, _on_alarm)
    signal.alarm(args.max_seconds)
    rows: list[FleetRow] = []
    prows: list[PipelineRow] = []
    crows: list[ChecksRow] = []
    fleet: Fleet | None = None
    try:
        fleet = (attach(args.name, counts[-1]) if args.keep else None) or up(
            args.name, counts[-1], args.profile, args.os_name
        )
        ready(fleet, counts[-1])  # every host booted: the rows do not time the boots
        for count in counts:
            if args.checks:
                crows.append(measure_checks(fleet, count))
                print(checks_table(crows), file=sys.stderr)
                kept: list[Any] = list(crows)
            elif args.pipeline:
                prows.append(measure_pipeline(fleet, count, args.repeat))
                print(pipeline_table(prows), file=sys.stderr)
                kept = list(prows)
            else:
                rows.append(measure(fleet, count, args.repeat))
                print(table(rows[-1:]).splitlines()[2], file=sys.stderr)
                kept = list(rows)
            if args.json:
                args.json.write_text(json.dumps([asdict(r) for r in kept], indent=2) + "\n")
    except Timeout:
        print(f"bench_fleet: stopped after {args.max_seconds} s (--max-seconds)", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        if not args.keep:
            network = fleet.network if fleet else f"gpuprov-lab-{args.name}"
            down(args.name, network)
    print(
        checks_table(crows)
        if args.checks
        else pipeline_table(prows)
        if args.pipeline
        else table(rows)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
