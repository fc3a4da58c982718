"""The warp-specialised wgmma body (config.producer; passes/warp_roles.py): a producer warpgroup loads K,
V, Q and dO by TMA and LSE and D by ordinary loads through an mbarrier pipeline, the consumer
warpgroups run the schedule. The interpreter runs the two roles as coroutines, with TMA boxes from the
tensor maps the launch plan describes, against the oracle under the one gate; planted synchronisation
bugs are reported by name; what the producer cannot take is refused or falls back."""
from __future__ import annotations

import dataclasses
import re
import types

import pytest

from fmha_mlir.bodies import body_plan, check_config, choose_config
from fmha_mlir.bodies.wgmma import WGMMA_TABLE, register_budgets
from fmha_mlir.compiler import compile_spec
from fmha_mlir.errors import SpecError
from fmha_mlir.problem import ProblemSize
from fmha_mlir.shape_expr import evaluate
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS
from test_wgmma_body import ONE_WARPGROUP, run_variant

PRODUCED = dataclasses.replace(ONE_WARPGROUP, producer=True)
ONE_STAGE = dataclasses.replace(PRODUCED, stages=1)
BULK_DQ = dataclasses.replace(PRODUCED, dq_bulk=True)
STORED_DKV = dataclasses.replace(PRODUCED, dkv_tma_store=True)
CONVERTED_DQ = dataclasses.replace(BULK_DQ, dq_convert_rows=48)   # dQ converted in the grid, 48 rows a work-group
# The table's d128 row as deterministic mode takes it: the convert kernel (tiled_config drops dq_convert_rows).
D128_TURNS = dataclasses.replace(WGMMA_TABLE[128], dq_convert_rows=0)


@pytest.mark.parametrize("spec,size,config", [
    (AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 100, 150), PRODUCED),
    (AttentionBwdSpec("bf16", 64), ProblemSize(2, 2, 200, 150), BULK_DQ),
    (AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(1, 4, 150, 100),
     BULK_DQ),
    (AttentionBwdSpec("bf16", 64, mask=Mask("sliding_window", 20, 7)), ProblemSize(2, 1, 90, 170), ONE_STAGE),
    (AttentionBwdSpec("bf16", 128, mask=Mask("causal_top_left"), gqa_ratio=4), ProblemSize(1, 4, 70, 200),
     WGMMA_TABLE[128]),
    (AttentionBwdSpec("bf16", 64, softcap=30.0, bias="alibi", alibi_slopes=True, dbias=True),
     ProblemSize(1, 2, 70, 100), PRODUCED),
    (AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), deterministic=True), ProblemSize(1, 1, 90, 140),
     PRODUCED),
    (AttentionBwdSpec("bf16", 64, gqa_ratio=2, grad_accum="bf16"), ProblemSize(1, 2, 80, 150), PRODUCED),
    (AttentionBwdSpec("f16", 64, gqa_ratio=2, mask=Mask("causal_bottom_right"), sinks=True, lse_grad=True),
     ProblemSize(2, 4, 90, 70), PRODUCED),
    # dK and dV by TMA box stores: rows past seqlen_k and dV's columns past its head dim (80 on a 128-column
    # tile) dropped by the boxes, dK scaled
    (AttentionBwdSpec("f16", 128, hdim_v=80, mask=Mask("causal_bottom_right"), gqa_ratio=2),
     ProblemSize(2, 2, 90, 150), WGMMA_TABLE[128]),
    (AttentionBwdSpec("bf16", 64, softcap=30.0), ProblemSize(1, 2, 70, 200), STORED_DKV),
], ids=["none-bf16", "bulk-dq-batch2", "bulk-dq-br-gqa-f16", "window-one-stage-batch2", "table-d128-gqa4",
        "softcap-alibi-dslopes", "deterministic", "bf16-dq-atomics", "sinks-dlse", "stored-dkv-dv80-gqa-f16",
        "stored-dkv-softcap"])
