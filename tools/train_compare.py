"""Our attention backward against torch's in a real training run: the runs, then the report and plot.

    python tools/train_gpt.py build DIR/bundles                                    # here (MLIR)
    python tools/train_compare.py run DIR --bundle-dir DIR/bundles                 # on the H200: RUNS
    python tools/train_compare.py report DIR --report reports/h200_training.md   # here: .md, .json, .png
    python tools/train_compare.py report DIR1 DIR2 --report R.md       # several models' runs in one report

--model gpt (the default) trains train_gpt.py's GPT; --model llama or gpt_oss a transformers model
(train_hf.py, whose build subcommand makes its bundles). Every GPT run (one JSON each in DIR) has torch's
flash forward; they differ in the backward: the exact one (autograd through the f32 math forward, rounded
once to bf16), torch's flash backward and ours, each REPEATS times on seed 0 (no two runs alike: dQ
atomics, and the model's own), and torch's flash once on seed 1 for the scale of a change of weights and
data. A transformers model's runs differ in the whole attention (train_hf.py: the exact one, transformers'
own and "fmha_mlir"). Both bf16 attentions are held to the exact one's training curve and step-0
gradients, ours to FACTOR x torch's distance: the gate's rule (fmha_mlir/tolerance.py) on the whole
training run. The verdict rule is VERDICT_RULE, printed first in the report; reports/bench_notes.md says
how it came to be.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from build_run import write_report_files  # run as a script: tools/ is on sys.path
from fmha_mlir.tolerance import FACTOR

# train_gpt's attentions, by what the records call them
ATTENTION_OF = {"sdpa": "torch SDPA flash", "fmha": "fmha_mlir.torch.attention",
                "reference": "torch flash forward, f32 reference backward"}
REPEATS = 4                 # runs of seed 0 of each backward
TRAINERS = {"gpt": "train_gpt", "llama": "train_hf", "gpt_oss": "train_hf"}   # --model: the module that trains it


@dataclass(frozen=True)
class Run:
    name: str
    attention: str     # a key of ATTENTION_OF
    seed: int


def _runs() -> tuple[Run, ...]:
    # The exact backward first: every later run's step-0 gradients are compared with its as they end.
    # Then the three alternate, so that a machine that drifts slows them alike.
    runs = [Run(f"{kind}_r{i}", kind, 0) for i in range(1, REPEATS + 1) for kind in ("reference", "sdpa", "fmha")]
    return (*runs, Run("sdpa_seed1", "sdpa", 1))


RUNS = _runs()
STEP0_REFERENCE = RUNS[0].name
VERDICT_RULE = (
    "d(a, b) is the mean of |loss(a) - loss(b)| over the second half of the steps (after the runs have had "
    f"time to drift apart); every backward runs {REPEATS} times on seed 0. PASS when both hold. (1) Curves: "
    "the mean d between our runs and the exact backward's is at most "
    f"{FACTOR:g}x the mean d between torch's runs (flash's backward; a transformers model's own attention) "
    "and the exact backward's. (2) Step 0 (the same weights "
    "and batch, so only the attention differs): for what each layer's attention backward returns (dq, dk, "
    "dv; gpt-oss's sinks), each layer's qkv and out projection gradients and the whole model's gradient, the "
    f"relative distance ||g - g_ref|| / ||g_ref|| of every run of ours to the exact backward's ({STEP0_REFERENCE}) "
    f"is at most {FACTOR:g}x the largest of torch's runs. {FACTOR:g}x a same-precision torch backward is "
    "FlashAttention's rule and the gate's (fmha_mlir/tolerance.py).")


def labels_of(family: str) -> dict[str, str]:
    """The attentions of a model family's runs, by the names RUNS give them: what their records call them."""
    if family == "gpt":
        return ATTENTION_OF
    import train_hf

    return train_hf.labels(family)


