"""tools/gpt_corpus.py, train_gpt.py, train_hf.py, train_ddp.py, train_compare.py, bench_torch_overhead.py
and bench_torch_step.py without a GPU: the corpus, tiny CPU training runs (one process; two under
torchrun), and the report writers on records made here (no device results)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))   # the tools import each other as scripts

import bench_torch_overhead  # noqa: E402
import bench_torch_step  # noqa: E402
import train_compare  # noqa: E402
from gpt_corpus import CorpusConfig, make_sequences  # noqa: E402


def test_the_corpus_is_the_same_for_the_same_seed_and_repeats_a_span_in_every_sequence():
    a = make_sequences(CorpusConfig(), 8, 257)
    assert a.shape == (8, 257) and a.min() >= 1 and a.max() < 256
    assert np.array_equal(a, make_sequences(CorpusConfig(), 8, 257))
    assert not np.array_equal(a, make_sequences(CorpusConfig(seed=7), 8, 257))
    for row in a:   # some 32-token window occurs twice (the repeat's length is at least 32 here)
        windows = {tuple(row[i:i + 32]) for i in range(len(row) - 31)}
        assert len(windows) < len(row) - 31


def test_the_corpus_refuses_sequences_too_short_for_its_structure():
    with pytest.raises(ValueError, match="too small"):
        make_sequences(CorpusConfig(), 2, 4)


def test_a_tiny_cpu_run_repeats_for_its_seed_and_logs_every_layer():
    pytest.importorskip("torch")
    import train_gpt

    model = train_gpt.ModelConfig(layers=2, width=32, heads=2, seq=32)
    train = train_gpt.TrainConfig(seed=0, steps=3, batch=2, timing_warmup=1, device="cpu")
    first, again = train_gpt.train(model, train), train_gpt.train(model, train)
    other = train_gpt.train(model, train_gpt.TrainConfig(seed=1, steps=3, batch=2, timing_warmup=1, device="cpu"))
    assert first["loss"] == again["loss"] and first["loss"] != other["loss"]
    assert abs(first["loss"][0] - np.log(256)) < 0.1              # GPT-2's small init: a uniform guess at first
    assert np.array(first["qkv_grad_norm"]).shape == (3, 2) == np.array(first["out_grad_norm"]).shape
    assert first["steps_per_s"] > 0 and first["timed_steps"] == 2


@pytest.mark.parametrize("wrap", ["ddp", "fsdp2"])
def test_a_two_process_run_has_the_gradients_of_one_process_with_both_batches(wrap, tmp_path):
    """Two gloo ranks of --batch 2 see a one-process run's --batch 4 data; DDP / FSDP2 average their
    gradients into that run's, so the global gradient norms agree up to the bf16 rounding autocast gives
    each rank's gradients before the f32 average (2^-8 relative: 1e-4 measured; rank 0's rows alone: 36%)."""
    pytest.importorskip("torch")
    import train_gpt

    record = tmp_path / "ddp.json"
    tiny = ["--layers", "1", "--width", "64", "--heads", "2", "--seq", "32", "--steps", "2", "--timing-warmup", "0",
            "--device", "cpu", "--attention", "fmha", "--wrap", wrap, "--batch", "2", "--json", str(record)]
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    str(Path(__file__).parents[2] / "tools" / "train_ddp.py"), *tiny],
                   check=True, capture_output=True, timeout=300)
    ddp = json.loads(record.read_text())
    one = train_gpt.train(train_gpt.ModelConfig(layers=1, width=64, heads=2, seq=32),
                          train_gpt.TrainConfig(attention="fmha", steps=2, batch=4, timing_warmup=0, device="cpu"))
    assert ddp["world_size"] == 2 and ddp["data_parallel"] == wrap and len(ddp["loss"]) == 2
    np.testing.assert_allclose(ddp["grad_norm"], one["grad_norm"], rtol=2.0 ** -8)


def _step0_from_real_runs(monkeypatch, attentions: dict) -> dict[str, dict]:
    """Step-0 errors against the f32 reference of a tiny CPU model, for each named attention
    (a train_gpt --attention name, or a callable given the reference attention)."""
    import train_gpt

    model = train_gpt.ModelConfig(layers=2, width=64, heads=2, seq=64)
    grads = {}
    for name, attention in {"reference": "reference", **attentions}.items():
        if callable(attention):
            monkeypatch.setattr(train_gpt, "attention_of", lambda t, a=attention: a(train_gpt.reference_attention()))
        train = train_gpt.TrainConfig(attention="reference" if callable(attention) else attention, steps=1,
                                      batch=2, timing_warmup=0, device="cpu")
        train_gpt.train(model, train, on_step0=lambda groups, n=name: grads.__setitem__(n, groups))
        monkeypatch.undo()
    return {name: train_compare.step0_errors(grads["reference"], g) for name, g in grads.items() if name != "reference"}


def _dq_scaled(reference_attention, factor=0.99):
    """The exact backward with dQ x factor: a 1% error in one gradient, what the gate's mutants make."""
    import torch

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            with torch.enable_grad():
                inputs = [x.detach().requires_grad_() for x in (q, k, v)]
                out = reference_attention(*inputs)
            ctx.graph = (inputs, out)
            return out.detach()

        @staticmethod
        def backward(ctx, grad_out):
            inputs, out = ctx.graph
            dq, dk, dv = torch.autograd.grad(out, inputs, grad_out)
            return dq * factor, dk, dv

    return Scaled.apply


