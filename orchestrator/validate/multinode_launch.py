"""The multi-node all-reduce, side effects: reach every host, start its ranks, collect.

`validate_fleet` is what `provision validate --multinode` calls after the per-host checks:

1. the addresses step on every host at once (the payload's `--addresses`: identity, IPv4
   interfaces, a free port), so the plan (multinode.plan_run) knows where to rendezvous;
2. the payload's `--multinode` on every host at once, each with its slice of the ranks,
   through the same executors the single-host check uses (SSH with the inventory's keys,
   sudo as detection runs it; local for a local connection), each session bounded by the
   nested deadlines of multinode.yaml: a host that stops answering is cut off at its limit,
   never waited for;
3. when the whole-fleet run failed, pairwise runs (isolation.isolate) among the hosts that
   answered, so the report names the bad node;
4. nccl-tests' all_reduce_perf through mpirun from the first host, where both are installed,
   side by side with our sweep (GPU hosts only).

Every host keeps its results (its own document, its verdict); the run's are added to each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..facts import HostFacts
from ..parsers.nccl_tests import parse_nccl_tests
from ..result import CheckResult, skipped
from . import isolation, multinode, nccl, nccl_net
from .multinode import Backend, HostRun, MultinodeError, RunOutcome, RunPlan, Settings
from .nccl_net import HostNet, NcclNet
from .runner import CommandOutput, Executor, parse_payload_output, stage_script

Say = Callable[[str], None]
PYTHON = "python3"  # as the single-host check's --runtime host: the host's python3 with torch


def _run(execute: Executor, script: str, timeout: float) -> CommandOutput:
    try:
        return execute(script, timeout=timeout)
    except OSError as exc:  # ssh itself missing, too many open files: this host only
        return CommandOutput(255, "", str(exc))


def _parallel(
    hosts: Sequence[str], job: Callable[[str], CommandOutput]
) -> dict[str, CommandOutput]:
    with ThreadPoolExecutor(max_workers=max(1, min(len(hosts), 64))) as pool:
        futures = {h: pool.submit(job, h) for h in hosts}
        return {h: f.result() for h, f in futures.items()}


def probe_addresses(
    hosts: Sequence[str], executors: Mapping[str, Executor], settings: Settings
) -> tuple[list[multinode.HostAddresses], dict[str, str]]:
    """Each host's addresses (inventory order), and why each that did not answer did not."""
    script = stage_script({}, f'{PYTHON} "$d/gpucheck.pyz" --addresses --spec "$d/spec.json"')
    outs = _parallel(hosts, lambda h: _run(executors[h], script, settings.addresses_timeout_s))
    found: list[multinode.HostAddresses] = []
    missing: dict[str, str] = {}
    for h in hosts:
        out = outs[h]
        doc = parse_payload_output(out.stdout)
        try:
            if doc is None:
                last = (out.stderr.strip().splitlines() or [""])[-1][:200]
                raise ValueError(f"no answer (exit {out.rc}): {last}")
            found.append(multinode.parse_addresses(h, doc))
        except ValueError as exc:
            missing[h] = f"did not answer the addresses step before the run: {exc}"
    return found, missing


def launch(
    plan: RunPlan,
    executors: Mapping[str, Executor],
    settings: Settings,
    nets: Mapping[str, HostNet] | None = None,
    net: NcclNet | None = None,
) -> dict[str, HostRun]:
    """Every host's ranks at once; each session cut at timeout_s + ssh_grace_s. `nets`:
    each host's fabric environment (nccl_net.host_net), `net` the log line to send back."""
    cmd = (
        f"timeout --kill-after=10 {settings.timeout_s} "
        f'{PYTHON} "$d/gpucheck.pyz" --multinode --spec "$d/spec.json"'
    )
    limit = settings.timeout_s + settings.ssh_grace_s

    def one(h: str) -> CommandOutput:
        hn = (nets or {}).get(h)
        spec = multinode.host_spec(
            plan, h, settings, hn.env if hn else None, net.using_line if net else ""
        )
        if net is not None and plan.backend == "gloo":
            spec["multinode"]["stand_in"] = nccl_net.stand_in(net)
        return _run(executors[h], stage_script(spec, cmd), limit)

    outs = _parallel(plan.hosts, one)
    return {
        h: HostRun(
            h,
            o.rc,
            parse_payload_output(o.stdout),
            o.stderr[-2000:],
            timed_out="(timed out)" in o.stderr,
        )
        for h, o in outs.items()
    }


