"""The launch plan (docs/ir.md, "The launch plan"): read back from the host function of level 3.

After fmha-stages-to-gpu the host function is a straight list of memref.alloc (workspaces), gpu.memset
(zero fills) and gpu.launch_func ops whose operands and grid sizes trace back to the function's
arguments (named after fmha.attention_bwd's operands) or to the workspaces. This module follows those
use-def chains and writes the JSON plan the runtime executes; nothing about the stages is hard-coded.
"""
from __future__ import annotations

from .dialects.fmha import GRADS, OPERAND_NAMES
from .diagnostics import position_of
from .errors import CompileError
from .mlir import ir
from .runtime.bundle import FORMAT, spec_to_json
from .spec import DTYPES, AttentionBwdSpec
from .target import Target

INPUTS = ("q", "k", "v", "o", "do", "lse")
# Code-object facts copied into each kernel's "metadata" on AMD (hsaco_metadata field names).
HSACO_FIELDS = ("vgpr_count", "sgpr_count", "agpr_count", "group_segment_fixed_size",
                "private_segment_fixed_size", "kernarg_segment_size", "kernarg_segment_align",
                "wavefront_size", "max_flat_workgroup_size", "vgpr_spill_count", "sgpr_spill_count")


# Host ops that only compute what the steps refer to (sizes, casts) or free workspaces: no step of their own.
_STEPLESS_OPS = frozenset({"arith.constant", "memref.dim", "memref.cast", "memref.dealloc", "func.return"})


class PlanError(CompileError):
    """The host function does not have the shape docs/ir.md level 3 promises."""

    def __init__(self, message: str, op=None, source_name: str = "<input>"):
        self.op, self.problem = op, message
        super().__init__(_where(op, source_name) + message, stage="plan")


def _where(op, source_name: str) -> str:
    if op is None:
        return ""
    position = position_of(op.location, source_name)
    return f"{op.location}: " if position is None else f"{position.file}:{position.line}:{position.col}: "


def read_launch_plan(module: "ir.Operation", source_name: str = "<input>") -> dict:
    """{"buffers", "steps", "kernels"} of the module's host function (any stage from gpu on).

    `source_name` names the input file in the locations of errors."""
    host = host_function(module)
    if host is None:
        raise PlanError("the module has no host function with gpu.launch_func ops (the plan is read after "
                        "fmha-stages-to-gpu)")
    try:
        return _PlanReader(host).read()
    except PlanError as exc:  # raised deep in the reader, which does not know the file's name
        raise PlanError(exc.problem, exc.op, source_name) from None


def kernel_metadata(hsaco: dict) -> dict[str, dict]:
    """Per kernel name, the launch-relevant facts of read_hsaco_metadata's result, and its .args."""
    return {name: {**{key: fields[key] for key in HSACO_FIELDS if key in fields},
                   "args": [{key: arg[key] for key in ("offset", "size", "value_kind") if key in arg}
                            for arg in fields.get("args", [])]}
            for name, fields in hsaco["kernels"].items()}


def build_manifest(plan: dict, *, spec: AttentionBwdSpec | None, target: Target, binary_file: str,
                   binary_format: str, interp_ir_file: str, metadata: dict[str, dict] | None = None) -> dict:
    """The bundle manifest: the plan plus spec, target, file names and (AMD) per-kernel metadata."""
    kernels = {name: dict(entry) for name, entry in plan["kernels"].items()}
    for name, facts in (metadata or {}).items():
        if name not in kernels:
            raise PlanError(f"the code object has kernel {name!r}, which no step launches")
        kernels[name]["metadata"] = facts
    return {
        "format": FORMAT,
        "spec": spec_to_json(spec) if spec is not None else None,
        "target": {"arch": target.arch, "backend": target.backend, "wave_size": target.wave_size},
        "binary": {"file": binary_file, "format": binary_format},
        "interp_ir": interp_ir_file,
        "buffers": plan["buffers"],
        "steps": plan["steps"],
        "kernels": kernels,
    }


def host_function(module: "ir.Operation") -> "ir.Operation | None":
    """The func.func that launches the kernels; None for a module of kernels alone."""
    hosts = [op.operation for op in module.regions[0].blocks[0].operations
             if op.operation.name == "func.func" and _launches(op.operation)]
    if len(hosts) > 1:
        raise PlanError(f"expected one host function with gpu.launch_func ops, found {len(hosts)}")
    return hosts[0] if hosts else None


def _launches(func: "ir.Operation") -> bool:
    return any(op.operation.name == "gpu.launch_func" for op in func.regions[0].blocks[0].operations)


