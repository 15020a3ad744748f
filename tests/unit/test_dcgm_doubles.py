"""The lab's DCGM test doubles come from tests/recorded/reference/dcgm.yaml and nothing else
(tests/lab/aptrepo/dcgm.py): names, versions, relations, the unit and the diag shapes."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))

from aptrepo import dcgm  # noqa: E402

REF = dcgm.data()


def _reference_names() -> set[str]:
    pkgs = REF["dcgm"]["packages"]
    names = {str(n) for n in pkgs["dcgm4"]["built_from_open_source_tree"]["deb"]}
    names |= {str(pkgs["dcgm3"]["name"]), str(pkgs["dcgm4"]["prefix"])}
    names.add(str(REF["dcgm"]["exporter"]["host_package"]).split()[0])
    # and every word of the relations text (Debian's lshw, passwd, login)
    return names | set(re.findall(r"[a-z][a-z0-9-]+", str(pkgs["dcgm4"]["relations"])))


def test_every_name_and_relation_is_written_in_the_reference() -> None:
    known = _reference_names()
    for package in dcgm.dcgm_packages():
        assert package.name in known, package.name
        words = [d.split()[0] for d in package.depends]
        for field in ("Provides", "Conflicts", "Pre-Depends"):
            words += [w.split()[0] for w in package.extra_control.get(field, "").split(",") if w]
        assert set(words) <= known, (package.name, words)


def test_every_version_is_recorded() -> None:
    seen = {str(v) for v in REF["dcgm"]["packages"]["dcgm4"]["versions_seen"]}
    for package in dcgm.dcgm_packages():
        if package.name == dcgm.names()["dcgm3"]:
            assert package.version in str(REF["dcgm"]["packages"]["dcgm3"]["version_example"])
        elif package.name.endswith("-exporter"):  # the exporter of a recorded image tag
            tag = f"-{package.version.removesuffix('-1')}-distroless"
            assert tag in str(REF["dcgm"]["exporter"]["container_image"])
        else:
            assert re.fullmatch(r"1:(\S+)-1", package.version)[1] in seen  # type: ignore[index]


def test_a_changed_reference_changes_the_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    changed: dict[str, Any] = copy.deepcopy(dict(REF))
    dcgm4 = changed["dcgm"]["packages"]["dcgm4"]
    dcgm4["relations"] = dcgm4["relations"].replace(
        "core Conflicts datacenter-gpu-manager (3.x)", "core Conflicts dcgm-renamed (3.x)"
    )
    changed["dcgm"]["service"]["exec"] = "/usr/bin/nv-hostengine -n --elsewhere"
    changed["diag_json"]["mig_refusals"]["no_compute_instance"] = "refused differently"
    monkeypatch.setattr(dcgm, "data", lambda: changed)
    core = next(p for p in dcgm.dcgm_packages() if p.name.endswith("-core"))
    assert core.extra_control["Conflicts"] == "dcgm-renamed"
    assert "ExecStart=/usr/bin/nv-hostengine -n --elsewhere" in dcgm.nvidia_dcgm_unit()
    shapes = dcgm.diag_shapes("4.6.0")
    assert shapes["mig_refusals"]["no_compute_instance"] == "refused differently"


def test_a_version_outside_the_reference_is_refused() -> None:
    with pytest.raises(dcgm.DcgmReferenceError, match=r"4\.9\.9"):
        dcgm.deb_version("4.9.9")


def test_the_unit_and_postinst_are_the_referenced_ones() -> None:
    unit = dcgm.nvidia_dcgm_unit()
    service = REF["dcgm"]["service"]
    assert f"ExecStart={service['exec']}" in unit
    assert f'Environment="{service["environment"]}"' in unit
    assert "Alias=dcgm.service" in unit and "WantedBy=multi-user.target" in unit
    assert "useradd -Urs /usr/sbin/nologin nvidia-dcgm" in dcgm.core_postinst()


def test_every_double_says_test_double_and_names_its_reference() -> None:
    for package in dcgm.dcgm_packages():
        assert "test double" in package.description
        assert dcgm.REFERENCE_REL in package.description
        assert "source:" in package.origin.text()


def test_the_generator_reads_no_role() -> None:
    text = (REPO / "tests/lab/aptrepo/dcgm.py").read_text()
    text += (REPO / "tests/lab/aptrepo/payload/dcgmi").read_text()
    assert "roles/" not in text and "dcgm_cuda_major" not in text


def test_the_exporter_double_serves_every_default_counter(tmp_path: Path) -> None:
    import json

    path = REPO / "tests/lab/aptrepo/payload/dcgm-exporter"
    module = load_module("dcgm_exporter_double", path)
    csv = tmp_path / "default-counters.csv"
    csv.write_text(dcgm.exporter_counters())
    state = tmp_path / "var/lib/gpusim/state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}]}))
    text = module.metrics(module.counters(str(csv)), module.gpus(str(tmp_path)))
    names = [str(n) for n in REF["dcgm"]["exporter"]["default_counters"]]
    assert len(names) == 26
    for name in names:
        assert f'{name}{{gpu="1",UUID="GPU-b"}} 0' in text
    assert "simulated" in text.splitlines()[0]


def test_the_exporter_double_uses_the_host_engine_only_when_told(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """dcgm.exporter.remote_hostengine: -r or its env connects to the running nv-hostengine
    (exit 1 without one); neither: the exporter's own embedded DCGM. The log lines are the
    real exporter's, as recorded."""
    module = load_module("dcgm_exporter_double", REPO / "tests/lab/aptrepo/payload/dcgm-exporter")
    recorded = REF["dcgm"]["exporter"]["remote_hostengine"]
    monkeypatch.delenv("DCGM_REMOTE_HOSTENGINE_INFO", raising=False)
    monkeypatch.setattr(module, "_hostengine_running", lambda: True)
    assert module.connect(["-f", "x.csv"])
    assert module.connect(["-r", "localhost:5555"])
    monkeypatch.setenv("DCGM_REMOTE_HOSTENGINE_INFO", "localhost:5555")
    assert module.connect([])
    monkeypatch.setattr(module, "_hostengine_running", lambda: False)
    assert not module.connect([])
    lines = capsys.readouterr().err.splitlines()
    embedded = "Attempting to initialize DCGM."
    remote = "Attempting to connect to remote hostengine at"
    assert embedded in recorded and remote in recorded and "Failed to connect" in recorded
    assert lines[0] == embedded
    assert lines[1:4] == [f"{remote} localhost:5555"] * 3
    assert lines[4].startswith("Failed to connect to remote hostengine")