def run_collective(
    hosts: Sequence[str],
    executors: Mapping[str, Executor],
    ranks: Mapping[str, int],
    backend: Backend,
    settings: Settings,
    say: Say | None = None,
    nets: Mapping[str, HostNet] | None = None,
    net: NcclNet | None = None,
) -> tuple[RunOutcome | None, dict[str, str]]:
    """Addresses, plan, launch, merge for these hosts; hosts that could not take part (with
    why). None when no run could start (the reason is in the dict, under every host)."""
    found, missing = probe_addresses(hosts, executors, settings)
    try:
        plan = multinode.plan_run(found, ranks, backend, settings)
    except MultinodeError as exc:
        return None, {**missing, **{a.host: str(exc) for a in found}}
    if plan.world < 2:
        why = "one rank in all: nothing to all-reduce with (give a host 2 GPUs or add a host)"
        return None, {**missing, **{h: why for h in plan.hosts}}
    if say is not None:
        say(f"multinode: starting {plan.describe()}")
    runs = launch(plan, executors, settings, nets, net)
    return multinode.merge_runs(plan, runs, settings), missing


def _pair_round(
    executors: Mapping[str, Executor],
    ranks: Mapping[str, int],
    backend: Backend,
    settings: Settings,
    nets: Mapping[str, HostNet],
    net: NcclNet,
) -> isolation.RunRound:
    def run_round(pairs: Sequence[isolation.Pair]) -> dict[isolation.Pair, isolation.PairResult]:
        out: dict[isolation.Pair, isolation.PairResult] = {}
        lock = threading.Lock()

        def one(pair: isolation.Pair) -> None:
            outcome, missing = run_collective(
                list(pair), executors, ranks, backend, settings, None, nets, net
            )
            if outcome is None or missing:
                res = isolation.PairResult(
                    pair, False, None, "; ".join(f"{h} {w}" for h, w in missing.items())
                )
            else:
                bad = [f"{h} {outcome.verdicts[h].detail}" for h in outcome.failed_hosts()]
                wrong = sum(p.wrong or 0 for p in outcome.points)
                if wrong:
                    bad.append(f"{wrong} wrong values")
                last = max(outcome.points, key=lambda p: p.bytes) if outcome.points else None
                res = isolation.PairResult(
                    pair, outcome.passed, last.busbw if last else None, "; ".join(bad)
                )
            with lock:
                out[pair] = res

        with ThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
            list(pool.map(one, pairs))
        return out

    return run_round


def fleet_backend(facts: Mapping[str, HostFacts]) -> tuple[Backend | None, str]:
    """NCCL where every host has working NVIDIA GPUs; gloo on the CPU where every host's GPUs
    are simulated (the lab); otherwise no run, and why."""
    sim = [h for h, f in facts.items() if f.simulated]
    if sim and len(sim) == len(facts):
        return "gloo", multinode.SIMULATED_LABEL
    if sim:
        return None, f"simulated and real hosts mixed ({', '.join(sim)} simulated)"
    none = [h for h, f in facts.items() if not f.smi_gpus]
    if none:
        return None, f"{', '.join(none)}: no working NVIDIA driver (see gpu_count)"
    return "nccl", "NCCL"


def _run_result(host: str, outcome: RunOutcome | None, why: str) -> CheckResult:
    return CheckResult("multinode_run", "fail", "not run", "ran", "", f"{host}: {why}")


