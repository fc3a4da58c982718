"""tools/bench_bwd.py, bench_timing.py and bench_gate.py without a GPU: the row list, the TFLOP/s count, the
report's tables, the timing summary, and the gate's cuts against the full oracle."""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))   # the tools import each other as scripts

import bench_bwd  # noqa: E402
import bench_gate  # noqa: E402
import bench_timing  # noqa: E402
from fmha_mlir import oracle  # noqa: E402
from fmha_mlir.bodies.wgmma import WGMMA_TABLE  # noqa: E402
from fmha_mlir.numerics import MATRIX_K16  # noqa: E402
from fmha_mlir.spec import AttentionBwdSpec, Mask  # noqa: E402


def test_rows_are_the_issue_rows_then_the_long_ones_then_the_padded_ones_bf16_first():
    labels = [r.label for r in bench_bwd.ROWS]
    assert labels[:15] == ["bf16 B4 H16 S2048 D64", "bf16 B4 H16 S2048 D128 causal", "bf16 B2 H16 S4096 D128",
                           "bf16 B2 H8 S2048 D256", "bf16 B1 H32 Hkv8 S8192 D128 causal", "bf16 B2 H16 S8192 D128",
                           "bf16 B2 H16 S8192 D128 causal", "bf16 B1 H16 S16384 D128",
                           "bf16 B1 H16 S16384 D128 causal", "bf16 B4 H16 S2048 D32", "bf16 B4 H16 S2048 D80",
                           "bf16 B4 H16 S2048 D96", "bf16 B4 H16 S2048 D160", "bf16 B4 H16 S2048 D192",
                           "bf16 B4 H16 S2048 D192 causal"]
    assert labels[15:] == [label.replace("bf16", "f16") for label in labels[:15]]
    assert [r.label for r in bench_bwd.ROWS[:15] if r.long] == labels[5:9]


def test_rows_are_selected_by_any_of_several_label_texts():
    labels = [r.label for r in bench_bwd.select_rows(["bf16 B4 H16 S2048 D192", "bf16 B2 H8"])]
    assert labels == ["bf16 B2 H8 S2048 D256", "bf16 B4 H16 S2048 D192", "bf16 B4 H16 S2048 D192 causal"]
    assert bench_bwd.select_rows([""]) == bench_bwd.ROWS


def test_ours_is_what_the_op_runs_on_an_h200_then_sm_90_s_row():
    """The first config timed is sm_90a's choice (the op's on an H100 / H200), the second sm_90's mma.sync
    row; d160 runs on the d256 row's 192-column tiles with its producer and L2 sections (measured faster
    than both); a head dim the wgmma rows do not take (d136: not measured on 192-column tiles) has one
    config, mma.sync's, on both chips."""
    for hdim in (128, 160, 256):
        row = bench_bwd.Row(2, 16, 16, 4096, hdim, False, "bf16")
        ours, generic = bench_bwd.row_configs(row)[:2]
        assert (ours.instruction, bench_bwd.arch_of(ours)) == ("wgmma.m64n64k16", "sm_90a")
        assert ours.producer and ours.l2_section_bytes
        assert (generic.instruction, bench_bwd.arch_of(generic)) == ("mma.m16n8k16", "sm_90")
    assert [c.instruction for c in bench_bwd.row_configs(bench_bwd.Row(4, 16, 16, 2048, 136, False, "bf16"))] \
        == ["mma.m16n8k16"]


def test_the_wgmma_sweep_times_a_deterministic_writer_row_in_every_turn_order_and_overlap():
    """--wgmma-sweep on a deterministic row whose writer takes dQ's turns: the op's config and the three
    others of TURN_SWEEP (each order, with and without overlapped completions), labelled; a row without
    turns (default mode, or the d256 row's partials) gets none of them."""
    row = dataclasses.replace(bench_bwd.Row(4, 16, 16, 2048, 128, True, "bf16"), deterministic=True)
    configs = bench_bwd.row_configs(row, bench_bwd.Candidates(wgmma=True, wgmma_sweep=True))
    turns = [(c.turn_order, c.turn_overlap) for c in configs if getattr(c, "dq_bulk", False)]
    assert turns == [("first_to_last", False), ("first_to_last", True), ("last_to_first", False),
                     ("last_to_first", True)]
    assert "turns last to first, overlapped" in bench_bwd.config_about(configs[-1])
    for plain in (dataclasses.replace(row, deterministic=False),
                  dataclasses.replace(bench_bwd.Row(2, 8, 8, 2048, 256, False, "bf16"), deterministic=True)):
        assert all((c.turn_order, c.turn_overlap) == ("first_to_last", False)
                   for c in bench_bwd.row_configs(plain, bench_bwd.Candidates(wgmma=True, wgmma_sweep=True))
                   if c.body == "tiled")


