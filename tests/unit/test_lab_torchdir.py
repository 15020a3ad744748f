"""The lab's CPU PyTorch for the multi-node all-reduce: mounted read-only, never installed on
the hosts; `lab up --with-torch` only where the hosts' python3 matches (no Docker here)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _helpers import lab_host_spec

from orchestrator import cli
from orchestrator.errors import EXIT_BAD_INPUT
from orchestrator.lab import container, engine, torchdir


def test_the_torch_directory_is_mounted_read_only_at_debians_local_site_dir(
    tmp_path: Path,
) -> None:
    spec = lab_host_spec(tmp_path)
    args = container.create_args(spec)
    torch = tmp_path / "torch"
    with_torch = container.create_args(dataclasses.replace(spec, mounts=(torchdir.mount(torch),)))
    added = [a for a in with_torch if a not in args]
    assert added == [f"{torch}:/usr/local/lib/python3.11/dist-packages:ro"]
    assert with_torch[-1] == spec.image


def test_an_installed_directory_is_reused_without_pip(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    assert torchdir.ensure(root=tmp_path, say=lambda _m: pytest.fail("pip ran")) == tmp_path


def test_with_torch_on_another_python_is_bad_input_before_docker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_docker() -> None:
        raise AssertionError("docker was called")

    monkeypatch.setattr(engine, "require_engine", no_docker)
    code = cli.main(["lab", "up", "--name", "t", "--os", "debian13", "--with-torch"])
    assert code == EXIT_BAD_INPUT
    assert "use --os debian12 with --with-torch" in capsys.readouterr().err
