"""The dcgm role's facts are the reference's (tests/recorded/reference/dcgm.yaml): every
package name, unit and default it relies on is written there."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "dcgm"
REF = yaml.safe_load((REPO / "tests/recorded/reference/dcgm.yaml").read_text())["dcgm"]
VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def test_package_names_are_the_references() -> None:
    deb = REF["packages"]["dcgm4"]["built_from_open_source_tree"]["deb"]
    assert VARS["__dcgm_core_package"] in deb
    flavours = [
        VARS["__dcgm_cuda_package"].replace("{{ __dcgm_cuda }}", m)
        for m in VARS["__dcgm_cuda_majors"]
    ]
    assert set(flavours) <= set(deb)
    assert VARS["__dcgm_dcgm3_package"] == REF["packages"]["dcgm3"]["name"]
    assert VARS["__dcgm_exporter_package"] == REF["exporter"]["host_package"].split()[0]
    assert f"'{VARS['__dcgm_epoch']}:4.5.2-1' (deb)" in REF["packages"]["dcgm4"]["version_format"]


def test_units_port_and_image_are_the_references() -> None:
    assert VARS["__dcgm_unit"] == REF["service"]["unit"]
    assert VARS["__dcgm_exporter_host_unit"] in REF["exporter"]["host_service"]
    assert VARS["__dcgm_exporter_container_unit"] in REF["exporter"]["deepops_idiom"]
    assert f":{DEFAULTS['dcgm_exporter_port']}" in REF["exporter"]["listen_default"]
    assert f":{VARS['__dcgm_exporter_container_port']}" in REF["exporter"]["listen_default"]
    image = DEFAULTS["dcgm_exporter_image"]
    name, tag = image.split("/", 1)[1].rsplit(":", 1)
    assert name in REF["exporter"]["container_image"] and tag in REF["exporter"]["container_image"]


def test_the_cuda_major_table_matches_the_reference() -> None:
    rule = REF["packages"]["dcgm4"]["choose_cuda_flavour"]
    table = {row["branch"]: row["major"] for row in VARS["__dcgm_cuda_major_from_branch"]}
    assert "580 -> 13" in rule and table[580] == "13"
    assert "535/550/570 -> 12" in rule and table[525] == "12"


def test_opt_in_and_after_the_driver() -> None:
    roles = yaml.safe_load((REPO / "orchestrator/roles.yaml").read_text())["roles"]
    row = next(r for r in roles if r["name"] == "dcgm")
    assert row["default"] is False and row["depends_on"] == ["nvidia_driver"]
