"""Reading AMD code objects: ELF flags and the AMDGPU metadata note."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fmha_mlir.errors import RuntimeLaunchError
from fmha_mlir.runtime.hsaco_metadata import amdgpu_mach, read_hsaco_metadata

KERNEL = """
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @add_one(%buf: memref<?x?xf32>, %x: f32) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %lane = gpu.thread_id x
      %c0 = arith.constant 0 : index
      "fmha.atomic_add"(%x, %buf, %c0, %lane) : (f32, memref<?x?xf32>, index, index) -> ()
      gpu.return
    }
  }
}
"""


@pytest.mark.parametrize("e_flags, arch", [(0x54C, "gfx942"), (0x4C, "gfx942"), (0x54F, "gfx950"),
                                           (0x3F, "gfx90a"), (0x5A, "unknown-0x5a")])
def test_amdgpu_mach(e_flags, arch):
    assert amdgpu_mach(e_flags) == arch


@pytest.fixture(scope="module")
def hsaco() -> dict[str, bytes]:
    from fmha_mlir.compiler import Compiler

    compiler = Compiler()
    return {arch: compiler.compile_module(KERNEL, "gpu", arch).binary for arch in ("gfx942", "gfx950")}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_metadata_of_a_compiled_kernel(hsaco, arch):
    metadata = read_hsaco_metadata(hsaco[arch])
    assert metadata["mach"] == metadata["arch"] == arch
    assert metadata["target"].endswith(arch) and metadata["version"][0] == 1
    kernel = metadata["kernels"]["add_one"]
    assert (kernel["symbol"], kernel["wavefront_size"], kernel["max_flat_workgroup_size"]) == ("add_one.kd", 64, 64)
    assert kernel["private_segment_fixed_size"] == 0 and kernel["group_segment_fixed_size"] == 0
    assert kernel["vgpr_count"] > 0 and kernel["sgpr_count"] > 0
    # memref<?x?xf32>: allocated and aligned pointers, offset, 2 sizes, 2 strides; then the f32.
    explicit = [(a["offset"], a["size"], a["value_kind"]) for a in kernel["args"]
                if not a["value_kind"].startswith("hidden")]
    assert explicit == [(0, 8, "global_buffer"), (8, 8, "global_buffer")] + \
        [(16 + 8 * i, 8, "by_value") for i in range(5)] + [(56, 4, "by_value")]
    assert kernel["kernarg_segment_size"] >= 60


def test_rejects_what_is_not_an_amdgpu_code_object():
    with pytest.raises(RuntimeLaunchError, match="not an ELF code object"):
        read_hsaco_metadata(b"certainly not an ELF file")
    host_binary = Path(sys.executable).resolve().read_bytes()
    with pytest.raises(RuntimeLaunchError, match="not an AMDGPU code object"):
        read_hsaco_metadata(host_binary)


def test_imports_without_mlir_or_elf_readers():
    code = ("import sys, fmha_mlir.runtime.hsaco_metadata; "
            "print(sorted(m for m in ('flydsl', 'elftools', 'msgpack') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