def step0_errors(reference: dict[str, list], grads: dict[str, list]) -> dict[str, float]:
    """||g - g_ref|| / ||g_ref|| per gradient group (train_gpt.gradient_groups' tensors)."""
    import torch

    def flat(tensors):
        return torch.cat([t.detach().double().flatten() for t in tensors])

    out = {}
    for name, tensors in grads.items():
        want = flat(reference[name])
        out[name] = float(torch.linalg.vector_norm(flat(tensors) - want) / torch.linalg.vector_norm(want))
    return out


def step0_comparison(ours: list[dict[str, float]], flash: list[dict[str, float]]) -> dict[str, dict]:
    """Per gradient group: the largest step-0 error of our runs and of torch flash's, and their ratio
    (rule 2 wants it at most FACTOR). A group no backward changes (the top layer's out
    projection: its gradient comes before any attention backward) has 0 for both: ratio 0."""
    out = {}
    for group in ours[0]:
        mine, theirs = max(e[group] for e in ours), max(e[group] for e in flash)
        out[group] = {"fmha": mine, "sdpa": theirs,
                      "ratio": mine / theirs if theirs > 0 else 0.0 if mine == 0 else math.inf}
    return out


def run(directory: Path, argv: list[str]) -> int:
    """RUNS in one process, each JSON written as it ends (a time limit leaves the ones done); each
    record holds its step-0 gradients' distance to the first run's (the f32 reference backward)."""
    import importlib

    import train_gpt

    p = argparse.ArgumentParser(prog="train_compare.py run")
    p.add_argument("--model", choices=tuple(TRAINERS), default="gpt")
    family = p.parse_known_args(argv)[0].model
    model = train_gpt.ModelConfig() if family == "gpt" else importlib.import_module(TRAINERS[family]).MODELS[family]
    train_gpt.add_config_arguments(p, model)
    args = p.parse_args(argv)
    directory.mkdir(parents=True, exist_ok=True)
    reference, step0 = {}, {}

    def keep(groups):
        step0.clear()
        step0.update({name: [g.detach().float().cpu() for g in grads] for name, grads in groups.items()})

    for r in RUNS:
        record = train_gpt.train(*train_gpt.configs(p, args, r.attention, r.seed, model), on_step0=keep)
        record["family"] = family
        if family != "gpt":
            record["transformers"] = importlib.import_module("transformers").__version__
        if not reference:
            reference = dict(step0)
        record["step0_error"] = step0_errors(reference, step0)
        record["command"] = shlex.join(["python", "tools/train_compare.py", "run", str(directory), *argv])
        (directory / f"{r.name}.json").write_text(json.dumps(record) + "\n")
        print(f"{r.name}: {record['attention']}, loss {record['loss'][0]:.3f} -> {record['loss'][-1]:.3f}, "
              f"{record['steps_per_s']:.2f} steps/s, step-0 error {record['step0_error']['global']:.2e}", flush=True)
    return 0


def load_runs(directory: Path) -> dict[str, dict]:
    missing = [r.name for r in RUNS if not (directory / f"{r.name}.json").is_file()]
    if missing:
        raise SystemExit(f"error: {directory} lacks {', '.join(m + '.json' for m in missing)}: run "
                         f"`python tools/train_compare.py run {directory} ...` on the GPU first")
    runs = {r.name: json.loads((directory / f"{r.name}.json").read_text()) for r in RUNS}
    steps = {len(r["loss"]) for r in runs.values()}
    if len(steps) != 1:
        raise SystemExit(f"error: the runs in {directory} have different step counts {sorted(steps)}: "
                         "re-run them with the same --steps")
    return runs


def names_of(attention: str) -> list[str]:
    """The seed-0 runs of one backward (a key of ATTENTION_OF)."""
    return [r.name for r in RUNS if r.attention == attention and not r.seed]


