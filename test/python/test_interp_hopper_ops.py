"""The Hopper probe kernel (passes/hopper_probe.py: TMA through a 2-stage mbarrier pipeline, wgmma SS,
then wgmma RS) run end to end by the interpreter's op handlers (runtime/interp/ops_hopper.py) under the
gate, and planted mutants of its kernel IR, each reported: a missing mbarrier wait, a missing proxy
fence, a wrong swizzle mode (in a descriptor, in a tensor map), a wrong expect-tx byte count."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fmha_mlir.runtime.interp.errors import InterpreterError
from fmha_mlir.tools.hopper_probe import judge_products, probe_inputs, run_interpreted

pytest.importorskip("fmha_mlir.mlir")


@pytest.fixture(scope="module")
def probe():
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.hopper_probe_geometry import ProbeShape
    from fmha_mlir.passes.hopper_probe import probe_module_text

    shape = ProbeShape()
    text = Compiler().compile_module(probe_module_text(shape), "gpu", "sm_90a").interp_ir
    return shape, text, probe_inputs(shape)


def _run(probe, text=None, swizzle=128):
    shape, original, inputs = probe
    return judge_products(shape, inputs, *run_interpreted(text or original, shape, inputs, swizzle))


def test_the_probe_runs_end_to_end_under_the_gate(probe):
    checks = _run(probe)
    assert [c.passed for c in checks] == [True, True], checks


def _lines(text: str, pattern: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines()) if re.search(pattern, line)]


def _edit(text: str, index: int, replacement: list[str]) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:index] + replacement + lines[index + 1:])


def test_a_missing_mbarrier_wait_is_reported(probe):
    _, text, _ = probe
    first_wait = _lines(text, r'^    "nvgpu\.mbarrier\.try_wait\.parity"')[0]   # the consumers' wait for stage 0
    with pytest.raises(InterpreterError, match=r"nvvm\.wgmma\.mma_async .*: reads a wgmma operand in dynamic shared "
                                               r"memory that a TMA load wrote completing on mbarrier 0 of "
                                               r"nvgpu\.mbarrier\.create .* \(phase 0\), and lane 0 .* has not waited"):
        _run(probe, _edit(text, first_wait, []))


def _staged_store(text: str, fence: bool) -> str:
    """Before the RS products, every thread stores one bf16 of V's tile with an ordinary store (as a
    body stages dS), then (optionally) fence.proxy.async, then a barrier."""
    from fmha_mlir.hopper_probe_geometry import STAGES, ProbeShape

    v_base = STAGES * ProbeShape().stage_bytes
    thread = re.search(r'(%\d+) = "gpu\.thread_id"\(\) <\{dimension = #gpu<dim x>\}>', text).group(1)
    smem = re.search(r'(%\d+) = "gpu\.dynamic_shared_memory"', text).group(1)
    space = "#gpu.address_space<workgroup>"
    store = [
        f'    %pv_offset = "arith.constant"() <{{value = {v_base} : index}}> : () -> index',
        f'    %pv_view = "memref.view"({smem}, %pv_offset) : (memref<?xi8, {space}>, index) '
        f'-> memref<128xbf16, {space}>',
        '    %pv_value = "arith.constant"() <{value = 1.0 : bf16}> : () -> bf16',
        f'    "memref.store"(%pv_value, %pv_view, {thread}) : (bf16, memref<128xbf16, {space}>, index) -> ()',
    ]
    if fence:
        store.append('    "nvvm.fence.proxy"() <{kind = #nvvm.proxy_kind<async.shared>, '
                     'space = #nvvm.shared_space<cta>}> : () -> ()')
    store.append('    "gpu.barrier"() : () -> ()')
    rs_fence = _lines(text, r'^    "nvvm\.wgmma\.fence\.aligned"')[-1]
    return _edit(text, rs_fence, store + [text.splitlines()[rs_fence]])


def test_a_missing_proxy_fence_is_reported(probe):
    _, text, _ = probe
    _run(probe, _staged_store(text, fence=True))     # fenced: runs (V changed, so no numbers to judge)
    with pytest.raises(InterpreterError,
                       match=r"llvm\.inline_asm .*: reads a wgmma operand in dynamic shared memory "
                             r"that lane \d+ .* wrote by an ordinary store with no fence\.proxy\.async"):
        _run(probe, _staged_store(text, fence=False))


def test_a_wrong_swizzle_mode_in_a_descriptor_fails_the_gate(probe):
    _, text, _ = probe

    def to_64b(found):   # descriptor bits 62-63: 1 = 128B, 2 = 64B
        value = int(found.group(1))
        return f"<{{value = {value & ~(3 << 62) | (2 << 62)} : i64}}>" if value >> 62 == 1 else found.group(0)

    mutant = re.sub(r"<\{value = (46\d+) : i64\}>", to_64b, text, count=1)   # the first product's A
    assert mutant != text
    checks = _run(probe, mutant)
    assert not checks[0].passed, checks


def test_a_tensor_map_of_another_swizzle_is_reported(probe):
    with pytest.raises(InterpreterError,
                       match=r"nvgpu\.tma\.async\.load .*: the kernel reads boxes \(128, 64\) with a "
                             r"128-byte swizzle through a tensor map encoded with box \(128, 64\) and "
                             r"a 64-byte swizzle"):
        _run(probe, swizzle=64)


@pytest.mark.parametrize("delta,why", [(-512, "its TMA loads complete more bytes than expect-tx announced"),
                                       (512, "expect-tx announced more bytes than its TMA loads complete")])
def test_a_wrong_expect_tx_byte_count_is_reported(probe, delta, why):
    _, text, _ = probe
    commit = _lines(text, r'"nvgpu\.mbarrier\.arrive\.expect_tx"\(%\d+, %\d+')
    line = text.splitlines()[commit[1]]              # the first stage's commit (commit[0] is V's)
    name = re.search(r'expect_tx"\(%\d+, (%\d+)', line).group(1)
    definition = _lines(text, rf"^\s*{name} = \"arith\.constant\"")[0]
    old = text.splitlines()[definition]
    nbytes = int(re.search(r"value = (\d+)", old).group(1))
    mutant = _edit(text, definition, [old.replace(f"value = {nbytes}", f"value = {nbytes + delta}")])
    with pytest.raises(InterpreterError, match=rf"nvgpu\.mbarrier\.try_wait\.parity .*: deadlock: waits for the phase "
                                               rf"of parity 0 of mbarrier 0 .* 0 of 1 arrivals and {delta} transaction "
                                               rf"bytes outstanding \({why}\)"):
        _run(probe, mutant)


def test_reading_tma_data_with_an_ordinary_load_needs_the_wait_too():
    """hopper_sync on its own: an ordinary read of TMA-marked units before the lane observes the phase."""
    from fmha_mlir.runtime.interp.hopper_sync import HopperSync
    from fmha_mlir.runtime.interp.lanes import LaneGrid

    grid = LaneGrid((1, 1, 1), (128, 1, 1), 32, 0, 1)
    sync = HopperSync(grid)
    group = sync.group(0, 2, "the group")
    group.expected[0, 1] = group.pending[0, 1] = 1
    group.initialised[0, 1] = True
    buffer = type("Buffer", (), {"data": np.zeros(64, np.uint8)})()
    sync.tma_write(buffer, np.arange(16, 32), group, 0, 1)
    units, lanes = np.array([[8], [20]]), np.array([3, 4])
    spot, problem = sync.generic_access(buffer, "read", units, lanes, np.zeros(2, np.int64))
    assert spot == (0, 0) and "mbarrier 1 of the group (phase 0)" in problem
    group.pending[0, 1] = 0
    group.complete()
    sync.observed[3, group.first_id + 1] = group.phase[0, 1]
    assert sync.generic_access(buffer, "read", units[:1], lanes[:1], np.zeros(1, np.int64)) is None


def test_a_store_over_a_wgmma_operand_needs_the_wait_and_from_another_warpgroup_a_barrier():
    """hopper_sync on its own: warpgroup 0's product reads units 8..11 in epoch 5. A store over them while it
    is in flight is an error from any thread; once waited for, warpgroup 0's own threads may store, and
    warpgroup 1's only from a later epoch (a barrier after the read); a TMA load over a product in flight
    is an error too."""
    from fmha_mlir.runtime.interp.errors import InterpreterError
    from fmha_mlir.runtime.interp.hopper_sync import HopperSync
    from fmha_mlir.runtime.interp.lanes import LaneGrid

    sync = HopperSync(LaneGrid((1, 1, 1), (256, 1, 1), 32, 0, 1))
    buffer = type("Buffer", (), {"data": np.zeros(64, np.uint8)})()
    read = np.arange(8, 12)
    sync.wgmma_issue((0, 0), slot=7, reads=[(buffer, read)], lane=0, meetings=5)
    sync.wgmma_commit((0, 0))
    units, epoch5, epoch6 = read[None, :], np.array([5]), np.array([6])
    for lane in (3, 130):   # its own warpgroup's thread, the other's
        spot, problem = sync.generic_access(buffer, "write", units, np.array([lane]), epoch6)
        assert spot == (0, 0) and "may still be reading" in problem and "nvvm.wgmma.wait.group" in problem
    group = sync.group(0, 1, "the group")
    with pytest.raises(InterpreterError, match="a TMA load: overwrites shared memory that a wgmma"):
        sync.tma_write(buffer, np.arange(20, 22), group, 0, 0)
    sync.wgmma_wait((0, 0), 0)
    spot, problem = sync.generic_access(buffer, "write", units, np.array([130]), epoch5)
    assert "write after read" in problem and "thread (0, 0, 0)" in problem
    assert sync.generic_access(buffer, "write", units, np.array([130]), epoch6) is None
    assert sync.generic_access(buffer, "write", units, np.array([3]), epoch5) is None
    sync.tma_write(buffer, np.arange(20, 22), group, 0, 0)   # waited for: the stage may be refilled


# -- roles: the warp-specialised probe (a producer and a consumer warpgroup) -----------------------------

@pytest.fixture(scope="module")
def role_probe():
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.hopper_probe_geometry import ProbeShape
    from fmha_mlir.passes.hopper_probe import probe_module_text

    shape = ProbeShape()
    text = Compiler().compile_module(probe_module_text(shape, roles=True), "gpu", "sm_90a").interp_ir
    return shape, text, probe_inputs(shape)


def _run_roles(probe, text=None):
    shape, original, inputs = probe
    return judge_products(shape, inputs, *run_interpreted(text or original, shape, inputs, roles=True))


def test_the_warp_specialised_probe_runs_its_roles_as_coroutines(role_probe):
    checks = _run_roles(role_probe)
    assert [c.passed for c in checks] == [True, True], checks


def test_without_roles_the_producer_deadlocks_in_lockstep(role_probe):
    _, text, _ = role_probe
    lockstep = re.sub(r"fmha\.roles = array<i32: [0-9, ]+>, ", "", text)
    assert lockstep != text
    with pytest.raises(InterpreterError, match=r"try_wait\.parity .*: deadlock: waits for the phase of parity 0 of "
                                               r"mbarrier 2 .* 128 of 128 arrivals .*\(lockstep"):
        _run_roles(role_probe, lockstep)


def test_a_consumer_that_never_releases_a_stage_deadlocks_the_roles(role_probe):
    _, text, _ = role_probe
    releases = _lines(text, r'"nvgpu\.mbarrier\.arrive"\(')
    mutant = "\n".join(line for i, line in enumerate(text.splitlines()) if i not in releases)
    with pytest.raises(InterpreterError, match=r"try_wait\.parity .*: deadlock: .* mbarrier 2 .* 128 of 128 arrivals "
                                               r".*\(roles: no role can make progress\)"):
        _run_roles(role_probe, mutant)


def test_a_missing_wait_is_reported_across_roles(role_probe):
    _, text, _ = role_probe
    consumer_waits = [i for i in _lines(text, r'"nvgpu\.mbarrier\.try_wait\.parity"')
                      if i > _lines(text, r"action increase")[0]]
    with pytest.raises(InterpreterError, match=r"mma_async .*: reads a wgmma operand at byte 8192 of dynamic shared "
                                               r"memory of work-group 0, which nothing has written yet"):
        _run_roles(role_probe, _edit(text, consumer_waits[0], []))   # the consumer gets there first
    with pytest.raises(InterpreterError, match=r"mma_async .*: reads a wgmma operand .* TMA load wrote completing on "
                                               r"mbarrier 1 .* \(phase 0\), and lane 128 .* has not waited"):
        _run_roles(role_probe, _edit(text, consumer_waits[1], []))   # the load was issued, not waited for


def test_register_budgets_must_fit_the_register_file():
    from fmha_mlir.runtime.interp.hopper_sync import HopperSync
    from fmha_mlir.runtime.interp.lanes import LaneGrid

    sync = HopperSync(LaneGrid((1, 1, 1), (384, 1, 1), 32, 0, 1))
    one = np.zeros(1, np.int64)
    sync.set_budget(one, one + 1, 240, True, "setmaxnreg")
    sync.set_budget(one, one + 2, 240, True, "setmaxnreg")          # 24 + 240 + 240 per thread: fits
    with pytest.raises(InterpreterError, match=r"setmaxnreg\.inc to 232 from a budget of 240 registers moves the "
                                               r"other way"):
        sync.set_budget(one, one + 1, 232, True, "setmaxnreg")
    with pytest.raises(InterpreterError, match=r"work-group 0 now ask for 92160 registers \(\[240, 240, 240\] per "
                                               r"thread\), more than the SM's 65536"):
        sync.set_budget(one, one, 240, False, "setmaxnreg")


def _handoff(barrier: str, threads: int = 64) -> str:
    """Roles of 32 threads: the first writes workgroup memory, a named barrier, the second reads it."""
    sync = (f'    %bid = arith.constant 1 : i32\n    %bn = arith.constant {threads} : i32\n'
            '    "nvvm.barrier"(%bid, %bn) <{aligned = true, operandSegmentSizes = array<i32: 1, 1>}> '
            ': (i32, i32) -> ()'
            if barrier else "")
    return f"""
