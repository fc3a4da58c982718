"""Per-lane values: NumPy arrays shaped [lanes, *vector_shape], or *uniform* (no lane axis).

A value that every lane shares (constants, loop counters of uniform loops, block sizes) keeps no lane
axis, so scalar index arithmetic costs nothing; NumPy broadcasting mixes both kinds. Whether a value
has a lane axis follows from its ndim and its type's vector rank. Values are never mutated in place.
"""
from __future__ import annotations

import numpy as np

from ...dtypes import bf16_bits, bf16_value
from .types import VectorType, element_type


def has_lanes(x, vrank: int) -> bool:
    return np.ndim(x) > vrank


def to_lanes(x, lanes: int, vrank: int) -> np.ndarray:
    """`x` with a lane axis (a read-only broadcast view when `x` is uniform)."""
    x = np.asarray(x)
    if x.ndim > vrank:
        return x
    return np.broadcast_to(x, (lanes,) + x.shape)


def lane_mask_for(cond, vrank: int):
    """A per-lane [L] condition reshaped to broadcast against values of vector rank `vrank`."""
    if vrank and np.ndim(cond) == 1:
        return np.reshape(cond, (-1,) + (1,) * vrank)
    return cond


def lane_select(cond, a, b, vrank: int):
    """Per lane: a where cond else b (cond is [L] or uniform; a/b of vector rank `vrank`)."""
    if a is b:
        return a
    return np.where(lane_mask_for(cond, vrank), a, b)


def merge(mask, new, old, vrank: int):
    """Where `mask` (None = every lane) take `new`, elsewhere keep `old` (None = nothing yet)."""
    if mask is None or old is None:
        return new
    return lane_select(mask, new, old, vrank)


def round_bf16(x):
    return bf16_value(bf16_bits(x)).reshape(np.shape(x))


def finisher(t):
    """A function that brings a computed float result to type `t`: bf16 rounds, others cast."""
    elem = element_type(t)
    if elem.name == "bf16":
        return round_bf16
    dtype = elem.dtype
    if elem.is_float:
        return lambda x: x.astype(dtype, copy=False) if isinstance(x, np.ndarray) else dtype.type(x)
    return lambda x: np.asarray(x).astype(dtype, copy=False)


def zeros_of(t):
    """A uniform zero value of type t."""
    shape = t.shape if isinstance(t, VectorType) else ()
    return np.zeros(shape, dtype=element_type(t).dtype)


def as_type(x, t):
    """A NumPy value in the value dtype of `t` (bf16 rounds)."""
    elem = element_type(t)
    if elem.name == "bf16":
        return round_bf16(np.asarray(x, dtype=np.float32))
    return np.asarray(x).astype(elem.dtype, copy=False)

