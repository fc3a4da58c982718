"""The compiler driver: a spec (or any stage's IR file) -> kernels, ISA, binary and launch plan.

Named stages, in order; each one's output is the next one's input and can be dumped and restarted from:

  fmha    the problem module (frontend)          kernel  target kernel IR (backend; CPU interpreter input)
  stages  fmha-decompose-bwd                     llvm    LLVM dialect inside gpu.module (backend)
  gpu     fmha-stages-to-gpu, expand the bodies, isa     assembly / PTX  (from the llvm stage)
          canonicalize + cse (gpu.module)        binary  hsaco / cubin / PTX (from the llvm stage)
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from collections.abc import Mapping

from .backends import Backend, backend_for
from .backends.pipeline import CLEANUP_PASSES, nested, render_pass, render_pipeline
from .bodies import check_config, choose_config
from .dialects import fmha
from .dialects.fmha_attrs import describes_kernel, read_kernel_description
from .errors import CompileError, PipelineError
from .kernel_config import KernelConfig
from .launch_plan import host_function, kernel_metadata, read_launch_plan
from .manifest import build_manifest
from .diagnostics import capture, error, from_mlir, position_of
from .mlir import gpu, ir, make_context, parse_module
from .passes.ir_builders import collect_ops
from .passes.registry import build_pass_manager
from .passes.verify import abort_traps
from .spec import AttentionBwdSpec, f32_value
from .target import Target, get_target

STAGES = ("fmha", "stages", "gpu", "kernel", "llvm", "isa", "binary")
IR_STAGES = STAGES[:5]            # stages whose output is an MLIR module
RESTART_STAGES = IR_STAGES[:-1]   # those one can restart from: the llvm stage has no interpreter IR left
INTERP_IR_FILE = "kernels.interp.mlir"
BINARY_SUFFIX = {"hsaco": ".hsaco", "cubin": ".cubin", "ptx": ".ptx"}


@dataclasses.dataclass(frozen=True)
class CompiledKernels:
    """Everything one compile produced. `stages` maps each IR stage that ran to its module text."""

    spec: AttentionBwdSpec | None
    config: KernelConfig | None
    target: Target
    stages: "StageTexts"
    isa: str
    binary: bytes
    binary_format: str          # hsaco, cubin or ptx
    manifest: dict | None       # the launch plan; None for a module of kernels without a host function

    @property
    def interp_ir(self) -> str:
        """The generic form of the kernel stage's gpu.module (what the CPU interpreter runs)."""
        return self.stages.generic_gpu_module("kernel")

    @property
    def kernel_names(self) -> list[str]:
        """The launched kernels, in launch-plan order."""
        return list(self.manifest["kernels"]) if self.manifest else []

    @property
    def isa_file(self) -> str:
        return "kernels" + (".s" if self.target.backend == "rocdl" else ".ptx")

    def bundle_files(self) -> dict[str, bytes]:
        """The files the manifest names, plus the assembly, by file name."""
        if self.manifest is None:
            raise PipelineError("a module without a host function has no launch plan to bundle")
        files = {self.manifest["binary"]["file"]: self.binary, INTERP_IR_FILE: self.interp_ir.encode()}
        files.setdefault(self.isa_file, self.isa.encode())
        return files


