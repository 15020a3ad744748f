"""Broken captures say what is broken, and the blocker names a fix that works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.plan import HostPlan, plan_host
from orchestrator.policy import load_policy

REAL = Path(__file__).resolve().parents[1] / "recorded/fixtures/real/h200x2-ubuntu2404-580"


def _raw() -> dict[str, str]:
    return {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}


def _plan(raw: dict[str, str]) -> object:
    return plan_host(parse_host("h200", raw), load_policy("h200", {}), default_catalog())


def test_a_truncated_pci_line_is_named_with_its_line_number() -> None:
    raw = _raw()
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"  # cut mid-line, as a dropped connection leaves it
    raw[names.SYSFS_PCI] = "".join(lines)
    facts = parse_host("h200", raw)
    assert any(
        e.startswith("sysfs-pci-devices.txt: line 3: truncated (no class)") for e in facts.errors
    )
    plan = _plan(raw)
    blockers = plan.blockers  # type: ignore[attr-defined]
    assert len(blockers) == 1
    assert "sysfs-pci-devices.txt: line 3: truncated" in blockers[0]
    assert "re-run `provision detect`" in blockers[0]
    assert "passthrough" not in blockers[0]


def test_unreadable_pci_capture_is_not_blamed_on_the_bios() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = "\x00\x01\ufffd\ufffd binary\n# exit=0\n"
    blockers = _plan(raw).blockers  # type: ignore[attr-defined]
    assert "does not start with a PCI address" in blockers[0]
    assert "passthrough" not in blockers[0]


def test_a_host_without_gpus_still_gets_the_passthrough_hint() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = "".join(
        ln for ln in raw[names.SYSFS_PCI].splitlines(keepends=True) if "0x10de" not in ln
    )
    assert "passthrough" in _plan(raw).blockers[0]  # type: ignore[attr-defined]


def test_an_80_kB_line_is_quoted_short() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = "0000:00:01.0 " + "a" * 80_000 + "\n# exit=0\n"
    facts = parse_host("h", raw)
    assert facts.errors and all(len(e) < 400 for e in facts.errors)
    assert "(80015 characters)" in facts.errors[0]


# --- issue 27, item 11: captures that lie are not believed ----------------------------------

DERIVED = Path(__file__).resolve().parent / "fixtures_derived"


def _derived(name: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in (DERIVED / name).iterdir() if p.is_file()}


def _plan_of(raw: dict[str, str]) -> HostPlan:
    return plan_host(parse_host("h", raw), load_policy("h", {}), default_catalog())


def test_a_gpu_line_cut_to_a_short_class_does_not_drop_the_gpu_silently() -> None:
    """`class=0x03` parses as a number, and a class no GPU has: the GPU vanished without a
    word. The kernel prints the class at a fixed width, so a shorter one is named."""
    raw = _raw()
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    last_gpu = max(i for i, ln in enumerate(lines) if "class=0x0302" in ln)
    lines[last_gpu] = lines[last_gpu].split("class=0x0302")[0] + "class=0x03\n"
    raw[names.SYSFS_PCI] = "".join(lines)
    facts = parse_host("h", raw)
    assert any("truncated (class=0x03)" in e for e in facts.errors), facts.errors
    plan = _plan_of(raw)
    assert plan.blocked and "passthrough" not in " ".join(plan.blockers)


def test_a_pci_capture_cut_short_is_not_believed() -> None:
    raw = _raw()
    text = raw[names.SYSFS_PCI]
    raw[names.SYSFS_PCI] = text[: text.rindex("class=")]  # the trailer went with the cut
    facts = parse_host("h", raw)
    assert facts.pci == () and names.SYSFS_PCI in facts.truncated
    plan = _plan_of(raw)
    assert plan.blocked
    assert "sysfs-pci-devices.txt: cut short (no `# exit=` trailer" in plan.blockers[0]
    assert "passthrough" not in " ".join(plan.blockers)


def test_an_empty_pci_capture_without_trailer_is_not_no_gpu_check_the_bios() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = ""
    blockers = _plan_of(raw).blockers
    assert "cut short" in blockers[0] and "BIOS" not in " ".join(blockers)


def test_every_probe_capture_cut_in_half_is_named_and_blocks_the_host() -> None:
    raw = _raw()
    cut = sorted(n for n in raw if n in names.PROBE_FILES and n != names.SYSFS_PCI)
    assert len(cut) >= 15
    for name in cut:
        raw[name] = raw[name][: len(raw[name]) // 2]
    facts = parse_host("h", raw)
    assert set(facts.truncated) == set(cut)
    plan = _plan_of(raw)
    assert plan.blocked
    joined = " ".join(plan.blockers)
    assert f"{len(cut)} capture(s) cut short" in joined
    assert all(n in joined for n in cut)


def test_validation_outputs_without_a_trailer_are_not_probe_captures() -> None:
    """nccl-tests and measure-* files come from validation, not the probe: no trailer."""
    raw = _raw()
    assert "nccl-tests-all_reduce_perf.txt" in raw
    assert parse_host("h", raw).truncated == ()
    assert not _plan_of(raw).blocked


def test_nvidia_smi_listing_more_gpus_than_the_pci_capture_blocks() -> None:
    raw = _raw()
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    first_gpu = next(i for i, ln in enumerate(lines) if "class=0x0302" in ln)
    del lines[first_gpu]  # a whole line lost, the trailer kept
    raw[names.SYSFS_PCI] = "".join(lines)
    plan = _plan_of(raw)
    assert any("nvidia-smi lists 2 GPUs but the PCI capture shows 1" in b for b in plan.blockers)


def test_a_gpu_nvidia_smi_does_not_list_is_a_warning() -> None:
    raw = _raw()
    csv = raw[names.SMI_QUERY_GPU].splitlines(keepends=True)
    raw[names.SMI_QUERY_GPU] = "".join([csv[0], csv[1], *csv[3:]])  # header, GPU 0, trailer
    plan = _plan_of(raw)
    assert any("2 NVIDIA GPUs on the PCI bus but nvidia-smi lists 1" in w for w in plan.warnings)


def _h100x16() -> dict[str, str]:
    raw = _derived("h100x8-nvswitch4-ubuntu2204-550")
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    gpus = [ln for ln in lines if "class=0x0302" in ln]
    assert len(gpus) == 8
    twins = [f"0001{ln[4:]}" for ln in gpus]  # the same 8 GPUs again, in PCI domain 1
    raw[names.SYSFS_PCI] = "".join(lines[:-1] + twins + lines[-1:])
    return raw


def test_16_h100_beside_one_boards_nvswitches_gets_a_sanity_warning() -> None:
    plan = _plan_of(_h100x16())
    assert any(
        "16 GPUs beside 4 NVSwitch devices: that is 1 HGX board(s)" in w for w in plan.warnings
    ), plan.warnings


def test_8_h100_with_their_4_nvswitches_get_no_board_warning() -> None:
    plan = _plan_of(_derived("h100x8-nvswitch4-ubuntu2204-550"))
    assert not any("HGX board" in w for w in plan.warnings)
    assert not plan.blocked, plan.blockers


def test_the_derived_fixtures_keep_their_trailers() -> None:
    for d in DERIVED.iterdir():
        if d.is_dir():
            assert parse_host(d.name, _derived(d.name)).truncated == (), d.name


# --- the facts directory under LANG=C: host names stay the inventory's -----------------------

_LOAD = """
import json, sys
from orchestrator.factsdir import load_dir, save_dir
assert sys.getfilesystemencoding() == "ascii", sys.getfilesystemencoding()
if sys.argv[1] == "save":
    save_dir(sys.argv[2], {"n\\u0153ud-1": {"uname-r.txt": "6.8\\n# exit=0\\n"}})
