"""The planner matches an OS by the release its repositories are keyed by.

Facts: the real 2x H200 capture (tests/recorded/fixtures/real/h200x2-ubuntu2404-580) without
its driver outputs, as a p5.48xlarge (8x H100 SXM5 + 4 NVSwitch, ids from gpus.md) would show
them, with the os-release of another OS. The os-release texts are the fields those releases
print (as seen in public transcripts of `cat /etc/os-release`: Rocky Linux 9.4, RHEL 9.4,
Amazon Linux 2023, Ubuntu, Debian), with the point release changed where a test needs one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.catalog import default_catalog
from orchestrator.parsers import parse_host
from orchestrator.plan import HostPlan, RolePlan, plan_host
from orchestrator.policy import load_policy

REAL = (
    Path(__file__).resolve().parents[1] / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
)
NO_DRIVER = ("nvidia-smi", "proc-driver-nvidia")

ROCKY_94 = """NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
"""
RHEL_96 = """NAME="Red Hat Enterprise Linux"
VERSION="9.6 (Plow)"
ID="rhel"
ID_LIKE="fedora"
VERSION_ID="9.6"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Red Hat Enterprise Linux 9.6 (Plow)"
"""
RHEL_810 = RHEL_96.replace("9.6 (Plow)", "8.10 (Ootpa)").replace('"9.6"', '"8.10"')
RHEL_810 = RHEL_810.replace("el9", "el8")
AL2023 = """NAME="Amazon Linux"
VERSION="2023"
ID="amzn"
ID_LIKE="fedora"
VERSION_ID="2023"
PLATFORM_ID="platform:al2023"
PRETTY_NAME="Amazon Linux 2023.12.20260930"
"""
UBUNTU_2204 = """PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
"""
UBUNTU_2004 = UBUNTU_2204.replace("22.04.5", "20.04.6").replace('"22.04"', '"20.04"')
UBUNTU_2004 = UBUNTU_2004.replace("Jammy Jellyfish", "Focal Fossa").replace("jammy", "focal")
DEBIAN_12 = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
"""
DEBIAN_11 = DEBIAN_12.replace("12", "11").replace("bookworm", "bullseye")
# Debian testing/sid: no VERSION_ID, only the codename.
DEBIAN_TRIXIE_NO_VERSION = 'PRETTY_NAME="Debian GNU/Linux trixie/sid"\nID=debian\n'
DEBIAN_TRIXIE_NO_VERSION += "VERSION_CODENAME=trixie\n"


def p5(os_release: str) -> dict[str, str]:
    """The real host's raw outputs, with no driver, 8x H100 SXM5 + 4 NVSwitch, `os_release`."""
    raw = {
        p.name: p.read_text()
        for p in REAL.iterdir()
        if p.is_file() and not p.name.startswith(NO_DRIVER)
    }
    lines = [ln for ln in raw["sysfs-pci-devices.txt"].splitlines() if "vendor=0x10de" not in ln]
    lines = [ln for ln in lines if not ln.startswith("# exit")]
    link = 'current_link_speed="32.0 GT/s PCIe" current_link_width=16 '
    link += 'max_link_speed="32.0 GT/s PCIe" max_link_width=16'
    for bus, (device, cls) in enumerate([(0x2330, 0x030200)] * 8 + [(0x22A3, 0x068000)] * 4):
        lines.append(
            f"0000:{0x10 + bus:02x}:00.0 vendor=0x10de device={device:#06x} class={cls:#08x} "
            f"subsystem_vendor=0x10de subsystem_device=0x0000 {link} numa_node=0 driver="
        )
    raw["sysfs-pci-devices.txt"] = "\n".join(lines) + "\n# exit=0\n"
    raw["os-release.txt"] = os_release + "# exit=0\n"
    return raw


def plan(os_release: str, **policy: object) -> HostPlan:
    facts = parse_host("node", p5(os_release))
    return plan_host(facts, load_policy("node", policy), default_catalog())


def role(p: HostPlan, name: str) -> RolePlan:
    return next(r for r in p.roles if r.name == name)


