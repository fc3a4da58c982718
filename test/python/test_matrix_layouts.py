"""The lane layouts of fmha_mlir/matrix_layouts.py evaluated three ways agree: on Python ints (what the
interpreter tabulates), on NumPy arrays of every lane at once (what tests and bank checks use), and on
passes.ix.Ix (what the lowering emits: here a kernel that stores each lane's positions, built once per
lane at the kernel's start, run in the interpreter). Which layouts are right is checked elsewhere, against
the vendors' figures (test_interp_nvgpu.py, test_interp_mfma.py) and the hardware."""
import numpy as np
import pytest

from fmha_mlir import matrix_layouts as layouts
from fmha_mlir.mlir import gpu, ir, make_context, memref
from fmha_mlir.passes.ir_builders import collect_ops, index
from fmha_mlir.passes.ix import Ix, LaneValues, as_value
from fmha_mlir.runtime.interp import Interpreter


def _fragment_functions():
    """name -> (lanes, lane -> flat list of the numbers it maps to)."""
    out = {}
    shapes = [("mma", layouts.MMA_M16N8K16)] + [(f"mfma{n}", s) for n, s in sorted(layouts.MFMA_SHAPES.items())]
    for label, shape in shapes:
        for operand in ("a", "b", "c"):
            fragment = getattr(shape, operand)
            out[f"{label}.{operand}"] = (fragment.lanes, lambda lane, f=fragment: [
                x for _, _, row, col in f.positions(lane) for x in (row, col)])
    for matrices in (2, 4):
        for rows_first in (False, True):
            out[f"ldmatrix_address.x{matrices}.{rows_first}"] = (layouts.WARP, lambda lane, m=matrices, r=rows_first:
                                                                 list(layouts.ldmatrix_address(lane, m, r)))
    out["ldmatrix"] = (layouts.WARP, lambda lane: [x for e in range(2) for t in (False, True)
                                                   for x in layouts.ldmatrix(lane, e, t)])
    for chunks in (4, 8, 12, 16, 32):
        out[f"swizzled_chunk.{chunks}"] = (64, lambda lane, c=chunks: [layouts.swizzled_chunk(lane % c, lane // c, c),
                                                                       layouts.swizzled_chunk(3 % c, lane, c)])
        out[f"copy_chunk.{chunks}"] = (256, lambda lane, c=chunks: list(layouts.copy_chunk(lane, c)))
    out["warp_block"] = (8, lambda warp: [*layouts.warp_block(warp, (4, 2), 128, 64),
                                          *layouts.warp_block(warp, (8, 1), 64, 128)])
    return out


FUNCTIONS = _fragment_functions()


def _on_ints(name) -> np.ndarray:
    lanes, function = FUNCTIONS[name]
    return np.array([[int(x) for x in function(lane)] for lane in range(lanes)])


def _on_numpy(name) -> np.ndarray:
    lanes, function = FUNCTIONS[name]
    return np.stack([np.broadcast_to(x, (lanes,)) for x in function(np.arange(lanes))], axis=1)


def _on_ix(name) -> np.ndarray:
    """Each lane of one work-group stores what the function gives on its Ix lane."""
    lanes, function = FUNCTIONS[name]
    width = len(function(0))
    text = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @fmha_kernels {{
    gpu.func @positions(%out: memref<{lanes}x{width}xindex>)
        kernel attributes {{known_block_size = array<i32: {lanes}, 1, 1>}} {{
      gpu.return
    }}
  }}
}}"""
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(text)
        func = collect_ops(module.operation, ["gpu.func"])[0]
        block = func.regions[0].blocks[0]
        returned = next(op for op in block.operations if op.operation.name == "gpu.return")
        with ir.InsertionPoint(returned):
            lane = gpu.thread_id(gpu.Dimension.x)
            marker = index(0)
            lanes_values = LaneValues(ir.InsertionPoint(marker.owner))
            values = function(Ix.lane(lane, lanes_values))
            for i, value in enumerate(values):
                memref.store(as_value(value), block.arguments[0], [lane, index(i)])
        generic = module.operation.get_asm(print_generic_op_form=True)
    out = np.full((lanes, width), -1, np.int64)
    Interpreter(generic, wave_size=32).run_kernel("positions", [out], (1, 1, 1), (lanes, 1, 1))
    return out


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_ints_numpy_and_ix_give_the_same_positions(name):
    on_ints = _on_ints(name)
    np.testing.assert_array_equal(_on_numpy(name), on_ints)
    np.testing.assert_array_equal(_on_ix(name), on_ints)


def test_lane_values_are_built_once_at_the_kernel_start():
    """Evaluating a layout again on a bound lane emits nothing: its arithmetic is built once, before the
    marker that starts the body proper."""
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            lane = index(5)
            marker = index(0)
            lanes = LaneValues(ir.InsertionPoint(marker.owner))
            first = layouts.MMA_M16N8K16.c(Ix.lane(lane, lanes), 1, 1)
            built = len(module.body.operations)
            again = layouts.MMA_M16N8K16.c(Ix.lane(lane, lanes), 1, 1)
        ops = [op.operation.name for op in module.body.operations]
        assert len(ops) == built and [as_value(x) for x in first] == [as_value(x) for x in again]
        assert "arith.divui" in ops and ops[-1] == "arith.constant"   # the marker stays last


def test_an_offset_that_depends_on_the_lane_is_refused():
    skewed = layouts.Fragment(8, 8, 8, 2, 1, lambda lane, r, e: (lane, (lane + r * lane) % 8))
    assert skewed.offset(0) == (0, 0)
    with pytest.raises(ValueError, match="lane-independent"):
        skewed.offset(1)
