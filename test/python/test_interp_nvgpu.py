"""nvgpu ops of the sm_90 matrix-core body against references written from the PTX ISA: the lane layouts
of fmha_mlir/matrix_layouts.py, ldmatrix, mma.sync m16n8k16, cp.async (zero fill, bounds, alignment)
and the cp.async + ldmatrix + mma.sync pipeline of a tiled matmul.

The expected layouts are written here from the formulas of the PTX ISA (docs.nvidia.com/cuda/
parallel-thread-execution; section numbers as in PTX ISA 8.5-8.7, they move between releases), not
taken from matrix_layouts:
  section 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating point type" (anchor
  #warp-level-matrix-fragment-mma-16816-float): Figure 79 (A, .f16 / .bf16), Figure 81 (B, .f16 /
  .bf16), Figure 83 (C / D), with groupID = %laneid >> 2 and threadID_in_group = %laneid % 4;
  section 9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix" (anchor
  #warp-level-matrix-instructions-ldmatrix): threads 8i..8i+7 give the row addresses of matrix i (the
  table of .num); the fragments of a row go to consecutive threads, thread 0 getting the first, four
  threads per row (Figure 104), so thread t holds row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1 (a
  32-bit register holds two b16 elements); .trans loads the matrix in column-major order, i.e. the same
  fragments of the transposed matrix; row addresses are naturally aligned (16 bytes: 8 b16 elements).
A fragment element a_i lives in register i / 2 (half i % 2) of the .f16x2 registers; nvgpu's
vector<R x 2 x T> holds register r in row r, which is the (register, element) convention below.
"""
import numpy as np
import pytest

from fmha_mlir import matrix_layouts
from fmha_mlir.dtypes import bf16_value
from fmha_mlir.runtime.interp import InterpreterError

from interp_support import index_constants, random_values, run

WARP = 32


def ptx_mma_a(lane: int, i: int) -> tuple[int, int]:
    """Figure 79: row groupID for a_i with 0 <= i < 2 or 4 <= i < 6, else groupID + 8; column
    threadID_in_group * 2 + (i & 1), + 8 for i >= 4."""
    group, thread = lane >> 2, lane % 4
    row = group if (0 <= i < 2 or 4 <= i < 6) else group + 8
    return row, thread * 2 + (i & 1) + (8 if i >= 4 else 0)


def ptx_mma_b(lane: int, i: int) -> tuple[int, int]:
    """Figure 81: row threadID_in_group * 2 + (i & 1), + 8 for i >= 2; column groupID."""
    group, thread = lane >> 2, lane % 4
    return thread * 2 + (i & 1) + (8 if i >= 2 else 0), group


def ptx_mma_c(lane: int, i: int) -> tuple[int, int]:
    """Figure 83: row groupID for c_i with i < 2, else groupID + 8; column threadID_in_group * 2 + (i & 1)."""
    group, thread = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), thread * 2 + (i & 1)


def ptx_ldmatrix(lane: int, i: int, transpose: bool) -> tuple[int, int]:
    """Figure 104: fragment `lane` of an 8x8 matrix is row lane / 4, column 2 (lane % 4) + i; .trans
    loads the transposed matrix."""
    row, col = lane // 4, 2 * (lane % 4) + i
    return (col, row) if transpose else (row, col)


@pytest.mark.parametrize("name,ptx,registers", [("mma_a", ptx_mma_a, 4), ("mma_b", ptx_mma_b, 2),
                                                ("mma_c", ptx_mma_c, 2)])
