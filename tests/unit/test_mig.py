"""MIG layouts: parsing the mig-parted format and validating it against real H200 profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.catalog import default_catalog
from orchestrator.mig import (
    LAYOUT_DISABLED,
    GiProfile,
    MigConfig,
    MigGpu,
    MigLayoutError,
    conflicts,
    gpu_from_catalog,
    gpus_from_smi,
    parse_config,
    solve_placement,
    validate_layout,
    what_fits,
)
from orchestrator.parsers.mig import parse_lgip, parse_lgipp

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def h200() -> tuple[MigGpu, ...]:
    """The real 2x H200 host's GPUs, from its own -lgip / -lgipp."""
    return gpus_from_smi(
        parse_lgip((REAL / "nvidia-smi-mig-lgip.txt").read_text()),
        parse_lgipp((REAL / "nvidia-smi-mig-lgipp.txt").read_text()),
        {0: H200, 1: H200},
        {0: 0x2335, 1: 0x2335},
    )


def layouts(**named: list[dict[str, object]]) -> MigConfig:
    return parse_config({"version": "v1", "mig-configs": named})


def one(devices: object, **mig_devices: int) -> list[dict[str, object]]:
    """A layout with one entry; profile names use _ for . (1g_18gb -> 1g.18gb)."""
    return [
        {
            "devices": devices,
            "mig-enabled": True,
            "mig-devices": {k.replace("_", "."): v for k, v in mig_devices.items()},
        }
    ]


# --- the document ------------------------------------------------------------------------


def test_mig_parted_document_parses() -> None:
    cfg = parse_config(
        {
            "version": "v1",
            "mig-configs": {
                "all-disabled": [{"devices": "all", "mig-enabled": False}],
                "mixed": [
                    {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.71gb": 2}},
                    {
                        "devices": [1],
                        "device-filter": ["0x233510DE"],
                        "mig-enabled": True,
                        "mig-devices": {"MIG 1g.18gb": 7, "2g.35gb": 0},
                    },
                ],
            },
        }
    )
    assert cfg.names() == ("all-disabled", "disabled", "mixed")
    mixed = cfg.get("mixed")
    assert mixed is not None
    assert mixed[0].devices == (0,) and mixed[0].mig_devices == (("3g.71gb", 2),)
    # the "MIG " prefix nvidia-smi prints is accepted; a count of 0 is dropped
    assert mixed[1].mig_devices == (("1g.18gb", 7),)
    assert mixed[1].device_filter == (0x2335,)
    assert cfg.get(LAYOUT_DISABLED) is not None
    assert cfg.get("nope") is None


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"version": "v2", "mig-configs": {"a": []}}, "version"),
        ({"version": "v1"}, "mig-configs"),
        ({"version": "v1", "mig-configs": {"a": []}}, "non-empty list"),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": True}]}},
            "devices is 'some'",
        ),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": "yes"}]}},
            "mig-enabled is 'yes'",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {
                    "a": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.18gb": 1}}]
                },
            },
            "mig-enabled: false",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {
                    "a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": "7"}}]
                },
            },
            "mig-devices entry",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {
                    "a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": -1}}]
                },
            },
            "count -1",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "gpus": 2}]},
            },
            "unknown keys ['gpus']",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {
                    "a": [{"devices": "all", "mig-enabled": True, "device-filter": "H200"}]
                },
            },
            "device-filter 'H200'",
        ),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": [True], "mig-enabled": True}]}},
            "devices is [True]",
        ),
    ],
)
def test_malformed_documents_are_refused(doc: object, needle: str) -> None:
    with pytest.raises(MigLayoutError, match=None) as info:
        parse_config(doc, host="node-1")
    text = str(info.value)
    assert needle in text
    assert text.startswith("node-1: ") and "fix:" in text
    assert info.value.exit_code == 2


# --- validation against the real H200 ------------------------------------------------------


def test_profiles_come_from_the_real_output(h200: tuple[MigGpu, ...]) -> None:
    gpu = h200[0]
    assert gpu.mig_capable and gpu.device_id == 0x2335
    p = gpu.profile("3g.71gb")
    assert p == GiProfile("3g.71gb", 9, 2, 3, (0, 4), 4)
    assert [q.name for q in gpu.profiles] == [
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
    ]


def test_seven_small_instances_fill_the_seven_slots(h200: tuple[MigGpu, ...]) -> None:
    out = validate_layout("h", layouts(small=one("all", **{"1g_18gb": 7})), "small", h200)
    assert [g.index for g in out] == [0, 1]
    assert [i.start for i in out[0].instances] == [0, 1, 2, 3, 4, 5, 6]
    assert {i.profile_id for i in out[0].instances} == {19}


