"""The multi-node all-reduce's pure part (orchestrator/validate/multinode.py and the result
mapping of multinode_launch.py): rendezvous planning, rank layout, payload specs, merging the
hosts' documents, deadlines, judging, the nccl-tests command.

Fed with real documents (tests/unit/data/multinode/: the payload's --multinode runs captured
on this machine and in the lab, its README says how) and variants derived from them; the
reference figures from tests/recorded/reference/fabric.yaml."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.facts import HostFacts
from orchestrator.parsers.nccl_tests import parse_nccl_tests
from orchestrator.result import CheckResult
from orchestrator.validate import multinode as mn
from orchestrator.validate import nccl
from orchestrator.validate.isolation import Isolation, PairResult
from orchestrator.validate.multinode_launch import (
    fleet_backend,
    nccl_tests_script,
    results_per_host,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "unit" / "data" / "multinode"
REFERENCE = ROOT / "tests" / "recorded" / "reference" / "fabric.yaml"
NCCL_TESTS = (
    ROOT / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580/nccl-tests-all_reduce_perf.txt"
)
SETTINGS = mn.load_settings()
GIB = 1 << 30


def addrs(
    host: str, *ifaces: tuple[str, str, str], machine: str = "", port: int = 4000
) -> mn.HostAddresses:
    return mn.HostAddresses(
        host,
        machine or f"id-{host}",
        tuple(mn.Interface(*i) for i in (("lo", "127.0.0.1", "255.0.0.0"), *ifaces)),
        port,
    )


def lab_host(host: str, last: int) -> mn.HostAddresses:
    """A lab host as the addresses step saw it: eth0 on the lab network, and a docker0 whose
    address is the same on every host (Docker's default bridge)."""
    return addrs(
        host,
        ("eth0", f"10.214.64.{last}", "255.255.255.0"),
        ("docker0", "172.17.0.1", "255.255.0.0"),
    )


def load(name: str) -> tuple[dict[str, Any], mn.RunPlan, dict[str, mn.HostRun]]:
    data = json.loads((DATA / name).read_text())
    hosts = data["hosts"]
    if data.get("one_machine"):
        found = [addrs(h, machine="same") for h in hosts]
    else:
        found = [lab_host(h, i + 2) for i, h in enumerate(hosts)]
    plan = mn.plan_run(found, {h: data["ranks_per_host"] for h in hosts}, "gloo", SETTINGS)
    assert plan.world == data["world"]
    runs = {
        h: mn.HostRun(h, r["rc"], r["doc"], r["stderr_tail"], r["timed_out"])
        for h, r in data["runs"].items()
    }
    return data, plan, runs


# --- settings, from the reference ---------------------------------------------------------


def test_settings_come_from_the_reference() -> None:
    ref = yaml.safe_load(REFERENCE.read_text())
    ifname = ref["efa"]["nccl_env"]["NCCL_SOCKET_IFNAME"]["value"]
    assert f"'{SETTINGS.nccl_socket_ifname}'" in ifname
    published = ref["efa"]["expected_busbw"]["published"][0]
    assert published["setup"].startswith("2x p5.48xlarge")
    (pub,) = SETTINGS.published
    units = {"MiB": 1 << 20, "GiB": GIB}
    expected = {
        int(k[:-3]) * units[k[-3:]]: v
        for k, v in published["values_gbps"].items()
        if k[-3:] == "GiB"
    }
    assert dict(pub.busbw_gbs) == expected
    assert "awsome-distributed-training" in pub.source and pub.hosts == 2 and pub.gpus_per_host == 8


def test_deadlines_nest() -> None:
    """store wait + a sweep < the payload's deadline < the outer timeout < the SSH limit."""
    s = SETTINGS
    assert s.collective_timeout_s < s.rendezvous_timeout_s < s.deadline_s < s.timeout_s
    assert s.timeout_s < s.timeout_s + s.ssh_grace_s
    assert s.deadline_s - s.rendezvous_timeout_s >= 30  # room for the sweep after a late join


# --- rendezvous planning ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule", "out"),
    [
        ("docker0", "^docker,lo,veth", True),
        ("lo", "^docker,lo,veth", True),
        ("veth12ab", "^docker,lo,veth", True),
        ("eth0", "^docker,lo,veth", False),
        ("ens5", "^docker,lo,veth", False),
        ("ens5", "en", False),
        ("eth0", "en", True),
    ],
)
def test_socket_ifname_rule(name: str, rule: str, out: bool) -> None:
    assert mn.excluded(name, rule) is out


