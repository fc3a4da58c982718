"""fmha-opt's pieces: input splitting, the expected-diagnostic checker, and main() run in process."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from fmha_mlir.dialects.fmha import VerifyError
from fmha_mlir.errors import EXIT_ERROR
from fmha_mlir.passes import registry
from fmha_mlir.passes.base import FmhaPass, rewriting
from fmha_mlir.tools import diagnostic_verifier
from fmha_mlir.tools.fmha_opt import main, split_chunks
from fmha_mlir.diagnostics import Diagnostic, Position


def _diag(severity: str, message: str, line: int | None, file: str = "t.mlir") -> Diagnostic:
    position = None if line is None else Position(file, line, 3)
    return Diagnostic(severity, message, position, "loc(unknown)")


def _check(text: str, diagnostics: list[Diagnostic]) -> list[str]:
    expectations, problems = diagnostic_verifier.parse_expectations(text, "t.mlir")
    problems += diagnostic_verifier.verify(expectations, diagnostics, "t.mlir")
    return [p.format() for p in problems]


def test_split_chunks_records_where_each_chunk_starts():
    chunks = split_chunks("a\nb\n// -----\nc\n  // -----  \n\nd\n")
    assert [(c.first_line, c.text) for c in chunks] == [(1, "a\nb\n"), (4, "c\n"), (6, "\nd\n")]


def test_every_designator_and_severity_matches():
    text = "\n".join([
        "op1 // expected-warning {{same line}}",
        "// expected-remark @+1 {{next}}",
        "op3",
        "op4",
        "// expected-note @-1 {{previous}}",
        "// expected-error @above {{above}}",
        "// expected-error @below {{below}}",
        "// expected-note @below {{below too}}",
        "op9",
        "// expected-error @unknown {{nowhere}}",
        "// expected-error-re @+1 {{got {{[0-9]+}} values}}",
        "op12",
    ])
    diagnostics = [
        _diag("warning", "x same line y", 1), _diag("remark", "next", 3), _diag("note", "previous", 4),
        _diag("error", "above", 4), _diag("error", "below", 9), _diag("note", "below too", 9),
        _diag("error", "nowhere", None), _diag("error", "got 42 values", 12),
    ]
    assert _check(text, diagnostics) == []


def test_mismatches_are_reported_in_file_order():
    text = "op1\n// expected-error @-1 {{wanted}}\nop3\n"
    diagnostics = [_diag("error", "surprise", 3), _diag("warning", "wanted", 1),
                   _diag("error", "elsewhere", 1, "x.mlir")]
    assert _check(text, diagnostics) == [
        't.mlir:1:3: error: unexpected warning: wanted',
        't.mlir:2:4: error: expected error "wanted" was not produced',
        't.mlir:3:3: error: unexpected error: surprise',
        'x.mlir:1:3: error: unexpected error: elsewhere',
    ]


def test_regex_expectations_keep_their_literal_parts_literal():
    text = "// expected-error-re @+1 {{a.b {{[0-9]+}}}}\nop\n"
    assert _check(text, [_diag("error", "a.b 7", 2)]) == []
    assert len(_check(text, [_diag("error", "axb 7", 2)])) == 2


def test_expectations_that_point_nowhere_are_errors():
    assert _check("// expected-error @-3 {{x}}\n", []) == [
        "t.mlir:1:4: error: expected error points to line -2, before the file"]
    assert _check("op\n// expected-error @below {{x}}\n", []) == [
        "t.mlir:2:4: error: expected error @below has no line below it"]
    assert _check("// expected-error-re @+1 {{a {{[}}}}\nop\n", []) == [
        "t.mlir:1:4: error: invalid regex in expected-error-re {{a {{[}}}}: unterminated character set at position 3"]


def test_main_reports_located_errors_and_keeps_other_chunks(tmp_path, capsys):
    source = tmp_path / "in.mlir"
    source.write_text("func.func @bad() {\n  return %x : f32\n}\n// -----\nfunc.func @good() {\n  return\n}\n")
    assert main([str(source), "--split-input-file"]) == EXIT_ERROR
    out, err = capsys.readouterr()
    assert err == f"{source}:2:10: error: use of undeclared SSA value name\n"
    assert "func.func @good" in out and "@bad" not in out


def test_main_writes_the_output_file(tmp_path, capsys):
    source, result = tmp_path / "in.mlir", tmp_path / "out.mlir"
    source.write_text('func.func @f(%x: f32) -> f32 {\n  %e = "fmha.exp2"(%x) : (f32) -> f32\n  return %e : f32\n}\n')
    assert main([str(source), "-o", str(result)]) == 0
    assert '"fmha.exp2"(%arg0) : (f32) -> f32' in result.read_text()
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("argv,message", [
    (["--pass-pipeline=builtin.module(fmha-nope)"], "fmha-opt: error: invalid --pass-pipeline: bad pipeline element"),
    (["--pass-pipeline", "builtin.module(fmha-select-kernel-config{target=sm_80})"],
     "fmha-opt: error: invalid --pass-pipeline: pass 'fmha-select-kernel-config': unknown target 'sm_80'"),
])
def test_main_rejects_bad_pipelines_without_a_traceback(tmp_path, capsys, argv, message):
    source = tmp_path / "in.mlir"
    source.write_text("")
    assert main([str(source), *argv]) == EXIT_ERROR
    assert capsys.readouterr().err.startswith(message)


@dataclasses.dataclass(frozen=True)
class _FailingPass(FmhaPass):
    """Fails the way a pass may: a project error escaping it, or a failure signalled without a word."""

    NAME: ClassVar[str] = "fmha-test-failing"
    how: str = "escape"

    def run_on_module(self, module):
        if self.how == "escape":
            raise VerifyError("'fmha.exp2' op is broken")
        if self.how == "crash":
            1 / 0
        if self.how == "blamed":  # raised while rewriting the function: reported at the function
            with rewriting(module.regions[0].blocks[0].operations[0].operation):
                raise VerifyError("'fmha.exp2' op is broken")

    def __call__(self, op, pass_):
        if self.how == "silent":
            pass_.signal_pass_failure()
            return
        super().__call__(op, pass_)


@pytest.fixture
def failing_pass(monkeypatch):
    monkeypatch.setitem(registry._TABLE, _FailingPass.NAME, "unused:Unused")
    real = registry.get_pass_class
    monkeypatch.setattr(registry, "get_pass_class",
                        lambda name: _FailingPass if name == _FailingPass.NAME else real(name))


@pytest.mark.parametrize("how,message", [
    ("escape", "error: fmha-test-failing: 'fmha.exp2' op is broken"),
    ("crash", "error: fmha-test-failing: internal error: ZeroDivisionError: division by zero"),
    ("silent", "error: pass pipeline failed: Failure while executing pass pipeline"),
])
def test_main_turns_pass_failures_into_located_errors(tmp_path, capsys, failing_pass, how, message):
    source = tmp_path / "in.mlir"
    source.write_text("func.func @f() {\n  return\n}\n")
    # --in-process: the monkeypatched registry lives in this process
    pipeline = f"--pass-pipeline=builtin.module({_FailingPass.NAME}{{how={how}}})"
    assert main([str(source), "--in-process", pipeline]) == EXIT_ERROR
    out, err = capsys.readouterr()
    # Located at the (implicit) module, which MLIR puts at line 0.
    assert out == "" and err == f"{source}:0:0: {message}\n"


def test_a_project_error_while_rewriting_an_op_is_located_at_that_op(tmp_path, capsys, failing_pass):
    source = tmp_path / "in.mlir"
    source.write_text("\nfunc.func @f() {\n  return\n}\n")
    pipeline = f"--pass-pipeline=builtin.module({_FailingPass.NAME}{{how=blamed}})"
    assert main([str(source), "--in-process", pipeline]) == EXIT_ERROR
    assert capsys.readouterr().err == f"{source}:2:1: error: fmha-test-failing: 'fmha.exp2' op is broken\n"


# -- nothing kills the caller  ---------------------------------------------------------------------------

def test_a_crash_in_mlir_is_a_located_error_and_the_other_chunks_survive(tmp_path, capsys):
    """10000 nested regions overflow MLIR's parser stack (SIGSEGV): the child dies, fmha-opt reports the
    chunk with a command that reproduces it, and still prints the chunks around it."""
    source = tmp_path / "deep.mlir"
    deep = "scf.execute_region {" * 10000 + "}" * 10000
    source.write_text(f"func.func @a() {{\n  return\n}}\n// -----\n{deep}\n// -----\nfunc.func @c() {{\n  return\n}}\n")
    assert main([str(source), "--split-input-file"]) == EXIT_ERROR
    out, err = capsys.readouterr()
    assert err.startswith(f"{source}:5:1: error: MLIR crashed on the chunk starting here (SIGSEGV); reproduce with: "
                          f"sed -n '5,5p' {source} | fmha-opt --in-process - -o - --input-name {source}")
    assert "func.func @a" in out and "func.func @c" in out


@pytest.mark.parametrize("data,message", [
    (b"\xf6\x01garbage", "fmha-opt: error: cannot read -: 'utf-8' codec can't decode byte 0xf6 in position 0"),
    (b"module {}\x00", "fmha-opt: error: cannot read -: a NUL byte at offset 9: this is not MLIR text"),
])
def test_binary_input_is_an_error_not_a_traceback(data, message):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "fmha_mlir.tools.fmha_opt"], input=data, capture_output=True)
    assert done.returncode == EXIT_ERROR and done.stderr.decode().startswith(message), done.stderr


@pytest.mark.parametrize("element,message", [
    ("rocdl-attach-target{chip=gfx942 O=99}", "rocdl-attach-target: O='99' is not valid; use one of 0, 1, 2, 3"),
    ("rocdl-attach-target{chip=gfx942 abi=999}",
     "rocdl-attach-target: abi='999' is not valid; use one of 400, 500, 600"),
    ("nvvm-attach-target{chip=sm_90 O=99}", "nvvm-attach-target: O='99' is not valid; use one of 0, 1, 2, 3"),
    ("rocdl-attach-target", "rocdl-attach-target needs chip=...: one of gfx942, gfx950"),
    ('rocdl-attach-target{chip="gfx942}', "unterminated '\"' in the options of 'rocdl-attach-target': {chip=\"gfx942}"),
])
def test_target_options_mlir_would_abort_on_are_refused_first(tmp_path, capsys, element, message):
    source = tmp_path / "in.mlir"
    source.write_text("module {}\n")
    assert main([str(source), "--in-process", f"--pass-pipeline=builtin.module({element})"]) == EXIT_ERROR
    assert capsys.readouterr().err == f"fmha-opt: error: invalid --pass-pipeline: {message}\n"


def test_quoted_upstream_options_are_accepted():
    """MLIR's pipeline syntax quotes option values that hold spaces; PassManager.parse accepts them."""
    assert registry.parse_element('gpu-module-to-binary{opts="-O3 -v" format=isa}') == (
        "gpu-module-to-binary", {"opts": "-O3 -v", "format": "isa"})
    assert registry.parse_element('rocdl-attach-target{chip="gfx942"}') == ("rocdl-attach-target", {"chip": "gfx942"})
