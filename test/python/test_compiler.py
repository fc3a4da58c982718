"""The compiler driver: the spec matrix on all three targets, stage dumps and restarts, the launch plan,
and compile errors at every stage."""
from __future__ import annotations

import dataclasses
import io
import re

import pytest

from fmha_mlir.target import get_target
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


def _stage_names(result) -> list[str]:
    """The kernels a compile must produce: the warp body converts dK, dV (not for f32), the tiled dQ."""
    spec, config = result.spec, result.config
    if config.body == "tiled":
        converts = ["convert_dq"]
    else:
        converts = [] if spec.dtype == "f32" else ["convert_dk", "convert_dv"]
    return [f"{spec.kernel_prefix}_{config.tag}_{stage}" for stage in ["dot_do_o", "dq_dk_dv", *converts]]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("spec", MATRIX, ids=SPEC_IDS)
def test_matrix_compiles_to_hsaco(compiler, spec, arch):
    result = compiler.compile_spec(spec, arch)
    assert result.binary_format == "hsaco"
    assert amdgpu_mach(ELFFile(io.BytesIO(result.binary)).header.e_flags) == arch
    metadata = read_hsaco_metadata(result.binary)
    assert metadata["arch"] == arch
    assert sorted(metadata["kernels"]) == sorted(_stage_names(result)) == sorted(result.kernel_names)
    tiled = spec.dtype != "f32" and not (arch == "gfx942" and spec.hdim_q == 256)   # gfx942 d256: no LDS room
    assert result.config.body == ("tiled" if tiled else "warp")
    launches = {s["kernel"]: s for s in result.manifest["steps"] if s["op"] == "launch"}
    for name, kernel in result.manifest["kernels"].items():
        facts, launch = kernel["metadata"], launches[name]
        # The code object admits exactly the block the plan launches (row kernels and the tiled body: 8 waves).
        assert (facts["wavefront_size"], facts["private_segment_fixed_size"], facts["max_flat_workgroup_size"]) \
            == (64, 0, launch["block"][0]), name
        assert launch["block"][0] == (64 if name.endswith("dq_dk_dv") and not tiled else 512), name
        # LDS: the tiled body's is all dynamic (the plan's shared_bytes), and with the static part fits the chip.
        dynamic = launch.get("shared_bytes", 0)
        assert (dynamic > 0) == (tiled and name.endswith("dq_dk_dv")), name
        assert facts["group_segment_fixed_size"] + dynamic <= get_target(arch).max_shared_bytes
        # The memref ABI: 2 pointers, offset, sizes and strides per argument, 8 bytes each.
        assert facts["kernarg_segment_size"] >= 8 * sum(3 + 2 * arg["rank"] for arg in kernel["args"])
    Bundle(result.manifest, result.bundle_files())  # the runtime's own manifest validation


@pytest.mark.parametrize("spec", MATRIX, ids=SPEC_IDS)
def test_matrix_compiles_to_ptx(compiler, spec):
    """sm_90 takes the tiled body for f16 / bf16 (mma.sync, ldmatrix, cp.async into dynamic shared
    memory declared extern) and the warp body for f32."""
    result = compiler.compile_spec(spec, "sm_90")
    assert result.binary_format == "ptx" and result.binary == result.isa.encode()
    entries = re.findall(r"^\.visible \.entry (\w+)\(", result.isa, re.MULTILINE)
    assert sorted(entries) == sorted(_stage_names(result)) == sorted(result.kernel_names)
    assert result.config.body == ("warp" if spec.dtype == "f32" else "tiled")
    if result.config.body == "tiled":
        # dQ pairs by one vector reduction each: no scalar float atomics, no compare-and-swap loops.
        for instruction in ("mma.sync.aligned.m16n8k16.row.col.f32", "ldmatrix.sync.aligned.m8n8.x4",
                            "cp.async.cg.shared.global", ".extern .shared .align 1024 .b8 __dynamic_shmem__0[]",
                            "red.relaxed.gpu.global.add.v2.f32"):
            assert instruction in result.isa, instruction
        assert not re.search(r"(atom|red)\.relaxed\.gpu\.global\.add\.f32|atom\.[a-z.]*cas", result.isa)
    else:
        assert "atom.relaxed.gpu.global.add.f32" in result.isa or "red.relaxed.gpu.global.add.f32" in result.isa
    Bundle(result.manifest, result.bundle_files())


