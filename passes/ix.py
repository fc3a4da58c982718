"""Index arithmetic that reads like Python, for the number-generic functions of fmha_mlir (e.g.
fmha_mlir.mask_geometry, fmha_mlir.wgmma_layouts' swizzle XOR): `Ix` wraps an index or i1 value (or a vector
of them) and its operators emit arith ops. Python ints and bools on either side are constants; an operation on
Python values alone never reaches Ix, so what is known when the kernel is built folds. Identities
(x + 0, x * 1, x // 1, True & c, False | c) emit nothing. Division and modulo floor (arith.floordivsi), as Python's and
NumPy's do, and comparisons are signed. An Ix may be known to be non-negative (a lane or thread id, and what
+, *, //, %, ^ make of such values and non-negative ints): its // and % are then the unsigned divui / remui,
which need no sign fix-up (the lane layouts of fmha_mlir.matrix_layouts evaluate on `Ix.lane(...)`).

An Ix bound to a LaneValues (`Ix.lane(value, lanes)`: the lane, a warp's offsets) is hoisted: an
operation whose operands are all such values or Python ints is built once, at the kernel's start, and
every later evaluation of the same operation returns that value. A layout function evaluated on a bound
lane therefore costs its arithmetic once per kernel, however often the body asks."""
from __future__ import annotations

from dataclasses import dataclass, field

from fmha_mlir.mlir import arith, ir

from .ir_builders import index, splat, vector_shape

_PREDICATES = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}


def as_value(x) -> "ir.Value":
    """The ir.Value of an Ix, of a Python int (an index constant) or of a bool (an i1 constant); an
    ir.Value as it is."""
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, Ix):
        return x.value
    if isinstance(x, bool):
        return arith.constant(ir.IntegerType.get_signless(1), int(x))
    return index(x)


def _shape(*values) -> list[int]:
    return next((x.shape for x in values if isinstance(x, Ix) and x.shape), [])


def _lifted(shape: list[int], *values) -> list["ir.Value"]:
    """The values as ir.Values of one shape: constants for Python values, scalars splat to `shape`."""
    return [splat(as_value(x), shape) for x in values]


@dataclass
class LaneValues:
    """Values that depend on the lane (and warp) only, built once at the kernel's start: `hoist` is an
    insertion point before the first op of the body proper, so they dominate every use."""

    hoist: "ir.InsertionPoint"
    cache: dict = field(default_factory=dict)

    def get(self, key, build):
        if key not in self.cache:
            with self.hoist:
                self.cache[key] = build()
        return self.cache[key]


class _Ops:
    """What fmha_mlir.index_math dispatches to for Ix operands."""

    @staticmethod
    def minimum(a, b) -> "Ix":
        return Ix(arith.minsi(*_lifted(_shape(a, b), a, b)))

    @staticmethod
    def maximum(a, b) -> "Ix":
        return Ix(arith.maxsi(*_lifted(_shape(a, b), a, b)))

    @staticmethod
    def ceildiv(a, b) -> "Ix":
        return Ix(arith.ceildivsi(*_lifted(_shape(a, b), a, b)))

    @staticmethod
    def select(condition, if_true, if_false) -> "Ix":
        shape = _shape(condition, if_true, if_false)
        return Ix(arith.select(*_lifted(shape, condition, if_true, if_false)))


