"""Lab image recipes: parsed from images.yaml, hashed so only a recipe change rebuilds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.errors import BadInputError
from orchestrator.lab import engine, images


@pytest.fixture(scope="module")
def recipes() -> dict[str, images.Recipe]:
    return images.load_recipes()


def test_both_debian_releases_have_a_recipe(recipes: dict[str, images.Recipe]) -> None:
    assert recipes["debian12"].suite == "bookworm"
    assert recipes["debian13"].suite == "trixie"


def test_recipe_enables_non_free_for_the_distribution_driver(
    recipes: dict[str, images.Recipe],
) -> None:
    sources = recipes["debian12"].files()["etc/apt/sources.list.d/debian.sources"]
    assert "Components: main contrib non-free non-free-firmware" in sources
    assert "Suites: bookworm-security" in sources
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in sources


def test_image_carries_nothing_a_role_installs(recipes: dict[str, images.Recipe]) -> None:
    for recipe in recipes.values():
        for package in recipe.packages:
            assert not package.startswith(("nvidia", "docker", "containerd", "linux-headers"))


def test_tag_is_stable_and_names_os_and_digest(recipes: dict[str, images.Recipe]) -> None:
    again = images.load_recipes()
    r = recipes["debian13"]
    assert r.tag == again["debian13"].tag == f"gpuprov-lab/debian13:{r.digest}"
    assert len(r.digest) == 12
    assert recipes["debian12"].digest != r.digest


@pytest.mark.parametrize(
    "change",
    [
        {"packages": ("systemd",)},
        {"mirror": "http://127.0.0.1/debian"},
        {"components": ("main",)},
        {"suite": "sid"},
    ],
)
def test_any_recipe_change_changes_the_tag(
    recipes: dict[str, images.Recipe], change: dict[str, object]
) -> None:
    r = recipes["debian12"]
    assert dataclasses.replace(r, **change).tag != r.tag  # type: ignore[arg-type]


def test_build_steps_version_is_in_the_digest(
    recipes: dict[str, images.Recipe], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = recipes["debian12"].digest
    monkeypatch.setattr(images, "BUILD_STEPS", images.BUILD_STEPS + 1)
    assert recipes["debian12"].digest != before


def test_malformed_recipe_names_the_missing_key() -> None:
    with pytest.raises(BadInputError, match="suite"):
        images.parse_recipes(
            {
                "mirror": "m",
                "security_mirror": "s",
                "components": ["main"],
                "packages": [],
                "os": {"debian12": {}},
            }
        )


def test_unknown_os_lists_the_known_ones() -> None:
    with pytest.raises(BadInputError) as err:
        images.recipe_for("ubuntu2404")
    assert err.value.fix is not None and "debian12, debian13" in err.value.fix


def test_write_tree_strips_host_keys_and_enables_boot_hooks(
    recipes: dict[str, images.Recipe], tmp_path: Path
) -> None:
    root = tmp_path / "rootfs"
    (root / "etc/ssh").mkdir(parents=True)
    (root / "etc/apt").mkdir(parents=True)
    (root / "var/lib/apt/lists").mkdir(parents=True)
    (root / "etc/ssh/ssh_host_rsa_key").write_text("secret")
    (root / "etc/ssh/ssh_host_rsa_key.pub").write_text("pub")
    (root / "etc/ssh/sshd_config").write_text("# stock\n")
    (root / "etc/apt/sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (root / "var/lib/apt/lists/some_Packages").write_text("x")
    (root / "etc/machine-id").write_text("98e2e8f3386e4faf95d0b689b99b1dd2\n")

    images.write_tree(recipes["debian12"], root)

    assert sorted(p.name for p in (root / "etc/ssh").iterdir()) == [
        "sshd_config",
        "sshd_config.d",
    ]
    assert not (root / "etc/apt/sources.list").exists()
    assert not (root / "var/lib/apt/lists/some_Packages").exists()
    assert (root / "etc/machine-id").read_text() == ""
    wants = root / "etc/systemd/system/sysinit.target.wants"
    assert (wants / "gpusim-boot.service").readlink() == Path(
        "/etc/systemd/system/gpusim-boot.service"
    )
    unit = (root / "etc/systemd/system/gpusim-boot.service").read_text()
    assert "ExecStart=/opt/gpusim/boot" in unit
    assert "ConditionPathExists=/opt/gpusim/boot" in unit
    sockets = root / "etc/systemd/system/sockets.target.wants"
    assert (sockets / "gpusim-smi.socket").readlink() == Path(
        "/etc/systemd/system/gpusim-smi.socket"
    )
    socket_unit = (root / "etc/systemd/system/gpusim-smi.socket").read_text()
    assert "ListenStream=/run/gpusim/smi.sock" in socket_unit and "SocketMode=0600" in socket_unit
    service = (root / "etc/systemd/system/gpusim-smi.service").read_text()
    assert "ExecStart=/opt/gpusim/bin/gpusim smi-server" in service
    sshd = (root / "etc/ssh/sshd_config.d/gpuprov-lab.conf").read_text()
    assert "PasswordAuthentication no" in sshd


def test_stale_images_are_those_no_recipe_names(
    recipes: dict[str, images.Recipe], monkeypatch: pytest.MonkeyPatch
) -> None:
    current = [r.tag for r in recipes.values()]
    old = "gpuprov-lab/debian12:000000000000"
    asked: list[dict[str, str]] = []

    def labelled(labels: dict[str, str]) -> list[str]:
        asked.append(labels)
        return sorted([*current, old])

    monkeypatch.setattr(engine, "images", labelled)
    assert images.stale(recipes) == [old]
    assert asked == [{images.IMAGE_LABEL: ""}]