def test_spec_is_checked_before_any_ir(compiler):
    with pytest.raises(SpecError, match="hdim_q: 36 is not supported by the warp body on gfx942"):
        compiler.compile_spec(AttentionBwdSpec("f16", 36), "gfx942")
    with pytest.raises(SpecError, match="unknown architecture 'gfx90a'"):
        compiler.compile_spec(AttentionBwdSpec("f16", 64), "gfx90a")
    with pytest.raises(SpecError, match="the tiled body computes f16 and bf16 on matrix instructions, not f32"):
        compiler.compile_spec(AttentionBwdSpec("f32", 64), "sm_90", body="tiled")
    assert compiler.compile_spec(AttentionBwdSpec("f16", 32), "sm_90", body="warp").kernel_names  # one lane per element


def test_results_are_cached_per_spec_and_target(compiler):
    first = compiler.compile_spec(BF16, "gfx942")
    assert compiler.compile_spec(BF16, "gfx942") is first
    assert compiler.compile_spec(BF16, "gfx950") is not first
    assert Compiler().compile_spec(BF16, "gfx942") is not first


def test_the_cache_tells_backend_options_apart():
    compiler = Compiler()
    dpp = compiler.compile_spec(BF16, "gfx942", body="warp")
    compiler.amd_reduce = "shuffle"
    shuffle = compiler.compile_spec(BF16, "gfx942", body="warp")
    assert "ds_swizzle" in shuffle.isa and "ds_swizzle" not in dpp.isa


def test_launch_plan_of_a_bf16_spec(compiler):
    """The warp body's plan on gfx942: dK / dV through f32 workspaces, one wave per query row."""
    result = compiler.compile_spec(BF16, "gfx942", body="warp")
    manifest, tag = result.manifest, result.config.tag
    prefix = f"{BF16.kernel_prefix}_{tag}"
    assert manifest["target"] == {"arch": "gfx942", "backend": "rocdl", "wave_size": 64}
    assert manifest["binary"] == {"file": "kernels.hsaco", "format": "hsaco"}
    assert manifest["config"] == {**result.config.to_json()} and manifest["config"]["body"] == "warp"
    assert manifest["numerics"] == {"round_p_ds": False, "sum_chunk": 1}
    assert set(manifest["compiler"]) == {"fmha-mlir", "flydsl", "ziglang"}
    assert manifest["buffers"]["q"] == {"role": "input", "dtype": "bf16", "rank": 4, "align": 2,
                                        "dims": ["batch", "heads_q", "seqlen_q", 128]}
    assert {name: b["dims"] for name, b in manifest["buffers"].items() if b["role"] == "workspace"} == {
        "d": [{"dim": ["lse", i]} for i in range(3)],
        "dk_acc": [{"dim": ["dk", i]} for i in range(3)] + [128],
        "dv_acc": [{"dim": ["dv", i]} for i in range(3)] + [128]}
    steps = [(s["op"], s.get("kernel", s.get("buffer"))) for s in manifest["steps"]]
    assert steps == [("launch", f"{prefix}_dot_do_o"), ("zero", "dk_acc"), ("zero", "dv_acc"),
                     ("launch", f"{prefix}_dq_dk_dv"), ("launch", f"{prefix}_convert_dk"),
                     ("launch", f"{prefix}_convert_dv")]
    dq_dk_dv = manifest["steps"][3]
    assert dq_dk_dv["args"] == [{"buffer": n} for n in ("q", "k", "v", "do", "lse", "d", "dq", "dk_acc", "dv_acc")]
    assert dq_dk_dv["grid"] == [{"dim": ["q", 2]}, {"dim": ["q", 1]}, {"dim": ["q", 0]}]
    assert dq_dk_dv["block"] == [64, 1, 1] and dq_dk_dv["shared_bytes"] == 0
    assert manifest["kernels"][f"{prefix}_convert_dk"]["args"] == [
        {"buffer": "dk_acc", "rank": 4, "dtype": "f32", "type": "memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>",
         "access": "read"},
        {"buffer": "dk", "rank": 4, "dtype": "bf16", "type": "memref<?x?x?x128xbf16, strided<[?, ?, ?, 1]>>",
         "access": "write"}]
    # The warp body adds dK / dV into the f32 workspaces the plan zero-fills; it stores dQ (one wave a row).
    assert [a["access"] for a in manifest["kernels"][f"{prefix}_dq_dk_dv"]["args"]] == ["read"] * 6 + [
        "write", "accumulate", "accumulate"]


