"""The payload's pure decisions, imported from its package (standalone: it runs as a zipapp
with the standard library and torch only), and the zipapp the runner stages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from payloadpkg import FOLDER, load_payload

from orchestrator.validate import runner

gpucheck = load_payload()

# torch.cuda.get_arch_list() of the real 2x H200 host (fixtures/real/.../torch-info.txt)
REAL_ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def test_payload_does_not_import_the_orchestrator() -> None:
    text = "\n".join(p.read_text() for p in (FOLDER / "gpucheck").glob("*.py"))
    assert "import orchestrator" not in text
    assert "from orchestrator" not in text


@pytest.mark.parametrize(
    ("arch", "cc", "status", "needle"),
    [
        (REAL_ARCH, (9, 0), "pass", ""),
        (["sm_80", "sm_86", "sm_90a"], (9, 0), "pass", ""),
        (["sm_70", "sm_75", "sm_80", "sm_86", "compute_86"], (9, 0), "warn", "PTX compute_86"),
        # the seed articles' "no kernel image is available" failure: an sm_80-only build on H100
        (["sm_70", "sm_75", "sm_80"], (9, 0), "fail", "no kernels for sm_90"),
        (["sm_90", "compute_90"], (8, 0), "fail", "no kernels for sm_80"),
        ([], (9, 0), "fail", "(none)"),
    ],
)
def test_arch_list_covers_the_device(
    arch: list[str], cc: tuple[int, int], status: str, needle: str
) -> None:
    got, diagnosis = gpucheck.decisions.arch_covers(arch, cc)
    assert got == status
    assert needle in diagnosis


@pytest.mark.parametrize(
    ("build", "driver", "status", "needle"),
    [
        ("13.0", 13000, "pass", ""),  # the real host: torch 2.11+cu130 on driver 580 (13.0)
        ("12.4", 13000, "pass", ""),
        ("12.8", 12040, "warn", "minor-version compatibility"),
        ("13.0", 12080, "fail", "driver too old"),
        (None, 13000, "fail", "CPU-only"),
        ("12.4", None, "warn", "could not read"),
    ],
)
def test_cuda_build_vs_driver(
    build: str | None, driver: int | None, status: str, needle: str
) -> None:
    got, _value, diagnosis = gpucheck.decisions.cuda_vs_driver(build, driver)
    assert got == status
    assert needle in diagnosis


def test_busbw_is_nccl_tests_definition() -> None:
    assert gpucheck.decisions.busbw(100.0, 2) == pytest.approx(100.0)
    assert gpucheck.decisions.busbw(100.0, 8) == pytest.approx(175.0)
    assert gpucheck.decisions.busbw(100.0, 1) == 0.0


def test_sweep_sizes_match_the_nccl_tests_run() -> None:
    sizes = gpucheck.decisions.sweep_sizes(1 << 20, 4 << 30, 4)
    assert sizes == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30]


def test_floors_never_pass_without_a_limit() -> None:
    assert gpucheck.results.at_least("g", 800.0, 711.0, "TFLOP/s", 0, "x")["status"] == "pass"
    low = gpucheck.results.at_least("g", 500.0, 711.0, "TFLOP/s", 0, "bf16 GEMM")
    assert low["status"] == "fail"
    assert "below the floor 711" in low["diagnosis"]
    assert gpucheck.results.at_least("g", 800.0, None, "TFLOP/s", 0, "x")["status"] == "warn"


def test_without_torch_the_payload_says_so(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"expected_count": 2}))
    zipapp = tmp_path / "gpucheck.pyz"  # what the runner stages on the host
    zipapp.write_bytes(runner.payload_zipapp())
    proc = subprocess.run(
        [sys.executable, "-S", str(zipapp), "--spec", str(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    framed = proc.stdout.split("@@gpuprov-gpucheck@@ begin\n", 1)[1]
    doc = json.loads(framed.split("\n@@gpuprov-gpucheck@@ end", 1)[0])
    assert [r["name"] for r in doc["results"]] == ["torch_import"]
    assert doc["results"][0]["status"] == "fail"
    assert "PyTorch is not importable" in doc["results"][0]["diagnosis"]
