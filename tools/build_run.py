"""What the build-here / run-on-the-GPU tools share (gpu_matrix, bench_bwd, differential, determinism,
exp2_error): the command line's common part and a report beside its data, the Markdown a person reads
and the JSON a later run or tool reads."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def build_run_parser(doc: str, report: str, actions=("build", "run"), action_help: str | None = None
                     ) -> argparse.ArgumentParser:
    """`tool ACTION DIRECTORY [--report FILE]`: the bundles' folder, and the report a run writes."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("action", choices=actions, help=action_help)
    p.add_argument("directory", type=Path)
    p.add_argument("--report", type=Path, default=Path(report))
    return p


def build_bundles(directory: Path, arch: str, pairs, ptxas: str | None = None) -> int:
    """Compile one bundle per (spec, config) into its bundle_path under `directory` (needs MLIR; a spec
    listed twice is built once). `ptxas` of a CUDA toolkit: cubins, so the GPU needs no JIT. Returns how
    many were built."""
    from fmha_mlir.api import bundle_path, compile_bundle
    from fmha_mlir.compiler import Compiler

    compiler, built = Compiler(ptxas=ptxas), set()
    for spec, config in pairs:
        out = bundle_path(directory, spec, arch, config=config)
        if out not in built:
            compile_bundle(spec, arch, compiler, config=config).save(out)
            built.add(out)
    return len(built)


def earlier_rows(report: Path, resume: bool) -> list[dict]:
    """--resume: the rows an earlier, cut-short run wrote into the report's .json (none without it)."""
    data = report.with_suffix(".json")
    return json.loads(data.read_text()) if resume and data.is_file() else []


def write_report_files(report: Path, lines: list[str], data) -> None:
    """report (.md) from `lines`, and the same name with .json from `data`."""
    report.write_text("\n".join(lines) + "\n")
    report.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")


def build_bf16_bundles(directory: Path, shapes, mask: str, arch: str = "sm_90") -> list[Path]:
    """The bundles a torch run on bf16 [B, H, S, D] tensors of these shapes asks AttentionBackward for
    (named as its spec_for names them), compiled here (needs MLIR); one per distinct spec."""
    import numpy as np

    from fmha_mlir.api import AttentionBackward, bundle_path, compile_bundle

    specs = {AttentionBackward().spec_for(*(np.empty(shape, np.uint16),) * 3, mask=mask, dtype="bf16")
             for shape in shapes}
    paths = []
    for spec in sorted(specs, key=lambda s: s.kernel_prefix):
        paths.append(bundle_path(directory, spec, arch))
        compile_bundle(spec, arch).save(paths[-1])
    return paths
