"""The GPU catalog: facts match the reference and the real fixture; the schema check bites."""

from __future__ import annotations

import copy
import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.catalog import (
    DEFAULT_PATH,
    default_catalog,
    load_catalog,
    parse_catalog,
    parse_version,
    version_at_least,
)
from orchestrator.errors import CatalogError

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
GPUS_MD = SHARED / "reference" / "gpus.md"


@pytest.fixture(scope="module")
def raw() -> dict[str, object]:
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    assert isinstance(data, dict)
    return data


def test_every_device_id_in_the_reference_is_in_the_catalog() -> None:
    table = GPUS_MD.read_text().split("## PCI device IDs", 1)[1].split("PCI class:", 1)[0]
    ids = {int(m, 16) for m in re.findall(r"0x([0-9a-f]{4})\b", table)}
    # the vendor id and the H200's subsystem ids (0x18be, 0x18bf) are not device ids
    ids -= {0x10DE, 0x18BE, 0x18BF}
    cat = default_catalog()
    missing = sorted(f"{i:#06x}" for i in ids if cat.gpu(i) is None)
    assert not missing
    assert len(ids) == 34


@pytest.mark.parametrize(
    ("device_id", "arch", "cc", "fp8", "open_modules"),
    [
        (0x2330, "hopper", "9.0", True, "supported"),  # H100 SXM5: 9.0, not the seeds' 8.9
        (0x2335, "hopper", "9.0", True, "supported"),
        (0x26B9, "ada", "8.9", True, "supported"),  # L40S is Ada, not Hopper
        (0x20B0, "ampere", "8.0", False, "supported"),
        (0x1DB1, "volta", "7.0", False, "unsupported"),
        (0x2342, "hopper", "9.0", True, "required"),  # GH200 needs open modules
        (0x2901, "blackwell", "10.0", True, "required"),
        (0x3182, "blackwell", "10.3", True, "required"),
    ],
)
def test_gpu_facts(device_id: int, arch: str, cc: str, fp8: bool, open_modules: str) -> None:
    gpu = default_catalog().gpu(device_id)
    assert gpu is not None
    assert (gpu.arch, gpu.compute_capability, gpu.fp8, gpu.open_modules) == (
        arch,
        cc,
        fp8,
        open_modules,
    )


def test_h200_matches_the_real_host() -> None:
    gpu = default_catalog().gpu(0x2335)
    assert gpu is not None
    csv = (REAL / "nvidia-smi-query-gpu.csv").read_text()
    assert f"{gpu.memory_mib} MiB" in csv
    assert f", {gpu.compute_capability}, " in csv
    assert 0x18BF in gpu.subsystem_ids
    assert gpu.min_driver == "550.90.07"
    # profile ids and placements as `nvidia-smi mig -lgip` / `-lgipp` print them
    lgip = (REAL / "nvidia-smi-mig-lgip.txt").read_text()
    lgipp = (REAL / "nvidia-smi-mig-lgipp.txt").read_text()
    for profile in gpu.mig_profiles:
        assert re.search(rf"MIG {re.escape(profile.name)}\s+{profile.profile_id}\s", lgip)
        assert profile.placements is not None
        starts = ",".join(str(p) for p in profile.placements)
        line = rf"Profile ID\s+{profile.profile_id} Placements?\s*: \{{{starts}\}}:"
        assert re.search(line + str(profile.memory_slices), lgipp)


def test_nvswitch_ids() -> None:
    cat = default_catalog()
    gen3 = cat.nvswitch(0x22A3)
    assert gen3 is not None and gen3[0].generation == 3 and gen3[1] and gen3[0].per_board == 4
    bridge = cat.nvswitch(0x22A9)
    assert bridge is not None and not bridge[1]
    gen2 = cat.nvswitch(0x1AF1)
    assert gen2 is not None and gen2[0].per_board == 6 and gen2[1]
    assert cat.nvswitch(0x1AE8) is not None
    assert cat.nvswitch(0x2335) is None


def test_branches_and_sources() -> None:
    cat = default_catalog()
    assert [b.branch for b in cat.ltsb_branches()] == [580, 535]
    r535 = cat.branch(535)
    assert r535 is not None and r535.is_eol(dt.date(2026, 11, 29))
    assert not r535.is_eol(dt.date(2026, 5, 31))
    deb12 = cat.driver_source("debian", "12")
    assert deb12 is not None and deb12.distribution[0].version == "535.261.03"
    deb13 = cat.driver_source("debian", "13")
    assert deb13 is not None and deb13.distribution[0].version == "550.163.01"
    noble = cat.driver_source("ubuntu", "24.04")
    assert noble is not None and noble.cuda_repo == "ubuntu2404" and noble.any_distribution_branch
    assert cat.cuda_min_driver["13.0"] == "580.65.06"
    assert cat.cuda_min_driver["12.8"] == "570.26"
    assert cat.cuda_compat_min_driver == {"11": "450", "12": "525", "13": "580"}


def test_validation_limits() -> None:
    cat = default_catalog()
    h200 = cat.gpu(0x2335)
    assert h200 is not None
    gemm = next(v for v in h200.validation if v.check == "bf16_gemm")
    assert gemm.limit(cat.validation_floor_fraction) == pytest.approx(711.0)
    ar8 = next(v for v in h200.validation if v.check == "allreduce_busbw" and v.gpus == 8)
    assert ar8.limit(0.9) == 431