class Ix:
    """An index or i1 ir.Value (or vector of them) with Python's arithmetic, comparison and logic operators."""

    __slots__ = ("value", "nonnegative", "lanes")
    ix_ops = _Ops
    __hash__ = None

    def __init__(self, wrapped: "ir.Value", nonnegative: bool = False, lanes: LaneValues | None = None):
        self.value = wrapped
        self.nonnegative = nonnegative
        self.lanes = lanes

    @staticmethod
    def lane(value: "ir.Value", lanes: LaneValues | None = None) -> "Ix":
        """A lane, thread or warp id (or offset): an index known to be non-negative; with `lanes`, one the
        kernel builds at its start, so that what is computed from it alone is hoisted there too."""
        return Ix(value, nonnegative=True, lanes=lanes)

    @property
    def shape(self) -> list[int]:
        return vector_shape(self.value.type)

    def _binary(self, op, lhs, rhs, keeps_sign: bool = False, name: str | None = None) -> "Ix":
        """op(lhs, rhs); `keeps_sign`: the result is non-negative when both operands are. Built once at the
        kernel's start when every operand is a Python int or an Ix bound to the same LaneValues."""
        nonnegative = keeps_sign and _nonnegative(lhs) and _nonnegative(rhs)
        lanes = _bound_lanes(lhs, rhs)
        if lanes is None:
            return Ix(op(*_lifted(_shape(lhs, rhs), lhs, rhs)), nonnegative)
        key = ("ix", name or op.__name__, _key(lhs), _key(rhs))
        return lanes.get(key, lambda: Ix(op(*_lifted(_shape(lhs, rhs), lhs, rhs)), nonnegative, lanes))

    def __add__(self, other):
        return self if _is(other, 0) else self._binary(arith.addi, self, other, True)

    def __radd__(self, other):
        return self if _is(other, 0) else self._binary(arith.addi, other, self, True)

    def __sub__(self, other):
        return self if _is(other, 0) else self._binary(arith.subi, self, other)

    def __rsub__(self, other):
        return self._binary(arith.subi, other, self)

    def __mul__(self, other):
        return self if _is(other, 1) else self._binary(arith.muli, self, other, True)

    def __rmul__(self, other):
        return self if _is(other, 1) else self._binary(arith.muli, other, self, True)

    def __floordiv__(self, other):
        if _is(other, 1):
            return self
        if _nonnegative(self) and _nonnegative(other):
            return self._binary(arith.divui, self, other, True)
        return self._binary(arith.floordivsi, self, other)

    def __rfloordiv__(self, other):
        if _nonnegative(self) and _nonnegative(other):
            return self._binary(arith.divui, other, self, True)
        return self._binary(arith.floordivsi, other, self)

    def __mod__(self, other):
        if _nonnegative(self) and _nonnegative(other):
            return self._binary(arith.remui, self, other, True)
        return self - (self // other) * other

    def __rmod__(self, other):
        if _nonnegative(self) and _nonnegative(other):
            return self._binary(arith.remui, other, self, True)
        return other - (other // self) * self

    def __divmod__(self, other):
        return self // other, self % other

    def __xor__(self, other):
        return self if _is(other, 0) else self._binary(arith.xori, self, other, True)

    __rxor__ = __xor__

    def __neg__(self):
        return 0 - self

    def _compare(self, name: str, other) -> "Ix":
        predicate = getattr(arith.CmpIPredicate, _PREDICATES[name])
        return self._binary(lambda a, b: arith.cmpi(predicate, a, b), self, other, name=name)

    def __lt__(self, other):
        return self._compare("lt", other)

    def __le__(self, other):
        return self._compare("le", other)

    def __gt__(self, other):
        return self._compare("gt", other)

    def __ge__(self, other):
        return self._compare("ge", other)

    def __eq__(self, other):
        return self._compare("eq", other)

    def __ne__(self, other):
        return self._compare("ne", other)

    def __and__(self, other):
        if isinstance(other, bool):
            return self if other else False
        return self._binary(arith.andi, self, other)

    __rand__ = __and__

    def __or__(self, other):
        if isinstance(other, bool):
            return True if other else self
        return self._binary(arith.ori, self, other)

    __ror__ = __or__

    def __bool__(self):
        raise TypeError("an Ix is known only when the kernel runs: use index_math.select, not `if`")


def _bound_lanes(*operands) -> LaneValues | None:
    """The LaneValues every Ix operand is bound to, when they all are (to one) and the rest are ints."""
    found = None
    for x in operands:
        if isinstance(x, Ix):
            if x.lanes is None or (found is not None and x.lanes is not found):
                return None
            found = x.lanes
        elif not isinstance(x, int):
            return None
    return found


def _key(x):
    return as_value(x) if isinstance(x, Ix) else (type(x), x)


def _nonnegative(x) -> bool:
    """Whether x is known to be >= 0: a non-negative Python int or an Ix known to be."""
    if isinstance(x, Ix):
        return x.nonnegative
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is(x, constant: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x == constant
