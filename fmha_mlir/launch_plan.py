"""The launch plan (docs/ir.md, "The launch plan"): read back from the host function of level 3.

After fmha-stages-to-gpu the host function is a straight list of memref.alloc (named workspaces),
gpu.memset (zero fills) and gpu.launch_func ops, plus the index arithmetic that sizes them. This module
follows the use-def chains from every launch operand, grid size, scalar argument and workspace size back
to the function's arguments (named by their `fmha.operand` attribute), constants and workspaces, and
writes what it finds as JSON: buffers with their dimension names, size expressions (fmha_mlir.shape_expr),
steps. Nothing about the stages is hard-coded here.
"""
from __future__ import annotations

import re

from .dialects.fmha import BIAS_INPUTS, INPUTS, OPERAND_DIMS, ROW_INPUTS
from .bodies import ACCESSES
from .dialects.fmha_attrs import ACCESS_ATTRIBUTE, OPERAND_ATTRIBUTE, WORKSPACE_ATTRIBUTE
from .diagnostics import position_of
from .errors import CompileError
from .mlir import ir
from .runtime.args import SCALAR_TYPES
from .shape_expr import ARITH_OPS, Arg, BinOp, Dim, Expr, to_json
from .spec import DTYPES
from .varlen import CU_SEQLENS, MAX_SEQLENS, PACKED_DIMS

# Element types of buffers: the problem's, and varlen's int32 cu_seqlens.
BUFFER_DTYPES = DTYPES + ("i32",)

# Code-object facts copied into each kernel's "metadata" on AMD (hsaco_metadata field names).
HSACO_FIELDS = ("vgpr_count", "sgpr_count", "agpr_count", "group_segment_fixed_size",
                "private_segment_fixed_size", "kernarg_segment_size", "kernarg_segment_align",
                "wavefront_size", "max_flat_workgroup_size", "vgpr_spill_count", "sgpr_spill_count")
# The host op that makes a TMA tensor map over a buffer (box and swizzle in its result type); a kernel
# takes the map as an !llvm.ptr parameter through a builtin.unrealized_conversion_cast, or as the map.
TENSOR_MAP_OP = "nvgpu.tma.create.descriptor"
_TENSOR_MAP_TYPE = re.compile(r"^!nvgpu\.tensormap\.descriptor<tensor = memref<([0-9x]+)x\w+, 3>, "
                              r"swizzle = (none|swizzle_32b|swizzle_64b|swizzle_128b), l2promo = \w+, "
                              r"oob = (\w+), interleave = none>$")
# Host ops that only compute what the steps refer to (sizes, casts, tensor maps) or free workspaces: no
# step of their own.
_STEPLESS_OPS = frozenset({"arith.constant", "memref.dim", "memref.cast", "memref.dealloc", "func.return",
                           "arith.index_cast", "arith.index_castui", TENSOR_MAP_OP,
                           "builtin.unrealized_conversion_cast"})
# Index arithmetic the plan can express: the ops expr_value builds, and the signed ceildiv a hand-written
# host function may use (the same on non-negative sizes).
_ARITH = {**{name: op for op, name in ARITH_OPS.items()}, "arith.ceildivsi": "ceildiv"}


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


def host_function(module: "ir.Operation") -> "ir.Operation | None":
    """The func.func that launches the kernels; None for a module of kernels alone."""
    hosts = [op.operation for op in module.regions[0].blocks[0].operations
             if op.operation.name == "func.func" and _launches(op.operation)]
    if len(hosts) > 1:
        raise PlanError(f"expected one host function with gpu.launch_func ops, found {len(hosts)}")
    return hosts[0] if hosts else None


def _launches(func: "ir.Operation") -> bool:
    return any(op.operation.name == "gpu.launch_func" for op in func.regions[0].blocks[0].operations)


