"""Cross-lane ops against references written from the ISA / MLIR docs: gpu.shuffle, amdgpu.dpp,
rocdl.readlane / readfirstlane, fmha.wave_reduce and the DPP full-wave reduction the AMD lowering emits."""
import numpy as np
import pytest

from fmha_mlir.runtime.interp import InterpreterError
from interp_support import GLOBAL_INDEX, run

LANE_KERNEL_ARGS = "%src: memref<?xf32>, %old: memref<?xf32>, %out: memref<?xf32>"
LOAD_LANE = GLOBAL_INDEX + """
    %x = memref.load %src[%i] : memref<?xf32>
    %o = memref.load %old[%i] : memref<?xf32>"""


def lane_data(n):
    rng = np.random.default_rng(n)
    return rng.permutation(n).astype(np.float32) + 1, -rng.permutation(n).astype(np.float32) - 1


# --- gpu.shuffle -----------------------------------------------------------------------------------

def shuffle_reference(x, mode, offset, width, wave):
    out, valid = x.copy(), np.zeros(x.size, bool)
    for lane in range(x.size):
        li = lane % wave
        seg = li // width * width
        src = {"xor": li ^ offset, "down": li + offset, "up": li - offset, "idx": seg + offset}[mode]
        if seg <= src < seg + width:
            out[lane], valid[lane] = x[lane - li + src], True
    return out, valid


@pytest.mark.parametrize("wave", [64, 32])
@pytest.mark.parametrize("mode,offset,width", [("xor", 1, None), ("xor", 16, None), ("xor", 5, 8),
                                               ("down", 3, None), ("down", 1, 16), ("up", 2, None),
                                               ("idx", 7, None), ("idx", 3, 4)])
def test_shuffle(wave, mode, offset, width):
    width = width or wave
    x, _ = lane_data(128)
    out = np.zeros(128, np.float32)
    valid = np.zeros(128, np.int32)
    body = LOAD_LANE + f"""
    %off = arith.constant {offset} : i32
    %w = arith.constant {width} : i32
    %s, %ok = gpu.shuffle {mode} %x, %off, %w : f32
    memref.store %s, %out[%i] : memref<?xf32>
    %oki = arith.extui %ok : i1 to i32
    memref.store %oki, %valid[%i] : memref<?xi32>"""
    run(body, LANE_KERNEL_ARGS + ", %valid: memref<?xi32>", [x, x, out, valid], grid=(2, 1, 1),
        wave_size=wave)
    want, want_valid = shuffle_reference(x, mode, offset, width, wave)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(valid.astype(bool), want_valid)


def test_shuffle_may_not_read_a_lane_that_does_not_execute():
    x, _ = lane_data(64)
    out = np.zeros(64, np.float32)
    body = LOAD_LANE + """
    %c{n} = arith.constant {n} : index
    %low = arith.cmpi ult, %t, %c{n} : index
    scf.if %low {{
      %off = arith.constant 8 : i32
      %w = arith.constant 16 : i32
      %s, %ok = gpu.shuffle xor %x, %off, %w : f32
      memref.store %s, %out[%i] : memref<?xf32>
    }}"""
    run(body.format(n=32), LANE_KERNEL_ARGS, [x, x, out])  # whole segments of 16 execute
    np.testing.assert_array_equal(out[:32], x[:32].reshape(4, 8)[[1, 0, 3, 2]].reshape(-1))
    with pytest.raises(InterpreterError, match=r"thread \(20, 0, 0\)\) reads a lane that does not execute"):
        run(body.format(n=28), LANE_KERNEL_ARGS, [x, x, out])


# --- amdgpu.dpp ------------------------------------------------------------------------------------