@pytest.mark.parametrize(
    ("os_release", "cuda_repo"),
    [
        (ROCKY_94, "rhel9"),
        (RHEL_96, "rhel9"),
        (RHEL_810, "rhel8"),
        (AL2023, "amzn2023"),
        (UBUNTU_2204, "ubuntu2204"),
        (DEBIAN_12, "debian12"),
    ],
    ids=["rocky-9.4", "rhel-9.6", "rhel-8.10", "al2023", "ubuntu-22.04.5", "debian-12"],
)
def test_point_releases_plan_from_the_repository_their_major_uses(
    os_release: str, cuda_repo: str
) -> None:
    p = plan(os_release)
    assert not p.blockers, p.blockers
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_source"] == "cuda"
    assert driver.vars["nvidia_driver_branch"] == "580"  # newest LTSB for H100
    assert driver.vars["nvidia_driver_flavour"] == "open"
    assert driver.vars["nvidia_driver_fabricmanager"] is True
    facts = parse_host("node", p5(os_release))
    assert facts.os is not None
    source = default_catalog().source_for(facts.os.id, facts.os.version_id, facts.os.codename)
    assert source is not None and source.cuda_repo == cuda_repo


def test_debian_without_version_id_is_matched_by_its_codename() -> None:
    facts = parse_host("node", p5(DEBIAN_TRIXIE_NO_VERSION))
    assert facts.os is not None and facts.os.version_id == ""
    source = default_catalog().source_for(facts.os.id, facts.os.version_id, facts.os.codename)
    assert source is not None and source.label == "Debian 13"


@pytest.mark.parametrize(
    "os_release",
    [UBUNTU_2004, DEBIAN_11, AL2023.replace('"2023"', '"2"').replace("2023.12.20260930", "2")],
    ids=["ubuntu-20.04", "debian-11", "amazon-linux-2"],
)
@pytest.mark.parametrize("source", ["cuda", "distribution"])
def test_an_unsupported_os_gets_one_blocker_whatever_the_source(
    os_release: str, source: str
) -> None:
    p = plan(os_release, nvidia_driver_source=source)
    driver_blockers = [b for b in p.blockers if "supported" in b or "fix: set" in b]
    assert len(driver_blockers) == 1, p.blockers
    (blocker,) = driver_blockers
    assert "is not supported" in blocker
    assert "supported: Ubuntu 22.04, Ubuntu 24.04, Debian 12" in blocker
    assert "Amazon Linux 2023" in blocker
    # The fix does not send the user to the other source (which would block again).
    assert "nvidia_driver_source" not in blocker


def test_no_blocker_sends_the_user_in_a_circle() -> None:
    """Every fix that names a source leads to a plan without that blocker."""
    for os_release in (ROCKY_94, AL2023, DEBIAN_12, UBUNTU_2204, UBUNTU_2004, DEBIAN_11):
        for source in ("cuda", "distribution"):
            p = plan(os_release, nvidia_driver_source=source)
            for blocker in p.blockers:
                if "fix: set nvidia_driver_source=" in blocker:
                    other = blocker.split("fix: set nvidia_driver_source=")[1].split()[0]
                    assert other != source
                    again = plan(os_release, nvidia_driver_source=other)
                    assert not [b for b in again.blockers if "nvidia_driver_source" in b], (
                        os_release,
                        source,
                        again.blockers,
                    )


def test_rhel_distribution_source_points_at_nvidias_repository() -> None:
    p = plan(RHEL_96, nvidia_driver_source="distribution")
    assert any(
        "no distribution driver for rhel 9" in b
        and "set nvidia_driver_source=cuda (NVIDIA's rhel9 repository)" in b
        for b in p.blockers
    ), p.blockers


def test_amazon_linux_gets_docker_from_the_distribution() -> None:
    p = plan(AL2023, gpuprov_roles=["nvidia_driver", "docker", "nvidia_container_toolkit"])
    assert role(p, "docker").vars["docker_source"] == "distribution"
    assert any("Docker's repository has no Amazon Linux path" in w for w in p.warnings)
    other = plan(RHEL_96, gpuprov_roles=["nvidia_driver", "docker"])
    assert role(other, "docker").vars["docker_source"] == "docker"


def test_a_catalog_os_without_a_release_rule_is_refused() -> None:
    from orchestrator.catalog import DEFAULT_PATH, parse_catalog
    from orchestrator.errors import CatalogError

    data = yaml.safe_load(DEFAULT_PATH.read_text(encoding="utf-8"))
    del data["os_release_keys"]["amzn"]
    with pytest.raises(CatalogError, match="os_release_keys has no rule for 'amzn'"):
        parse_catalog(data)
