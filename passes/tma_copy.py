"""The TMA copy atom (sm_90): box loads from a tensor map into swizzled shared memory, completing on an
mbarrier, and box reduce-adds from shared memory into the tensor (the dQ writer's), as IR builders; and the
kernel-parameter side of tensor maps.

A tensor map (the 128-byte CUtensorMap the CUDA executor encodes: global address, sizes, strides, box,
swizzle, out-of-bounds zero fill) is a kernel parameter of type !llvm.ptr marked with `fmha.tensor_map`
on the gpu.func (`tensor_map_params`); fmha-grid-constant-params makes it the by-value __grid_constant__
parameter after lowering. Inside the kernel it is cast to the !nvgpu.tensormap.descriptor type whose
`tensor` is the box. A box load writes rows x (swizzle bytes) of consecutive elements, swizzled as
fmha_mlir.wgmma_layouts.swizzle says, and zero-fills what lies outside the tensor; its bytes count
towards the barrier's transaction (commit the stage with `tile_bytes`).

A box reduce-add or box store (TmaWrite) reads a box from shared memory, laid out as a load through the
same map would leave it, and adds it element-wise into the tensor, atomically per element, or stores it
there, dropping what lies outside the tensor. It reads shared memory through the async proxy and completes
in bulk groups, not on an mbarrier: ordinary stores to the box need fence_proxy_async by their threads
before it; the issuing thread commits its writes as a group (bulk_commit) and waits for groups (bulk_wait)
before the box is written again (read=True) and before the kernel ends.
"""
from __future__ import annotations

from fmha_mlir.mlir import arith, ir, memref
from fmha_mlir.wgmma_layouts import OperandTile

from .ir_builders import shared_pointer
from .ix import as_value

TENSOR_MAP_ATTRIBUTE = "fmha.tensor_map_params"   # on the gpu.func: lowered indices of its tensor-map params
SWIZZLE_NAMES = {0: "none", 32: "swizzle_32b", 64: "swizzle_64b", 128: "swizzle_128b"}
ELEMENT_NAMES = {"bf16": "bf16", "f16": "f16", "f32": "f32"}
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


def _check_box(inner: int, element: str, swizzle: int) -> None:
    if swizzle and inner * ELEMENT_BYTES[element] != swizzle:
        raise ValueError(f"a {swizzle}-byte swizzled box has rows of {swizzle} bytes, not {inner} x "
                         f"{ELEMENT_BYTES[element]}")


def tensor_map_params(function: "ir.Operation", positions: list[int]) -> None:
    """Mark gpu.func arguments `positions` (each !llvm.ptr) as tensor maps: the attribute records their
    indices among the lowered llvm.func's parameters, where a rank-r memref is 3 + 2 r parameters."""
    types = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value).inputs
    lowered, at = [], 0
    for i, t in enumerate(types):
        if i in positions:
            if str(t) != "!llvm.ptr":
                raise ValueError(f"a tensor-map parameter is an !llvm.ptr, argument {i} is {t}")
            lowered.append(at)
        at += 3 + 2 * ir.MemRefType(t).rank if isinstance(t, ir.MemRefType) else 1
    function.attributes[TENSOR_MAP_ATTRIBUTE] = ir.DenseI64ArrayAttr.get(lowered)


class TmaCopy:
    """Box loads through one tensor map whose box is `rows` x `inner` elements of `element`, swizzled by
    `swizzle` bytes (inner x element bytes == swizzle for swizzled boxes), behind `outer` leading
    dimensions of size 1 (a [batch, head, row, column] tensor's box is 1 x 1 x rows x inner)."""

    def __init__(self, tensor_map: "ir.Value", rows: int, inner: int, element: str, swizzle: int, outer: int = 0):
        _check_box(inner, element, swizzle)
        self.rows, self.inner, self.element, self.swizzle, self.outer = rows, inner, element, swizzle, outer
        self.element_bytes = ELEMENT_BYTES[element]
        box = (1,) * outer + (rows, inner)
        self.descriptor_type = descriptor_type(box, element, swizzle)
        self.descriptor = ir.Operation.create("builtin.unrealized_conversion_cast", results=[self.descriptor_type],
                                              operands=[tensor_map]).result
        self.shared_type = ir.Type.parse(f"memref<{_shape(box)}x{ELEMENT_NAMES[element]}, "
                                         "#gpu.address_space<workgroup>>")

    @classmethod
    def for_tile(cls, tensor_map: "ir.Value", tile: OperandTile, element: str, outer: int = 0) -> "TmaCopy":
        """The copy whose boxes fill `tile` (OperandTile.boxes)."""
        return cls(tensor_map, *tile.box, element, tile.swizzle, outer)

    @property
    def box_bytes(self) -> int:
        return self.rows * self.inner * self.element_bytes

    def load(self, shared: "ir.Value", byte_offset, coordinates, barriers, barrier) -> None:
        """One box at `coordinates` (innermost first: column, then row, then the outer dimensions, as the
        tensor map's dimensions) into the dynamic shared buffer `shared` (i8) at `byte_offset` (a multiple
        of the swizzle period), completing on barrier `barrier` of the MbarrierGroup `barriers`."""
        view = memref.view(self.shared_type, shared, as_value(byte_offset), [])
        coords = [as_value(c) for c in coordinates]
        ir.Operation.create("nvgpu.tma.async.load", results=[], operands=[
            view, barriers.value, self.descriptor, *coords, as_value(barrier)],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, len(coords), 1, 0, 0])})

    def load_tile(self, shared: "ir.Value", byte_offset, tile: OperandTile, row, column, barriers,
                  barrier, outer: tuple = ()) -> None:
        """Every box of `tile` whose first element is at (row, column) of the tensor (row along the
        tensor's outer dimension, column along its contiguous one), `outer` the coordinates of the leading
        dimensions (innermost first). `byte_offset`: an int or an index value."""
        for offset, first, _ in tile.boxes():
            at = byte_offset + offset if isinstance(byte_offset, int) else arith.addi(byte_offset, as_value(offset))
            self.load(shared, at, [column + first if first else column, row, *outer], barriers, barrier)


