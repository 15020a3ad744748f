"""Validation: the proof that a node is ready.

``health`` checks host state (facts only, no CUDA), ``payload/gpucheck/`` (a package,
staged on the host as one zipapp) runs the CUDA checks and the NCCL all-reduce sweep where
PyTorch is (a container or the host), ``nccl`` judges the sweep or nccl-tests' output,
``p2p`` the per-pair peer copies, ``container`` builds the container command, its cleanup and
diagnoses runtime errors, ``junit`` writes JUnit XML, and ``runner.validate_host`` puts them
together for one host.
"""

from __future__ import annotations
