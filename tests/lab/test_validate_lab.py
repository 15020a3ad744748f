"""Validation in the lab: container plumbing with a locally built image on this machine's
Docker engine, and validate_host over SSH on simulated test hosts with fault knobs.

No GPU and no NVIDIA Container Toolkit here, so `docker run --gpus all` fails for real and
must get the toolkit diagnosis; without GPU flags the payload runs in the container and must
report that the image has no PyTorch. Lab hosts are simulated: CUDA checks must be skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.facts import HostFacts
from orchestrator.lab import hosts
from orchestrator.lab.images import ensure, recipe_for
from orchestrator.lab.running import RunningLab, attach
from orchestrator.parsers import parse_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script, split_output
from orchestrator.result import SIMULATED, CheckResult
from orchestrator.validate import runner
from orchestrator.validate.runner import SubprocessExecutor, validate_host

pytestmark = pytest.mark.lab

CATALOG = default_catalog()
REPO = Path(__file__).resolve().parents[2]
LAB_PROFILE = "p5.48xlarge"
P5_GPUS = 8  # tests/lab/profiles/p5.48xlarge.yaml


@pytest.fixture(scope="module")
def vlab(request: pytest.FixtureRequest) -> Iterator[RunningLab]:
    """The session's shared `lab`; with GPUPROV_LAB=NAME a private lab of that name instead
    (for running this file beside other helpers' lab tests without touching their hosts)."""
    name = os.environ.get("GPUPROV_LAB")
    if not name:
        yield request.getfixturevalue("lab")
        return
    hosts.down(name)
    for os_name in ("debian12", "debian13"):
        hosts.up(name, LAB_PROFILE, 1, os_name, say=lambda _: None)
    try:
        yield attach(name, LAB_PROFILE)
    finally:
        hosts.down(name)


@pytest.fixture(scope="module")
def payload_image() -> Iterator[str]:
    """A local image for the payload: the lab's Debian 12 image (python3, no torch), built
    here with `docker build` (no registry is reachable), removed afterwards."""
    base = ensure(recipe_for("debian12"), REPO / ".cache" / "lab")
    dockerfile = f"FROM {base}\nLABEL org.gpuprov.test=validate-payload\n"
    tag = "gpuprov-test/gpucheck:" + hashlib.sha256(dockerfile.encode()).hexdigest()[:12]
    build = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def h200_target() -> runner.Target:
    from orchestrator.factsdir import load_host

    real = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real"
    raw = dict(load_host(real / "h200x2-ubuntu2404-580"))
    facts = parse_host("here", raw)
    return runner.payload_target(facts, raw, CATALOG, load_policy("here", {}))


def test_docker_gpus_all_without_toolkit_gets_the_toolkit_diagnosis(payload_image: str) -> None:
    results = runner.run_payload(
        SubprocessExecutor(),
        h200_target(),
        CATALOG,
        host="control",
        runtime="docker",
        image=payload_image,
        devices="gpus",
        timeout_s=120,
    )
    assert [(r.name, r.status) for r in results] == [
        ("leftover_container", "pass"),
        ("validation_image", "pass"),
        ("gpu_payload", "fail"),
    ]
    assert "NVIDIA Container Toolkit is missing" in results[2].diagnosis
    assert "systemctl restart docker" in results[2].diagnosis


def test_payload_runs_in_the_container_read_only_and_reports_no_torch(payload_image: str) -> None:
    results = runner.run_payload(
        SubprocessExecutor(),
        h200_target(),
        CATALOG,
        host="control",
        runtime="docker",
        image=payload_image,
        devices="none",
        timeout_s=120,
        ulimits=(),  # this engine runs inside a container: it may not raise rlimits
    )
    assert [(r.name, r.status) for r in results] == [
        ("leftover_container", "pass"),
        ("validation_image", "pass"),
        ("torch_import", "fail"),
    ]
    assert "PyTorch is not importable" in results[2].diagnosis


def _validation_containers() -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=gpuprov.validation", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


@pytest.fixture(scope="module")
def hanging_image(payload_image: str) -> Iterator[str]:
    """A test double of a hung payload: the lab image with a `python3` first on PATH that only
    sleeps (a GPU check that never returns), so the container outlives its timeout for sure."""
    dockerfile = (
        f"FROM {payload_image}\n"
        "RUN printf '#!/bin/sh\\n# test double: a payload that hangs\\nexec sleep 600\\n' "
        "> /usr/local/bin/python3 && chmod 0755 /usr/local/bin/python3\n"
    )
    tag = payload_image + "-hangs"
    build = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def test_on_a_real_engine_a_timed_out_container_is_removed(hanging_image: str) -> None:
    """timeout(1) kills the docker client after 2 s while the container hangs: the staging
    script's trap must remove the container on this real engine."""
    results = runner.run_payload(
        SubprocessExecutor(),
        h200_target(),
        CATALOG,
        host="control",
        runtime="docker",
        image=hanging_image,
        devices="none",
        timeout_s=2,
        ulimits=(),
        token="labtimeout",
    )
    assert [r.name for r in results][-1] == "gpu_payload"
    assert "did not finish within the timeout of 2 s" in results[-1].diagnosis
    assert "gpuprov-validate-labtimeout" not in _validation_containers()


def test_on_a_real_engine_a_leftover_is_removed_and_a_running_one_respected(
    payload_image: str,
) -> None:
    """An expired gpuprov validation container is reported and removed; one still within its
    deadline stops the validation instead of being killed."""

    def start(name: str, until: int) -> None:
        subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--name",
                name,
                "--label",
                "gpuprov.validation=1",
                "--label",
                f"gpuprov.validation.until={until}",
                "--network",
                "none",
                "--entrypoint",
                "sleep",
                payload_image,
                "300",
            ],
            capture_output=True,
            check=True,
            timeout=60,
        )

    def validate() -> list[CheckResult]:
        return runner.run_payload(
            SubprocessExecutor(),
            h200_target(),
            CATALOG,
            host="control",
            runtime="docker",
            image=payload_image,
            devices="none",
            timeout_s=120,
            ulimits=(),
        )

    import time

    try:
        start("gpuprov-validate-labold", 1)
        results = validate()
        left = next(r for r in results if r.name == "leftover_container")
        assert (left.status, left.value) == ("warn", 1)
        assert "gpuprov-validate-labold" not in _validation_containers()
        start("gpuprov-validate-labbusy", int(time.time()) + 3600)
        busy = {r.name: r for r in validate()}
        assert busy["validation_busy"].status == "fail"
        assert "torch_import" not in busy
        assert "gpuprov-validate-labbusy" in _validation_containers()
    finally:
        for name in ("gpuprov-validate-labold", "gpuprov-validate-labbusy"):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_payload_mount_is_read_only(payload_image: str, tmp_path: Path) -> None:
    from orchestrator.validate.container import ContainerSpec, docker_run_argv

    (tmp_path / "gpucheck.pyz").write_text("open('/gpuprov/x', 'w')\n")  # python runs it
    (tmp_path / "spec.json").write_text("{}")
    argv = docker_run_argv(
        ContainerSpec(
            image=payload_image, payload_dir=str(tmp_path), devices="none", timeout_s=60, ulimits=()
        )
    )
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode != 0
    assert "Read-only file system" in proc.stderr


