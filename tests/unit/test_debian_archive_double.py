"""The lab's test double of Debian's archive (tests/lab/aptrepo/debianarchive.py) is generated
from the recorded archive (tests/recorded/debian-archive/) and nothing else: each stand-in
keeps its recorded stanza's relations, ships files only at recorded paths, and says it is a
test double. Also the recorder's selection (debianrecord.closure) on stanzas shaped like
Debian's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))

from aptrepo import debianarchive, debianrecord  # noqa: E402

RECORDED = REPO / "tests" / "recorded" / "debian-archive"


def _recorded() -> dict[tuple[str, str, str], dict[str, str]]:
    out = {}
    for suite in debianarchive.suites():
        for component in debianrecord.COMPONENTS:
            text = (RECORDED / suite / f"{component}.Packages").read_text()
            for stanza in debianrecord.parse_stanzas(text) if text.strip() else []:
                out[suite, component, stanza["Package"]] = stanza
    return out


def test_every_recorded_stanza_is_a_stand_in_with_its_relations_verbatim() -> None:
    recorded = _recorded()
    doubles = {
        (a.suite, a.component, a.package.name): a.package for a in debianarchive.archive_packages()
    }
    assert set(doubles) == set(recorded)
    assert len(doubles) >= 20
    for key, stanza in recorded.items():
        package = doubles[key]
        assert package.version == stanza["Version"]
        for field in debianarchive.KEPT_FIELDS:
            assert package.extra_control.get(field) == stanza.get(field), (key, field)
        assert "Test double of Debian's" in package.description
        assert "tests/recorded/debian-archive" in package.origin.text()


def test_the_recording_is_the_driver_of_debian_13() -> None:
    trixie = {name: s for (suite, _, name), s in _recorded().items() if suite == "trixie"}
    assert set(debianrecord.ROOTS) <= set(trixie)
    assert trixie["nvidia-kernel-dkms"]["Version"] == "550.163.01-2"
    assert "dkms (>= 3.0.11)" in trixie["nvidia-kernel-dkms"]["Depends"]
    assert (RECORDED / "trixie" / "Release.fields").read_text().count("Codename: trixie\n") == 1


def test_files_only_at_recorded_paths_and_the_dkms_module_as_recorded() -> None:
    paths = debianarchive.contents()
    for entry in debianarchive.archive_packages():
        package = entry.package
        recorded = set(paths.get(package.name, []))
        for item in package.files:
            if item.target.endswith(("/Kbuild", ".c")):
                # the double's own DKMS sources, beside the recorded dkms.conf
                assert f"{item.target.rsplit('/', 1)[0]}/dkms.conf" in recorded
            else:
                assert item.target in recorded, (package.name, item.target)
    by_name = {e.package.name: e.package for e in debianarchive.archive_packages()}
    proprietary = by_name["nvidia-kernel-dkms"]
    assert proprietary.substitutions["@MODULE@"] == "nvidia-current"  # Debian's DKMS name
    assert proprietary.substitutions["@LICENSE@"] == "NVIDIA"
    assert proprietary.scripts == {"postinst": "dkms-postinst", "prerm": "dkms-prerm"}
    assert by_name["nvidia-open-kernel-dkms"].substitutions["@LICENSE@"] == "Dual MIT/GPL"
    smi = {f.target for f in by_name["nvidia-smi"].files}
    assert smi == {"usr/lib/nvidia/current/nvidia-smi"}
    nvml = {f.target: f for f in by_name["libnvidia-ml1"].files}
    versioned = "usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.550.163.01"
    assert nvml[versioned].content and "TEST DOUBLE" in nvml[versioned].content
    assert nvml[versioned.replace("550.163.01", "1")].link == "libnvidia-ml.so.550.163.01"
    # recorded paths it does not ship are named in the package's README.test-double
    left_out = by_name["nvidia-kernel-support"].origin.text()
    assert "etc/nvidia/current/nvidia-modprobe.conf" in left_out


def _stanza(name: str, **fields: str) -> dict[str, str]:
    return {"Package": name, "Version": "1", **fields}


def test_closure_follows_depends_first_alternatives_and_provides() -> None:
    stanzas = [
        _stanza("a", **{"Depends": "b (= 1) | c, v, libc6 (>= 2.34)", "Pre-Depends": "d"}),
        _stanza("b"),
        _stanza("c"),
        _stanza("d"),
        _stanza("p", Provides="v (= 1)"),
        _stanza("unrelated"),
    ]
    chosen = [s["Package"] for s in debianrecord.closure(stanzas, ["a"])]
    assert chosen == ["a", "b", "d", "p"]  # c: a later alternative; libc6: not here (main)


def test_a_root_the_archive_does_not_hold_fails_the_recording() -> None:
    with pytest.raises(debianrecord.RecordError, match="no package nvidia-smi"):
        debianrecord.closure([_stanza("a")], ["a", "nvidia-smi"])


def test_parse_stanzas_keeps_continuation_lines() -> None:
    (stanza,) = debianrecord.parse_stanzas("Package: a\nDescription: one\n two\n .\n three\n")
    assert stanza["Description"] == "one\n two\n .\n three"
