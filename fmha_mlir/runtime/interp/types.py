"""MLIR types as the interpreter needs them: scalars, vectors, memrefs; everything else is opaque."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InterpreterError


@dataclass(frozen=True)
class ScalarType:
    """index, iN or a float type. `name` is MLIR's spelling (index, i1, i32, bf16, f32, ...)."""

    name: str

    @property
    def is_float(self) -> bool:
        return self.name in FLOAT_VALUE_DTYPES

    @property
    def bits(self) -> int:
        if self.name == "index":
            return 64
        return int(self.name.lstrip("bfi") or 0) if not self.is_float else FLOAT_BITS[self.name]

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of this type's *values* (bf16 values are float32 holding bf16-exact numbers)."""
        if self.is_float:
            return FLOAT_VALUE_DTYPES[self.name]
        return INT_DTYPES[self.bits]

    @property
    def unsigned_dtype(self) -> np.dtype:
        return np.dtype(bool) if self.bits == 1 else np.dtype(f"uint{self.bits}")

    @property
    def storage_dtype(self) -> np.dtype:
        """The NumPy dtype of this type's elements in memory (bf16: uint16 bit patterns)."""
        return np.dtype(np.uint16) if self.name == "bf16" else self.dtype

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class VectorType:
    shape: tuple[int, ...]
    elem: ScalarType

    def __str__(self) -> str:
        return f"vector<{'x'.join(map(str, self.shape))}x{self.elem}>"


@dataclass(frozen=True)
class MemRefType:
    """shape/strides use None for a dynamic size ('?'); strides None when the layout is the identity."""

    shape: tuple[int | None, ...]
    elem: ScalarType
    strides: tuple[int | None, ...] | None = None
    memory_space: str = ""

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = "".join(f"{'?' if d is None else d}x" for d in self.shape)
        layout = "" if self.strides is None else ", strided<[" + ", ".join(
            "?" if s is None else str(s) for s in self.strides) + "]>"
        space = f", {self.memory_space}" if self.memory_space else ""
        return f"memref<{dims}{self.elem}{layout}{space}>"


@dataclass(frozen=True)
class FunctionType:
    inputs: tuple
    results: tuple


@dataclass(frozen=True)
class OpaqueType:
    """A type the interpreter never computes with (e.g. !llvm.ptr); kept as text for messages."""

    text: str

    def __str__(self) -> str:
        return self.text


FLOAT_VALUE_DTYPES = {"f16": np.dtype(np.float16), "bf16": np.dtype(np.float32),
                      "f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}
FLOAT_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
INT_DTYPES = {1: np.dtype(bool), 8: np.dtype(np.int8), 16: np.dtype(np.int16),
              32: np.dtype(np.int32), 64: np.dtype(np.int64)}


def scalar_type(name: str) -> ScalarType | None:
    """The ScalarType for `name` if the interpreter can compute with it, else None."""
    if name in FLOAT_VALUE_DTYPES or name == "index":
        return ScalarType(name)
    if name.startswith("i") and name[1:].isdigit() and int(name[1:]) in INT_DTYPES:
        return ScalarType(name)
    return None


def element_type(t) -> ScalarType:
    """The scalar element type of a scalar or vector type."""
    if isinstance(t, VectorType):
        return t.elem
    if isinstance(t, ScalarType):
        return t
    raise InterpreterError(f"expected a scalar or vector type, got {t}")


def vector_rank(t) -> int:
    """Dimensions a value of type t has besides the lanes: a vector's; one for a wgmma accumulator (an
    !llvm.struct of f32, held as [lanes, registers])."""
    if isinstance(t, OpaqueType) and t.text.startswith("!llvm.struct<(f32"):
        return 1
    return len(t.shape) if isinstance(t, VectorType) else 0