def test_the_step0_rule_passes_our_backward_and_catches_a_one_percent_dq_error(monkeypatch):
    """On real gradients (a tiny CPU model; ours through the interpreter): our step-0 distance to the f32
    reference is within the rule's factor of torch's CPU flash backward's, dQ x 0.99 is not, and the
    whole-model and projection norms alone would have missed it (dQ is a small part of them at init)."""
    pytest.importorskip("torch")
    errors = _step0_from_real_runs(monkeypatch, {"sdpa": "sdpa", "fmha": "fmha", "mutant": _dq_scaled})
    ours = train_compare.step0_comparison([errors["fmha"]], [errors["sdpa"]])
    mutant = train_compare.step0_comparison([errors["mutant"]], [errors["sdpa"]])
    assert max(v["ratio"] for v in ours.values()) <= train_compare.FACTOR
    assert mutant["dq1"]["ratio"] > train_compare.FACTOR and mutant["dk1"]["fmha"] == 0.0
    assert all(mutant[g]["ratio"] <= train_compare.FACTOR for g in ("global", "qkv0", "qkv1"))


def _fake_record(loss, attention, step0_error: float, ratio_of_norms=1.0):
    steps = len(loss)
    groups = ("global", "dq0", "dk0", "dv0", "qkv0", "out0", "dq1", "dk1", "dv1", "qkv1", "out1")
    return {"model": {"layers": 2, "width": 64, "heads": 2, "seq": 64, "vocab": 256},
            "train": {"lr": 1e-3, "lr_warmup": 2, "batch": 2, "bundle_dir": "B"}, "attention": attention,
            "device": "test", "torch": "test", "loss": list(loss), "grad_norm": [ratio_of_norms] * steps,
            "qkv_grad_norm": [[0.5, 0.25]] * steps, "out_grad_norm": [[0.1, 0.2]] * steps, "steps_per_s": 10.0,
            "step0_error": {g: 0.0 if g == "out1" else step0_error for g in groups},
            "command": "python tools/train_compare.py run D"}


# Each seed-0 run is the base curve plus a multiple of one wiggle, so d(a, b) = |c_a - c_b| x mean |wiggle|:
# the exact backward's runs at c = 0, torch flash's at +-1 (1 unit from them), ours at c = fmha_offset.
OFFSETS = {"reference": (0.0, 0.0, 0.0, 0.0), "sdpa": (1.0, -1.0, 1.0, -1.0)}


def _fake_runs(fmha_offset: float, attention="fmha_mlir.torch.attention", fmha_step0=1.5e-3):
    base, wiggle = np.linspace(5.5, 2.0, 40), 0.01 * np.sin(np.arange(40))
    offsets = {kind: iter(values) for kind, values in OFFSETS.items()}
    runs = {}
    for r in train_compare.RUNS:
        if r.seed:
            loss, kind, step0 = base + 0.1, train_compare.ATTENTION_OF["sdpa"], 1.0
        elif r.attention == "fmha":
            loss, kind, step0 = base + fmha_offset * wiggle, attention, fmha_step0
        else:
            loss, kind = base + next(offsets[r.attention]) * wiggle, train_compare.ATTENTION_OF[r.attention]
            step0 = 0.0 if r.attention == "reference" else 1e-3
        runs[r.name] = _fake_record(loss, kind, step0)
    return runs


