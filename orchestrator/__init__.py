"""gpuprov: take bare NVIDIA GPU hosts to validated, container-ready nodes."""

from __future__ import annotations

__version__ = "0.2.0"
