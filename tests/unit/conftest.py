"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from orchestrator import pipeline


@pytest.fixture
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if any stage reaches a host (detection is the first contact)."""
    touched: list[str] = []

    def detect(fleet: pipeline.Fleet, console: object, **_: object) -> pipeline.Detected:
        touched.extend(fleet.hosts)
        raise AssertionError("a host was touched")

    monkeypatch.setattr(pipeline, "_detect", detect)
    return touched
