"""tools/gpu_matrix.py without a GPU: the plan it builds and runs. --hdim puts every variant at one head dim
(with that head dim's default scale), --table-row runs them on one row of the tiled table instead of the
table's choice: how a row is gated on the H200 before the table takes it."""
import dataclasses
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))   # the tools import each other as scripts

import gpu_matrix  # noqa: E402
from fmha_mlir.bodies.wgmma import WGMMA_TABLE  # noqa: E402


def test_the_default_plan_is_the_table_s_choice_for_every_variant():
    plan = gpu_matrix.configs("sm_90a", "auto")
    assert len(plan) == 3 * 4 * 3 * 2   # dtypes x masks x head dims x GQA ratios, each once
    assert {spec.hdim_q for spec, _ in plan} == {64, 128, 256}
    assert all(config.body == "warp" for spec, config in plan if spec.dtype == "f32")


def test_one_head_dim_on_one_table_row():
    mods = {"hdim_q": 192, "hdim_v": 192, "scale": 0.0}
    plan = gpu_matrix.configs("sm_90a", "auto", mods, table_row=256)
    # f32 is not the tiled body's: f16 / bf16 x 4 masks x 2 GQA ratios, on the d256 row, each spec once
    assert len(plan) == 2 * 4 * 2 and len({spec for spec, _ in plan}) == len(plan)
    assert all(config == WGMMA_TABLE[256] for _, config in plan)
    assert all(spec.hdim_q == spec.hdim_v == 192 and spec.scale == 1 / math.sqrt(192) for spec, _ in plan)
    # the table itself: the same row, with its producer, without L2 sections where a mask cuts tiles with GQA
    table = gpu_matrix.configs("sm_90a", "tiled", mods)
    assert {config for _, config in table} == {WGMMA_TABLE[256],
                                               dataclasses.replace(WGMMA_TABLE[256], l2_section_bytes=0)}
    assert all((config.l2_section_bytes == 0) == (spec.mask.kind != "none" and spec.gqa_ratio > 1)
               for spec, config in table)
    assert len(gpu_matrix.jobs("sm_90a", "auto", False, mods, 256)) == 2 * len(plan)   # the two odd lengths


def test_only_runs_the_variants_whose_kernel_name_matches():
    """--only: a change to one table row is gated on that row's variants alone (d128: 24 kernels, 48 runs)."""
    planned = gpu_matrix.jobs("sm_90a", "tiled")
    d128 = gpu_matrix.select(planned, "_d128x128_")
    assert len(d128) == 48 and {spec.hdim_q for spec, *_ in d128} == {128}
    assert gpu_matrix.select(planned, None) == planned
    with pytest.raises(SystemExit, match=r"--only '_d100x'; they read like fmha_bwd_"):
        gpu_matrix.select(planned, "_d100x")
