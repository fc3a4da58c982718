"""The docs' mutant table is generated from the mutant list and the recorded runs, never kept by hand."""
from __future__ import annotations

import json

from fmha_mlir.tools import mutants
from fmha_mlir.tools.mutants import MUTANTS, RESULTS, TABLE, Outcome, merge_results, mutant_table, read_results


def test_docs_mutant_table_is_the_generated_one():
    assert TABLE.read_text() == mutant_table(read_results(RESULTS)), \
        "docs/mutants.md is stale: python -m fmha_mlir.tools.mutants --table docs/mutants.md"


def test_every_recorded_result_names_a_listed_mutant():
    listed = {m.name for m in MUTANTS}
    assert set(read_results(RESULTS)["mutants"]) <= listed


def test_a_run_merges_into_the_results_and_the_table_shows_it(tmp_path):
    path = tmp_path / "mutants.json"
    path.write_text(json.dumps({"how": "a test run", "mutants": {"retired mutant": {"failing": 1, "first": ["t"]}}}))
    full, fast, survivor = MUTANTS[0], MUTANTS[1], MUTANTS[2]
    merge_results(path, [
        Outcome(full, ["test/python/test_a.py::b", "test/python/test_a.py::c", "test/python/test_a.py::b"], 1.0),
        Outcome(fast, ["test/python/test_a.py::test_variant_matches_the_oracle[x]"], 1.0, first_failure=True),
        Outcome(survivor, [], 1.0)])
    document = read_results(path)
    assert document["how"] == "a test run"
    assert document["mutants"] == {full.name: {"failing": 2, "first": ["test_a.py::b", "test_a.py::c"]},
                                   fast.name: {"failing": None, "first": ["test_a.py::variant[x]"]},
                                   survivor.name: {"failing": 0, "first": []}}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in mutant_table(document).splitlines()
            if line.startswith("| ")}
    assert rows[full.name].endswith("| 2: `test_a.py::b`, `test_a.py::c` |")
    assert rows[fast.name].endswith("| killed at the first failure: `test_a.py::variant[x]` |")
    assert rows[survivor.name].endswith("| **SURVIVED** |")
    assert rows[MUTANTS[3].name].endswith("| not in the results file yet |")
    assert f"{len(MUTANTS)} mutants: 2 killed, 1 survived, {len(MUTANTS) - 3} without a recorded run" \
        in mutant_table(document)


def test_table_flag_writes_the_table_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(mutants, "run_subset", None)   # a run would call it
    out = tmp_path / "table.md"
    assert mutants.main(["--table", str(out)]) == 0
    assert out.read_text() == TABLE.read_text()


def test_a_mutant_s_recorded_killer_runs_first_and_the_subset_only_if_it_passes(tmp_path, monkeypatch):
    """--first-failure with a results entry: the recorded killing tests (as node ids) run first, under the
    subset's selection; the whole subset runs only when they kill nothing (a test gone, or now passing)."""
    calls = []

    def fake(scratch, mutant, tests, first_failure, start, hinted=False):
        calls.append((tests, hinted))
        return Outcome(mutant, ["killer"] if hinted == kills_hinted else [], 0.0, first_failure=first_failure)

    monkeypatch.setattr(mutants, "_pytest", fake)
    base = tmp_path / "base"
    (base / "pkg").mkdir(parents=True)
    hint = ("test_a.py::variant[x]",)
    for kills_hinted in (True, False):
        calls.clear()
        mutants.run_subset(base, None, True, hint)
        expected = [(["test/python/test_a.py::test_variant_matches_the_oracle[x]"], True)]
        assert calls == expected + ([] if kills_hinted else [(list(mutants.SUBSET_FILES), False)])