def argument_names(host: "ir.Operation") -> list[str]:
    """The `fmha.operand` name of each host argument (PlanError naming the first unnamed one)."""
    arg_attrs = host.attributes["arg_attrs"] if "arg_attrs" in host.attributes else None
    arguments = list(host.regions[0].blocks[0].arguments)
    names = []
    for i in range(len(arguments)):
        attrs = ir.DictAttr(arg_attrs[i]) if arg_attrs is not None else None
        if attrs is None or OPERAND_ATTRIBUTE not in attrs:
            raise PlanError(f"host argument #{i} has no '{OPERAND_ATTRIBUTE}' attribute naming its operand "
                            f"({', '.join(OPERAND_DIMS)})", host)
        names.append(ir.StringAttr(attrs[OPERAND_ATTRIBUTE]).value)
    return names


class _PlanReader:
    def __init__(self, host: "ir.Operation"):
        self.host = host
        self.names = argument_names(host)
        arguments = list(host.regions[0].blocks[0].arguments)
        self.buffers: dict[str, dict] = {}
        self.workspaces: dict[ir.Operation, str] = {}  # alloc op -> buffer name
        # Varlen's max lengths: index scalars the caller passes (size expressions read them as args).
        self.scalars = [name for name, argument in zip(self.names, arguments)
                        if name in MAX_SEQLENS and isinstance(argument.type, ir.IndexType)]
        table = {**OPERAND_DIMS, **PACKED_DIMS} if CU_SEQLENS[0] in self.names else OPERAND_DIMS
        for name, argument in zip(self.names, arguments):
            if name in self.scalars:
                continue
            if name not in table or name in self.buffers:
                raise PlanError(f"host argument {name!r} is {'repeated' if name in self.buffers else 'unknown'}; "
                                f"each of {', '.join(table)} names one argument", host)
            facts = _memref_facts(argument.type, host)
            dims = [d if d is not None else table[name][i] for i, d in enumerate(facts.pop("shape"))]
            if len(dims) != len(table[name]):
                raise PlanError(f"host argument {name!r} has rank {len(dims)}; docs/ir.md gives it "
                                f"[{', '.join(table[name])}]", host)
            role = "input" if name in INPUTS + BIAS_INPUTS + ROW_INPUTS + CU_SEQLENS else "output"
            self.buffers[name] = {"role": role, **facts, "dims": dims}

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
                step, signature = self._launch(op)
                if kernels.setdefault(step["kernel"], signature) != signature:
                    raise PlanError(f"kernel {step['kernel']} is launched with two different argument lists", op)
                steps.append(step)
            elif op.name not in _STEPLESS_OPS and op.name not in _ARITH:
                # The runtime runs the steps alone: dropping this op would silently change the program.
                raise PlanError(f"the launch plan cannot express a {op.name} in the host function; it may "
                                  "hold only workspace allocs, gpu.memset zero fills, gpu.launch_func and the "
                                  "index arithmetic that sizes them", op)
        plan = {"buffers": self.buffers, "steps": steps, "kernels": kernels}
        if self.scalars:
            plan["scalars"] = self.scalars
        return plan

    def _add_workspace(self, alloc: "ir.Operation") -> None:
        if WORKSPACE_ATTRIBUTE not in alloc.attributes:
            raise PlanError(f"a workspace alloc needs a '{WORKSPACE_ATTRIBUTE}' name (fmha-decompose-bwd gives one)",
                            alloc)
        name = ir.StringAttr(alloc.attributes[WORKSPACE_ATTRIBUTE]).value
        if name in self.buffers:
            raise PlanError(f"workspace name {name!r} is taken by another buffer", alloc)
        facts = _memref_facts(alloc.results[0].type, alloc)
        sizes = iter(alloc.operands)
        dims = [to_json(self._expr(next(sizes), alloc)) if d is None else d for d in facts.pop("shape")]
        self.workspaces[alloc] = name
        self.buffers[name] = {"role": "workspace", **facts, "dims": dims}

    def _launch(self, op: "ir.Operation") -> tuple[dict, dict]:
        launch = op.opview
        kernel = ir.SymbolRefAttr(launch.kernel).value[-1]
        args, signature = [], []
        access = _access(op, len(launch.kernelOperands))
        for value, uses in zip(launch.kernelOperands, access):
            if isinstance(value.type, ir.MemRefType):
                name = self._buffer(value, op)
                args.append({"buffer": name})
                signature.append({"buffer": name, "rank": self.buffers[name]["rank"],
                                  "dtype": self.buffers[name]["dtype"], "type": str(value.type), "access": uses})
            elif _tensor_map_of(value) is not None:
                arg = self._tensor_map(_tensor_map_of(value), op)
                args.append(arg)
                buf = self.buffers[arg["tensor_map"]]
                signature.append({**arg, "rank": buf["rank"], "dtype": buf["dtype"], "type": str(value.type),
                                  "access": uses})
            elif str(value.type) == "f32":
                args.append({"scalar": "f32", "value": _float_constant(value, op)})
                signature.append({"scalar": "f32", "type": "f32"})
            elif str(value.type) in SCALAR_TYPES:
                args.append({"scalar": str(value.type), "value": to_json(self._expr(value, op))})
                signature.append({"scalar": str(value.type), "type": str(value.type)})
            else:
                raise PlanError(f"kernel argument of type {value.type} is neither a memref, a tensor map "
                                f"({TENSOR_MAP_OP}) nor an i32/i64/f32 scalar", op)
        shared = launch.dynamicSharedMemorySize
        step = {
            "op": "launch", "kernel": kernel, "args": args,
            "grid": [to_json(self._expr(v, op)) for v in (launch.gridSizeX, launch.gridSizeY, launch.gridSizeZ)],
            "block": [_constant(v, op) for v in (launch.blockSizeX, launch.blockSizeY, launch.blockSizeZ)],
            "shared_bytes": 0 if shared is None else _constant(shared, op),
        }
        return step, {"args": signature}

    def _tensor_map(self, create: "ir.Operation", user: "ir.Operation") -> dict:
        """{"tensor_map": buffer, "box", "swizzle"} of a nvgpu.tma.create.descriptor: the box outermost
        first (the buffer's order), out-of-bounds elements zero (what the executor encodes)."""
        found = _TENSOR_MAP_TYPE.match(str(create.results[0].type))
        if found is None or found.group(3) != "zero":
            raise PlanError(f"a tensor map of type {create.results[0].type} cannot be encoded: the runtime makes "
                            "maps of a box in shared memory (space 3), without interleave, zero-filled out of "
                            "bounds", user)
        source, *sizes = create.operands
        buffer = self._buffer(source, user)
        box = [_constant(size, user) for size in sizes]
        if box != [int(n) for n in found.group(1).split("x")] or len(box) != self.buffers[buffer]["rank"]:
            raise PlanError(f"the tensor map over {buffer!r} has box {box} and type {create.results[0].type}: the "
                            f"box must be the type's tensor shape, one size per dimension of the rank-"
                            f"{self.buffers[buffer]['rank']} buffer", user)
        swizzle = found.group(2)
        return {"tensor_map": buffer, "box": box, "swizzle": 0 if swizzle == "none" else int(swizzle[8:-1])}

    def _expr(self, value: "ir.Value", user: "ir.Operation") -> Expr:
        """The size expression `value` computes from buffer dims and constants."""
        owner = value.owner
        if isinstance(owner, ir.Block):
            name = self.names[ir.BlockArgument(value).arg_number] if owner.owner == self.host else None
            if name not in self.scalars:
                raise PlanError("a size comes from a block argument, not from buffer sizes, the host's "
                                f"scalars ({', '.join(MAX_SEQLENS)}) and constants", user)
            return Arg(name)
        op = owner.operation
        if op.name == "arith.constant":
            return _constant(value, user)
        if op.name in ("arith.index_cast", "arith.index_castui"):
            return self._expr(op.operands[0], user)
        if op.name == "memref.dim":
            source, position = op.operands
            return Dim(self._buffer(source, user), _constant(position, user))
        if op.name in _ARITH:
            return BinOp(_ARITH[op.name], self._expr(op.operands[0], user), self._expr(op.operands[1], user))
        raise PlanError(f"a size is computed by {op.name}, which the launch plan cannot express (it takes "
                        f"memref.dim, constants and {', '.join(sorted(_ARITH))})", user)

    def _buffer(self, value: "ir.Value", user: "ir.Operation") -> str:
        """The buffer name behind a memref value: a host argument or a workspace, through memref.cast."""
        while isinstance(value.owner, ir.OpView) and value.owner.operation.name == "memref.cast":
            value = value.owner.operation.operands[0]
        if isinstance(value.owner, ir.Block):
            if value.owner.owner != self.host:
                raise PlanError("a launch operand is a block argument of a nested region", user)
            return self.names[ir.BlockArgument(value).arg_number]
        owner = value.owner.operation
        if owner in self.workspaces:
            return self.workspaces[owner]
        raise PlanError(f"cannot trace an operand to a host argument or workspace (it comes from {owner.name})",
                        user)