def test_the_producer_body_matches_the_oracle(spec, size, config):
    assert config.producer
    isa = run_variant(spec, size, config).isa
    # The consumers copy nothing themselves: every tile comes by TMA, each warpgroup's budget is moved.
    assert "cp.async.bulk.tensor" in isa and "cp.async.cg" not in isa
    producer, consumers = register_budgets(config)
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+);", isa) == [("inc", str(consumers)),
                                                                                    ("dec", str(producer))]
    # dQ by bulk reduce-adds of the shared tile, or by the consumers' atomics
    bulk = "cp.reduce.async.bulk.tensor" in isa
    assert bulk == config.dq_bulk
    assert not (bulk and re.search(r"\b(red|atom)\.[a-z.]*global\.[a-z0-9.]*f32", isa))   # no f32 atomics
    # dK and dV by box stores from shared memory, or by each thread's stores of its pairs
    assert ("cp.async.bulk.tensor.4d.global.shared::cta.tile" in isa) == config.dkv_tma_store


@pytest.mark.parametrize("owner,planted,words", [
    ("ProducerConsumerBackward", "before_step", "has not waited for that phase"),
    ("ProducerConsumerBackward", "after_step", "deadlock"),
    ("MbarrierPipeline", "acquire", "deadlock"),
], ids=["consumers-skip-the-full-wait", "stage-never-released", "producer-refills-a-busy-stage"])
def test_the_interpreter_reports_a_planted_pipeline_bug(monkeypatch, owner, planted, words):
    """The consumers' wait for a stage's TMA bytes, their release of a stage, or the producer's wait for a
    released stage, left out: the interpreter names the op instead of computing what the hardware may not
    (a read of bytes not yet landed; a wait that can never pass, or a phase it passes too early, which
    leaves a later wait stuck)."""
    from fmha_mlir.passes import hopper_sync, warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    cls = getattr(warp_roles, owner, None) or getattr(hopper_sync, owner)
    monkeypatch.setattr(cls, planted, lambda self, *args: None)
    with pytest.raises(InterpreterError, match=words):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 300, 70), PRODUCED)


@pytest.mark.parametrize("planted,words", [
    ("wait", "deadlock|bulk reduce"),   # the consumers run ahead: their DQ_FULL phases alias the writer's
    ("fence", "no fence.proxy.async since"),
], ids=["dq-tile-overwritten-while-reduced", "dq-tile-reduced-without-a-proxy-fence"])
def test_the_interpreter_reports_a_planted_dq_writer_bug(monkeypatch, planted, words):
    """The consumers' wait for the writer to free dQ's tile, or their proxy fence after storing it, left
    out: the interpreter reports the run-ahead (its barrier phases can no longer pair up) or a reduce
    reading ordinary stores unfenced."""
    from fmha_mlir.passes import warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    if planted == "wait":
        wait = warp_roles.MbarrierGroup.wait
        monkeypatch.setattr(warp_roles.MbarrierGroup, "wait", lambda self, barrier, parity: None
                            if self.count == 2 and barrier == warp_roles.DQ_FREE else wait(self, barrier, parity))
    else:
        monkeypatch.setattr(warp_roles, "fence_proxy_async", lambda: None)
    with pytest.raises(InterpreterError, match=words):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 300, 70), BULK_DQ)


@pytest.mark.parametrize("planted,words", [
    ("fence_proxy_async", "no fence.proxy.async since"),
    ("bulk_wait", "ends with bulk writes"),
], ids=["stored-without-a-proxy-fence", "work-group-ends-before-the-stores-read"])
def test_the_interpreter_reports_a_planted_dkv_store_bug(monkeypatch, planted, words):
    """dK's and dV's box stores (dkv_tma_store) after stmatrix stores with no proxy fence between, or a
    work-group that ends before its box stores have read its shared memory: each reported by name."""
    from fmha_mlir.passes import warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    monkeypatch.setattr(warp_roles, planted, lambda *args, **kwargs: None)
    with pytest.raises(InterpreterError, match=words):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 100, 70), STORED_DKV)


