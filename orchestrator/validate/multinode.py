"""The multi-node all-reduce, pure part: plan the run, read what each host sent back, judge it.

`provision validate --multinode` runs one all-reduce across every host of the run with a rank
on every GPU of every host, through the payload's own sweep (payload/gpucheck/multinode.py;
exact position-dependent values, busbw per size). This module decides, from each host's
answer to the addresses step and its GPU count:

- the rendezvous (plan_rendezvous): the first host's address on the network every host
  shares (interfaces matching NCCL_SOCKET_IFNAME's exclusions are never used), or loopback
  when every host of the run is one machine;
- the rank layout (rank_layout): global ranks in inventory order, one per GPU; inventory
  hosts that are one machine share its GPUs (each gets its own slice);
- each host's payload spec (host_spec);

and, after the run, merges the hosts' documents (merge_runs): a host that sent nothing back
(killed, paused, its SSH cut at the deadline) or whose ranks stopped in an earlier phase than
every other host's is named, with what was seen; every document that did come back is kept.
Pairwise isolation, when the whole-fleet run fails, is orchestrator/validate/isolation.py;
the side effects (SSH, threads) are orchestrator/validate/multinode_launch.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..catalog import SAFE_LOADER
from ..errors import CatalogError
from ..result import CheckResult
from . import nccl

SETTINGS_PATH = Path(__file__).with_name("multinode.yaml")
Backend = Literal["nccl", "gloo"]
LOOPBACK = "127.0.0.1"
SIMULATED_LABEL = "simulated: CPU gloo collective, no GPU"
PHASES = ("start", "torch_import", "rendezvous", "allreduce_sweep", "done")


class MultinodeError(Exception):
    """The run cannot be planned (no common network, fewer GPUs than hosts on one machine);
    the message names the hosts and the fix. Turned into a failed check, never raised out."""


@dataclass(frozen=True)
class Published:
    setup: str
    hosts: int
    gpus_per_host: int
    gpu_name_contains: str
    busbw_gbs: Mapping[int, float]
    source: str


@dataclass(frozen=True)
class Settings:
    nccl_socket_ifname: str
    gpu_sweep: Mapping[str, int]
    cpu_sweep: Mapping[str, int]
    cpu_ranks_per_host: int
    rendezvous_timeout_s: int
    collective_timeout_s: int
    timeout_s: int
    deadline_margin_s: int
    ssh_grace_s: int
    addresses_timeout_s: int
    slow_pair_fraction: float
    published: tuple[Published, ...] = ()

    @property
    def deadline_s(self) -> int:
        return max(10, self.timeout_s - self.deadline_margin_s)


def load_settings(path: Path = SETTINGS_PATH) -> Settings:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        return Settings(
            nccl_socket_ifname=str(data["nccl_socket_ifname"]),
            gpu_sweep={str(k): int(v) for k, v in data["gpu_sweep"].items()},
            cpu_sweep={str(k): int(v) for k, v in data["cpu_sweep"].items()},
            cpu_ranks_per_host=int(data["cpu_ranks_per_host"]),
            rendezvous_timeout_s=int(data["rendezvous_timeout_s"]),
            collective_timeout_s=int(data["collective_timeout_s"]),
            timeout_s=int(data["timeout_s"]),
            deadline_margin_s=int(data["deadline_margin_s"]),
            ssh_grace_s=int(data["ssh_grace_s"]),
            addresses_timeout_s=int(data["addresses_timeout_s"]),
            slow_pair_fraction=float(data["slow_pair_fraction"]),
            published=tuple(
                Published(
                    setup=str(p["setup"]),
                    hosts=int(p["hosts"]),
                    gpus_per_host=int(p["gpus_per_host"]),
                    gpu_name_contains=str(p["gpu_name_contains"]),
                    busbw_gbs={int(k): float(v) for k, v in p["busbw_gbs"].items()},
                    source=str(p["source"]),
                )
                for p in data.get("published") or ()
            ),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CatalogError(
            f"multi-node settings {path}: cannot load ({exc})",
            fix="restore orchestrator/validate/multinode.yaml from the gpuprov release",
        ) from exc


# --- the addresses step -------------------------------------------------------------------


@dataclass(frozen=True)
class Interface:
    name: str
    address: str
    netmask: str

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.address}/{self.netmask}", strict=False)


@dataclass(frozen=True)
class HostAddresses:
    """What the addresses step found on one host."""

    host: str
    machine_id: str
    interfaces: tuple[Interface, ...]
    free_port: int

    @property
    def machine(self) -> str:
        """One machine, however many inventory names reach it: its machine id and the set
        of its non-loopback addresses (cloned images share machine ids; containers on one
        machine share a boot id, never their addresses)."""
        addrs = sorted(i.address for i in self.interfaces if not i.address.startswith("127."))
        return f"{self.machine_id}|{','.join(addrs)}"


def parse_addresses(host: str, doc: Mapping[str, Any]) -> HostAddresses:
    """The addresses step's document -> HostAddresses; ValueError when malformed."""
    try:
        return HostAddresses(
            host=host,
            machine_id=str(doc.get("machine_id") or ""),
            interfaces=tuple(
                Interface(str(i["name"]), str(i["address"]), str(i["netmask"]))
                for i in doc["interfaces"]
            ),
            free_port=int(doc["free_port"]),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{host}: malformed addresses document ({exc})") from exc


def excluded(name: str, rule: str) -> bool:
    """NCCL_SOCKET_IFNAME's '^a,b' form: names starting with any prefix are excluded; without
    '^', only names starting with one of the prefixes are allowed."""
    negate = rule.startswith("^")
    prefixes = [p for p in rule.lstrip("^").split(",") if p]
    match = any(name.startswith(p) for p in prefixes)
    return match if negate else not match


# --- the plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSlot:
    """One host's share of the world: global ranks rank_base .. rank_base + count - 1."""

    host: str
    rank_base: int
    count: int
    gpus: tuple[int, ...]  # CUDA index of each local rank; () for CPU ranks
    address: str  # where the others reach it (the rendezvous network)
    ifname: str  # its interface on that network


@dataclass(frozen=True)
class Rendezvous:
    master: str  # the host of rank 0
    address: str
    port: int
    loopback: bool  # every host of the run is one machine
    routed: bool  # no network every host shares: the first usable interface of each


@dataclass(frozen=True)
class RunPlan:
    backend: Backend
    world: int
    slots: tuple[HostSlot, ...]
    rendezvous: Rendezvous

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(s.host for s in self.slots)

    def slot(self, host: str) -> HostSlot:
        return next(s for s in self.slots if s.host == host)

    def describe(self) -> str:
        layout = ", ".join(
            f"{s.host} ranks {s.rank_base}-{s.rank_base + s.count - 1}" for s in self.slots
        )
        where = "loopback" if self.rendezvous.loopback else self.rendezvous.address
        what = "NCCL" if self.backend == "nccl" else SIMULATED_LABEL
        return (
            f"{what}: {self.world} ranks on {len(self.slots)} hosts ({layout}); rendezvous "
            f"{self.rendezvous.master} {where}:{self.rendezvous.port}"
        )


def _usable(addrs: HostAddresses, rule: str) -> list[Interface]:
    return [
        i
        for i in addrs.interfaces
        if not excluded(i.name, rule) and not i.address.startswith("127.")
    ]


def plan_rendezvous(
    addrs: Sequence[HostAddresses], rule: str
) -> tuple[Rendezvous, dict[str, Interface]]:
    """Rank 0's host is the master; its address is the one on a network every other host has
    an address in (the first such interface of the master, in its own order). Hosts that
    are all one machine rendezvous over loopback. Returns the rendezvous and, per host, the
    interface it uses (GLOO_SOCKET_IFNAME, the nccl-tests hostfile)."""
    if not addrs:
        raise MultinodeError("no host answered the addresses step")
    master = addrs[0]
    if len({a.machine for a in addrs}) == 1:
        lo = Interface("lo", LOOPBACK, "255.0.0.0")
        return Rendezvous(master.host, LOOPBACK, master.free_port, True, False), {
            a.host: lo for a in addrs
        }
    usable = {a.host: _usable(a, rule) for a in addrs}
    empty = [h for h, u in usable.items() if not u]
    if empty:
        raise MultinodeError(
            f"{', '.join(empty)}: no IPv4 interface outside NCCL_SOCKET_IFNAME's exclusions "
            f"({rule}); fix: give the host an address on the cluster network"
        )
    for cand in usable[master.host]:
        net = cand.network
        chosen = {master.host: cand}
        for other in addrs[1:]:
            same = next(
                (i for i in usable[other.host] if ipaddress.IPv4Address(i.address) in net), None
            )
            if same is None:
                break
            chosen[other.host] = same
        else:
            return Rendezvous(master.host, cand.address, master.free_port, False, False), chosen
    # No network all share (routed subnets): each host's first usable interface.
    chosen = {a.host: usable[a.host][0] for a in addrs}
    return (
        Rendezvous(master.host, chosen[master.host].address, master.free_port, False, True),
        chosen,
    )


def rank_layout(
    hosts: Sequence[str],
    ranks_per_host: Mapping[str, int],
    machines: Mapping[str, str],
    *,
    gpus: bool,
) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(host, rank_base, count, gpu indices) in inventory order. With GPUs, inventory hosts
    that are one machine split its GPUs (two names for one 2-GPU host: one GPU each); a
    machine with fewer GPUs than names cannot run (MultinodeError)."""
    by_machine: dict[str, list[str]] = {}
    for h in hosts:
        by_machine.setdefault(machines[h], []).append(h)
    out = []
    base = 0
    for h in hosts:
        names = by_machine[machines[h]]
        total = ranks_per_host[h]
        if gpus and len(names) > 1:
            share = total // len(names)
            if share < 1:
                raise MultinodeError(
                    f"{', '.join(names)} are one machine with {total} GPUs: fewer GPUs than "
                    "inventory names; fix: list the machine once"
                )
            first = names.index(h) * share
            idx = tuple(range(first, first + share))
        else:
            idx = tuple(range(total)) if gpus else ()
        count = len(idx) if gpus else total
        if count < 1:
            raise MultinodeError(f"{h}: no GPU to put a rank on; fix: check gpu_count first")
        out.append((h, base, count, idx))
        base += count
    return out


def plan_run(
    addrs: Sequence[HostAddresses],
    ranks_per_host: Mapping[str, int],
    backend: Backend,
    settings: Settings,
) -> RunPlan:
    """The whole plan from the hosts' addresses (in inventory order) and their rank counts."""
    rdv, chosen = plan_rendezvous(addrs, settings.nccl_socket_ifname)
    machines = {a.host: a.machine for a in addrs}
    layout = rank_layout([a.host for a in addrs], ranks_per_host, machines, gpus=backend == "nccl")
    slots = tuple(
        HostSlot(h, base, count, idx, chosen[h].address, chosen[h].name)
        for h, base, count, idx in layout
    )
    return RunPlan(backend, sum(s.count for s in slots), slots, rdv)


def host_spec(
    plan: RunPlan,
    host: str,
    settings: Settings,
    net_env: Mapping[str, str] | None = None,
    log_line: str = "",
) -> dict[str, Any]:
    """The payload spec for one host's ranks (payload/gpucheck/multinode.py reads it).
    `net_env` points NCCL at the host's fabric and turns its log on (nccl_net.host_net);
    the payload sends back the lines of that log that contain `log_line`."""
    slot = plan.slot(host)
    env: dict[str, str] = dict(net_env or {})
    if plan.backend == "nccl":
        env["NCCL_SOCKET_IFNAME"] = (
            "lo" if plan.rendezvous.loopback else settings.nccl_socket_ifname
        )
    else:
        env["GLOO_SOCKET_IFNAME"] = slot.ifname
    sweep = settings.gpu_sweep if plan.backend == "nccl" else settings.cpu_sweep
    return {
        "host": host,
        "timeout_s": settings.timeout_s,
        "deadline_s": settings.deadline_s,
        "allreduce": dict(sweep),
        "multinode": {
            "backend": plan.backend,
            "rank_base": slot.rank_base,
            "count": slot.count,
            "world": plan.world,
            "gpus": list(slot.gpus),
            "master_addr": plan.rendezvous.address,
            "master_port": plan.rendezvous.port,
            "rendezvous_timeout_s": settings.rendezvous_timeout_s,
            "collective_timeout_s": settings.collective_timeout_s,
            "env": env,
            "log_line": log_line,
        },
    }


# --- after the run ------------------------------------------------------------------------

HostState = Literal["ok", "failed", "hung", "lost"]


@dataclass(frozen=True)
class HostRun:
    """What came back from one host: the SSH session's exit, its document (None: nothing)."""

    host: str
    rc: int
    doc: Mapping[str, Any] | None
    stderr_tail: str = ""
    timed_out: bool = False  # the SSH session was cut at its limit


@dataclass(frozen=True)
class HostVerdict:
    host: str
    state: HostState
    detail: str  # what was seen, in words
    phase: str  # the furthest phase any of its ranks reached ("" when unknown)


@dataclass(frozen=True)
class RunOutcome:
    plan: RunPlan
    verdicts: Mapping[str, HostVerdict]
    points: tuple[nccl.SweepPoint, ...]  # rank 0's host's sweep (else any host's)
    blamed: Mapping[str, str] = field(default_factory=dict)  # host -> why, from direct evidence
    # host -> the lines of NCCL's log naming its network (None: the host sent no document)
    net_lines: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (
            all(v.state == "ok" for v in self.verdicts.values())
            and bool(self.points)
            and not sum(p.wrong or 0 for p in self.points)
        )

    def failed_hosts(self) -> list[str]:
        return [h for h, v in self.verdicts.items() if v.state != "ok"]

    @property
    def environment_failure(self) -> bool:
        """Every host failed before any collective (torch not importable): pairs would fail
        the same way, so no pairwise run says anything."""
        return bool(self.verdicts) and all(
            v.state == "failed" and v.phase == "torch_import" for v in self.verdicts.values()
        )


def _phase_of(doc: Mapping[str, Any]) -> tuple[str, dict[int, str]]:
    """Each local rank's last phase (by time), and the least advanced of them."""
    timing = doc.get("worker_timing_s") or {}
    last: dict[int, str] = {}
    for rank, phases in timing.items():
        if isinstance(phases, Mapping) and phases:
            last[int(rank)] = max(phases.items(), key=lambda kv: float(kv[1]))[0]
        else:  # a rank that never reported a phase never left its start
            last[int(rank)] = PHASES[0]
    order = {p: i for i, p in enumerate(PHASES)}
    least = min(last.values(), key=lambda p: order.get(p, 0)) if last else ""
    return least, last


def host_verdict(run: HostRun, plan: RunPlan, settings: Settings) -> HostVerdict:
    """One host's run in words: ok, its ranks failed or hung (with the error they gave), or
    lost (no document: which exit, what the session said)."""
    slot = plan.slot(run.host)
    if run.doc is None:
        if run.timed_out:
            what = (
                f"sent nothing back within {settings.timeout_s + settings.ssh_grace_s} s "
                "(its SSH session was cut at that limit): the host or its network stopped "
                "answering mid-run"
            )
        elif run.rc == 124:
            what = (
                f"its payload was still running at the outer timeout ({settings.timeout_s} s) "
                "and was killed, its own deadline passed without a report: the payload's "
                "parent process stopped answering mid-run"
            )
        elif run.rc == 255:
            what = (
                "its SSH connection closed mid-run (exit 255): the host went down or off "
                "the network"
            )
        elif run.rc > 128:
            what = f"its payload was killed mid-run by signal {run.rc - 128} (exit {run.rc})"
        else:
            what = f"its payload ended without a result (exit {run.rc})"
        tail = run.stderr_tail.strip().splitlines()[-1:] if run.stderr_tail.strip() else []
        return HostVerdict(
            run.host, "lost", what + (f"; last output: {tail[0][:200]}" if tail else ""), ""
        )
    least, _last = _phase_of(run.doc)
    bad = [r for r in run.doc.get("results", []) if r.get("status") == "fail"]
    if not bad:
        return HostVerdict(
            run.host,
            "ok",
            f"ranks {slot.rank_base}-{slot.rank_base + slot.count - 1} finished",
            least,
        )
    hung = bool(run.doc.get("deadline_hit"))
    errors = sorted({str(r.get("value") or "")[:200] for r in bad if r.get("name") == "gpu_worker"})
    shown = "; ".join(e for e in errors if e) or str(bad[0].get("diagnosis", ""))[:200]
    if hung:
        what = (
            f"its ranks were still in {least} at the payload's deadline "
            f"({settings.deadline_s} s) and were killed"
        )
    else:
        what = f"its ranks stopped in {least}: {shown}"
        if "No module named 'torch'" in shown:
            what += (
                "; the multi-node ranks run on the host's python3 (as --runtime host): "
                "install PyTorch there"
            )
    return HostVerdict(run.host, "hung" if hung else "failed", what, least)


def merge_runs(plan: RunPlan, runs: Mapping[str, HostRun], settings: Settings) -> RunOutcome:
    """Every host's verdict, the sweep, and the hosts the evidence names: the ones that sent
    nothing back; else, when some hosts' ranks got no further than an earlier phase than the
    others', those (a host that never joined the rendezvous holds everyone up). When every
    failed host stopped at the same point, nothing here names one: pairwise runs do."""
    verdicts = {h: host_verdict(runs[h], plan, settings) for h in plan.hosts}
    points: tuple[nccl.SweepPoint, ...] = ()
    for h in (plan.rendezvous.master, *plan.hosts):
        doc = runs[h].doc
        if doc and doc.get("sweep"):
            try:
                points = nccl.points_from_payload(doc["sweep"])
            except (KeyError, ValueError):
                continue
            break
    blamed = {h: v.detail for h, v in verdicts.items() if v.state == "lost"}
    failed = [v for v in verdicts.values() if v.state in ("failed", "hung")]
    if not blamed and failed:
        order = {p: i for i, p in enumerate(PHASES)}
        ranks = {h: order.get(v.phase, 0) for h, v in verdicts.items()}
        least = min(ranks.values())
        behind = [h for h, r in ranks.items() if r == least]
        if len(behind) < len(verdicts):
            blamed = {h: verdicts[h].detail for h in behind}
    net_lines: dict[str, tuple[str, ...] | None] = {}
    for h in plan.hosts:
        doc = runs[h].doc
        net_lines[h] = (
            None if doc is None else tuple(str(x) for x in doc.get("nccl_log_lines") or ())
        )
    return RunOutcome(plan, verdicts, points, blamed, net_lines)


def size_label(n: int) -> str:
    if n >= 1 << 20:
        return nccl._size(n)
    return f"{n / 1024:g} KiB"


def reference_note(
    settings: Settings, hosts: int, gpus_per_host: int, gpu_name: str, at: int
) -> str:
    """The published figure for a run of this shape at this size, worded as a reference."""
    for pub in settings.published:
        if (
            pub.hosts == hosts
            and pub.gpus_per_host == gpus_per_host
            and pub.gpu_name_contains in gpu_name
            and at in pub.busbw_gbs
        ):
            return (
                f"published for {pub.setup}: {pub.busbw_gbs[at]} GB/s at {nccl._size(at)} "
                f"({pub.source}; a reference to compare with, not a floor)"
            )
    return ""


def judge_sweep(
    outcome: RunOutcome, settings: Settings, *, gpu_name: str = "", gpus_per_host: int = 0
) -> list[CheckResult]:
    """Values and busbw of the run as a whole (the same results on every host of it)."""
    plan = outcome.plan
    points = outcome.points
    scope = f"{len(plan.slots)} hosts, {plan.world} ranks"
    out: list[CheckResult] = []
    if not points:
        return out
    wrong = sum(p.wrong or 0 for p in points)
    if wrong:
        out.append(
            CheckResult(
                "multinode_allreduce_values",
                "fail",
                wrong,
                0,
                "wrong elements",
                f"the all-reduce across {scope} returned {wrong} wrong values: a GPU, NIC or "
                "link corrupts data; the pairwise runs below name the host",
            )
        )
    else:
        out.append(CheckResult("multinode_allreduce_values", "pass", 0, 0, "wrong elements"))
    sizes = " ".join(f"{size_label(p.bytes)}={p.busbw}" for p in points)
    if plan.backend == "gloo":
        peak = max(points, key=lambda p: p.busbw)
        out.append(
            CheckResult(
                "multinode_allreduce",
                "skip",
                peak.busbw,
                None,
                "GB/s",
                f"{SIMULATED_LABEL}: {scope}, busbw per size {sizes} GB/s; a CPU figure, "
                "not judged",
            )
        )
        return out
    big = [p for p in points if p.bytes >= nccl.MIN_JUDGED_BYTES]
    if not big:
        out.append(
            CheckResult(
                "multinode_allreduce",
                "fail",
                max(p.bytes for p in points),
                nccl.MIN_JUDGED_BYTES,
                "bytes",
                f"the sweep across {scope} stopped below 1 GiB, too small to judge bandwidth",
            )
        )
        return out
    peak = max(big, key=lambda p: p.busbw)
    note = reference_note(settings, len(plan.slots), gpus_per_host, gpu_name, peak.bytes)
    out.append(
        CheckResult(
            "multinode_allreduce",
            "warn",
            peak.busbw,
            None,
            "GB/s",
            f"{scope}: peak busbw {peak.busbw} GB/s at {nccl._size(peak.bytes)} (per size "
            f"{sizes}); no multi-node floor in any source read, so not judged"
            + (f"; {note}" if note else ""),
        )
    )
    return out


__all__ = [
    "HostAddresses",
    "HostRun",
    "MultinodeError",
    "RunOutcome",
    "RunPlan",
    "Settings",
    "host_spec",
    "load_settings",
    "merge_runs",
    "plan_run",
]
