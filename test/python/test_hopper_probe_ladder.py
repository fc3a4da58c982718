"""The wgmma probe's ladder (passes/hopper_probe_ladder.py, fmha_mlir/hopper_probe_geometry.py,
tools/hopper_probe.py) on the CPU: each rung compiles for sm_90a; in each rung's PTX the bytes every
mbarrier expects equal the bytes the TMA boxes that complete on it deliver, with the boxes the host
encodes its tensor maps with (a mismatch never completes the phase: the probe hung on the H200 when B's
map had a 64-row box under a 128-row tile); the host-made shared images run through the interpreter's
wgmma emulation to the gated products; the run side imports no MLIR; a child that outlives the watchdog
is reported as a hang; the dq_reduce rung (TMA reduce-add) in the interpreter, exact, and its planted
mutants (no proxy fence, no commit, no wait before the tile is reused or the kernel ends) reported."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fmha_mlir.dtypes import from_storage, to_storage
from fmha_mlir.hopper_probe_geometry import BLOCK_K, RUNGS, ProbeShape, image_layout, rung
from fmha_mlir.runtime.interp import hopper
from fmha_mlir.runtime.interp.errors import InterpreterError
from fmha_mlir.tools import hopper_probe as tool

SHAPE = ProbeShape()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ptx() -> dict[str, str]:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.passes.hopper_probe_ladder import rung_module_text

    compiler = Compiler()
    return {name: compiler.compile_module(rung_module_text(name, SHAPE), "gpu", "sm_90a").isa for name in RUNGS}


def _transactions(text: str, maps: tuple[str, ...]) -> dict[str, list[int]]:
    """Per mbarrier symbol: [bytes expected by arrive.expect_tx, bytes its TMA boxes deliver], following
    each box load's tensor-map register back to its kernel parameter."""
    params, constants, totals = {}, {}, {}
    for line in text.splitlines():
        if m := re.search(r"mov\.b64\s+(%rd\d+), \w+_param_(\d+);", line):
            params[m[1]] = int(m[2])
        elif m := re.search(r"cvta\.param\.u64\s+(%rd\d+), (%rd\d+);", line):
            params[m[1]] = params[m[2]]
        elif m := re.search(r"mov\.b32\s+(%r\d+), (\d+);", line):
            constants[m[1]] = int(m[2])
        elif m := re.search(r"mbarrier\.arrive\.expect_tx\.shared\.b64 %rd\d+, \[(\w+(?:\+\d+)?)\], (%r\d+);", line):
            totals.setdefault(m[1], [0, 0])[0] += constants[m[2]]
        elif m := re.search(r"cp\.async\.bulk\.tensor\.2d\S* \[%rd\d+\], \[(%rd\d+), \{[^}]*\}\], "
                            r"\[(\w+(?:\+\d+)?)\];", line):
            rows, inner = SHAPE.boxes[maps[params[m[1]]]]
            totals.setdefault(m[2], [0, 0])[1] += rows * inner * 2
    return totals


@pytest.mark.parametrize("name", ["tma", "pipeline", "roles"])
def test_each_barrier_expects_the_bytes_its_boxes_deliver(ptx, name):
    totals = _transactions(ptx[name], rung(name, SHAPE).maps)
    assert totals and all(expected == delivered for expected, delivered in totals.values()), totals


def test_a_box_smaller_than_its_tile_is_caught():
    """The check above on the fault the H200 hung on: B's map encoded with a 64-row box."""
    wrong = ProbeShape.__dict__["boxes"]
    try:
        ProbeShape.boxes = property(lambda self: {**wrong.fget(self), "b": (64, 64)})
        from fmha_mlir.compiler import Compiler
        from fmha_mlir.passes.hopper_probe_ladder import rung_module_text

        text = Compiler().compile_module(rung_module_text("pipeline", SHAPE), "gpu", "sm_90a").isa
        totals = _transactions(text, rung("pipeline", SHAPE).maps)
    finally:
        ProbeShape.boxes = wrong
    assert any(expected != delivered for expected, delivered in totals.values())


