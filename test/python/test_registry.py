"""Textual pipelines (passes/registry.py): splitting, options, resolution of our passes and upstream ones."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest

from fmha_mlir.errors import PipelineError
from fmha_mlir.mlir import ir, make_context
from fmha_mlir.passes import registry
from fmha_mlir.passes.base import FmhaPass


@dataclasses.dataclass(frozen=True)
class _ProbePass(FmhaPass):
    """A pass with one option of each kind; it records its count and whether it saw an arith.addi."""

    NAME: ClassVar[str] = "fmha-test-probe"
    DESCRIPTION: ClassVar[str] = "test pass"
    RUNS: ClassVar[list] = []
    count: int = 1
    strict: bool = False
    label: str = "x"

    def __post_init__(self):
        if self.count < 0:
            raise ValueError("count must be >= 0")

    def run_on_module(self, module):
        self.RUNS.append((self.count, "arith.addi" in str(module)))


@pytest.fixture
def probe(monkeypatch):
    """Register _ProbePass under its name for the duration of a test."""
    monkeypatch.setattr(_ProbePass, "RUNS", [])
    monkeypatch.setitem(registry._TABLE, _ProbePass.NAME, "unused:Unused")
    real = registry.get_pass_class
    monkeypatch.setattr(registry, "get_pass_class",
                        lambda name: _ProbePass if name == _ProbePass.NAME else real(name))
    return _ProbePass


def test_split_elements_splits_at_top_level_commas_only():
    assert registry.split_elements("a{x=1 y=2}, b(c,d{e=3}) ,f") == ["a{x=1 y=2}", "b(c,d{e=3})", "f"]
    assert registry.split_elements("") == []


@pytest.mark.parametrize("text", ["a(b", "a{x=1", "a)b", "a},b"])
def test_split_elements_rejects_unbalanced_brackets(text):
    with pytest.raises(PipelineError, match="unbalanced"):
        registry.split_elements(text)


def test_parse_element_reads_options():
    assert registry.parse_element("fmha-expand-warp-body{wave-size=32 x=y}") == (
        "fmha-expand-warp-body", {"wave-size": "32", "x": "y"})
    assert registry.parse_element("cse") == ("cse", {})


@pytest.mark.parametrize("element,message", [
    ("p{a=1", "must end with '}'"),
    ("p{flag}", "option 'flag' of 'p' must be key=value"),
])
def test_parse_element_rejects_malformed_options(element, message):
    with pytest.raises(PipelineError, match=message):
        registry.parse_element(element)


def test_strip_anchor():
    assert registry.strip_anchor(" builtin.module(a,b) ") == "a,b"
    assert registry.strip_anchor("a,b") == "a,b"


def test_make_pass_converts_option_text_by_field_type(probe):
    made = registry.make_pass(probe.NAME, {"count": "3", "strict": "true", "label": "dpp"})
    assert (made.count, made.strict, made.label) == (3, True, "dpp")
    assert registry.make_pass(probe.NAME, {"strict": "0"}).strict is False


@pytest.mark.parametrize("options,message", [
    ({"count": "three"}, "option count='three' is not a valid int"),
    ({"strict": "yes"}, "option strict='yes' is not a valid bool"),
    ({"colour": "red"}, "has no option 'colour'; its options: count, strict, label"),
    ({"count": "-1"}, "count must be >= 0"),
])
def test_make_pass_rejects_bad_options(probe, options, message):
    with pytest.raises(PipelineError, match=message):
        registry.make_pass(probe.NAME, options)


def test_render_gives_back_the_options_parse_element_reads(probe):
    made = registry.make_pass(probe.NAME, {"count": "4", "strict": "true"})
    name, options = registry.parse_element(made.render())
    assert registry.make_pass(name, options) == made
    assert registry.make_pass(probe.NAME).render() == probe.NAME


def test_every_registered_pass_resolves_to_its_class():
    """Each listed pass module imports (an ImportError fails here) and names its class's pass."""
    names = registry.pass_names()
    for name in names:
        cls = registry.get_pass_class(name)
        assert cls.NAME == name and issubclass(cls, FmhaPass)
        assert registry.make_pass(name).render() == name


def test_every_pass_class_in_passes_is_registered():
    """One pass = one module registered here: a pass module the table misses fails."""
    folder = Path(registry.__file__).parent
    defined = {f"{path.stem}:{node.name}" for path in folder.glob("*.py") for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "FmhaPass" for b in node.bases)}
    listed = {registry.get_pass_class(name).__module__.rsplit(".", 1)[1] + ":" + registry.get_pass_class(name).__name__
              for name in registry.pass_names()}
    assert len(defined) >= 11 and defined == listed


def test_unknown_fmha_pass_is_a_pipeline_error():
    with pytest.raises(PipelineError, match="unknown fmha pass 'fmha-nope'; known: "):
        registry.get_pass_class("fmha-nope")


def test_build_pass_manager_mixes_our_passes_with_upstream_ones(probe):
    ctx = make_context()
    pm = registry.build_pass_manager(f"builtin.module({probe.NAME}{{count=2}},canonicalize,{probe.NAME})", ctx)
    with ctx:
        module = ir.Module.parse(
            "func.func @f(%a: i32) -> i32 {\n  %c = arith.constant 0 : i32\n"
            "  %r = arith.addi %a, %c : i32\n  return %r : i32\n}")
    pm.run(module.operation)
    # In order: the first probe saw the add, canonicalize folded it, the second probe did not see it.
    assert probe.RUNS == [(2, True), (1, False)]


@pytest.mark.parametrize("pipeline,message", [
    ("builtin.module(no-such-pass)", "bad pipeline element 'no-such-pass'"),
    ("builtin.module(canonicalize{no-such-option=1})", "bad pipeline element 'canonicalize{no-such-option=1}'"),
    ("builtin.module(cse", "unbalanced"),
    # A chip MLIR does not know aborts the process in instruction selection; nested elements are checked too.
    ("builtin.module(rocdl-attach-target{chip=gfx9999})", "rocdl-attach-target: chip='gfx9999' is not a supported"),
    ("builtin.module(gpu.module(convert-gpu-to-rocdl{chipset=sm_90}))", "chipset='sm_90' is not a supported chip; "
                                                                        "use one of gfx942, gfx950"),
    ("builtin.module(any(gpu.module(convert-amdgpu-to-rocdl{chipset=gfx1})))", "chipset='gfx1'"),
    ("builtin.module(nvvm-attach-target{chip=gfx942})", "chip='gfx942' is not a supported chip; use one of sm_90"),
    # MLIR cannot nest our Python passes; it would only say it does not know them.
    ("builtin.module(gpu.module(convert-fmha-to-rocdl))", "'convert-fmha-to-rocdl' runs on the top-level module only"),
])
def test_build_pass_manager_rejects_bad_pipelines(pipeline, message):
    with pytest.raises(PipelineError, match=message):
        registry.build_pass_manager(pipeline, make_context())


def test_build_pass_manager_accepts_supported_chips_and_default_chips():
    registry.build_pass_manager("builtin.module(rocdl-attach-target{chip=gfx950 O=3},"
                                "gpu.module(convert-gpu-to-rocdl),nvvm-attach-target{chip=sm_90})", make_context())


def test_parse_element_keeps_a_nested_pipeline_whole_even_with_options_inside():
    assert registry.parse_element("gpu.module(a{x=1})") == ("gpu.module(a{x=1})", {})
    assert registry.parse_element("p{x=(1)}") == ("p", {"x": "(1)"})
