"""What the kernels can address, and the check of a run's buffers against it (docs/ir.md, "Addressing").

- Every body computes each dimension's index in i32 (block ids times block sizes plus lane offsets), so
  no dimension may hold more than 2^31 - 1 elements, on any target.
- Global loads, stores and atomics index memrefs with MLIR's 64-bit `index` (convert-gpu-to-nvvm and
  convert-gpu-to-rocdl lower it to i64; strides are i64 in the descriptor): no limit on the offset.
- The AMD tiled body reads some operands by `amdgpu.raw_buffer_load`: a buffer resource whose record
  count is a 32-bit byte count (max over dims of size x stride) and whose offset is an i32 byte count
  computed from i32 indices and strides. Past 2^32 bytes the count and the offsets wrap and the loads
  return zeros or the wrong rows, so such a buffer must span less than 2^32 bytes.

The interpreter does not model these widths: the runtime refuses what a target cannot reach, before
anything is allocated.
"""
from __future__ import annotations

import re
from typing import Mapping

from ..errors import RuntimeLaunchError
from ..spec import MAX_INT_OPTION
from .kernel_signatures import kernels_of

MAX_DIMENSION = MAX_INT_OPTION
BUFFER_RESOURCE_BYTES = 2**32

_BUFFER_LOAD = re.compile(r'"amdgpu\.raw_buffer_load"\((%\w+)')   # the memref, without a result's #N
# A memref op's result (a view, or the base of extract_strided_metadata) and the memref it takes apart.
_VIEW = re.compile(r'(%\w+)(?::\d+)? = "memref\.\w+"\((%\w+)')
_ENTRY = re.compile(r"\^bb0\((.*?)\):")
_ARGUMENT = re.compile(r"(%[\w#]+): ")


def check_dimensions(sizes: Mapping[str, int]) -> None:
    """Every named size of the problem fits the kernels' i32 index arithmetic."""
    for dim, size in sizes.items():
        if size > MAX_DIMENSION:
            raise RuntimeLaunchError(f"{dim} is {size}; the kernels index each dimension in 32-bit arithmetic, "
                                     f"at most {MAX_DIMENSION} (2^31 - 1) elements: split the problem into calls "
                                     "below that")


def check_extents(bundle, layouts: Mapping) -> None:
    """Each buffer some kernel reads through an AMD buffer resource spans less than 2^32 bytes."""
    for name in sorted(buffer_resource_operands(bundle)):
        layout = layouts[name]
        records = max([layout.span] + [n * s for n, s in zip(layout.shape, layout.strides)])
        nbytes = records * layout.storage.itemsize
        if nbytes >= BUFFER_RESOURCE_BYTES:
            role = "tensor" if bundle.buffers[name]["role"] != "workspace" else "workspace"
            raise RuntimeLaunchError(
                f"{role} {name!r} spans {nbytes} bytes ({nbytes / 2**30:.2f} GiB); the {bundle.target.arch} "
                f"{bundle.config.body} body reads it through a buffer resource (amdgpu.raw_buffer_load), whose "
                f"32-bit record count and offsets reach less than 2^32 bytes (4 GiB): split the batch into calls "
                "below that, or use body='warp' (64-bit addresses)")


def buffer_resource_operands(bundle) -> frozenset[str]:
    """The buffers some kernel of the bundle reads by amdgpu.raw_buffer_load (of its parameter, or of a
    view of it), read from the kernels themselves (once per bundle)."""
    if bundle.key not in _OPERANDS:
        _OPERANDS[bundle.key] = _read_operands(bundle)
    return _OPERANDS[bundle.key]


_OPERANDS: dict[str, frozenset[str]] = {}


def _read_operands(bundle) -> frozenset[str]:
    out = set()
    for kernel, (_, region) in kernels_of(bundle.interp_ir).items():
        if kernel not in bundle.kernels:
            continue
        entry = _ENTRY.search(region)
        arguments = _ARGUMENT.findall(entry.group(1)) if entry else []
        viewed = dict(_VIEW.findall(region))
        params = bundle.kernels[kernel]["args"]
        for value in _BUFFER_LOAD.findall(region):
            while value in viewed:
                value = viewed[value]
            if value not in arguments:
                raise RuntimeLaunchError(f"kernel {kernel!r} loads through a buffer resource from {value}, which "
                                         "is no parameter or view of one: the interp IR is not what fmha-compile "
                                         "writes")
            out.add(params[arguments.index(value)]["buffer"])
    return frozenset(out)
