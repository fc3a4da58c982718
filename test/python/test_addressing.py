"""What a target's kernels can address (fmha_mlir/runtime/addressing.py, docs/ir.md "Addressing"): sizes
past the kernels' 32-bit index arithmetic and buffers past an AMD buffer resource's 4 GiB are refused
before anything is allocated, naming the limit; the interpreter, which computes offsets in int64, would
otherwise pass what the hardware gets wrong."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # test_runtime's stand-in bundles, whatever the import mode

from fmha_mlir.errors import RuntimeLaunchError  # noqa: E402
from fmha_mlir.runtime.addressing import BUFFER_RESOURCE_BYTES, buffer_resource_operands, check_extents  # noqa: E402
from fmha_mlir.runtime.cpu_executor import CpuExecutor  # noqa: E402
from fmha_mlir.runtime.runner import Layout, check_tensors  # noqa: E402
from fmha_mlir.spec import AttentionBwdSpec  # noqa: E402
from test_runtime import SPEC, attention_bundle  # noqa: E402

BUFFER_LOADED = {"q", "k", "v", "do", "lse", "d"}   # what the AMD tiled body copies into LDS


@pytest.fixture(scope="module")
def bundles():
    from fmha_mlir.api import compile_bundle
    from fmha_mlir.compiler import Compiler

    compiler = Compiler()
    spec = AttentionBwdSpec("bf16", 64)
    out = {(arch, body): compile_bundle(spec, arch, compiler, body=body)
           for arch, body in (("gfx942", "tiled"), ("gfx942", "warp"), ("sm_90", "tiled"))}
    out["varlen"] = compile_bundle(AttentionBwdSpec("bf16", 64, varlen=True), "gfx950", compiler, body="tiled")
    return out


def test_the_buffer_resource_operands_are_read_from_the_kernels(bundles):
    assert buffer_resource_operands(bundles["gfx942", "tiled"]) == BUFFER_LOADED
    assert buffer_resource_operands(bundles["varlen"]) == BUFFER_LOADED   # through the per-sequence views
    assert buffer_resource_operands(bundles["gfx942", "warp"]) == set()
    assert buffer_resource_operands(bundles["sm_90", "tiled"]) == set()


def _layouts(bundle, rows: int) -> dict:
    """bshd-shaped contiguous layouts of one batch, `rows` query and key rows, for every buffer."""
    shapes = {"lse": (1, 1, rows), "d": (1, 1, rows)}
    return {name: Layout.contiguous(buf["dtype"], shapes.get(name, (1, 1, rows, 64)))
            for name, buf in bundle.buffers.items()}


def test_a_buffer_read_through_a_buffer_resource_must_span_less_than_4_gib(bundles):
    bundle = bundles["gfx942", "tiled"]
    largest = (BUFFER_RESOURCE_BYTES - 1) // (64 * 4)   # the f32 workspaces are the widest per row
    check_extents(bundle, _layouts(bundle, largest))
    with pytest.raises(RuntimeLaunchError) as refused:
        check_extents(bundle, _layouts(bundle, BUFFER_RESOURCE_BYTES // (64 * 2)))   # bf16 q: exactly 4 GiB
    assert str(refused.value) == (
        "tensor 'do' spans 4294967296 bytes (4.00 GiB); the gfx942 tiled body reads it through a buffer resource "
        "(amdgpu.raw_buffer_load), whose 32-bit record count and offsets reach less than 2^32 bytes (4 GiB): "
        "split the batch into calls below that, or use body='warp' (64-bit addresses)")


def test_a_strided_view_counts_by_its_widest_dimension(bundles):
    """A buffer resource's record count is max(size x stride): a head-major view of a larger allocation."""
    bundle = bundles["gfx942", "tiled"]
    layouts = _layouts(bundle, 16)
    layouts["k"] = Layout("bf16", (1, 2, 16, 64), (0, BUFFER_RESOURCE_BYTES // 2, 64, 1))
    with pytest.raises(RuntimeLaunchError, match="tensor 'k' spans 8589934592 bytes"):
        check_extents(bundle, layouts)


@pytest.mark.parametrize("key", [("gfx942", "warp"), ("sm_90", "tiled")])
def test_64_bit_addresses_take_buffers_past_4_gib(bundles, key):
    bundle = bundles[key]
    check_extents(bundle, _layouts(bundle, 2 * BUFFER_RESOURCE_BYTES // (64 * 2)))


def test_a_dimension_past_32_bit_indices_is_refused_before_outputs_are_allocated():
    """Inputs broadcast to 2^31 batches cost no memory; the outputs check_tensors would allocate would."""
    batch = 2**31

    def broadcast(*shape):
        row = np.zeros((1,) * len(shape) + shape[-1:], np.float32 if len(shape) == 2 else np.float16)
        return np.broadcast_to(row, (batch, *shape))

    q, o, lse = broadcast(2, 1, SPEC.hdim_q), broadcast(2, 1, SPEC.hdim_v), broadcast(2, 1)
    k, v = broadcast(1, 4, SPEC.hdim_q), broadcast(1, 4, SPEC.hdim_v)
    with pytest.raises(RuntimeLaunchError, match=r"^batch is 2147483648; the kernels index each dimension in "
                                                 r"32-bit arithmetic, at most 2147483647 \(2\^31 - 1\) elements"):
        check_tensors(attention_bundle(), {"q": q, "k": k, "v": v, "o": o, "do": o, "lse": lse})


def test_the_cpu_executor_names_an_allocation_the_host_cannot_hold():
    with pytest.raises(RuntimeLaunchError, match=r"cannot allocate 4611686018427387904 bytes \(4294967296.0 GiB\)"):
        CpuExecutor().alloc(2**62)


def test_the_large_offsets_tool_builds_and_gates_its_batches(tmp_path, capsys):
    """tools/lab/large_offsets.py end to end on the interpreter (--smoke): the H200 run is the same code on
    4100 batches of 64 heads."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "tools" / "lab"))   # a script, not a package module
    import large_offsets

    assert large_offsets.main(["build", str(tmp_path)]) == 0
    assert large_offsets.main(["run", str(tmp_path), "--smoke", "--report", str(tmp_path / "r.md")]) == 0
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert [(r["batch"], r["grad"]) for r in rows] == [(b, g) for b in (0, 2, 3) for g in ("dq", "dk", "dv")]
    assert all(r["passed"] for r in rows)
    assert large_offsets.BATCH * large_offsets.HEADS * large_offsets.SEQLEN * large_offsets.HDIM > 2**31