def summarise(runs: dict[str, dict]) -> dict:
    """The report's figures and verdict from the runs."""
    loss = {name: np.array(r["loss"]) for name, r in runs.items()}
    steps = len(loss[RUNS[0].name])
    half = steps // 2

    def d(a, b):
        return float(np.abs(loss[a] - loss[b])[half:].mean())

    exact, flash, ours = names_of("reference"), names_of("sdpa"), names_of("fmha")
    pairs = {"fmha vs reference": _pairs(d, ours, exact), "sdpa vs reference": _pairs(d, flash, exact),
             "fmha vs sdpa": _pairs(d, ours, flash), "reference vs reference": _pairs(d, exact, exact),
             "sdpa vs sdpa": _pairs(d, flash, flash), "fmha vs fmha": _pairs(d, ours, ours),
             "sdpa seed 1 vs sdpa seed 0": _pairs(d, ["sdpa_seed1"], flash)}
    curves_ratio = pairs["fmha vs reference"]["mean"] / pairs["sdpa vs reference"]["mean"]
    step0 = step0_comparison([runs[f]["step0_error"] for f in ours], [runs[f]["step0_error"] for f in flash])
    step0_worst = max(v["ratio"] for v in step0.values())
    curves_pass, step0_pass = curves_ratio <= FACTOR, step0_worst <= FACTOR
    # A record whose attention is not what its name says (a mislabelled or hand-edited file) is no result.
    labels = labels_of(runs[RUNS[0].name].get("family", "gpt"))
    mislabelled = [r.name for r in RUNS if runs[r.name]["attention"] != labels[r.attention]]
    base = np.array(runs[flash[0]]["grad_norm"])
    speed = {kind: float(np.median([runs[name]["steps_per_s"] for name in names_of(kind)])) for kind in ATTENTION_OF}
    return {"steps": steps, "late_from_step": half, "pair_gaps": pairs, "curves_ratio": curves_ratio,
            "curves_pass": curves_pass, "step0": step0, "step0_worst_ratio": step0_worst, "step0_pass": step0_pass,
            "step0_error": {name: r["step0_error"] for name, r in runs.items()},
            "grad_norm_ratio": {name: _ratio_summary(np.array(r["grad_norm"]) / base) for name, r in runs.items()
                                if name != flash[0]},
            "final_loss": {name: float(v[-20:].mean()) for name, v in loss.items()},
            "steps_per_s": {name: r["steps_per_s"] for name, r in runs.items()}, "median_steps_per_s": speed,
            "mislabelled": mislabelled,
            "verdict": "PASS" if curves_pass and step0_pass and not mislabelled else "FAIL"}


def _pairs(d, a: list[str], b: list[str]) -> dict:
    """min / mean / max of d over the distinct pairs of a x b."""
    gaps = sorted({tuple(sorted((x, y))): d(x, y) for x in a for y in b if x != y}.values())
    return {"pairs": len(gaps), "min": gaps[0], "mean": float(np.mean(gaps)), "max": gaps[-1]}


def _ratio_summary(r: np.ndarray) -> dict:
    return {"step0": float(r[0]), "median": float(np.median(r)), "p5": float(np.percentile(r, 5)),
            "p95": float(np.percentile(r, 95))}


