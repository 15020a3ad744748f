"""gpuprov's GPU check payload: CUDA checks and an NCCL all-reduce sweep, where PyTorch is.

Standalone on purpose: it runs inside the user's PyTorch image (mounted read-only) or on the
host (`--runtime host`), with only the standard library and torch. It must not import the
orchestrator. Input: a JSON spec (expected GPUs, floors, sweep sizes; written by
`orchestrator.validate.runner`). Output: one JSON document on stdout (or `--out FILE`) with
per-check results in CheckResult's fields and the raw all-reduce sweep, which the
orchestrator judges (`orchestrator.validate.nccl`). A human summary goes to stderr.

Layout: the parent process checks what is host-wide (CUDA available, device count, names,
compute capability, arch list, CUDA build vs driver, peer access, MIG devices), then starts
one process per GPU and, while they import torch, copies between every ordered GPU pair; each
worker measures its own GPU (bf16/fp8 GEMM, device copy; host-to-device copies one GPU at a
time, pinned to its GPU's NUMA node) and then all join one NCCL all-reduce sweep whose values
are checked exactly. Per-GPU work runs in parallel, so 8 GPUs take about as long as 2.

Deadlines: the payload's own (`deadline_s`) ends well before the outer kill. Workers report
each phase and result as they go; at the deadline the parent kills what is left and reports
every finished check plus the GPUs and phases that did not finish; a watchdog covers the
parent itself.

NVLink multicast (NVLS) stays off unless `--nvls` is given: the floors are for ring/tree
all-reduce, and on shared hosts a multicast program can take GPUs out of service.
"""
