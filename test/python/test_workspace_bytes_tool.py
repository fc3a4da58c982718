"""tools/workspace_bytes.py: the workspaces a plan allocates, from the body plans at a row's shape."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import workspace_bytes  # noqa: E402


def _rows(arch: str) -> dict[str, dict]:
    return {r["row"]: r for r in workspace_bytes.report(arch)[1]}


def test_turns_cost_what_the_default_costs_and_partials_a_key_block_each():
    row = "bf16 B2 H16 S8192 D128"
    turns, partials = _rows("sm_90a")[row], _rows("sm_90")[row]
    dq_acc = 2 * 16 * 8192 * 128 * 4
    semaphores = 2 * 16 * (8192 // 64) * 4          # the wgmma d128 row's block_m 64, i32
    dq_done = 2 * 16 * 4   # [B, Hkv] i32: the default plan converts dQ in its grid, deterministic mode by a kernel
    assert turns["turns"] and turns["deterministic_bytes"] == turns["default_bytes"] - dq_done + semaphores
    assert not partials["turns"]
    assert partials["deterministic_bytes"] - partials["default_bytes"] == (8192 // 128 - 1) * dq_acc   # block_n 128
    # d256 keeps its partials on sm_90a too (no writer warp: the consumers add dQ)
    assert not _rows("sm_90a")["bf16 B2 H8 S2048 D256"]["turns"]


def test_a_spec_every_body_refuses_is_reported_not_raised():
    d256 = _rows("gfx942")["bf16 B2 H8 S2048 D256"]   # the tiled d256 tiles exceed gfx942's LDS; warp: no deterministic
    assert d256["deterministic_bytes"] is None and d256["default_bytes"] > 0
