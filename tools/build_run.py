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


def write_report_files(report: Path, lines: list[str], data) -> None:
    """report (.md) from `lines`, and the same name with .json from `data`."""
    report.write_text("\n".join(lines) + "\n")
    report.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
