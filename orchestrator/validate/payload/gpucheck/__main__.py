"""`python3 -m gpucheck` (the zipapp runs entry.main too)."""

import sys

from .entry import main

if __name__ == "__main__":
    sys.exit(main())