def descriptor_type(box: tuple[int, ...], element: str, swizzle: int) -> "ir.Type":
    """!nvgpu.tensormap.descriptor of a box (outermost first) in shared memory, zero-filled out of bounds."""
    return ir.Type.parse(f"!nvgpu.tensormap.descriptor<tensor = memref<{_shape(box)}x{ELEMENT_NAMES[element]}, 3>, "
                         f"swizzle = {SWIZZLE_NAMES[swizzle]}, l2promo = none, oob = zero, interleave = none>")


def host_tensor_map(tensor: "ir.Value", box: tuple[int, ...], swizzle: int) -> "ir.Value":
    """On the host: the tensor map of memref `tensor` with boxes of `box` (outermost first), as the
    !llvm.ptr a kernel's tensor-map parameter takes (the launch plan reads it back as a tensor map)."""
    element = ir.MemRefType(tensor.type).element_type
    name = next(n for n in ELEMENT_NAMES if ir.Type.parse(n) == element)
    unranked = memref.cast(ir.UnrankedMemRefType.get(element, None), tensor)
    created = ir.Operation.create("nvgpu.tma.create.descriptor", results=[descriptor_type(box, name, swizzle)],
                                  operands=[unranked, *(as_value(n) for n in box)]).result
    return ir.Operation.create("builtin.unrealized_conversion_cast", results=[ir.Type.parse("!llvm.ptr")],
                               operands=[created]).result


def _shape(box: tuple[int, ...]) -> str:
    return "x".join(str(n) for n in box)


class TmaWrite:
    """Box writes through one tensor map of `element` whose box is `rows` x `inner`, swizzled by `swizzle`
    bytes (the module's docstring says what orders them): reduce-adds into f32 tensors, or stores."""

    def __init__(self, tensor_map: "ir.Value", rows: int, inner: int, swizzle: int, element: str = "f32"):
        _check_box(inner, element, swizzle)
        self.tensor_map, self.rows, self.inner, self.swizzle, self.element = tensor_map, rows, inner, swizzle, element

    @property
    def box_bytes(self) -> int:
        return self.rows * self.inner * ELEMENT_BYTES[self.element]

    def reduce_add(self, shared: "ir.Value", byte_offset, coordinates) -> None:
        """tensor[box at `coordinates`] += the box at `byte_offset` of the dynamic shared buffer `shared`
        (i8; a multiple of the swizzle period, of 128 bytes without one); coordinates innermost first."""
        if self.element != "f32":
            raise ValueError(f"the box reduce-adds here take f32 tensors (the dQ accumulator), not {self.element}")
        ir.Operation.create("nvvm.cp.async.bulk.tensor.reduce", results=[], operands=[
            self.tensor_map, *self._source_and_coordinates(shared, byte_offset, coordinates)],
            attributes={"redKind": ir.Attribute.parse("#nvvm.tma_redux_kind<add>"),
                        "mode": ir.Attribute.parse("#nvvm.tma_store_mode<tile>"),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, len(coordinates), 0])})

    def store(self, shared: "ir.Value", byte_offset, coordinates) -> None:
        """tensor[box at `coordinates`] = the box at `byte_offset` of `shared` (as reduce_add places it)."""
        ir.Operation.create("nvvm.cp.async.bulk.tensor.global.shared.cta", results=[], operands=[
            self.tensor_map, *self._source_and_coordinates(shared, byte_offset, coordinates)],
            attributes={"mode": ir.Attribute.parse("#nvvm.tma_store_mode<tile>"),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, len(coordinates), 0, 0])})

    @staticmethod
    def _source_and_coordinates(shared: "ir.Value", byte_offset, coordinates) -> list["ir.Value"]:
        """The box's shared address as an !llvm.ptr<3>, then the coordinates as i32."""
        pointer = shared_pointer(arith.addi(memref.extract_aligned_pointer_as_index(shared), as_value(byte_offset)))
        return [pointer, *(arith.index_cast(ir.IntegerType.get_signless(32), as_value(c)) for c in coordinates)]


def bulk_commit() -> None:
    """Close this thread's bulk reduces issued since the last commit into one bulk group."""
    ir.Operation.create("nvvm.cp.async.bulk.commit.group", results=[], operands=[])


def bulk_wait(pending: int, read: bool) -> None:
    """Wait until at most `pending` of this thread's bulk groups are outstanding: with `read`, until the
    others have read their shared memory (it may be written again); without, until they have completed."""
    attributes = {"group": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), pending)}
    if read:
        attributes["read"] = ir.UnitAttr.get()
    ir.Operation.create("nvvm.cp.async.bulk.wait_group", results=[], operands=[], attributes=attributes)


def tile_bytes(tile: OperandTile) -> int:
    """The transaction bytes of loading `tile`: out-of-bounds zero fill counts too (whole boxes)."""
    return tile.nbytes