def _tensor_map_of(value: "ir.Value") -> "ir.Operation | None":
    """The nvgpu.tma.create.descriptor behind a launch operand (through one unrealized cast), else None."""
    owner = value.owner
    for _ in range(2):
        if isinstance(owner, ir.Block):
            return None
        op = owner.operation
        if op.name == TENSOR_MAP_OP:
            return op
        if op.name != "builtin.unrealized_conversion_cast" or len(op.operands) != 1:
            return None
        owner = op.operands[0].owner
    return None


def _access(launch: "ir.Operation", count: int) -> list[str]:
    """The launch's `fmha.access`: how the kernel uses each operand (fmha-stages-to-gpu writes it)."""
    try:
        access = [ir.StringAttr(a).value for a in ir.ArrayAttr(launch.attributes[ACCESS_ATTRIBUTE])]
    except (KeyError, ValueError):   # absent, or not an array of strings
        access = []
    if len(access) != count or not set(access) <= set(ACCESSES):
        raise PlanError(f"gpu.launch_func needs '{ACCESS_ATTRIBUTE}': an array of {count} strings, one per operand, "
                        f"each {' / '.join(ACCESSES)} (how the kernel uses it; fmha-stages-to-gpu writes it)", launch)
    return access


def _constant(value: "ir.Value", user: "ir.Operation") -> int:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        raise PlanError("block sizes, dims and shared memory sizes must be arith.constant", user)
    return ir.IntegerAttr(owner.operation.attributes["value"]).value