gpu.module @m {{
  gpu.func @k(%out: memref<32xf32>) workgroup(%buf : memref<32xf32, #gpu.address_space<workgroup>>) kernel
      attributes {{fmha.roles = array<i32: 0, 32, 32, 64>}} {{
    %t = gpu.thread_id x
    %c32 = arith.constant 32 : index
    %first = arith.cmpi ult, %t, %c32 : index
    scf.if %first {{
      %i = arith.index_cast %t : index to i32
      %f = arith.sitofp %i : i32 to f32
      memref.store %f, %buf[%t] : memref<32xf32, #gpu.address_space<workgroup>>
    }}
{sync}
    %second = arith.cmpi uge, %t, %c32 : index
    scf.if %second {{
      %j = arith.subi %t, %c32 : index
      %x = memref.load %buf[%j] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %x, %out[%j] : memref<32xf32>
    }}
    gpu.return
  }}
}}
"""


@pytest.mark.parametrize("barrier,threads,error", [
    (True, 64, None),
    (False, 64, r"memref\.load .*: data race on .* which lane \d+ .* wrote since the work-group's last gpu\.barrier"),
    (True, 96, r"nvvm\.barrier .*: deadlock: barrier 1 of work-group 0 waits for 96 threads, 64 arrived"),
])
def test_named_barriers_order_roles(barrier, threads, error):
    from fmha_mlir.runtime.interp import Interpreter
    from interp_support import generic

    out = np.zeros(32, np.float32)
    interpreter = Interpreter(generic(_handoff(barrier, threads)), 32)
    if error is None:
        interpreter.run_kernel("k", [out], (1, 1, 1), (64, 1, 1))
        np.testing.assert_array_equal(out, np.arange(32))
    else:
        with pytest.raises(InterpreterError, match=error):
            interpreter.run_kernel("k", [out], (1, 1, 1), (64, 1, 1))
