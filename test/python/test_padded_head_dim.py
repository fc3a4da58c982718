"""Head dims that are multiples of 8 but not of what the tiled bodies' warp layouts split (bodies.tile_hdims):
computed on tiles of the next width they take, the columns past the head dim zero-filled by the copies
and skipped by the gradients, through the NumPy API and the interpreter against the oracle under the gate.
Odd lengths (keys over more than one key block on gfx942), GQA, both dtypes, masks; bf16 dQ atomics and
deterministic mode on one head dim each; packed sequences."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fmha_mlir.api import compile_bundle
from fmha_mlir.bodies import choose_config, tile_hdims
from fmha_mlir.compiler import Compiler
from fmha_mlir.errors import SpecError
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target

BR, TL = Mask("causal_bottom_right"), Mask("causal_top_left")
CASES = [   # (arch, spec)
    ("sm_90", AttentionBwdSpec("f16", 8)),     # a row of 16 bytes: one lane of the row kernels holds it whole
    ("sm_90", AttentionBwdSpec("bf16", 40)),
    ("sm_90", AttentionBwdSpec("f16", 72, mask=BR)),
    ("sm_90", AttentionBwdSpec("bf16", 80, gqa_ratio=2, mask=TL)),
    ("sm_90", AttentionBwdSpec("f16", 104)),
    ("sm_90", AttentionBwdSpec("bf16", 136, mask=BR)),
    ("sm_90", AttentionBwdSpec("f16", 200, gqa_ratio=2)),
    ("sm_90", AttentionBwdSpec("bf16", 80, hdim_v=48, mask=BR)),
    ("sm_90", AttentionBwdSpec("bf16", 80, hdim_v=48, grad_accum="bf16")),
    ("sm_90", AttentionBwdSpec("f16", 104, hdim_v=72, mask=TL, deterministic=True)),
    ("gfx942", AttentionBwdSpec("bf16", 8, mask=TL)),
    ("gfx942", AttentionBwdSpec("f16", 40, mask=BR)),
    ("gfx942", AttentionBwdSpec("bf16", 72)),
    ("gfx942", AttentionBwdSpec("f16", 80, gqa_ratio=2)),
    ("gfx942", AttentionBwdSpec("bf16", 104, mask=TL)),
    ("gfx942", AttentionBwdSpec("f16", 80, hdim_v=48, mask=BR)),
    ("gfx942", AttentionBwdSpec("bf16", 80, hdim_v=48, mask=TL, grad_accum="bf16")),
    ("gfx942", AttentionBwdSpec("bf16", 72, deterministic=True)),
    ("gfx950", AttentionBwdSpec("bf16", 200, mask=BR)),
]


def _id(case) -> str:
    arch, s = case
    extra = "-bf16acc" if s.grad_accum == "bf16" else "-det" if s.deterministic else ""
    return f"{arch}-{s.dtype}-d{s.hdim_q}x{s.hdim_v}-g{s.gqa_ratio}-{s.mask.kind}{extra}"


@pytest.fixture(scope="module")
def compiler():
    return Compiler()


@pytest.mark.parametrize("arch,spec", CASES, ids=map(_id, CASES))
def test_padded_tiles_pass_the_gate(compiler, arch, spec):
    bundle = compile_bundle(spec, arch, compiler, body="tiled")
    tiles = tile_hdims(spec, bundle.config)
    assert bundle.config.body == "tiled" and tiles != (spec.hdim_q, spec.hdim_v)   # the padding is exercised
    seqlens = (37, 83) if arch == "gfx942" else (21, 29)   # gfx942's key blocks are 64 wide
    problem = make_problem(spec, ProblemSize(1, 2 * spec.gqa_ratio, *seqlens), seed=spec.hdim_q, layout="bshd")
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=spec.hdim_v), problem.tensors)
    assert all(np.isfinite(g).all() for g in grads.values())
    checks = problem.check(grads, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]
    assert max(c.scale for c in checks) > 0.1   # a real problem, not all-masked zeros


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950"])
def test_the_tables_own_head_dims_take_no_padding(arch):
    """A head dim every warp layout splits is its own tile width: the kernels of the specs the bodies took
    before padding existed are unchanged."""
    for hdim in (64, 128, 256):
        spec = AttentionBwdSpec("bf16", hdim)
        try:
            config = choose_config(spec, get_target(arch), "tiled")
        except SpecError:
            continue
        assert tile_hdims(spec, config) == (hdim, hdim)


def test_tiles_are_the_next_width_the_warp_layouts_split():
    """sm_90's d128 row splits dQ's columns over 4 warps of 8-column tiles (32) and dK / dV's over 2 (16):
    hdim_q 80 takes 96-column tiles, hdim_v 80 its own; gfx942's 16-column MFMA tiles double both."""
    spec = AttentionBwdSpec("bf16", 80)
    assert tile_hdims(spec, choose_config(spec, get_target("sm_90"), "tiled")) == (96, 80)
    assert tile_hdims(spec, choose_config(spec, get_target("gfx942"), "tiled")) == (128, 96)
    sm90a = choose_config(spec, get_target("sm_90a"), "tiled")   # wgmma's: whole 64-column blocks
    assert sm90a.instruction == "wgmma.m64n64k16" and tile_hdims(spec, sm90a) == (128, 128)