def results_per_host(
    hosts: Sequence[str],
    outcome: RunOutcome | None,
    left_out: Mapping[str, str],
    iso: isolation.Isolation | None,
    settings: Settings,
    *,
    gpu_name: str = "",
    gpus_per_host: int = 0,
) -> dict[str, list[CheckResult]]:
    """Every host's share of the report: the run's values and busbw, its own verdict (named
    failures with what was seen), and its pairwise results."""
    out: dict[str, list[CheckResult]] = {h: [] for h in hosts}
    for h, why in left_out.items():
        out[h].append(_run_result(h, outcome, why))
    if outcome is None:
        return out
    sweep = multinode.judge_sweep(outcome, settings, gpu_name=gpu_name, gpus_per_host=gpus_per_host)
    blamed = dict(outcome.blamed)
    named = {**{h: f"{why}" for h, why in left_out.items()}, **blamed}
    if iso is not None:
        named.update(iso.bad)
        named.update(iso.slow)
    for h in outcome.plan.hosts:
        v = outcome.verdicts[h]
        out[h] += sweep
        if outcome.passed:
            out[h].append(CheckResult("multinode_run", "pass", v.detail, "finished", ""))
        elif h in blamed:
            out[h].append(
                CheckResult("multinode_run", "fail", v.state, "finished", "", f"{h}: {v.detail}")
            )
        elif iso is not None and h in iso.bad:
            out[h].append(
                CheckResult(
                    "multinode_run", "fail", "bad node", "finished", "", f"{h}: {iso.bad[h]}"
                )
            )
        elif iso is not None and h in iso.slow:
            out[h].append(
                CheckResult(
                    "multinode_run", "fail", "slow node", "finished", "", f"{h}: {iso.slow[h]}"
                )
            )
        elif iso is not None and h in iso.cleared:
            others = ", ".join(f"{n} ({w})" for n, w in named.items() if n != h) or "none named"
            out[h].append(
                CheckResult(
                    "multinode_run",
                    "warn",
                    v.state,
                    "finished",
                    "",
                    f"{h}: the whole-fleet run failed ({v.detail}); this host is cleared "
                    f"({iso.cleared[h]}); the failure is: {others}",
                )
            )
        else:
            why = (
                iso.unresolved.get(h, "")
                if iso is not None
                else "no pairwise run (fewer than 2 hosts answered)"
            )
            out[h].append(
                CheckResult(
                    "multinode_run",
                    "fail",
                    v.state,
                    "finished",
                    "",
                    f"{h}: {v.detail}; unresolved: {why}",
                )
            )
    if iso is not None:
        for r in iso.pairs:
            for h in r.pair:
                if h in out:
                    partner = r.pair[1] if h == r.pair[0] else r.pair[0]
                    out[h].append(
                        CheckResult(
                            "multinode_pair",
                            "pass" if r.ok else "fail",
                            r.busbw,
                            None,
                            "GB/s",
                            "" if r.ok else f"{h}: with {partner}: {r.detail}",
                        )
                    )
    return out


def nccl_tests_mpi(
    outcome: RunOutcome, executors: Mapping[str, Executor], settings: Settings
) -> list[CheckResult]:
    """nccl-tests' all_reduce_perf across the same hosts through mpirun, from the first host,
    where both are on its PATH (else a skip saying so)."""
    plan = outcome.plan
    master = plan.rendezvous.master
    look = executors[master](
        "command -v mpirun && command -v all_reduce_perf\n", timeout=settings.addresses_timeout_s
    )
    if look.rc != 0:
        return [
            skipped(
                "nccl_tests_multinode",
                f"nccl-tests with MPI is not installed on {master} (mpirun and all_reduce_perf "
                "not both on its PATH): only the torch.distributed sweep ran",
                unit="GB/s",
            )
        ]
    script = nccl_tests_script(plan, settings)
    out = executors[master](script, timeout=settings.timeout_s + settings.ssh_grace_s)
    result = parse_nccl_tests(out.stdout)
    return nccl.check_nccl_tests(result, plan.world, (), 1.0, host=master)


