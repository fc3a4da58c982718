"""The one exception type of the CPU interpreter."""
from __future__ import annotations

from ...errors import FmhaError


class InterpreterError(FmhaError):
    """The interpreter cannot parse or run a kernel, or the kernel misbehaved (e.g. out-of-bounds access).

    Messages name the op and its location (the line in the interpreter's IR text and, when the text
    carries debug info, the MLIR source location).
    """
