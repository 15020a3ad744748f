"""secureboot.txt -> Secure Boot on/off, or None when unknown (legacy BIOS, no EFI vars).

The probe writes `mokutil --sb-state` ("SecureBoot enabled"/"SecureBoot disabled"), or, without
mokutil, `efivar SecureBoot=N` read from /sys/firmware/efi/efivars.
"""

from __future__ import annotations

import re

from ._text import split_exit

_EFIVAR = re.compile(r"^efivar SecureBoot=(?P<v>\d+)\s*$", re.MULTILINE)


def parse_secure_boot(text: str) -> bool | None:
    body = split_exit(text).body
    if "SecureBoot enabled" in body:
        return True
    if "SecureBoot disabled" in body:
        return False
    if m := _EFIVAR.search(body):
        return m["v"] != "0"
    return None
