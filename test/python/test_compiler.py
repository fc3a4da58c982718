"""The compiler driver: the spec matrix on all three targets, stage dumps and restarts, the launch plan,
and compile errors at every stage."""
from __future__ import annotations

import dataclasses
import io
import re

import pytest
from elftools.elf.elffile import ELFFile

from fmha_mlir.compiler import IR_STAGES, STAGES, Compiler, dump_name
from fmha_mlir.errors import CompileError, PipelineError, SpecError
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.hsaco_metadata import amdgpu_mach, read_hsaco_metadata
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.variants import variant_matrix

MATRIX = variant_matrix()
SPEC_IDS = [f"{s.dtype}-{s.mask}-d{s.hdim_q}-g{s.gqa_ratio}" for s in MATRIX]
BF16 = AttentionBwdSpec("bf16", 128, mask=Mask.parse("top_left"))


@pytest.fixture(scope="module")
def compiler() -> Compiler:
    """One compiler (and its cache) for the whole module; the sm_90 binary is the PTX text."""
    return Compiler()


def _stage_names(spec: AttentionBwdSpec) -> list[str]:
    converts = [] if spec.dtype == "f32" else ["convert_dk", "convert_dv"]
    return [f"{spec.kernel_prefix}_{stage}" for stage in ["dot_do_o", "dq_dk_dv", *converts]]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("spec", MATRIX, ids=SPEC_IDS)
def test_matrix_compiles_to_hsaco(compiler, spec, arch):
    result = compiler.compile_spec(spec, arch)
    assert result.binary_format == "hsaco"
    assert amdgpu_mach(ELFFile(io.BytesIO(result.binary)).header.e_flags) == arch
    metadata = read_hsaco_metadata(result.binary)
    assert metadata["arch"] == arch
    assert sorted(metadata["kernels"]) == sorted(_stage_names(spec)) == sorted(result.kernel_names)
    for name, kernel in result.manifest["kernels"].items():
        facts = kernel["metadata"]
        assert (facts["wavefront_size"], facts["private_segment_fixed_size"], facts["max_flat_workgroup_size"]) \
            == (64, 0, 64), name
        # The memref ABI: 2 pointers, offset, sizes and strides per argument, 8 bytes each.
        assert facts["kernarg_segment_size"] >= 8 * sum(3 + 2 * arg["rank"] for arg in kernel["args"])
    Bundle(result.manifest, result.bundle_files())  # the runtime's own manifest validation


@pytest.mark.parametrize("spec", MATRIX, ids=SPEC_IDS)
def test_matrix_compiles_to_ptx(compiler, spec):
    result = compiler.compile_spec(spec, "sm_90")
    assert result.binary_format == "ptx" and result.binary == result.isa.encode()
    entries = re.findall(r"^\.visible \.entry (\w+)\(", result.isa, re.MULTILINE)
    assert sorted(entries) == sorted(_stage_names(spec)) == sorted(result.kernel_names)
    assert "atom.relaxed.gpu.global.add.f32" in result.isa
    Bundle(result.manifest, result.bundle_files())


def test_spec_is_checked_before_any_ir(compiler):
    with pytest.raises(SpecError, match="hdim_q: 32 is not supported by the warp body on gfx942"):
        compiler.compile_spec(AttentionBwdSpec("f16", 32), "gfx942")
    with pytest.raises(SpecError, match="unknown architecture 'gfx90a'"):
        compiler.compile_spec(AttentionBwdSpec("f16", 64), "gfx90a")
    assert compiler.compile_spec(AttentionBwdSpec("f16", 32), "sm_90").kernel_names  # one lane per element


def test_results_are_cached_per_spec_and_target(compiler):
    first = compiler.compile_spec(BF16, "gfx942")
    assert compiler.compile_spec(BF16, "gfx942") is first
    assert compiler.compile_spec(BF16, "gfx950") is not first
    assert Compiler().compile_spec(BF16, "gfx942") is not first


def test_the_cache_tells_backend_options_apart():
    compiler = Compiler()
    dpp = compiler.compile_spec(BF16, "gfx942")
    compiler.amd_reduce = "shuffle"
    shuffle = compiler.compile_spec(BF16, "gfx942")
    assert "ds_swizzle" in shuffle.isa and "ds_swizzle" not in dpp.isa


