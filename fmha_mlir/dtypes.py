"""Element types as NumPy sees them. NumPy has no bfloat16: bf16 data is stored as uint16 bit patterns.

One home for the conversions so the oracle, the runtime and the CPU interpreter round identically
(round-to-nearest-even, as the hardware converts).
"""
from __future__ import annotations

import numpy as np

STORAGE = {"f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16), "f32": np.dtype(np.float32)}
BYTES = {"f16": 2, "bf16": 2, "f32": 4}
# Buffers that are not problem values: varlen's cu_seqlens.
INDEX_STORAGE = {"i32": np.dtype(np.int32)}
BUFFER_STORAGE = {**STORAGE, **INDEX_STORAGE}


def bf16_bits(x) -> np.ndarray:
    """float values -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint32(0x7FC0), rounded).astype(np.uint16)


def bf16_value(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_storage(x, dtype: str) -> np.ndarray:
    """Values -> the array a kernel reads for element type `dtype`."""
    if dtype == "bf16":
        return bf16_bits(x)
    return np.asarray(x).astype(STORAGE[dtype])


def from_storage(a, dtype: str) -> np.ndarray:
    """An array in `dtype`'s storage -> float32 values."""
    if dtype == "bf16":
        return bf16_value(a)
    return np.asarray(a).astype(np.float32)


def round_to(x, dtype: str) -> np.ndarray:
    """Values rounded to what `dtype` can hold, returned as float64."""
    return from_storage(to_storage(x, dtype), dtype).astype(np.float64)
