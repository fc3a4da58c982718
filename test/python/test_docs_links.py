"""The docs point at files that exist and speak in the present tense.

Every markdown link to a repository file must resolve, and in the README, docs/ and the reports' index every
repository path written out in the text (fmha_mlir/..., passes/..., reports/...) must exist. Reports are
records of past runs and may name files of their time; their links still must resolve. Project-history
labels (an issue or session number, a seed's label) belong in git history, not in the docs.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {".git", ".bundles", "node_modules"}


def _markdown_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md")
                  if not any(part in SKIPPED_DIRS or part.startswith(".venv") or part.endswith(".egg-info")
                             for part in p.relative_to(ROOT).parts))


MARKDOWN = _markdown_files()
# Pages that say what is, as opposed to the reports (records of past runs).
CURRENT = [p for p in MARKDOWN if p.name == "README.md" and p.parent in (ROOT, ROOT / "reports")
           or p.is_relative_to(ROOT / "docs")]

LINK = re.compile(r"!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
# A repository path in prose: a top-level folder and at least one more component; a path followed by
# `<` or `*` is a pattern (passes/expand_<body>_body.py), not a file.
REPO_PATH = re.compile(r"(?<![\w./-])((?:fmha_mlir|passes|dialects|tools|test|docs|reports|\.ci)/[\w./-]*\w)(?![\w<*])")
# A seeds' label is zero-padded (a random seed, "seed 0", is a fact about a run).
HISTORY_LABEL = re.compile(r"\b(?:(?:issue|session|device call) #?\d+|seed 0\d\d)\b", re.IGNORECASE)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def link_targets(text: str) -> list[str]:
    """The repository-file targets of a page's markdown links (external URLs and bare anchors left out)."""
    targets = (m.group(1).split("#")[0] for m in LINK.finditer(text))
    return [t for t in targets if t and not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_the_pages_are_found():
    assert ROOT / "README.md" in CURRENT and ROOT / "docs" / "index.md" in CURRENT


@pytest.mark.parametrize("page", MARKDOWN, ids=_rel)
def test_markdown_links_resolve(page):
    missing = [t for t in link_targets(page.read_text()) if not (page.parent / t).exists()]
    assert not missing, f"{_rel(page)} links to missing files: {missing}"


@pytest.mark.parametrize("page", CURRENT, ids=_rel)
def test_repository_paths_in_the_text_exist(page):
    missing = sorted({m.group(1) for m in REPO_PATH.finditer(page.read_text()) if not (ROOT / m.group(1)).exists()})
    assert not missing, f"{_rel(page)} names missing files: {missing}"


@pytest.mark.parametrize("page", CURRENT, ids=_rel)
def test_no_history_labels(page):
    labels = sorted({m.group(0) for m in HISTORY_LABEL.finditer(page.read_text())})
    assert not labels, f"{_rel(page)} carries project-history labels: {labels}"


def test_the_checks_catch_what_they_look_for():
    assert link_targets('[a](docs/x.md#s) [b](https://x.org/a.md) [c](#here) ![d](img/p.png "t")') \
        == ["docs/x.md", "img/p.png"]
    assert [m.group(1) for m in REPO_PATH.finditer("see passes/warp_body.py, `passes/expand_<b>_body.py`")] \
        == ["passes/warp_body.py"]
    assert HISTORY_LABEL.findall("as issue 9 asked, seed 003's tiling, session 4, seed 0.03") \
        == ["issue 9", "seed 003", "session 4"]
