"""nvgpu ops of the sm_90 matrix-core body: cp.async (device_async_copy / create_group / wait, and
the nvvm.cp.async.commit.group / wait.group spellings), ldmatrix and mma.sync m16n8k16, emulated with
NumPy for all warps of a chunk at once; and ldmatrix's inverse, nvvm.stmatrix (the wgmma body's stores
of P^T and dS^T, through shared pointers).

Lane layouts come from fmha_mlir/matrix_layouts.py, the functions the lowering evaluates too; the
tables below only tabulate (and invert) them for NumPy gathers. ldmatrix and mma.sync are
warp-collective (.sync.aligned): all 32 lanes of a warp execute them together, and a divergent or
partial warp is an error, as the hardware leaves it undefined.

cp.async copies its bytes at once; the race detector (workgroup.py) keeps the destination *pending*
until the issuing lane's wait retires the copy's group, so a read before the wait is reported although
the bytes are already there. Groups follow PTX's per-thread counters: create_group commits all of the
lane's uncommitted copies (whatever tokens it is given), wait {numGroups = N} waits until at most the
lane's N most recent groups are pending (N = 0 when absent). Tokens carry no data.
"""
from __future__ import annotations

import numpy as np

from ... import matrix_layouts as layouts
from .compiler import KernelCompiler
from .errors import InterpreterError
from .lanes import require_whole_groups
from .memory import element_index, flat_index, to_values
from .ops_memory import segments
from .parser import Operation
from .types import VectorType
from .values import to_lanes

WARP = layouts.WARP
MMA = layouts.MMA_M16N8K16
TOKEN = np.int64(0)          # the value of every !nvgpu.device.async.token
CP_ASYNC_BYTES = (4, 8, 16)
ROW = 8                      # elements of one ldmatrix row: 16 bytes of b16
MATRIX_TYPES = ("f16", "bf16")


def _fragment_positions(layout, registers: int, cols: int) -> np.ndarray:
    """[WARP, registers, elements]: row * cols + col of the matrix element each register element holds."""
    return np.array([[[layout(lane, r, e)[0] * cols + layout(lane, r, e)[1] for e in range(MMA.elements)]
                      for r in range(registers)] for lane in range(WARP)])


def _holders(layout, registers: int, rows: int, cols: int) -> np.ndarray:
    """[rows, cols]: the position (lane * registers + register) * elements + element in a warp's
    fragments that holds each matrix element (the inverse of _fragment_positions)."""
    holders = np.zeros(rows * cols, dtype=np.int64)
    holders[_fragment_positions(layout, registers, cols).reshape(-1)] = np.arange(WARP * registers * MMA.elements)
    return holders.reshape(rows, cols)


A_HOLDERS = _holders(layouts.mma_a, MMA.a_registers, MMA.m, MMA.k)
B_HOLDERS = _holders(layouts.mma_b, MMA.b_registers, MMA.k, MMA.n)
C_HOLDERS = _holders(layouts.mma_c, MMA.c_registers, MMA.m, MMA.n)
D_POSITIONS = _fragment_positions(layouts.mma_c, MMA.c_registers, MMA.n)


def _ldmatrix_sources(transpose: bool, tiles: int):
    """(address lane, column) [WARP, tiles, elements] of what each lane receives: register i holds
    matrix i's element (row, col), which lies `col` elements after the address that row's lane gave."""
    lane_of = np.zeros((WARP, tiles, MMA.elements), dtype=np.int64)
    column = np.zeros_like(lane_of)
    for lane in range(WARP):
        for e in range(MMA.elements):
            row, col = layouts.ldmatrix(lane, e, transpose)
            for i in range(tiles):
                lane_of[lane, i, e] = layouts.ldmatrix_address_lane(i, row)
                column[lane, i, e] = col
    return lane_of, column


LDMATRIX_SOURCES = {(t, n): _ldmatrix_sources(t, n) for t in (False, True) for n in (1, 2, 4)}


def _first_bad(g, bad, mask):
    bad = np.broadcast_to(bad, (g.lanes,))
    if mask is not None:
        bad = bad & mask
    return int(np.argmax(bad)) if bad.any() else None


def _unit_stride(m, what: str, role: str) -> None:
    if m.strides[-1] != 1:
        raise InterpreterError(f"{what}: the {role} needs unit stride along its last dimension "
                               f"(has {int(m.strides[-1])})")


# --- cp.async ------------------------------------------------------------------------------------

