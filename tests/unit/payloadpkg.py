"""The validation payload's package (orchestrator/validate/payload/gpucheck/), imported as the
zipapp runs it: top-level `gpucheck` from the payload folder, every module loaded."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).resolve().parents[2] / "orchestrator" / "validate" / "payload"
MODULES = (
    "results",
    "decisions",
    "host_checks",
    "measure",
    "allreduce",
    "numa",
    "p2p",
    "workers",
    "entry",
)


def load_payload() -> ModuleType:
    if str(FOLDER) not in sys.path:
        sys.path.insert(0, str(FOLDER))
    for name in MODULES:
        importlib.import_module(f"gpucheck.{name}")
    return importlib.import_module("gpucheck")
