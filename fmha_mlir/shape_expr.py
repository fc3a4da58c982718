"""Small integer expressions of runtime sizes: grids, workspace shapes and scalar kernel arguments.

The compiler writes them into the host function as memref.dim + arith ops (the launch plan is read back
from there), the manifest stores them as JSON, and the runtime evaluates them with the sizes of the
tensors it was given. Numpy-free and MLIR-free: the runtime imports this module.

JSON forms: an int; {"dim": [buffer, index]}; {"arg": name} (a scalar the caller passes: varlen's
max lengths); {op: [a, b]} for op in OPS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Union

from .errors import RuntimeLaunchError


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


# Binary operators on non-negative sizes; division by a non-positive divisor is refused.
OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "ceildiv": _ceildiv, "floordiv": lambda a, b: a // b, "min": min, "max": max,
}
# The arith op that computes each operator on index values in the host function (unsigned: sizes are
# non-negative). The compiler builds them, the launch plan reads them back.
ARITH_OPS: dict[str, str] = {
    "add": "arith.addi", "sub": "arith.subi", "mul": "arith.muli", "ceildiv": "arith.ceildivui",
    "floordiv": "arith.divui", "min": "arith.minui", "max": "arith.maxui",
}


@dataclass(frozen=True)
class Dim:
    """Size `index` of buffer `buffer` (a stage-operand or manifest buffer name)."""

    buffer: str
    index: int


@dataclass(frozen=True)
class Arg:
    """A scalar size the caller passes by name (a host function argument; fmha_mlir.varlen)."""

    name: str


@dataclass(frozen=True)
class BinOp:
    op: str
    lhs: "Expr"
    rhs: "Expr"


Expr = Union[int, Dim, Arg, BinOp]


def ceildiv(a: Expr, b: Expr) -> Expr:
    return BinOp("ceildiv", a, b)


def add(a: Expr, b: Expr) -> Expr:
    return BinOp("add", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    return BinOp("mul", a, b)


def evaluate(expr: Expr, shapes: Mapping[str, tuple[int, ...]], what: str = "expression",
             args: Mapping[str, int] | None = None) -> int:
    """The value of `expr` for buffers of `shapes` and scalar `args`; RuntimeLaunchError naming `what`
    if it cannot be."""
    if isinstance(expr, bool):
        raise RuntimeLaunchError(f"{what}: {expr!r} is not a size")
    if isinstance(expr, int):
        return expr
    if isinstance(expr, Arg):
        if args is None or expr.name not in args:
            raise RuntimeLaunchError(f"{what}: needs the scalar {expr.name!r}, which was not given")
        return int(args[expr.name])
    if isinstance(expr, Dim):
        shape = shapes.get(expr.buffer)
        if shape is None or not 0 <= expr.index < len(shape):
            raise RuntimeLaunchError(f"{what}: dim {expr.index} of buffer {expr.buffer!r} does not exist")
        return int(shape[expr.index])
    lhs, rhs = evaluate(expr.lhs, shapes, what, args), evaluate(expr.rhs, shapes, what, args)
    if expr.op in ("ceildiv", "floordiv") and rhs <= 0:
        raise RuntimeLaunchError(f"{what}: {expr.op} by {rhs}")
    return OPS[expr.op](lhs, rhs)


def to_json(expr: Expr):
    if isinstance(expr, int) and not isinstance(expr, bool):
        return expr
    if isinstance(expr, Dim):
        return {"dim": [expr.buffer, expr.index]}
    if isinstance(expr, Arg):
        return {"arg": expr.name}
    return {expr.op: [to_json(expr.lhs), to_json(expr.rhs)]}


def from_json(data, what: str = "expression") -> Expr:
    """The expression a manifest holds; RuntimeLaunchError naming `what` when it is malformed."""
    if isinstance(data, int) and not isinstance(data, bool):
        return data
    if isinstance(data, dict) and len(data) == 1:
        (op, args), = data.items()
        if op == "dim" and isinstance(args, list) and len(args) == 2 and isinstance(args[0], str) \
                and isinstance(args[1], int) and not isinstance(args[1], bool):
            return Dim(args[0], args[1])
        if op == "arg" and isinstance(args, str):
            return Arg(args)
        if op in OPS and isinstance(args, list) and len(args) == 2:
            return BinOp(op, from_json(args[0], what), from_json(args[1], what))
    raise RuntimeLaunchError(f"{what}: {data!r} is not a size expression (an int, {{\"dim\": [buffer, index]}}, "
                             f"{{\"arg\": name}} or {{op: [a, b]}} with op one of {', '.join(OPS)})")


def leaves(expr: Expr) -> list[Expr]:
    """The ints, dims and args an expression is built from."""
    if isinstance(expr, BinOp):
        return leaves(expr.lhs) + leaves(expr.rhs)
    return [expr]


def args_of(expr: Expr) -> set[str]:
    """The scalar arguments an expression reads."""
    return {leaf.name for leaf in leaves(expr) if isinstance(leaf, Arg)}


def buffers_of(expr: Expr) -> set[str]:
    """The buffers an expression reads sizes of."""
    return {leaf.buffer for leaf in leaves(expr) if isinstance(leaf, Dim)}
