"""Start-up cost of `provision` commands: this checkout against another commit, side by side.

For each command it runs, in new processes, --runs times each (alternating the two trees):
  - wall: the command as a user runs it (`python -m orchestrator.cli ARGS`),
  - cpu: the CPU time (user + sys) of that process itself, children (the probe) excluded:
    steadier than wall time on a shared machine,
  - imports: the sum of `python -X importtime`'s self times, and the modules imported.
The other tree is `git archive REF` unpacked in a temporary directory, run with the same
interpreter and packages (the tree's own orchestrator/ first on sys.path).

    .venv/bin/python bench/bench_startup.py --against 06d7578 --runs 7
    .venv/bin/python bench/bench_startup.py --command "detect -i inv.ini" --runs 5

Default commands: `--help`, and `detect -i <a one-host inventory with
ansible_connection=local>` (this machine probed in a subprocess, as on the lent GPU host).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import contextlib, io, os, resource, sys
sys.path.insert(0, os.getcwd())
from orchestrator import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        cli.main(sys.argv[1:])
    except SystemExit:
        pass
r = resource.getrusage(resource.RUSAGE_SELF)
print(r.ru_utime + r.ru_stime)
"""


def _wall(tree: Path, argv: list[str]) -> float:
    import time

    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *argv],
        cwd=tree,
        capture_output=True,
        check=False,
    )
    return time.perf_counter() - start


def _cpu(tree: Path, argv: list[str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], cwd=tree, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def _imports(tree: Path, argv: list[str]) -> tuple[float, int]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator.cli", *argv],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    total, count = 0, 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            total += int(line.split(":", 1)[1].split("|")[0])
            count += 1
    return total / 1e6, count


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="a commit to compare with (git archive of it)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--command", action="append", help="provision arguments (repeatable)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        inventory = Path(tmp) / "local.ini"
        inventory.write_text("[gpu_nodes]\nlocalhost ansible_connection=local\n")
        commands = args.command or ["--help", f"detect -i {inventory}"]
        trees = {"this checkout": ROOT}
        if args.against:
            other = Path(tmp) / "other"
            other.mkdir()
            archive = subprocess.run(
                ["git", "archive", args.against], cwd=ROOT, capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(other)], input=archive, check=True)
            trees = {args.against: other, "this checkout": ROOT}
        results = []
        for command in commands:
            argv = shlex.split(command)
            for tree in trees.values():  # warm the bytecode caches
                _wall(tree, argv)
            timed: dict[str, dict[str, list[float]]] = {
                name: {"wall": [], "cpu": [], "imports": [], "modules": []} for name in trees
            }
            for _ in range(args.runs):
                for name, tree in trees.items():
                    timed[name]["wall"].append(_wall(tree, argv))
                    timed[name]["cpu"].append(_cpu(tree, argv))
                    seconds, count = _imports(tree, argv)
                    timed[name]["imports"].append(seconds)
                    timed[name]["modules"].append(count)
            for name, t in timed.items():
                row = {
                    "command": f"provision {command}",
                    "tree": name,
                    "wall_s": _median(t["wall"]),
                    "cpu_s": _median(t["cpu"]),
                    "imports_s": _median(t["imports"]),
                    "modules": int(statistics.median(t["modules"])),
                }
                results.append({**row, "raw": t})
                print(json.dumps(row))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
