"""tools/sanitize.py without a GPU: the plan, the sanitizer command lines, reading compute-sanitizer's
output (fixtures in data/sanitizer, written in its format), the report, --resume and the time limit (a
fake sanitizer that prints the fixtures), and the child script on the CPU interpreter."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS_DIR = Path(__file__).parents[2] / "tools"
sys.path.insert(0, str(TOOLS_DIR))   # the tools import each other as scripts do

import sanitize  # noqa: E402
from sanitize_child import GATE_PREFIX  # noqa: E402
from sanitize_plan import FEATURES, plan, problem_count  # noqa: E402
from sanitize_report import Header, write_report  # noqa: E402
from sanitizer import judge, parse_output  # noqa: E402

DATA = Path(__file__).parent / "data" / "sanitizer"
FAKE = DATA / "fake_sanitizer.py"
VARIANTS, SKIPPED = plan("sm_90")
ARCH = "sm_90"


def test_plan_has_every_feature_with_every_mask_of_each_body_that_takes_it():
    names = [v.name for v in VARIANTS]
    assert len(names) == len(set(names))   # one bundle per variant
    masks = {}
    for v in VARIANTS:
        masks.setdefault((v.body, v.spec.dtype, v.feature), set()).add(v.spec.mask.kind)
    assert all(len(kinds) == 4 for kinds in masks.values())
    assert {f.name for f in FEATURES} == {feature for _, _, feature in masks}
    assert {(b, d) for b, d, _ in masks} == {("tiled", "f16"), ("tiled", "bf16"), ("warp", "f16"), ("warp", "bf16"),
                                             ("warp", "f32")}
    assert ("tiled", "bf16", "grad_accum bf16") in masks and ("tiled", "f16", "grad_accum bf16") not in masks
    refused = {(s.body, s.dtype, s.feature): s.reason for s in SKIPPED}
    assert refused[("tiled", "f32", "every feature")].startswith("dtype: the tiled body computes f16 and bf16")
    assert refused[("warp", "f32", "deterministic")].startswith("deterministic: the warp body")
    plain_d128 = [v for v in VARIANTS if v.name.startswith("fmha_bwd_f16_d128x128_g1_nomask_tiled_m64n128w8s2_")]
    assert len(plain_d128) == 1 and plain_d128[0].spec.scale == 1 / math.sqrt(128)


def _options(tmp_path, **kw):
    base = dict(directory=tmp_path / "bundles", arch=ARCH, tools=("memcheck", "racecheck", "synccheck"), jobs=4,
                timeout=60.0, report=tmp_path / "report.md", sanitizer=str(FAKE), python="python3")
    return sanitize.RunOptions(**{**base, **kw})


def test_each_tool_gets_its_options_and_the_error_exit_status(tmp_path):
    options, variant = _options(tmp_path), VARIANTS[0]
    child = ["python3", str(TOOLS_DIR / "sanitize_child.py"), str(tmp_path / "bundles" / ARCH / variant.name)]
    assert sanitize.run_command(options, variant, "memcheck") == [
        str(FAKE), "--tool", "memcheck", "--leak-check", "full", "--error-exitcode", "99", *child]
    assert sanitize.run_command(options, variant, "racecheck") == [
        str(FAKE), "--tool", "racecheck", "--racecheck-report", "all", "--error-exitcode", "99", *child]
    assert sanitize.run_command(options, variant, "synccheck") == [
        str(FAKE), "--tool", "synccheck", "--error-exitcode", "99", *child]


@pytest.mark.parametrize("fixture,exit_status,status,errors,warnings,first", [
    ("memcheck_clean.txt", 0, "clean", 0, 0, None),
    ("memcheck_errors.txt", 99, "errors", 3, 0, "========= Invalid __global__ read of size 16 bytes"),
    ("racecheck_clean.txt", 0, "clean", 0, 0, None),
    ("racecheck_hazards.txt", 99, "errors", 1, 1, "========= Error: Race reported between Write access at "
                                                  "fmha_bwd_bf16_d64x64_g1_nomask_dq_dk_dv+0x2e40"),
    # 0 hazards, but the child died after one problem: no evidence it ran, so not clean.
    ("racecheck_target_died.txt", 1, "failed", 0, 0, None),
    ("synccheck_errors.txt", 99, "errors", 1, 0, "========= Barrier error detected. Divergent thread(s) in warp"),
    ("synccheck_gate_fail.txt", 1, "gate_fail", 0, 0, None),
    ("synccheck_clean.txt", None, "timeout", 0, 0, None),
])
def test_sanitizer_output_is_judged_on_its_summary_exit_status_and_gate_lines(fixture, exit_status, status, errors,
                                                                             warnings, first):
    verdict = judge((DATA / fixture).read_text(), exit_status, GATE_PREFIX, 2)
    assert (verdict.status, verdict.findings.errors, verdict.findings.warnings) == (status, errors, warnings)
    assert (verdict.findings.first_lines[0] if verdict.findings.first_lines else None) == first
    assert verdict.tail == () if status == "clean" else verdict.tail


def test_no_summary_means_the_tool_did_not_finish():
    text = "========= COMPUTE-SANITIZER\ngate B2 Hq4 Sq67 Sk45 bhsd: PASS (worst 0.41 of the bound)\n"
    assert parse_output(text).errors is None
    assert judge(text, 0, GATE_PREFIX, 1).status == "failed"


def test_memcheck_findings_skip_the_bookkeeping_lines():
    lines = parse_output((DATA / "memcheck_errors.txt").read_text()).first_lines
    assert "=========     Address 0x7f3a2c0a1200 is out of bounds" in lines
    assert not any("SUMMARY" in line or line.strip() == "=========" for line in lines)


def _header(tools=("memcheck", "racecheck", "synccheck")):
    return Header(ARCH, "NVIDIA H200, 580.159.04, 143771 MiB", "Version 2099.1.0 (fake)",
                  ("python3 tools/sanitize.py build DIR --arch sm_90",),
                  ("compute-sanitizer --tool memcheck ... BUNDLE",),
                  tools, 12.0)


def test_report_shows_each_variant_and_tool_with_its_findings(tmp_path):
    variants = [next(v for v in VARIANTS
                     if (v.body, v.spec.dtype, v.spec.mask.kind, v.feature) == ("tiled", "f16", "none", f))
                for f in ("plain", "hdim 128")]
    rows = []
    for variant, tool, fixture, status in ((variants[0], "memcheck", "memcheck_errors.txt", 99),
                                           (variants[0], "racecheck", "racecheck_hazards.txt", 99),
                                           (variants[1], "memcheck", "memcheck_clean.txt", 0)):
        v = judge((DATA / fixture).read_text(), status, GATE_PREFIX, 2)
        rows.append({"variant": variant.name, "body": variant.body, "dtype": variant.spec.dtype, "tool": tool,
                     "status": v.status, "exit": status, "errors": v.findings.errors, "warnings": v.findings.warnings,
                     "first_lines": list(v.findings.first_lines), "gates": list(v.gates), "tail": list(v.tail),
                     "seconds": 3.0, "command": f"compute-sanitizer --tool {tool} ..."})
    report = tmp_path / "r.md"
    write_report(report, _header(), variants, SKIPPED, rows)
    text = report.read_text()
    assert f"| {variants[0].name} | tiled | f16 | none | plain | **3 errors** | **1 error**, 1 warning | not run |" \
        in text
    assert (f"| {variants[1].name} | tiled | f16 | none | hdim 128 | clean | not run | not run | "
            "PASS (worst 0.41) / PASS (worst 0.38) |") in text
    assert "**incomplete: 3 of 6 planned runs**" in text
    assert "### " + variants[0].name + ", memcheck: **3 errors**" in text
    assert "=========     Address 0x7f3a2c0a1200 is out of bounds" in text
    assert "- warp: f16 deterministic, f16 deterministic bias + dbias, bf16 deterministic, " in text
    assert "- tiled: f32 every feature: dtype: the tiled body computes f16 and bf16" in text
    assert "NVIDIA H200, 580.159.04" in text and "Version 2099.1.0 (fake)" in text
    assert json.loads(report.with_suffix(".json").read_text()) == rows


def _fake_bundles(options, variants, outcomes=None):
    for v in variants:
        folder = sanitize.bundle_dir(options, v)
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text("{}")
        if outcomes and v.name in outcomes:
            (folder / "fake_outcome.json").write_text(json.dumps(outcomes[v.name]))


def test_run_records_errors_and_timeouts_and_resume_runs_only_what_is_missing(tmp_path):
    two = [v for v in VARIANTS if v.feature == "plain" and v.spec.mask.kind == "none" and v.spec.dtype == "bf16"]
    assert len(two) == 2   # warp and tiled
    options = _options(tmp_path, only="bf16_d64x64_g1_nomask_(tiled|warp)", timeout=3.0, logs=tmp_path / "logs")
    _fake_bundles(options, two, {two[0].name: {"racecheck": ["racecheck_hazards.txt", 99]},
                                 two[1].name: {"memcheck": ["sleep", 30]}})
    assert sanitize.run(options, _header()) == 1
    rows = json.loads(options.report.with_suffix(".json").read_text())
    status = {(r["variant"], r["tool"]): r["status"] for r in rows}
    assert status == {(two[0].name, "memcheck"): "clean", (two[0].name, "racecheck"): "errors",
                      (two[0].name, "synccheck"): "clean", (two[1].name, "memcheck"): "timeout",
                      (two[1].name, "racecheck"): "clean", (two[1].name, "synccheck"): "clean"}
    assert (tmp_path / "logs" / f"{two[0].name}.racecheck.log").read_text() == (
        DATA / "racecheck_hazards.txt").read_text()
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == sorted(   # the runs that were not clean
        [f"{two[0].name}.racecheck.log", f"{two[1].name}.memcheck.log"])

    # A cut-short run: drop two rows; --resume runs just those (now clean) and keeps the rest as they were.
    (sanitize.bundle_dir(options, two[1]) / "fake_outcome.json").unlink()
    kept = [r for r in rows if r["tool"] != "memcheck"]
    options.report.with_suffix(".json").write_text(json.dumps(kept))
    resumed = _options(tmp_path, only=options.only, resume=True)
    assert sanitize.run(resumed, _header()) == 1   # the racecheck errors remain
    again = json.loads(options.report.with_suffix(".json").read_text())
    assert again[:len(kept)] == kept
    assert {(r["variant"], r["tool"], r["status"]) for r in again[len(kept):]} == {
        (two[0].name, "memcheck", "clean"), (two[1].name, "memcheck", "clean")}
    assert "from an earlier run" in options.report.read_text()


def test_run_refuses_missing_bundles_with_the_build_command(tmp_path, capsys):
    assert sanitize.run(_options(tmp_path, only="nomask_warp"), _header()) == 2
    assert "build them with `python tools/sanitize.py build" in capsys.readouterr().err


def test_budget_leaves_the_rest_for_resume(tmp_path):
    options = _options(tmp_path, only="bf16_d64x64_g1_nomask_warp", budget=0.0, jobs=1)
    _fake_bundles(options, [v for v in VARIANTS if v.name.startswith("fmha_bwd_bf16_d64x64_g1_nomask_warp")])
    assert sanitize.run(options, _header()) == 1
    assert json.loads(options.report.with_suffix(".json").read_text()) == []
    assert "**incomplete: 0 of 3 planned runs**" in options.report.read_text()


def test_dry_run_prints_every_command_and_the_estimate(tmp_path, capsys):
    assert sanitize.main(["run", str(tmp_path), "--dry-run", "--jobs", "8", "--report", str(tmp_path / "r.md"),
                          "--sanitizer", "compute-sanitizer"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands, summary = lines[:-1], lines[-1]
    assert len(commands) == 3 * len(VARIANTS)
    assert all(c.startswith("compute-sanitizer --tool ") for c in commands)
    assert commands[0].startswith("compute-sanitizer --tool racecheck --racecheck-report all")   # the slowest first
    assert summary.startswith(f"# {3 * len(VARIANTS)} runs of {len(VARIANTS)} variants;")
    assert "assumed (ASSUMED_SECONDS)" in summary and f"{len(VARIANTS)} bundles not built yet" in summary


def test_estimate_prefers_measured_seconds_and_packs_runs_onto_jobs():
    runs = [(v, "memcheck") for v in VARIANTS if v.body == "warp"][:4]
    measured = [{"body": "warp", "tool": "memcheck", "status": "clean", "seconds": s} for s in (2.0, 4.0)]
    total, wall, per = sanitize.estimate(runs, 2, measured)
    assert (total, wall, per[("warp", "memcheck")]) == (12.0, 6.0, 3.0)


def test_bad_tool_names_are_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        sanitize.main(["run", "DIR", "--tools", "memcheck,initcheck"])
    assert exit_info.value.code == 2
    assert "unknown sanitizer tool(s) initcheck: use a comma-separated list of memcheck, racecheck, synccheck" in (
        capsys.readouterr().err)


def test_child_runs_a_bundle_on_its_problems_and_gates_them(tmp_path):
    from fmha_mlir.api import compile_bundle

    variant = next(v for v in VARIANTS if v.body == "warp" and v.spec.dtype == "f32" and v.feature == "varlen")
    folder = tmp_path / variant.name
    compile_bundle(variant.spec, ARCH, config=variant.config).save(folder)
    done = subprocess.run([sys.executable, str(TOOLS_DIR / "sanitize_child.py"), str(folder), "--executor", "cpu"],
                          capture_output=True, text=True, timeout=300)
    gates = [line for line in done.stdout.splitlines() if line.startswith(GATE_PREFIX)]
    assert done.returncode == 0, done.stderr
    assert len(gates) == problem_count(variant.spec) == 1
    assert gates[0].startswith("gate varlen Sq [0, 1, 67, 33] Sk [5, 0, 45, 150] Hq4: PASS (worst ")


def test_child_refuses_a_folder_without_a_bundle(tmp_path):
    done = subprocess.run([sys.executable, str(TOOLS_DIR / "sanitize_child.py"), str(tmp_path), "--executor", "cpu"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no bundle manifest here (build one with fmha-compile -o DIR)" in done.stderr


def test_build_only_builds_what_run_only_selects(tmp_path):
    """`build --only` compiles the variants `run --only` would run (a device call that checks a few needs no
    build of all of them)."""
    variant = next(v for v in VARIANTS if v.body == "warp" and v.spec.dtype == "f32" and v.feature == "varlen")
    assert sanitize.main(["build", str(tmp_path), "--arch", ARCH, "--only", f"^{variant.name}$"]) == 0
    assert [p.name for p in (tmp_path / ARCH).iterdir()] == [variant.name]
    assert json.loads((tmp_path / sanitize.BUILD_RECORD).read_text())["bundles"] == 1
