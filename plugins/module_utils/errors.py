"""The one exception hierarchy of gpuprov.

Only the CLI catches these: it prints the message and exits with the code the class
carries. Every message names what is wrong (host, value) and how to fix it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_HOST_FAILED = 1
EXIT_BAD_INPUT = 2


class GpuprovError(Exception):
    """Base class for every error gpuprov raises on purpose."""

    exit_code = EXIT_HOST_FAILED

    def __init__(self, message: str, *, host: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.host = host
        self.fix = fix

    def __str__(self) -> str:
        where = f"{self.host}: " if self.host else ""
        fix = f"\n  fix: {self.fix}" if self.fix else ""
        return f"{where}{self.message}{fix}"


class BadInputError(GpuprovError):
    """Input (inventory, policy, options, saved facts) is wrong; found before any change."""

    exit_code = EXIT_BAD_INPUT


class InventoryError(BadInputError):
    """The inventory is missing, malformed, or a --limit matches no host."""


class PolicyError(BadInputError):
    """A policy variable has the wrong type or an impossible value."""


class CatalogError(BadInputError):
    """The GPU catalog data file is malformed."""


class OutputError(GpuprovError):
    """A file or folder gpuprov writes (report, JUnit, run artifacts, state) could not be
    written: a full disk, a read-only or vanished folder. Names the path."""


class HostError(GpuprovError):
    """Something failed on a host (unreachable, a command failed, a role failed)."""


class LabError(GpuprovError):
    """The local lab (Docker engine, images, test hosts) could not be set up."""