def report_lines(runs: dict[str, dict], s: dict, command: str, report: Path) -> list[str]:
    """The report on one model's runs; command: the report's own."""
    first = runs[RUNS[0].name]
    m, t, gaps = first["model"], first["train"], s["pair_gaps"]
    family = first.get("family", "gpt")
    labels, torch_name = labels_of(family), "torch flash" if family == "gpt" else labels_of(family)["sdpa"]
    lines = [f"# Training with our attention backward against torch's ({first['device']})", ""]
    if s["mislabelled"]:
        lines += [f"**NOT A RESULT: {', '.join(s['mislabelled'])} did not run the attention its name says.**", ""]
    lines += [f"**Verdict rule (stated before the numbers):** {VERDICT_RULE}", "",
              f"**Verdict: {s['verdict']}.** (1) Curves {'pass' if s['curves_pass'] else 'fail'}: mean d to the exact "
              f"backward's runs, ours {gaps['fmha vs reference']['mean']:.5f}, {torch_name}'s "
              f"{gaps['sdpa vs reference']['mean']:.5f} ({s['curves_ratio']:.2f}x, allowed {FACTOR:g}x; seed 1 against "
              f"seed 0: {gaps['sdpa seed 1 vs sdpa seed 0']['mean']:.4f}). (2) Step 0 "
              f"{'passes' if s['step0_pass'] else 'fails'}: our largest distance to the exact backward is "
              f"{s['step0_worst_ratio']:.2f}x {torch_name}'s (allowed {FACTOR:g}x).", "",
              f"Model: {_model_text(family, m)} (tools/gpt_corpus.py's synthetic "
              f"corpus; log(vocab) = {math.log(m['vocab']):.2f}), causal; AdamW lr "
              f"{t['lr']} (warm-up {t['lr_warmup']}, cosine to lr/10), grad clip 1.0, bf16 autocast, batch "
              f"{t['batch']}, {s['steps']} steps; torch {first['torch']}"
              f"{'' if family == 'gpt' else ', transformers ' + first['transformers']}. "
              f"{GPT_ATTENTIONS if family == 'gpt' else 'The attentions'}: "
              f"{', '.join(f'{k} = {v}' for k, v in labels.items())}.", "",
              "Commands:", "",
              f"- bundles (here, MLIR): `{_build_command(family, m, t)}`",
              f"- the runs (the GPU, one command): `{first.get('command', 'n/a')}`",
              f"- this report and {report.with_suffix('.png').name} (here): "
              f"`{command}`", "",
              "## (1) Curves: second-half mean |loss difference| d", "",
              "Every pair of runs of the two kinds (min / mean / max of d over the distinct pairs):", "",
              "| pairs | count | min | mean | max |", "| --- " * 5 + "|"]
    for kind, g in gaps.items():
        lines.append(f"| {kind} | {g['pairs']} | {g['min']:.5f} | {g['mean']:.5f} | {g['max']:.5f} |")
    lines += ["", "## (2) Step 0: ||g - g_ref|| / ||g_ref|| against the exact backward "
                  f"({STEP0_REFERENCE})", "",
              f"| gradient | ours (largest of our runs) | {torch_name} (largest of its runs) | ratio |",
              "| --- " * 4 + "|"]
    for group, v in s["step0"].items():
        lines.append(f"| {group} | {v['fmha']:.3e} | {v['sdpa']:.3e} | {v['ratio']:.2f} |")
    lines += ["", "Every run's whole-model (global) step-0 distance: " + ", ".join(
        f"{name} {e['global']:.2e}" for name, e in s["step0_error"].items()) + ".", "",
              "## Runs", "",
              "| run | backward | final loss (mean of last 20 steps) | steps/s (after warm-up) | global grad norm / "
              f"{names_of('sdpa')[0]}'s: median (5th-95th percentile) |", "| --- " * 5 + "|"]
    for r in RUNS:
        ratio = s["grad_norm_ratio"].get(r.name)
        spread = f"{ratio['median']:.4f} ({ratio['p5']:.4f}-{ratio['p95']:.4f})" if ratio else "1 (the base)"
        lines.append(f"| {r.name} | {runs[r.name]['attention']} | {s['final_loss'][r.name]:.4f} | "
                     f"{s['steps_per_s'][r.name]:.2f} | {spread} |")
    speed = s["median_steps_per_s"]
    lines += ["", f"Median steps/s of the seed-0 runs (whole training step: forward, backward, optimizer): ours "
                  f"{speed['fmha']:.2f}, {torch_name} {speed['sdpa']:.2f} ({speed['fmha'] / speed['sdpa']:.3f}x); "
                  f"the f32 reference {speed['reference']:.2f} (a yardstick, not a candidate)."]
    return lines


def _model_text(family: str, m: dict) -> str:
    if family == "gpt":
        return (f"GPT, {m['layers']} layers, width {m['width']}, {m['heads']} heads of {m['width'] // m['heads']}, "
                f"sequence {m['seq']}, vocab {m['vocab']}, pre-LN, learned positions")
    import train_hf

    return train_hf.describe(m)