@dataclasses.dataclass
class Compiler:
    """Compiles specs for targets, caching results in-process by (spec, target).

    `ptxas`: the ptxas executable for NVIDIA cubins (None: the PTX is the binary). `amd_reduce`:
    full-wave reduction strategy on AMD, dpp or shuffle. `verify_each_pass`: run MLIR's verifier after
    every pass, so that a pass that breaks the IR is the one named; by default the IR is verified once
    per stage, which takes a third off a tiled kernel's compile (the verifier walks ~40k ops per pass).
    """

    ptxas: str | None = None
    amd_reduce: str = "dpp"
    verify_each_pass: bool = False
    _cache: dict = dataclasses.field(default_factory=dict, repr=False)

    def compile_spec(self, spec: AttentionBwdSpec, target: Target | str, dump_dir: str | Path | None = None, *,
                     body: str = "auto", config: KernelConfig | None = None) -> CompiledKernels:
        """Compile `spec` for `target` with `config` (default: the body's table entry; `body` = auto
        picks the fastest body that supports the spec). SpecError before any IR when they cannot."""
        target = _as_target(target)
        if config is None:
            config = choose_config(spec, target, body)
        else:
            check_config(spec, target, config)
        backend = self._backend(target)
        key = (spec, config, backend)  # the backend carries the options: ptxas and amd_reduce may change
        if key in self._cache and dump_dir is None:
            return self._cache[key]
        from .frontend import build_problem_module

        ctx = make_context()
        module = build_problem_module(spec, ctx, config)
        result = _Run(backend, ctx, dump_dir, "fmha", "<spec>",
                      verify_each_pass=self.verify_each_pass).compile(module, spec, config)
        self._cache[key] = result
        return result

    def compile_module(self, text: str, start_stage: str, target: Target | str,
                       dump_dir: str | Path | None = None, spec: AttentionBwdSpec | None = None,
                       source_name: str = "<input>", body: str = "auto") -> CompiledKernels:
        """Continue from `text`, the output of stage `start_stage`, through the later stages.

        Spec and config come from the IR (its problem / stage ops, or the kernels' fmha.spec and
        fmha.config); a `spec` given as well must agree with it. A problem op without a config gets one
        for `body` in the stages stage.
        """
        if start_stage == "llvm":
            raise PipelineError("the llvm stage has no kernel-level IR left for the interpreter; "
                                "restart from the kernel stage or an earlier one")
        if start_stage not in RESTART_STAGES:
            raise PipelineError(f"cannot start from stage {start_stage!r}; use one of {', '.join(RESTART_STAGES)}")
        target = _as_target(target)
        ctx = make_context()
        module = parse_module(text, ctx, source_name)
        _check_abort_traps(module, source_name)
        _check_lowered_for(module, target, source_name)
        if start_stage == "fmha":
            from .frontend import name_problem_arguments

            with ctx:
                name_problem_arguments(module)
        found_spec, config = _spec_and_config_in(module)
        if spec is not None and found_spec is not None and _as_stored(spec) != _as_stored(found_spec):
            raise CompileError(f"the spec given ({spec.kernel_prefix}) contradicts the one the input carries "
                               f"({found_spec.kernel_prefix}): drop the spec flags or fix the input", stage="parse")
        run = _Run(self._backend(target), ctx, dump_dir, start_stage, source_name, body, self.verify_each_pass)
        return run.compile(module, spec or found_spec, config)

    def _backend(self, target: Target) -> Backend:
        return backend_for(target, ptxas=self.ptxas, amd_reduce=self.amd_reduce)


def compile_spec(spec: AttentionBwdSpec, target: Target | str, dump_dir: str | Path | None = None, *,
                 body: str = "auto", config: KernelConfig | None = None) -> CompiledKernels:
    """One uncached compile with the default options (PTX as the NVIDIA binary)."""
    return Compiler().compile_spec(spec, target, dump_dir, body=body, config=config)


def compile_module(text: str, start_stage: str, target: Target | str, dump_dir: str | Path | None = None,
                   spec: AttentionBwdSpec | None = None) -> CompiledKernels:
    """Compiler().compile_module with the default options."""
    return Compiler().compile_module(text, start_stage, target, dump_dir, spec)


def stage_pipeline(stage: str, backend: Backend, body: str = "auto") -> str | None:
    """The textual pipeline that produces `stage` from the previous stage's output."""
    if stage == "stages":
        return render_pipeline([render_pass("fmha-select-kernel-config", target=backend.target.arch, body=body),
                                "fmha-decompose-bwd"])
    if stage == "gpu":
        return render_pipeline(["fmha-stages-to-gpu", "fmha-expand-warp-body", "fmha-expand-tiled-body",
                                nested("gpu.module", list(CLEANUP_PASSES))])
    return backend.stage_pipeline(stage)


