"""The kernels a bundle really holds, read without MLIR (the runtime imports NumPy alone): each gpu.func
of the interpreter IR with its parameter types, and whether the binary defines a symbol of that name.

The interpreter IR is the generic form of one gpu.module (compiler.StageTexts.generic_gpu_module):

    "gpu.func"() <{function_type = (memref<...>, f32) -> (), kernel, ...}> ({
      ...
    }) {..., sym_name = "<kernel>"} : () -> ()

with the region's close at the op's own indentation, so the name follows the type on the first line
that closes at that depth.
"""
from __future__ import annotations

import re

from ..errors import RuntimeLaunchError

_FUNC = re.compile(r'^(?P<indent>[ \t]*)"gpu\.func"\(\) <\{function_type = \((?P<args>.*?)\) -> \(\)', re.M)
_NAME = re.compile(r'sym_name = "(?P<name>[^"]+)"')
_OPENERS, _CLOSERS = "<([{", ">)]}"


def kernel_signatures(interp_ir: str) -> dict[str, tuple[str, ...]]:
    """{kernel symbol: its parameter types as MLIR prints them}; RuntimeLaunchError if the text is not
    the generic form the compiler writes."""
    return {name: types for name, (types, _) in kernels_of(interp_ir).items()}


def kernels_of(interp_ir: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """{kernel symbol: (its parameter types, the text of its region)}."""
    out = {}
    for found in _FUNC.finditer(interp_ir):
        close = re.compile(rf'^{re.escape(found["indent"])}\}}\) \{{.*$', re.M).search(interp_ir, found.end())
        name = _NAME.search(close.group(0)) if close else None
        if name is None:
            line = interp_ir.count("\n", 0, found.start()) + 1
            raise RuntimeLaunchError(f"interp_ir line {line}: a gpu.func without a sym_name where its region "
                                     "closes: the file is not the generic kernel IR fmha-compile writes")
        out[name["name"]] = (split_types(found["args"]), interp_ir[found.end():close.start()])
    return out


def split_types(text: str) -> tuple[str, ...]:
    """A comma-separated type list split at its top-level commas (types nest <, (, [, {)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return tuple(parts + [last]) if last else tuple(parts)


def binary_defines(binary: bytes, binary_format: str, kernel: str) -> bool:
    """Whether the code object names `kernel`: a NUL-terminated symbol of an ELF string table (hsaco,
    cubin), or a PTX `.entry`."""
    if binary_format == "ptx":
        return re.search(rb"\.entry\s+" + re.escape(kernel.encode()) + rb"\s*\(", binary) is not None
    return kernel.encode() + b"\0" in binary
