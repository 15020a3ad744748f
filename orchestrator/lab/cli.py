"""`provision lab up|status|down|images`: wires options to the lab's functions."""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import EXIT_OK, BadInputError
from . import engine, hosts, images


def run(args: argparse.Namespace) -> int:
    command: str = args.lab_command
    if command == "images":
        return _images(args)
    lab = hosts.lab_name(getattr(args, "name", None))
    if command == "up":
        start = time.monotonic()
        mounts: tuple[tuple[Path, str], ...] = ()
        if getattr(args, "with_torch", False):
            from . import torchdir

            if args.lab_os != "debian12":
                raise BadInputError(
                    f"--with-torch mounts a CPU PyTorch for Python {torchdir.PYTHON}; "
                    f"{args.lab_os}'s python3 is another version",
                    fix="use --os debian12 with --with-torch",
                )
            mounts = (torchdir.mount(torchdir.ensure(say=print)),)
        inventory = hosts.up(lab, args.profile, args.count, args.lab_os, mounts=mounts)
        print(hosts.render_status(lab, hosts.status(lab)), end="")
        print(f"lab {lab}: up in {time.monotonic() - start:.1f} s; inventory: {inventory}")
        print(f"next: provision --inventory {inventory}")
    elif command == "status":
        engine.require_engine()
        print(hosts.render_status(lab, hosts.status(lab)), end="")
    elif command == "down":
        engine.require_engine()
        removed = hosts.down(lab)
        print(
            f"lab {lab}: removed {len(removed.containers)} container(s), "
            f"{len(removed.volumes)} volume(s), {len(removed.networks)} network(s)"
        )
    return EXIT_OK


def _images(args: argparse.Namespace) -> int:
    """Build the images the recipes name (in parallel), then drop outdated ones."""
    engine.require_engine()
    recipes = images.load_recipes()
    wanted = [args.lab_os] if getattr(args, "lab_os", None) else sorted(recipes)
    cache = hosts.STATE_ROOT / ".cache" / "lab"
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        tags = list(pool.map(lambda os_name: images.ensure(recipes[os_name], cache), wanted))
    for tag in tags:
        print(f"lab image ready: {tag}")
    for tag in images.stale(recipes):
        removed = engine.docker(["rmi", tag], check=False)
        print(f"lab image {'removed' if removed else 'kept (in use)'}: {tag}")
    return EXIT_OK