def test_launch_plan_of_a_bf16_spec(compiler):
    manifest = compiler.compile_spec(BF16, "gfx942").manifest
    prefix = BF16.kernel_prefix
    assert manifest["target"] == {"arch": "gfx942", "backend": "rocdl", "wave_size": 64}
    assert manifest["binary"] == {"file": "kernels.hsaco", "format": "hsaco"}
    assert {name: (b["role"], b["dtype"], b.get("like")) for name, b in manifest["buffers"].items()
            if b["role"] == "workspace"} == {"d": ("workspace", "f32", "lse"),
                                             "dk_acc": ("workspace", "f32", "dk"),
                                             "dv_acc": ("workspace", "f32", "dv")}
    steps = [(s["op"], s.get("kernel", s.get("buffer"))) for s in manifest["steps"]]
    assert steps == [("launch", f"{prefix}_dot_do_o"), ("zero", "dk_acc"), ("zero", "dv_acc"),
                     ("launch", f"{prefix}_dq_dk_dv"), ("launch", f"{prefix}_convert_dk"),
                     ("launch", f"{prefix}_convert_dv")]
    dq_dk_dv = manifest["steps"][3]
    assert dq_dk_dv["args"] == ["q", "k", "v", "do", "lse", "d", "dq", "dk_acc", "dv_acc"]
    assert dq_dk_dv["grid"] == [{"buffer": "q", "dim": 2}, {"buffer": "q", "dim": 1}, {"buffer": "q", "dim": 0}]
    assert dq_dk_dv["block"] == [64, 1, 1]
    assert manifest["kernels"][f"{prefix}_convert_dk"]["args"] == [
        {"buffer": "dk_acc", "rank": 4, "dtype": "f32"}, {"buffer": "dk", "rank": 4, "dtype": "bf16"}]


def test_f32_accumulates_into_the_outputs(compiler):
    manifest = compiler.compile_spec(AttentionBwdSpec("f32", 64), "sm_90").manifest
    assert [s["buffer"] for s in manifest["steps"] if s["op"] == "zero"] == ["dk", "dv"]
    assert [name for name, b in manifest["buffers"].items() if b["role"] == "workspace"] == ["d"]
    assert all("metadata" not in kernel for kernel in manifest["kernels"].values())
    assert manifest["steps"][0]["block"] == [32, 1, 1]


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_interp_ir_is_the_generic_kernel_module(compiler, arch):
    result = compiler.compile_spec(BF16, arch)
    assert result.interp_ir.startswith('"gpu.module"()')
    assert "fmha." not in result.interp_ir and "llvm.func" not in result.interp_ir
    reduction = '"amdgpu.dpp"' if arch == "gfx942" else '"gpu.shuffle"'
    assert reduction in result.interp_ir


