"""Mutation testing of the numerical gate and the tests that use it.

    python -m fmha_mlir.tools.mutants [--jobs 2] [--only NAME ...] [--results FILE] [--first-failure]
    python -m fmha_mlir.tools.mutants --table docs/mutants.md     # the docs' table; runs nothing

Each mutant is one exact text substitution in the compiler's source (a 1% error in one gradient for one
dtype, an off-by-one key range, a wrong GQA head map, ...). For each, a scratch copy of the package and
of test/python gets the substitution and runs a fast subset of the suite (SUBSET); the mutant is killed
when a test of the subset fails. First the unmutated copy must pass the subset, and every mutant's
original text must occur exactly once in its file, so that a refactor cannot silently retire a mutant.
The table printed at the end gives each mutant's killing tests; `--results` merges them into the committed
results file (reports/mutants.json, one entry per mutant name), and `--table` writes docs/mutants.md from
the mutant list and that file, so the docs list every mutant and never a killing test that no run found.
The exit status is 1 when a mutant survives: then the tests are wrong, not the mutant.

Needs MLIR (the subset compiles kernels); runs on the CPU interpreter.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The package as setuptools maps it (pyproject.toml's package-dir): scratch/pkg/fmha_mlir/...
PACKAGE_DIRS = {"fmha_mlir": "fmha_mlir", "dialects": "fmha_mlir/dialects", "passes": "fmha_mlir/passes",
                "tools": "fmha_mlir/tools"}
# Every (arch, body) and dtype at GQA 4 and every mask (interpreter matrix, hdim 64), softcap and ALiBi in
# bf16 on every (arch, body), GQA 2 with two
# kv heads and the gpu stage (pipeline tests), multi-tile tiled problems, the lowered mask semantics,
# the mask geometry against brute force and the rule written out, the NaN classes on the sm_90 tiled
# body, the matrix layouts against the vendors' figures, the Hopper probe and its warp-specialised variant
# in the interpreter, the wgmma descriptor the H200 verified, the dq_reduce rung in the interpreter, the wgmma
# body's variants and planted synchronisation bugs in the interpreter, the warp-specialised body's variants,
# head dims on zero-padded tiles, the L2 sections' numbering.
# One pytest
# process: the kernels compile once per mutant.
SUBSET_FILES = ("test/python/test_interp_matrix.py", "test/python/test_interp_pipeline.py",
                "test/python/test_interp_fmha_ops.py", "test/python/test_lowering.py",
                "test/python/test_interp_mfma.py", "test/python/test_mfma_atom.py",
                "test/python/test_deterministic.py", "test/python/test_mask_geometry.py",
                "test/python/test_nan_classes.py", "test/python/test_interp_nvgpu.py",
                "test/python/test_interp_hopper_ops.py", "test/python/test_wgmma_layouts.py",
                "test/python/test_sinks.py", "test/python/test_hopper_probe_ladder.py",
                "test/python/test_wgmma_body.py", "test/python/test_warp_roles.py",
                "test/python/test_padded_head_dim.py", "test/python/test_l2_sections.py")
SUBSET_SELECTION = ("(test_interp_matrix and (d64 and g4 or (softcap or alibi or bias) and bf16 and none))"
                    " or test_interp_pipeline"
                    " or (test_interp_fmha_ops and lowered)"
                    " or (test_lowering and geometry) or test_interp_mfma or test_mfma_atom"
                    " or (test_deterministic and (dbias and batch or partials_written) and sm_90)"
                    " or test_mask_geometry or (test_nan_classes and sm_90 and tiled)"
                    " or (test_interp_nvgpu and follow_the_ptx_isa)"
                    " or (test_interp_hopper_ops and runs) or (test_wgmma_layouts and h200_verified)"
                    " or (test_hopper_probe_ladder and dq_reduce_in_the_interpreter)"
                    " or (test_sinks and (kernel_matches and bf16 or deterministic or stay_finite and sm_90))"
                    " or (test_wgmma_body and (matches_the_oracle or planted))"
                    " or (test_warp_roles and (matches_the_oracle or takes_turns))"
                    " or (test_padded_head_dim and pass_the_gate)"
                    " or (test_l2_sections and number_every_work_group)")
TIMEOUT_S = 900
RESULTS = ROOT / "reports" / "mutants.json"
TABLE = ROOT / "docs" / "mutants.md"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str           # repository-relative
    original: str       # must occur exactly once
    replacement: str


def _per_dtype(name: str, path: str, original: str, replacement: str, dtypes) -> list[Mutant]:
    """One mutant per dtype: `replacement` may use {dt}, the dtype the error is confined to."""
    return [Mutant(f"{name} [{dt}]", path, original, replacement.format(dt=dt)) for dt in dtypes]


ALL_DTYPES = ("f16", "bf16", "f32")
TILED_DTYPES = ("f16", "bf16")
WARP, TILED = "passes/warp_body.py", "passes/flash_bwd.py"
GEOMETRY, ROWS, SCORES = "fmha_mlir/mask_geometry.py", "passes/row_kernels.py", "passes/score_mods.py"

MUTANTS: list[Mutant] = [
    # -- the warp body ---------------------------------------------------------------------------------
    *_per_dtype("warp: dS x1.01", WARP,
                "ds = softcap_grad(arith.mulf(ds_score, scale), qk, spec)",
                'ds = softcap_grad(arith.mulf(ds_score, f32(spec.scale * (1.01 if spec.dtype == "{dt}" else 1.0))), '
                'qk, spec)',
                ALL_DTYPES),
    Mutant("warp: P exponent x1.005", WARP,
           "p = fmha.Exp2Op.build(exp2_argument(score, lse_row, spec))",
           "p = fmha.Exp2Op.build(arith.mulf(exp2_argument(score, lse_row, spec), f32(1.005)))"),
    *_per_dtype("warp: dV x0.99", WARP,
                "fmha.AtomicAddOp.build(arith.mulf(p, x), dv_out, kv_row + [column])",
                'fmha.AtomicAddOp.build(arith.mulf(arith.mulf(p, x), f32(0.99 if spec.dtype == "{dt}" else 1.0)), '
                'dv_out, kv_row + [column])',
                ALL_DTYPES),
    *_per_dtype("warp: dK x0.99", WARP,
                "fmha.AtomicAddOp.build(arith.mulf(ds, x), dk_out, kv_row + [column])",
                'fmha.AtomicAddOp.build(arith.mulf(arith.mulf(ds, x), f32(0.99 if spec.dtype == "{dt}" else 1.0)), '
                'dk_out, kv_row + [column])',
                ALL_DTYPES),
    *_per_dtype("warp: dQ x0.99", WARP,
                "store_from_f32(results[:q_slice.width], dq_out, row, q_slice)",
                'store_from_f32([arith.mulf(r, f32(0.99 if spec.dtype == "{dt}" else 1.0)) '
                'for r in results[:q_slice.width]], dq_out, row, q_slice)',
                ALL_DTYPES),
    Mutant("warp: GQA head map h % g", WARP,
           "arith.divui(wave.head, index(spec.gqa_ratio))", "arith.remui(wave.head, index(spec.gqa_ratio))"),
    Mutant("warp: first visible key dropped", WARP,
           "loop = scf.ForOp(first_key, end_key, index(1)",
           "loop = scf.ForOp(arith.addi(first_key, index(1)), end_key, index(1)"),
    Mutant("warp: last visible key dropped", WARP,
           "loop = scf.ForOp(first_key, end_key, index(1)",
           "loop = scf.ForOp(first_key, arith.subi(end_key, index(1)), index(1)"),
    # The warp body's key range is exact and masked_score still guards each score, so a widened range
    # leaves the numbers right (the admitted key gets P = 0) but makes masked keys cost: the exact-range
    # test kills these.
    Mutant("warp: causal_top_left key range takes key q+1", GEOMETRY,
           "return 0, minimum(seqlen_k, q + 1)", "return 0, minimum(seqlen_k, q + 2)"),
    Mutant("warp: causal_bottom_right key range takes the key right of the diagonal", GEOMETRY,
           "return 0, minimum(seqlen_k, maximum(last + 1, 0))", "return 0, minimum(seqlen_k, maximum(last + 2, 0))"),
    Mutant("warp: window key range takes the key left of it", GEOMETRY,
           "maximum(0, last - mask.window_left)", "maximum(0, last - mask.window_left - 1)"),
    Mutant("warp: window key range takes the key right of it", GEOMETRY,
           "minimum(seqlen_k, last + (mask.window_right + 1))", "minimum(seqlen_k, last + (mask.window_right + 2))"),
    # -- the row kernels (every body) ------------------------------------------------------------------
    *_per_dtype("rows: D x1.01", ROWS,
                "memref.store(total, d, wave.indices)",
                'memref.store(arith.mulf(total, arith.constant(ir.F32Type.get(), '
                '1.01 if spec.dtype == "{dt}" else 1.0)), d, wave.indices)',
                ALL_DTYPES),
    # -- sinks and the lse gradient (the row kernels) --------------------------------------------------
    Mutant("sinks: dsinks sign flipped", ROWS,
           "arith.negf(arith.mulf(probability, d))", "arith.mulf(probability, d)"),
    Mutant("dlse: not subtracted from D", ROWS,
           'total = arith.subf(total, memref.load(operands["dlse"], row))',
           'total = arith.subf(total, arith.mulf(memref.load(operands["dlse"], row), f32(0.0)))'),
    Mutant("sinks: a row whose lse is -inf is not guarded", ROWS,
           "return arith.select(empty, f32(0.0), ",
           "return arith.select(arith.constant(ir.IntegerType.get_signless(1), 0), f32(0.0), "),
    Mutant("sinks: every lane of a row adds the row's term", ROWS,
           "_add_wave_sum(arith.select(stores, term, f32(0.0)), ", "_add_wave_sum(term, "),
    Mutant("sinks (deterministic): the last batch is not summed", ROWS,
           "over_batches = scf.ForOp(index(0), batches, index(1), [f32(0.0)])",
           "over_batches = scf.ForOp(index(0), arith.subi(batches, index(1)), index(1), [f32(0.0)])"),
    # -- the tiled body --------------------------------------------------------------------------------
    *_per_dtype("tiled: dS x1.01", TILED,
                "ds = [[[arith.mulf(p_g, arith.subf(dp_g, self.per_group(dsum[ni][column[g]])))",
                'ds = [[[arith.mulf(arith.mulf(p_g, arith.subf(dp_g, self.per_group(dsum[ni][column[g]]))), '
                'splat(f32(1.01 if spec.dtype == "{dt}" else 1.0), [atom.group_width]))',
                TILED_DTYPES),
    Mutant("tiled: P exponent x1.005", TILED,
           "groups.append(fmha.Exp2Op.build(exp2_argument(score, row_lse(ni, column[g]), spec, contract())))",
           "groups.append(fmha.Exp2Op.build(arith.mulf(exp2_argument(score, row_lse(ni, column[g]), spec, contract()), "
           "splat(f32(1.005), [atom.group_width]))))"),
    *_per_dtype("tiled: dV x0.99", TILED,
                "self.store_grad(self.dv_out, dv, self.dv_atom, self.dkv_v, None, self.hdim_v)",
                'self.store_grad(self.dv_out, dv, self.dv_atom, self.dkv_v, 0.99 if self.spec.dtype == "{dt}" '
                'else None, self.hdim_v)',
                TILED_DTYPES),
    *_per_dtype("tiled: dK x0.99", TILED,
                "self.store_grad(self.dk_out, dk, self.dk_atom, self.dkv, self.spec.scale, self.hdim_q)",
                'self.store_grad(self.dk_out, dk, self.dk_atom, self.dkv, self.spec.scale * (0.99 if '
                'self.spec.dtype == "{dt}" else 1.0), self.hdim_q)',
                TILED_DTYPES),
    *_per_dtype("tiled: dQ x0.99", TILED,
                "value, q = pick(groups), self.coordinate(",
                'value, q = arith.mulf(pick(groups), splat(f32(0.99 if self.spec.dtype == "{dt}" else 1.0), '
                'vector_shape(pick(groups).type))), self.coordinate(',
                TILED_DTYPES),
    # -- the matrix layouts: the interpreter and the lowering evaluate the same functions, so a wrong
    # -- instruction layout fools both alike and only the second source (the vendors' figures) catches it;
    # -- a wrong program layout (which rows each lane addresses) breaks the lowering alone
    Mutant("layout: MFMA accumulator row groups of the two lane halves swapped", "fmha_mlir/matrix_layouts.py",
           "4 * (lane // shape.n) + (4 * groups * (register // 4) + register % 4)",
           "4 * (groups - 1 - lane // shape.n) + (4 * groups * (register // 4) + register % 4)"),
    Mutant("layout: mma.sync accumulator registers 0 and 1 hold each other's rows", "fmha_mlir/matrix_layouts.py",
           "return group + 8 * register, thread * 2 + element",
           "return group + 8 * (1 - register), thread * 2 + element"),
    Mutant("layout: ldmatrix x4 lanes address the 8x8 matrices in the other order", "fmha_mlir/matrix_layouts.py",
           "return (row8 + low * 8, high) if rows_first else (row8 + high * 8, low)",
           "return (row8 + high * 8, low) if rows_first else (row8 + low * 8, high)"),
    Mutant("amd: MFMA emulation scatters D by the inverse of its layout", "fmha_mlir/runtime/interp/ops_amdgpu.py",
           "env[out] = d[:, d_positions].reshape(g.lanes, shape.c_registers)",
           "env[out] = d[:, c_holders.reshape(d_positions.shape)].reshape(g.lanes, shape.c_registers)"),
    Mutant("interp: a buffer load past the end reads the last element instead of zero",
           "fmha_mlir/runtime/interp/ops_amdgpu.py",
           "values = np.where(inside[:, None], values, np.zeros((), values.dtype))", "values = values"),
    Mutant("interp: a vector atomic's elements all land on the first index", "fmha_mlir/runtime/interp/ops_memory.py",
           "at[:-1] + [at[-1] + e]", "at[:-1] + [at[-1]]"),
    Mutant("tiled: GQA group starts at head kv (not kv * g)", TILED,
           "first_head = arith.muli(self.kv_head, index(self.spec.gqa_ratio))", "first_head = self.kv_head"),
    Mutant("tiled: first key of each block dropped (K copied one row late)", TILED,
           "self.copy.rows(self.k, kv_prefix, self.k0, self.seqlen_k,",
           "self.copy.rows(self.k, kv_prefix, arith.addi(self.k0, index(1)), self.seqlen_k,"),
    Mutant("tiled: last key dropped (K rows stop at seqlen_k - 1)", TILED,
           "self.copy.rows(self.k, kv_prefix, self.k0, self.seqlen_k,",
           "self.copy.rows(self.k, kv_prefix, self.k0, arith.subi(self.seqlen_k, index(1)),"),
    Mutant("tiled: last query block skipped", TILED,
           "blocks = arith.maxsi(arith.subi(hi, lo), index(0))",
           "blocks = arith.maxsi(arith.subi(arith.subi(hi, index(1)), lo), index(0))"),
    Mutant("tiled: a causal tile is cut only past its last query (wrong corner)", GEOMETRY,
           "return k_last > q0\n", "return k_last > q0 + (block_m - 1)\n"),
    Mutant("tiled: a bottom-right causal tile cut by one key taken as uncut", GEOMETRY,
           "return k_last > q0 + off\n", "return k_last > q0 + off + 1\n"),
    Mutant("tiled: a key block crossing seqlen_k taken as uncut (tail)", GEOMETRY,
           "tail = key_tail(k0, block_n, seqlen_k) | (q0 + block_m > seqlen_q)", "tail = q0 + block_m > seqlen_q"),
    Mutant("tiled: a query block crossing seqlen_q taken as uncut (tail)", GEOMETRY,
           "tail = key_tail(k0, block_n, seqlen_k) | (q0 + block_m > seqlen_q)",
           "tail = key_tail(k0, block_n, seqlen_k)"),
    Mutant("mask: keys past seqlen_k shown (zero-filled, not masked)", GEOMETRY,
           "return (q < seqlen_q) & (k < seqlen_k)", "return q < seqlen_q"),
    Mutant("tiled: a masked tile subtracts an lse of -inf as it is", SCORES,
           'return arith.select(minus_inf, _constant(float("inf"), lse), lse)', "return lse"),
    # -- the schedule's operands and positions, and the atoms' (every tiled body) ----------------------------
    # The MFMA copies zero rows past a sequence end, but tail tiles are masked too: a load that keeps the
    # clamped row's values instead computes the same gradients, an equivalent mutant, so none is listed.
    Mutant("tiled: dQ's A read along the rows of dS^T (untransposed)", TILED,
           'Operand(tiles["ds"], False, None, dqt.row0)', 'Operand(tiles["ds"], True, None, dqt.row0)'),
    Mutant("tiled: dK's B read along the rows of Q (untransposed)", TILED,
           'Operand(tiles["q"], False, rows, dkv.col0)', 'Operand(tiles["q"], True, rows, dkv.col0)'),
    # With the tail loop split, rows past seqlen_q are hidden by their lse of +inf and, besides, by the
    # zeros their copies fill in: a fill of 0 instead is an equivalent mutant, so none is listed for it.
    Mutant("tiled (tail loop split): the key block's tail runs the unmasked loop", TILED,
           "for block, masked in ((tail.then_block, True), (tail.else_block, False)):",
           "for block, masked in ((tail.then_block, False), (tail.else_block, False)):"),
    Mutant("tiled: a cut tile's keys one row late", TILED,
           "keys = self.along(arith.addi(self.k0, sdp.row0), mi * atom.m, g, 0)",
           "keys = self.along(arith.addi(self.k0, sdp.row0), mi * atom.m + 1, g, 0)"),
    Mutant("tiled (padded head dim): the copies read the columns past the head dim", "passes/copy_atoms.py",
           "return arith.andi(valid, inside), arith.minui(col, index(head_dim - COPY_ELEMENTS))",
           "return valid, arith.minui(col, index(head_dim - COPY_ELEMENTS))"),
    Mutant("tiled (padded head dim): dQ, dK, dV skip the head dim's last 8 columns too", TILED,
           "with if_then(arith.cmpi(arith.CmpIPredicate.ult, col, index(head_dim))):",
           "with if_then(arith.cmpi(arith.CmpIPredicate.ult, col, index(head_dim - 8))):"),
    Mutant("tiled (padded head dim): S^T's and dP^T's contractions stop a k step short of the head dim", TILED,
           "(-(-h // self.atom.k) * self.atom.k for h in (spec.hdim_q, spec.hdim_v))",
           "(h // self.atom.k * self.atom.k for h in (spec.hdim_q, spec.hdim_v))"),
    Mutant("mma.sync atom: a register's second element takes the first's position", "passes/mma_atoms.py",
           "return LAYOUT.c.offset(group, element)", "return LAYOUT.c.offset(group, 0)"),
    Mutant("mfma atom: every register takes the first register's row", "passes/mfma_atom.py",
           "return self.shape.c.offset(element)", "return self.shape.c.offset(0)"),
    # -- score modifications (every body) -------------------------------------------------------------
    Mutant("softcap: dS not multiplied by 1 - tanh^2", "passes/score_mods.py",
           "return arith.mulf(ds, _tanh(dot, spec, slope=True)[1])", "return ds"),
    Mutant("alibi: each head takes the next head's slope", "passes/score_mods.py",
           "arith.addi(head, index(1))", "arith.addi(head, index(2))"),
    Mutant("alibi: the distance misses the bottom-right shift", "passes/score_mods.py",
           "arith.addi(q_pos, arith.subi(seqlen_k, seqlen_q))", "q_pos"),
    Mutant("softcap: tanh's argument not divided by the cap", "passes/score_mods.py",
           "_constant(2 * spec.scale * LOG2_E / spec.softcap, dot)", "_constant(2 * spec.scale * LOG2_E, dot)"),
    Mutant("bias: heads and batches swapped in the bias index", "passes/score_mods.py",
           "self.prefix = [_broadcast_index(batch, self.bias, 0), _broadcast_index(head, self.bias, 1)]",
           "self.prefix = [_broadcast_index(head, self.bias, 0), _broadcast_index(batch, self.bias, 1)]"),
    Mutant("bias: key k reads the bias of key k + 1", "passes/score_mods.py",
           "arith.minui(k, last_k)", "arith.minui(arith.addi(k, index(1)), last_k)"),
    Mutant("dbias: dS added twice", "passes/score_mods.py",
           "accumulate(value, self.dbias, self.grad_prefix + [q, k], stored=self.deterministic)",
           "accumulate(arith.addf(value, value), self.dbias, self.grad_prefix + [q, k], stored=self.deterministic)"),
    Mutant("dbias: the convert skips every other key", ROWS,
           "scf.ForOp(wave.lane, memref.dim(out, index(3)), index(wave.size))",
           "scf.ForOp(wave.lane, memref.dim(out, index(3)), index(2 * wave.size))"),
    Mutant("alibi slopes: every batch reads the first batch's slopes", "passes/score_mods.py",
           "self.at = [_broadcast_index(batch, slopes, 0), head]", "self.at = [index(0), head]"),
    Mutant("alibi slopes: d(slopes) with the sign of the distance flipped", "passes/score_mods.py",
           "weighted = arith.mulf(ds, arith.negf(self._distance(q_pos, k_pos, ds)))",
           "weighted = arith.mulf(ds, self._distance(q_pos, k_pos, ds))"),
    Mutant("tiled: d(slopes) summed over one lane of each wave", TILED,
           "total = fmha.WaveReduceOp.build(total, self.config.wave_size)", "total = total"),
    # -- deterministic mode (tiled bodies: one dQ partial per key block) ------------------------------
    Mutant("deterministic: every key block writes the batch's first partial", TILED,
           "arith.muli(self.batch, arith.ceildivui(self.seqlen_k, index(self.bn))), self.key_block)",
           "arith.muli(self.batch, arith.ceildivui(self.seqlen_k, index(self.bn))), index(0))"),
    Mutant("deterministic: dbias stored at the bias's broadcast index", "passes/score_mods.py",
           "self.grad_prefix = [batch, head] if deterministic else self.prefix", "self.grad_prefix = self.prefix"),
    Mutant("deterministic: the convert sums one partial fewer", "passes/lane_slice.py",
           "outer = scf.ForOp(lo, hi, index(1), [zero])",
           "outer = scf.ForOp(arith.addi(lo, index(1)), hi, index(1), [zero])"),
    Mutant("deterministic: the convert stops before the last key block that reaches the row", GEOMETRY,
           "maximum(0, ceildiv(end + off + right, block_n))", "maximum(0, (end + off + right) // block_n)"),
    # -- the mask rule (the oracle, the interpreter and the lowering evaluate the same function, so the
    # -- tests that state the rule by hand kill these) --------------------------------------------------
    Mutant("mask: causal_top_left admits key q+1", GEOMETRY,
           "return k <= q\n", "return k <= q + 1\n"),
    Mutant("mask: causal_bottom_right admits the key right of the diagonal", GEOMETRY,
           "return k <= last\n", "return k <= last + 1\n"),
    Mutant("mask: window admits the key left of it", GEOMETRY,
           "seen = k >= last - mask.window_left", "seen = k >= last - mask.window_left - 1"),
    Mutant("mask: window admits the key right of it", GEOMETRY,
           "seen = seen & (k <= last + mask.window_right)", "seen = seen & (k <= last + mask.window_right + 1)"),
    # -- Hopper pieces (the wgmma probe and its warp-specialised variant, in the interpreter) -----------
    Mutant("hopper: the consumers read a stage without waiting for its mbarrier phase", "passes/hopper_probe.py",
           "            self.pipeline.wait(stage, parity)\n", ""),
    Mutant("hopper: descriptors name the 64-byte swizzle for 128-byte tiles", "fmha_mlir/wgmma_layouts.py",
           "DESCRIPTOR_MODE = {0: 0, 128: 1, 64: 2, 32: 3}", "DESCRIPTOR_MODE = {0: 0, 128: 2, 64: 1, 32: 3}"),
    Mutant("hopper: a stage's expect-tx is one box short", "passes/hopper_probe.py",
           "self.pipeline.commit(stage, shape.stage_bytes)", "self.pipeline.commit(stage, shape.stage_bytes - 8192)"),
    Mutant("hopper: the producer refills a stage before the consumers release it", "passes/hopper_probe.py",
           "                    probe.pipeline.acquire(kb % STAGES, (kb // STAGES - 1) % 2)\n",
           "                    pass\n"),
    Mutant("hopper: the dQ writer reuses its tile before the reduce-add's reads are waited for",
           "passes/hopper_probe_ladder.py", "        bulk_wait(0, read=True)\n", ""),
    Mutant("hopper: the dQ writer's reduce-add swaps its coordinates", "passes/hopper_probe_ladder.py",
           ".reduce_add(smem, 0, [0, plan.row])", ".reduce_add(smem, 0, [plan.row, 0])"),
    # -- the wgmma body (sm_90a, in the interpreter) ----------------------------------------------------
    Mutant("wgmma: copies write the tiles unswizzled (descriptors still name the 128-byte swizzle)",
           "passes/wgmma_tiles.py", "as_value(layout.physical(row_lane, chunk_lane * 8 + lane_col) // 2)",
           "as_value(layout.offset(row_lane, chunk_lane * 8 + lane_col) // 2)"),
    Mutant("wgmma: dP^T read before its group is waited for", TILED,
           '            atom.complete(0)\n            dsum, = self.row_values(stage, ("d",))\n',
           '            dsum, = self.row_values(stage, ("d",))\n'),
    Mutant("wgmma: dQ read while its group (issued before dK's) is still in flight", TILED,
           "        dk = dk_product()\n        atom.complete(1)\n",
           "        dk = dk_product()\n        atom.complete(2)\n"),
    Mutant("wgmma: no wgmma.fence before a chain (its zeros / packed A fragments written unfenced)",
           "passes/wgmma_mma_atom.py", "        wgmma_atom.fence()\n        out = [list(row) for row in acc]\n",
           "        out = [list(row) for row in acc]\n"),
    Mutant("wgmma: the RS operand of each k16 step takes the next step's registers", "passes/wgmma_mma_atom.py",
           "j = (k0 % self.n) // K", "j = ((k0 % self.n) // K + 1) % (self.n // K)"),
    Mutant("wgmma: a group's second element takes the first's column", "fmha_mlir/wgmma_layouts.py",
           "8 * (register // 4) + register % 2\n", "8 * (register // 4)\n"),
    Mutant("wgmma: stmatrix takes a warp's 16 x 16 block column-first (matrices 1 and 2 swapped)",
           "fmha_mlir/wgmma_layouts.py", "ldmatrix_address(thread % 32, 4, rows_first=True)",
           "ldmatrix_address(thread % 32, 4, rows_first=False)"),
    Mutant("wgmma d256: a narrow S^T's P^T / dS^T stores ignore the warpgroup's columns inside the block",
           "passes/wgmma_mma_atom.py", "chunk_lane = (Ix.lane(col, lanes) // 8) % (BLOCK // 8)", "chunk_lane = 0"),
    Mutant("wgmma d256: a dQ run's rows r and r + 8 swapped in its v4 atomic", TILED,
           "for g in (first, second) for e in range(atom.group_width)])",
           "for g in (second, first) for e in range(atom.group_width)])"),
    Mutant("wgmma d256: the convert reads a fragment-order dq_acc in logical order", ROWS,
           "read = read_fragments if fragments else None", "read = None"),
    Mutant("wgmma d192: a narrow product's B descriptor starts at its block, not at its column inside it",
           "passes/wgmma_tiles.py", "            if inside_block:\n", "            if False:\n"),
    Mutant("wgmma d192: a warpgroup's 96 columns as one m64n96 (a product across a swizzled block's edge)",
           "passes/wgmma_mma_atom.py", "self.lanes, gcd(cols, self.n))", "self.lanes, cols)"),
    Mutant("wgmma d192: a dQ run that continues on the next row takes the lane's unshifted place",
           "fmha_mlir/wgmma_layouts.py", "    return 8 * shift, dq_fragment_position(rows, cols - 8 * shift, hdim)",
           "    return 0, dq_fragment_position(rows, cols, hdim)"),
    Mutant("tiled: bf16 dQ atomics add dS K unscaled", TILED,
           "scaled = arith.mulf(value, splat(f32(self.spec.scale), [2]))", "scaled = value"),
    # -- the warp-specialised wgmma body (a producer warpgroup, dQ's bulk reduce-adds) ------------------
    Mutant("producer: no named barrier before the dS^T stores (the other warpgroup's dQ product read them)",
           "passes/warp_roles.py",
           "    def before_shared_stores(self) -> None:\n        named_barrier(CONSUMER_BARRIER, self.consumers)\n",
           "    def before_shared_stores(self) -> None:\n        pass\n"),
    Mutant("producer (deterministic): the writer reduce-adds dQ's tile without waiting for its turn",
           "passes/warp_roles.py",
           "fmha.SemaphoreWaitOp.build(self.turn_of(q0), self.operands[DQ_SEMAPHORES], [self.batch, head, m])",
           "None"),
    Mutant("producer (deterministic): the writer signals the next turn before its reduce-adds completed",
           "passes/warp_roles.py", "            bulk_wait(pending, read=False)\n", "            pass\n"),
    Mutant("producer (deterministic, turns overlapped): the writer passes a turn on before the step's adds "
           "completed", "passes/warp_roles.py", "self.pass_turn(previous, pending=1)",
           "self.pass_turn(previous, pending=2)"),
    Mutant("producer (deterministic): key blocks take turns last to first against the grid's dispatch order",
           TILED, '        if in_turns and config.turn_order == "last_to_first":', "        if False:"),
    Mutant("producer (deterministic): key blocks take turns first to last against the grid's dispatch order",
           "passes/warp_roles.py", 'if self.config.turn_order == "last_to_first" else key_block - first',
           "if True else key_block - first"),
    Mutant("L2 sections: the last section taken as wide as the others", "fmha_mlir/bodies/tiled.py",
           "    width = minimum(section, heads - first)\n", "    width = section\n"),
    Mutant("L2 sections: a section's heads major, its key blocks minor (the turns' dispatch order lost)",
           "fmha_mlir/bodies/tiled.py", "    return rest // width, first + rest % width\n",
           "    return rest % key_blocks, first + rest // key_blocks\n"),
    Mutant("producer: the consumers' budget counts registers the producer keeps (more than the SM's file)",
           "fmha_mlir/bodies/wgmma.py",
           "    shared = (entry_registers(config) * config.threads - config.producer_registers * producers) \\\n",
           "    shared = (entry_registers(config) * config.threads) \\\n"),
    Mutant("producer: consumers do not wait for a stage's TMA bytes", "passes/warp_roles.py",
           "self.pipeline.wait(stage, self.parity(arith.divui(it, index(self.config.stages))))", "None"),
    Mutant("producer: tensor maps in the 64-byte swizzle (the tiles are in the 128-byte one)",
           "fmha_mlir/bodies/wgmma.py", "(1, 1, getattr(config, rows), BLOCK_COLUMNS), SWIZZLE)",
           "(1, 1, getattr(config, rows), BLOCK_COLUMNS // 2), SWIZZLE // 2)"),
    Mutant("producer: dQ's tile reduce-added one query row late", "passes/warp_roles.py",
           "[index(b * DQ_BOX_COLUMNS), q0, head, self.batch]",
           "[index(b * DQ_BOX_COLUMNS), arith.addi(q0, index(1)), head, self.batch]"),
    Mutant("producer: dQ's tile x0.99 (bulk reduce-adds)", "passes/warp_roles.py",
           "                    value = arith.select(odd, pieces[rows, f32_store_column(cols, 1)], value)\n",
           "                    value = arith.mulf(arith.select(odd, pieces[rows, f32_store_column(cols, 1)], value), "
           "vector.broadcast(value.type, arith.constant(ir.F32Type.get(), 0.99)))\n"),
    Mutant("producer: odd rows store their own column group at the swapped group's place", "passes/warp_roles.py",
           "                    value = arith.select(odd, pieces[rows, f32_store_column(cols, 1)], value)\n",
           "                    pass\n"),
    Mutant("wgmma: every k step's descriptor reads its operand's first 16 columns (offsets dropped)",
           "passes/wgmma_mma_atom.py", "        return wgmma_atom.offset_descriptor(base, constant)\n",
           "        return wgmma_atom.offset_descriptor(base, constant - offset // 16)\n"),
    Mutant("producer: dQ's tile written before the writer freed it", "passes/warp_roles.py",
           "            self.dq_barriers.wait(DQ_FREE, self.parity(arith.subi(it, index(1))))\n",
           "            pass\n"),
    # -- dK and dV by TMA box stores (config.dkv_tma_store) --------------------------------------------------
    Mutant("dK, dV by TMA: rounded into K's tile while the other warpgroup's last products read it",
           "passes/warp_roles.py", "        self.before_shared_stores()\n        for acc, atom",
           "        for acc, atom"),
    Mutant("dK, dV by TMA: box stores issued before the other consumers' stmatrix (no barrier)",
           "passes/warp_roles.py",
           "        fence_proxy_async()\n        named_barrier(CONSUMER_BARRIER, self.consumers)\n"
           "        with if_then(", "        fence_proxy_async()\n        with if_then("),
    Mutant("dK, dV by TMA: box stores read the tiles without a proxy fence", "passes/warp_roles.py",
           "            atom.store_groups(self.tiles[name], values, tile.row0, tile.col0, after_loop=True)\n"
           "        fence_proxy_async()\n",
           "            atom.store_groups(self.tiles[name], values, tile.row0, tile.col0, after_loop=True)\n"),
    Mutant("dK, dV by TMA: the work-group ends before its box stores read shared memory", "passes/warp_roles.py",
           "            bulk_commit()\n            bulk_wait(0, read=True)\n\n    def before_step",
           "            bulk_commit()\n\n    def before_step"),
    Mutant("dK, dV by TMA: dK stored unscaled", "passes/warp_roles.py",
           '((dk, self.dk_atom, self.dkv, self.spec.scale, "k")', '((dk, self.dk_atom, self.dkv, None, "k")'),
    Mutant("dK, dV by TMA: the box of a head dim's last partial 64 columns left out", "passes/warp_roles.py",
           "for b in range(-(-head_dim // BLOCK_COLUMNS)):", "for b in range(head_dim // BLOCK_COLUMNS):"),
    # -- dQ converted in the main kernel's grid (config.dq_convert_rows) -------------------------------------
    Mutant("dQ converted in the grid: no wait for the head's key blocks", "passes/dq_convert_tail.py",
           "        fmha.SemaphoreWaitOp.build(arith.index_cast(ir.IntegerType.get_signless(32), key_blocks), done,\n"
           "                                   [batch, kv_head], backoff_ns=POLL_BACKOFF_NS)\n", ""),
    Mutant("dQ converted in the grid: no barrier after the polling thread's wait", "passes/dq_convert_tail.py",
           "    gpu.barrier()\n", ""),
    Mutant("dQ converted in the grid: waits for all but one of the head's key blocks", "passes/dq_convert_tail.py",
           "arith.index_cast(ir.IntegerType.get_signless(32), key_blocks)",
           "arith.index_cast(ir.IntegerType.get_signless(32), arith.subi(key_blocks, index(1)))"),
    Mutant("dQ converted in the grid: the softmax scale left out", "passes/dq_convert_tail.py",
           "lane_slice, spec.scale)", "lane_slice)"),
    Mutant("dQ converted in the grid: the writer counts its key block once its last adds read, not completed",
           "passes/warp_roles.py", "            bulk_wait(0, read=False)\n            if overlap:",
           "            bulk_wait(0, read=True)\n            if overlap:"),
]


@dataclass
class Outcome:
    mutant: Mutant | None    # None: the unmutated baseline
    killers: list[str]
    seconds: float
    note: str = ""
    first_failure: bool = False

    @property
    def killed(self) -> bool:
        return bool(self.killers)


def check_mutants(mutants: list[Mutant]) -> list[str]:
    """Problems with the list itself: a file missing, an original text absent or ambiguous."""
    problems = []
    names = [m.name for m in mutants]
    problems += [f"duplicate mutant name {n!r}" for n in sorted(set(names)) if names.count(n) > 1]
    for m in mutants:
        path = ROOT / m.path
        count = path.read_text().count(m.original) if path.is_file() else -1
        if count != 1:
            where = "is missing" if count < 0 else f"contains its original text {count} times (needs exactly 1)"
            problems.append(f"mutant {m.name!r}: {m.path} {where}: update the mutant to the code")
    return problems


def snapshot(directory: Path) -> Path:
    """The package (mapped as setuptools maps it), test/python and pyproject.toml under `directory`:
    taken once, so that edits to the working tree during a run change nothing."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for source, target in PACKAGE_DIRS.items():
        shutil.copytree(ROOT / source, directory / "pkg" / target, ignore=ignore, dirs_exist_ok=True)
    shutil.copytree(ROOT / "test" / "python", directory / "test" / "python", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", directory / "pyproject.toml")
    return directory


# Python errors a mutant's own text causes: a test failing with one of these did not catch a wrong number.
BROKEN_ERRORS = "NameError|SyntaxError|IndentationError|ImportError|UnboundLocalError|AttributeError|TypeError"


def run_subset(base: Path, mutant: Mutant | None, first_failure: bool = False, hint: tuple[str, ...] = ()
               ) -> Outcome:
    """The subset on a scratch copy with `mutant` applied; first_failure: stop at the first failing test
    (enough to know a mutant is killed, and what CI needs; docs/mutants.md's counts come from full runs).
    hint: subset tests that killed it before (the results file's), run first with first_failure: if one
    fails the mutant is killed by the subset without running the rest, else the whole subset runs."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fmha-mutant-") as tmp:
        scratch = Path(tmp) / "copy"
        shutil.copytree(base, scratch)
        if mutant is not None:
            target = scratch / "pkg" / _package_path(mutant.path)
            target.write_text(target.read_text().replace(mutant.original, mutant.replacement))
        if first_failure and hint:
            outcome = _pytest(scratch, mutant, [_nodeid(t) for t in hint], True, start, hinted=True)
            if outcome.killed or outcome.note.startswith("the mutant is broken"):
                return outcome
        return _pytest(scratch, mutant, list(SUBSET_FILES), first_failure, start)


def _pytest(scratch: Path, mutant: Mutant | None, tests: list[str], first_failure: bool, start: float,
            hinted: bool = False) -> Outcome:
    """Run `tests` (files or node ids) of the copy, under the subset's selection, as one pytest process.
    hinted: node ids from the results file, which may be gone or deselected since (pytest exit 4 / 5:
    then nothing is known yet, not a kill)."""
    env = {**os.environ, "PYTHONPATH": str(scratch / "pkg"), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *tests,
               "-k", SUBSET_SELECTION, *(["-x"] if first_failure else [])]
    try:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Outcome(mutant, [f"the subset (timed out after {TIMEOUT_S} s)"], time.monotonic() - start,
                       first_failure=first_failure)
    killers = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.MULTILINE)
    note = ""
    broken = sorted(set(re.findall(rf"^(?:FAILED|ERROR) \S+ - ({BROKEN_ERRORS})\b", done.stdout, re.MULTILINE)))
    if broken:   # the mutated code does not run: its tests died of that, not of a wrong gradient
        return Outcome(mutant, [], time.monotonic() - start, f"the mutant is broken ({', '.join(broken)}): "
                       + done.stdout[-2000:], first_failure)
    if done.returncode not in ((0, 1, 4, 5) if hinted else (0, 1)) or (done.returncode == 1 and not killers):
        killers.append(f"the subset (pytest exit {done.returncode})")
        note = done.stdout[-2000:] + done.stderr[-2000:]
    return Outcome(mutant, killers, time.monotonic() - start, note, first_failure)


def _nodeid(short: str) -> str:
    """A results file's test name (_short's) as a pytest node id."""
    return "test/python/" + short.replace("::variant[", "::test_variant_matches_the_oracle[")


def _package_path(path: str) -> str:
    top, _, rest = path.partition("/")
    return f"{PACKAGE_DIRS[top]}/{rest}"


def table(outcomes: list[Outcome]) -> str:
    return _table([(o.mutant, _result(o)) for o in outcomes])


def _result(outcome: Outcome) -> dict:
    """A run's entry in the results file: how many subset tests failed (None when the run stopped at the
    first failure) and the first two of them."""
    tests = sorted({_short(k) for k in outcome.killers})
    return {"failing": None if outcome.first_failure else len(tests), "first": tests[:2]}


def _table(rows: list[tuple[Mutant, dict | None]]) -> str:
    lines = ["| mutant (what it breaks) | file | failing tests of the subset: how many, and the first two |",
             "|---|---|---|"]
    for mutant, result in rows:
        if result is None:
            shown = "not in the results file yet"
        elif not result["first"]:
            shown = "**SURVIVED**"
        else:
            count = "killed at the first failure" if result["failing"] is None else str(result["failing"])
            shown = f"{count}: " + ", ".join(f"`{t}`" for t in result["first"])
        lines.append(f"| {mutant.name} | {mutant.path} | {shown} |")
    return "\n".join(lines)


def read_results(path: Path) -> dict:
    """The results file: {"how": how its runs were made, "mutants": {name: entry}}; empty when absent."""
    return json.loads(path.read_text()) if path.is_file() else {}


def merge_results(path: Path, outcomes: list[Outcome]) -> None:
    """Each outcome replaces its mutant's entry; entries of mutants no longer listed are dropped."""
    document = read_results(path)
    results = {**document.get("mutants", {}), **{o.mutant.name: _result(o) for o in outcomes}}
    listed = {m.name for m in MUTANTS}
    document["mutants"] = {name: results[name] for name in sorted(results) if name in listed}
    path.write_text(json.dumps(document, indent=1) + "\n")