def compile_device_async_copy(op: Operation, cc: KernelCompiler):
    """Copy dstElements elements from global to workgroup memory; with srcElements < dstElements only
    that many are read and the rest of the destination is zero-filled (0: nothing is read)."""
    (dst,), dst_idx, (src,), src_idx, count = segments(op, cc)
    n = cc.int_attr(op, "dstElements")
    dst_t, src_t = op.operand_types[0], op.operand_types[1 + len(dst_idx)]
    if dst_t.elem != src_t.elem:
        raise cc.error(op, f"copies {src_t.elem} into {dst_t.elem}")
    itemsize = dst_t.elem.storage_dtype.itemsize
    nbytes = n * itemsize
    if nbytes not in CP_ASYNC_BYTES:
        raise cc.error(op, f"copies {nbytes} bytes; cp.async copies 4, 8 or 16")
    if op.attributes.get("bypassL1") and nbytes != 16:
        raise cc.error(op, f"bypassL1 (cp.async.cg) copies 16 bytes, not {nbytes}")
    out = cc.result(op)
    span = np.arange(n, dtype=np.int64)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        d, s = env[dst], env[src]
        if d.shared is None:
            raise InterpreterError(f"{what}: the destination must be workgroup memory")
        if s.shared is not None:
            raise InterpreterError(f"{what}: the source must be global memory, not {s.shared.name}")
        _unit_stride(d, what, "destination")
        _unit_stride(s, what, "source")
        if count:
            elems = np.broadcast_to(np.asarray(env[count[0]]).astype(np.int64), (g.lanes,))
            lane = _first_bad(g, (elems < 0) | (elems > n), mask)
            if lane is not None:
                raise InterpreterError(f"{what}: {g.describe(lane)} gives srcElements {int(elems[lane])}, "
                                       f"outside 0..{n}")
            reading = elems > 0 if mask is None else mask & (elems > 0)
        else:
            elems, reading = n, mask
        didx, sidx = [env[i] for i in dst_idx], [env[i] for i in src_idx]
        dflat = np.broadcast_to(flat_index(d, didx, mask, g, what, n), (g.lanes,))
        reads = reading is None or reading.any()
        sflat = np.broadcast_to(flat_index(s, sidx, reading, g, what, elems), (g.lanes,)) if reads else None
        lane = _first_bad(g, dflat * itemsize % nbytes != 0, mask)
        if lane is None and reads:
            address = s.storage.__array_interface__["data"][0] + sflat * itemsize
            lane = _first_bad(g, address % nbytes != 0, reading)
        if lane is not None:
            raise InterpreterError(f"{what}: {g.describe(lane)} copies {nbytes} bytes to or from an address "
                                   f"that is not {nbytes}-byte aligned (cp.async needs aligned addresses)")
        rows = dflat[:, None] + span
        d.shared.access("async", rows, mask, n, itemsize, what,
                        lambda lane, position: element_index(didx, lane, position, g.lanes))
        if reading is None:  # every lane reads all n elements
            raw = s.storage.take(sflat[:, None] + span)
        elif reads:  # the others read a clipped index, then zeros
            take = (span < np.reshape(elems, (-1, 1))) & reading[:, None]
            raw = np.where(take, s.storage.take(sflat[:, None] + span, mode="clip"), 0)
        else:
            raw = np.zeros((g.lanes, n), d.storage.dtype)
        if mask is None:
            d.storage[rows] = raw
        else:
            d.storage[rows[mask]] = raw[mask]
        env[out] = TOKEN

    return run


def compile_device_async_create_group(op: Operation, cc: KernelCompiler):
    """nvgpu.device_async_create_group (a token) and nvvm.cp.async.commit.group (none)."""
    outs = cc.results(op)

    def run(st, mask):
        st.workgroup.commit(mask)
        for slot in outs:
            st.env[slot] = TOKEN

    return run


def _wait_handler(attribute: str):
    """nvgpu.device_async_wait {numGroups} and nvvm.cp.async.wait.group {n}: N = 0 when absent."""

    def compile_op(op: Operation, cc: KernelCompiler):
        groups = cc.int_attr(op, attribute) if attribute in op.attributes else 0
        if groups < 0:
            raise cc.error(op, f"{attribute} {groups} is negative")

        def run(st, mask):
            st.workgroup.wait(mask, groups)

        return run

    return compile_op


# --- ldmatrix ------------------------------------------------------------------------------------