def test_launch_plan_of_the_tiled_body(compiler):
    """Grid = (kv heads, batch, ceil(seqlen_k / block_n)) (the table's keys_outer order) with the body's
    dynamic shared memory; dQ accumulates in a workspace padded to whole query blocks, converted at the end."""
    spec = AttentionBwdSpec("bf16", 128, gqa_ratio=4, mask=Mask("causal_bottom_right"))
    result = compiler.compile_spec(spec, "sm_90")
    manifest, config = result.manifest, result.config
    assert config.body == "tiled" and manifest["numerics"] == {"round_p_ds": True, "sum_chunk": 16}
    rows = {"mul": [{"ceildiv": [{"dim": ["q", 2]}, config.block_m]}, config.block_m]}
    assert manifest["buffers"]["dq_acc"]["dims"] == [{"dim": ["q", 0]}, {"dim": ["q", 1]}, rows, 128]
    assert manifest["buffers"]["q"]["align"] == 8
    steps = [(s["op"], s.get("kernel", s.get("buffer")).rsplit("_", 2)[-2:] if s["op"] == "launch" else s["buffer"])
             for s in manifest["steps"]]
    assert steps == [("launch", ["do", "o"]), ("zero", "dq_acc"), ("launch", ["dk", "dv"]),
                     ("launch", ["convert", "dq"])]
    main = manifest["steps"][2]
    assert config.grid_order == "keys_outer"
    assert main["grid"] == [{"dim": ["k", 1]}, {"dim": ["k", 0]}, {"ceildiv": [{"dim": ["k", 2]}, config.block_n]}]
    assert main["block"] == [config.threads, 1, 1]
    from fmha_mlir.bodies import TiledBody
    assert main["shared_bytes"] == TiledBody.shared_layout(spec, config)[-1].end > 48 * 1024
    # convert_dq: 16 lanes per 128-element row, 256 threads -> 16 rows per work-group.
    assert manifest["steps"][3]["grid"] == [{"ceildiv": [{"dim": ["dq", 2]}, 16]}, {"dim": ["dq", 1]},
                                            {"dim": ["dq", 0]}]
    assert manifest["steps"][3]["block"] == [256, 1, 1]


def test_f32_accumulates_into_the_outputs(compiler):
    manifest = compiler.compile_spec(AttentionBwdSpec("f32", 64), "sm_90").manifest
    assert [s["buffer"] for s in manifest["steps"] if s["op"] == "zero"] == ["dk", "dv"]
    assert [name for name, b in manifest["buffers"].items() if b["role"] == "workspace"] == ["d"]
    assert all("metadata" not in kernel for kernel in manifest["kernels"].values())
    assert manifest["steps"][0]["block"] == [8 * 32, 1, 1]  # the row kernels' eight waves


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_interp_ir_is_the_generic_kernel_module(compiler, arch):
    result = compiler.compile_spec(BF16, arch)
    assert result.interp_ir.startswith('"gpu.module"()')
    # The only fmha op left at this level: sm_90's vector atomic adds (lowered in the llvm stage, docs/ir.md).
    left = set(re.findall(r'"(fmha\.[a-z_]+)"\([^)]*\) : \(([^,]*),', result.interp_ir))
    assert left == ({("fmha.atomic_add", "vector<2xf32>")} if arch == "sm_90" else set()), left
    assert "llvm.func" not in result.interp_ir
    reduction = '"amdgpu.dpp"' if arch == "gfx942" else '"gpu.shuffle"'
    assert reduction in result.interp_ir
    # The tiled body's matrix and copy ops stay at the level the interpreter runs.
    assert result.config.body == "tiled"
    matrix_ops = {"sm_90": ("nvgpu.mma.sync", "nvgpu.ldmatrix", "nvgpu.device_async_copy"),
                  "gfx942": ("amdgpu.mfma", "amdgpu.raw_buffer_load")}[arch]
    assert all(f'"{op}"' in result.interp_ir for op in matrix_ops + ("gpu.dynamic_shared_memory",))


