"""The on-host applier, against a fake `nvidia-smi` that keeps MIG state like the real one
(H200 profiles and placements from the real fixture; -lgi/-lci in the derived fixture's format).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.mig import MigLayoutError
from orchestrator.mig_apply import (
    Options,
    apply,
    cli,
    parse_query,
    read_state,
)
from orchestrator.mig_cli import main as command_main
from orchestrator.parsers.mig import parse_lgipp

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
LGIP = (REAL / "nvidia-smi-mig-lgip.txt").read_text().replace("# exit=0\n", "")
LGIPP = (REAL / "nvidia-smi-mig-lgipp.txt").read_text().replace("# exit=0\n", "")
PLACEMENTS = {(p.gpu, p.profile_id): p for p in parse_lgipp(LGIPP)}
NAMES = {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb",
         5: "4g.71gb", 0: "7g.141gb"}  # fmt: skip


@dataclass
class Gpu:
    mig: bool = False
    pending: bool = False
    reset_needed: bool = False  # A100: a mode change stays pending until a reset
    reset_fails: bool = False  # some VMs cannot reset a GPU
    gis: list[tuple[int, int, int]] = field(default_factory=list)  # (gi id, profile id, start)
    cis: set[int] = field(default_factory=set)  # gi ids with their default compute instance


@dataclass
class FakeHost:
    gpus: list[Gpu]
    active_units: set[str] = field(default_factory=set)
    containers: dict[str, str] = field(default_factory=dict)  # id -> inspect line
    calls: list[str] = field(default_factory=list)
    next_gi: int = 1

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        self.calls.append(" ".join(argv))
        if argv[0] == "systemctl":
            return self.systemctl(list(argv[1:]))
        if argv[0] == "docker":
            if argv[1] == "ps":
                return 0, "".join(f"{c}\n" for c in self.containers)
            return 0, "\n".join(self.containers.values())
        assert argv[0] == "nvidia-smi"
        args = list(argv[1:])
        index = None
        if "-i" in args:
            index = int(args[args.index("-i") + 1])
            del args[args.index("-i") : args.index("-i") + 2]
        return self.smi(args, index)

    def systemctl(self, args: list[str]) -> tuple[int, str]:
        unit = args[-1]
        if args[0] == "is-active":
            return (0 if unit in self.active_units else 3), ""
        if args[0] == "stop":
            self.active_units.discard(unit)
        elif args[0] == "start":
            self.active_units.add(unit)
        elif args[0] == "cat":
            return (0, "") if unit == "nvidia-cdi-refresh.service" else (1, "No files found")
        return 0, ""

    def smi(self, args: list[str], index: int | None) -> tuple[int, str]:
        if args[0].startswith("--query-gpu"):
            mode = {True: "Enabled", False: "Disabled"}
            return 0, "".join(
                f"{n}, NVIDIA H200, 0x233510DE, {mode[g.mig]}, {mode[g.pending]}\n"
                for n, g in enumerate(self.gpus)
            )
        if args[0] == "-mig":
            assert index is not None
            gpu = self.gpus[index]
            if gpu.gis:
                return 6, "Unable to disable MIG Mode: In use by another client"
            gpu.pending = args[1] == "1"
            if not gpu.reset_needed:
                gpu.mig = gpu.pending
            return 0, "Enabled MIG Mode" if gpu.pending else "Disabled MIG Mode"
        if args[0] == "-r":
            assert index is not None
            gpu = self.gpus[index]
            if gpu.reset_fails:
                return 3, "Unable to reset this GPU: not supported"
            gpu.mig = gpu.pending
            return 0, "GPU reset"
        assert args[0] == "mig"
        return self.mig(args[1:], index)

    def mig(self, args: list[str], index: int | None) -> tuple[int, str]:
        targets = [index] if index is not None else list(range(len(self.gpus)))
        if args[0] == "-lgip":
            return 0, LGIP
        if args[0] == "-lgipp":
            return 0, LGIPP
        if args[0] == "-lgi":
            rows = [
                f"|   {n}  MIG {NAMES[pid]:<13} {pid:>4} {gi:>8} {start:>10}:"
                f"{PLACEMENTS[(n, pid)].size}    |"
                for n in targets
                for gi, pid, start in self.gpus[n].gis
            ]
            return (0, "\n".join(rows)) if rows else (6, "No GPU instances found: Not Found")
        if args[0] == "-lci":
            rows = [
                f"|   {n}   {gi:>4}       MIG {NAMES[pid]:<13} 0         0          0:1   |"
                for n in targets
                for gi, pid, _ in self.gpus[n].gis
                if gi in self.gpus[n].cis
            ]
            return (0, "\n".join(rows)) if rows else (6, "No compute instances found: Not Found")
        gpu = self.gpus[targets[0]]
        if args[0] == "-dci":
            gpu.cis.clear()
            return 0, "Successfully destroyed compute instances"
        if args[0] == "-dgi":
            if gpu.cis:
                return 6, "Unable to destroy GPU instance: In use by another client"
            gpu.gis.clear()
            return 0, "Successfully destroyed GPU instances"
        assert args[0] == "-cgi" and gpu.mig
        used = {s for _, pid, st in gpu.gis for s in range(st, st + PLACEMENTS[(0, pid)].size)}
        for spec in args[1].split(","):
            pid, start = (int(x) for x in spec.split(":"))
            place = PLACEMENTS[(0, pid)]
            span = set(range(start, start + place.size))
            if start not in place.starts or span & used:
                return 2, f"Failed to create GPU instances: Insufficient Resources ({spec})"
            used |= span
            gpu.gis.append((self.next_gi, pid, start))
            if "-C" in args:
                gpu.cis.add(self.next_gi)
            self.next_gi += 1
        return 0, "Successfully created GPU instance"


LAYOUTS = {
    "mixed": [
        {
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2},
        }
    ],
    "small": [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 8}}],
}


def opts(layout: str, **kw: object) -> Options:
    return Options(layout, {"version": "v1", "mig-configs": LAYOUTS}, **kw)  # type: ignore[arg-type]


def counts(host: FakeHost, n: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, pid, _ in host.gpus[n].gis:
        out[NAMES[pid]] = out.get(NAMES[pid], 0) + 1
    return out


def test_query_rows_parse() -> None:
    (g,) = parse_query("0, NVIDIA H200, 0x233510DE, Disabled, Enabled\n")
    assert (g.index, g.device_id, g.mig_current, g.mig_pending) == (0, 0x2335, False, True)
    (l40s,) = parse_query("0, NVIDIA L40S, 0x26B910DE, [N/A], [N/A]\n")
    assert l40s.mig_current is None


def test_apply_converges_then_reports_no_change() -> None:
    host = FakeHost([Gpu(), Gpu()], active_units={"nvidia-dcgm.service"})
    o = opts("mixed", gpu_clients=("nvidia-dcgm.service", "nvsm.service"),
             cdi_refresh_unit="nvidia-cdi-refresh.service")  # fmt: skip
    first = apply(host, "node-1", o, dry_run=False)
    assert first.changed and not first.reboot_required
    for n in (0, 1):
        assert host.gpus[n].mig
        assert counts(host, n) == {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
        assert host.gpus[n].cis == {gi for gi, _, _ in host.gpus[n].gis}
    # clients stopped first and started again; CDI refreshed after
    calls = host.calls
    assert calls.index("systemctl stop nvidia-dcgm.service") < calls.index("nvidia-smi -i 0 -mig 1")
    assert "systemctl stop nvsm.service" not in calls  # it was not running
    assert calls.index("systemctl start nvidia-dcgm.service") > calls.index(
        next(c for c in calls if "-cgi" in c)
    )
    assert "systemctl restart nvidia-cdi-refresh.service" in calls
    assert host.active_units == {"nvidia-dcgm.service"}
    host.calls.clear()
    second = apply(host, "node-1", o, dry_run=False)
    assert not second.changed and second.actions == []
    assert not [c for c in host.calls if " -mig " in c or "-cgi" in c or "systemctl stop" in c]


def test_check_is_read_only_and_lists_the_actions() -> None:
    host = FakeHost([Gpu(), Gpu()])
    out = apply(host, "node-1", opts("small"), dry_run=True)
    assert out.changed
    assert out.actions == ["gpu 1: MIG mode on", "gpu 1: create 19:0,19:1,19:2,19:3,19:4,19:5,19:6 "
                           "with compute instances"]  # fmt: skip
    assert all(" -mig " not in c and "-cgi" not in c for c in host.calls)
    assert not host.gpus[1].mig


def test_a_changed_layout_converges_to_exactly_the_new_one() -> None:
    host = FakeHost([Gpu(), Gpu()])
    apply(host, "h", opts("mixed"), dry_run=False)
    out = apply(host, "h", opts("small"), dry_run=False)
    assert out.changed
    # GPU 0 is not named by "small": left as it is; GPU 1 rebuilt
    assert counts(host, 0) == {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
    assert counts(host, 1) == {"1g.18gb": 7}
    assert "nvidia-smi mig -i 1 -dci" in host.calls and "nvidia-smi mig -i 1 -dgi" in host.calls


def test_disabled_tears_mig_down() -> None:
    host = FakeHost([Gpu(), Gpu()])
    apply(host, "h", opts("mixed"), dry_run=False)
    out = apply(host, "h", opts("disabled"), dry_run=False)
    assert out.changed
    assert all(not g.mig and not g.gis for g in host.gpus)
    assert not apply(host, "h", opts("disabled"), dry_run=False).changed


def test_a_partial_compute_instance_is_drift() -> None:
    host = FakeHost([Gpu(), Gpu()])
    apply(host, "h", opts("small"), dry_run=False)
    host.gpus[1].cis.discard(host.gpus[1].gis[0][0])  # someone destroyed one CI
    out = apply(host, "h", opts("small"), dry_run=True)
    assert out.changed and "gpu 1: destroy 7 GPU instances" in out.actions


def test_pending_mode_is_made_current_by_a_reset() -> None:
    host = FakeHost([Gpu(reset_needed=True), Gpu(reset_needed=True)])
    out = apply(host, "h", opts("small"), dry_run=False)
    assert "nvidia-smi -i 1 -r" in out.actions and not out.reboot_required
    assert host.gpus[1].mig and counts(host, 1) == {"1g.18gb": 7}


def test_a_gpu_that_cannot_reset_asks_for_a_reboot() -> None:
    host = FakeHost([Gpu(), Gpu(reset_needed=True, reset_fails=True)])
    out = apply(host, "h", opts("small"), dry_run=False)
    assert out.reboot_required and out.changed
    assert host.gpus[1].pending and not host.gpus[1].mig and not host.gpus[1].gis


def test_invalid_layout_is_refused_before_any_change() -> None:
    host = FakeHost([Gpu(), Gpu()], active_units={"nvidia-dcgm.service"})
    with pytest.raises(MigLayoutError, match=r"8x 1g\.18gb asked, at most 7 fit") as info:
        apply(host, "node-1", opts("too-big", gpu_clients=("nvidia-dcgm.service",)),
              dry_run=False)  # fmt: skip
    assert info.value.exit_code == 2
    assert host.calls == [
        "nvidia-smi --query-gpu=index,name,pci.device_id,mig.mode.current,mig.mode.pending "
        "--format=csv,noheader",
        "nvidia-smi mig -lgip",
        "nvidia-smi mig -lgipp",
    ]


def test_running_gpu_containers_block_unless_allowed() -> None:
    line = 'abcdef123456 runc [{"Driver":"","Count":-1,"Capabilities":[["gpu"]]}]'
    host = FakeHost([Gpu(), Gpu()], containers={"abcdef123456": line})
    with pytest.raises(HostError, match=r"GPU containers are running \(abcdef123456\)"):
        apply(host, "h", opts("small"), dry_run=False)
    assert not host.gpus[1].mig
    out = apply(host, "h", opts("small", stop_gpu_containers=True), dry_run=False)
    assert out.changed
    assert host.calls.index("docker stop abcdef123456") < host.calls.index(
        "docker start abcdef123456"
    )


def test_create_argument_puts_big_instances_first_with_their_start() -> None:
    host = FakeHost([Gpu(), Gpu()])
    state = read_state(host, "h")
    assert state[0].mig_current is False
    out = apply(host, "h", opts("mixed"), dry_run=True)
    assert "gpu 0: create 9:4,14:0,19:2,19:3 with compute instances" in out.actions


def test_cli_reads_the_document_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"layout": "small", "config": {"version": "v1", "mig-configs": LAYOUTS}}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(doc)))
    host = FakeHost([Gpu(), Gpu()])
    done = cli(["--config", "-", "--host", "n1", "check"], run=host)
    assert done.code == 0 and not done.stderr
    printed = json.loads(done.stdout)
    assert printed["changed"] is True
    assert printed["gpus"] == [
        {"index": 1, "counts": {"1g.18gb": 7}, "create": "19:0,19:1,19:2,19:3,19:4,19:5,19:6"}
    ]
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**doc, "layout": "too-big"})))
    done = cli(["--config", "-", "--host", "n1", "check"], run=host)
    assert done.code == 2 and not done.stdout
    assert "n1: layout 'too-big' on GPU 0" in done.stderr


def test_cli_takes_a_plain_mig_parted_file_and_a_layout_name(tmp_path: Path) -> None:
    path = tmp_path / "layouts.json"
    path.write_text(json.dumps({"version": "v1", "mig-configs": LAYOUTS}))
    host = FakeHost([Gpu(), Gpu()])
    done = cli(["--config", str(path), "--layout", "mixed", "check"], run=host)
    assert done.code == 0
    printed = json.loads(done.stdout)
    assert [g["create"] for g in printed["gpus"]] == ["9:4,14:0,19:2,19:3"] * 2
    done = cli(["--config", str(tmp_path / "missing.json"), "check"], run=host)
    assert done.code == 2 and "cannot read" in done.stderr


def test_a_refused_mode_change_names_the_nvidia_drm_fix() -> None:
    host = FakeHost([Gpu(), Gpu()])
    real = host.smi

    def busy(args: list[str], index: int | None) -> tuple[int, str]:
        if args[0] == "-mig":
            return 6, "Unable to enable MIG Mode: In use by another client"
        return real(args, index)

    host.smi = busy  # type: ignore[method-assign]
    with pytest.raises(HostError) as info:
        apply(host, "node-3", opts("small"), dry_run=False)
    text = str(info.value)
    assert text.startswith("node-3: `nvidia-smi -i 1 -mig 1` failed (exit 6): Unable to enable")
    assert "modprobe -r nvidia_drm" in text


def test_cli_validates_a_group_vars_file_read_only() -> None:
    group_vars = Path(__file__).resolve().parents[2] / "inventory" / "group_vars" / "all.yml"
    host = FakeHost([Gpu(), Gpu()])
    argv = ["--config", str(group_vars), "--layout", "h200-mixed", "check"]
    done = cli(argv, run=host)
    assert done.code == 0
    printed = json.loads(done.stdout)
    assert [g["create"] for g in printed["gpus"]] == ["5:0,14:4,19:6"] * 2
    assert all(" -mig " not in c and "-cgi" not in c for c in host.calls)
    done = cli([*argv[:3], "h100-80gb-mixed", "check"], run=host)
    assert done.code == 2
    assert "profile 3g.40gb is not offered by this GPU" in done.stderr


def test_cli_hands_back_help_and_usage_errors_instead_of_printing_or_exiting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing in module_utils prints or exits (issue 50): argparse's help and errors come back
    as text and a status, which the command (orchestrator/mig_cli.py) prints."""
    helped = cli(["--help"])
    assert helped.code == 0 and helped.stdout.startswith("usage: gpuprov-mig") and not helped.stderr
    wrong = cli(["--config", "x", "dance"])
    assert wrong.code == 2 and not wrong.stdout
    assert "gpuprov-mig: error: argument command: invalid choice: 'dance'" in wrong.stderr
    assert capsys.readouterr() == ("", "")


def test_the_command_prints_what_cli_hands_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr("sys.argv", ["gpuprov-mig", "--config", str(tmp_path / "none"), "check"])
    assert command_main() == 2
    assert "gpuprov-mig: error: cannot read" in capsys.readouterr().err
