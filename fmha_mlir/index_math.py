"""min, max, select and ceiling division over any number-like value: Python ints and bools (folded at
once), NumPy arrays (elementwise) and symbolic values that build their own operations (passes.ix.Ix,
index arithmetic in IR). Floor division and comparisons are the operators themselves (`//`, `<`, ...),
which mean the same on all three; these four have no operator."""
from __future__ import annotations

import numpy as np


def _symbolic(*values):
    """The first value that builds its own operations (it has `ix_ops`), or None."""
    return next((v for v in values if hasattr(v, "ix_ops")), None)


def _array(*values) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def minimum(a, b):
    symbolic = _symbolic(a, b)
    if symbolic is not None:
        return symbolic.ix_ops.minimum(a, b)
    return np.minimum(a, b) if _array(a, b) else min(a, b)


def maximum(a, b):
    symbolic = _symbolic(a, b)
    if symbolic is not None:
        return symbolic.ix_ops.maximum(a, b)
    return np.maximum(a, b) if _array(a, b) else max(a, b)


def ceildiv(a, b):
    """The smallest integer >= a / b (b > 0), for any sign of a."""
    symbolic = _symbolic(a, b)
    if symbolic is not None:
        return symbolic.ix_ops.ceildiv(a, b)
    return -np.floor_divide(-a, b) if _array(a, b) else -(-a // b)


def select(condition, if_true, if_false):
    """if_true where condition holds, else if_false (a Python bool condition picks one side unbuilt)."""
    if isinstance(condition, (bool, np.bool_)):
        return if_true if condition else if_false
    symbolic = _symbolic(condition, if_true, if_false)
    if symbolic is not None:
        return symbolic.ix_ops.select(condition, if_true, if_false)
    return np.where(condition, if_true, if_false)