def test_rung_ptx_shapes(ptx):
    parities = re.findall(r"mbarrier\.try_wait\.parity\.shared\.b64 P1, \[%r\d+\], ([01]),", ptx["mbarrier"])
    assert parities == ["0", "1"] and "mbarrier.init.shared.b64" in ptx["mbarrier"]
    for name in ("tma", "pipeline", "roles", "mbarrier"):
        init = ptx[name].index("mbarrier.init")
        assert "fence.proxy.async.shared::cta" in ptx[name][init:ptx[name].index("bar.sync")]
    for name in ("ss", "rs"):   # ordinary stores, then the proxy fence, then the work-group barrier
        text = ptx[name]
        assert text.index("st.shared") < text.index("fence.proxy.async.shared::cta") < text.index("bar.sync") \
            < text.index("wgmma.mma_async")
        assert "cp.async.bulk" not in text
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16 \{[^}]*\}, \{[^}]*\}, %rd",
                          ptx["rs"])) == SHAPE.n // 16


def test_the_shared_images_give_the_gated_products():
    inputs = tool.probe_inputs(SHAPE)
    layout = image_layout(SHAPE)
    shared = tool._image(SHAPE, inputs, layout["end"]).view(np.uint8)
    decode = lambda x: from_storage(x, "bf16").astype(np.float32)  # noqa: E731
    c = np.zeros((64, SHAPE.n), np.float32)
    for k16 in range(BLOCK_K // 16):
        c = hopper.wgmma(shared, c, SHAPE.a_tile.descriptor(layout["a"], 0, 16 * k16),
                         SHAPE.b_tile.descriptor(layout["b"], 0, 16 * k16), SHAPE.n, "K", np.uint16, k16 == 0,
                         decode=decode)
    p = decode(to_storage(c, "bf16"))
    c2 = np.zeros((64, SHAPE.n2), np.float32)
    for kb in range(SHAPE.n // 16):
        c2 = hopper.wgmma(shared, c2, p[:, 16 * kb:16 * kb + 16], SHAPE.v_tile.descriptor(layout["v"], 0, 16 * kb),
                          SHAPE.n2, "MN", np.uint16, kb == 0, decode=decode)
    checks = tool.product_checks(SHAPE, inputs, 64, BLOCK_K)
    assert checks["c"](c.astype(np.float64)).passed and checks["c2"](c2.astype(np.float64), c).passed
    assert not checks["c"](np.roll(c, 1, axis=1).astype(np.float64)).passed
    assert not checks["c2"](np.roll(c2, 1, axis=1).astype(np.float64), c).passed


def test_c2_is_judged_on_the_kernels_own_c():
    """An f32 C summed in another order than NumPy's (as the pipeline's k-blocks are) rounds one element
    to the neighbouring bf16 value here: C2 from it is right for that C, and judged so (the H200's
    pipeline C2 missed a float64-C reference by 0.29 for this reason)."""
    inputs = tool.probe_inputs(SHAPE)
    af, bf, vf = (from_storage(inputs[x], "bf16").astype(np.float32) for x in "abv")
    c = np.zeros((SHAPE.m, SHAPE.n), np.float32)
    for k0 in range(0, SHAPE.k, 16):
        c += af[:, k0:k0 + 16] @ bf[:, k0:k0 + 16].T
    round16 = lambda x: from_storage(to_storage(x.astype(np.float32), "bf16"), "bf16").astype(np.float64)  # noqa: E731
    exact = af.astype(np.float64) @ bf.T.astype(np.float64)
    assert np.count_nonzero(round16(c) != round16(exact)) >= 1
    checks = tool.product_checks(SHAPE, inputs, SHAPE.m, SHAPE.k)
    c2 = (round16(c).astype(np.float32) @ vf).astype(np.float64)
    assert checks["c"](c.astype(np.float64)).passed and checks["c2"](c2, c.astype(np.float64)).passed
    assert not checks["c2"](round16(exact) @ vf + 0.1, c.astype(np.float64)).passed


def test_the_expected_tma_bytes_are_swizzled_and_zero_filled_past_k():
    inputs = tool.probe_inputs(SHAPE)
    image = tool._expected_tma(SHAPE, inputs)
    a = SHAPE.a_tile.nbytes
    past = image[a:2 * a].view(np.uint16).reshape(64, 64)            # the last k-block, swizzled rows
    valid = SHAPE.k - (SHAPE.k_blocks - 1) * BLOCK_K
    assert np.count_nonzero(past) <= 64 * valid and sorted(past[past != 0].tolist()) == \
        sorted(inputs["a"][:64, -valid:][inputs["a"][:64, -valid:] != 0].tolist())
    assert np.count_nonzero(image != tool._expected_tma(SHAPE, inputs, swizzle=False)) > 0


def test_the_run_side_imports_no_mlir():
    code = ("import sys; sys.modules['flydsl'] = None\n"
            "import tools.hopper_probe as t\n"
            "from fmha_mlir.hopper_probe_geometry import ProbeShape, image_layout\n"
            "s = ProbeShape(); i = t.probe_inputs(s); t._image(s, i, image_layout(s)['end']); t._expected_tma(s, i)\n"
            "t.product_checks(s, i, 64, 64)\n"
            "dq, p, im = t.dq_reduce_inputs(); t.dq_reduce_check(dq, p, dq, 0)\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_child_past_the_watchdog_is_a_hang(tmp_path, monkeypatch):
    meta = {"shape": vars(SHAPE), "boxes": SHAPE.boxes,
            "rungs": {name: {"binary": f"{name}.cubin"} for name in RUNGS}}
    (tmp_path / "probe.json").write_text(json.dumps(meta))
    (tmp_path / "pipeline.ptxas.txt").write_text("ptxas info")
    monkeypatch.setattr(tool, "WATCHDOG_S", 0.001)
    assert not tool.run(tmp_path, tmp_path / "report.md")
    rows = json.loads((tmp_path / "report.json").read_text())["rungs"]
    assert [r["verdict"] for r in rows] == ["hang"] * len(RUNGS)


def test_dq_reduce_ptx_orders_stores_fence_barrier_reduce_commit_wait(ptx):
    text = ptx["dq_reduce"]
    order = ["st.shared", "fence.proxy.async.shared::cta", "bar.sync",
             "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%rd", "cp.async.bulk.commit_group",
             "cp.async.bulk.wait_group.read"]
    places = [text.index(piece) for piece in order]
    assert places == sorted(places)


def test_a_reduce_box_reads_back_what_a_load_placed_and_drops_what_lies_outside():
    box = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    image = np.zeros(box.nbytes, np.uint8)
    hopper.place_box(image, 0, box, 128)
    assert np.array_equal(hopper.take_box(image, 0, box.shape, np.float32, 128), box)
    assert not np.array_equal(hopper.take_box(image, 0, box.shape, np.float32, 0), box)
    tensor = np.ones((80, 32), np.float32)
    hopper.add_box(tensor, (48, 0), box)
    assert np.array_equal(tensor[48:], 1 + box[:32]) and np.array_equal(tensor[:48], np.ones((48, 32)))


@pytest.fixture(scope="module")
def dq_reduce_ir() -> str:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.passes.hopper_probe_ladder import rung_module_text

    return Compiler().compile_module(rung_module_text("dq_reduce", SHAPE), "gpu", "sm_90a").interp_ir


def test_dq_reduce_in_the_interpreter_adds_each_work_groups_box_once_per_launch(dq_reduce_ir):
    result = tool.run_dq_reduce_interpreted(dq_reduce_ir)
    assert result["verdict"] == "pass", result
    dq, partials, _ = tool.dq_reduce_inputs()
    assert tool.dq_reduce_check(dq, partials, dq + 0.25, 2)["verdict"] == "wrong"


def _without(text: str, *pieces: str) -> str:
    lines = text.splitlines()
    kept = [line for line in lines if not any(piece in line for piece in pieces)]
    assert len(kept) < len(lines)
    return "\n".join(kept)


def _without_reuse(text: str) -> str:
    """The rung without what follows its last work-group barrier (the tile's reuse)."""
    cut = text.rindex('"gpu.barrier"')
    return text[:cut] + text[text.index('"gpu.return"', cut):]


@pytest.mark.parametrize("mutant, message", [
    (lambda t: _without(t, '"nvvm.fence.proxy"'), "no fence.proxy.async since"),
    (lambda t: _without(t, '"nvvm.cp.async.bulk.wait_group"'), "may still be reading"),
    (lambda t: _without(t, '"nvvm.cp.async.bulk.commit.group"'), "may still be reading"),
    (lambda t: _without_reuse(_without(t, '"nvvm.cp.async.bulk.wait_group"')), "ends with bulk writes"),
])
def test_dq_reduce_mutants_are_reported(dq_reduce_ir, mutant, message):
    with pytest.raises(InterpreterError, match=message):
        tool.run_dq_reduce_interpreted(mutant(dq_reduce_ir))
