"""The lab's local, signed apt repositories of TEST DOUBLES, generated from the reference
(tests/recorded/reference/packages.yaml): NVIDIA's debian12/debian13 CUDA repositories, the
container toolkit's, and index-only replays of the Ubuntu CUDA repositories and Canonical's
archive (aptrepo.replay.simulate resolves against them with real apt). See README.md.

Entry points for the lab (tests/lab/conftest.py, `provision lab up`):

    from aptrepo import ensure_served, lab_policy, stop
    repo = ensure_served(Path(".lab/.aptrepo"))      # build if needed, serve, idempotent
    policy = lab_policy(repo)                         # role variables for group_vars/lab.yml
    stop(Path(".lab/.aptrepo"))

(`tests/lab` on sys.path: pytest puts it there for tests/lab/conftest.py.) Also a CLI:
`PYTHONPATH=tests/lab python -m aptrepo serve|stop|build [--state-dir DIR]`.
"""

from __future__ import annotations

from aptrepo.build import AptRepoBuildError, BuiltRepo, build_repo, verify_repo
from aptrepo.policy import lab_policy
from aptrepo.serve import AptRepoServeError, ServedRepo, ensure_served, gateway_address, stop

__all__ = [
    "AptRepoBuildError",
    "AptRepoServeError",
    "BuiltRepo",
    "ServedRepo",
    "build_repo",
    "ensure_served",
    "gateway_address",
    "lab_policy",
    "stop",
    "verify_repo",
]