def mutant_table(document: dict) -> str:
    """docs/mutants.md: every listed mutant, in list order, with its killing tests from the results file."""
    results = document.get("mutants", {})
    entries = [results.get(m.name) for m in MUTANTS]
    killed = sum(1 for e in entries if e is not None and e["first"])
    missing = entries.count(None)
    return ("# Mutants\n\nGenerated by `python -m fmha_mlir.tools.mutants --table docs/mutants.md` from the mutant "
            "list (tools/mutants.py) and the results of its runs (reports/mutants.json); do not edit by hand. "
            "The subset, how it runs and what killed means: [testing.md](testing.md#mutation-testing).\n\n"
            f"{len(MUTANTS)} mutants: {killed} killed, {len(MUTANTS) - killed - missing} survived, {missing} "
            f"without a recorded run. The runs: {document.get('how', 'not described')}\n\n"
            + _table(list(zip(MUTANTS, entries))) + "\n")


def _short(nodeid: str) -> str:
    return nodeid.replace("test/python/", "").replace("test_variant_matches_the_oracle", "variant")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--only", nargs="*", default=None, help="run the mutants whose name contains one of these")
    parser.add_argument("--results", type=Path, default=None,
                        help="merge this run's outcomes into this results file "
                             "(the committed one: reports/mutants.json)")
    parser.add_argument("--table", type=Path, default=None,
                        help="write the docs' mutant table (docs/mutants.md) from the mutant list and --results-from; "
                             "runs no mutant")
    parser.add_argument("--results-from", type=Path, default=RESULTS,
                        help=f"the results file --table reads (default {RESULTS.relative_to(ROOT)})")
    parser.add_argument("--first-failure", action="store_true",
                        help="stop each mutant's subset at its first failing test (CI: killed or not, in a "
                             "fraction of the time; the table then shows one killing test per mutant)")
    args = parser.parse_args(argv)

    problems = check_mutants(MUTANTS)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.table is not None:
        args.table.write_text(mutant_table(read_results(args.results_from)))
        return 0
    mutants = [m for m in MUTANTS if args.only is None or any(s in m.name for s in args.only)]
    with tempfile.TemporaryDirectory(prefix="fmha-mutants-") as tmp:
        return _run(snapshot(Path(tmp) / "base"), mutants, args)