def test_rendezvous_on_the_network_every_host_shares_never_docker0() -> None:
    found = [lab_host("h1", 2), lab_host("h2", 3), lab_host("h3", 4)]
    rdv, chosen = mn.plan_rendezvous(found, SETTINGS.nccl_socket_ifname)
    assert (rdv.master, rdv.address, rdv.port) == ("h1", "10.214.64.2", 4000)
    assert not rdv.loopback and not rdv.routed
    assert {h: i.name for h, i in chosen.items()} == {"h1": "eth0", "h2": "eth0", "h3": "eth0"}


def test_the_master_interface_is_the_one_the_others_share() -> None:
    a = addrs("a", ("ens5", "192.168.9.1", "255.255.255.0"), ("ens6", "10.0.0.1", "255.255.0.0"))
    b = addrs("b", ("ens5", "10.0.3.7", "255.255.0.0"))
    rdv, chosen = mn.plan_rendezvous([a, b], SETTINGS.nccl_socket_ifname)
    assert rdv.address == "10.0.0.1" and chosen["a"].name == "ens6" and chosen["b"].name == "ens5"


def test_hosts_on_no_common_network_are_routed() -> None:
    a = addrs("a", ("ens5", "10.0.1.5", "255.255.255.0"))
    b = addrs("b", ("ens5", "10.0.2.5", "255.255.255.0"))
    rdv, chosen = mn.plan_rendezvous([a, b], SETTINGS.nccl_socket_ifname)
    assert rdv.routed and rdv.address == "10.0.1.5" and chosen["b"].address == "10.0.2.5"


def test_one_machine_under_two_names_rendezvous_over_loopback() -> None:
    nic = ("ens5", "10.0.1.5", "255.255.255.0")
    rdv, chosen = mn.plan_rendezvous(
        [addrs("gpu-a", nic, machine="m1"), addrs("gpu-b", nic, machine="m1")],
        SETTINGS.nccl_socket_ifname,
    )
    assert rdv.loopback and rdv.address == "127.0.0.1"
    assert {i.name for i in chosen.values()} == {"lo"}


def test_a_cloned_machine_id_with_other_addresses_is_another_machine() -> None:
    a = addrs("a", ("ens5", "10.0.1.5", "255.255.255.0"), machine="cloned")
    b = addrs("b", ("ens5", "10.0.1.6", "255.255.255.0"), machine="cloned")
    rdv, _ = mn.plan_rendezvous([a, b], SETTINGS.nccl_socket_ifname)
    assert not rdv.loopback and rdv.address == "10.0.1.5"


def test_a_host_with_only_excluded_interfaces_is_named() -> None:
    a = lab_host("a", 2)
    b = addrs("b", ("docker0", "172.17.0.1", "255.255.0.0"))
    with pytest.raises(mn.MultinodeError, match=r"^b: no IPv4 interface"):
        mn.plan_rendezvous([a, b], SETTINGS.nccl_socket_ifname)


def test_parse_addresses_rejects_a_broken_document() -> None:
    with pytest.raises(ValueError, match="h1: malformed"):
        mn.parse_addresses("h1", {"interfaces": [{"name": "eth0"}], "free_port": 1})


# --- rank layout and specs ----------------------------------------------------------------


def test_ranks_are_laid_out_in_inventory_order_one_per_gpu() -> None:
    layout = mn.rank_layout(["a", "b"], {"a": 8, "b": 8}, {"a": "m1", "b": "m2"}, gpus=True)
    assert layout == [("a", 0, 8, tuple(range(8))), ("b", 8, 8, tuple(range(8)))]


def test_two_names_for_one_two_gpu_machine_split_its_gpus() -> None:
    layout = mn.rank_layout(["a", "b"], {"a": 2, "b": 2}, {"a": "m", "b": "m"}, gpus=True)
    assert layout == [("a", 0, 1, (0,)), ("b", 1, 1, (1,))]


