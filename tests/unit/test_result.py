from __future__ import annotations

import json

import pytest

from orchestrator.result import CheckResult, failed, host_ok


def test_round_trip_through_json() -> None:
    r = CheckResult("gemm_bf16", "pass", 789.5, 711.0, "TFLOP/s", "", gpu=1)
    back = CheckResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert back.label == "gemm_bf16[gpu1]"


def test_bad_status_is_refused() -> None:
    with pytest.raises(ValueError, match="status"):
        CheckResult("x", "ok", None, None, "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        CheckResult.from_dict({"name": "x", "status": "passed"})


def test_bool_gpu_and_odd_values_are_normalised() -> None:
    r = CheckResult.from_dict({"name": "x", "status": "warn", "value": [1, 2], "gpu": True})
    assert r.value == "[1, 2]"
    assert r.gpu is None


def test_only_fail_fails_a_host() -> None:
    results = [
        CheckResult("a", "pass", 1, 1, ""),
        CheckResult("b", "warn", 1, 1, "", "d"),
        CheckResult("c", "skip", None, None, "", "d"),
    ]
    assert host_ok(results)
    bad = CheckResult("d", "fail", 0, 1, "", "fix it")
    assert failed([*results, bad]) == [bad]
    assert not host_ok([*results, bad])
