"""Index arithmetic that reads like Python, for the number-generic functions of fmha_mlir (e.g.
fmha_mlir.mask_geometry, fmha_mlir.wgmma_layouts' swizzle XOR): `Ix` wraps an index or i1 value (or a vector of them) and its operators emit
arith ops. Python ints and bools on either side are constants; an operation on Python values alone
never reaches Ix, so what is known when the kernel is built folds. Identities (x + 0, x * 1, True & c,
False | c) emit nothing. Division and modulo floor (arith.floordivsi), as Python's and NumPy's do, and
comparisons are signed."""
from __future__ import annotations

from fmha_mlir.mlir import arith, ir

from .ir_builders import index, splat, vector_shape

_PREDICATES = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}


def as_value(x) -> "ir.Value":
    """The ir.Value of an Ix, of a Python int (an index constant) or of a bool (an i1 constant)."""
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

    __slots__ = ("value",)
    ix_ops = _Ops
    __hash__ = None

    def __init__(self, wrapped: "ir.Value"):
        self.value = wrapped

    @property
    def shape(self) -> list[int]:
        return vector_shape(self.value.type)

    def _binary(self, op, lhs, rhs) -> "Ix":
        return Ix(op(*_lifted(_shape(lhs, rhs), lhs, rhs)))

    def __add__(self, other):
        return self if _is(other, 0) else self._binary(arith.addi, self, other)

    def __radd__(self, other):
        return self if _is(other, 0) else self._binary(arith.addi, other, self)

    def __sub__(self, other):
        return self if _is(other, 0) else self._binary(arith.subi, self, other)

    def __rsub__(self, other):
        return self._binary(arith.subi, other, self)

    def __mul__(self, other):
        return self if _is(other, 1) else self._binary(arith.muli, self, other)

    def __rmul__(self, other):
        return self if _is(other, 1) else self._binary(arith.muli, other, self)

    def __floordiv__(self, other):
        return self if _is(other, 1) else self._binary(arith.floordivsi, self, other)

    def __rfloordiv__(self, other):
        return self._binary(arith.floordivsi, other, self)

    def __mod__(self, other):
        return self - (self // other) * other

    def __rmod__(self, other):
        return other - (other // self) * self

    def __xor__(self, other):
        return self if _is(other, 0) else self._binary(arith.xori, self, other)

    __rxor__ = __xor__

    def __neg__(self):
        return 0 - self

    def _compare(self, name: str, other) -> "Ix":
        predicate = getattr(arith.CmpIPredicate, _PREDICATES[name])
        return self._binary(lambda a, b: arith.cmpi(predicate, a, b), self, other)

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


def _is(x, constant: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x == constant