def test_wgmma_tiles_are_whole_blocks_and_at_least_one_a_unit():
    """The d256 row's two warpgroups split a head dim: d136-d192 on 192-column tiles (96 columns a
    warpgroup, narrow products at the block inside), d200 on 256; a head dim of one block split over two
    units pads to two (hdim_q 64 beside hdim_v 128 on the d128 row: dQ's warpgroups a block each)."""
    from fmha_mlir.bodies.wgmma import WGMMA_TABLE

    for hdim, tiles in ((136, 192), (160, 192), (192, 192), (200, 256), (256, 256)):
        assert tile_hdims(AttentionBwdSpec("bf16", hdim), WGMMA_TABLE[256]) == (tiles, tiles)
    spec = dataclasses.replace(AttentionBwdSpec("bf16", 64), hdim_v=128)
    assert tile_hdims(spec, WGMMA_TABLE[128]) == (128, 128)


def test_a_head_dim_not_a_multiple_of_8_is_refused_with_the_reason():
    """The copies move 16-byte chunks: hdim 84 is the torch op's to pad (torch.call.computed_spec)."""
    with pytest.raises(SpecError, match=r"hdim_q: 84 is not supported by the tiled body .*multiple of 8"):
        choose_config(AttentionBwdSpec("bf16", 84), get_target("sm_90"), "tiled")
    with pytest.raises(SpecError, match="hdim_v: 52"):
        choose_config(dataclasses.replace(AttentionBwdSpec("bf16", 80), hdim_v=52), get_target("gfx942"), "tiled")


@pytest.mark.parametrize("arch,spec", [
    ("sm_90", AttentionBwdSpec("bf16", 80, hdim_v=48, gqa_ratio=2, mask=BR, varlen=True)),
    ("gfx942", AttentionBwdSpec("f16", 72, gqa_ratio=2, varlen=True)),
], ids=["sm_90-d80x48", "gfx942-d72"])
def test_packed_sequences_on_padded_tiles_pass_the_gate(compiler, arch, spec):
    """Varlen views keep the head dim static, so the copies' and the gradients' column bounds hold per
    sequence too (an empty side included)."""
    from fmha_mlir.varlen_problem import make_varlen_problem

    bundle = compile_bundle(spec, arch, compiler, body="tiled")
    problem = make_varlen_problem(spec, (0, 7, 19), (5, 0, 70), heads_q=4, seed=3)
    outputs = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=2), problem.tensors, problem.scalars)
    checks = problem.check(outputs, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]
    assert max(c.scale for c in checks) > 0.1


WGMMA_CASES = [   # (spec, the wgmma table row's fields changed, problem size): sm_90a, in the interpreter
    (AttentionBwdSpec("bf16", 80, mask=BR), {}, ProblemSize(1, 2, 150, 140)),
    (AttentionBwdSpec("f16", 40, gqa_ratio=2), {}, ProblemSize(2, 4, 70, 90)),
    (AttentionBwdSpec("bf16", 72, hdim_v=48, mask=TL), {}, ProblemSize(1, 2, 90, 100)),
    (AttentionBwdSpec("f16", 104), {"producer": False, "dq_bulk": False, "dkv_tma_store": False, "dq_convert_rows": 0},
     ProblemSize(1, 1, 100, 70)),
    (AttentionBwdSpec("bf16", 88, mask=BR, deterministic=True), {"dq_bulk": False, "dq_convert_rows": 0},
     ProblemSize(1, 1, 130, 150)),
]


@pytest.mark.parametrize("spec,changes,size", WGMMA_CASES,
                         ids=[_id(("sm_90a", s)) + ("-cp.async" if c.get("producer") is False else "")
                              for s, c, _ in WGMMA_CASES])
def test_padded_wgmma_tiles_pass_the_gate(spec, changes, size):
    """The wgmma rows on head dims padded to whole 64-column blocks: TMA boxes (or cp.async copies)
    zero-fill the columns past the head dim, dQ's bulk reduce-adds drop them, the stores skip them."""
    from fmha_mlir.bodies.wgmma import WGMMA_TABLE
    from test_wgmma_body import run_variant

    config = dataclasses.replace(WGMMA_TABLE[64 if max(spec.hdim_q, spec.hdim_v) <= 64 else 128], **changes)
    tiles = tile_hdims(spec, config)
    assert tiles != (spec.hdim_q, spec.hdim_v) and all(t % 64 == 0 for t in tiles)
    isa = run_variant(spec, size, config).isa
    assert ("cp.reduce.async.bulk.tensor" in isa) == config.dq_bulk


def test_the_table_runs_padded_head_dims_on_wgmma():
    """sm_90a takes wgmma for the head dims its rows take whole and for those it pads (measured: d80 1.42x,
    d96 1.39x, d160 on 192-column tiles 1.12x the mma.sync row); below a row's SMALLEST_HDIM (d136, d144)
    mma.sync's."""
    target = get_target("sm_90a")
    for hdim in (128, 80, 96, 152, 160, 192):
        assert choose_config(AttentionBwdSpec("bf16", hdim), target, "tiled").instruction.startswith("wgmma")
    for hdim in (136, 144):
        assert choose_config(AttentionBwdSpec("bf16", hdim), target, "tiled").instruction.startswith("mma.")