def test_the_gpu_stage_ends_with_canonicalize_and_cse(compiler):
    """After body expansion each gpu.func's constants are folded, hoisted to its entry and defined once
    (the builders emit one per use: ~970 in the d128 tiled dq_dk_dv)."""
    result = compiler.compile_spec(BF16, "sm_90")
    kernels = re.split(r"\n\s*gpu\.func ", result.stages["gpu"])[1:]
    assert len(kernels) == len(result.kernel_names)
    for kernel in kernels:
        constants = re.findall(r"= arith\.constant (.+)$", kernel, re.M)
        assert constants and len(constants) == len(set(constants)), kernel.split("(")[0]


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


def test_restart_takes_spec_and_config_from_the_ir(compiler):
    """Stage ops carry them, and after them the kernels' fmha.spec / fmha.config: a restarted compile
    needs no flags, and contradicting flags are an error, not a bundle that lies."""
    result = compiler.compile_spec(BF16, "gfx942")
    for stage in ("fmha", "stages", "gpu", "kernel"):
        restarted = Compiler().compile_module(result.stages[stage], stage, "gfx942")
        assert restarted.spec.scale == pytest.approx(BF16.scale, rel=1e-7)  # the attribute holds it as f32
        assert dataclasses.replace(restarted.spec, scale=BF16.scale) == BF16 and restarted.config == result.config
        assert restarted.manifest == result.manifest
    with pytest.raises(CompileError, match="the spec given .* contradicts the one the input carries"):
        Compiler().compile_module(result.stages["gpu"], "gpu", "gfx942", spec=dataclasses.replace(BF16, dtype="f16"))


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
    "stages": ("fmha", None, "gfx942", "config.wave_size: 32, but gfx942 waves have 64 lanes"),
    "gpu": ("stages", None, "gfx942", "hdim_q: 32 is not supported by the warp body (wave size 64)"),
    "kernel": ("gpu",
               _KERNEL.format(body='%r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32'),
               "sm_90", "wave_reduce width 64 exceeds the wave size 32"),
    "llvm": ("kernel", _KERNEL.format(body="%r = gpu.subgroup_reduce add %x : (f32) -> f32"), "gfx942",
             "failed to legalize operation 'gpu.subgroup_reduce'"),
    "isa": ("kernel", _KERNEL.format(body='%r = "test.opaque"(%x) : (f32) -> f32'), "gfx950",
            "cannot be converted to LLVM IR"),
}


@pytest.mark.parametrize("stage", list(_BROKEN))
def test_compile_errors_carry_stage_diagnostics_and_repro(stage, tmp_path):
    start, text, arch, message = _BROKEN[stage]
    if text is None:  # a warp config of sm_90 restarted for gfx942, or edited to a wave it cannot split
        text = Compiler().compile_spec(AttentionBwdSpec("f16", 32), "sm_90", body="warp").stages[start]
        if stage == "gpu":
            text = text.replace("wave_size = 32", "wave_size = 64")
    with pytest.raises(CompileError) as caught:
        Compiler().compile_module(text, start, arch, dump_dir=tmp_path)
    error = caught.value
    assert error.stage == stage
    assert any(message in d for d in error.diagnostics), error.diagnostics
    if stage != "parse":
        failed_input = tmp_path / dump_name(STAGES[STAGES.index(stage) - 1] if stage != "isa" else "llvm", ".mlir")
        assert error.repro.startswith(f"fmha-opt {failed_input} --pass-pipeline='builtin.module(")
        assert failed_input.is_file()


_HOST = """
module attributes {gpu.container_module} {
  func.func @host(%o: memref<?x?x?x64xf32> {fmha.operand = "o"}, %do: memref<?x?x?x64xf32> {fmha.operand = "do"}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    %n = memref.dim %o, %c2 : memref<?x?x?x64xf32>
    %blocks = arith.ceildivui %n, %c64 : index
    gpu.launch_func @fmha_kernels::@k blocks in (%blocks, %c1, %c1) threads in (%c64, %c1, %c1)
        args(%o : memref<?x?x?x64xf32>) {fmha.access = ["read"]}
    return
  }
  gpu.module @fmha_kernels {
    gpu.func @k(%o: memref<?x?x?x64xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      gpu.return
    }
  }
}
"""


