"""The wgmma atom (sm_90a): one warpgroup's m64nNk16 products with f32 accumulators, as IR builders.

SS form: A and B from shared memory through descriptors (fmha_mlir.wgmma_layouts.OperandTile) with
nvvm.wgmma.mma_async. RS form: A from registers (four .b32 registers of packed 16-bit pairs per thread,
e.g. P^T or dS^T made from a previous product's accumulators by `as_operand`), B by descriptor; MLIR has
no op for it, so it is inline PTX. Products are asynchronous: `fence` before the first product that reads
registers or shared memory written since, `commit` closes a group, `wait(n)` leaves at most n groups in
flight. The first product of a chain passes first=True (scale-d = 0: D = A B, the accumulator's old
value ignored) instead of zeroed accumulators, which makes ptxas serialise the loop (TENSOR_CORES.md).

The accumulator is an !llvm.struct of N/2 f32 (what the op takes); `elements` yields each register with
its (row, col) from wgmma_layouts.accumulator, so no position is written twice.
"""
from __future__ import annotations

from fmha_mlir import wgmma_layouts
from fmha_mlir.mlir import arith, ir, vector

from .ix import Ix, as_value

ELEMENTS = {"bf16": ir.BF16Type.get, "f16": ir.F16Type.get}
A_REGISTERS = 4            # .b32 registers of a register A operand (8 16-bit elements)


def _op(name: str, operands: list, attributes: dict | None = None, results: list | None = None):
    return ir.Operation.create(name, results=results or [], operands=operands, attributes=attributes or {})


def fence() -> None:
    _op("nvvm.wgmma.fence.aligned", [])


def commit() -> None:
    _op("nvvm.wgmma.commit.group.sync.aligned", [])


def wait(pending: int) -> None:
    """Wait until at most `pending` committed groups of this warpgroup are still in flight."""
    _op("nvvm.wgmma.wait.group.sync.aligned", [], {"group": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                                               pending)})


def store_matrices(address: "ir.Value", registers: list["ir.Value"]) -> None:
    """stmatrix.sync.aligned.m8n8.x4.shared.b16 of four .b32 registers (16-bit pairs), one 8 x 8 matrix
    each: the warp's lanes 8 i .. 8 i + 7 give the 16-byte row addresses (!llvm.ptr<3>) of matrix i."""
    if len(registers) != 4:
        raise ValueError(f"an stmatrix x4 stores 4 registers, not {len(registers)}")
    _op("nvvm.stmatrix", [address, *registers], {
        "layout": ir.Attribute.parse("#nvvm.mma_layout<row>"),
        "shape": ir.Attribute.parse("#nvvm.ld_st_matrix_shape<m = 8, n = 8>"),
        "eltType": ir.Attribute.parse("#nvvm.ld_st_matrix_elt_type<b16>")})


def offset_descriptor(base: "ir.Value", constant: int) -> "ir.Value":
    """The descriptor `base` plus `constant` (a sub-tile's offset: wraps as an i64), issued where it is used.
    As a plain add, LLVM hoists each of a loop's loop-invariant descriptors out of it, and the dozens of
    64-bit values then live across the loop in registers the consumers do not have (ptxas spills them and
    reloads one before each product): as inline PTX with side effects it stays beside its product."""
    return _op("llvm.inline_asm", [base, i64_constant(constant)], {
        "asm_string": ir.StringAttr.get(wgmma_layouts.DESCRIPTOR_OFFSET_PTX),
        "constraints": ir.StringAttr.get("=l,l,n"), "has_side_effects": ir.UnitAttr.get()},
        [ir.IntegerType.get_signless(64)]).result


def pinned_index(value: "ir.Value") -> "ir.Value":
    """`value` (an index) passed through offset_descriptor's inline PTX (plus 0), so that what is built from
    it is computed where it is built: LLVM hoisted the consumers' stores after their loop, addresses from
    the thread id alone, to the kernel's start, where they lived across both roles' loops and spilled
    there (ptxas -v, d64: 168 bytes, 12 local instructions in the consumers' loop)."""
    i64 = ir.IntegerType.get_signless(64)
    return arith.index_cast(ir.IndexType.get(), offset_descriptor(arith.index_cast(i64, value), 0))


def i64_constant(value: int) -> "ir.Value":
    """An i64 constant of a descriptor's unsigned 64-bit value (one with bit 63 set wraps to negative)."""
    return arith.constant(ir.IntegerType.get_signless(64), value - (1 << 64) if value >= 1 << 63 else value)


class SharedDescriptors:
    """Matrix descriptors of tiles in one shared buffer whose base address `base` (an index value,
    aligned to 1024) is read once: a descriptor is then the base's address field plus a constant (the
    buffer lies inside the 18-bit shared window, so the field of base + offset is field(base) + offset / 16)."""

    def __init__(self, base: "ir.Value"):
        self.i64 = ir.IntegerType.get_signless(64)
        self.base_field = arith.index_cast(self.i64, as_value(wgmma_layouts.descriptor_address_field(Ix(base))))

    def descriptor(self, tile: wgmma_layouts.OperandTile, byte_offset: int, mn0: int = 0, k0: int = 0) -> "ir.Value":
        """The i64 descriptor of the sub-tile at (mn0, k0) of `tile`, which starts `byte_offset` bytes into
        the buffer (a multiple of tile.alignment)."""
        if byte_offset % tile.alignment:
            raise ValueError(f"a {tile.swizzle}-byte swizzled tile starts at a multiple of {tile.alignment} bytes, "
                             f"not at {byte_offset}")
        value = tile.descriptor(byte_offset, mn0, k0)
        return arith.addi(self.base_field, i64_constant(value))