def test_a_mixed_layout_is_placed_without_overlap(h200: tuple[MigGpu, ...]) -> None:
    cfg = layouts(mixed=one([1], **{"3g_71gb": 1, "2g_35gb": 1, "1g_18gb": 2}))
    (gpu,) = validate_layout("h", cfg, "mixed", h200)
    assert gpu.index == 1 and gpu.counts() == {"2g.35gb": 1, "1g.18gb": 2, "3g.71gb": 1}
    used = [s for i in gpu.instances for s in range(i.start or 0, (i.start or 0) + (i.size or 0))]
    assert len(used) == len(set(used)) == 8
    # every start is one the GPU offers for that profile
    for i in gpu.instances:
        prof = h200[1].profile(i.profile)
        assert prof is not None and prof.placements is not None and i.start in prof.placements


def test_too_many_of_one_profile_names_the_maximum(h200: tuple[MigGpu, ...]) -> None:
    with pytest.raises(MigLayoutError) as info:
        validate_layout("node-7", layouts(big=one("all", **{"1g_18gb": 8})), "big", h200)
    text = str(info.value)
    assert "node-7: layout 'big' on GPU 0 (NVIDIA H200): 8x 1g.18gb asked, at most 7 fit" in text
    assert "ask for 7x 1g.18gb or fewer" in text


def test_a_profile_of_another_model_is_refused_with_the_gpus_profiles(
    h200: tuple[MigGpu, ...],
) -> None:
    with pytest.raises(MigLayoutError) as info:  # 1g.10gb is the H100 80GB's
        validate_layout("node-7", layouts(h100=one("all", **{"1g_10gb": 7})), "h100", h200)
    text = str(info.value)
    assert "profile 1g.10gb is not offered by this GPU" in text
    assert "1g.18gb (max 7)" in text and "7g.141gb (max 1)" in text


def test_too_many_slices_says_what_would_fit(h200: tuple[MigGpu, ...]) -> None:
    cfg = layouts(over=one([0], **{"4g_71gb": 1, "3g_71gb": 1, "1g_18gb": 1}))
    with pytest.raises(MigLayoutError) as info:
        validate_layout("node-7", cfg, "over", h200)
    text = str(info.value)
    assert "GPU 0 (NVIDIA H200)" in text
    assert "8 of 7 compute slices, 9 of 8 memory slices" in text
    assert "what fits together: 4g.71gb x1, 3g.71gb x1" in text


def test_an_impossible_placement_mix_is_refused(h200: tuple[MigGpu, ...]) -> None:
    # 4 compute and 8 memory slices would do, but 1g.35gb may only start at 0, 2, 4 or 6:
    # with 2g.35gb x3 on 0-5 only slot 6 is left, for one of the two.
    cfg = layouts(mix=one([0], **{"2g_35gb": 3, "1g_35gb": 2}))
    with pytest.raises(MigLayoutError) as info:
        validate_layout("node-7", cfg, "mix", h200)
    assert "what fits together: 2g.35gb x3, 1g.35gb x1" in str(info.value)


def test_the_solver_backtracks_and_refuses_pure_overlap() -> None:
    wide = GiProfile("2g.x", 1, 1, 2, (0, 2), 2)
    narrow = GiProfile("1g.x", 2, 2, 1, (0, 2), 1)
    placed = solve_placement([(wide, 1), (narrow, 1)])
    assert placed is not None and sorted(i.start or 0 for i in placed) == [0, 2]
    # memory 4 of 8 and compute 4 of 7 are fine; the placements are not
    assert solve_placement([(wide, 1), (narrow, 2)]) is None
    assert what_fits([(wide, 1), (narrow, 2)]) == {"2g.x": 1, "1g.x": 1}


def test_disabled_turns_every_gpu_off(h200: tuple[MigGpu, ...]) -> None:
    out = validate_layout("h", MigConfig({}), LAYOUT_DISABLED, h200)
    assert [(g.index, g.mig_enabled, g.instances) for g in out] == [(0, False, ()), (1, False, ())]


def test_unknown_layout_lists_the_known_ones(h200: tuple[MigGpu, ...]) -> None:
    with pytest.raises(MigLayoutError, match="select one of: a, disabled"):
        validate_layout("h", layouts(a=one("all", **{"7g_141gb": 1})), "b", h200)


def test_gpu_indices_must_exist_and_appear_once(h200: tuple[MigGpu, ...]) -> None:
    with pytest.raises(MigLayoutError, match=r"names GPU 5; the host has GPUs \[0, 1\]"):
        validate_layout("h", layouts(a=one([5], **{"7g_141gb": 1})), "a", h200)
    twice = [*one("all", **{"7g_141gb": 1}), *one([1], **{"3g_71gb": 2})]
    with pytest.raises(MigLayoutError, match="names GPU 1 in two entries"):
        validate_layout("h", layouts(a=twice), "a", h200)