def compile_ldmatrix(op: Operation, cc: KernelCompiler):
    """ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16: lanes 8i .. 8i+7 give the addresses of
    the 8 rows (16 bytes each, 16-byte aligned) of matrix i; register i of every lane receives its
    fragment of matrix i (matrix_layouts.ldmatrix). Addresses of lanes >= 8 * numTiles are not used."""
    mem, *indices = cc.operands(op)
    out = cc.result(op)
    tiles = cc.int_attr(op, "numTiles")
    transpose = bool(cc.attr(op, "transpose"))
    t, mem_t = op.result_types[0], op.operand_types[0]
    if tiles not in (1, 2, 4):
        raise cc.error(op, f"numTiles {tiles} is not 1, 2 or 4")
    if not isinstance(t, VectorType) or t.shape != (tiles, MMA.elements) or t.elem.name not in MATRIX_TYPES:
        raise cc.error(op, f"result {t} is not vector<{tiles}x2xf16> or vector<{tiles}x2xbf16>")
    if mem_t.elem != t.elem:
        raise cc.error(op, f"loads {t.elem} from a memref of {mem_t.elem}")
    source_lane, column = LDMATRIX_SOURCES[transpose, tiles]
    span = np.arange(ROW, dtype=np.int64)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        require_whole_groups(st, mask, WARP, what, "warp")
        m = env[mem]
        if m.shared is None:
            raise InterpreterError(f"{what}: ldmatrix reads workgroup memory only")
        _unit_stride(m, what, "memref")
        used = g.lane_in_wave < ROW * tiles
        if mask is not None:
            used = used & mask
        idx = [env[i] for i in indices]
        flat = np.broadcast_to(flat_index(m, idx, used, g, what, ROW), (g.lanes,))
        lane = _first_bad(g, flat % ROW != 0, used)
        if lane is not None:
            raise InterpreterError(f"{what}: {g.describe(lane)} gives the row address of element "
                                   f"{element_index(idx, lane, 0, g.lanes)}, which is not 16-byte aligned")
        m.shared.access("read", flat[:, None] + span, used, ROW, 2, what,
                        lambda lane, position: element_index(idx, lane, position, g.lanes))
        start = flat.reshape(-1, WARP)[:, source_lane] + column   # [warps, lanes, tiles, elements]
        # warps that do not execute read clipped indices, never used
        env[out] = to_values(m.storage.take(start.reshape(g.lanes, tiles, MMA.elements), mode="clip"), t.elem)

    return run