@pytest.mark.parametrize("spec,size,config", [
    (AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(2, 4, 150, 100),
     CONVERTED_DQ),
    (AttentionBwdSpec("bf16", 128, hdim_v=96, mask=Mask("causal_top_left")), ProblemSize(1, 2, 130, 200),
     dataclasses.replace(WGMMA_TABLE[128], dq_convert_rows=64)),
], ids=["br-gqa-f16-seqlen-q-not-whole-chunks", "table-d128-dv96"])
def test_dq_converted_in_the_grid_matches_the_oracle(spec, size, config):
    """config.dq_convert_rows: no convert kernel; the appended work-groups (which the interpreter starts in a
    random order among the key blocks') wait on their kv head's dq_done counter and write dq."""
    compiled = run_variant(spec, size, config)
    stages = [s.get("kernel", s.get("op")) for s in compiled.manifest["steps"]]
    assert not any(s.endswith("convert_dq") for s in stages) and "dq_done" in str(compiled.manifest["steps"])
    assert re.search(r"nanosleep\.u32\s+\d+;\s+ld\.acquire\.gpu[.\w]*\.(b|u|s)32", compiled.isa)   # their polls
    assert re.search(r"atom\.release\.gpu[.\w]*\.add", compiled.isa)   # the writer's count


@pytest.mark.parametrize("planted", ["no wait", "no barrier after the polling thread's wait"])
def test_dq_converted_without_waiting_for_the_key_blocks_fails_the_gate(monkeypatch, planted):
    """The appended work-groups convert without their wait, or with only the polling thread waiting:
    started before some key blocks' reduce-adds, they read partial sums, and the gate fails."""
    from fmha_mlir.passes import dq_convert_tail

    if planted == "no wait":
        monkeypatch.setattr(dq_convert_tail.fmha.SemaphoreWaitOp, "build", lambda *args, **kwargs: None)
    else:   # the module's own gpu namespace, without its barrier (the main body's stay)
        gpu = types.SimpleNamespace(**vars(dq_convert_tail.gpu))
        gpu.barrier = lambda *args, **kwargs: None
        monkeypatch.setattr(dq_convert_tail, "gpu", gpu)
    with pytest.raises(AssertionError, match=r"dq: .*FAIL"):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(2, 2, 150, 200), CONVERTED_DQ)


def test_a_key_block_counted_once_its_reduce_adds_read_only_is_an_error(monkeypatch):
    """The writer counts its key block on dq_done after waiting only for its reduce-adds to read shared
    memory (wait_group.read), not to complete: a convert work-group may then load dq_acc before the adds
    land, and the interpreter names the load (reduce_order.BulkReads)."""
    from fmha_mlir.passes import warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    wait = warp_roles.bulk_wait
    monkeypatch.setattr(warp_roles, "bulk_wait", lambda n, read: wait(n, read=True))
    with pytest.raises(InterpreterError, match="had not published"):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(2, 2, 150, 200), CONVERTED_DQ)


def test_a_wrong_expect_tx_byte_count_is_a_deadlock_naming_the_bytes(monkeypatch):
    from fmha_mlir.passes.hopper_sync import MbarrierPipeline
    from fmha_mlir.runtime.interp.errors import InterpreterError

    commit = MbarrierPipeline.commit
    monkeypatch.setattr(MbarrierPipeline, "commit", lambda self, stage, nbytes: commit(self, stage, nbytes + 128))
    with pytest.raises(InterpreterError, match="expect-tx announced more bytes than its TMA loads complete"):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 100, 70), PRODUCED)


def test_a_box_load_in_another_swizzle_than_the_tensor_map_is_reported(monkeypatch):
    """The kernel's box loads in the 64-byte swizzle while the host's tensor maps (and the tiles'
    descriptors) are in the 128-byte one: each load is checked against the map the runtime encodes."""
    from fmha_mlir.passes import warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    made = warp_roles.TmaCopy.for_tile
    monkeypatch.setattr(warp_roles.TmaCopy, "for_tile", lambda tensor_map, tile, element, outer=0: warp_roles.TmaCopy(
        tensor_map, made(tensor_map, tile, element, outer).rows, 32, element, 64, outer))
    with pytest.raises(InterpreterError, match="swizzle"):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 100, 70), PRODUCED)


