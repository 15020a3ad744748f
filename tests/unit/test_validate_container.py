"""docker run command line for the payload, and runtime errors -> diagnoses."""

from __future__ import annotations

import pytest

from orchestrator.validate import container
from orchestrator.validate.container import ContainerSpec, diagnose, docker_run_argv


def test_gpus_all_ipc_host_payload_read_only_and_a_timeout() -> None:
    argv = docker_run_argv(
        ContainerSpec(image="img:1", payload_dir="/tmp/p", timeout_s=90, env={"A": "1"})
    )
    assert argv[:4] == ["timeout", "--kill-after=10", "90", "docker"]
    assert argv[argv.index("--gpus") + 1] == "all"
    assert "--ipc=host" in argv
    assert "/tmp/p:/gpuprov:ro" in argv
    assert argv[argv.index("-e") + 1] == "A=1"
    assert argv[-4:] == ["img:1", "/gpuprov/gpucheck.pyz", "--spec", "/gpuprov/spec.json"]
    assert argv[argv.index("--entrypoint") + 1] == "python3"


def test_cdi_and_shm_size_variants() -> None:
    argv = docker_run_argv(
        ContainerSpec(image="i", payload_dir="/p", devices="cdi", ipc_host=False, shm_size="32g")
    )
    assert argv[argv.index("--device") + 1] == "nvidia.com/gpu=all"
    assert "--shm-size=32g" in argv
    assert "--ipc=host" not in argv
    assert "--gpus" not in docker_run_argv(
        ContainerSpec(image="i", payload_dir="/p", devices="none")
    )


@pytest.mark.parametrize(
    ("rc", "stderr", "cause", "fix"),
    [
        (
            125,
            'docker: Error response from daemon: could not select device driver "" with '
            "capabilities: [[gpu]].",
            "NVIDIA Container Toolkit is missing",
            "systemctl restart docker",
        ),
        (
            125,
            "docker: Error response from daemon: unknown or invalid runtime name: nvidia.",
            "does not define the `nvidia` runtime",
            "nvidia-ctk runtime configure",
        ),
        (
            125,
            "docker: Error response from daemon: CDI device injection failed: unresolvable CDI "
            "devices nvidia.com/gpu=all.",
            "no CDI specification",
            "nvidia-ctk cdi generate",
        ),
        (
            125,
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
            "update your driver to a newer version",
            "the image needs CUDA 12.8",
            "upgrade the driver branch",
        ),
        (
            125,
            "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
            "cannot open shared object file",
            "driver is not installed or not loaded",
            "modprobe nvidia",
        ),
        (
            125,
            "nvidia-container-cli: initialization error: nvml error: driver/library version "
            "mismatch",
            "kernel module and the driver libraries differ",
            "reboot",
        ),
        (
            1,
            "Failed to initialize NVML: Unknown Error",
            "lost access to the GPU device nodes",
            "CDI",
        ),
        (
            1,
            "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock.",
            "daemon is not running",
            "--runtime host",
        ),
        (
            125,
            "Unable to find image 'nvcr.io/nvidia/pytorch:25.01-py3' locally\ndocker: Error "
            'response from daemon: Get "https://nvcr.io/v2/": dial tcp: lookup nvcr.io: no '
            "such host.",
            "could not be pulled",
            "docker load",
        ),
        (127, "sh: 1: docker: command not found", "Docker is not installed", "--runtime host"),
        (124, "", "did not finish within the timeout of 300 s", "NCCL_DEBUG=INFO"),
    ],
)
def test_runtime_errors_get_a_cause_and_a_fix(rc: int, stderr: str, cause: str, fix: str) -> None:
    d = diagnose(rc, stderr, timeout_s=300)
    assert d is not None
    assert cause in d.cause
    assert fix in d.fix
    assert d.text().startswith(d.cause)


def test_unknown_errors_give_no_made_up_diagnosis() -> None:
    assert diagnose(1, "something else entirely") is None
    assert container.TIMEOUT_EXIT == 124
