"""The result of one check (validation and verification share it), as the report shows and
stores it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Literal, TypeVar, cast

Status = Literal["pass", "fail", "warn", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "warn", "skip")
Value = float | int | str | None

SIMULATED = "skipped: simulated GPU (lab host); this check needs a real GPU and CUDA"


@dataclass(frozen=True)
class CheckResult:
    """One check: what was measured (`value`) against what was required (`limit`).

    `diagnosis` is empty on pass; otherwise it says what is wrong and how to fix it.
    `gpu` names the GPU index for per-GPU checks, None for host-wide ones.
    `seconds` is the wall-clock time the check took, None where it was not timed on its own
    (a check function that yields several results splits its time evenly among them).
    """

    name: str
    status: Status
    value: Value
    limit: Value
    unit: str
    diagnosis: str = ""
    gpu: int | None = None
    # how long it took is not part of the verdict: equal results may differ in time
    seconds: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status {self.status!r} not in {STATUSES}")

    @property
    def label(self) -> str:
        """Name with the GPU index, as the report's table shows it."""
        return self.name if self.gpu is None else f"{self.name}[gpu{self.gpu}]"

    def to_dict(self) -> dict[str, Value]:
        return cast("dict[str, Value]", asdict(self))

    def timed(self, seconds: float) -> CheckResult:
        """This result with its duration (rounded to a microsecond: a health check over parsed
        facts takes tens of them)."""
        return replace(self, seconds=round(max(0.0, seconds), 6))

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CheckResult:
        """Build from the payload's JSON; unknown keys are ignored, bad types raise ValueError."""
        status = str(data.get("status", ""))
        if status not in STATUSES:
            raise ValueError(f"check {data.get('name')!r}: status {status!r} not in {STATUSES}")
        gpu = data.get("gpu")
        seconds = data.get("seconds")
        return cls(
            name=str(data["name"]),
            status=status,
            value=_value(data.get("value")),
            limit=_value(data.get("limit")),
            unit=str(data.get("unit", "")),
            diagnosis=str(data.get("diagnosis", "")),
            gpu=gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None,
            seconds=(
                float(seconds)
                if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                else None
            ),
        )


def _value(raw: object) -> Value:
    if raw is None or (isinstance(raw, (int, float, str)) and not isinstance(raw, bool)):
        return raw
    return str(raw)


def skipped(name: str, diagnosis: str, *, unit: str = "", gpu: int | None = None) -> CheckResult:
    return CheckResult(name, "skip", None, None, unit, diagnosis, gpu)


def verdict(
    name: str,
    ok: bool,
    value: Value,
    limit: Value,
    unit: str,
    diagnosis: str,
    gpu: int | None = None,
) -> CheckResult:
    """`name` passes where `ok`; otherwise it fails with `diagnosis` (a pass carries none)."""
    if ok:
        return CheckResult(name, "pass", value, limit, unit, gpu=gpu)
    return CheckResult(name, "fail", value, limit, unit, diagnosis, gpu)


Input = TypeVar("Input")


def run_timed(
    checks: Iterable[Callable[[Input], list[CheckResult]]], given: Input
) -> list[CheckResult]:
    """Each check over `given`, in order, every result carrying the time its check took
    (split evenly among a check's results: their sum is the check's time)."""
    out: list[CheckResult] = []
    for check in checks:
        start = time.perf_counter()
        results = check(given)
        spent = time.perf_counter() - start
        out += [r.timed(spent / len(results)) for r in results]
    return out


def failed(results: Iterable[CheckResult]) -> list[CheckResult]:
    """The results that make a host fail (warn and skip do not)."""
    return [r for r in results if r.status == "fail"]


def host_ok(results: Iterable[CheckResult]) -> bool:
    return not failed(results)