def test_l2_sections_time_the_op_s_wgmma_config_with_each_section_size():
    """--l2-sections: the op's wgmma config with each l2_section_bytes, labelled; a row the op runs on
    mma.sync (packed sequences are not bench rows; bf16 dQ atomics keep wgmma) gets none from them."""
    row = bench_bwd.Row(4, 16, 16, 2048, 192, False, "bf16")
    configs = bench_bwd.row_configs(row, bench_bwd.Candidates(wgmma=True, sections=(8 << 20, 32 << 20)))
    sizes = [c.l2_section_bytes for c in configs if c.body == "tiled" and c.instruction.startswith("wgmma")]
    assert sizes[0] == 16 << 20 and {8 << 20, 32 << 20} <= set(sizes)   # the table's own first
    assert bench_bwd.config_about(configs[-1]).endswith("L2 sections of 32 MiB")
    generic = bench_bwd.row_configs(row, bench_bwd.Candidates(sections=(8 << 20,)))[1]
    assert generic.instruction == "mma.m16n8k16" and generic.l2_section_bytes == 0


def test_producer_registers_time_the_op_s_producer_config_with_each_budget():
    """--producer-registers: the op's wgmma config with each producer budget, labelled; a row whose config
    has no producer (d192 without a mask) gets none from them."""
    row = bench_bwd.Row(4, 16, 16, 2048, 64, False, "bf16")
    configs = bench_bwd.row_configs(row, bench_bwd.Candidates(wgmma=True, registers=(24,)))
    assert configs[0].producer_registers == 40 and configs[-1].producer_registers == 24
    assert "producer (24 registers)" in bench_bwd.config_about(configs[-1])
    d192 = bench_bwd.Row(4, 16, 16, 2048, 192, False, "bf16")
    assert bench_bwd.row_configs(d192, bench_bwd.Candidates(wgmma=True, registers=(24,))) == bench_bwd.row_configs(
        d192, bench_bwd.Candidates(wgmma=True))
    # with --dq-convert-rows too: each pair besides each alone
    both = bench_bwd.row_configs(row, bench_bwd.Candidates(wgmma=True, registers=(48,), convert_rows=(256,)))
    assert [(c.producer_registers, c.dq_convert_rows) for c in both[-3:]] == [(48, 0), (40, 256), (48, 256)]


def test_once_profiles_a_tagged_config_of_the_build_s_flags_and_names_the_tags_it_has_otherwise(capsys):
    """once --tag: a section variant is found under the build's --l2-sections; a tag not among the row's
    configs is refused with the tags there are (it profiled the op's own config without a word before)."""
    row = bench_bwd.Row(4, 16, 16, 2048, 192, False, "bf16")
    sections = bench_bwd.Candidates(sections=(32 << 20,))
    tag = bench_bwd.row_configs(row, dataclasses.replace(sections, wgmma=True))[-1].tag
    assert bench_bwd.once(Path("/nonexistent"), row, tag, bench_bwd.Candidates()) == 2
    message = capsys.readouterr().err
    assert f"no config tagged {tag}" in message and bench_bwd.row_configs(row)[0].tag in message
    with pytest.raises(Exception) as found:   # found, so it goes on to load the bundle (none here)
        bench_bwd.once(Path("/nonexistent"), row, tag, sections)
    assert "no config tagged" not in str(found.value)


def test_a_padded_row_computes_the_op_s_padded_spec_at_its_own_scale_and_counts_its_own_flops():
    # d80 is a multiple of 8: the kernel pads it; d84 is not: the op pads it to 88, as the bench does
    assert bench_bwd.Row(4, 16, 16, 2048, 80, False, "bf16").spec.hdim_q == 80
    row = bench_bwd.Row(4, 16, 16, 2048, 84, False, "bf16")
    assert (row.spec.hdim_q, row.spec.hdim_v, row.spec.scale) == (88, 88, 84 ** -0.5)
    assert row.label == "bf16 B4 H16 S2048 D84 (padded 88)"
    assert row.flops == 2.5 * 4 * 4 * 16 * 2048 * 2048 * 84