def test_the_producer_needs_wgmma_and_whole_sequences():
    with pytest.raises(SpecError) as caught:
        check_config(AttentionBwdSpec("bf16", 64), TARGETS["sm_90"],
                     dataclasses.replace(choose_config(AttentionBwdSpec("bf16", 64), TARGETS["sm_90"]), producer=True))
    assert any(r.field == "config.producer" and "TMA" in r.message for r in caught.value.reasons)
    varlen = AttentionBwdSpec("bf16", 64, varlen=True)
    with pytest.raises(SpecError) as caught:
        check_config(varlen, TARGETS["sm_90a"], WGMMA_TABLE[64])
    assert any(r.field == "config.producer" and "varlen" in r.message for r in caught.value.reasons)
    # The table's row serves varlen without its producer (the same tiles, copied by every warp) and without
    # L2 sections (packed sequences have no fixed heads to count).
    chosen = choose_config(varlen, TARGETS["sm_90a"])
    assert chosen == dataclasses.replace(WGMMA_TABLE[64].without_producer(), l2_section_bytes=0)
    # dQ's bulk writes need the producer and an f32 dq_acc (bf16 atomics add into dq itself)
    with pytest.raises(SpecError) as caught:
        check_config(AttentionBwdSpec("bf16", 64), TARGETS["sm_90a"], dataclasses.replace(ONE_WARPGROUP, dq_bulk=True))
    assert any(r.field == "config.dq_bulk" and "producer" in r.message for r in caught.value.reasons)
    bf16_atomics = AttentionBwdSpec("bf16", 64, grad_accum="bf16")
    with pytest.raises(SpecError) as caught:
        check_config(bf16_atomics, TARGETS["sm_90a"], BULK_DQ)
    assert any(r.field == "config.dq_bulk" for r in caught.value.reasons)
    check_config(AttentionBwdSpec("bf16", 64, deterministic=True), TARGETS["sm_90a"], BULK_DQ)   # in turns
    causal = Mask("causal_top_left")   # the table: bf16 atomics keep the consumers' dQ, deterministic mode the writer
    assert not choose_config(dataclasses.replace(bf16_atomics, mask=causal), TARGETS["sm_90a"]).dq_bulk
    assert choose_config(AttentionBwdSpec("bf16", 64, deterministic=True, mask=causal), TARGETS["sm_90a"]).dq_bulk
    # dQ's turns are the writer's: their order and overlap need dq_bulk, and the order is one of TURN_ORDERS
    for fields, field in (({"turn_order": "last_to_first"}, "config.turn_order"), ({"turn_overlap": True},
                                                                                  "config.turn_overlap")):
        reasons = dataclasses.replace(PRODUCED, **fields).reasons()
        assert [r.field for r in reasons] == [field] and "dq_bulk" in reasons[0].fix
        assert not dataclasses.replace(BULK_DQ, **fields).reasons()
    assert [r.field for r in dataclasses.replace(BULK_DQ, turn_order="backwards").reasons()] == ["config.turn_order"]
    assert [r.field for r in dataclasses.replace(BULK_DQ, turn_overlap=1).reasons()] == ["config.turn_overlap"]


def test_dq_converted_in_the_grid_needs_the_writer_and_whole_heads_added_in_any_order():
    """config.dq_convert_rows: the appended work-groups wait on the writer's counts and number themselves by
    keys_outer's block ids; deterministic mode and varlen keep the convert kernel (the table drops it)."""
    assert [r.field for r in dataclasses.replace(PRODUCED, dq_convert_rows=64).reasons()] == ["config.dq_convert_rows"]
    for bad in (-1, True, 1.5):
        assert [r.field for r in dataclasses.replace(CONVERTED_DQ, dq_convert_rows=bad).reasons()] == [
            "config.dq_convert_rows"]
    for spec in (AttentionBwdSpec("bf16", 64, deterministic=True), AttentionBwdSpec("bf16", 64, varlen=True)):
        with pytest.raises(SpecError) as caught:
            check_config(spec, TARGETS["sm_90a"], CONVERTED_DQ)
        assert "config.dq_convert_rows" in [r.field for r in caught.value.reasons]
    plan = body_plan(AttentionBwdSpec("bf16", 64, gqa_ratio=2), CONVERTED_DQ)
    assert [w.name for w in plan.workspaces if w.converted_in_main] == ["dq_acc"]
    assert evaluate(plan.launch("dq_dk_dv").grid[2], {"k": (3, 2, 130, 64), "q": (3, 4, 100, 64)}) == 3 + 2 * 3