def test_more_names_than_gpus_on_one_machine_is_refused() -> None:
    with pytest.raises(mn.MultinodeError, match="fewer GPUs than inventory names"):
        mn.rank_layout(["a", "b"], {"a": 1, "b": 1}, {"a": "m", "b": "m"}, gpus=True)


def test_cpu_ranks_are_not_split() -> None:
    layout = mn.rank_layout(["a", "b"], {"a": 2, "b": 2}, {"a": "m", "b": "m"}, gpus=False)
    assert layout == [("a", 0, 2, ()), ("b", 2, 2, ())]


def test_gpu_host_specs_carry_the_reference_env_and_the_single_host_sweep() -> None:
    found = [lab_host("a", 2), lab_host("b", 3)]
    plan = mn.plan_run(found, {"a": 8, "b": 8}, "nccl", SETTINGS)
    spec = mn.host_spec(plan, "b", SETTINGS)
    m = spec["multinode"]
    assert (m["backend"], m["rank_base"], m["count"], m["world"]) == ("nccl", 8, 8, 16)
    assert m["gpus"] == list(range(8)) and m["master_addr"] == "10.214.64.2"
    assert m["env"] == {"NCCL_SOCKET_IFNAME": "^docker,lo,veth"}
    assert spec["allreduce"]["max_bytes"] == nccl.DEFAULT_MAX_BYTES
    assert spec["deadline_s"] < spec["timeout_s"]


def test_cpu_specs_name_the_interface_for_gloo_and_a_single_machine_uses_lo() -> None:
    plan = mn.plan_run([lab_host("a", 2), lab_host("b", 3)], {"a": 2, "b": 2}, "gloo", SETTINGS)
    assert mn.host_spec(plan, "a", SETTINGS)["multinode"]["env"] == {"GLOO_SOCKET_IFNAME": "eth0"}
    one = [addrs("a", machine="m"), addrs("b", machine="m")]
    plan = mn.plan_run(one, {"a": 2, "b": 2}, "nccl", SETTINGS)
    spec = mn.host_spec(plan, "b", SETTINGS)["multinode"]
    assert spec["env"] == {"NCCL_SOCKET_IFNAME": "lo"} and spec["gpus"] == [1]


def test_the_plan_in_words() -> None:
    plan = mn.plan_run([lab_host("a", 2), lab_host("b", 3)], {"a": 2, "b": 2}, "gloo", SETTINGS)
    assert plan.describe() == (
        "simulated: CPU gloo collective, no GPU: 4 ranks on 2 hosts (a ranks 0-1, b ranks "
        "2-3); rendezvous a 10.214.64.2:4000"
    )


# --- the hosts' documents -----------------------------------------------------------------


def test_a_recorded_passing_run_merges_into_one_sweep() -> None:
    _data, plan, runs = load("local-pass-3hosts.json")
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert out.passed and not out.blamed
    assert [p.bytes for p in out.points] == [65536, 262144, 1 << 20, 4 << 20]
    assert all(p.wrong == 0 for p in out.points)
    judged = mn.judge_sweep(out, SETTINGS)
    assert [(c.name, c.status) for c in judged] == [
        ("multinode_allreduce_values", "pass"),
        ("multinode_allreduce", "skip"),
    ]
    assert judged[1].diagnosis.startswith(mn.SIMULATED_LABEL) and "64 KiB=" in judged[1].diagnosis


def test_a_recorded_killed_host_is_named_and_the_others_documents_kept() -> None:
    data, plan, runs = load("lab-kill.json")
    victim = data["hosts"][-1]
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert not out.passed
    assert list(out.blamed) == [victim]
    assert out.verdicts[victim].state == "lost"
    assert "SSH connection closed mid-run (exit 255)" in out.blamed[victim]
    for h in data["hosts"][:-1]:  # they answered, with what they saw
        v = out.verdicts[h]
        assert v.state == "failed" and v.phase == "rendezvous" and "DistStoreError" in v.detail


def test_recorded_stopped_ranks_hit_the_payload_deadline_and_are_named() -> None:
    data, plan, runs = load("lab-stop.json")
    victim = data["hosts"][-1]
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert not out.passed
    assert out.verdicts[victim].state == "hung"
    assert "at the payload's deadline" in out.verdicts[victim].detail
    assert list(out.blamed) == [victim]
    for h in data["hosts"][:-1]:
        assert out.verdicts[h].state == "failed"