class _Run:
    """One compile: runs the stages, dumps them, turns failures into CompileErrors."""

    def __init__(self, backend: Backend, ctx: "ir.Context", dump_dir, start_stage: str, source_name: str,
                 body: str = "auto", verify_each_pass: bool = False):
        self.backend = backend
        self.verify_each_pass = verify_each_pass
        self.body = body
        self.start_stage = start_stage
        self.source_name = source_name
        self.target = backend.target
        self.ctx = ctx
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
        self.stages = StageTexts(ctx)

    def compile(self, module: "ir.Module", spec: AttentionBwdSpec | None,
                config: KernelConfig | None) -> CompiledKernels:
        start_stage = self.start_stage
        self._record(start_stage, module)
        for stage in IR_STAGES[IR_STAGES.index(start_stage) + 1:]:
            self._run(stage, module.operation, self._input_name(stage))
            self._record(stage, module)
            if stage == "stages" and config is None:
                spec, config = _spec_and_config_in(module)
        # The backend stages rewrite only the gpu.module: the host function is still level 3. A module of
        # kernels alone (a hand-written test input) has no plan.
        with self.ctx:
            has_host = host_function(module.operation) is not None
            plan = read_launch_plan(module.operation, self.source_name) if has_host else None
        isa = self._serialize("isa", module)
        self._dump("isa", self.backend.ISA_SUFFIX, isa)
        binary = isa if self.backend.stage_pipeline("binary") is None else self._serialize("binary", module)
        self._dump("binary", BINARY_SUFFIX[self.backend.binary_format], binary)
        return CompiledKernels(spec, config, self.target, self.stages, isa.decode(), binary,
                               self.backend.binary_format, self._manifest(plan, spec, config, binary))

    def _manifest(self, plan: dict | None, spec: AttentionBwdSpec | None, config: KernelConfig | None,
                  binary: bytes) -> dict | None:
        if plan is None:
            return None
        if spec is None or config is None:
            raise CompileError("the input says neither which spec nor which kernel config it computes (no fmha ops, "
                               "no fmha.spec / fmha.config on its kernels): give the spec flags", stage="plan")
        binary_format = self.backend.binary_format
        metadata = None
        if binary_format == "hsaco":
            from .runtime.hsaco_metadata import read_hsaco_metadata

            metadata = kernel_metadata(read_hsaco_metadata(binary))
        # The kernels compute with the scale as the f32 attribute holds it: record that spec.
        return build_manifest(plan, spec=_as_stored(spec), config=config, target=self.target,
                              binary_format=binary_format,
                              binary_file="kernels" + BINARY_SUFFIX[binary_format], interp_ir_file=INTERP_IR_FILE,
                              metadata=metadata)

    def _run(self, stage: str, module: "ir.Operation", input_name: str) -> None:
        pipeline = stage_pipeline(stage, self.backend, self.body)
        with capture(self.ctx, self.source_name) as emitted, self.ctx:
            try:
                pm = build_pass_manager(pipeline, self.ctx)
                pm.enable_verifier(self.verify_each_pass)
                pm.run(module)
                if not self.verify_each_pass:
                    module.verify()
            except ir.MLIRError as exc:  # a pass failed (or left invalid IR); its diagnostics say why
                raise CompileError(f"stage {stage} failed for {self.target.arch}",
                                   self._diagnostics(exc, emitted) or (str(exc).strip(),), stage=stage,
                                   repro=self._repro(input_name, pipeline)) from None

    def _diagnostics(self, exc: "ir.MLIRError", emitted: list) -> tuple[str, ...]:
        records = emitted + [record for diag in exc.error_diagnostics for record in from_mlir(diag, self.source_name)]
        return tuple(record.format() for record in records)

    def _repro(self, input_name: str, pipeline: str) -> str:
        command = f"fmha-opt {input_name} --pass-pipeline='{pipeline}'"
        if Path(input_name).is_file():
            return command
        return f"{command}   (write the stage files with dump_dir= / fmha-compile --dump-stages)"

    def _serialize(self, stage: str, module: "ir.Module") -> bytes:
        """Run gpu-module-to-binary on a copy of the llvm-stage module; the object's bytes."""
        copy = module.operation.clone()
        self._run(stage, copy, self._input_name(stage))
        binary = _only_top_level_op(copy, "gpu.binary", stage)
        return gpu.ObjectAttr(binary.attributes["objects"][0]).object

    def _record(self, stage: str, module: "ir.Module") -> None:
        if stage == "kernel":   # the bundle's interpreter IR is this stage's one gpu.module: check it now
            _only_top_level_op(module.operation, "gpu.module", stage)
        self.stages.record(stage, module)
        if self.dump_dir is not None:
            self._dump(stage, ".mlir", self.stages[stage].encode())

    def _dump(self, stage: str, suffix: str, data: bytes) -> None:
        if self.dump_dir is not None:
            (self.dump_dir / dump_name(stage, suffix)).write_bytes(data)

    def _input_name(self, stage: str) -> str:
        """The file a stage reads: the user's input, a dumped stage file, or the name it would have."""
        previous = "llvm" if stage in ("isa", "binary") else STAGES[STAGES.index(stage) - 1]
        if previous == self.start_stage and Path(self.source_name).is_file():
            return self.source_name
        name = dump_name(previous, ".mlir")
        return str(self.dump_dir / name) if self.dump_dir is not None else name


class StageTexts(Mapping):
    """Each IR stage's module, kept as a copy and printed when first read: printing every stage of a
    tiled kernel took a quarter of its compile time, and most callers read none of them."""

    def __init__(self, ctx: "ir.Context"):
        self._ctx = ctx
        self._modules: dict[str, "ir.Operation"] = {}
        self._texts: dict[tuple[str, bool], str] = {}

    def record(self, stage: str, module: "ir.Module") -> None:
        self._modules[stage] = module.operation.clone()

    def __getitem__(self, stage: str) -> str:
        return self._print(stage, generic=False)

    def __iter__(self):
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def generic_gpu_module(self, stage: str) -> str:
        return self._print(stage, generic=True)

    def _print(self, stage: str, generic: bool) -> str:
        key = (stage, generic)
        if key not in self._texts:
            module = self._modules[stage]
            with self._ctx:
                self._texts[key] = (_only_top_level_op(module, "gpu.module", stage).get_asm(print_generic_op_form=True)
                                    if generic else str(module))
        return self._texts[key]


