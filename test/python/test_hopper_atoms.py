"""The Hopper atoms (passes/wgmma_atom.py, tma_copy.py, hopper_sync.py) composed in the probe kernel
(passes/hopper_probe.py) and compiled for sm_90a: the PTX holds what each atom promises, ptxas takes it
without serialising the wgmma chain or spilling, and the builders refuse what the hardware cannot do."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fmha_mlir.compiler import Compiler
from fmha_mlir.errors import CompileError
from fmha_mlir.hopper_probe_geometry import BLOCK_K, ProbeShape
from fmha_mlir.mlir import ir, make_context
from fmha_mlir.passes import hopper_sync, wgmma_atom
from fmha_mlir.passes.hopper_probe import probe_module_text
from fmha_mlir.passes.tma_copy import TmaCopy
from fmha_mlir.wgmma_layouts import OperandTile

PTXAS = shutil.which("ptxas") or "/usr/local/cuda-13.0/bin/ptxas"
SHAPE = ProbeShape()


@pytest.fixture(scope="module")
def ptx() -> str:
    return Compiler().compile_module(probe_module_text(SHAPE), "gpu", "sm_90a").isa


def test_probe_ptx_holds_each_atom(ptx):
    ss = SHAPE.k_blocks * BLOCK_K // 16
    rs = SHAPE.n // 16
    assert len(re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{SHAPE.n}k16\.f32\.bf16\.bf16", ptx)) == ss
    register_a = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{SHAPE.n2}k16\.f32\.bf16\.bf16 "
                            r"\{[^}]*\}, \{[^}]*\}, %rd\d+, p, 1, 1, 1;", ptx)
    assert len(register_a) == rs                       # A in registers, B MN-major (trans-b 1)
    # one box per stage for A and B, the prologue's two stages and the refills, and V's one box
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == \
        2 * SHAPE.k_blocks + 1
    assert ptx.count("mbarrier.arrive.expect_tx.shared.b64") == SHAPE.k_blocks + 1
    # full-barrier waits of k-blocks 0..3 (parity 0, 0, 1, 1), the two refills' empty waits, V's wait
    parities = re.findall(r"mbarrier\.try_wait\.parity\.shared\.b64 P1, \[%r\d+\], ([01]),", ptx)
    assert sorted(parities) == ["0"] * 5 + ["1"] * 2
    assert ptx.count(".param .align 64 .b8 wgmma_probe_param_") == 3
    assert ptx.count("wgmma.commit_group.sync.aligned") == SHAPE.k_blocks + 1


@pytest.mark.skipif(not Path(PTXAS).is_file(), reason="no ptxas")
def test_ptxas_neither_serialises_the_wgmma_chain_nor_spills(ptx, tmp_path):
    (tmp_path / "probe.ptx").write_text(ptx)
    out = subprocess.run([PTXAS, "-v", "-arch=sm_90a", str(tmp_path / "probe.ptx"), "-o", str(tmp_path / "p.cubin")],
                         capture_output=True, text=True, check=True).stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in out
    assert not re.search(r"C751[457]", out), out       # serialised wgmma (TENSOR_CORES.md)


@pytest.mark.skipif(not Path(PTXAS).is_file(), reason="no ptxas")
def test_ptxas_applies_the_warp_specialised_register_budgets(tmp_path):
    """setmaxnreg takes effect only where ptxas knows the register count at entry (.maxntid with
    .minnctapersm): then the consumer's 240 is the kernel's count, else ptxas drops it (C7508)."""
    ptx = Compiler().compile_module(probe_module_text(SHAPE, roles=True), "gpu", "sm_90a").isa
    assert ".minnctapersm 1" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t24;" in ptx
    (tmp_path / "roles.ptx").write_text(ptx)
    out = subprocess.run([PTXAS, "-v", "-arch=sm_90a", str(tmp_path / "roles.ptx"), "-o", str(tmp_path / "r.cubin")],
                         capture_output=True, text=True, check=True).stderr
    assert "C7508" not in out and "Used 240 registers" in out, out
    assert "0 bytes spill stores, 0 bytes spill loads" in out


def test_probe_is_refused_for_sm_90():
    with pytest.raises(CompileError, match="'nvvm.wgmma.fence.aligned' needs an arch-specific chip"):
        Compiler().compile_module(probe_module_text(SHAPE), "gpu", "sm_90")


def test_builders_refuse_what_the_hardware_cannot_do():
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            with pytest.raises(ValueError, match="ids are 1..15"):
                hopper_sync.named_barrier(0, 128)
            with pytest.raises(ValueError, match="whole warps"):
                hopper_sync.named_barrier(1, 100)
            with pytest.raises(ValueError, match="24..256 registers in steps of 8"):
                hopper_sync.set_max_registers(250, True)
            with pytest.raises(ValueError, match="multiple of 8 up to 256"):
                wgmma_atom.WgmmaAtom(100, "bf16", None)
            with pytest.raises(ValueError, match="rows of 128 bytes"):
                TmaCopy(None, 64, 32, "bf16", 128)
            base = ir.Operation.create("arith.constant", results=[ir.IndexType.get()],
                                       attributes={"value": ir.IntegerAttr.get(ir.IndexType.get(), 0)}).result
            with pytest.raises(ValueError, match="multiple of 1024 bytes"):
                wgmma_atom.SharedDescriptors(base).descriptor(OperandTile(64, 64), 512)