def _derived(name: str) -> tuple[mn.RunPlan, dict[str, mn.HostRun]]:
    _data, plan, runs = load(name)
    return plan, {h: replace(r, doc=copy.deepcopy(r.doc)) for h, r in runs.items()}


def test_a_wrong_value_fails_the_run_even_when_every_host_finished() -> None:
    plan, runs = _derived("local-pass-3hosts.json")
    doc = runs[plan.rendezvous.master].doc
    assert doc is not None
    doc["sweep"][2]["wrong"] = 7
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert not out.passed and not out.blamed  # nobody to blame from the documents alone
    values = mn.judge_sweep(out, SETTINGS)[0]
    assert values.status == "fail" and values.value == 7 and "pairwise" in values.diagnosis


def test_the_host_behind_the_others_is_named() -> None:
    plan, runs = _derived("lab-kill.json")
    names = list(plan.hosts)
    late = runs[names[0]]
    assert late.doc is not None
    # derived: the survivors got into the sweep and failed there; host 1 never left its import
    for h in names[:-1]:
        doc = runs[h].doc
        assert doc is not None
        for phases in doc["worker_timing_s"].values():
            phases["allreduce_sweep"] = 40.0
    runs[names[-1]] = replace(runs[names[0]], host=names[-1], doc=copy.deepcopy(late.doc))
    doc = runs[names[-1]].doc
    assert doc is not None
    doc["worker_timing_s"] = {"0": {"torch_import": 1.0}, "1": {"torch_import": 1.2}}
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert list(out.blamed) == [names[-1]] and "torch_import" in out.blamed[names[-1]]


def test_hosts_that_all_failed_at_the_same_point_are_left_to_the_pairwise_runs() -> None:
    plan, runs = _derived("lab-kill.json")
    names = list(plan.hosts)
    runs[names[-1]] = replace(runs[names[1]], host=names[-1])
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert not out.passed and not out.blamed


@pytest.mark.parametrize(
    ("rc", "timed_out", "words"),
    [
        (255, False, "SSH connection closed mid-run (exit 255)"),
        (124, False, "outer timeout (150 s)"),
        (137, False, "killed mid-run by signal 9 (exit 137)"),
        (124, True, "sent nothing back within 165 s"),
        (1, False, "ended without a result (exit 1)"),
    ],
)
def test_a_host_that_sent_nothing_back_is_described(rc: int, timed_out: bool, words: str) -> None:
    _data, plan, _runs = load("lab-kill.json")
    v = mn.host_verdict(mn.HostRun(plan.hosts[0], rc, None, "boom\n", timed_out), plan, SETTINGS)
    assert v.state == "lost" and words in v.detail and v.detail.endswith("last output: boom")


# --- judging on GPUs ----------------------------------------------------------------------


def _gpu_outcome(hosts: int) -> mn.RunOutcome:
    """A GPU run's sweep, derived from the real 2x H200 nccl-tests capture (its sizes and
    busbw; values exact), over `hosts` hosts of 8 GPUs."""
    found = [lab_host(f"g{i}", i + 2) for i in range(hosts)]
    plan = mn.plan_run(found, {a.host: 8 for a in found}, "nccl", SETTINGS)
    points = nccl.points_from_nccl_tests(parse_nccl_tests(NCCL_TESTS.read_text()))
    verdicts = {h: mn.HostVerdict(h, "ok", "", "done") for h in plan.hosts}
    return mn.RunOutcome(plan, verdicts, points)


def test_gpu_busbw_is_reported_not_judged_beside_the_published_reference() -> None:
    out = _gpu_outcome(2)
    bw = mn.judge_sweep(out, SETTINGS, gpu_name="NVIDIA H100 80GB HBM3", gpus_per_host=8)[1]
    assert bw.status == "warn" and bw.value == 343.86 and bw.limit is None
    assert "no multi-node floor" in bw.diagnosis
    assert "465.87 GB/s at 4 GiB" in bw.diagnosis and "not a floor" in bw.diagnosis