def test_the_runs_are_the_stated_ones_with_the_yardstick_first():
    kinds = [r.attention for r in train_compare.RUNS if not r.seed]
    assert train_compare.RUNS[0].attention == "reference" and train_compare.RUNS[-1].seed == 1
    assert all(kinds.count(kind) == train_compare.REPEATS for kind in train_compare.ATTENTION_OF)


def test_the_verdict_follows_its_rule():
    passing = train_compare.summarise(_fake_runs(1.9))        # 1.9x torch flash's distance to the exact runs
    assert passing["verdict"] == "PASS" and passing["curves_ratio"] == pytest.approx(1.9)
    assert train_compare.summarise(_fake_runs(-2.1))["verdict"] == "FAIL"             # 2.1x
    off = train_compare.summarise(_fake_runs(0.5, fmha_step0=2.5e-3))                 # 2.5x flash's step-0 error
    assert off["verdict"] == "FAIL" and off["curves_pass"] and not off["step0_pass"]
    mislabelled = train_compare.summarise(_fake_runs(0.5, attention="torch SDPA flash"))
    assert mislabelled["verdict"] == "FAIL" and mislabelled["mislabelled"] == [f"fmha_r{i + 1}" for i in range(4)]


def test_a_group_no_backward_changes_does_not_decide_the_step0_rule():
    table = train_compare.step0_comparison([{"out1": 0.0, "dq1": 1e-3}], [{"out1": 0.0, "dq1": 1e-3}])
    assert table["out1"]["ratio"] == 0.0 and table["dq1"]["ratio"] == 1.0
    assert train_compare.step0_comparison([{"dq1": 1e-9}], [{"dq1": 0.0}])["dq1"]["ratio"] == float("inf")


def test_the_training_report_writes_its_markdown_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    for name, record in _fake_runs(0.5).items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    report = tmp_path / "training.md"
    assert train_compare.main(["report", str(tmp_path), "--report", str(report)]) == 0
    text = report.read_text()
    assert "Verdict rule" in text and "**Verdict: PASS.**" in text and "python tools/train_gpt.py build B" in text
    assert "| dq1 | 1.500e-03 | 1.000e-03 | 1.50 |" in text
    assert json.loads(report.with_suffix(".json").read_text())["verdict"] == "PASS"
    assert report.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def _as_llama_runs(runs: dict[str, dict]) -> dict[str, dict]:
    """The fake runs as a transformers Llama's (train_hf.py's records)."""
    import train_hf

    labels = train_hf.labels("llama")
    kinds = {r.name: r.attention for r in train_compare.RUNS}
    model = {**vars(train_hf.MODELS["llama"]), "layers": 2, "width": 64, "heads": 2, "kv_heads": 2, "head_dim": 32}
    return {name: {**record, "family": "llama", "transformers": "test", "model": model,
                   "attention": labels[kinds[name]]} for name, record in runs.items()}


