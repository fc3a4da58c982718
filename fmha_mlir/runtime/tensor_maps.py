"""TMA tensor maps for kernel parameters: what cuTensorMapEncodeTiled is called with for a TensorMapArg,
and a cache of the encoded 128 bytes per (address, geometry), since a training loop launches on the same
buffers again and again. The driver call is made by the CUDA executor (cuda-bindings); the geometry is
NumPy-only and checked here, so a bad map is a RuntimeLaunchError naming the argument, not a driver status.

Tensor maps list dimensions innermost first: dims and box are the buffer's shape and the box reversed;
strides (bytes) are given for every dimension but the innermost, which must be contiguous.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import RuntimeLaunchError
from .args import TENSOR_MAP_BYTES, TensorMapArg

ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}
DATA_TYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
              "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "i32": "CU_TENSOR_MAP_DATA_TYPE_INT32"}
SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
            128: "CU_TENSOR_MAP_SWIZZLE_128B"}
MAX_BOX = 256                   # elements per box dimension
ADDRESS_ALIGNMENT = 16          # global address and strides: multiples of 16 bytes


@dataclass(frozen=True)
class TiledEncoding:
    """The arguments of cuTensorMapEncodeTiled, innermost dimension first."""

    data_type: str
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]      # bytes, dimensions 1.. (rank - 1 entries)
    box: tuple[int, ...]
    swizzle: str


def tiled_encoding(arg: TensorMapArg, address: int) -> TiledEncoding:
    """The encoding of `arg` on its buffer at `address`; RuntimeLaunchError for what TMA cannot describe."""
    b = arg.buffer
    where = f"tensor map {arg.name!r} over {b.name!r}"
    if b.dtype not in DATA_TYPES or arg.swizzle not in SWIZZLES:
        raise RuntimeLaunchError(f"{where}: dtype {b.dtype} / swizzle {arg.swizzle}: TMA here takes "
                                 f"{', '.join(DATA_TYPES)} and swizzles {tuple(SWIZZLES)}")
    if len(arg.box) != len(b.shape) or not 1 <= len(b.shape) <= 5:
        raise RuntimeLaunchError(f"{where}: the box {arg.box} must have the buffer's rank {len(b.shape)} (1 to 5)")
    eb = ELEMENT_BYTES[b.dtype]
    if b.strides[-1] != 1:
        raise RuntimeLaunchError(f"{where}: the innermost dimension must be contiguous (stride {b.strides[-1]})")
    strides = tuple(s * eb for s in reversed(b.strides[:-1]))
    if address % ADDRESS_ALIGNMENT or any(s % ADDRESS_ALIGNMENT for s in strides):
        raise RuntimeLaunchError(f"{where}: address and strides must be multiples of {ADDRESS_ALIGNMENT} bytes "
                                 f"(address {address:#x}, strides {strides})")
    if any(not 1 <= n <= MAX_BOX for n in arg.box):
        raise RuntimeLaunchError(f"{where}: box {arg.box}: each dimension is 1..{MAX_BOX} elements")
    if arg.swizzle and arg.box[-1] * eb > arg.swizzle:
        raise RuntimeLaunchError(f"{where}: a {arg.swizzle}-byte swizzle takes boxes at most {arg.swizzle} bytes "
                                 f"wide, the box is {arg.box[-1] * eb}")
    return TiledEncoding(DATA_TYPES[b.dtype], address, tuple(reversed(b.shape)), strides, tuple(reversed(arg.box)),
                         SWIZZLES[arg.swizzle])


def encode_tiled(driver, encoding: TiledEncoding) -> bytes:
    """The 128 bytes of the tensor map, by cuda-bindings' cuTensorMapEncodeTiled (zero fill out of bounds)."""
    from .executor import check_status

    rank = len(encoding.dims)
    tensor_map = check_status(driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, encoding.data_type), rank, encoding.address,
        [driver.cuuint64_t(n) for n in encoding.dims], [driver.cuuint64_t(s) for s in encoding.strides],
        [driver.cuuint32_t(n) for n in encoding.box], [driver.cuuint32_t(1)] * rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, encoding.swizzle),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    import ctypes

    return ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES)


class TensorMapCache:
    """Encoded tensor maps per (address, geometry), the least recently used dropped past `capacity` (a
    caching allocator hands out a bounded set of addresses); `encode(encoding) -> bytes` is the driver call."""

    def __init__(self, encode, capacity: int = 4096):
        self._encode, self.capacity = encode, capacity
        self._maps: OrderedDict[tuple, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, arg: TensorMapArg, address: int | None = None) -> bytes:
        address = arg.buffer.address if address is None else address
        key = (address, arg.geometry)
        with self._lock:
            found = self._maps.get(key)
            if found is not None:
                self._maps.move_to_end(key)
        if found is None:
            found = self._encode(tiled_encoding(arg, address))
            with self._lock:
                self._maps[key] = found
                while len(self._maps) > self.capacity:
                    self._maps.popitem(last=False)
        return found

    def __len__(self) -> int:
        return len(self._maps)