def test_no_reference_is_quoted_for_another_shape() -> None:
    bw = mn.judge_sweep(_gpu_outcome(3), SETTINGS, gpu_name="NVIDIA H100", gpus_per_host=8)[1]
    assert "published" not in bw.diagnosis
    bw = mn.judge_sweep(_gpu_outcome(2), SETTINGS, gpu_name="NVIDIA H200", gpus_per_host=8)[1]
    assert "published" not in bw.diagnosis


def test_a_gpu_sweep_below_one_gib_fails() -> None:
    out = _gpu_outcome(2)
    small = replace(out, points=tuple(p for p in out.points if p.bytes < GIB))
    assert mn.judge_sweep(small, SETTINGS)[1].status == "fail"


def test_nccl_tests_through_mpirun_one_process_per_gpu() -> None:
    plan = _gpu_outcome(2).plan
    script = nccl_tests_script(plan, SETTINGS)
    assert "10.214.64.2 slots=8\n10.214.64.3 slots=8\n" in script
    assert "mpirun -np 16 -N 8 --hostfile" in script
    assert "-x NCCL_NVLS_ENABLE=0" in script and "-x NCCL_SOCKET_IFNAME=^docker,lo,veth" in script
    assert script.rstrip().endswith("all_reduce_perf -b 1M -e 4294967296 -f 4 -g 1 -c 1")


# --- per-host results ---------------------------------------------------------------------


def test_a_killed_host_fails_by_name_the_cleared_hosts_warn_and_keep_their_pairs() -> None:
    data, plan, runs = load("lab-kill.json")
    a, b, victim = data["hosts"]
    out = mn.merge_runs(plan, runs, SETTINGS)
    iso = Isolation(
        cleared={a: f"{a}+{b}: passed, 0.2 GB/s", b: f"{a}+{b}: passed, 0.2 GB/s"},
        pairs=(PairResult((a, b), True, 0.2),),
    )
    res = results_per_host(list(plan.hosts), out, {}, iso, SETTINGS)
    run = {h: next(c for c in res[h] if c.name == "multinode_run") for h in plan.hosts}
    assert run[victim].status == "fail" and run[victim].diagnosis.startswith(f"{victim}: ")
    for h in (a, b):
        assert run[h].status == "warn"
        assert "cleared" in run[h].diagnosis and victim in run[h].diagnosis
        assert [c.status for c in res[h] if c.name == "multinode_pair"] == ["pass"]
    assert not any(c.name == "multinode_pair" for c in res[victim])


def test_an_unresolved_failure_fails_every_host_by_name() -> None:
    plan, runs = _derived("lab-kill.json")
    names = list(plan.hosts)
    runs[names[-1]] = replace(runs[names[1]], host=names[-1])
    out = mn.merge_runs(plan, runs, SETTINGS)
    iso = Isolation(unresolved={h: "no host passed to compare it with; x" for h in names})
    res = results_per_host(names, out, {}, iso, SETTINGS)
    for h in names:
        run = next(c for c in res[h] if c.name == "multinode_run")
        assert (
            run.status == "fail"
            and run.diagnosis.startswith(f"{h}: ")
            and "unresolved" in run.diagnosis
        )


def test_a_host_left_out_before_the_run_is_named() -> None:
    _data, plan, runs = load("local-pass-3hosts.json")
    out = mn.merge_runs(plan, runs, SETTINGS)
    res = results_per_host(
        [*plan.hosts, "z"], out, {"z": "did not answer the addresses step"}, None, SETTINGS
    )
    assert res["z"] == [
        CheckResult(
            "multinode_run", "fail", "not run", "ran", "", "z: did not answer the addresses step"
        )
    ]
    assert all(
        any(c.name == "multinode_run" and c.status == "pass" for c in res[h]) for h in plan.hosts
    )


