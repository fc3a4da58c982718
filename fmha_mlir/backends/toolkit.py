"""The ld.lld that ROCDL's serializer links hsaco with.

gpu-module-to-binary looks for `<toolkit>/llvm/bin/ld.lld`. ziglang ships LLD as a Python module, so
the toolkit is a folder holding a two-line shell script that runs it with this interpreter.
"""
from __future__ import annotations

import atexit
import functools
import shutil
import stat
import sys
import tempfile
from pathlib import Path


@functools.cache
def lld_toolkit() -> Path:
    """The toolkit folder, made once per process in a temporary directory removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="fmha-lld-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    lld = root / "llvm" / "bin" / "ld.lld"
    lld.parent.mkdir(parents=True)
    lld.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang ld.lld "$@"\n')
    lld.chmod(lld.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root
