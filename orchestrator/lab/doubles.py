"""The local apt repository of test doubles (tests/lab/aptrepo/), wired into the lab.

That repository (stand-ins for NVIDIA's packages: the CUDA repository for Debian, the
container toolkit) is test code owned beside the
simulator; the lab only starts it on this machine and writes the role variables it
returns into the lab's group_vars. Each lab has its own server, bound to its own network's
gateway (not Docker's default bridge: once the docker role runs on a test host, that host's
own docker0 takes 172.17.0.1 and would hide this machine's); `lab down` stops it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import LabError

# Lab policy the lab engine itself sets (labinventory.render_lab_vars); the repository's
# variables may not change these.
LAB_OWNED = frozenset({"nvidia_driver_source", "nvidia_driver_flavour", "docker_source"})


def _module(aptrepo_dir: Path) -> Any | None:
    if not (aptrepo_dir / "__init__.py").is_file():
        return None
    parent = str(aptrepo_dir.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    try:
        return importlib.import_module(aptrepo_dir.name)
    except ImportError as exc:
        raise LabError(
            f"the test-double repository code in {aptrepo_dir} does not import: {exc}",
            fix=f"fix {aptrepo_dir}, or move it aside to start hosts without it",
        ) from exc


def serve(aptrepo_dir: Path, state_dir: Path, network: str) -> dict[str, object] | None:
    """Build and serve the repository on `network` (idempotent); its role variables, or None
    without one."""
    aptrepo = _module(aptrepo_dir)
    if aptrepo is None:
        return None
    try:
        repo = aptrepo.ensure_served(state_dir, network=network)
        policy: Mapping[str, object] = {
            **aptrepo.lab_policy(repo),
            # The lab key's fingerprint: what the driver role must find in the key it fetches.
            **(
                {"gpuprov_lab_repo_key_fingerprint": repo.fingerprint}
                if getattr(repo, "fingerprint", "")
                else {}
            ),
        }
    except (RuntimeError, OSError) as exc:
        raise LabError(
            f"the local apt repository of test doubles could not be served: {exc}",
            fix=f"read {state_dir / f'server-{network}.log'}; check `docker network inspect "
            f"{network}`",
        ) from exc
    variables = dict(policy)
    # The lab's repositories (the toolkit's too) are signed with the repository's throwaway
    # key: the roles' key checks expect its fingerprint, not the vendor's.
    fingerprint = getattr(repo, "fingerprint", None)
    if isinstance(fingerprint, str) and fingerprint:
        variables.setdefault("nvidia_container_toolkit_repo_key_fingerprint", fingerprint)
    return variables


def split_owned(variables: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    """The repository's variables without those the lab owns, and the names dropped."""
    kept = {k: v for k, v in variables.items() if k not in LAB_OWNED}
    return kept, sorted(set(variables) - set(kept))


def stop(aptrepo_dir: Path, state_dir: Path, network: str) -> bool:
    """Stop the repository server of `network`; True when one was running."""
    aptrepo = _module(aptrepo_dir)
    return bool(aptrepo.stop(state_dir, network)) if aptrepo is not None else False
