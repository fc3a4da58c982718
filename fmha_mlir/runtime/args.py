"""Kernel arguments: binding a launch to buffers, flattening memrefs, packing the kernarg blob.

The ABI is upstream MLIR's default memref convention (docs/ir.md, Level 3): a rank-r memref argument is
`allocated ptr, aligned ptr, offset i64, sizes[r] i64, strides[r] i64`, strides in elements. The blob
places every field at its natural alignment, as the AMDGPU and NVPTX backends lay kernel parameters out;
on AMD the result is checked against the code object's own metadata before a launch.
"""
from __future__ import annotations

import dataclasses
import functools
import struct
from dataclasses import dataclass
from typing import Mapping, Sequence, Union

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import RuntimeLaunchError

# field type -> (struct format, size in bytes); each is aligned to its size. A tensor map ("tmap") is
# 128 bytes passed by value; the blob holds zeros there until the executor encodes it (tensor_map_fields).
TENSOR_MAP_BYTES = 128
FIELD_TYPES = {"ptr": ("Q", 8), "i64": ("q", 8), "i32": ("i", 4), "f32": ("f", 4),
               "tmap": (f"{TENSOR_MAP_BYTES}s", TENSOR_MAP_BYTES)}
SCALAR_TYPES = ("i64", "i32", "f32")