def test_the_training_report_of_several_models_has_a_section_each(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("transformers")
    for directory, runs in (("gpt", _fake_runs(0.5)), ("llama", _as_llama_runs(_fake_runs(-2.1)))):
        (tmp_path / directory).mkdir()
        for name, record in runs.items():
            (tmp_path / directory / f"{name}.json").write_text(json.dumps(record))
    report = tmp_path / "training.md"
    assert train_compare.main(["report", str(tmp_path / "gpt"), str(tmp_path / "llama"), "--report", str(report)]) == 1
    text = report.read_text()
    assert "verdicts: gpt PASS, llama FAIL" in text and "\n## gpt\n" in text and "\n## llama\n" in text
    assert "\n### (1) Curves" in text and "python tools/train_hf.py build B --model llama --layers 2" in text
    assert "transformers \"sdpa\" (largest of its runs)" in text
    summaries = json.loads(report.with_suffix(".json").read_text())
    assert summaries["gpt"]["verdict"] == "PASS" and summaries["llama"]["verdict"] == "FAIL"
    assert report.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_the_exact_attention_is_the_models_own_in_f32_and_step0_keeps_the_sinks():
    """train_hf's yardstick, without autocast (f32 throughout), gives the logits of transformers' own
    attention for the model (sdpa for Llama; gpt-oss's eager: sinks, a sliding window, GQA); a keep
    step's gradient groups have what each layer's attention returns, and gpt-oss's sinks."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import dataclasses

    import train_gpt
    import train_hf

    ids = torch.randint(1, 32, (2, 16), generator=torch.Generator().manual_seed(1))
    for family in ("llama", "gpt_oss"):
        m = dataclasses.replace(train_hf.MODELS[family], layers=2, width=64, heads=4, head_dim=16, seq=16, vocab=32,
                                window=4, kv_heads=4 if family == "llama" else 2)
        logits = {}
        for attention in ("reference", "sdpa"):
            torch.manual_seed(0)
            trainee = m.trainee(train_gpt.TrainConfig(attention, device="cpu"))
            logits[attention] = trainee.logits(trainee.model, ids, keep=True)
        # f32 both: sums in other orders (~1e-6 relative); a mask, sink or scale missed moves them by O(0.1)
        torch.testing.assert_close(logits["reference"], logits["sdpa"], rtol=1e-4, atol=1e-5)
        logits["sdpa"].square().mean().backward()
        groups = trainee.gradient_groups()
        layer = {"dq1", "dk1", "dv1", "qkv1", "out1"} | ({"sinks1"} if family == "gpt_oss" else set())
        assert layer <= set(groups) and all(g is not None for name in layer for g in groups[name])


def test_the_training_report_names_the_missing_runs(tmp_path):
    with pytest.raises(SystemExit, match="lacks reference_r1.json"):
        train_compare.main(["report", str(tmp_path)])


def test_the_overhead_report_gives_the_ratio_and_flags_a_synchronising_call(tmp_path):
    row = {"shape": [1, 2, 128, 64], "max_rel_diff": {"dq": 1e-3, "dk": 2e-3, "dv": 1e-3},
           "torch": {"host_s": 20e-6, "gpu_s": 10e-6, "back_to_back": True},
           "ours": {"host_s": 50e-6, "gpu_s": 60e-6, "back_to_back": False}}
    report = tmp_path / "overhead.md"
    bench_torch_overhead.write_report(report, [row], {"device": "test", "torch": "t", "calls": 5, "host": "h",
                                                      "directory": "B"})
    assert "| 1 2 128 64 | 20.0 | 50.0 | 2.50 | 10.0 | 60.0 | yes, no |" in report.read_text()
    assert json.loads(report.with_suffix(".json").read_text())["rows"] == [row]


def test_the_overhead_tool_refuses_no_calls():
    with pytest.raises(SystemExit):
        bench_torch_overhead.main(["run", "B", "--calls", "0"])


def test_the_step_benchmark_reports_medians_spreads_and_ratios_to_flash(tmp_path):
    def block(host, wall):
        return {"host_s": host, "gpu_s": wall / 2, "wall_s": wall, "busy": True}

    eager = {"ours": bench_torch_step.summary([block(3e-4, 5e-4), block(1e-4, 4e-4), block(2e-4, 6e-4)]),
             "sdpa_flash": bench_torch_step.summary([block(1e-4, 2e-4)])}
    assert eager["ours"]["host_s"] == {"median": 2e-4, "min": 1e-4, "max": 3e-4}
    rows = [{"shape": "B1 H2 S128 D64 bhsd", "errors": {"sdpa_cudnn": "RuntimeError: no kernel"},
             "eager": eager, "graph": {}, "agreement": {"dq": 1e-3, "dk": 2e-3, "dv": 3e-3}}]
    report = tmp_path / "step.md"
    bench_torch_step.write_report(report, rows, {"device": "H200", "torch": "2.11", "python": "3.11", "steps": 40,
                                                 "rounds": 3, "directory": "DIR", "seconds": 1.0,
                                                 "argv": ["run", "DIR", "--profile"]})
    text = report.read_text()
    assert "`python tools/bench_torch_step.py run DIR --profile` (the GPU)" in text
    assert "| B1 H2 S128 D64 bhsd | ours | 200 (100-300) | 250 (200-300) | 500 (400-600) | yes | 2.00 | 2.50 |" in text
    assert "sdpa_cudnn: RuntimeError: no kernel" in text and json.loads(report.with_suffix(".json").read_text())