def test_flops_count_the_backward_as_2_5_forwards_halved_for_causal():
    row = bench_bwd.Row(4, 16, 16, 2048, 64, False, "bf16")
    assert row.flops == 2.5 * 4 * 4 * 16 * 2048 * 2048 * 64
    causal = bench_bwd.Row(1, 32, 8, 8192, 128, True, "bf16")
    assert causal.flops == 2.5 * 4 * 32 * 8192 * 8192 * 128 / 2   # query heads count, not kv heads


def _measured(tflops, host_us=300.0, ahead=True, passed=True, ratio=0.4):
    if tflops is None:
        return {"timing": None, "tflops": None, "gate": None, "passed": None, "why": "unsupported"}
    gpu = 1e-3 / tflops
    return {"timing": {"gpu_s": gpu, "host_s": host_us * 1e-6, "ahead": ahead, "rounds": []}, "tflops": tflops,
            "gate": {"dq": {"ratio": ratio, "passed": passed}, "dk": {"ratio": ratio / 2, "passed": True},
                     "dv": {"ratio": 0.1, "passed": True}}, "passed": passed, "why": None}


def test_table_ratios_marks_and_long_rows():
    entry = {"row": "bf16 B1 H16 S16384 D128 causal", "flops": 1.0, "causal": True, "long": True,
             "ours": {"tag": {**_measured(300.0, host_us=40), "body": "tiled"}},
             "peers": {"FLASH_ATTENTION": _measured(200.0, ahead=False), "CUDNN_ATTENTION": _measured(600.0),
                       "FLEX": _measured(None)}}
    gqa = {"row": "bf16 B1 H32 Hkv8 S8192 D128 causal", "flops": 1.0, "causal": True, "long": False,
           "ours": {"tag": {**_measured(290.0), "body": "tiled"}}, "peers": {"CUDNN_ATTENTION": _measured(520.0)}}
    failing = {"row": "f16 B4 H16 S2048 D64", "flops": 1.0, "causal": False, "long": False,
               "ours": {"tag": {**_measured(250.0, passed=False, ratio=1.5), "body": "tiled"}}, "peers": {}}
    text = "\n".join(bench_bwd.table_lines([entry, gqa, failing]))
    assert "| bf16 B1 H16 S16384 D128 causal | 300.0 | 200.0! | 600.0 | n/a | 1.50x | 0.50x | n/a |" in text
    assert "| f16 B4 H16 S2048 D64 | 250.0 (gate FAIL) | n/a | n/a | n/a | n/a | n/a | n/a |" in text
    assert "| bf16 B1 H16 S16384 D128 causal | 40 / 3 | 300 / 5 | 300 / 2 | n/a |" in text
    assert "| f16 B4 H16 S2048 D64 | 1.50 | n/a | n/a | n/a |" in text
    assert "| bf16 B1 H16 S16384 D128 causal | 300.0 | 600.0 | 581 | 0.52x |" in text   # the causal record
    assert text.count("| 581 |") == 1   # neither the GQA row nor an f16 row is in the long rows' table


def test_timing_summary_takes_medians_and_needs_every_round_ahead():
    rounds = [bench_timing.Round(3e-3, 1e-4, True), bench_timing.Round(1e-3, 3e-4, True),
              bench_timing.Round(2e-3, 2e-4, False)]
    timing = bench_timing.summarize(rounds)
    assert (timing.gpu_s, timing.host_s, timing.ahead) == (2e-3, 2e-4, False)
    assert bench_timing.summarize(rounds[:2]).ahead
    with pytest.raises(ValueError):
        bench_timing.summarize([])


def test_sleep_outlasts_twice_the_issuing():
    cycles = bench_timing.sleep_cycles(host_s=3e-4, calls=10, cycles_per_second=1e9)
    assert cycles == int((2 * 3e-4 * 10 + bench_timing.SLEEP_MARGIN_S) * 1e9)


class _Clock:
    """The torch.cuda calls bench_timing makes, on no GPU: every event pair 3 ms apart, the GPU always behind."""

    class cuda:
        log: list = []

        @staticmethod
        def synchronize():
            pass

        @staticmethod
        def _sleep(cycles):
            _Clock.cuda.log.append("sleep")

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def query(self):
                return False   # the start event not reached yet: the host kept ahead

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 3.0