def compile_stmatrix(op: Operation, cc: KernelCompiler):
    """stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16: ldmatrix's inverse. Lanes 8i .. 8i+7 give
    the shared addresses (!llvm.ptr<3>: bytes into dynamic shared memory, 16-byte aligned) of matrix i's
    8 rows; register i of every lane (a .b32 of two 16-bit elements, element 0 low) is its fragment of
    matrix i, written where ldmatrix would have read it (layout col: .trans)."""
    address, *registers = cc.operands(op)
    tiles = len(registers)
    layout = cc.enum_attr(op, "layout")
    if tiles not in (1, 2, 4) or layout not in ("row", "col"):
        raise cc.error(op, f"stores 1, 2 or 4 matrices in layout row or col, not {tiles} in {layout}")
    shape, element = cc.attr_text(op, "shape"), cc.attr_text(op, "eltType")
    if "m = 8, n = 8" not in shape or "b16" not in element:
        raise cc.error(op, f"the interpreter runs m8n8 b16 stmatrix, not {shape} of {element}")
    if str(op.operand_types[0]) != "!llvm.ptr<3>" or any(str(t) != "i32" for t in op.operand_types[1:]):
        raise cc.error(op, "stmatrix takes a shared pointer (!llvm.ptr<3>) and i32 registers")
    source_lane, column = LDMATRIX_SOURCES[layout == "col", tiles]
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        require_whole_groups(st, mask, WARP, what, "warp")
        buffer = st.workgroup.dynamic().shared
        rows = np.broadcast_to(np.asarray(env[address], np.int64), (g.lanes,))
        used = np.ones(g.lanes, bool) if mask is None else mask
        lane = _first_bad(g, (rows % (2 * ROW) != 0) | (rows < 0) | (rows + 2 * ROW > st.workgroup.dynamic_bytes),
                          used)
        if lane is not None:
            raise InterpreterError(f"{what}: {g.describe(lane)} gives the row address {int(rows[lane])}, not a "
                                   f"16-byte aligned row inside the {st.workgroup.dynamic_bytes} bytes of dynamic "
                                   "shared memory")
        # each lane's element e of register i lands `column` elements after the row its address lane gave
        start = rows.reshape(-1, WARP)[:, source_lane] // 2 + column      # [warps, lanes, tiles, elements]
        flat = start.reshape(g.lanes, -1) + (g.group_local * buffer.stride // 2)[:, None]
        buffer.access("write", flat, mask, 2 * tiles, 2, what, lambda lane, position: (int(flat[lane, position]),))
        bits = np.stack([np.broadcast_to(np.asarray(env[r]).astype(np.int64) & 0xFFFFFFFF, (g.lanes,))
                         for r in registers], 1)
        halves = np.stack([bits & 0xFFFF, bits >> 16], -1).astype(np.uint16).reshape(g.lanes, -1)
        storage = buffer.data.view(np.uint16)
        storage[flat[used].reshape(-1)] = halves[used].reshape(-1)

    return run


# --- mma.sync ------------------------------------------------------------------------------------

def compile_mma_sync(op: Operation, cc: KernelCompiler):
    """D = A * B + C for each warp (mma.sync.aligned.m16n8k16.row.col), operands in the fragment layouts
    of matrix_layouts (vector<4x2xT>, vector<2x2xT>, vector<2x2xf32 or f16>), T f16 or bf16.

    Computed in float64: every product of two f16 / bf16 values is exact (at most 22 significant bits),
    and so is the 17-term sum with C unless its terms spread over more than ~30 binades; the result is
    rounded once to the accumulator type. That models the hardware's contract (exact products,
    accumulation in at least f32) without inventing an order of additions: float32 arithmetic would
    round after every addition, in an order of BLAS's choosing. An f16 accumulator is also rounded once,
    at the end (the hardware may round more often)."""
    a, b, c = cc.operands(op)
    out = cc.result(op)
    shape = [int(getattr(v, "value", v)) for v in cc.attr(op, "mmaShape")]
    if shape != [MMA.m, MMA.n, MMA.k]:
        raise cc.error(op, f"mmaShape {shape} is not supported (only [16, 8, 16])")
    if "tf32Enabled" in op.attributes:
        raise cc.error(op, "tf32 mma is not supported")
    ta, tb, tc = op.operand_types
    elem = getattr(ta, "elem", None)
    want = {"A": (ta, MMA.a_registers), "B": (tb, MMA.b_registers), "C": (tc, MMA.c_registers),
            "the result": (op.result_types[0], MMA.c_registers)}
    for name, (t, registers) in want.items():
        if not isinstance(t, VectorType) or t.shape != (registers, MMA.elements):
            raise cc.error(op, f"{name} has type {t}, expected vector<{registers}x2x...>")
    if elem is None or elem.name not in MATRIX_TYPES or tb.elem != elem:
        raise cc.error(op, f"A and B must both be f16 or bf16 (got {ta}, {tb})")
    acc = tc.elem
    if acc != op.result_types[0].elem or not (acc.name == "f32" or acc.name == elem.name == "f16"):
        raise cc.error(op, f"accumulator {tc} is not supported for {elem} operands (f32, or f16 with f16)")
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        require_whole_groups(st, mask, WARP, what, "warp")

        def matrix(slot, holders):
            fragments = to_lanes(env[slot], g.lanes, 2).reshape(-1, holders.size)  # [warps, lanes * 2 * R]
            return fragments[:, holders].astype(np.float64)

        d = np.matmul(matrix(a, A_HOLDERS), matrix(b, B_HOLDERS)) + matrix(c, C_HOLDERS)
        d = d.astype(acc.dtype).reshape(-1, MMA.m * MMA.n)
        env[out] = d[:, D_POSITIONS].reshape(g.lanes, MMA.c_registers, MMA.elements)

    return run


HANDLERS = {
    "nvgpu.device_async_copy": compile_device_async_copy,
    "nvgpu.device_async_create_group": compile_device_async_create_group,
    "nvgpu.device_async_wait": _wait_handler("numGroups"),
    "nvvm.cp.async.commit.group": compile_device_async_create_group,
    "nvvm.cp.async.wait.group": _wait_handler("n"),
    "nvgpu.ldmatrix": compile_ldmatrix,
    "nvvm.stmatrix": compile_stmatrix,
    "nvgpu.mma.sync": compile_mma_sync,
}
