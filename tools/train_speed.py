"""Training speed of tools/train_gpt.py's GPT: steps/s with our attention against SDPA's default backend
(and SDPA flash), runs interleaved, the spread of the runs given.

    python tools/train_gpt.py build DIR --width W --heads H --seq S    # here (MLIR), per model below
    python tools/train_speed.py run DIR --report reports/h200_train_speed.md   # the GPU

Each round trains every contender once per model, the contenders' order rotated every round, each run a
fresh model (train_gpt.train: its optimiser, bf16 autocast, grad clipping; steps/s over the steps after
--timing-warmup). The contenders: `fmha` (torch's flash forward, our backward), `sdpa_default`
(F.scaled_dot_product_attention as a model calls it: cuDNN's forward and backward on an H200) and `sdpa`
(SDPA forced to flash, forward and backward: ours differs from it only in the backward). One process.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

from build_run import write_report_files  # tools/ is on sys.path

CONTENDERS = ("fmha", "sdpa_default", "sdpa")
# (width, heads, seq, batch): head dims 64 and 128, 16k tokens per step
MODELS = ((512, 8, 1024, 16), (2048, 16, 1024, 16), (512, 8, 4096, 4), (2048, 16, 4096, 4))


def model_name(model: tuple) -> str:
    width, heads, seq, batch = model
    return f"width {width}, {heads} heads of {width // heads}, S {seq}, batch {batch}"


def run(directory: Path, report: Path, rounds: int, steps: int, warmup: int, layers: int,
        only: list[str] | None) -> int:
    import torch

    import train_gpt

    rows, started = [], time.perf_counter()
    for model in MODELS:
        if only and model_name(model) not in only:
            continue
        width, heads, seq, batch = model
        m = train_gpt.ModelConfig(layers=layers, width=width, heads=heads, seq=seq)
        speeds = {c: [] for c in CONTENDERS}
        for r in range(rounds):
            order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[:r % len(CONTENDERS)]
            for contender in order:
                t = train_gpt.TrainConfig(contender, seed=0, steps=warmup + steps, batch=batch,
                                          timing_warmup=warmup, bundle_dir=str(directory))
                record = train_gpt.train(m, t)
                speeds[contender].append(record["steps_per_s"])
                torch.cuda.empty_cache()
        rows.append({"model": model_name(model), "steps_per_s": speeds})
        print(model_name(model), {c: [round(x, 2) for x in v] for c, v in speeds.items()},
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        # written after every model: a run cut short keeps the models it finished
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "python": platform.python_version(), "layers": layers, "rounds": rounds, "steps": steps,
                "warmup": warmup, "argv": sys.argv[1:], "seconds": time.perf_counter() - started}
        write_report(report, rows, meta)
    return 0


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def write_report(path: Path, rows: list[dict], meta: dict) -> None:
    lines = [f"# Training speed: the GPT of tools/train_gpt.py with our attention against SDPA ({meta['device']})",
             "", f"torch {meta['torch']}, Python {meta['python']}; {meta['layers']} layers, bf16 autocast, "
             f"AdamW; {meta['rounds']} interleaved rounds, each run {meta['steps']} timed steps after "
             f"{meta['warmup']} untimed ones, a fresh model per run; {meta['seconds']:.0f} s in all. Command: "
             f"`python tools/train_speed.py {' '.join(meta['argv'])}` (the GPU; the bundles from `python "
             "tools/train_gpt.py build DIR --width W --heads H --seq S` per model, here).", "",
             "fmha: torch's flash forward, our backward; sdpa_default: SDPA's default backend (cuDNN on the "
             "H200), forward and backward; sdpa: SDPA flash, forward and backward. steps/s: median over the "
             "runs (min-max); the ratios are of the medians.", "",
             "| model | fmha | sdpa_default | sdpa (flash) | fmha / sdpa_default | fmha / flash |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        s = row["steps_per_s"]
        ours = statistics.median(s["fmha"])
        lines.append(f"| {row['model']} | {_spread(s['fmha'])} | {_spread(s['sdpa_default'])} | "
                     f"{_spread(s['sdpa'])} | {ours / statistics.median(s['sdpa_default']):.2f} | "
                     f"{ours / statistics.median(s['sdpa']):.2f} |")
    write_report_files(path, lines, {"meta": meta, "rows": rows})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("run",))
    p.add_argument("directory", type=Path, help="the bundles (train_gpt.py build)")
    p.add_argument("--report", type=Path, default=Path("reports/h200_train_speed.md"))
    p.add_argument("--rounds", type=int, default=3, help="interleaved runs of each contender per model")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per run before them")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--model", action="append", help="run only this model (its name as printed; repeatable)")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.warmup, args.layers) < 1:
        p.error("--rounds, --steps, --warmup and --layers: give at least 1")
    return run(args.directory, args.report, args.rounds, args.steps, args.warmup, args.layers, args.model)


if __name__ == "__main__":
    sys.exit(main())