def test_interleaved_timing_takes_each_contenders_rounds_in_turn():
    """Round r of every contender before round r + 1 of any, after each one's warmup: a clock that drifts
    over the row falls on all of them alike."""
    log = _Clock.cuda.log
    log.clear()
    contenders = {name: (lambda name=name: log.append(name)) for name in ("ours", "cudnn")}
    timings = bench_timing.interleaved(_Clock, contenders, calls=2, rounds=3, rate=1e9, warmup=1)
    assert log == ["ours"] * 2 + ["cudnn"] * 2 + ["sleep", "ours", "ours", "sleep", "cudnn", "cudnn"] * 3
    assert {name: (len(t.rounds), t.gpu_s, t.ahead) for name, t in timings.items()} == {
        "ours": (3, 1.5e-3, True), "cudnn": (3, 1.5e-3, True)}


def test_run_gates_every_contender_then_times_them_in_turn(monkeypatch, tmp_path):
    """bench_bwd.run without a GPU (every step that needs one stubbed): per row it prepares and gates ours and
    the peers, times those that can run in one interleaved call, reports a peer that cannot with its reason,
    closes everything, and fails the run when one of ours fails its gate."""
    import types

    import fmha_mlir.runtime.executor as executor

    timed, closed = [], []
    rows = bench_bwd.select_rows(["bf16 B4 H16 S2048 D64", "bf16 B4 H16 S2048 D96"])   # (imports the real torch)
    tags = [c.tag for c in bench_bwd.row_configs(rows[0]) if c.body != "warp"]
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(executor, "get_executor", lambda kind: "device")
    monkeypatch.setattr(bench_timing, "sleep_rate", lambda torch: 1e9)
    monkeypatch.setattr(bench_bwd, "bundle_dir", lambda directory, row, config: tmp_path)
    monkeypatch.setattr(bench_bwd, "load_bundle", lambda *args, **kwargs: types.SimpleNamespace(numerics=None))
    for name in ("_inputs", "_forward", "_problem"):
        monkeypatch.setattr(bench_bwd, name, lambda *args: (None,) * 5)
    monkeypatch.setattr(bench_bwd.bench_gate, "references", lambda problem: None)
    monkeypatch.setattr(bench_bwd, "_time_steps", lambda torch, run, options: {"run": run})
    monkeypatch.setattr(bench_bwd, "_write", lambda *args: None)

    def contender(name, passed=True):
        return bench_bwd.Contender({"dq": {"passed": passed, "ratio": 0.5}}, call=name,
                                   close=lambda: closed.append(name), run=name)

    monkeypatch.setattr(bench_bwd, "_ours", lambda torch, bundle, device, row, sets, forwards, refs: contender(
        "ours", passed=row.hdim != 96))
    monkeypatch.setattr(bench_bwd, "_sdpa_peer", lambda torch, row, backend, sets, refs: contender(backend)
                        if backend == "FLASH_ATTENTION" else bench_bwd.Contender(None, why="no cuDNN kernel"))
    monkeypatch.setattr(bench_bwd, "_flex_peer", lambda torch, row, sets, refs: contender("FLEX"))

    def interleaved(torch, contenders, **options):
        timed.append(dict(contenders))
        return {name: bench_timing.Timing(1e-3, 1e-5, True, ()) for name in contenders}

    monkeypatch.setattr(bench_timing, "interleaved", interleaved)
    options = bench_bwd.TimingOptions(calls=4, rounds=3, sleep_rate=0.0)
    status = bench_bwd.run(tmp_path, tmp_path / "r.md", options, rows, "bf16", 0.0, bench_bwd.Candidates())
    assert [list(calls) for calls in timed][0] == tags + ["FLASH_ATTENTION", "FLEX"]   # cuDNN could not run
    assert closed.count("ours") == 2 * len(tags) and closed.count("FLEX") == 2
    assert status == 1   # the d96 row's gate failed


def _problem(mask: str, seqlen=96, hdim=32, g=2, seed=1):
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((1, g, seqlen, hdim)) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, seqlen, hdim)) for _ in range(2))
    args = dict(mask=Mask(mask), scale=hdim ** -0.5, gqa_ratio=g)
    f = oracle.forward(q, k, v, **args)
    problem = bench_gate.Problem(q, k, v, f.o, do, f.lse, Mask(mask), hdim ** -0.5, g, "bf16", MATRIX_K16)
    return problem, oracle.backward(q, k, v, f.o, do, f.lse, **args)


