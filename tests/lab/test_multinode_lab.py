"""Lab: `provision validate --multinode` across three test hosts over the lab network.

Simulated: CPU gloo collective, no GPU. The hosts' GPUs are simulated, so the collective runs
on the CPU with gloo, through the same payload code path NCCL takes on GPU hosts (the
addresses step, the rendezvous on the first host's lab-network address, a rank per slot,
the exact-value sweep, the nested deadlines). PyTorch (the CPU build) is installed once on
this machine and mounted read-only into each host (orchestrator/lab/torchdir.py).

1. The collective passes on every host, ranks on every host, over the lab network (not
   loopback), values checked, bandwidth reported and not judged.
2. NCCL's network (issue 47): the hosts are InfiniBand hosts (profile hgx-h100-ib, 8
   simulated HCAs each), so each rank is pointed at its HCAs (NCCL_IB_HCA) and NCCL's log is
   read back; the CPU stand-in writes NCCL's "Using network" line for the network NCCL would
   take there (validate/payload/gpucheck/multinode.py stand_in_network). With every HCA
   ACTIVE that is IB and `multinode_transport` passes; with one host's HCAs down
   (`gpusim ib down`) NCCL would fall back to TCP sockets, and that host fails in one line.
3. A host killed mid-run (`docker kill` of its container once its ranks are running) is named
   with what was seen; the other hosts are cleared by a pairwise run and keep every result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab import hosts, torchdir
from orchestrator.lab.running import RunningLab, attach

pytestmark = pytest.mark.lab

BIN = Path(sys.executable).parent
PROFILE = "hgx-h100-ib"  # 8x H100 and 8 simulated InfiniBand HCAs (issue 47)
COUNT = 3
LABEL = "simulated: CPU gloo collective, no GPU"


@pytest.fixture(scope="module")
def mnlab(scratch_lab_name: Callable[[str], str]) -> Iterator[RunningLab]:
    name = scratch_lab_name("mn")
    hosts.down(name)
    start = time.monotonic()
    torch = torchdir.ensure(say=print)
    # Group a's CPU weight (scripts/lab-tests.sh: 1024, the other groups' hosts 512): the
    # collective's own timeouts (rendezvous 60 s, payload deadline 120 s: multinode.yaml) are
    # the product's, and CI's other lab groups must not starve six ranks' torch imports past
    # them (2026-12-02: the first run's ranks were all still importing torch at 120 s).
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GPUPROV_LAB_CPU_SHARES", "1024")
        hosts.up(
            name, PROFILE, COUNT, "debian12", say=lambda _: None, mounts=(torchdir.mount(torch),)
        )
    lab = attach(name, PROFILE)
    # One untimed import per host first: the tests' runs then start with torch's files in the
    # page cache, as the second test's did (CI's first read them cold from a fresh install).
    for host in lab.hosts:
        done = lab.ssh(host, "python3 -c 'import torch'", timeout=600)
        assert done.returncode == 0, f"{host}: torch does not import: {done.stderr[-2000:]}"
    print(f"multinode lab: {COUNT} hosts up in {time.monotonic() - start:.1f} s")
    try:
        yield lab
    finally:
        hosts.down(name)


def _provision(lab: RunningLab, report: Path) -> list[str]:
    return [
        str(BIN / "provision"),
        "validate",
        "-i",
        str(lab.inventory),
        "--multinode",
        "--report",
        str(report),
    ]


def _checks(report: Path) -> dict[str, list[dict[str, Any]]]:
    doc = json.loads(report.read_text())
    return {h: v["validation"]["checks"] for h, v in doc["hosts"].items()}


def _show(out: str, report: Path) -> None:
    """provision's multi-node lines and the run's results (the rest is the unconverged
    hosts' health checks)."""
    print("\n".join(line for line in out.splitlines() if line.startswith("multinode:")))
    if report.exists():
        for h, checks in sorted(_checks(report).items()):
            for c in checks:
                if "multinode" in c["name"] or "nccl_tests" in c["name"]:
                    print(f"{h} {c['name']} {c['status']} {c['value']} {c['diagnosis']}")


def _one(checks: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [c for c in checks if c["name"] == name]
    assert len(found) == 1, (name, [c["name"] for c in checks])
    return found[0]


def test_collective_passes_across_lab_hosts(mnlab: RunningLab, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    start = time.monotonic()
    proc = subprocess.run(
        _provision(mnlab, report), capture_output=True, text=True, check=False, timeout=600
    )
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    _show(out, report)
    print(f"validate --multinode on {COUNT} lab hosts: {took:.1f} s")
    # The lab's hosts are not converged (no driver: their health checks fail, exit 1); the
    # multi-node checks must not be among the failures.
    failed = {c["name"] for cs in _checks(report).values() for c in cs if c["status"] == "fail"}
    assert proc.returncode == (1 if failed else 0), out[-3000:]
    assert not {n for n in failed if "multinode" in n or "nccl" in n}, failed
    names = sorted(mnlab.ports)
    started = next(line for line in out.splitlines() if "multinode: starting" in line)
    assert LABEL in started and f"{2 * COUNT} ranks on {COUNT} hosts" in started
    for i, h in enumerate(names):
        assert f"{h} ranks {2 * i}-{2 * i + 1}" in started
    assert "loopback" not in started and "127.0.0.1" not in started  # the lab network
    checks = _checks(report)
    for h in names:
        assert _one(checks[h], "multinode_run")["status"] == "pass"
        values = _one(checks[h], "multinode_allreduce_values")
        assert values["status"] == "pass" and values["value"] == 0
        bw = _one(checks[h], "multinode_allreduce")
        assert bw["status"] == "skip" and LABEL in bw["diagnosis"] and bw["value"] > 0
        transport = _one(checks[h], "multinode_transport")
        assert (transport["status"], transport["value"]) == ("pass", "IB"), transport
    assert _one(checks[names[0]], "nccl_tests_multinode")["status"] == "skip"


def test_a_host_whose_nccl_would_run_over_sockets_fails_in_one_line(
    mnlab: RunningLab, tmp_path: Path
) -> None:
    names = sorted(mnlab.ports)
    tcp = names[1]
    faults = " && ".join(f"gpusim ib down on --device {n}" for n in range(8))
    done = mnlab.ssh(tcp, faults)
    assert done.returncode == 0, done.stderr
    try:
        report = tmp_path / "report.json"
        proc = subprocess.run(
            _provision(mnlab, report), capture_output=True, text=True, check=False, timeout=600
        )
        _show(proc.stdout + proc.stderr, report)
    finally:
        mnlab.ssh(tcp, faults.replace(" on ", " off "))
    assert proc.returncode == 1
    checks = _checks(report)
    bad = _one(checks[tcp], "multinode_transport")
    assert bad["status"] == "fail" and bad["value"] == "Socket", bad
    assert bad["diagnosis"].startswith(
        f"{tcp}: NCCL ran over TCP sockets (NET/Socket), not the InfiniBand HCAs (NET/IB"
    )
    assert "\n" not in bad["diagnosis"]
    for h in (names[0], names[2]):
        assert _one(checks[h], "multinode_transport")["status"] == "pass"
    # the collective itself ran: only the transport is wrong
    assert _one(checks[tcp], "multinode_allreduce_values")["status"] == "pass"


def _ranks_running(container: str) -> bool:
    """The host's payload has started its rank workers (multiprocessing's spawned children)."""
    look = subprocess.run(
        ["docker", "exec", container, "sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null"],
        capture_output=True,
        check=False,
        timeout=30,
    )
    return b"spawn_main" in look.stdout


def test_host_killed_mid_run_is_named_and_others_kept(mnlab: RunningLab, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    log = tmp_path / "provision.log"
    names = sorted(mnlab.ports)
    victim = names[-1]
    start = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(_provision(mnlab, report), stdout=fh, stderr=subprocess.STDOUT)
        try:
            until = time.monotonic() + 300
            while "multinode: starting" not in log.read_text() or not _ranks_running(victim):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < until, "the multi-node run never started its ranks"
                time.sleep(0.5)
            killed_at = time.monotonic() - start
            subprocess.run(["docker", "kill", victim], capture_output=True, check=True, timeout=60)
            rc = proc.wait(timeout=420)
        finally:
            if proc.poll() is None:
                proc.kill()
    took = time.monotonic() - start
    out = log.read_text()
    _show(out, report)
    print(f"killed {victim} at {killed_at:.1f} s; provision ended at {took:.1f} s, exit {rc}")
    assert rc == 1, out[-3000:]
    checks = _checks(report)
    bad = _one(checks[victim], "multinode_run")
    assert bad["status"] == "fail" and bad["diagnosis"].startswith(f"{victim}: ")
    assert "mid-run" in bad["diagnosis"], bad
    for h in names[:-1]:
        mine = _one(checks[h], "multinode_run")
        assert mine["status"] == "warn", mine
        assert "cleared" in mine["diagnosis"] and victim in mine["diagnosis"], mine
        pair = _one(checks[h], "multinode_pair")
        assert pair["status"] == "pass" and pair["value"] > 0
        # the host's own validation is kept beside the run's results
        assert any(c["name"] == "gpu_count" for c in checks[h]), [c["name"] for c in checks[h]]
    assert any(c["name"] == "gpu_count" for c in checks[victim])
