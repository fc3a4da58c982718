"""Tensors that already live in GPU memory (a torch CUDA tensor, say), used by the runner in place.

Shape, byte strides and a NumPy storage dtype, like an ndarray, so the runner's checks read both the
same way; bf16 is uint16 as everywhere in the runtime.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class DeviceArray:
    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]       # bytes
    dtype: np.dtype
    owner: object = None           # keeps the memory's owner alive while the array is used

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def span_bytes(self) -> int:
        """Bytes from element 0 to one past the last element."""
        return self.itemsize * (1 + sum((n - 1) * s // self.itemsize for n, s in zip(self.shape, self.strides)))

    @property
    def dense(self) -> bool:
        """Every byte of the span belongs to an element (nothing else lives between them)."""
        return self.span_bytes == self.itemsize * int(np.prod(self.shape))