def test_mma_layouts_follow_the_ptx_isa(name, ptx, registers):
    layout = getattr(matrix_layouts, name)
    for lane in range(WARP):
        for i in range(2 * registers):
            assert layout(lane, i // 2, i % 2) == ptx(lane, i), (name, lane, i)


@pytest.mark.parametrize("transpose", [False, True])
def test_ldmatrix_layout_follows_the_ptx_isa(transpose):
    for lane in range(WARP):
        for i in range(2):
            assert matrix_layouts.ldmatrix(lane, i, transpose) == ptx_ldmatrix(lane, i, transpose)
    # "addresses addr0-addr7 correspond to the rows of the first matrix, addr8-addr15 to the second, ..."
    assert [[matrix_layouts.ldmatrix_address_lane(m, r) for r in range(8)] for m in range(4)] == \
        [list(range(8 * m, 8 * m + 8)) for m in range(4)]


# --- data in the element types -------------------------------------------------------------------

def values_of(stored, dtype):
    return (bf16_value(stored) if dtype == "bf16" else stored).astype(np.float64)


SMEM = "memref<?xi8, #gpu.address_space<workgroup>>"


def tile_type(rows, cols, t):
    return f"memref<{rows}x{cols}x{t}, #gpu.address_space<workgroup>>"


# --- ldmatrix ------------------------------------------------------------------------------------

def ldmatrix_kernel(tiles: int, transpose: bool, t: str) -> str:
    """Two warps load a 32x32 tile into shared memory, then ldmatrix: lane l of warp w gives, for matrix
    i = l / 8 < tiles, row r = l % 8 the address tile[(3 r + 5 i + w) % 32, 8 ((i + w) % 4)] (rows of a
    matrix need not be contiguous); lanes that give no address point far out of bounds."""
    tile = tile_type(32, 32, t)
    stores = "\n".join(f"""    %v{k} = vector.extract %res[{k}] : vector<2x{t}> from vector<{tiles}x2x{t}>
    %col{k} = arith.constant {2 * k} : index
    vector.store %v{k}, %out[%g, %t, %col{k}] : memref<2x64x{2 * tiles}x{t}>, vector<2x{t}>""" for k in range(tiles))
    return f"""
    %t = gpu.thread_id x
    %g = gpu.block_id x
{index_constants(0, 2, 3, 4, 5, 8, 16, 32)}
    %far = arith.constant 1000 : index
    %ntiles = arith.constant {tiles} : index
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %tile = memref.view %smem[%c0][] : {SMEM} to {tile}
    %trow = arith.divui %t, %c2 : index
    %half = arith.remui %t, %c2 : index
    %tcol = arith.muli %half, %c16 : index
    %x = vector.load %in[%g, %trow, %tcol] : memref<2x32x32x{t}>, vector<16x{t}>
    vector.store %x, %tile[%trow, %tcol] : {tile}, vector<16x{t}>
    gpu.barrier
    %lane = arith.remui %t, %c32 : index
    %w = arith.divui %t, %c32 : index
    %i = arith.divui %lane, %c8 : index
    %r = arith.remui %lane, %c8 : index
    %r3 = arith.muli %r, %c3 : index
    %i5 = arith.muli %i, %c5 : index
    %s1 = arith.addi %r3, %i5 : index
    %s2 = arith.addi %s1, %w : index
    %row_used = arith.remui %s2, %c32 : index
    %used = arith.cmpi ult, %i, %ntiles : index
    %row = arith.select %used, %row_used, %far : index
    %iw = arith.addi %i, %w : index
    %iw4 = arith.remui %iw, %c4 : index
    %col = arith.muli %iw4, %c8 : index
    %res = nvgpu.ldmatrix %tile[%row, %col] {{numTiles = {tiles} : i32, transpose = {str(transpose).lower()}}}
        : {tile} -> vector<{tiles}x2x{t}>
{stores}"""


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles", [1, 2, 4])
@pytest.mark.parametrize("transpose", [False, True])
def test_ldmatrix(dtype, tiles, transpose):
    rng = np.random.default_rng(tiles + 3 * transpose)
    values, stored = random_values(rng, (2, 32, 32), dtype)
    out = np.zeros((2, 64, 2 * tiles), stored.dtype)
    args = f"%in: memref<2x32x32x{dtype}>, %out: memref<2x64x{2 * tiles}x{dtype}>"
    run(ldmatrix_kernel(tiles, transpose, dtype), args, [stored, out], grid=(2, 1, 1), block=(64, 1, 1),
        wave_size=32, shared_bytes=2048)
    want = np.zeros((2, 64, 2 * tiles))
    for g in range(2):
        for thread in range(64):
            lane, w = thread % 32, thread // 32
            for k in range(tiles):
                for e in range(2):
                    row, col = ptx_ldmatrix(lane, e, transpose)
                    want[g, thread, 2 * k + e] = values[g, (3 * row + 5 * k + w) % 32, 8 * ((k + w) % 4) + col]
    np.testing.assert_array_equal(values_of(out, dtype), want)


def test_ldmatrix_row_addresses_must_be_aligned_and_in_bounds():
    kernel = ldmatrix_kernel(4, False, "f16")
    args = ("%in: memref<2x32x32xf16>, %out: memref<2x64x8xf16>",
            [np.zeros((2, 32, 32), np.float16), np.zeros((2, 64, 8), np.float16)])
    options = dict(grid=(2, 1, 1), block=(64, 1, 1), wave_size=32, shared_bytes=2048)
    misaligned = kernel.replace("%tile = memref.view %smem[%c0][]", "%tile = memref.view %smem[%c2][]")
    with pytest.raises(InterpreterError, match=r"nvgpu.ldmatrix .*: lane 0 .* gives the row address of element "
                                               r"\(0, 0\), which is not 16-byte aligned"):
        run(misaligned, *args, **dict(options, shared_bytes=2064))
    with pytest.raises(InterpreterError, match=r"nvgpu.ldmatrix .*: lane 16 .* accesses index \(1000, 16\) "
                                               r"\(a vector of 8 elements\), out of bounds"):
        run(kernel.replace("%ntiles = arith.constant 4", "%ntiles = arith.constant 2"), *args, **options)


def test_ldmatrix_and_mma_are_warp_collective():
    kernel = ldmatrix_kernel(1, False, "f16")
    args = ("%in: memref<2x32x32xf16>, %out: memref<2x64x2xf16>",
            [np.zeros((2, 32, 32), np.float16), np.zeros((2, 64, 2), np.float16)])
    divergent = kernel.replace("    %res = nvgpu.ldmatrix", "    %c20 = arith.constant 20 : index\n"
                               "    %some = arith.cmpi ult, %t, %c20 : index\n    scf.if %some {\n"
                               "    %res = nvgpu.ldmatrix") + "\n    }"
    with pytest.raises(InterpreterError, match=r"nvgpu.ldmatrix .*: lane 0 .* is in a warp that does not execute "
                                               r"it whole: all 32 lanes of a warp must execute it together"):
        run(divergent, *args, grid=(2, 1, 1), block=(64, 1, 1), wave_size=32, shared_bytes=2048)
    mma = """
    %a = arith.constant dense<1.0> : vector<4x2xf16>
    %b = arith.constant dense<1.0> : vector<2x2xf16>
    %c = arith.constant dense<0.0> : vector<2x2xf32>
    %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]}
        : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>"""
    with pytest.raises(InterpreterError, match=r"nvgpu.mma.sync .*: lane 32 .* is in a warp that does not "
                                               r"execute it whole"):
        run(mma, "%unused: index", [0], block=(48, 1, 1), wave_size=32)
    with pytest.raises(InterpreterError, match=r"nvgpu.mma.sync .*: needs warps of 32 lanes \(the interpreter "
                                               r"runs waves of 64\)"):
        run(mma, "%unused: index", [0], block=(64, 1, 1), wave_size=64)


def stmatrix_kernel(tiles: int, transpose: bool) -> str:
    """Each of two warps' lanes holds registers whose halves name (thread, register, element) and gives
    a row address in a 64 x 8 i16 tile, rows permuted by 37 (w, matrix, row); stmatrix writes the tile,
    then thread t copies row t out."""
    registers = "\n".join(f"""    %b{k} = arith.addi %base, %c{2 * k}_i32 : i32
    %hi{k} = arith.addi %b{k}, %c1_i32 : i32
    %sh{k} = arith.shli %hi{k}, %c16_i32 : i32
    %v{k} = arith.ori %b{k}, %sh{k} : i32""" for k in range(tiles))
    values = ", ".join(f"%v{k}" for k in range(tiles))
    layout = "col" if transpose else "row"
    return f"""
    %t = gpu.thread_id x
{index_constants(0, 8, 16, 32, 37, 64)}
{chr(10).join(f"    %c{v}_i32 = arith.constant {v} : i32" for v in sorted({1, 16, *range(0, 2 * tiles, 2)}))}
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %tile = memref.view %smem[%c0][] : {SMEM} to memref<64x8xi16, #gpu.address_space<workgroup>>
    %lane = arith.remui %t, %c32 : index
    %w = arith.divui %t, %c32 : index
    %i = arith.divui %lane, %c8 : index
    %r = arith.remui %lane, %c8 : index
    %w32 = arith.muli %w, %c32 : index
    %i8 = arith.muli %i, %c8 : index
    %wi = arith.addi %w32, %i8 : index
    %wir = arith.addi %wi, %r : index
    %scrambled = arith.muli %wir, %c37 : index
    %row = arith.remui %scrambled, %c64 : index
    %bytes = arith.muli %row, %c16 : index
    %offset = arith.addi %bytes, %shift : index
    %a64 = arith.index_cast %offset : index to i64
    %p = llvm.inttoptr %a64 : i64 to !llvm.ptr<3>
    %t8 = arith.muli %t, %c8 : index
    %base = arith.index_cast %t8 : index to i32
{registers}
    nvvm.stmatrix %p, {values} {{layout = #nvvm.mma_layout<{layout}>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>,
        eltType = #nvvm.ld_st_matrix_elt_type<b16>}} : !llvm.ptr<3>, {", ".join(["i32"] * tiles)}
    gpu.barrier
    %x = vector.load %tile[%t, %c0] : memref<64x8xi16, #gpu.address_space<workgroup>>, vector<8xi16>
    vector.store %x, %out[%t, %c0] : memref<64x8xi16>, vector<8xi16>"""


@pytest.mark.parametrize("tiles", [1, 2, 4])
@pytest.mark.parametrize("transpose", [False, True])
def test_stmatrix_writes_what_ldmatrix_would_read(tiles, transpose):
    """Section 9.7.14.5.16 "stmatrix": threads 8i .. 8i+7 give matrix i's row addresses, and each
    thread's register i is its fragment of matrix i in ldmatrix's layout (Figure 104; .trans: of the
    transposed matrix)."""
    out = np.full((64, 8), -1, np.int16)
    run(stmatrix_kernel(tiles, transpose), "%shift: index, %out: memref<64x8xi16>", [0, out], block=(64, 1, 1),
        wave_size=32, shared_bytes=1024)
    want = np.full((64, 8), -1)
    for thread in range(64):
        lane, w = thread % 32, thread // 32
        for k in range(tiles):
            for e in range(2):
                row, col = ptx_ldmatrix(lane, e, transpose)
                want[37 * (32 * w + 8 * k + row) % 64, col] = 8 * thread + 2 * k + e
    written = want[:, 0] >= 0
    assert written.sum() == 16 * tiles
    np.testing.assert_array_equal(out[written], want[written])


def test_stmatrix_row_addresses_must_be_aligned_and_in_bounds_and_warps_whole():
    args = "%shift: index, %out: memref<64x8xi16>"
    out = np.zeros((64, 8), np.int16)
    with pytest.raises(InterpreterError, match=r"nvvm.stmatrix .*: lane 0 .* gives the row address 2, not a "
                                               r"16-byte aligned row"):
        run(stmatrix_kernel(4, False), args, [2, out], block=(64, 1, 1), wave_size=32, shared_bytes=1040)
    with pytest.raises(InterpreterError, match=r"nvvm.stmatrix .*: lane 19 .* gives the row address 1024, not "
                                               r"a 16-byte aligned row inside the 1024 bytes"):
        run(stmatrix_kernel(4, False), args, [16, out], block=(64, 1, 1), wave_size=32, shared_bytes=1024)
    with pytest.raises(InterpreterError, match=r"nvvm.stmatrix .*: lane 32 .* is in a warp that does not "
                                               r"execute it whole"):
        run(stmatrix_kernel(4, False), args, [0, out], block=(48, 1, 1), wave_size=32, shared_bytes=1024)


# --- mma.sync ------------------------------------------------------------------------------------

def fragments(matrices, layout, registers):
    """[..., 32 lanes, 2 * registers] fragment elements of [..., rows, cols] matrices."""
    lanes = [[layout(lane, i) for i in range(2 * registers)] for lane in range(WARP)]
    rows, cols = np.array(lanes)[..., 0], np.array(lanes)[..., 1]
    return matrices[..., rows, cols]


def load_fragment(name, memref, registers, t):
    """Registers of a fragment loaded from %name[%g, %t, 2r] and assembled with vector.insert."""
    lines = [f"%{name}0 = arith.constant dense<0.0> : vector<{registers}x2x{t}>"]
    for r in range(registers):
        lines.append(f"%{name}c{r} = arith.constant {2 * r} : index")
        lines.append(f"%{name}v{r} = vector.load %{name}in[%g, %t, %{name}c{r}] : {memref}, vector<2x{t}>")
        lines.append(f"%{name}{r + 1} = vector.insert %{name}v{r}, %{name}{r} [{r}] : vector<2x{t}> into "
                     f"vector<{registers}x2x{t}>")
    return "\n    ".join(lines)


@pytest.mark.parametrize("dtype,acc", [("f16", "f32"), ("bf16", "f32"), ("f16", "f16")])
def test_mma_sync_matches_numpy(dtype, acc):
    """Two work-groups of two warps, each warp with its own A (16x16), B (16x8) and C (16x8), given in the
    PTX fragment layouts; D = A @ B + C must equal NumPy's float64 product rounded once to `acc`."""
    rng = np.random.default_rng(len(dtype + acc))
    a, a_stored = random_values(rng, (2, 2, 16, 16), dtype)
    b, b_stored = random_values(rng, (2, 2, 16, 8), dtype)
    acc_np = np.dtype(np.float32 if acc == "f32" else np.float16)
    c = rng.standard_normal((2, 2, 16, 8)).astype(acc_np).astype(np.float64)

    def per_thread(stored, layout, registers):  # [g, w, lane, e] -> [g, thread, e]
        return np.ascontiguousarray(fragments(stored, layout, registers).reshape(2, 64, 2 * registers))

    af, bf = per_thread(a_stored, ptx_mma_a, 4), per_thread(b_stored, ptx_mma_b, 2)
    cf = per_thread(c.astype(acc_np), ptx_mma_c, 2)
    out = np.zeros((2, 64, 4), acc_np)
    body = "\n    ".join([
        "%t = gpu.thread_id x", "%g = gpu.block_id x",
        load_fragment("a", f"memref<2x64x8x{dtype}>", 4, dtype),
        load_fragment("b", f"memref<2x64x4x{dtype}>", 2, dtype),
        load_fragment("c", f"memref<2x64x4x{acc}>", 2, acc),
        f"%d = nvgpu.mma.sync (%a4, %b2, %c2) {{mmaShape = [16, 8, 16]}} : (vector<4x2x{dtype}>, "
        f"vector<2x2x{dtype}>, vector<2x2x{acc}>) -> vector<2x2x{acc}>",
        f"%d0 = vector.extract %d[0] : vector<2x{acc}> from vector<2x2x{acc}>",
        f"%d1 = vector.extract %d[1] : vector<2x{acc}> from vector<2x2x{acc}>",
        "%z = arith.constant 0 : index", "%two = arith.constant 2 : index",
        f"vector.store %d0, %out[%g, %t, %z] : memref<2x64x4x{acc}>, vector<2x{acc}>",
        f"vector.store %d1, %out[%g, %t, %two] : memref<2x64x4x{acc}>, vector<2x{acc}>"])
    run("    " + body, f"%ain: memref<2x64x8x{dtype}>, %bin: memref<2x64x4x{dtype}>, "
        f"%cin: memref<2x64x4x{acc}>, %out: memref<2x64x4x{acc}>", [af, bf, cf, out], grid=(2, 1, 1),
        block=(64, 1, 1), wave_size=32)
    want = (np.matmul(a, b) + c).astype(acc_np)
    np.testing.assert_array_equal(out, per_thread(want, ptx_mma_c, 2))


def test_mma_sync_rejects_unsupported_types():
    body = """
    %a = arith.constant dense<1.0> : vector<4x2xbf16>
    %b = arith.constant dense<1.0> : vector<2x2xbf16>
    %c = arith.constant dense<0.0> : vector<2x2xf16>
    %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]}
        : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf16>) -> vector<2x2xf16>"""
    with pytest.raises(InterpreterError, match=r"nvgpu.mma.sync .*: accumulator vector<2x2xf16> is not supported "
                                               r"for bf16 operands"):
        run(body, "%unused: index", [0], block=(32, 1, 1), wave_size=32)


# --- the pipeline --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_cp_async_ldmatrix_mma_pipeline_computes_a_matmul(dtype):
    """The classic tile: A (16x16, row major) and B (16x8, K x N row major) copied by cp.async from global
    memory into shared memory (lanes 0-31: A, two 16-byte chunks per row; lanes 32-47: B; lanes 48-63
    zero-fill a scratch row with srcElements = 0), waited for and published with a barrier; then each
    warp loads A with ldmatrix.x4 (lane l: row l % 16, column 8 (l / 16)) and B with ldmatrix.x2.trans
    (lane l: row l % 16), multiplies with mma.sync and stores D by the C fragment layout of Figure 83
    (row l / 4 + 8 r, columns 2 (l % 4) + e). Both warps of both work-groups must produce A @ B exactly."""
    rng = np.random.default_rng(5)
    a, a_stored = random_values(rng, (2, 16, 16), dtype)
    b, b_stored = random_values(rng, (2, 16, 8), dtype)
    out = np.full((2, 2, 16, 8), np.nan, np.float32)
    t = dtype
    stage, ta, tb = tile_type(64, 8, t), tile_type(16, 16, t), tile_type(16, 8, t)
    token = "!nvgpu.device.async.token"
    body = f"""
    %t = gpu.thread_id x
    %g = gpu.block_id x
{index_constants(0, 2, 4, 8, 16, 32, 48, 512)}
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %stage = memref.view %smem[%c0][] : {SMEM} to {stage}
    %isa = arith.cmpi ult, %t, %c32 : index
    %tok = scf.if %isa -> ({token}) {{
      %arow = arith.divui %t, %c2 : index
      %ahalf = arith.remui %t, %c2 : index
      %acol = arith.muli %ahalf, %c8 : index
      %ta = nvgpu.device_async_copy %ag[%g, %arow, %acol], %stage[%t, %c0], 8 : memref<2x16x16x{t}> to {stage}
      scf.yield %ta : {token}
    }} else {{
      %isb = arith.cmpi ult, %t, %c48 : index
      %eight = arith.constant 8 : index
      %n = arith.select %isb, %eight, %c0 : index
      %brow0 = arith.subi %t, %c32 : index
      %brow = arith.remui %brow0, %c16 : index
      %tb = nvgpu.device_async_copy %bg[%g, %brow, %c0], %stage[%t, %c0], 8, %n : memref<2x16x8x{t}> to {stage}
      scf.yield %tb : {token}
    }}
    %grp = nvgpu.device_async_create_group %tok
    nvgpu.device_async_wait %grp {{numGroups = 0 : i32}}
    gpu.barrier
    %amat = memref.view %smem[%c0][] : {SMEM} to {ta}
    %bmat = memref.view %smem[%c512][] : {SMEM} to {tb}
    %lane = arith.remui %t, %c32 : index
    %w = arith.divui %t, %c32 : index
    %lrow = arith.remui %lane, %c16 : index
    %lhalf = arith.divui %lane, %c16 : index
    %lcol = arith.muli %lhalf, %c8 : index
    %fa = nvgpu.ldmatrix %amat[%lrow, %lcol] {{numTiles = 4 : i32, transpose = false}} : {ta} -> vector<4x2x{t}>
    %fb = nvgpu.ldmatrix %bmat[%lrow, %c0] {{numTiles = 2 : i32, transpose = true}} : {tb} -> vector<2x2x{t}>
    %zero = arith.constant dense<0.0> : vector<2x2xf32>
    %d = nvgpu.mma.sync (%fa, %fb, %zero) {{mmaShape = [16, 8, 16]}}
        : (vector<4x2x{t}>, vector<2x2x{t}>, vector<2x2xf32>) -> vector<2x2xf32>
    %group = arith.divui %lane, %c4 : index
    %tig = arith.remui %lane, %c4 : index
    %dcol = arith.muli %tig, %c2 : index
    %d0 = vector.extract %d[0] : vector<2xf32> from vector<2x2xf32>
    %d1 = vector.extract %d[1] : vector<2xf32> from vector<2x2xf32>
    %drow1 = arith.addi %group, %c8 : index
    vector.store %d0, %out[%g, %w, %group, %dcol] : memref<2x2x16x8xf32>, vector<2xf32>
    vector.store %d1, %out[%g, %w, %drow1, %dcol] : memref<2x2x16x8xf32>, vector<2xf32>"""
    run(body, f"%ag: memref<2x16x16x{t}>, %bg: memref<2x16x8x{t}>, %out: memref<2x2x16x8xf32>",
        [a_stored, b_stored, out], grid=(2, 1, 1), block=(64, 1, 1), wave_size=32, shared_bytes=1024)
    want = np.matmul(a, b).astype(np.float32)
    np.testing.assert_array_equal(out, np.repeat(want[:, None], 2, axis=1))
    with pytest.raises(InterpreterError, match=r"nvgpu.ldmatrix .*: data race on dynamic shared memory .* reads "
                                               r"element .*, which lane \d+ .* wrote since the work-group's last "
                                               r"gpu.barrier \(read after write\)"):
        run(body.replace("    gpu.barrier\n", ""), f"%ag: memref<2x16x16x{t}>, %bg: memref<2x16x8x{t}>, "
            "%out: memref<2x2x16x8xf32>", [a_stored, b_stored, out], grid=(2, 1, 1), block=(64, 1, 1),
            wave_size=32, shared_bytes=1024)


# --- cp.async data -------------------------------------------------------------------------------

COPY = """
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %col = arith.muli %t, %c4 : index
    %scol = arith.addi %col, %c{shift} : index
    %n = arith.remui %t, %c5 : index
    %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %tile = memref.view %smem[%c0][] : memref<?xi8, #gpu.address_space<workgroup>>
        to memref<256xf32, #gpu.address_space<workgroup>>
    %tok = nvgpu.device_async_copy %src[%scol], %tile[%col], 4{count}
        : memref<?xf32> to memref<256xf32, #gpu.address_space<workgroup>>
    %grp = nvgpu.device_async_create_group %tok
    nvgpu.device_async_wait %grp
    %v = vector.load %tile[%col] : memref<256xf32, #gpu.address_space<workgroup>>, vector<4xf32>
    vector.store %v, %out[%col] : memref<256xf32>, vector<4xf32>"""


def copy(src, shift=0, count=", %n"):
    out = np.full(256, np.nan, np.float32)
    run(COPY.format(shift=shift, count=count), "%src: memref<?xf32>, %out: memref<256xf32>", [src, out],
        block=(64, 1, 1), wave_size=32, shared_bytes=1024)
    return out.reshape(64, 4)


def test_cp_async_zero_fills_past_src_elements_and_reads_only_those():
    """Lane t reads t % 5 of its 4 elements (0: none); the last lane's would-be 4th element is past the end
    of the source, which is fine since it is not read."""
    src = np.arange(255, dtype=np.float32) + 1
    out = copy(src)
    n = np.arange(64) % 5
    want = np.where(np.arange(4) < n[:, None], np.pad(src, (0, 1)).reshape(64, 4), 0)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(copy(np.arange(256, dtype=np.float32), count=""),
                                  np.arange(256, dtype=np.float32).reshape(64, 4))


def test_cp_async_checks_bounds_alignment_and_src_elements():
    with pytest.raises(InterpreterError, match=r"nvgpu.device_async_copy .*: lane 63 .* accesses index \(252,\) "
                                               r"\(a vector of 4 elements\), out of bounds for a memref of shape "
                                               r"\(255,\)"):
        copy(np.zeros(255, np.float32), count="")
    with pytest.raises(InterpreterError, match=r"nvgpu.device_async_copy .*: lane \d+ .* copies 16 bytes to or "
                                               r"from an address that is not 16-byte aligned"):
        copy(np.zeros(512, np.float32), shift=5, count="")
    with pytest.raises(InterpreterError, match=r"nvgpu.device_async_copy .*: lane 5 .* gives srcElements 5, "
                                               r"outside 0..4"):
        out = np.zeros(256, np.float32)
        run(COPY.format(shift=0, count=", %n").replace("%n = arith.remui %t, %c5", "%n = arith.addi %t, %c0"),
            "%src: memref<?xf32>, %out: memref<256xf32>",
            [np.zeros(512, np.float32), out], block=(64, 1, 1), wave_size=32, shared_bytes=1024)
    small = COPY.format(shift=0, count="").replace("memref<256xf32, #gpu", "memref<128xf32, #gpu")
    with pytest.raises(InterpreterError, match=r"nvgpu.device_async_copy .*: lane 32 .* accesses index \(128,\) "
                                               r"\(a vector of 4 elements\), out of bounds for a memref of shape "
                                               r"\(128,\)"):
        run(small, "%src: memref<?xf32>, %out: memref<256xf32>",
            [np.zeros(256, np.float32), np.zeros(256, np.float32)], block=(64, 1, 1), wave_size=32,
            shared_bytes=1024)


def test_warps_may_skip_collective_ops_whole():
    """A branch taken by whole warps is fine: only warp 1 of each work-group loads, and warp 0's row
    addresses (which it does not use) are far out of bounds."""
    kernel = ldmatrix_kernel(2, True, "f16")
    kernel = kernel.replace("    %res = nvgpu.ldmatrix", "    %c1 = arith.constant 1 : index\n"
                            "    %second = arith.cmpi eq, %w, %c1 : index\n    %wrow = arith.select %second, %row, "
                            "%far : index\n    scf.if %second {\n    %res = nvgpu.ldmatrix") + "\n    }"
    kernel = kernel.replace("nvgpu.ldmatrix %tile[%row, %col]", "nvgpu.ldmatrix %tile[%wrow, %col]")
    values, stored = random_values(np.random.default_rng(9), (2, 32, 32), "f16")
    out = np.zeros((2, 64, 4), np.float16)
    run(kernel, "%in: memref<2x32x32xf16>, %out: memref<2x64x4xf16>", [stored, out], grid=(2, 1, 1),
        block=(64, 1, 1), wave_size=32, shared_bytes=2048)
    assert not out[:, :32].any()
    for g in range(2):
        for lane in range(32):
            for k in range(2):
                for e in range(2):
                    row, col = ptx_ldmatrix(lane, e, True)
                    assert out[g, 32 + lane, 2 * k + e] == stored[g, (3 * row + 5 * k + 1) % 32,
                                                                   8 * ((k + 1) % 4) + col]