class _PlanReader:
    def __init__(self, host: "ir.Operation"):
        self.host = host
        self.arguments = list(host.regions[0].blocks[0].arguments)
        if len(self.arguments) != len(OPERAND_NAMES):
            raise PlanError(f"the host function has {len(self.arguments)} arguments; expected the "
                            f"{len(OPERAND_NAMES)} operands of fmha.attention_bwd ({' '.join(OPERAND_NAMES)})",
                            host)
        self.buffers: dict[str, dict] = {}
        self.workspaces: dict[ir.Operation, str] = {}  # alloc op -> buffer name
        for name, argument in zip(OPERAND_NAMES, self.arguments):
            role = "input" if name in INPUTS else "output"
            self.buffers[name] = {"role": role, **_memref_facts(argument.type, host)}

    def read(self) -> dict:
        steps, kernels = [], {}
        for op in self.host.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "memref.alloc":
                self._add_workspace(op)
            elif op.name == "gpu.memset":
                steps.append({"op": "zero", "buffer": self._buffer(op.opview.dst, op)})
                _check_zero(op)
            elif op.name == "gpu.launch_func":
                step = self._launch(op)
                steps.append(step)
                kernels[step["kernel"]] = {"args": [{"buffer": name, "rank": self.buffers[name]["rank"],
                                                     "dtype": self.buffers[name]["dtype"]}
                                                    for name in step["args"]]}
            elif op.name not in _STEPLESS_OPS:
                # The runtime runs the steps alone: dropping this op would silently change the program.
                raise PlanError(f"the launch plan cannot express a {op.name} in the host function; it may "
                                  "hold only workspace allocs, gpu.memset zero fills and gpu.launch_func", op)
        return {"buffers": self.buffers, "steps": steps, "kernels": kernels}

    def _add_workspace(self, alloc: "ir.Operation") -> None:
        like = self._like(alloc)
        name = "d" if like == "lse" else f"{like}_acc" if like in GRADS else None
        if name is None or name in self.buffers:
            raise PlanError(f"cannot name this workspace (sizes like {like!r}): docs/ir.md names d (like lse) "
                            "and dq_acc / dk_acc / dv_acc (like dq / dk / dv), each once", alloc)
        self.workspaces[alloc] = name
        self.buffers[name] = {"role": "workspace", **_memref_facts(alloc.results[0].type, alloc), "like": like}

    def _like(self, alloc: "ir.Operation") -> str:
        """The buffer whose sizes the alloc takes, dimension for dimension."""
        alloc_type = ir.MemRefType(alloc.results[0].type)
        sources = [_dim_source(size, alloc) for size in alloc.operands]
        names = {self._buffer(value, alloc) for value, _ in sources}
        if len(names) != 1:
            raise PlanError("a workspace's sizes must all be memref.dim of one buffer", alloc)
        like = names.pop()
        dynamic = [i for i in range(alloc_type.rank) if alloc_type.is_dynamic_dim(i)]
        if [dim for _, dim in sources] != dynamic or ir.MemRefType(sources[0][0].type).shape != alloc_type.shape:
            raise PlanError(f"a workspace must have the shape of the buffer its sizes come from ({like})", alloc)
        return like

    def _launch(self, op: "ir.Operation") -> dict:
        launch = op.opview
        kernel = ir.SymbolRefAttr(launch.kernel)
        shared = launch.dynamicSharedMemorySize
        return {
            "op": "launch",
            "kernel": kernel.value[-1],
            "args": [self._buffer(value, op) for value in launch.kernelOperands],
            "grid": [self._grid_dim(value, op)
                     for value in (launch.gridSizeX, launch.gridSizeY, launch.gridSizeZ)],
            "block": [_constant(value, op)
                      for value in (launch.blockSizeX, launch.blockSizeY, launch.blockSizeZ)],
            "shared_bytes": 0 if shared is None else _constant(shared, op),
        }

    def _grid_dim(self, value: "ir.Value", user: "ir.Operation") -> dict:
        source, dim = _dim_source(value, user)
        return {"buffer": self._buffer(source, user), "dim": dim}

    def _buffer(self, value: "ir.Value", user: "ir.Operation") -> str:
        """The buffer name behind a memref value: a host argument or a workspace, through memref.cast."""
        while isinstance(value.owner, ir.OpView) and value.owner.operation.name == "memref.cast":
            value = value.owner.operation.operands[0]
        if isinstance(value.owner, ir.Block):
            if value.owner.owner != self.host:
                raise PlanError("a launch operand is a block argument of a nested region", user)
            return OPERAND_NAMES[ir.BlockArgument(value).arg_number]
        owner = value.owner.operation
        if owner in self.workspaces:
            return self.workspaces[owner]
        raise PlanError(f"cannot trace an operand to a host argument or workspace (it comes from {owner.name})",
                        user)


def _dim_source(value: "ir.Value", user: "ir.Operation") -> tuple["ir.Value", int]:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "memref.dim":
        raise PlanError("a grid or workspace size must be a memref.dim of a buffer", user)
    source, position = owner.operation.operands
    return source, _constant(position, user)


def _constant(value: "ir.Value", user: "ir.Operation") -> int:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        raise PlanError("block sizes, dims and shared memory sizes must be arith.constant", user)
    return ir.IntegerAttr(owner.operation.attributes["value"]).value


def _check_zero(memset: "ir.Operation") -> None:
    value = memset.opview.value
    owner = value.owner
    if (isinstance(owner, ir.Block) or owner.operation.name != "arith.constant"
            or ir.FloatAttr(owner.operation.attributes["value"]).value != 0.0):
        raise PlanError("gpu.memset must fill with the constant 0.0 (the runtime only zero-fills)", memset)


def _memref_facts(memref_type: "ir.Type", op: "ir.Operation") -> dict:
    memref_type = ir.MemRefType(memref_type)
    dtype = str(memref_type.element_type)
    if dtype not in DTYPES:
        raise PlanError(f"buffer element type {memref_type.element_type} is none of f16, bf16, f32", op)
    if memref_type.memory_space is not None:
        raise PlanError(f"buffer {memref_type} is not in the default memory space: the runtime passes "
                        "device-global pointers", op)
    return {"dtype": dtype, "rank": memref_type.rank}