def test_register_budgets_split_what_the_work_group_enters_with_and_setmaxnreg_moves_them():
    """The producer keeps config.producer_registers; the consumers share what it gives back of the budget a
    work-group enters with (65536 / threads: 168 at 384 threads, 256 at 256), at most 240. The table's d64
    row: 40 / 232 (ptxas: no spills; 24 / 240 spilled 184 bytes), its d256 row 24 / 240; the kernel moves
    exactly those."""
    assert register_budgets(WGMMA_TABLE[64]) == (40, 232) and register_budgets(WGMMA_TABLE[256]) == (24, 240)
    assert register_budgets(PRODUCED) == (24, 240)   # one consumer warpgroup: 256 at entry, capped at 240
    ptx = compile_spec(AttentionBwdSpec("bf16", 64), "sm_90a", body="tiled", config=WGMMA_TABLE[64]).isa
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+);", ptx) == [("inc", "232"), ("dec", "40")]
    assert [r.field for r in dataclasses.replace(PRODUCED, producer_registers=36).reasons()] == [
        "config.producer_registers"]
    with pytest.raises(SpecError) as caught:   # more than it enters with: setmaxnreg.dec cannot raise it
        check_config(AttentionBwdSpec("bf16", 64), TARGETS["sm_90a"],
                     dataclasses.replace(WGMMA_TABLE[64], producer_registers=176))
    assert [r.field for r in caught.value.reasons] == ["config.producer_registers"]
    assert "at most 168" in caught.value.reasons[0].fix


@pytest.mark.parametrize("mask,extra,producer,dq_bulk", [
    ("none", {}, True, True), ("causal_bottom_right", {}, True, True),
    ("causal_bottom_right", {"deterministic": True}, True, True), ("none", {"deterministic": True}, True, True),
    ("none", {"grad_accum": "bf16"}, False, False), ("causal_bottom_right", {"grad_accum": "bf16"}, True, False),
])
def test_the_table_takes_the_producer_where_it_is_measured_faster(mask, extra, producer, dq_bulk):
    """Measured on the H200 (reports/bench_notes.md, "Warp specialisation", "Deterministic dQ by bulk
    stores"): with the writer's bulk reduce-adds (or, deterministic, its stores of partials, which its
    turns have replaced: "Deterministic dQ by turns, measured") faster on every row; with the consumers'
    writing dQ (bf16 atomics) only under a mask."""
    chosen = choose_config(AttentionBwdSpec("bf16", 128, mask=Mask(mask), **extra), TARGETS["sm_90a"])
    assert (chosen.producer, chosen.dq_bulk) == (producer, dq_bulk)


def test_a_missing_barrier_before_the_ds_stores_is_a_write_after_read(monkeypatch):
    """Two consumer warpgroups each read the other's dS^T rows in dQ's product; without the named barrier
    before the next step's dS^T stores (the full barrier's wait orders only the producer's work), a
    warpgroup overwrites rows the other's product read."""
    from fmha_mlir.passes import warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    monkeypatch.setattr(warp_roles.ProducerConsumerBackward, "before_shared_stores", lambda self: None)
    with pytest.raises(InterpreterError, match="write after read"):
        run_variant(AttentionBwdSpec("bf16", 128), ProblemSize(1, 1, 200, 100), WGMMA_TABLE[128])


CAUSAL_GQA_TURNS = (AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), deterministic=True, gqa_ratio=2),
                    ProblemSize(1, 4, 150, 300))
# a window: the first key blocks visit no late query block, the last none of the early ones
WINDOW_TURNS = (AttentionBwdSpec("f16", 128, mask=Mask("sliding_window", 70, 20), deterministic=True),
                ProblemSize(1, 1, 260, 330))


