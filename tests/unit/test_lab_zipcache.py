"""The lab hosts' bytecode cache for zip imports (orchestrator/lab/hostfiles): the code it
returns is the code compile gives, named after the archive it was imported from this time."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.lab import images

HOSTFILES = Path(images.__file__).parent / "hostfiles"

# Imports `payload` from the zip in argv[1] with the cache in argv[2]; prints what it saw.
PROBE = """
import json, sys, traceback
sys.path.insert(0, {hostfiles!r})
import gpuprov_lab_zipcache as cache
cache.CACHE = sys.argv[2]
calls = []
compile_source = cache._compile
def counting(pathname, source):
    calls.append(pathname)
    return compile_source(pathname, source)
cache._compile = counting
sys.path.insert(0, sys.argv[1])
import payload
try:
    payload.fail()
except ValueError:
    where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
print(json.dumps({{"compiled": calls, "value": payload.VALUE, "where": where}}))
"""


def _zip(path: Path, value: int) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("payload.py", f"VALUE = {value}\n\ndef fail():\n    raise ValueError(VALUE)\n")
    return path


def _probe(archive: Path, cache: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(hostfiles=str(HOSTFILES)), str(archive), str(cache)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_second_archive_with_the_same_source_is_not_compiled_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _probe(_zip(tmp_path / "a.zip", 1), cache)
    second = _probe(_zip(tmp_path / "b.zip", 1), cache)
    assert first["compiled"] == [str(tmp_path / "a.zip" / "payload.py")]
    assert second["compiled"] == []  # from the cache
    assert first["value"] == second["value"] == 1
    # tracebacks name the archive each run imported from, not the one that filled the cache
    assert first["where"] == str(tmp_path / "a.zip" / "payload.py")
    assert second["where"] == str(tmp_path / "b.zip" / "payload.py")


def test_changed_source_is_compiled_and_kept_beside_the_old(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _probe(_zip(tmp_path / "a.zip", 1), cache)
    changed = _probe(_zip(tmp_path / "b.zip", 2), cache)
    assert changed["compiled"] and changed["value"] == 2
    assert len([p for p in cache.rglob("*") if p.is_file()]) == 2


@pytest.mark.skipif(sys.platform != "linux", reason="permissions as on the lab hosts")
def test_a_cache_it_cannot_write_only_costs_the_compile(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    result = _probe(_zip(tmp_path / "a.zip", 3), blocked / "cache")
    assert result["compiled"] and result["value"] == 3


def test_the_images_carry_the_cache_and_the_pth_that_loads_it() -> None:
    for os_name in ("debian12", "debian13"):
        files = images.recipe_for(os_name).files()
        module = files["usr/lib/python3/dist-packages/gpuprov_lab_zipcache.py"]
        assert module == (HOSTFILES / "gpuprov_lab_zipcache.py").read_text()
        assert files["usr/lib/python3/dist-packages/gpuprov_lab_zipcache.pth"] == (
            "import gpuprov_lab_zipcache\n"
        )
