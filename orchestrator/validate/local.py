"""Validate the machine this runs on: probe, parse, validate, print, in one process.

`python3 -m orchestrator.validate.local [--runtime host|docker] [--json PATH]` is for a GPU
host reached without an inventory (a fresh node, a CI runner, the device machine); fleets go
through `provision validate`. Only the standard library and PyYAML are needed, besides what
the payload needs (torch) where it runs.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..catalog import default_catalog
from ..factsdir import save_host
from ..parsers import parse_host
from ..policy import load_policy
from ..probe import probe_script, split_output
from ..result import CheckResult, host_ok
from .runner import SubprocessExecutor, validate_host


def render(results: Sequence[CheckResult]) -> str:
    lines = [f"{'check':<30} {'status':<6} {'value':>22} {'limit':>14}  unit"]
    for r in results:
        lines.append(f"{r.label:<30} {r.status:<6} {r.value!s:>22.22} {r.limit!s:>14.14}  {r.unit}")
        if r.diagnosis and r.status != "pass":
            lines.append(f"    {r.diagnosis}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m orchestrator.validate.local")
    parser.add_argument("--runtime", choices=("docker", "host"), default=None)
    parser.add_argument("--image", default=None, help="container image (--runtime docker)")
    parser.add_argument("--expected-gpus", type=int, default=None)
    parser.add_argument("--nccl-tests", action="store_true", help="also run all_reduce_perf")
    parser.add_argument("--json", dest="json_path", help="write results here")
    parser.add_argument("--save-facts", metavar="DIR", help="keep the raw probe outputs")
    args = parser.parse_args(argv)

    started = time.monotonic()
    host = socket.gethostname()
    execute = SubprocessExecutor()
    probe = execute(probe_script(), timeout=120)
    raw = split_output(host, probe.stdout)
    if args.save_facts:
        save_host(Path(args.save_facts), host, raw)
    facts = parse_host(host, raw)
    probed = time.monotonic() - started
    results = validate_host(
        facts,
        raw,
        catalog=default_catalog(),
        policy=load_policy(host, {"gpuprov_validation_expected_gpus": args.expected_gpus or 0}),
        execute=execute,
        runtime=args.runtime,
        image=args.image,
        use_nccl_tests=args.nccl_tests,
    )
    elapsed = time.monotonic() - started
    print(render(results))
    print(f"probe {probed:.1f} s, whole validation {elapsed:.1f} s")
    if args.json_path:
        doc = {
            "host": host,
            "elapsed_s": round(elapsed, 2),
            "probe_s": round(probed, 2),
            "ok": host_ok(results),
            "checks": [r.to_dict() for r in results],
        }
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
    return 0 if host_ok(results) else 1


if __name__ == "__main__":
    sys.exit(main())