def _build_command(family: str, m: dict, t: dict) -> str:
    directory = t["bundle_dir"] or "DIR"
    if family == "gpt":
        return f"python tools/train_gpt.py build {directory}"
    options = [f"--{k.replace('_', '-')} {v}" for k, v in m.items() if k != "family"]
    return f"python tools/train_hf.py build {directory} --model {family} {' '.join(options)} --batch {t['batch']}"


GPT_ATTENTIONS = "Every run has torch's flash forward; the backwards"
COLOURS = {"reference": "tab:green", "sdpa": "tab:blue", "fmha": "tab:red"}


def plot(models: list[dict[str, dict]], path: Path) -> None:
    """Each model's runs (a column each): the loss curves, and their distance to the exact runs' mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(models), figsize=(9 * len(models), 8), sharex="col", squeeze=False)
    for runs, (top, bottom) in zip(models, axes.T):
        _plot_model(runs, top, bottom)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_model(runs: dict[str, dict], top, bottom) -> None:
    loss = {name: np.array(r["loss"]) for name, r in runs.items()}
    exact = np.mean([loss[name] for name in names_of("reference")], axis=0)
    first = runs[RUNS[0].name]
    family = first.get("family", "gpt")
    what = ("GPT training: the exact backward, torch flash's and ours" if family == "gpt" else
            f"{family} (transformers): the exact attention, {labels_of(family)['sdpa']} and fmha_mlir")
    top.set_title(f"{what} ({first['device']})")
    for r in RUNS:
        colour, style = ("tab:gray", ":") if r.seed else (COLOURS[r.attention], "-")
        top.plot(loss[r.name], style, color=colour, linewidth=0.8, label=r.name)
        bottom.plot(np.abs(loss[r.name] - exact) + 1e-7, style, color=colour, linewidth=0.8, label=r.name)
    top.set_ylabel("loss")
    top.legend(ncol=4, fontsize=7)
    bottom.set_yscale("log")
    bottom.set_ylabel("|loss - the exact backward's mean loss| (+1e-7)")
    bottom.set_xlabel("step")


def report(directories: list[Path], path: Path) -> int:
    """One report on the runs of each directory (one model's each); several: a section per model (its
    runs' family), the JSON's summaries by family, the plot's columns in the same order."""
    models = [load_runs(d) for d in directories]
    summaries = [summarise(runs) for runs in models]
    command = shlex.join(["python", "tools/train_compare.py", "report", *map(str, directories), "--report", str(path)])
    lines = [report_lines(runs, s, command, path) for runs, s in zip(models, summaries)]
    if len(models) == 1:
        write_report_files(path, lines[0], summaries[0])
    else:
        families = [runs[RUNS[0].name].get("family", "gpt") for runs in models]
        verdicts = ", ".join(f"{f} {s['verdict']}" for f, s in zip(families, summaries))
        joined = [lines[0][0], "", f"Models: {', '.join(families)} (a section each; verdicts: {verdicts}).", ""]
        for family, section in zip(families, lines):   # each section's headings one level down
            joined += [f"## {family}", "", *(("#" + x if x.startswith("#") else x) for x in section[2:])]
        write_report_files(path, joined, dict(zip(families, summaries)))
    plot(models, path.with_suffix(".png"))
    verdict = "PASS" if all(s["verdict"] == "PASS" for s in summaries) else "FAIL"
    print(f"{verdict}: wrote {path}, {path.with_suffix('.json')} and {path.with_suffix('.png')}")
    return 0 if verdict == "PASS" else 1


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # allow_abbrev off: the training options pass through to `run` untouched
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("action", choices=("run", "report"))
    p.add_argument("directory", type=Path, nargs="+",
                   help="where the runs' JSONs are written (run: one) or read (report: one per model)")
    p.add_argument("--report", type=Path, default=Path("reports/h200_training.md"))
    args, rest = p.parse_known_args(argv)
    if args.action == "run":
        if len(args.directory) > 1:
            p.error("run writes one directory (got several)")
        return run(args.directory[0], rest)
    if rest:
        p.error(f"report takes no training options (got {' '.join(rest)})")
    return report(args.directory, args.report)


if __name__ == "__main__":
    sys.exit(main())
