"""Memrefs as descriptors over flat NumPy storage, with bounds-checked per-lane access.

A memref is MLIR's descriptor: 1-D storage, an offset, sizes and strides (in elements). The offset may
differ per lane (workgroup memory: one slice per work-group; private allocas: one per lane), so one
descriptor serves all lanes. Caller arrays are wrapped without copying: the storage is a 1-D view of
the array's memory, so stores land in the caller's array whatever its strides. Workgroup memory
(workgroup.py) also carries its buffer, whose race detector sees every access.

Every access is checked, per dimension and against the storage, for the lanes that execute it; an
out-of-bounds access raises an InterpreterError naming the op, the lane, the index and the shape.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...dtypes import bf16_bits, bf16_value
from .errors import InterpreterError
from .lanes import LaneGrid
from .types import MemRefType, ScalarType


@dataclass(frozen=True)
class MemRef:
    storage: np.ndarray                      # 1-D, storage dtype of `elem`
    offset: object                           # int64 scalar or [L]
    sizes: tuple                             # int64 scalars (or [L])
    strides: tuple
    elem: ScalarType
    shared: object = None                    # the WorkgroupBuffer of workgroup memory, else None

    def with_layout(self, offset, sizes, strides) -> "MemRef":
        return MemRef(self.storage, offset, tuple(sizes), tuple(strides), self.elem, self.shared)


def wrap_array(array, t: MemRefType, what: str) -> MemRef:
    """A caller's NumPy array as a memref of type `t`, sharing its memory; checks dtype/shape/strides."""
    if not isinstance(array, np.ndarray):
        raise InterpreterError(f"{what}: expected a NumPy array for {t}, got {type(array).__name__}")
    want = t.elem.storage_dtype
    if array.dtype != want:
        hint = " (bf16 data is passed as uint16 bit patterns)" if t.elem.name == "bf16" else ""
        raise InterpreterError(f"{what}: array dtype {array.dtype} does not match {t}: expected {want}{hint}")
    if array.ndim != t.rank:
        raise InterpreterError(f"{what}: array of rank {array.ndim} for {t} (rank {t.rank})")
    item = array.itemsize
    if any(s % item for s in array.strides):
        raise InterpreterError(f"{what}: array strides {array.strides} are not multiples of the element size")
    strides = tuple(s // item for s in array.strides)
    for d, (n, want_n) in enumerate(zip(array.shape, t.shape)):
        if want_n is not None and n != want_n:
            raise InterpreterError(f"{what}: dimension {d} has size {n}, {t} requires {want_n}")
    expected = t.strides if t.strides is not None else row_major(array.shape)
    for d, (s, want_s) in enumerate(zip(strides, expected)):
        if want_s is not None and s != want_s and array.shape[d] > 1:
            raise InterpreterError(f"{what}: dimension {d} has stride {s} (elements), {t} requires {want_s}; "
                                   "pass an array with that layout (e.g. np.ascontiguousarray)")
    if array.size == 0:
        storage, offset = np.empty(0, dtype=array.dtype), 0
    else:
        low = sum(s * (n - 1) for s, n in zip(strides, array.shape) if s < 0)
        high = sum(s * (n - 1) for s, n in zip(strides, array.shape) if s > 0)
        first = array[tuple(slice(n - 1, n) if s < 0 else slice(0, 1) for s, n in zip(strides, array.shape))]
        storage = as_strided(first, shape=(high - low + 1,), strides=(item,), writeable=array.flags.writeable)
        offset = -low
    return MemRef(storage, np.int64(offset), tuple(np.int64(n) for n in array.shape),
                  tuple(np.int64(s) for s in strides), t.elem)


def row_major(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def allocate(t: MemRefType, copies: int, copy_of_lane, what: str) -> MemRef:
    """Fresh storage for `copies` instances of static type `t`; lane l uses instance copy_of_lane[l].

    Floats start as NaN (ints as 0): real GPU memory starts undefined, NaN makes reads of unwritten
    elements visible in the results.
    """
    if any(n is None for n in t.shape):
        raise InterpreterError(f"{what}: {t} needs a static shape to be allocated")
    n = int(np.prod(t.shape, dtype=np.int64))
    fill = np.nan if t.elem.is_float else 0
    storage = np.full(copies * n, fill, dtype=t.elem.dtype)
    if t.elem.name == "bf16":
        storage = bf16_bits(storage)
    strides = t.strides if t.strides is not None else row_major(t.shape)
    if any(s is None for s in strides):
        raise InterpreterError(f"{what}: {t} needs static strides to be allocated")
    return MemRef(storage, np.asarray(copy_of_lane, dtype=np.int64) * n, tuple(np.int64(d) for d in t.shape),
                  tuple(np.int64(s) for s in strides), t.elem)


def to_values(raw: np.ndarray, elem: ScalarType):
    return bf16_value(raw) if elem.name == "bf16" else raw


def to_storage(values, elem: ScalarType):
    if elem.name == "bf16":
        return bf16_bits(values)
    return np.asarray(values).astype(elem.storage_dtype, copy=False)


def flat_index(mem: MemRef, indices, mask, grid: LaneGrid, what: str, extent=1):
    """The storage index of each lane's element (or first of `extent` along the last dim); bounds-checked.

    `extent` is an int or, for accesses whose length differs per lane, an [L] array (>= 1 where `mask`).
    """
    if len(indices) != len(mem.sizes):
        raise InterpreterError(f"{what}: {len(indices)} indices for a memref of rank {len(mem.sizes)}")
    flat = mem.offset
    for ix, st in zip(indices, mem.strides):
        flat = flat + ix * st
    last_span = (extent - 1) * mem.strides[-1] if mem.strides else 0
    if not _surely_in_bounds(mem, indices, flat, last_span, extent):
        _raise_out_of_bounds(mem, indices, flat, last_span, extent, mask, grid, what)
    return flat


def _surely_in_bounds(mem, indices, flat, last_span, extent) -> bool:
    """A fast check on the extremes of the indices of every lane (whether it executes or not); False
    means: look lane by lane, at the lanes that execute."""
    if isinstance(extent, np.ndarray):
        return False
    rank = len(indices)
    for d, (ix, n) in enumerate(zip(indices, mem.sizes)):
        hi = extent - 1 if d == rank - 1 else 0
        if isinstance(n, np.ndarray):
            return False
        if isinstance(ix, np.ndarray):
            if ix.min() < 0 or ix.max() + hi >= n:
                return False
        elif ix < 0 or ix + hi >= n:
            return False
    low, high = (flat.min(), flat.max()) if isinstance(flat, np.ndarray) else (flat, flat)
    return bool(low + min(last_span, 0) >= 0 and high + max(last_span, 0) < mem.storage.size)


def _raise_out_of_bounds(mem, indices, flat, last_span, extent, mask, grid: LaneGrid, what):
    lanes = grid.lanes
    bad = np.zeros(lanes, dtype=bool)
    rank = len(indices)
    for d, (ix, n) in enumerate(zip(indices, mem.sizes)):
        hi = extent - 1 if d == rank - 1 else 0
        bad |= np.broadcast_to((ix < 0) | (ix + hi >= n), (lanes,))
    bad |= np.broadcast_to((flat + np.minimum(last_span, 0) < 0)
                           | (flat + np.maximum(last_span, 0) >= mem.storage.size), (lanes,))
    if mask is not None:
        bad &= mask
    if not bad.any():
        return
    lane = int(np.argmax(bad))
    index = element_index(indices, lane, 0, lanes)
    shape = tuple(int(np.broadcast_to(n, (lanes,))[lane]) for n in mem.sizes)
    extent = int(np.broadcast_to(extent, (lanes,))[lane])
    span = f" (a vector of {extent} elements)" if extent > 1 else ""
    raise InterpreterError(f"{what}: {grid.describe(lane)} accesses index {index}{span}, out of bounds for "
                           f"a memref of shape {shape}")


def element_index(indices, lane: int, position: int, lanes: int) -> tuple:
    """The index tuple of element `position` (along the last dim) of `lane`'s access, for messages."""
    index = [int(np.broadcast_to(ix, (lanes,))[lane]) for ix in indices]
    if index:
        index[-1] += int(position)
    return tuple(index)


def _watch(mem: MemRef, kind: str, flat, indices, mask, grid: LaneGrid, what: str, extent: int) -> None:
    """Show a workgroup memory access to its race detector (flat: [L] or [L, extent] storage indices)."""
    mem.shared.access(kind, flat, mask, max(extent, 1), mem.storage.itemsize, what,
                      lambda lane, position: element_index(indices, lane, position, grid.lanes))


def element_indices(mem: MemRef, indices, mask, grid: LaneGrid, what: str, extent: int = 0) -> np.ndarray:
    """The storage index of each lane's element ([L]), or of its `extent` > 0 elements along the last dim
    ([L, extent]); bounds-checked."""
    flat = flat_index(mem, indices, mask, grid, what, max(extent, 1))
    if extent:
        flat = np.expand_dims(flat, -1) + np.arange(extent, dtype=np.int64) * mem.strides[-1]
    return flat


def load(mem: MemRef, indices, mask, grid: LaneGrid, what: str, extent: int = 0, flat: np.ndarray | None = None):
    """Per-lane element values; `extent` > 0 loads a vector of that many elements along the last dim
    (`flat`: their element_indices, where the caller has them)."""
    if flat is None:
        flat = element_indices(mem, indices, mask, grid, what, extent)
    if mem.shared is not None:
        _watch(mem, "read", flat, indices, mask, grid, what, extent)
    if not mem.storage.size:  # no lane executes (it would be out of bounds): nothing is observed
        return np.zeros(np.shape(flat), mem.elem.dtype)
    # only the executing lanes' indices are checked: the others read a clipped index, never used
    return to_values(mem.storage.take(flat, mode="clip"), mem.elem)


def store(mem: MemRef, indices, values, mask, grid: LaneGrid, what: str, extent: int = 0) -> None:
    """Store each executing lane's value (lane order decides between lanes writing the same element)."""
    flat = flat_index(mem, indices, mask, grid, what, max(extent, 1))
    if extent:
        flat = np.expand_dims(flat, -1) + np.arange(extent, dtype=np.int64) * mem.strides[-1]
    if mem.shared is not None:
        _watch(mem, "write", flat, indices, mask, grid, what, extent)
    raw = to_storage(values, mem.elem)
    if mask is None and np.ndim(flat) == np.ndim(raw) == (1 if extent else 0):
        mem.storage[flat] = raw  # one element (or vector) shared by all lanes
        return
    shape = (grid.lanes, extent) if extent else (grid.lanes,)
    flat = np.broadcast_to(flat, shape)
    raw = np.broadcast_to(raw, shape)
    if mask is not None:
        flat, raw = flat[mask], raw[mask]
    mem.storage[flat.reshape(-1)] = raw.reshape(-1)


# Atomic kinds as NumPy ufuncs (applied with ufunc.at, one lane after the other); None: a general path.
ATOMIC_UFUNCS = {"addf": np.add, "addi": np.add, "mulf": np.multiply, "muli": np.multiply,
                 "maximumf": np.maximum, "minimumf": np.minimum, "maxnumf": np.fmax, "minnumf": np.fmin,
                 "maxs": np.maximum, "mins": np.minimum, "andi": np.bitwise_and, "ori": np.bitwise_or,
                 "xori": np.bitwise_xor, "maxu": None, "minu": None, "assign": None}


def atomic(mem: MemRef, indices, values, kind: str, mask, grid: LaneGrid, order: np.ndarray | None,
           want_old: bool, what: str):
    """Apply an atomic read-modify-write for each executing lane, in `order` (lane indices).

    Returns each lane's old value when `want_old`. With `order` None lanes go in lane order.
    """
    flat = np.broadcast_to(flat_index(mem, indices, mask, grid, what), (grid.lanes,))
    if mem.shared is not None:
        _watch(mem, "atomic", flat, indices, mask, grid, what, 0)
    vals = np.broadcast_to(values, (grid.lanes,))
    active = np.arange(grid.lanes) if mask is None else np.flatnonzero(mask)
    if order is not None:
        active = order[mask[order]] if mask is not None else order
    ufunc = ATOMIC_UFUNCS[kind]
    native = mem.elem.name != "bf16" and ufunc is not None
    if native and not want_old:
        ufunc.at(mem.storage, flat[active], vals[active].astype(mem.storage.dtype, copy=False))
        return None
    return _atomic_rounds(mem, flat[active], vals[active], active, kind, grid.lanes)


def _atomic_rounds(mem: MemRef, flat, vals, lanes_in_order, kind, lanes):
    """Exact sequential semantics, vectorised over distinct addresses: each round applies, for every
    address, the earliest not-yet-applied lane; rounds = the largest number of lanes on one address."""
    old_all = np.zeros(lanes, dtype=mem.elem.dtype)
    remaining = np.arange(flat.size)
    while remaining.size:
        _, first = np.unique(flat[remaining], return_index=True)
        pick = remaining[first]
        addr = flat[pick]
        old = to_values(mem.storage[addr], mem.elem)
        new = _combine(kind, old, vals[pick], mem.elem)
        mem.storage[addr] = to_storage(new, mem.elem)
        old_all[lanes_in_order[pick]] = old
        remaining = np.delete(remaining, first)
    return old_all


def _combine(kind: str, old, val, elem: ScalarType):
    if kind == "assign":
        return val
    if kind in ("maxu", "minu"):
        u = elem.unsigned_dtype
        pick = np.maximum if kind == "maxu" else np.minimum
        return pick(old.astype(u), val.astype(u)).astype(elem.dtype)
    result = ATOMIC_UFUNCS[kind](old, val)
    return bf16_value(bf16_bits(result)) if elem.name == "bf16" else result
