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


def test_the_exporter_uses_the_running_host_engine_in_both_modes() -> None:
    """dcgm.exporter.remote_hostengine: without -r or DCGM_REMOTE_HOSTENGINE_INFO the exporter
    starts an embedded DCGM beside nvidia-dcgm's; the packaged unit sets neither."""
    exporter = REF["exporter"]
    address = VARS["__dcgm_hostengine_address"]
    assert f"Value {address}" in str(exporter["source"]["remote_hostengine"])
    assert address.endswith(":" + exporter["hostengine_port"].split()[0])
    assert "-r" not in exporter["host_service"]  # as packaged: embedded
    env = "DCGM_REMOTE_HOSTENGINE_INFO={{ __dcgm_hostengine_address }}"
    assert "DCGM_REMOTE_HOSTENGINE_INFO" in exporter["remote_hostengine"]
    host = yaml.safe_load((ROLE / "tasks/exporter-host.yml").read_text())
    dropin = next(t for t in host if "ansible.builtin.copy" in t)["ansible.builtin.copy"]
    assert f"Environment={env}" in dropin["content"].splitlines()
    unit = (ROLE / "templates/docker.dcgm-exporter.service.j2").read_text()
    start = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    # the host engine listens on the host's localhost: the container shares the host's network
    assert f"-e {env}" in start and "--network host" in start
    assert "-e DCGM_EXPORTER_LISTEN=:{{ dcgm_exporter_port }}" in start
