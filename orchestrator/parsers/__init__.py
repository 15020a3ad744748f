"""Pure parsers: one module per tool output, each a function from raw text to typed data.

`parse_host(host, raw)` builds HostFacts from a host's raw outputs (file name -> text, see
`names`). The per-tool parsers (MIG listings, NVLink, nvidia-smi -q, topology, nccl-tests)
are public for the validation and MIG code that needs more than HostFacts carries.
"""

from __future__ import annotations

from ._text import Output, ParseError, split_exit
from .host import parse_host

__all__ = ["Output", "ParseError", "parse_host", "split_exit"]
