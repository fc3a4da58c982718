"""NumPy emulation of the Hopper data movement and products, from what the hardware reads: TMA box loads
(swizzled placement, out-of-bounds zero fill) into a shared-memory byte image, TMA box reduce-adds out
of it (out-of-bounds elements dropped), and wgmma operands read back through their 64-bit
descriptors (address, LBO, SBO, swizzle mode) in either major order.

These are the semantics the interpreter's handlers for nvgpu.tma.async.load,
nvvm.cp.async.bulk.tensor.reduce and nvvm.wgmma.mma_async (ops_hopper.py) apply;
a wrong swizzle mode, LBO or SBO in a descriptor reads a different matrix here, as on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...wgmma_layouts import CHUNK, decode_descriptor, swizzle


@dataclass(frozen=True)
class TensorMap:
    """A tensor-map kernel argument as the interpreter holds it: the tensor (a NumPy view in storage
    dtype, its buffer's strides), the box (outermost first) and the swizzle in bytes."""

    tensor: np.ndarray
    box: tuple[int, ...]
    swizzle: int
    dtype: str


def tma_box(shared: np.ndarray, byte_offset: int, tensor: np.ndarray, row: int, col: int, rows: int, inner: int,
            swizzle_bytes: int) -> None:
    """Load the box rows x inner of 2-D `tensor` at (row, col) into `shared` (uint8, its index 0 aligned
    to 1024) at `byte_offset`; elements outside the tensor are zero."""
    place_box(shared, byte_offset, box_of(tensor, (row, col), (rows, inner)), swizzle_bytes)


def box_of(tensor: np.ndarray, start, box) -> np.ndarray:
    """The box of `box` elements of `tensor` from index `start` (outermost first), zero outside it."""
    out = np.zeros(box, tensor.dtype)
    src, dst = [], []
    for first, n, size in zip(start, box, tensor.shape):
        lo, hi = max(first, 0), min(first + n, size)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - first, hi - first))
    out[tuple(dst)] = tensor[tuple(src)]
    return out


def box_offsets(byte_offset: int, shape, element_bytes: int, swizzle_bytes: int) -> np.ndarray:
    """The physical byte offset of each element of a box of `shape` (elements row-major, rows of its
    innermost dimension) placed at `byte_offset` as TMA lays it out in shared memory."""
    inner = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    r, c = np.meshgrid(np.arange(rows), np.arange(inner), indexing="ij")
    return swizzle(byte_offset + (r * inner + c) * element_bytes, swizzle_bytes).reshape(shape)


def place_box(shared: np.ndarray, byte_offset: int, box: np.ndarray, swizzle_bytes: int) -> np.ndarray:
    """Write `box` (its elements row-major, rows of its innermost dimension) into `shared` at
    `byte_offset`, swizzled as TMA does; returns the physical byte offsets written."""
    eb = box.itemsize
    inner = box.shape[-1]
    flat = np.ascontiguousarray(box).reshape(-1, inner)
    physical = box_offsets(byte_offset, flat.shape, eb, swizzle_bytes)
    shared[physical[..., None] + np.arange(eb)] = flat.view(np.uint8).reshape(*flat.shape, eb)
    return physical


def take_box(shared: np.ndarray, byte_offset: int, shape, dtype, swizzle_bytes: int) -> np.ndarray:
    """The box of `shape` that place_box would have placed at `byte_offset` (what a TMA store or
    reduce reads from shared memory)."""
    eb = np.dtype(dtype).itemsize
    physical = box_offsets(byte_offset, shape, eb, swizzle_bytes)
    return np.ascontiguousarray(shared[physical[..., None] + np.arange(eb)]).view(dtype).reshape(shape)


def add_box(tensor: np.ndarray, start, values: np.ndarray) -> tuple | None:
    """tensor[box from `start`] += values, dropping the elements outside the tensor (a TMA reduce-add); the
    tensor's slices it added into (None: none)."""
    inside = _inside(tensor, start, values.shape)
    if inside is not None:
        tensor[inside[0]] += values[inside[1]]
    return inside and inside[0]


def store_box(tensor: np.ndarray, start, values: np.ndarray) -> tuple | None:
    """tensor[box from `start`] = values, dropping the elements outside the tensor (a TMA store); the
    tensor's slices it stored into (None: none)."""
    inside = _inside(tensor, start, values.shape)
    if inside is not None:
        tensor[inside[0]] = values[inside[1]]
    return inside and inside[0]


def _inside(tensor: np.ndarray, start, shape):
    """(tensor's slices, the box's slices) of the part of a box at `start` inside the tensor; None if none."""
    src, dst = [], []
    for first, n, size in zip(start, shape, tensor.shape):
        lo, hi = max(first, 0), min(first + n, size)
        if hi <= lo:
            return None
        dst.append(slice(lo, hi))
        src.append(slice(lo - first, hi - first))
    return tuple(dst), tuple(src)


def operand_offsets(descriptor: int, mn: int, major: str, element_bytes: int) -> np.ndarray:
    """[mn, 16] physical byte offsets of the k16 operand slice a descriptor describes (canonical layouts)."""
    d = decode_descriptor(descriptor)
    lbo, sbo, s, eb = d["leading_byte_offset"], d["stride_byte_offset"], d["swizzle"], element_bytes
    i, k = np.meshgrid(np.arange(mn), np.arange(16), indexing="ij")
    if major == "K":
        if s == 0:
            logical = (i // 8) * sbo + (k // 8) * lbo + (i % 8) * CHUNK + (k % 8) * eb
        else:
            logical = (i // 8) * sbo + (i % 8) * s + k * eb
    elif s == 0:
        logical = (i // 8) * sbo + (k // 8) * lbo + (k % 8) * CHUNK + (i % 8) * eb
    else:
        atom = s // eb
        logical = (i // atom) * lbo + (i % atom) * eb + (k // 8) * sbo + (k % 8) * s
    return swizzle(d["address"] + logical, s)


def read_operand(shared: np.ndarray, descriptor: int, mn: int, major: str, dtype) -> np.ndarray:
    """The [mn, 16] matrix (rows M of A or N of B, columns K) a descriptor points wgmma at."""
    eb = np.dtype(dtype).itemsize
    offsets = operand_offsets(descriptor, mn, major, eb)
    raw = np.stack([shared[offsets + b] for b in range(eb)], axis=-1)
    return raw.reshape(-1).view(dtype).reshape(mn, 16)


def wgmma(shared: np.ndarray, acc: np.ndarray, a, b_descriptor: int, n: int, b_major: str, dtype, first: bool,
          a_major: str = "K", decode=lambda x: x.astype(np.float32)) -> np.ndarray:
    """One m64nNk16: acc [64, n] f32 = A B (+ acc unless `first`). `a` is a descriptor (SS) or the
    [64, 16] register operand (RS); `decode` turns stored elements into float32 (bf16 bits, say)."""
    a_matrix = a if isinstance(a, np.ndarray) else decode(read_operand(shared, a, 64, a_major, dtype))
    b_matrix = decode(read_operand(shared, b_descriptor, n, b_major, dtype))
    product = a_matrix.astype(np.float32) @ b_matrix.astype(np.float32).T
    return product if first else acc + product