def _executor(vlab: RunningLab, host: str) -> SubprocessExecutor:
    return SubprocessExecutor(tuple(hosts.ssh_command(vlab.paths, vlab.ports[host])))


def _detect(vlab: RunningLab, host: str) -> tuple[HostFacts, dict[str, str]]:
    out = _executor(vlab, host)(probe_script(), timeout=120)
    raw = split_output(host, out.stdout)
    return parse_host(host, raw), raw


def _validate(vlab: RunningLab, host: str) -> dict[str, CheckResult]:
    facts, raw = _detect(vlab, host)
    assert facts.simulated
    results = validate_host(
        facts,
        raw,
        catalog=CATALOG,
        policy=load_policy(host, {"gpuprov_validation_expected_gpus": P5_GPUS}),
        execute=_executor(vlab, host),
    )
    return {r.label: r for r in results}


@contextlib.contextmanager
def fault(vlab: RunningLab, host: str, knob: str, *args: str) -> Iterator[None]:
    on = vlab.ssh(host, " ".join(["gpusim", "fault", knob, "on", *args]))
    assert on.returncode == 0, on.stderr
    try:
        yield
    finally:
        vlab.ssh(host, " ".join(["gpusim", "fault", knob, "off", *args]))


@pytest.mark.parametrize("os_name", ["debian12", "debian13"])
def test_lab_host_skips_cuda_checks_as_simulated(vlab: RunningLab, os_name: str) -> None:
    by = _validate(vlab, vlab.host_for(os_name))
    for name, _unit in runner.CUDA_CHECKS:
        assert (by[name].status, by[name].diagnosis) == ("skip", SIMULATED)
    assert "pcie_link" in {r.name for r in by.values()}
    assert not [r for r in by.values() if r.name == "pcie_link" and r.status == "fail"]


# Knobs that change what a host without a driver shows (sysfs, the kernel log). The knobs
# that change nvidia-smi's output need the driver role applied first; they are covered by
# tests/unit/test_validate_gpusim.py against the same simulator in-process.
def test_gpu_missing_on_a_lab_host(vlab: RunningLab) -> None:
    host = vlab.host_for("debian12")
    with fault(vlab, host, "gpu-missing"):
        r = _validate(vlab, host)["gpu_count"]
    assert r.status == "fail"
    assert f"{P5_GPUS - 1} NVIDIA GPUs on the PCI bus, {P5_GPUS} expected" in r.diagnosis


def test_pcie_degraded_on_a_lab_host(vlab: RunningLab) -> None:
    host = vlab.host_for("debian12")
    with fault(vlab, host, "pcie-degraded", "--gpu", "1"):
        bad = [r for r in _validate(vlab, host).values() if r.name == "pcie_link"]
    failing = [r for r in bad if r.status == "fail"]
    assert len(failing) == 1
    assert failing[0].value == "16 GT/s x16"
    assert "below its maximum 32 GT/s x16" in failing[0].diagnosis


def test_xid_on_a_lab_host(vlab: RunningLab) -> None:
    host = vlab.host_for("debian13")
    with fault(vlab, host, "xid"):
        r = _validate(vlab, host)["xid_errors"]
    assert r.status == "fail"
    assert "Xid 79" in r.diagnosis