print(json.dumps(sorted(load_dir(sys.argv[2]))))
"""


def _c_locale(*args: str) -> str:
    env = {
        **os.environ,
        "LANG": "C",
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONIOENCODING": "utf-8",
    }
    out = subprocess.run(
        [sys.executable, "-c", _LOAD, *args], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_facts_directory_read_under_lang_c_keeps_utf8_host_names(tmp_path: Path) -> None:
    (tmp_path / "nœud-1").mkdir()
    (tmp_path / "nœud-1" / "uname-r.txt").write_text("6.8\n# exit=0\n")
    assert json.loads(_c_locale("load", str(tmp_path))) == ["nœud-1"]


def test_a_facts_directory_saved_under_lang_c_is_utf8_on_disk(tmp_path: Path) -> None:
    assert json.loads(_c_locale("save", str(tmp_path))) == ["nœud-1"]
    assert os.listdir(tmp_path.as_posix().encode()) == ["nœud-1".encode()]


def test_live_detection_output_without_a_trailer_is_cut_short_too() -> None:
    """The probe's stdout (split by orchestrator/probe.py) goes through the same check."""
    from orchestrator.probe import MARKER, split_output

    raw = _raw()
    stream = []
    for name, text in sorted(raw.items()):
        if name not in names.PROBE_FILES:
            continue
        body = text if name != names.SMI_QUERY_GPU else text[: text.index("# exit=")]
        stream += [f"{MARKER} begin {name}", body.rstrip("\n"), f"{MARKER} end {name}"]
    stream.append(f"{MARKER} done")
    facts = parse_host("h", split_output("h", "\n".join(stream) + "\n"))
    assert facts.truncated == (names.SMI_QUERY_GPU,)