@dataclass(frozen=True)
class DeviceBuffer:
    """A tensor in device memory: its element 0 at `address`, strides in elements, offset 0."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int
    allocation: object = None  # the executor's Allocation (the CPU executor reads through it)


@dataclass(frozen=True)
class ScalarArg:
    name: str
    type: str  # one of SCALAR_TYPES
    value: Union[int, float]


@dataclass(frozen=True)
class TensorMapArg:
    """A TMA tensor map over `buffer` (its innermost stride 1): boxes of `box` elements (outermost first,
    as the buffer's shape) swizzled by `swizzle` bytes (0, 32, 64, 128), out-of-bounds elements read as
    zero. The executor encodes it (cuTensorMapEncodeTiled) from the buffer's address and geometry."""

    name: str
    buffer: DeviceBuffer
    box: tuple[int, ...]
    swizzle: int = 128

    @property
    def geometry(self) -> tuple:
        """Everything the encoding depends on besides the address (the cache key with it)."""
        b = self.buffer
        return (b.dtype, b.shape, b.strides, self.box, self.swizzle)


KernelArg = Union[DeviceBuffer, ScalarArg, TensorMapArg]


def strided_view(flat: np.ndarray, shape: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """The tensor a memref descriptor describes over `flat`, its elements from index 0 (strides in elements)."""
    return as_strided(flat, tuple(shape), tuple(s * flat.itemsize for s in strides))


@dataclass(frozen=True)
class ArgField:
    """One flattened kernel parameter at its byte offset in the kernarg blob."""

    name: str  # e.g. "q.aligned", "q.sizes[2]"
    type: str  # a FIELD_TYPES key
    value: Union[int, float]
    offset: int

    @property
    def size(self) -> int:
        return FIELD_TYPES[self.type][1]

    @property
    def format(self) -> str:
        return FIELD_TYPES[self.type][0]


@dataclass(frozen=True)
class PackedArgs:
    """The kernarg blob and each field's offset in it; `fields` names them (for checks and messages)."""

    args: tuple[KernelArg, ...]
    offsets: tuple[int, ...]
    blob: bytes

    @property
    def size(self) -> int:
        return len(self.blob)

    @property
    def fields(self) -> tuple[ArgField, ...]:
        return tuple(ArgField(name, kind, value, offset)
                     for (name, kind, value), offset in zip(flatten_args(self.args), self.offsets))


def bind_args(kernel: str, params: Sequence[dict], args: Sequence[KernelArg]) -> list[KernelArg]:
    """The arguments of one launch checked against the manifest kernel's parameter list
    (`{"buffer", "rank", "dtype", "type"}` memrefs, `{"scalar": type}` scalars)."""
    if len(params) != len(args):
        raise RuntimeLaunchError(f"kernel {kernel} takes {len(params)} arguments, its launch gives {len(args)}")
    for index, (param, arg) in enumerate(zip(params, args)):
        if isinstance(arg, TensorMapArg):
            b = arg.buffer
            if "tensor_map" not in param or (param.get("rank"), param.get("dtype")) != (len(b.shape), b.dtype):
                raise RuntimeLaunchError(f"kernel {kernel} parameter {index} is {param!r}, the launch passes tensor "
                                         f"map {arg.name!r} over a rank-{len(b.shape)} {b.dtype} buffer")
        elif isinstance(arg, DeviceBuffer):
            if param.get("rank") != len(arg.shape) or param.get("dtype") != arg.dtype:
                raise RuntimeLaunchError(
                    f"kernel {kernel} parameter {index} is a rank-{param.get('rank')} {param.get('dtype')} memref, "
                    f"but buffer {arg.name!r} is rank-{len(arg.shape)} {arg.dtype}")
        elif param.get("scalar") != arg.type:
            raise RuntimeLaunchError(f"kernel {kernel} parameter {index} is {param!r}, the launch passes a "
                                     f"{arg.type} scalar")
    return list(args)


def flatten_args(args: Sequence[KernelArg]) -> list[tuple[str, str, Union[int, float]]]:
    """(field name, field type, value) for every kernel parameter, memrefs expanded."""
    return [field for arg in args for field in zip(_field_names(arg), _field_types(_signature(arg)), _values(arg))]


def pack_args(args: Sequence[KernelArg]) -> PackedArgs:
    """Lay the flattened parameters out at natural alignment; the blob is padded to 8 bytes."""
    args = tuple(args)
    offsets, layout = _layout(tuple(_signature(a) for a in args))
    return PackedArgs(args, offsets, layout.pack(*(v for a in args for v in _values(a))))


def tensor_map_fields(packed: PackedArgs) -> list[tuple[int, TensorMapArg]]:
    """(byte offset in the blob, argument) of every tensor map: what the executor encodes into the blob."""
    return [(offset, arg) for arg, offset in zip(packed.args, _argument_offsets(packed))
            if isinstance(arg, TensorMapArg)]


def _argument_offsets(packed: PackedArgs) -> list[int]:
    """The offset of each argument's first field."""
    out, at = [], 0
    for arg in packed.args:
        out.append(packed.offsets[at])
        at += len(_field_types(_signature(arg)))
    return out


def with_buffers(args: Sequence[KernelArg], buffers: Mapping[str, DeviceBuffer]) -> list[KernelArg]:
    """`args` with every buffer name (str) and every tensor map's buffer replaced by the buffer of that
    name in `buffers` (a bound step's arguments on one run's buffers)."""
    return [buffers[a] if isinstance(a, str) else
            dataclasses.replace(a, buffer=buffers[a.buffer.name]) if isinstance(a, TensorMapArg) else a for a in args]


def pointer_fields(packed: PackedArgs) -> list[tuple[int, str]]:
    """(byte offset in the blob, buffer name) of every pointer field, two per memref (allocated and
    aligned): what a launch of the same arguments on buffers at other addresses rewrites."""
    out, offsets = [], iter(packed.offsets)
    for arg in packed.args:
        for kind, offset in zip(_field_types(_signature(arg)), offsets):   # takes this argument's fields
            if kind == "ptr":
                out.append((offset, arg.name))
    return out


# The memref ABI in one place: a rank-r memref is allocated ptr, aligned ptr, offset, sizes[r], strides[r].

def _signature(arg: KernelArg):
    """What fixes an argument's fields: a memref's rank, a scalar's type, or "tmap"."""
    if isinstance(arg, TensorMapArg):
        return "tmap"
    return len(arg.shape) if isinstance(arg, DeviceBuffer) else arg.type


def _field_types(signature) -> list[str]:
    return ["ptr", "ptr", "i64"] + ["i64"] * 2 * signature if isinstance(signature, int) else [signature]


def _values(arg: KernelArg) -> tuple:
    if isinstance(arg, ScalarArg):
        return (arg.value,)
    if isinstance(arg, TensorMapArg):
        return (bytes(TENSOR_MAP_BYTES),)
    return (arg.address, arg.address, 0, *arg.shape, *arg.strides)


def _field_names(arg: KernelArg) -> list[str]:
    if isinstance(arg, (ScalarArg, TensorMapArg)):
        return [arg.name]
    return ([f"{arg.name}.allocated", f"{arg.name}.aligned", f"{arg.name}.offset"]
            + [f"{arg.name}.sizes[{d}]" for d in range(len(arg.shape))]
            + [f"{arg.name}.strides[{d}]" for d in range(len(arg.shape))])


@functools.lru_cache(maxsize=512)
def _layout(signature: tuple) -> tuple[tuple[int, ...], struct.Struct]:
    """(each field's offset, one Struct packing them all with the padding) for arguments of this
    signature (one _signature per argument): computed once per kernel, since a training loop packs the
    same kernels on every call."""
    offsets, format, offset = [], "<", 0
    for kind in (kind for item in signature for kind in _field_types(item)):
        code, size = FIELD_TYPES[kind]
        aligned = _align(offset, size)
        format += "x" * (aligned - offset) + code
        offsets.append(aligned)
        offset = aligned + size
    format += "x" * (_align(offset, 8) - offset)
    return tuple(offsets), struct.Struct(format)


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def check_against_metadata(kernel: str, packed: PackedArgs, metadata: dict) -> None:
    """Raise RuntimeLaunchError unless the code object lays the kernel's arguments out as `packed` does.

    `metadata` is the kernel's entry of hsaco_metadata.read_hsaco_metadata: "args" (offset, size,
    value_kind) and "kernarg_segment_size". Hidden arguments (value_kind hidden_*) follow the explicit
    ones; the HIP runtime fills them.
    """
    args = metadata_field(metadata, "args", kernel)
    explicit = [a for a in args if not str(metadata_field(a, "value_kind", kernel)).startswith("hidden")]
    if len(explicit) != len(packed.fields):
        raise RuntimeLaunchError(f"kernel {kernel}: the code object has {len(explicit)} explicit arguments, the "
                                 f"runtime packs {len(packed.fields)} (the bundle and its binary disagree)")
    for field, arg in zip(packed.fields, explicit):
        got = tuple(metadata_field(arg, key, kernel) for key in ("offset", "size", "value_kind"))
        expected_kind = "global_buffer" if field.type == "ptr" else "by_value"
        if got != (field.offset, field.size, expected_kind):
            raise RuntimeLaunchError(
                f"kernel {kernel}: argument {field.name} is packed at offset {field.offset} size {field.size} "
                f"({expected_kind}) but the code object expects offset {got[0]} size {got[1]} ({got[2]})")
    segment = metadata_field(metadata, "kernarg_segment_size", kernel)
    end = packed.fields[-1].offset + packed.fields[-1].size if packed.fields else 0
    hidden = len(args) > len(explicit)
    if end > segment or (not hidden and _align(segment, 8) != packed.size):
        raise RuntimeLaunchError(f"kernel {kernel}: the code object's kernarg segment is {segment} bytes but "
                                 f"the runtime packs {packed.size}")


def metadata_field(metadata: dict, key: str, kernel: str):
    if key not in metadata:
        raise RuntimeLaunchError(f"kernel {kernel}: code-object metadata lacks {key!r}")
    return metadata[key]