def test_device_filter_skips_other_models(h200: tuple[MigGpu, ...]) -> None:
    spec = one("all", **{"7g_141gb": 1})
    spec[0]["device-filter"] = "0x233010DE"  # H100 SXM5 80GB: no GPU of this host matches
    assert validate_layout("h", layouts(a=spec), "a", h200) == ()
    spec[0]["device-filter"] = ["0x233010DE", "0x233510DE"]
    assert len(validate_layout("h", layouts(a=spec), "a", h200)) == 2


def test_mig_on_a_gpu_without_mig_is_refused() -> None:
    # An L40S host: nvidia-smi lists the GPU, `mig -lgip` has no rows for it.
    gpus = gpus_from_smi((), (), {0: "NVIDIA L40S"}, {0: 0x26B9})
    assert gpus[0].mig_capable is False
    with pytest.raises(MigLayoutError) as info:
        validate_layout("ada-1", layouts(a=one("all", **{"1g_12gb": 4})), "a", gpus)
    assert "ada-1: layout 'a' on GPU 0 (NVIDIA L40S): this GPU has no MIG" in str(info.value)
    # turning MIG off there is fine
    assert validate_layout("ada-1", MigConfig({}), LAYOUT_DISABLED, gpus)[0].mig_enabled is False


def test_nccl_policy_conflicts_with_mig(h200: tuple[MigGpu, ...]) -> None:
    on = validate_layout("h", layouts(a=one([0], **{"7g_141gb": 1})), "a", h200)
    (msg,) = conflicts("h", on, needs_multi_gpu_nccl=True)
    assert "GPUs [0]" in msg and "NVLink peer-to-peer" in msg
    assert "gpuprov_validation_nccl: false" in msg  # the fix names the knob
    assert conflicts("h", on, needs_multi_gpu_nccl=False) == ()
    off = validate_layout("h", MigConfig({}), LAYOUT_DISABLED, h200)
    assert conflicts("h", off, needs_multi_gpu_nccl=True) == ()


# --- the catalog -------------------------------------------------------------------------


def test_catalog_h200_matches_the_real_gpu(h200: tuple[MigGpu, ...]) -> None:
    model = default_catalog().gpu(0x2335)
    from_catalog = gpu_from_catalog(0, model, 0x2335)
    assert from_catalog.profiles == h200[0].profiles


@pytest.mark.parametrize(
    ("device_id", "ok", "bad", "maximum", "over"),
    [
        # H100 SXM5 80GB
        (0x2330, {"1g.10gb": 7}, "1g.10gb", 7, {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}),
        # A100 SXM4 40GB
        (0x20B0, {"3g.20gb": 2}, "3g.20gb", 2, {"7g.40gb": 1, "1g.5gb": 1}),
    ],
)
def test_catalog_models_without_placements_check_names_counts_and_compute(
    device_id: int, ok: dict[str, int], bad: str, maximum: int, over: dict[str, int]
) -> None:
    model = default_catalog().gpu(device_id)
    assert model is not None
    gpu = gpu_from_catalog(0, model, device_id)

    def spec(devices: dict[str, int]) -> list[dict[str, object]]:
        return [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]

    cfg = layouts(ok=spec(ok), bad=spec({bad: maximum + 1}), over=spec(over))
    (placed,) = validate_layout("h", cfg, "ok", [gpu])
    assert placed.counts() == ok and all(i.start is None for i in placed.instances)
    with pytest.raises(MigLayoutError, match=f"at most {maximum} fit"):
        validate_layout("h", cfg, "bad", [gpu])
    with pytest.raises(MigLayoutError, match="8 of 7 compute slices"):
        validate_layout("h", cfg, "over", [gpu])


def test_unknown_gpu_from_catalog_has_no_mig() -> None:
    gpu = gpu_from_catalog(3, None, 0x1234)
    assert gpu.mig_capable is False and gpu.model == "unknown GPU 0x1234"


# --- the fleet layouts shipped in inventory/group_vars/all.yml ------------------------------


@pytest.mark.parametrize(
    ("prefix", "device_id"), [("h100-80gb-", 0x2330), ("h200-", 0x2335), ("a100-40gb-", 0x20B0)]
)
def test_shipped_layouts_fit_the_model_they_are_named_for(prefix: str, device_id: int) -> None:
    group_vars = Path(__file__).resolve().parents[2] / "inventory" / "group_vars" / "all.yml"
    configs = yaml.safe_load(group_vars.read_text())["mig_configs"]
    cfg = parse_config({"version": "v1", "mig-configs": configs})
    model = default_catalog().gpu(device_id)
    gpus = [gpu_from_catalog(i, model, device_id) for i in range(8)]
    names = [n for n in cfg.names() if n.startswith(prefix)]
    assert len(names) == 2
    for name in names:
        out = validate_layout("h", cfg, name, gpus)
        assert len(out) == 8 and all(g.mig_enabled and g.instances for g in out)
    other = "h200-mixed" if prefix != "h200-" else "h100-80gb-mixed"
    with pytest.raises(MigLayoutError, match="is not offered by this GPU"):
        validate_layout("h", cfg, other, gpus)
