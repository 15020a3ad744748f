"""When each stage ran on each host, and each role within apply: the report's `timings`.

One run per process: the stages record into `TIMINGS` as they go (`stage()` around a step of
the whole fleet, `record()` for one host), the live progress records the apply spans from
Ansible's job events, and the report reads them back. `reset()` starts a new run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Span:
    start: dt.datetime
    end: dt.datetime

    @property
    def seconds(self) -> float:
        return round((self.end - self.start).total_seconds(), 3)

    def to_dict(self) -> dict[str, object]:
        return {
            "start": self.start.isoformat(timespec="milliseconds"),
            "end": self.end.isoformat(timespec="milliseconds"),
            "seconds": self.seconds,
        }

    def widen(self, start: dt.datetime, end: dt.datetime) -> None:
        self.start, self.end = min(self.start, start), max(self.end, end)


def _widen(spans: dict[str, Span], name: str, start: dt.datetime, end: dt.datetime) -> None:
    if name in spans:
        spans[name].widen(start, end)
    else:
        spans[name] = Span(start, end)


@dataclass
class Timings:
    stages: dict[str, dict[str, Span]] = field(default_factory=dict)  # host -> stage -> span
    roles: dict[str, dict[str, Span]] = field(default_factory=dict)  # host -> role -> span

    def record(self, host: str, stage: str, start: dt.datetime, end: dt.datetime) -> None:
        """A stage's span on a host; a stage run twice (detect after apply) spans both."""
        _widen(self.stages.setdefault(host, {}), stage, start, end)

    def record_role(self, host: str, role: str, start: dt.datetime, end: dt.datetime) -> None:
        _widen(self.roles.setdefault(host, {}), role, start, end)

    def host_dict(self, host: str) -> dict[str, object]:
        return {
            "stages": {s: span.to_dict() for s, span in self.stages.get(host, {}).items()},
            "roles": {r: span.to_dict() for r, span in self.roles.get(host, {}).items()},
        }


TIMINGS = Timings()


def reset() -> None:
    TIMINGS.stages.clear()
    TIMINGS.roles.clear()


@contextmanager
def stage(name: str, hosts: Iterable[str]) -> Iterator[None]:
    """Time a step of the whole fleet: every host gets the same span."""
    start = now()
    try:
        yield
    finally:
        end = now()
        for h in hosts:
            TIMINGS.record(h, name, start, end)


def event_time(event: object) -> dt.datetime:
    """An ansible-runner event's `created` stamp (UTC, ISO 8601), else now."""
    created = event.get("created") if isinstance(event, Mapping) else None
    if isinstance(created, str):
        try:
            stamp = dt.datetime.fromisoformat(created)
        except ValueError:
            return now()
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
    return now()