@pytest.mark.parametrize("mask", ["none", "causal_top_left"])
def test_gate_cuts_are_the_full_problems_gradients(mask):
    problem, full = _problem(mask)
    refs = bench_gate.references(problem, width=32)
    assert (refs.rows, refs.keys) == (slice(64, 96), slice(0, 32))
    np.testing.assert_allclose(refs.exact["dq"], full.dq[:, :, 64:], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(refs.exact["dk"], full.dk[:, :, :32], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(refs.exact["dv"], full.dv[:, :, :32], rtol=1e-12, atol=1e-12)


def test_gate_passes_the_lowp_model_and_rejects_an_error_inside_a_cut():
    problem, _ = _problem("causal_top_left")
    refs = bench_gate.references(problem, width=32)
    args = dict(mask=problem.mask, scale=problem.scale, gqa_ratio=problem.gqa_ratio)
    low = oracle.lowp_backward(problem.q, problem.k, problem.v, problem.o, problem.do, problem.lse, dtype="bf16",
                               numerics=MATRIX_K16, **args)
    grads = {"dq": low.dq, "dk": low.dk, "dv": low.dv}
    assert all(c["passed"] for c in bench_gate.gate(refs, grads, "bf16", 32).values())
    wrong = {**grads, "dk": grads["dk"].copy()}
    wrong["dk"][0, 0, 5, 3] += 0.05 * np.abs(refs.exact["dk"]).max()
    verdict = bench_gate.gate(refs, wrong, "bf16", 32)
    assert not verdict["dk"]["passed"] and verdict["dq"]["passed"] and verdict["dv"]["passed"]


def test_gate_refuses_a_mask_it_cannot_cut():
    problem, _ = _problem("none")
    with pytest.raises(ValueError, match="causal top-left"):
        bench_gate.references(bench_gate.Problem(**{**problem.__dict__, "mask": Mask("causal_bottom_right")}))


def test_a_head_dim_between_the_wgmma_rows_is_timed_on_the_next_row_up_padded():
    """--wgmma: d80 and d96 are timed on the d128 wgmma row (128-column tiles), as the op takes it (with the
    convert kernel: wgmma.DQ_CONVERT_SMALLEST_HDIM) and as the row stands; d136 on the d256 row (the op
    takes mma.sync there: wgmma.SMALLEST_HDIM; d160 is the op's choice, the row itself), d32 on the d64 row."""
    padded = [dataclasses.replace(WGMMA_TABLE[128], dq_convert_rows=0), WGMMA_TABLE[128]]
    for hdim, expected in ((32, [WGMMA_TABLE[64]]), (80, padded), (96, padded),
                           (136, [WGMMA_TABLE[256]]),
                           (160, [WGMMA_TABLE[256]])):
        configs = bench_bwd.row_configs(bench_bwd.Row(4, 16, 16, 2048, hdim, False, "bf16"),
                                          bench_bwd.Candidates(wgmma=True))
        wgmma = [c for c in configs if c.instruction == WGMMA_TABLE[128].instruction]
        assert wgmma == expected


@pytest.mark.parametrize("spec,config,counter", [
    (AttentionBwdSpec("bf16", 64, deterministic=True), None, "dq_semaphores"),
    (AttentionBwdSpec("bf16", 128), dataclasses.replace(WGMMA_TABLE[128], dq_convert_rows=256), "dq_done"),
], ids=["deterministic-turns", "dq-converted-in-the-grid"])
def test_a_kernel_that_waits_on_counters_is_timed_alone_behind_their_zero_fill(spec, config, counter):
    """Deterministic sm_90a d64 takes dQ turns, and dQ converted in the grid waits for each head's count:
    either kernel launched again without its counters' zero fill would wait for counts that never come
    (the H200 run that timed steps alone hung on the first, an H100 run on the second); the other steps
    run alone."""
    from fmha_mlir.api import compile_bundle

    steps = compile_bundle(spec, "sm_90a", body="tiled", config=config).manifest["steps"]
    calls = [f"call {i}" for i in range(len(steps))]
    alone = bench_bwd.steps_alone(steps, calls)
    zero = next(i for i, s in enumerate(steps) if s["op"] == "zero" and s["buffer"] == counter)
    taking = [i for i, s in enumerate(steps) if {"buffer": counter} in s.get("args", ())]
    assert len(taking) == 1 and taking[0] > zero
    assert [step for step, _ in alone] == steps
    assert [run for _, run in alone] == [[calls[zero], c] if i in taking else [c] for i, c in enumerate(calls)]
