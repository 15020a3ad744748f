#!/usr/bin/python3
# gpusim (lab test code): dmesg, the full path (bin/dmesg runs it to clear the log, or
# before the first rendered kernel.log). See README.md.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
# /opt/gpusim is read-only on lab hosts: their bytecode goes to a cache of their own (saves
# compiling the package on every call, about 15 ms); elsewhere nothing is written.
if os.path.exists("/etc/gpusim/profile.yaml"):
    sys.pycache_prefix = "/var/cache/gpusim/pycache"
else:
    sys.dont_write_bytecode = True
from gpusim import tools

sys.exit(tools.dmesg(sys.argv[1:]))
