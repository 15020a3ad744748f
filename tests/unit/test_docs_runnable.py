"""The docs' commands run as printed (issue 28): every ```sh block of README.md and docs/*.md
that follows a `<!-- runnable -->` line is run with bash (-e, pipefail) from the checkout's
root, with this environment's bin first on PATH and no ANSIBLE_INVENTORY/ANSIBLE_CONFIG of
the caller's; it must exit 0. Mark only offline blocks (plan from saved facts, --help,
ansible-doc): nothing that needs hosts, a lab, the network, or writes into the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number of the block's fence, its text) for each marked block of `path`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = i + 1
        if fence >= len(lines) or lines[fence].strip() != "```sh":
            raise AssertionError(f"{path.name}:{i + 1}: {MARKER} must come right before ```sh")
        end = next((j for j in range(fence + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise AssertionError(f"{path.name}:{fence + 1}: the block is not closed")
        out.append((fence + 1, "\n".join(lines[fence + 1 : end])))
    return out


BLOCKS = [(p, n, text) for p in DOCS for n, text in runnable_blocks(p)]


def test_the_marker_is_used_in_the_readme_and_the_docs() -> None:
    where = {p.name for p, _, _ in BLOCKS}
    assert {"README.md", "install.md", "collection.md"} <= where, where


def test_a_marker_without_a_block_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(f"{MARKER}\n\n```sh\ntrue\n```\n")
    with pytest.raises(AssertionError, match="right before"):
        runnable_blocks(doc)
    doc.write_text(f"{MARKER}\n```sh\ntrue\n```\n")
    assert runnable_blocks(doc) == [(2, "true")]


@pytest.mark.parametrize(
    ("doc", "line", "block"),
    BLOCKS,
    ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in BLOCKS],
)
def test_a_runnable_block_runs_as_printed(doc: Path, line: int, block: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_INVENTORY", "ANSIBLE_CONFIG")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    before = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout
    run = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, (
        f"{doc.relative_to(ROOT)}:{line} exited {run.returncode}\n{run.stdout[-2000:]}"
        f"\n{run.stderr[-2000:]}"
    )
    after = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout
    assert after == before, f"{doc.relative_to(ROOT)}:{line} changed the checkout"
