"""gpuprov.nvidia's dpkg filters (plugins/filter/dpkg.py), fed with `dpkg-query` output
recorded on a converged Debian 12 lab host (tests/unit/lab_data/dpkg-query-lab-host.txt:
held and unheld packages, `docker-ce` known but not installed, two names dpkg does not know,
which print nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import load_module

HERE = Path(__file__).resolve().parent
RECORDED = (HERE / "lab_data" / "dpkg-query-lab-host.txt").read_text()


dpkg = load_module("gpuprov_dpkg_filters", HERE.parents[1] / "plugins" / "filter" / "dpkg.py")


def test_installed_at_the_pinned_version_or_its_wildcard_is_not_missing() -> None:
    specs = [
        "gpg",  # any version
        "nvidia-container-toolkit=1.17.8-*",  # the toolkit role's pin form
        "nvidia-container-toolkit-base=1.17.8-1",  # an exact revision
        "nvidia-fabricmanager=580.159.04-1",  # held: still installed
    ]
    assert dpkg.dpkg_missing(RECORDED, specs) == []


def test_another_version_unknown_or_not_installed_is_missing() -> None:
    specs = [
        "nvidia-container-toolkit=1.18.0-*",  # a version change
        "docker-ce",  # known to dpkg, not installed (un)
        "nvidia-open",  # dpkg knows nothing of it: no line
        "python3-debian>=0.2",  # an operator the filter does not read: left to apt
        "gpg:amd64",  # an architecture qualifier: left to apt
    ]
    assert dpkg.dpkg_missing(RECORDED, specs) == specs


def test_half_installed_or_in_error_is_missing() -> None:
    # derived from the recorded line: dpkg-query(1)'s abbreviations for unpacked, and for
    # installed with the reinstall-required error flag
    unpacked = RECORDED.replace("gpg\t2.2.40-1.1+deb12u2\tii ", "gpg\t2.2.40-1.1+deb12u2\tiU ")
    in_error = RECORDED.replace("gpg\t2.2.40-1.1+deb12u2\tii ", "gpg\t2.2.40-1.1+deb12u2\tiiR")
    assert unpacked != RECORDED and in_error != RECORDED
    assert dpkg.dpkg_missing(unpacked, ["gpg"]) == ["gpg"]
    assert dpkg.dpkg_missing(in_error, ["gpg"]) == ["gpg"]


def test_unreadable_output_leaves_everything_to_apt() -> None:
    assert dpkg.dpkg_missing("", ["gpg"]) == ["gpg"]
    assert dpkg.dpkg_missing("gpg 2.2.40 ii\n", ["gpg"]) == ["gpg"]  # another format
    assert dpkg.dpkg_missing(None, ["gpg"]) == ["gpg"]


def test_present_is_what_a_removal_would_act_on() -> None:
    names = ["docker.io", "containerd", "docker-ce", "no-such-package"]
    assert dpkg.dpkg_present(RECORDED, names) == ["docker.io", "containerd"]
    # config files only (rc): apt's remove leaves them, as the module would
    removed = RECORDED.replace("containerd\t1.6.20~ds1-1+deb12u3\tii ", "containerd\t\trc ")
    assert removed != RECORDED
    assert dpkg.dpkg_present(removed, names) == ["docker.io"]


def test_selection_differs_for_unheld_and_unlisted_names() -> None:
    names = ["nvidia-container-toolkit", "gpg", "docker.io", "nvidia-open"]
    assert dpkg.dpkg_selection_differs(RECORDED, names, "hold") == ["gpg", "nvidia-open"]
    assert dpkg.dpkg_selection_differs(RECORDED, names, "install") == [
        "nvidia-container-toolkit",
        "docker.io",
        "nvidia-open",
    ]


def test_an_unknown_selection_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown selection 'held'"):
        dpkg.dpkg_selection_differs(RECORDED, ["gpg"], "held")


def test_the_filters_are_registered_under_their_names() -> None:
    assert set(dpkg.FilterModule().filters()) == {
        "dpkg_missing",
        "dpkg_present",
        "dpkg_selection_differs",
    }