def dpp_reference(kind, arg, src, old, row_mask=0xF, bank_mask=0xF, bound_ctrl=False, active=None):
    """CDNA DPP, one lane at a time: rows of 16 lanes, banks of 4 lanes inside a row. Disabled rows /
    banks keep `old`; an out-of-range or inactive source gives 0 with bound_ctrl, else `old`."""
    out = old.copy()
    for lane in range(64):
        row, r = divmod(lane, 16)
        if not (row_mask >> row) & 1 or not (bank_mask >> (r // 4)) & 1:
            continue
        source = {
            "quad_perm": lambda: lane - lane % 4 + arg[lane % 4],
            "row_shl": lambda: lane + arg if r + arg < 16 else None,
            "row_shr": lambda: lane - arg if r - arg >= 0 else None,
            "row_ror": lambda: row * 16 + (r - arg) % 16,
            "row_mirror": lambda: row * 16 + 15 - r,
            "row_half_mirror": lambda: lane - lane % 8 + 7 - lane % 8,
            "row_bcast_15": lambda: row * 16 - 1 if row > 0 else None,
            "row_bcast_31": lambda: 31 if lane >= 32 else None,
        }[kind]()
        if source is not None and active is not None and not active[source]:
            source = None
        if source is not None:
            out[lane] = src[source]
        elif bound_ctrl:
            out[lane] = 0
    return out


DPP_CASES = [
    ("quad_perm", [1, 0, 3, 2], "quad_perm([1 : i32, 0 : i32, 3 : i32, 2 : i32])"),
    ("quad_perm", [3, 3, 0, 1], "quad_perm([3 : i32, 3 : i32, 0 : i32, 1 : i32])"),
    ("row_shl", 1, "row_shl(1 : i32)"),
    ("row_shl", 15, "row_shl(15 : i32)"),
    ("row_shr", 3, "row_shr(3 : i32)"),
    ("row_ror", 5, "row_ror(5 : i32)"),
    ("row_mirror", None, "row_mirror"),
    ("row_half_mirror", None, "row_half_mirror"),
    ("row_bcast_15", None, "row_bcast_15"),
    ("row_bcast_31", None, "row_bcast_31"),
]


@pytest.mark.parametrize("kind,arg,syntax", DPP_CASES)
@pytest.mark.parametrize("row_mask,bank_mask,bound_ctrl", [(0xF, 0xF, False), (0xF, 0xF, True),
                                                           (0xA, 0xF, False), (0xF, 0x5, True)])
def test_dpp(kind, arg, syntax, row_mask, bank_mask, bound_ctrl):
    src, old = lane_data(64)
    out = np.zeros(64, np.float32)
    body = LOAD_LANE + f"""
    %d = amdgpu.dpp %o %x {syntax} {{row_mask = {row_mask} : i32, bank_mask = {bank_mask} : i32,
                                     bound_ctrl = {str(bound_ctrl).lower()}}} : f32
    memref.store %d, %out[%i] : memref<?xf32>"""
    run(body, LANE_KERNEL_ARGS, [src, old, out])
    np.testing.assert_array_equal(out, dpp_reference(kind, arg, src, old, row_mask, bank_mask, bound_ctrl))


def test_dpp_known_lanes():
    """A few lanes spelled out: row_shr:1 with bound_ctrl zeroes the first lane of each row."""
    src = np.arange(64, dtype=np.float32) + 100
    out = np.zeros(64, np.float32)
    body = LOAD_LANE + """
    %d = amdgpu.dpp %o %x row_shr(1 : i32) {bound_ctrl = true} : f32
    memref.store %d, %out[%i] : memref<?xf32>"""
    run(body, LANE_KERNEL_ARGS, [src, np.full(64, -1, np.float32), out])
    assert out[0] == 0 and out[16] == 0 and out[1] == 100 and out[17] == 116 and out[63] == 162


def test_dpp_treats_lanes_that_do_not_execute_as_invalid():
    src, old = lane_data(64)
    out = np.full(64, 7, np.float32)
    body = LOAD_LANE + """
    %c2 = arith.constant 2 : index
    %c0 = arith.constant 0 : index
    %r = arith.remui %t, %c2 : index
    %even = arith.cmpi eq, %r, %c0 : index
    %c40 = arith.constant 40 : index
    %low = arith.cmpi ult, %t, %c40 : index
    %run = arith.ori %even, %low : i1
    scf.if %run {
      %d = amdgpu.dpp %o %x row_shl(1 : i32) : f32
      memref.store %d, %out[%i] : memref<?xf32>
    }"""
    run(body, LANE_KERNEL_ARGS, [src, old, out])
    active = (np.arange(64) % 2 == 0) | (np.arange(64) < 40)
    want = np.where(active, dpp_reference("row_shl", 1, src, old, active=active), 7)
    np.testing.assert_array_equal(out, want)


def test_dpp_wave_reduction_sequence_leaves_the_sum_in_lane_63():
    """The DPP full-wave reduction (passes/fmha_to_rocdl.py): quad_perm x2, row_half_mirror, row_mirror,
    row_bcast_15 (rows 1, 3), row_bcast_31 (rows 2, 3), each added to the running value; then readlane 63."""
    src = np.arange(128, dtype=np.float32) * 0.5 + 1
    out = np.zeros(128, np.float32)
    lane63 = np.zeros(128, np.float32)
    body = LOAD_LANE + """
    %zero = arith.constant 0.0 : f32
    %d1 = amdgpu.dpp %zero %x quad_perm([1 : i32, 0 : i32, 3 : i32, 2 : i32]) : f32
    %s1 = arith.addf %x, %d1 : f32
    %d2 = amdgpu.dpp %zero %s1 quad_perm([2 : i32, 3 : i32, 0 : i32, 1 : i32]) : f32
    %s2 = arith.addf %s1, %d2 : f32
    %d3 = amdgpu.dpp %zero %s2 row_half_mirror : f32
    %s3 = arith.addf %s2, %d3 : f32
    %d4 = amdgpu.dpp %zero %s3 row_mirror : f32
    %s4 = arith.addf %s3, %d4 : f32
    %d5 = amdgpu.dpp %zero %s4 row_bcast_15 {row_mask = 0xa : i32} : f32
    %s5 = arith.addf %s4, %d5 : f32
    %d6 = amdgpu.dpp %zero %s5 row_bcast_31 {row_mask = 0xc : i32} : f32
    %s6 = arith.addf %s5, %d6 : f32
    %c63 = arith.constant 63 : i32
    %r = rocdl.readlane %s6, %c63 : (f32, i32) -> f32
    memref.store %s6, %out[%i] : memref<?xf32>
    memref.store %r, %lane63[%i] : memref<?xf32>"""
    run(body, LANE_KERNEL_ARGS + ", %lane63: memref<?xf32>", [src, src, out, lane63], grid=(2, 1, 1))
    sums = src.reshape(2, 64).sum(axis=1)
    np.testing.assert_array_equal(out.reshape(2, 64)[:, 63], sums)
    np.testing.assert_array_equal(lane63.reshape(2, 64), np.repeat(sums[:, None], 64, axis=1))
    assert not np.array_equal(out.reshape(2, 64)[:, 0], sums)  # only lane 63 is guaranteed the sum


# --- readfirstlane, fmha.wave_reduce ---------------------------------------------------------------

def test_readfirstlane_takes_the_first_executing_lane():
    src, _ = lane_data(64)
    out = np.zeros(64, np.float32)
    body = LOAD_LANE + """
    %c5 = arith.constant 5 : index
    %late = arith.cmpi uge, %t, %c5 : index
    scf.if %late {
      %f = rocdl.readfirstlane %x : f32
      memref.store %f, %out[%i] : memref<?xf32>
    }"""
    run(body, LANE_KERNEL_ARGS, [src, src, out])
    np.testing.assert_array_equal(out, np.where(np.arange(64) >= 5, src[5], 0))


@pytest.mark.parametrize("wave,width", [(64, 64), (64, 16), (32, 32)])
def test_wave_reduce(wave, width):
    src, _ = lane_data(128)
    out = np.zeros(128, np.float32)
    body = LOAD_LANE + f"""
    %r = "fmha.wave_reduce"(%x) {{kind = "add", width = {width} : i32}} : (f32) -> f32
    memref.store %r, %out[%i] : memref<?xf32>"""
    run(body, LANE_KERNEL_ARGS, [src, src, out], grid=(2, 1, 1), block=(64, 1, 1), wave_size=wave)
    np.testing.assert_array_equal(out, np.repeat(src.reshape(-1, width).sum(axis=1), width))


def test_wave_reduce_over_whole_executing_groups_only():
    """A group of `width` lanes reduces only when all of it exists and executes: the lowerings read a
    missing or inactive lane as 0 (DPP) or as the reader's own value (shuffles), so no sum is defined."""
    reduce16 = """
    %r = "fmha.wave_reduce"(%x) {kind = "add", width = 16 : i32} : (f32) -> f32
    memref.store %r, %out[%i] : memref<?xf32>"""
    src, _ = lane_data(64)
    out = np.zeros(64, np.float32)
    in_whole_groups = LOAD_LANE + """
    %c32 = arith.constant 32 : index
    %low = arith.cmpi ult, %t, %c32 : index
    scf.if %low {""" + reduce16 + """
    }"""
    run(in_whole_groups, LANE_KERNEL_ARGS, [src, src, out])
    np.testing.assert_array_equal(out[:32], np.repeat(src[:32].reshape(2, 16).sum(axis=1), 16))
    divergent = in_whole_groups.replace("%c32 = arith.constant 32", "%c32 = arith.constant 40")
    with pytest.raises(InterpreterError, match=r"thread \(32, 0, 0\).* group of 16 lanes that do not all"):
        run(divergent, LANE_KERNEL_ARGS, [src, src, out])
    with pytest.raises(InterpreterError, match=r"thread \(32, 0, 0\).* group of 16 lanes that do not all"):
        run(LOAD_LANE + reduce16, LANE_KERNEL_ARGS, [src, src, out], block=(40, 1, 1))
