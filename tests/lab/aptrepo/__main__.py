"""CLI: `PYTHONPATH=tests/lab python -m aptrepo build|serve|stop|record-debian [options]`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aptrepo import debianrecord
from aptrepo.build import build_repo, verify_repo
from aptrepo.policy import lab_policy
from aptrepo.serve import ensure_served, stop


def main() -> int:
    parser = argparse.ArgumentParser(prog="aptrepo", description=__doc__)
    parser.add_argument("action", choices=["build", "serve", "stop", "record-debian"])
    parser.add_argument("--state-dir", type=Path, default=Path(".lab/.aptrepo"))
    parser.add_argument("--network", default="bridge", help="Docker network to serve on")
    parser.add_argument("--mirror", default=debianrecord.MIRROR, help="for record-debian")
    args = parser.parse_args()
    if args.action == "build":
        built = build_repo(args.state_dir)
        verify_repo(built)
        print(f"built {built.root} (key {built.fingerprint}), signatures verified")
    elif args.action == "serve":
        served = ensure_served(args.state_dir, network=args.network)
        print(json.dumps(lab_policy(served), indent=2))
    elif args.action == "record-debian":
        names = debianrecord.record(args.mirror)
        print(f"recorded {len(names)} packages into {debianrecord.RECORDED}: {' '.join(names)}")
    else:
        print("stopped" if stop(args.state_dir, args.network) else "no server was running")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