class WgmmaAtom:
    """m64nNk16 with f32 accumulators and `element` (bf16 / f16) operands, for one warpgroup whose
    thread index (0..127, an index value) is `thread`."""

    def __init__(self, n: int, element: str, thread: "ir.Value"):
        if n not in wgmma_layouts.N_SIZES:
            raise ValueError(f"wgmma N is a multiple of 8 up to 256, not {n}")
        if element not in ELEMENTS:
            raise ValueError(f"wgmma operands here are {' or '.join(ELEMENTS)}, not {element}")
        self.n, self.element, self.thread = n, element, thread
        self.registers = n // 2
        f32 = ir.F32Type.get()
        self.acc_type = ir.Type.parse(f"!llvm.struct<({', '.join(['f32'] * self.registers)})>")
        self._f32 = f32

    def zeros(self) -> "ir.Value":
        """An undefined-free accumulator for a chain whose first product has first=True (its value is ignored)."""
        return _op("llvm.mlir.zero", [], results=[self.acc_type]).result

    def mma(self, acc, a_descriptor, b_descriptor, first: bool, a_major: str = "K", b_major: str = "K"):
        """D = A B (+ D unless `first`) with both operands from shared memory (i64 descriptors)."""
        shape = ir.Attribute.parse(f"#nvvm.shape<m = 64, n = {self.n}, k = 16>")
        kind = ir.Attribute.parse(f"#nvvm.wgmma_type<{self.element}>")
        return _op("nvvm.wgmma.mma_async", [acc, a_descriptor, b_descriptor], {
            "shape": shape, "typeA": kind, "typeB": kind, "typeD": ir.Attribute.parse("#nvvm.wgmma_type<f32>"),
            "scaleD": ir.Attribute.parse(f"#nvvm.wgmma_scale_out<{'zero' if first else 'one'}>"),
            "scaleA": ir.Attribute.parse("#nvvm.wgmma_scale_in<one>"),
            "scaleB": ir.Attribute.parse("#nvvm.wgmma_scale_in<one>"),
            # row / col: K-major A / B (no transpose); the other: MN-major
            "layoutA": ir.Attribute.parse(f"#nvvm.mma_layout<{'row' if a_major == 'K' else 'col'}>"),
            "layoutB": ir.Attribute.parse(f"#nvvm.mma_layout<{'col' if b_major == 'K' else 'row'}>"),
        }, [self.acc_type]).result

    def mma_rs(self, acc, a_registers: list, b_descriptor, first: bool, b_major: str = "K"):
        """D = A B (+ D unless `first`) with A from registers (`as_operand`) and B by descriptor."""
        if len(a_registers) != A_REGISTERS:
            raise ValueError(f"a register A operand is {A_REGISTERS} i32 registers, not {len(a_registers)}")
        r = self.registers
        # operands: outputs $0.., the inputs tied to them $r.., then A, the descriptor and scale-d
        outputs = ", ".join(f"${i}" for i in range(r))
        a = ", ".join(f"${2 * r + i}" for i in range(A_REGISTERS))
        asm = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${2 * r + A_REGISTERS + 1}, 0;\n"
               f"wgmma.mma_async.sync.aligned.m64n{self.n}k16.f32.{self.element}.{self.element} "
               f"{{{outputs}}}, {{{a}}}, ${2 * r + A_REGISTERS}, p, 1, 1, {0 if b_major == 'K' else 1};\n}}")
        constraints = ",".join(["=f"] * r + [str(i) for i in range(r)] + ["r"] * A_REGISTERS + ["l", "n"])
        operands = [*self.values(acc), *a_registers, b_descriptor,
                    arith.constant(ir.IntegerType.get_signless(32), 0 if first else 1)]
        return _op("llvm.inline_asm", operands, {
            "asm_string": ir.StringAttr.get(asm), "constraints": ir.StringAttr.get(constraints),
            "has_side_effects": ir.UnitAttr.get()}, [self.acc_type]).result

    def values(self, acc) -> list["ir.Value"]:
        """The accumulator's N/2 f32 registers in order."""
        return [_op("llvm.extractvalue", [acc], {"position": ir.DenseI64ArrayAttr.get([i])}, [self._f32]).result
                for i in range(self.registers)]

    def elements(self, acc):
        """(value, row, col) of each accumulator register: rows 0..63 and cols 0..N-1 as Ix."""
        thread = Ix(self.thread)
        for register, value in enumerate(self.values(acc)):
            row, col = wgmma_layouts.accumulator(thread, register)
            yield value, row, col

    def as_operand(self, acc, k_block: int) -> list["ir.Value"]:
        """Columns 16 k_block .. 16 k_block + 15 of the accumulator (64 x N) as a register A operand: its
        registers 8 k_block .. 8 k_block + 7, rounded to the element type in pairs (wgmma_layouts.a_fragment)."""
        values = self.values(acc)[8 * k_block:8 * k_block + 8]
        pair = ir.VectorType.get([2], self._f32)
        return [self.pack(vector.from_elements(pair, [low, high])) for low, high in zip(values[::2], values[1::2])]

    def pack(self, pair: "ir.Value") -> "ir.Value":
        """A vector<2xf32> rounded to the element type as one .b32 register of an A operand (element 0 low)."""
        packed = arith.truncf(ir.VectorType.get([2], ELEMENTS[self.element]()), pair)
        return _op("llvm.bitcast", [packed], results=[ir.IntegerType.get_signless(32)]).result
