"""tools/gpt_corpus.py, train_gpt.py, train_compare.py and bench_torch_overhead.py without a GPU: the
corpus, a tiny CPU training run, and the report writers on records made here (no device results)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))   # the tools import each other as scripts

import bench_torch_overhead  # noqa: E402
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


def _fake_record(loss, attention="torch SDPA flash", norm_scale=1.0):
    steps = len(loss)
    return {"model": {"layers": 2, "width": 64, "heads": 2, "seq": 64, "vocab": 256},
            "train": {"lr": 1e-3, "lr_warmup": 2, "batch": 2, "bundle_dir": "B"}, "attention": attention,
            "device": "test", "torch": "test", "loss": list(loss), "grad_norm": [norm_scale] * steps,
            "qkv_grad_norm": [[0.5, 0.25]] * steps, "out_grad_norm": [[0.1, 0.2]] * steps, "steps_per_s": 10.0,
            "command": "python tools/train_compare.py run D"}


def _fake_runs(fmha_offset, attention="fmha_mlir.torch.attention", fmha_norm=1.0):
    base = np.linspace(5.5, 2.0, 40)
    wiggle = 0.01 * np.sin(np.arange(40))
    return {"sdpa_seed0": _fake_record(base), "sdpa_seed0_again": _fake_record(base + wiggle),
            "fmha_seed0": _fake_record(base + fmha_offset * wiggle, attention, fmha_norm),
            "sdpa_seed1": _fake_record(base + 0.1)}


def test_the_verdict_follows_its_rule():
    assert train_compare.summarise(_fake_runs(1.5))["verdict"] == "PASS"
    assert train_compare.summarise(_fake_runs(3.0))["verdict"] == "FAIL"                  # 3x the rerun noise
    assert train_compare.summarise(_fake_runs(1.0, fmha_norm=1.02))["verdict"] == "FAIL"  # step 0 off by 2%
    mislabelled = train_compare.summarise(_fake_runs(1.0, attention="torch SDPA flash"))
    assert mislabelled["verdict"] == "FAIL" and mislabelled["mislabelled"] == ["fmha_seed0"]


def test_a_bitwise_repeatable_torch_falls_back_to_the_seed_noise():
    runs = _fake_runs(1.0)
    runs["sdpa_seed0_again"]["loss"] = runs["sdpa_seed0"]["loss"]
    summary = train_compare.summarise(runs)
    assert summary["noise_used"] == "seed" and summary["bound"] == pytest.approx(0.1)
    assert summary["verdict"] == "PASS"


def test_the_training_report_writes_its_markdown_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    for name, record in _fake_runs(1.5).items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    report = tmp_path / "training.md"
    assert train_compare.main(["report", str(tmp_path), "--report", str(report)]) == 0
    text = report.read_text()
    assert "Verdict rule" in text and "**Verdict: PASS.**" in text and "python tools/train_gpt.py build B" in text
    assert json.loads(report.with_suffix(".json").read_text())["verdict"] == "PASS"
    assert report.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_the_training_report_names_the_missing_runs(tmp_path):
    with pytest.raises(SystemExit, match="lacks sdpa_seed0.json"):
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