def nccl_tests_script(plan: RunPlan, settings: Settings) -> str:
    """An Open MPI hostfile ('<host> slots=N', fabric.yaml nccl_tests.hostfile) of the planned
    addresses, then mpirun with one process per GPU (nccl_tests.run_one_process_per_gpu),
    the NCCL environment forwarded with -x, values checked (-c 1)."""
    per_host = {s.count for s in plan.slots}
    n = per_host.pop() if len(per_host) == 1 else max(s.count for s in plan.slots)
    lines = "\n".join(f"{s.address} slots={s.count}" for s in plan.slots)
    env = {**nccl.NVLS_OFF_ENV, "NCCL_SOCKET_IFNAME": settings.nccl_socket_ifname}
    forward = " ".join(f"-x {k}={v}" for k, v in env.items())
    return (
        'd=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-mpi.XXXXXX"); trap \'rm -rf "$d"\' EXIT\n'
        f"cat > \"$d/hostfile\" <<'EOF'\n{lines}\nEOF\n"
        f'timeout {settings.timeout_s} mpirun -np {plan.world} -N {n} --hostfile "$d/hostfile" '
        f"{forward} all_reduce_perf -b 1M -e {settings.gpu_sweep['max_bytes']} -f 4 -g 1 -c 1\n"
    )


def validate_fleet(
    facts: Mapping[str, HostFacts],
    executors: Mapping[str, Executor],
    *,
    settings: Settings | None = None,
    say: Say | None = None,
) -> dict[str, list[CheckResult]]:
    """The multi-node all-reduce across `facts`' hosts (inventory order) and its isolation."""
    say = say or (lambda _msg: None)
    settings = settings or multinode.load_settings()
    hosts = list(facts)
    backend, label = fleet_backend(facts)
    if backend is None:
        return {
            h: [_run_result(h, None, f"the multi-node all-reduce did not run: {label}")]
            for h in hosts
        }
    ranks = {
        h: settings.cpu_ranks_per_host if backend == "gloo" else len(facts[h].smi_gpus)
        for h in hosts
    }
    say(f"multinode: {label}, {len(hosts)} hosts, deadline {settings.timeout_s} s")
    net = nccl_net.load_nccl_net()
    nets = {h: nccl_net.host_net(facts[h], net) for h in hosts}
    outcome, left_out = run_collective(hosts, executors, ranks, backend, settings, say, nets, net)
    for h, why in left_out.items():
        say(f"multinode: {h} left out: {why}")
    iso = None
    if outcome is not None:
        state = (
            "passed"
            if outcome.passed
            else "failed: "
            + "; ".join(f"{h} {outcome.verdicts[h].detail}" for h in outcome.failed_hosts())
        )
        say(f"multinode: whole-fleet run {state}")
        answered = [h for h in outcome.plan.hosts if outcome.verdicts[h].state != "lost"]
        if not outcome.passed and len(answered) >= 2 and not outcome.environment_failure:
            iso = isolation.isolate(
                answered,
                _pair_round(executors, ranks, backend, settings, nets, net),
                settings.slow_pair_fraction,
            )
            say(
                "multinode: pairwise: "
                + ", ".join(f"{'+'.join(r.pair)} {'ok' if r.ok else 'failed'}" for r in iso.pairs)
            )
    first = facts[hosts[0]]
    gpu_name = first.smi_gpus[0].name if first.smi_gpus else ""
    out = results_per_host(
        hosts,
        outcome,
        left_out,
        iso,
        settings,
        gpu_name=gpu_name,
        gpus_per_host=len(first.smi_gpus),
    )
    if outcome is not None:
        for h in outcome.plan.hosts:
            lines = outcome.net_lines.get(h)
            seen = None if lines is None else nccl_net.networks_in_log(lines, net)
            out[h].append(nccl_net.judge(h, nets[h], seen, net))
    if outcome is not None and backend == "nccl":
        out[outcome.plan.rendezvous.master] += nccl_tests_mpi(outcome, executors, settings)
    elif outcome is not None:
        out[outcome.plan.rendezvous.master].append(
            skipped("nccl_tests_multinode", f"{label}: nccl-tests needs GPUs", unit="GB/s")
        )
    return out
