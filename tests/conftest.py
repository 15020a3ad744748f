"""Project-wide test settings."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run `lab_last` tests after all others: they leave the session lab's hosts changed
    (e.g. upgraded to another driver) for any test that would run after them."""
    items.sort(key=lambda item: item.get_closest_marker("lab_last") is not None)