def _facts(host: str, *, simulated: bool, gpus: int) -> HostFacts:
    """The real 2x H200 host's facts, renamed; its GPUs kept or removed."""
    from orchestrator.factsdir import load_host
    from orchestrator.parsers import parse_host

    real = parse_host(
        host, dict(load_host(ROOT / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"))
    )
    return replace(real, simulated=simulated, smi_gpus=real.smi_gpus[:gpus])


def test_the_backend_follows_the_hosts() -> None:
    sim = {h: _facts(h, simulated=True, gpus=0) for h in ("a", "b")}
    assert fleet_backend(sim) == ("gloo", mn.SIMULATED_LABEL)
    real = {h: _facts(h, simulated=False, gpus=2) for h in ("a", "b")}
    assert fleet_backend(real) == ("nccl", "NCCL")
    backend, why = fleet_backend({**real, "c": _facts("c", simulated=True, gpus=0)})
    assert backend is None and "mixed" in why
    backend, why = fleet_backend({**real, "c": _facts("c", simulated=False, gpus=0)})
    assert backend is None and why.startswith("c: no working NVIDIA driver")


def test_junit_puts_the_run_in_a_suite_of_its_own() -> None:
    from orchestrator.validate.junit import suite_of

    assert suite_of(CheckResult("multinode_run", "pass", None, None, "")) == "multinode"
    assert suite_of(CheckResult("nccl_tests_multinode", "skip", None, None, "")) == "nccl"


def test_a_real_addresses_document_plans_over_eth0_not_the_bridges() -> None:
    doc = json.loads((DATA / "addresses-devmachine.json").read_text())
    here = mn.parse_addresses("here", doc)
    assert {i.name for i in here.interfaces} >= {"lo", "eth0", "docker0"}
    peer = addrs("peer", ("ens5", "192.0.2.77", "255.255.255.0"))
    rdv, chosen = mn.plan_rendezvous([here, peer], SETTINGS.nccl_socket_ifname)
    assert (rdv.address, chosen["here"].name, chosen["peer"].name) == ("192.0.2.2", "eth0", "ens5")
    assert rdv.port == doc["free_port"]


def test_torch_missing_everywhere_is_an_environment_failure_with_the_fix() -> None:
    plan, runs = _derived("lab-kill.json")
    for h in plan.hosts:
        runs[h] = replace(
            runs[plan.hosts[0]],
            host=h,
            doc={
                "results": [
                    {
                        "name": "gpu_worker",
                        "status": "fail",
                        "value": "ModuleNotFoundError: No module named 'torch'",
                    }
                ],
                "worker_timing_s": {"0": {"torch_import": 0.1}, "1": {"torch_import": 0.1}},
            },
        )
    out = mn.merge_runs(plan, runs, SETTINGS)
    assert out.environment_failure and not out.blamed
    assert all("install PyTorch there" in v.detail for v in out.verdicts.values())
    plan2, runs2 = _derived("lab-kill.json")
    assert not mn.merge_runs(plan2, runs2, SETTINGS).environment_failure


def test_the_pipeline_adds_the_run_to_every_validated_host_and_skips_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """validate --multinode's glue: the hosts whose own validation ran take part, in
    inventory order; their results join each host's own; a host not validated is left."""
    from rich.console import Console

    from orchestrator import pipeline
    from orchestrator import report as rep
    from orchestrator.validate import multinode_launch

    facts = {h: _facts(h, simulated=True, gpus=0) for h in ("a", "b", "c")}
    seen: dict[str, Any] = {}

    def fake_fleet(f: Any, executors: Any, **_kw: Any) -> dict[str, list[CheckResult]]:
        seen["hosts"], seen["executors"] = list(f), list(executors)
        return {h: [CheckResult("multinode_run", "pass", "ok", "finished", "")] for h in f}

    monkeypatch.setattr(multinode_launch, "validate_fleet", fake_fleet)
    monkeypatch.setattr(pipeline, "_executor", lambda _fleet, h: f"exec-{h}")
    fleet = pipeline.Fleet(None, object(), {h: {} for h in ("a", "b", "c")})
    detected = pipeline.Detected({}, facts, {})
    own = CheckResult("gpu_count", "pass", 8, 8, "GPUs")
    validation = {
        "a": rep.StageResult("done", (own,)),
        "b": rep.StageResult("not_run", note="host not reachable or blocked"),
        "c": rep.StageResult("done", (own,)),
    }
    out = pipeline._multinode(fleet, detected, validation, Console(quiet=True))
    assert seen == {"hosts": ["a", "c"], "executors": ["a", "c"]}
    assert [c.name for c in out["a"].checks] == ["gpu_count", "multinode_run"]
    assert out["b"] == validation["b"]
    assert [c.name for c in out["c"].checks] == ["gpu_count", "multinode_run"]