@pytest.mark.parametrize("spec,size,config", [
    (*CAUSAL_GQA_TURNS, WGMMA_TABLE[64]),
    (*WINDOW_TURNS, D128_TURNS),
    (*CAUSAL_GQA_TURNS, dataclasses.replace(WGMMA_TABLE[64], turn_order="last_to_first", turn_overlap=True)),
    (*WINDOW_TURNS, dataclasses.replace(D128_TURNS, turn_overlap=True)),
], ids=["d64-br-gqa2", "d128-window", "d64-br-gqa2-last-to-first-overlap", "d128-window-overlap"])
def test_deterministic_dq_takes_turns_and_is_bitwise_in_every_start_order(spec, size, config):
    """Deterministic mode with dq_bulk (bodies.dq_in_turns): one f32 dq_acc, no partials; each query block's
    key blocks reduce-add into it one at a time, in config.turn_order, on the block's semaphore; with
    config.turn_overlap a writer passes a turn on after issuing its next step's adds. The interpreter
    starts the work-groups in a random order per seed and checks that each add onto another work-group's
    was published to it (reduce_order.py): dQ is bitwise the same in every order, and every semaphore ends
    at the number of key blocks that visit its query block."""
    import re

    import numpy as np

    from fmha_mlir import mask_geometry
    from fmha_mlir.bodies import DQ_SEMAPHORES
    from fmha_mlir.runtime.cpu_executor import CpuExecutor
    from fmha_mlir.runtime.runner import PreparedRun
    from test_wgmma_body import compiled_variant

    compiled, bundle, data = compiled_variant(spec, size, config)
    runs = []
    for seed in (1, 2, 3):
        with PreparedRun(bundle, CpuExecutor(atomic_order="random", seed=seed), data.tensors) as run:
            run.launch()
            grads = {n: np.array(a) for n, a in run.results().items()}
            semaphores = np.empty(run.layouts[DQ_SEMAPHORES].span, np.int32)
            run.device.download(run.allocations[DQ_SEMAPHORES], semaphores)
            dq_acc = np.empty(run.layouts["dq_acc"].span, np.float32)   # f32: bf16 dq would round order away
            run.device.download(run.allocations["dq_acc"], dq_acc)
        checks = data.check(grads, bundle.numerics)
        assert all(c.passed for c in checks), "\n".join(map(str, checks))
        runs.append((grads, semaphores, dq_acc))
    for grads, _, dq_acc in runs[1:]:
        assert np.array_equal(dq_acc.view(np.uint32), runs[0][2].view(np.uint32))
        for name in ("dq", "dk", "dv"):
            assert np.array_equal(grads[name].view(np.uint16), runs[0][0][name].view(np.uint16)), name
    blocks = -(-size.seqlen_q // config.block_m)
    visits = [max(0, hi - lo) for lo, hi in (mask_geometry.key_block_range(
        spec.mask, m * config.block_m, config.block_m, config.block_n, size.seqlen_q, size.seqlen_k)
        for m in range(blocks))]
    assert runs[0][1].reshape(size.batch, size.heads_q, blocks).tolist() == [[visits] * size.heads_q]
    isa = compiled.isa   # the waits and signals as PTX: an acquire spin and a release add; no f32 atomics
    assert "cp.reduce.async.bulk.tensor" in isa and "ld.acquire.gpu.global.b32" in isa
    assert "atom.release.gpu.global.add.u32" in isa
    assert not re.search(r"\b(red|atom)\.[a-z.]*global\.add[a-z.]*f32", isa)
    assert choose_config(spec, TARGETS["sm_90a"]).dq_bulk is True   # the table's (measured 1.20x with partials)


@pytest.mark.parametrize("problem,config", [
    (WINDOW_TURNS, D128_TURNS),
    (CAUSAL_GQA_TURNS, dataclasses.replace(WGMMA_TABLE[64], turn_overlap=True)),
    (WINDOW_TURNS, dataclasses.replace(D128_TURNS, turn_overlap=True, turn_order="last_to_first")),
], ids=["at-once", "overlap", "overlap-last-to-first"])
def test_a_turn_passed_before_the_adds_completed_is_an_error(monkeypatch, problem, config):
    """The writer passes a query block's turn on only once the reduce-adds into it completed: signalled one
    bulk group early, the next key block's adds land on unpublished ones, which the interpreter reports
    (on the GPU the two could land in either order)."""
    from fmha_mlir.passes import warp_roles
    from fmha_mlir.runtime.interp.errors import InterpreterError

    pass_turn = warp_roles.ProducerConsumerBackward.pass_turn
    monkeypatch.setattr(warp_roles.ProducerConsumerBackward, "pass_turn", lambda self, turn, pending: pass_turn(
        self, turn, None if pending is None else pending + 1))
    with pytest.raises(InterpreterError, match="could land in either order"):
        run_variant(*problem, config)