def _run(base: Path, mutants: list[Mutant], args) -> int:
    baseline = run_subset(base, None)
    if baseline.killed:
        print(f"the unmutated package fails the subset: {baseline.killers}\n{baseline.note}", file=sys.stderr)
        return 2
    print(f"baseline: the subset passes unmutated ({baseline.seconds:.0f} s); {len(mutants)} mutants", flush=True)
    outcomes = []
    known = read_results(RESULTS).get("mutants", {})   # each mutant's killing tests of earlier runs: tried first
    hints = {m.name: tuple((known.get(m.name) or {}).get("first") or ()) for m in mutants}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for outcome in pool.map(lambda mutant: run_subset(base, mutant, args.first_failure, hints[mutant.name]),
                                mutants):
            state = ("SURVIVED" if not outcome.killed else f"killed by {outcome.killers[0]}" if args.first_failure
                     else f"killed by {len(outcome.killers)} tests")
            print(f"  {outcome.mutant.name}: {state} ({outcome.seconds:.0f} s)", flush=True)
            outcomes.append(outcome)
    report = table(outcomes)
    survivors = [o.mutant.name for o in outcomes if not o.killed]
    summary = f"{len(outcomes) - len(survivors)} of {len(outcomes)} mutants killed"
    print(f"\n{report}\n\n{summary}")
    if args.results is not None:
        merge_results(args.results, outcomes)
    if survivors:
        print(f"surviving mutants (the tests miss them): {', '.join(survivors)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