def _plan(text: str, source_name: str = "<input>") -> dict:
    from fmha_mlir.launch_plan import read_launch_plan
    from fmha_mlir.mlir import make_context, parse_module

    module = parse_module(text, make_context(), source_name)
    with module.context:
        return read_launch_plan(module.operation, source_name)


def test_grids_are_expressions_of_buffer_sizes():
    plan = _plan(_HOST)
    assert plan["steps"][0]["grid"] == [{"ceildiv": [{"dim": ["o", 2]}, 64]}, 1, 1]
    assert plan["steps"][0]["args"] == [{"buffer": "o"}]
    assert plan["buffers"]["o"] == {"role": "input", "dtype": "f32", "rank": 4,
                                    "dims": ["batch", "heads_q", "seqlen_q", 64]}


def test_a_host_function_off_the_contract_is_a_plan_error():
    unnamed = _HOST.replace(' {fmha.operand = "do"}', "")
    with pytest.raises(CompileError, match="host argument #1 has no 'fmha.operand' attribute") as caught:
        _plan(unnamed)
    assert caught.value.stage == "plan"
    unmarked = _HOST.replace(' {fmha.access = ["read"]}', "")
    with pytest.raises(CompileError, match="gpu.launch_func needs 'fmha.access': an array of 1 strings, one per "
                                           "operand, each read / write / accumulate"):
        _plan(unmarked)
    remainder = _HOST.replace("arith.ceildivui %n, %c64", "arith.remui %n, %c64")
    with pytest.raises(CompileError, match="the launch plan cannot express a arith.remui in the host function"):
        _plan(remainder)


def test_a_host_op_the_plan_cannot_express_is_a_located_plan_error():
    # The runtime runs the plan's steps alone: silently dropping this copy would change the program.
    copy = "    memref.copy %o, %do : memref<?x?x?x64xf32> to memref<?x?x?x64xf32>"
    text = _HOST.replace("    gpu.launch_func", copy + "\n    gpu.launch_func")
    line = text.splitlines().index(copy) + 1
    with pytest.raises(CompileError, match=f"^\\[plan\\] host.mlir:{line}:5: the launch plan cannot express a "
                                           "memref.copy in the host function"):
        _plan(text, "host.mlir")


def test_a_buffer_outside_the_default_memory_space_is_a_plan_error():
    text = _HOST.replace("memref<?x?x?x64xf32>", "memref<?x?x?x64xf32, 1>")
    with pytest.raises(CompileError, match=r"buffer memref<\?x\?x\?x64xf32, 1> is not in the default memory space"):
        _plan(text)


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


def test_verifying_once_per_stage_compiles_the_same_code(compiler):
    """The default verifies each stage's output once; verify_each_pass runs MLIR's verifier after every
    pass. Same IR either way, and every stage's text is there to read (printed on demand)."""
    spec = AttentionBwdSpec("f16", 64, mask=Mask("causal_top_left"))
    once = compiler.compile_spec(spec, "sm_90")
    each = Compiler(verify_each_pass=True).compile_spec(spec, "sm_90")
    assert once.isa == each.isa and once.interp_ir == each.interp_ir
    assert list(once.stages) == list(IR_STAGES) and all(once.stages[s] == each.stages[s] for s in IR_STAGES)


def test_one_compile_decodes_validates_and_plans_once_per_value():
    """The passes share one decoded spec and config and one BodyPlan (tools/count_spec_reads.py counts
    them; reports/spec_config_reads.md has the figures). A scale no other test uses keeps the
    process's caches from answering for this compile."""
    from fmha_mlir.bodies import body_plan
    from fmha_mlir.tools.count_spec_reads import count_calls

    spec = AttentionBwdSpec("f16", 64, scale=0.0123)
    compiled = []
    counts = count_calls(lambda: compiled.append(Compiler().compile_spec(spec, "gfx942", body="tiled")))
    assert counts["spec reads (attributes -> spec)"] == 1 and counts["config reads (attribute -> config)"] == 2
    assert counts["spec validations"] == 3 and counts["body plans made"] == 1
    assert counts["workspace lists computed"] == 1
    plan = body_plan(compiled[0].spec, compiled[0].config)
    assert plan is body_plan(compiled[0].spec, compiled[0].config)
    shared = max(step.get("shared_bytes", 0) for step in compiled[0].manifest["steps"])
    assert shared == plan.launch("dq_dk_dv").shared_bytes == plan.shared_tiles[-1].end > 0