def test_versions() -> None:
    assert parse_version("550.90.07") == (550, 90, 7)
    assert version_at_least("580.159.04", "550.90.07")
    assert not version_at_least("535.261.03", "550.90.07")
    assert version_at_least("450.51.06", "450")
    with pytest.raises(ValueError):
        parse_version("latest")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("gpus", 0, "compute_capability"), 9.0, "compute_capability"),
        (("gpus", 0, "arch"), "hoper", "arch"),
        (("gpus", 0, "device_ids"), ["2330"], "device_ids"),
        (("gpus", 0, "min_driver"), 525.85, "min_driver"),
        (("gpus", 0, "mig"), "yes", "mig"),
        (("nvswitches", 0, "per_board"), "six", "per_board"),
        (("driver_branches", 0, "kind"), "LTS", "kind"),
        (("driver_branches", 0, "eol"), "June 2026", "eol"),
        (("schema",), 2, "schema"),
    ],
)
def test_schema_errors_name_the_field(
    raw: dict[str, object], path: tuple[str | int, ...], value: object, message: str
) -> None:
    data = copy.deepcopy(raw)
    node: object = data
    for key in path[:-1]:
        node = node[key]  # type: ignore[index]
    node[path[-1]] = value  # type: ignore[index]
    with pytest.raises(CatalogError, match=message):
        parse_catalog(data)


def test_duplicate_device_id_is_refused(raw: dict[str, object]) -> None:
    data = copy.deepcopy(raw)
    gpus = data["gpus"]
    assert isinstance(gpus, list)
    gpus[1]["device_ids"] = ["0x2330"]
    with pytest.raises(CatalogError, match="0x2330"):
        parse_catalog(data)


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [\n")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(bad)


# --- driver branches that exist, and each architecture's bounds -------------------------


def _real_raw_with(device: int, count: int) -> dict[str, str]:
    from pathlib import Path

    real = Path(__file__).resolve().parents[1] / "recorded/fixtures/real/h200x2-ubuntu2404-580"
    raw = {p.name: p.read_text() for p in real.iterdir() if p.is_file()}
    raw = {k: v for k, v in raw.items() if not k.startswith(("nvidia-smi", "proc-driver-nvidia"))}
    lines = [
        ln
        for ln in raw["sysfs-pci-devices.txt"].splitlines()
        if "vendor=0x10de" not in ln and not ln.startswith("# exit")
    ]
    for i in range(count):
        lines.append(
            f"0000:{0x10 + i:02x}:00.0 vendor=0x10de device={device:#06x} class=0x030200 "
            "subsystem_vendor=0x10de subsystem_device=0x0000 numa_node=0 driver="
        )
    raw["sysfs-pci-devices.txt"] = "\n".join(lines) + "\n# exit=0\n"
    return raw


def _plan_pinned(device: int, branch: int | None) -> object:
    from orchestrator.parsers import parse_host
    from orchestrator.plan import plan_host
    from orchestrator.policy import load_policy

    facts = parse_host("node", _real_raw_with(device, 2))
    policy = {"nvidia_driver_branch": branch} if branch is not None else {}
    return plan_host(facts, load_policy("node", policy), default_catalog())


def test_known_branches_hold_the_reference_branches() -> None:
    c = default_catalog()
    assert {535, 550, 570, 580, 595, 610} <= c.known_branches
    assert {b.branch for b in c.branches} <= c.known_branches
    assert 999 not in c.known_branches
    assert c.arch_branches["volta"].high == 580
    assert "Unix Graphics Feature Deprecation Schedule" in c.arch_branches["volta"].source
    assert c.arch_branches["pascal"].high == c.arch_branches["maxwell"].high == 580
    assert c.arch_branches["hopper"].high is None and c.arch_branches["hopper"].low == 520


def test_a_branch_that_does_not_exist_is_bad_input() -> None:
    from orchestrator.errors import EXIT_BAD_INPUT, PolicyError

    with pytest.raises(PolicyError) as info:
        _plan_pinned(0x2335, 999)
    text = str(info.value)
    assert "nvidia_driver_branch=999: R999 is not a driver branch NVIDIA has released" in text
    assert "fix: pin an existing branch" in text and "580" in text
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_a_branch_past_volta_is_bad_input_and_580_is_not() -> None:
    from orchestrator.errors import PolicyError

    with pytest.raises(PolicyError, match=r"R595 does not support volta GPUs: R580 is the last"):
        _plan_pinned(0x1DB1, 595)
    plan = _plan_pinned(0x1DB1, 580)
    assert not plan.blocked  # type: ignore[attr-defined]


def test_the_default_branch_for_volta_stays_at_or_below_580() -> None:
    plan = _plan_pinned(0x1DB1, None)
    driver = next(r for r in plan.roles if r.name == "nvidia_driver")  # type: ignore[attr-defined]
    assert int(driver.vars["nvidia_driver_branch"]) <= 580


def test_catalog_refuses_a_driver_branch_missing_from_the_known_set() -> None:
    import yaml

    data = yaml.safe_load(DEFAULT_PATH.read_text())
    data["driver_branches"].append({"branch": 999, "kind": "PB", "eol": None})
    with pytest.raises(CatalogError, match=r"driver_branches \[999\] are not in known"):
        parse_catalog(data)
