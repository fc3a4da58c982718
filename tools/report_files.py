"""A report beside its data: the Markdown table a person reads and the JSON a later run or tool reads."""
from __future__ import annotations

import json
from pathlib import Path


def write_report_files(report: Path, lines: list[str], data) -> None:
    """report (.md) from `lines`, and the same name with .json from `data`."""
    report.write_text("\n".join(lines) + "\n")
    report.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
