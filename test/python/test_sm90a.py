"""sm_90a: the arch-specific NVIDIA target. The mma.sync body compiles for it unchanged; wgmma and
setmaxnreg (ops or inline PTX) compile for it and are refused, naming the op, for plain sm_90; its
binaries run on exactly compute capability 9.0."""
from __future__ import annotations

import re

import pytest

from fmha_mlir.bodies import TILED_TABLE
from fmha_mlir.compiler import Compiler
from fmha_mlir.errors import CompileError
from fmha_mlir.runtime.cuda_executor import binary_runs_on
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS

WGMMA_KERNEL = """
module attributes {gpu.container_module} {
gpu.module @fmha_kernels {
gpu.func @probe(%out: memref<8xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
  %c0 = arith.constant 0 : index
  BODY
  gpu.return
}
}
}
"""
FENCE = "nvvm.wgmma.fence.aligned"
SETMAXNREG = "nvvm.setmaxregister increase 240"
INLINE_WGMMA = ('llvm.inline_asm has_side_effects asm_dialect = att "wgmma.commit_group.sync.aligned;", "" : () -> ()')


@pytest.fixture(scope="module")
def compiler() -> Compiler:
    return Compiler()


def test_sm_90a_is_sm_90_with_arch_specific_features():
    sm_90, sm_90a = TARGETS["sm_90"], TARGETS["sm_90a"]
    assert sm_90a.arch_specific and not sm_90.arch_specific
    assert (sm_90a.backend, sm_90a.wave_size, sm_90a.max_shared_bytes) == (sm_90.backend, sm_90.wave_size,
                                                                           sm_90.max_shared_bytes)


@pytest.mark.parametrize("body", ["warp", "tiled"])
def test_mma_sync_bodies_compile_for_sm_90a_to_the_same_ptx(compiler, body):
    """(sm_90a's own tiled default is the wgmma body: test_wgmma_body.py)"""
    spec = AttentionBwdSpec("bf16", 64, mask=Mask.parse("top_left"))
    config = TILED_TABLE[64] if body == "tiled" else None
    plain = compiler.compile_spec(spec, "sm_90", body=body, config=config).isa
    specific = compiler.compile_spec(spec, "sm_90a", body=body, config=config).isa
    assert ".target sm_90a" in specific and ".target sm_90\n" in plain
    assert specific.replace(".target sm_90a", ".target sm_90") == plain


@pytest.mark.parametrize("body,named", [(FENCE, "nvvm.wgmma.fence.aligned"), (SETMAXNREG, "nvvm.setmaxregister"),
                                        (INLINE_WGMMA, "llvm.inline_asm")])
def test_arch_specific_ops_are_refused_for_sm_90_with_the_op_named(compiler, body, named):
    text = WGMMA_KERNEL.replace("BODY", body)
    with pytest.raises(CompileError) as caught:
        compiler.compile_module(text, "gpu", "sm_90")
    message = str(caught.value)
    assert f"'{named}' needs an arch-specific chip (sm_90a)" in message and "--target sm_90a" in message
    ptx = compiler.compile_module(text, "gpu", "sm_90a").isa
    assert ".target sm_90a" in ptx
    assert re.search(r"wgmma\.fence|setmaxnreg\.inc|wgmma\.commit_group", ptx)


def test_arch_specific_binaries_run_on_exactly_their_chip():
    sm_90, sm_90a = TARGETS["sm_90"], TARGETS["sm_90a"]
    for binary_format in ("ptx", "cubin"):
        assert binary_runs_on(sm_90a, binary_format, (9, 0))
        assert not binary_runs_on(sm_90a, binary_format, (10, 0))
        assert not binary_runs_on(sm_90a, binary_format, (8, 9))
    assert binary_runs_on(sm_90, "ptx", (10, 0)) and not binary_runs_on(sm_90, "cubin", (10, 0))
    assert binary_runs_on(sm_90, "cubin", (9, 0))