def _only_top_level_op(module: "ir.Operation", name: str, stage: str) -> "ir.Operation":
    """The one op called `name` in `module`'s body. The bundle holds one code object and one interpreter
    module (docs/ir.md: one gpu.module @fmha_kernels), so a second one would be silently dropped."""
    found = [op.operation for op in module.regions[0].blocks[0].operations if op.operation.name == name]
    if len(found) != 1:
        raise CompileError(f"the {stage} stage has {len(found)} {name} ops; the bundle needs exactly one "
                           "(docs/ir.md: all kernels live in gpu.module @fmha_kernels)", stage=stage)
    return found[0]


def dump_name(stage: str, suffix: str) -> str:
    return f"{STAGES.index(stage):02d}_{stage}{suffix}"


def _as_target(target: Target | str) -> Target:
    return target if isinstance(target, Target) else get_target(target)


def _check_abort_traps(module: "ir.Module", source_name: str) -> None:
    """CompileError, located in the input, for IR an upstream pass would abort the process on."""
    with module.context:
        records = [error(message, position_of(op.location, source_name)).format()
                   for op, message in abort_traps(module.operation)]
    if records:
        raise CompileError("the input holds IR that MLIR would abort on", tuple(records), stage="parse")


def _check_lowered_for(module: "ir.Module", target: Target, source_name: str) -> None:
    """CompileError when the input's gpu.modules were given another chip's target attribute (a kernel
    stage of sm_90 restarted for gfx942): LLVM would die selecting the other vendor's intrinsics."""
    other = {"rocdl": ("nvvm.", "nvgpu."), "nvvm": ("rocdl.", "amdgpu.")}[target.backend]
    with module.context:
        records = []
        foreign = _first_op_named(module.operation, other)
        if foreign is not None:
            records.append(error(f"'{foreign.name}' is another vendor's op: this input was lowered for the other "
                                 f"vendor's chips; restart it with a matching --target or from a stage before the "
                                 f"kernel stage", position_of(foreign.location, source_name)).format())
        for gpu_module in collect_ops(module.operation, ["gpu.module"]):
            if "targets" not in gpu_module.attributes:
                continue
            chips = re.findall(r'#(rocdl|nvvm)\.target<[^>]*chip = "([^"]+)"', str(gpu_module.attributes["targets"]))
            if chips and target.arch not in [chip for _, chip in chips]:
                records.append(error(f"this gpu.module was lowered for {', '.join(c for _, c in chips)}; restart it "
                                     f"with --target {chips[0][1]} or from a stage before the kernel stage",
                                     position_of(gpu_module.location, source_name)).format())
    if records:
        raise CompileError(f"the input was lowered for another chip than {target.arch}", tuple(records), stage="parse")


def _first_op_named(root, prefixes: tuple[str, ...]):
    """The first op (in walk order) whose name starts with one of `prefixes`, or None."""
    found = []

    def visit(op):
        if op.name.startswith(prefixes):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found[0] if found else None


def _as_stored(spec: AttentionBwdSpec) -> AttentionBwdSpec:
    """The spec as attributes hold it: the scale and the softcap rounded to f32."""
    return dataclasses.replace(spec, scale=f32_value(spec.scale), softcap=f32_value(spec.softcap))


def _spec_and_config_in(module: "ir.Module") -> tuple[AttentionBwdSpec | None, KernelConfig | None]:
    """What the input computes: from its first problem or stage op (the config may still be missing on
    a problem op), else from its kernels' fmha.spec / fmha.config, which must all agree."""
    found = collect_ops(module.operation, [fmha.AttentionBwdOp.NAME, *(op.NAME for op in fmha.STAGE_OPS)])
    try:
        if found:
            config = fmha.config_of(found[0]) if "config" in found[0].attributes else None
            return fmha.spec_from_op(found[0]), config
    except fmha.VerifyError as exc:
        raise CompileError(f"the input's spec or config attributes are invalid: {exc}", stage="parse") from None
    described = set()
    for kernel in collect_ops(module.operation, ["gpu.func"]):
        if describes_kernel(kernel):
            described.add(_described_kernel(kernel))
    if len(described) > 1:
        raise CompileError("the input's kernels describe different specs or configs (fmha.spec / fmha.config): "
                           "one bundle holds one problem", stage="parse")
    return described.pop() if described else (None, None)


def _described_kernel(kernel: "ir.Operation") -> tuple[AttentionBwdSpec, KernelConfig]:
    problems: list[str] = []
    spec, config = read_kernel_description(kernel, problems)
    reasons = spec.reasons() if spec is not None else []
    if problems or reasons or spec is None or config is None:
        raise CompileError("a kernel's fmha.spec / fmha.config is invalid: "
                           + "; ".join(problems + list(map(str, reasons))),
                           stage="parse")
    return spec, config