def test_dumps_restart_to_the_same_code(tmp_path):
    compiler = Compiler()
    result = compiler.compile_spec(BF16, "gfx950", dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [dump_name(stage, ".mlir") for stage in IR_STAGES] + ["05_isa.s", "06_binary.hsaco"]
    assert (tmp_path / "06_binary.hsaco").read_bytes() == result.binary
    for stage in IR_STAGES[:-1]:
        restarted = compiler.compile_module((tmp_path / dump_name(stage, ".mlir")).read_text(), stage, "gfx950",
                                            spec=BF16)
        assert restarted.isa == result.isa, stage
        assert restarted.manifest == result.manifest, stage
        assert restarted.interp_ir == result.interp_ir, stage
    with pytest.raises(PipelineError, match="llvm stage has no kernel-level IR"):
        compiler.compile_module(result.stages["llvm"], "llvm", "gfx950")
    with pytest.raises(PipelineError, match="cannot start from stage 'isa'"):
        compiler.compile_module(result.stages["llvm"], "isa", "gfx950")


def test_restart_takes_the_spec_from_spec_carrying_ir(compiler):
    result = compiler.compile_spec(BF16, "gfx942")
    for stage in ("fmha", "stages"):
        spec = Compiler().compile_module(result.stages[stage], stage, "gfx942").spec
        assert spec.scale == pytest.approx(BF16.scale, rel=1e-7)  # the attribute holds it as f32
        assert dataclasses.replace(spec, scale=BF16.scale) == BF16
    assert Compiler().compile_module(result.stages["gpu"], "gpu", "gfx942").spec is None


_KERNEL = """
module attributes {{gpu.container_module}} {{
  gpu.module @fmha_kernels {{
    gpu.func @k(%x: f32, %o: memref<f32>) kernel attributes {{known_block_size = array<i32: 64, 1, 1>}} {{
      {body}
      memref.store %r, %o[] : memref<f32>
      gpu.return
    }}
  }}
}}
"""

# (stage that fails, start stage, input, target, what the diagnostics say)
_BROKEN = {
    "parse": ("gpu", "module {", "gfx942", "expected"),
    "gpu": ("fmha", None, "gfx942", "fmha-expand-warp-body: hdim_q: 32"),
    "kernel": ("gpu", _KERNEL.format(body='%r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32'),
               "sm_90", "wave_reduce width 64 exceeds the wave size 32"),
    "llvm": ("kernel", _KERNEL.format(body="%r = gpu.subgroup_reduce add %x : (f32) -> f32"), "gfx942",
             "failed to legalize operation 'gpu.subgroup_reduce'"),
    "isa": ("kernel", _KERNEL.format(body='%r = "test.opaque"(%x) : (f32) -> f32'), "gfx950",
            "cannot be converted to LLVM IR"),
}


@pytest.mark.parametrize("stage", list(_BROKEN))
def test_compile_errors_carry_stage_diagnostics_and_repro(stage, tmp_path):
    start, text, arch, message = _BROKEN[stage]
    if text is None:  # a spec valid in itself but not on this target: only the warp body rejects it
        text = Compiler().compile_spec(AttentionBwdSpec("f16", 32), "sm_90").stages["fmha"]
    with pytest.raises(CompileError) as caught:
        Compiler().compile_module(text, start, arch, dump_dir=tmp_path)
    error = caught.value
    assert error.stage == stage
    assert any(message in d for d in error.diagnostics), error.diagnostics
    if stage != "parse":
        failed_input = tmp_path / dump_name(STAGES[STAGES.index(stage) - 1] if stage != "isa" else "llvm", ".mlir")
        assert error.repro.startswith(f"fmha-opt {failed_input} --pass-pipeline='builtin.module(")
        assert failed_input.is_file()


_HOST_WITH_CONSTANT_GRID = """
module attributes {gpu.container_module} {
  func.func @host(%q: memref<?xf32>, %k: memref<?xf32>, %v: memref<?xf32>, %o: memref<?xf32>, %do: memref<?xf32>,
                  %lse: memref<?xf32>, %dq: memref<?xf32>, %dk: memref<?xf32>, %dv: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    gpu.launch_func @fmha_kernels::@k blocks in (%c64, %c1, %c1) threads in (%c64, %c1, %c1) args(%o : memref<?xf32>)
    return
  }
  gpu.module @fmha_kernels {
    gpu.func @k(%o: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      gpu.return
    }
  }
}
"""


_HOST_ON_CONTRACT = _HOST_WITH_CONSTANT_GRID.replace(
    "%c64 = arith.constant 64 : index", "%c64 = arith.constant 64 : index\n    %n = memref.dim %o, %c0 : memref<?xf32>"
).replace("%c1 = arith.constant 1 : index", "%c1 = arith.constant 1 : index\n    %c0 = arith.constant 0 : index"
          ).replace("blocks in (%c64, %c1, %c1)", "blocks in (%n, %n, %n)")


def test_a_host_function_off_the_contract_is_a_plan_error():
    with pytest.raises(CompileError, match="a grid or workspace size must be a memref.dim of a buffer") as caught:
        Compiler().compile_module(_HOST_WITH_CONSTANT_GRID, "gpu", "gfx942")
    assert caught.value.stage == "plan"
    step = Compiler().compile_module(_HOST_ON_CONTRACT, "gpu", "gfx942").manifest["steps"][0]
    assert step["grid"] == [{"buffer": "o", "dim": 0}] * 3 and step["args"] == ["o"]


def test_a_host_op_the_plan_cannot_express_is_a_located_plan_error():
    # The runtime runs the plan's steps alone: silently dropping this copy would change the program.
    text = _HOST_ON_CONTRACT.replace("    gpu.launch_func", "    memref.copy %q, %k : memref<?xf32> to memref<?xf32>\n"
                                                          "    gpu.launch_func")
    line = text.splitlines().index("    memref.copy %q, %k : memref<?xf32> to memref<?xf32>") + 1
    with pytest.raises(CompileError, match=f"^\\[plan\\] host.mlir:{line}:5: the launch plan cannot express a "
                                           "memref.copy in the host function") as caught:
        Compiler().compile_module(text, "gpu", "gfx942", source_name="host.mlir")
    assert caught.value.stage == "plan"


def test_a_buffer_outside_the_default_memory_space_is_a_plan_error():
    text = _HOST_ON_CONTRACT.replace("memref<?xf32>", "memref<?xf32, 1>")
    with pytest.raises(CompileError, match=r"buffer memref<\?xf32, 1> is not in the default memory space"):
        Compiler().compile_module(text, "gpu", "gfx942")


def test_ir_an_upstream_pass_would_abort_on_is_a_located_compile_error():
    text = _KERNEL.format(body='%r = "fmha.exp2"(%x) : (f32) -> f32').replace(
        "kernel attributes {known_block_size", "kernel attributes {gpu.kernel, known_block_size")
    line = next(i for i, row in enumerate(text.splitlines(), start=1) if "gpu.func @k" in row)
    with pytest.raises(CompileError, match=f"k.mlir:{line}:5: error: gpu.func carries a 'gpu.kernel' attribute"):
        Compiler().compile_module(text, "gpu", "sm_90", source_name="k.mlir")


def test_a_second_gpu_module_is_an_error_not_silently_dropped():
    kernels = _KERNEL.format(body='%r = "fmha.exp2"(%x) : (f32) -> f32')
    second = kernels.split("  gpu.module @fmha_kernels")[1].rsplit("}", 1)[0].replace("@fmha_kernels", "")
    text = kernels.rsplit("}", 1)[0] + "  gpu.module @more" + second + "}\n"
    with pytest.raises(CompileError, match="the kernel stage has 2 gpu.module ops; the bundle needs exactly one"):
        Compiler().compile_module(text, "gpu", "gfx942")