def _float_constant(value: "ir.Value", user: "ir.Operation") -> float:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        raise PlanError("an f32 kernel argument must be an arith.constant", user)
    return ir.FloatAttr(owner.operation.attributes["value"]).value


def _check_zero(memset: "ir.Operation") -> None:
    value = memset.opview.value
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant" or not _is_zero(
            owner.operation.attributes["value"]):
        raise PlanError("gpu.memset must fill with the constant 0 (the runtime only zero-fills)", memset)


def _is_zero(attribute: "ir.Attribute") -> bool:
    """A float 0.0 or an integer 0 (i32 workspaces: deterministic dQ's semaphores)."""
    if isinstance(attribute.type, ir.IntegerType):
        return ir.IntegerAttr(attribute).value == 0
    return ir.FloatAttr(attribute).value == 0.0


def _memref_facts(memref_type: "ir.Type", op: "ir.Operation") -> dict:
    """dtype, rank and the shape (None where dynamic) of a buffer's memref type."""
    memref_type = ir.MemRefType(memref_type)
    dtype = str(memref_type.element_type)
    if dtype not in BUFFER_DTYPES:
        raise PlanError(f"buffer element type {memref_type.element_type} is none of {', '.join(BUFFER_DTYPES)}", op)
    if memref_type.memory_space is not None:
        raise PlanError(f"buffer {memref_type} is not in the default memory space: the runtime passes "
                        "device-global pointers", op)
    shape = [None if memref_type.is_dynamic_dim(i) else memref_type.shape[i] for i in range(memref_type.rank)]
    return {"dtype": dtype, "rank": memref_type.rank, "shape": shape}
