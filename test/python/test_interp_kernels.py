"""Small kernels run by the interpreter, compared with NumPy: memory, control flow, types, errors."""
import numpy as np
import pytest

from fmha_mlir.dtypes import bf16_bits, bf16_value
from fmha_mlir.runtime.interp import Interpreter, InterpreterError

from interp_support import generic, kernel_module, run

STRIDED = "memref<?x?xf32, strided<[?, 1]>>"


def test_vector_add_with_strides():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    b_storage = rng.standard_normal((6, 64)).astype(np.float32)
    b = b_storage[::2]                       # row stride 128 elements
    c_storage = np.zeros((3, 96), np.float32)
    c = c_storage[:, 16:80]                  # row stride 96, offset 16
    body = f"""
    %t = gpu.thread_id x
    %g = gpu.block_id x
    %x = memref.load %a[%g, %t] : {STRIDED}
    %y = memref.load %b[%g, %t] : {STRIDED}
    %s = arith.addf %x, %y : f32
    memref.store %s, %c[%g, %t] : {STRIDED}"""
    run(body, f"%a: {STRIDED}, %b: {STRIDED}, %c: {STRIDED}", [a, b, c], grid=(3, 1, 1))
    np.testing.assert_array_equal(c, a + b)
    assert not c_storage[:, :16].any() and not c_storage[:, 80:].any()


def test_for_with_iter_args_uniform_and_per_lane_bounds():
    # uniform loop: sum of 0..n-1; per-lane loop: lane t sums 0..t-1, then keeps its iteration count
    out = np.zeros((2, 64), np.int32)
    body = """
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %zero = arith.constant 0 : i32
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (i32) {
      %ii = arith.index_cast %i : index to i32
      %s = arith.addi %acc, %ii : i32
      scf.yield %s : i32
    }
    %p, %cnt = scf.for %i = %c0 to %t step %c1 iter_args(%acc = %zero, %k = %zero) -> (i32, i32) {
      %ii = arith.index_cast %i : index to i32
      %s = arith.addi %acc, %ii : i32
      %one = arith.constant 1 : i32
      %k1 = arith.addi %k, %one : i32
      scf.yield %s, %k1 : i32, i32
    }
    %sum = arith.addi %r, %p : i32
    memref.store %sum, %out[%c0, %t] : memref<2x64xi32>
    memref.store %cnt, %out[%c1, %t] : memref<2x64xi32>"""
    run(body, "%out: memref<2x64xi32>, %n: index", [out, 10])
    t = np.arange(64)
    np.testing.assert_array_equal(out[0], 45 + t * (t - 1) // 2)
    np.testing.assert_array_equal(out[1], t)


def test_if_divergence_merges_results_and_masks_stores():
    out = np.full(64, -1.0, np.float32)
    flags = np.zeros(64, np.int32)
    body = """
    %t = gpu.thread_id x
    %c3 = arith.constant 3 : index
    %c0 = arith.constant 0 : index
    %rem = arith.remui %t, %c3 : index
    %is0 = arith.cmpi eq, %rem, %c0 : index
    %f = arith.index_cast %t : index to i32
    %x = arith.sitofp %f : i32 to f32
    %y = scf.if %is0 -> f32 {
      %one = arith.constant 1 : i32
      memref.store %one, %flags[%t] : memref<64xi32>
      %n = arith.negf %x : f32
      scf.yield %n : f32
    } else {
      %two = arith.constant 2.0 : f32
      %m = arith.mulf %x, %two : f32
      scf.yield %m : f32
    }
    memref.store %y, %out[%t] : memref<64xf32>"""
    run(body, "%out: memref<64xf32>, %flags: memref<64xi32>", [out, flags])
    t = np.arange(64)
    np.testing.assert_array_equal(out, np.where(t % 3 == 0, -t, 2 * t).astype(np.float32))
    np.testing.assert_array_equal(flags, (t % 3 == 0).astype(np.int32))


def test_while_with_per_lane_trip_counts():
    out = np.zeros(64, np.int64)
    body = """
    %t = gpu.thread_id x
    %c1 = arith.constant 1 : index
    %c7 = arith.constant 7 : index
    %lim = arith.remui %t, %c7 : index
    %r:2 = scf.while (%i = %c1, %steps = %t) : (index, index) -> (index, index) {
      %go = arith.cmpi ule, %i, %lim : index
      scf.condition(%go) %i, %steps : index, index
    } do {
    ^bb0(%j: index, %s: index):
      %j2 = arith.addi %j, %j : index
      %s1 = arith.addi %s, %c1 : index
      scf.yield %j2, %s1 : index, index
    }
    %v = arith.addi %r#0, %r#1 : index
    memref.store %v, %out[%t] : memref<64xindex>"""
    run(body, "%out: memref<64xindex>", [out])
    expected = []
    for t in range(64):
        i, steps = 1, t
        while i <= t % 7:
            i, steps = 2 * i, steps + 1
        expected.append(i + steps)
    np.testing.assert_array_equal(out, expected)


def test_bf16_and_f16_loads_stores_and_rounding():
    values = np.array([1.0, 1.00390625, 1.01171875, -3.5, 300.0, 1e-8] * 11, np.float32)[:64]
    src_bf16 = bf16_bits(values)
    out_bf16 = np.zeros(64, np.uint16)
    src_f32 = values + np.float32(2.0 ** -9)  # between bf16 neighbours: the truncf must round
    out_trunc = np.zeros(64, np.uint16)
    out_f16 = np.zeros(64, np.float16)
    body = """
    %t = gpu.thread_id x
    %b = memref.load %in_bf16[%t] : memref<64xbf16>
    %w = arith.extf %b : bf16 to f32
    %two = arith.constant 2.0 : f32
    %d = arith.mulf %w, %two : f32
    %db = arith.truncf %d : f32 to bf16
    memref.store %db, %out_bf16[%t] : memref<64xbf16>
    %x = memref.load %in_f32[%t] : memref<64xf32>
    %xb = arith.truncf %x : f32 to bf16
    memref.store %xb, %out_trunc[%t] : memref<64xbf16>
    %h = arith.truncf %x : f32 to f16
    %h2 = arith.addf %h, %h : f16
    memref.store %h2, %out_f16[%t] : memref<64xf16>"""
    run(body, "%in_bf16: memref<64xbf16>, %out_bf16: memref<64xbf16>, %in_f32: memref<64xf32>, "
              "%out_trunc: memref<64xbf16>, %out_f16: memref<64xf16>",
        [src_bf16, out_bf16, src_f32, out_trunc, out_f16])
    np.testing.assert_array_equal(out_bf16, bf16_bits(bf16_value(src_bf16) * 2))
    np.testing.assert_array_equal(out_trunc, bf16_bits(src_f32))
    np.testing.assert_array_equal(out_f16, src_f32.astype(np.float16) + src_f32.astype(np.float16))


def test_vector_ops():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 4)).astype(np.float32)
    out = np.zeros((64, 4), np.float32)
    sums = np.zeros(64, np.float32)
    body = """
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %v = vector.load %a[%t, %c0] : memref<64x4xf32>, vector<4xf32>
    %e2 = vector.extract %v[2] : f32 from vector<4xf32>
    %b = vector.broadcast %e2 : f32 to vector<4xf32>
    %f = vector.fma %v, %v, %b : vector<4xf32>
    %e0 = vector.extract %f[0] : f32 from vector<4xf32>
    %ins = vector.insert %e0, %f[3] : f32 into vector<4xf32>
    %c1 = arith.constant 1 : index
    %dyn = vector.extract %v[%c1] : f32 from vector<4xf32>
    %pair = vector.from_elements %dyn, %e2 : vector<2xf32>
    %s = vector.reduction <add>, %ins : vector<4xf32> into f32
    %p = vector.reduction <add>, %pair, %s : vector<2xf32> into f32
    vector.store %ins, %out[%t, %c0] : memref<64x4xf32>, vector<4xf32>
    memref.store %p, %sums[%t] : memref<64xf32>"""
    run(body, "%a: memref<64x4xf32>, %out: memref<64x4xf32>, %sums: memref<64xf32>", [a, out, sums])
    f = (a.astype(np.float64) * a + a[:, 2:3]).astype(np.float32)
    f[:, 3] = f[:, 0]
    np.testing.assert_array_equal(out, f)
    s = ((f[:, 0] + f[:, 1]) + f[:, 2]) + f[:, 3]
    np.testing.assert_array_equal(sums, (s + a[:, 1]) + a[:, 2])


def test_integer_semantics():
    a = np.array([7, -7, 7, -7, 0, -2147483648, 5, -1] * 8, np.int32)
    b = np.array([2, 2, -2, -2, 3, -1, 5, 3] * 8, np.int32)
    out = np.zeros((6, 64), np.int32)
    ops = ["arith.divsi", "arith.remsi", "arith.floordivsi", "arith.ceildivsi", "arith.divui", "arith.shrui"]
    lines = []
    for row, name in enumerate(ops):
        lines.append(f"%r{row} = {name} %x, %y : i32\n    %c{row} = arith.constant {row} : index\n"
                     f"    memref.store %r{row}, %out[%c{row}, %t] : memref<6x64xi32>")
    body = """
    %t = gpu.thread_id x
    %x = memref.load %a[%t] : memref<64xi32>
    %y0 = memref.load %b[%t] : memref<64xi32>
    %false = arith.constant false
    %never = arith.constant 0 : i32
    %y = arith.select %false, %never, %y0 : i32
    """ + "\n    ".join(lines)
    run(body, "%a: memref<64xi32>, %b: memref<64xi32>, %out: memref<6x64xi32>", [a, b, out])
    ia, ib = a.astype(np.int64), b.astype(np.int64)
    trunc = np.array([int(x / y) if y else 0 for x, y in zip(ia, ib)])
    wrap = lambda v: np.asarray(v).astype(np.int64).astype(np.int32)  # noqa: E731
    np.testing.assert_array_equal(out[0], wrap(trunc))
    np.testing.assert_array_equal(out[1], wrap(ia - ib * trunc))
    np.testing.assert_array_equal(out[2], wrap(ia // ib))
    np.testing.assert_array_equal(out[3], wrap(-(-ia // ib)))
    ua, ub = a.view(np.uint32).astype(np.int64), b.view(np.uint32).astype(np.int64)
    np.testing.assert_array_equal(out[4], wrap(ua // ub))
    defined = ub < 32  # a shift by >= 32 bits is poison
    np.testing.assert_array_equal(out[5][defined], wrap(ua[defined] >> ub[defined]))


def test_workgroup_memory_barrier_and_private_alloca():
    data = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    body = """
    %t = gpu.thread_id x
    %g = gpu.block_id x
    %c64 = arith.constant 64 : index
    %c63 = arith.constant 63 : index
    %c0 = arith.constant 0 : index
    %base = arith.muli %g, %c64 : index
    %i = arith.addi %base, %t : index
    %x = memref.load %in[%i] : memref<128xf32>
    %p = memref.alloca() : memref<1xf32>
    memref.store %x, %p[%c0] : memref<1xf32>
    memref.store %x, %wg[%t] : memref<64xf32, 3>
    gpu.barrier
    %r = arith.subi %c63, %t : index
    %y = memref.load %wg[%r] : memref<64xf32, 3>
    %mine = memref.load %p[%c0] : memref<1xf32>
    %s = arith.addf %y, %mine : f32
    memref.store %s, %out[%i] : memref<128xf32>"""
    run(body, "%in: memref<128xf32>, %out: memref<128xf32>", [data, out], grid=(2, 1, 1),
        workgroup="%wg: memref<64xf32, 3>")
    expected = data.reshape(2, 64)[:, ::-1] + data.reshape(2, 64)
    np.testing.assert_array_equal(out, expected.reshape(-1))


def test_divergent_barrier_is_an_error():
    body = """
    %t = gpu.thread_id x
    %c32 = arith.constant 32 : index
    %low = arith.cmpi ult, %t, %c32 : index
    scf.if %low {
      gpu.barrier
    }"""
    with pytest.raises(InterpreterError, match=r"gpu.barrier .*divergent barrier.*lane 32"):
        run(body, "%unused: index", [0])


def test_out_of_bounds_errors_name_op_lane_index_and_shape():
    a = np.zeros((2, 8), np.float32)
    load = """
    %t = gpu.thread_id x
    %c1 = arith.constant 1 : index
    %x = memref.load %a[%c1, %t] : memref<2x8xf32>"""
    with pytest.raises(InterpreterError, match=r"memref.load \(line \d+ .*\): lane 8 \(block \(0, 0, 0\), "
                                               r"thread \(8, 0, 0\)\) accesses index \(1, 8\), out of bounds "
                                               r"for a memref of shape \(2, 8\)"):
        run(load, "%a: memref<2x8xf32>", [a])
    store_vec = """
    %t = gpu.thread_id x
    %c6 = arith.constant 6 : index
    %v = arith.constant dense<1.0> : vector<4xf32>
    vector.store %v, %a[%t, %c6] : memref<2x8xf32>, vector<4xf32>"""
    with pytest.raises(InterpreterError, match=r"vector.store .*lane 0 .*index \(0, 6\) \(a vector of 4 "
                                               r"elements\)"):
        run(store_vec, "%a: memref<2x8xf32>", [a], block=(2, 1, 1))
    assert not a.any()


def test_out_of_bounds_in_lanes_that_do_not_execute_is_fine():
    a = np.arange(8, dtype=np.float32)
    out = np.zeros(64, np.float32)
    body = """
    %t = gpu.thread_id x
    %c8 = arith.constant 8 : index
    %in = arith.cmpi ult, %t, %c8 : index
    scf.if %in {
      %x = memref.load %a[%t] : memref<8xf32>
      memref.store %x, %out[%t] : memref<64xf32>
    }"""
    run(body, "%a: memref<8xf32>, %out: memref<64xf32>", [a, out])
    np.testing.assert_array_equal(out[:8], a)
    assert not out[8:].any()


def test_unknown_op_is_reported_with_its_location():
    text = generic(kernel_module("""
    %c0 = arith.constant 0 : index
    %x = "mystery.op"(%c0) : (index) -> index""", "%unused: index"), debug_info=True)
    interp = Interpreter(text, 64)
    with pytest.raises(InterpreterError, match=r"mystery.op \(line \d+ of the interpreter IR, \"-\":\d+:\d+\): "
                                               r"the CPU interpreter cannot run this op"):
        interp.run_kernel("k", [0], (1, 1, 1), (64, 1, 1))


def test_argument_checks():
    interp = Interpreter(generic(kernel_module("", "%a: memref<8xbf16>, %n: index")), 64)
    with pytest.raises(InterpreterError, match=r"argument 0: array dtype float32 .*uint16 bit patterns"):
        interp.run_kernel("k", [np.zeros(8, np.float32), 1], (1, 1, 1), (64, 1, 1))
    with pytest.raises(InterpreterError, match=r"takes 2 arguments, got 1"):
        interp.run_kernel("k", [np.zeros(8, np.uint16)], (1, 1, 1), (64, 1, 1))
    with pytest.raises(InterpreterError, match=r"no kernel named 'nope'; the module has: k"):
        interp.run_kernel("nope", [], (1, 1, 1), (64, 1, 1))
    with pytest.raises(InterpreterError, match=r"dimension 0 has size 9"):
        interp.run_kernel("k", [np.zeros(9, np.uint16), 1], (1, 1, 1), (64, 1, 1))


def test_known_block_size_is_enforced():
    text = generic("""
    gpu.module @m {
      gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} { gpu.return }
    }""")
    with pytest.raises(InterpreterError, match=r"compiled for block size \(64, 1, 1\).*\(32, 1, 1\)"):
        Interpreter(text, 64).run_kernel("k", [], (1, 1, 1), (32, 1, 1))


def test_large_grids_run_in_chunks():
    out = np.zeros((300, 64), np.int32)
    body = """
    %t = gpu.thread_id x
    %g = gpu.block_id x
    %gi = arith.index_cast %g : index to i32
    memref.store %gi, %out[%g, %t] : memref<300x64xi32>"""
    run(body, "%out: memref<300x64xi32>", [out], grid=(300, 1, 1), max_lanes=1000)
    np.testing.assert_array_equal(out, np.repeat(np.arange(300, dtype=np.int32)[:, None], 64, axis=1))


def test_thread_block_and_lane_ids():
    # block (16, 4, 1) in waves of 32: lanes are numbered x fastest, waves cut the linear thread id
    out = np.zeros((2, 3, 4, 16, 6), np.int32)
    body = """
    %tx = gpu.thread_id x
    %ty = gpu.thread_id y
    %bx = gpu.block_id x
    %by = gpu.block_id y
    %lane = gpu.lane_id
    %rx = rocdl.workitem.id.x : i32
    %ry = rocdl.workgroup.id.y : i32
    %nx = gpu.block_dim y
    %gx = gpu.grid_dim x
    %sg = gpu.subgroup_id : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %li = arith.index_cast %lane : index to i32
    %sgi = arith.index_cast %sg : index to i32
    %prod = arith.muli %nx, %gx : index
    %pi = arith.index_cast %prod : index to i32
    %byi = arith.index_cast %by : index to i32
    %bxi = arith.index_cast %bx : index to i32
    %tyi = arith.index_cast %ty : index to i32
    memref.store %li, %out[%bx, %by, %ty, %tx, %c0] : memref<2x3x4x16x6xi32>
    memref.store %sgi, %out[%bx, %by, %ty, %tx, %c1] : memref<2x3x4x16x6xi32>
    memref.store %rx, %out[%bx, %by, %ty, %tx, %c2] : memref<2x3x4x16x6xi32>
    memref.store %ry, %out[%bx, %by, %ty, %tx, %c3] : memref<2x3x4x16x6xi32>
    memref.store %pi, %out[%bx, %by, %ty, %tx, %c4] : memref<2x3x4x16x6xi32>
    memref.store %tyi, %out[%bx, %by, %ty, %tx, %c5] : memref<2x3x4x16x6xi32>"""
    run(body, "%out: memref<2x3x4x16x6xi32>", [out], grid=(2, 3, 1), block=(16, 4, 1), wave_size=32)
    linear = np.arange(4)[:, None] * 16 + np.arange(16)[None, :]
    np.testing.assert_array_equal(out[..., 0], np.broadcast_to(linear % 32, (2, 3, 4, 16)))
    np.testing.assert_array_equal(out[..., 1], np.broadcast_to(linear // 32, (2, 3, 4, 16)))
    np.testing.assert_array_equal(out[..., 2], np.broadcast_to(np.arange(16), (2, 3, 4, 16)))
    np.testing.assert_array_equal(out[..., 3], np.broadcast_to(np.arange(3)[None, :, None, None], (2, 3, 4, 16)))
    assert (out[..., 4] == 8).all()
    np.testing.assert_array_equal(out[..., 5], np.broadcast_to(np.arange(4)[:, None], (2, 3, 4, 16)))


def test_subview_reinterpret_cast_and_cast():
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    out = np.zeros((3, 64), np.float32)
    body = """
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c8 = arith.constant 8 : index
    %i = arith.remui %t, %c2 : index
    %j = arith.divui %t, %c2 : index
    %jj = arith.remui %j, %c2 : index
    %sub = memref.subview %a[%c1, 2] [2, 2] [2, 3] : memref<6x8xf32> to memref<2x2xf32, strided<[16, 3], offset: ?>>
    %x = memref.load %sub[%i, %jj] : memref<2x2xf32, strided<[16, 3], offset: ?>>
    %flat = memref.reinterpret_cast %a to offset: [%c8], sizes: [40], strides: [1]
        : memref<6x8xf32> to memref<40xf32, strided<[1], offset: ?>>
    %k = arith.remui %t, %c8 : index
    %y = memref.load %flat[%k] : memref<40xf32, strided<[1], offset: ?>>
    %dyn = memref.cast %a : memref<6x8xf32> to memref<?x8xf32>
    %rows = memref.dim %dyn, %c0 : memref<?x8xf32>
    %z = arith.index_cast %rows : index to i32
    %zf = arith.sitofp %z : i32 to f32
    memref.store %x, %out[%c0, %t] : memref<3x64xf32>
    memref.store %y, %out[%c1, %t] : memref<3x64xf32>
    memref.store %zf, %out[%c2, %t] : memref<3x64xf32>"""
    run(body, "%a: memref<6x8xf32>, %out: memref<3x64xf32>", [a, out])
    t = np.arange(64)
    np.testing.assert_array_equal(out[0], a[1::2, 2::3][t % 2, (t // 2) % 2])
    np.testing.assert_array_equal(out[1], a.reshape(-1)[8 + t % 8])
    assert (out[2] == 6).all()


def test_float_compare_predicates_bitcast_and_unsigned_conversions():
    x = np.array([1.0, np.nan, -2.0, 0.0] * 16, np.float32)
    y = np.array([1.0, 1.0, 3.0, np.nan] * 16, np.float32)
    preds = ["oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno"]
    out = np.zeros((len(preds) + 2, 64), np.int32)
    lines = [f"""%p{n} = arith.cmpf {p}, %x, %y : f32
    %e{n} = arith.extui %p{n} : i1 to i32
    %r{n} = arith.constant {n} : index
    memref.store %e{n}, %out[%r{n}, %t] : memref<{len(preds) + 2}x64xi32>""" for n, p in enumerate(preds)]
    body = f"""
    %t = gpu.thread_id x
    %x = memref.load %xs[%t] : memref<64xf32>
    %y = memref.load %ys[%t] : memref<64xf32>
    %bits = arith.bitcast %x : f32 to i32
    %rb = arith.constant {len(preds)} : index
    memref.store %bits, %out[%rb, %t] : memref<{len(preds) + 2}x64xi32>
    %m1 = arith.constant -1 : i32
    %u = arith.uitofp %m1 : i32 to f32
    %scale = arith.constant 65536.0 : f32
    %q = arith.divf %u, %scale : f32
    %ui = arith.fptosi %q : f32 to i32
    %ru = arith.constant {len(preds) + 1} : index
    memref.store %ui, %out[%ru, %t] : memref<{len(preds) + 2}x64xi32>
    """ + "\n    ".join(lines)
    run(body, f"%xs: memref<64xf32>, %ys: memref<64xf32>, %out: memref<{len(preds) + 2}x64xi32>", [x, y, out])
    unordered = np.isnan(x) | np.isnan(y)
    expected = {"oeq": x == y, "ogt": x > y, "oge": x >= y, "olt": x < y, "ole": x <= y,
                "one": (x != y) & ~unordered, "ord": ~unordered, "ueq": (x == y) | unordered,
                "ugt": (x > y) | unordered, "uge": (x >= y) | unordered, "ult": (x < y) | unordered,
                "ule": (x <= y) | unordered, "une": (x != y) | unordered, "uno": unordered}
    for n, p in enumerate(preds):
        np.testing.assert_array_equal(out[n].astype(bool), expected[p], err_msg=p)
    np.testing.assert_array_equal(out[len(preds)], x.view(np.int32))
    assert (out[len(preds) + 1] == 65536).all()  # -1 read as unsigned: 2^32 - 1, rounded to 2^32 in f32


def test_negative_and_zero_strides_through_dynamic_layouts():
    base = np.arange(64, dtype=np.float32)
    reversed_view = base[::-1]                               # stride -1
    broadcast = np.lib.stride_tricks.as_strided(np.float32([5.0]), shape=(64,), strides=(0,), writeable=False)
    out = np.zeros(64, np.float32)
    layout = "memref<?xf32, strided<[?]>>"
    body = f"""
    %t = gpu.thread_id x
    %x = memref.load %a[%t] : {layout}
    %y = memref.load %b[%t] : {layout}
    %s = arith.addf %x, %y : f32
    memref.store %s, %a[%t] : {layout}
    memref.store %s, %out[%t] : memref<64xf32>"""
    run(body, f"%a: {layout}, %b: {layout}, %out: memref<64xf32>", [reversed_view, broadcast, out])
    np.testing.assert_array_equal(out, np.arange(63, -1, -1, dtype=np.float32) + 5)
    np.testing.assert_array_equal(base, np.arange(64, dtype=np.float32) + 5)  # written through the view


def test_two_dimensional_vector_ops():
    """What the tiled body does with mma fragments (vector<2x2xf32>): rows and elements out and in,
    from_elements, broadcast of scalars and rows to 2-D, element-wise arith, truncf / extf, select (vector and
    per-lane conditions), dense 2-D constants."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 4)).astype(np.float32)
    out = np.zeros((64, 8), np.float32)
    body = """
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c6 = arith.constant 6 : index
    %c32 = arith.constant 32 : index
    %x = vector.load %a[%t, %c0] : memref<64x4xf32>, vector<4xf32>
    %e0 = vector.extract %x[0] : f32 from vector<4xf32>
    %e1 = vector.extract %x[1] : f32 from vector<4xf32>
    %e2 = vector.extract %x[2] : f32 from vector<4xf32>
    %e3 = vector.extract %x[3] : f32 from vector<4xf32>
    %m = vector.from_elements %e0, %e1, %e2, %e3 : vector<2x2xf32>
    %row1 = vector.extract %m[1] : vector<2xf32> from vector<2x2xf32>
    %el = vector.extract %m[0, 1] : f32 from vector<2x2xf32>
    %bs = vector.broadcast %el : f32 to vector<2x2xf32>
    %brow = vector.broadcast %row1 : vector<2xf32> to vector<2x2xf32>
    %sp = vector.broadcast %e3 : f32 to vector<2x2xf32>
    %sum = arith.addf %m, %bs : vector<2x2xf32>
    %prod = arith.mulf %sum, %brow : vector<2x2xf32>
    %h = arith.truncf %prod : vector<2x2xf32> to vector<2x2xbf16>
    %w = arith.extf %h : vector<2x2xbf16> to vector<2x2xf32>
    %gt = arith.cmpf ogt, %w, %sp : vector<2x2xf32>
    %sel = arith.select %gt, %w, %sp : vector<2x2xi1>, vector<2x2xf32>
    %ins = vector.insert %row1, %sel [0] : vector<2xf32> into vector<2x2xf32>
    %ins2 = vector.insert %e0, %ins [1, 1] : f32 into vector<2x2xf32>
    %cst = arith.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : vector<2x2xf32>
    %fin = arith.addf %ins2, %cst : vector<2x2xf32>
    %low = arith.cmpi ult, %t, %c32 : index
    %pick = arith.select %low, %fin, %cst : vector<2x2xf32>
    %r0 = vector.extract %pick[0] : vector<2xf32> from vector<2x2xf32>
    %r1 = vector.extract %pick[1] : vector<2xf32> from vector<2x2xf32>
    %u = vector.from_elements %e2, %e1 : vector<2xf32>
    %cols = vector.extract %sel[1] : vector<2xf32> from vector<2x2xf32>
    vector.store %r0, %out[%t, %c0] : memref<64x8xf32>, vector<2xf32>
    vector.store %r1, %out[%t, %c2] : memref<64x8xf32>, vector<2xf32>
    vector.store %u, %out[%t, %c4] : memref<64x8xf32>, vector<2xf32>
    vector.store %cols, %out[%t, %c6] : memref<64x8xf32>, vector<2xf32>"""
    run(body, "%a: memref<64x4xf32>, %out: memref<64x8xf32>", [a, out])
    m = a.reshape(64, 2, 2)
    prod = (m + m[:, :1, 1:]) * m[:, 1:, :]
    w = bf16_value(bf16_bits(prod)).reshape(prod.shape)
    sel = np.where(w > a[:, 3, None, None], w, a[:, 3, None, None])
    fin = sel.copy()
    fin[:, 0] = m[:, 1]
    fin[:, 1, 1] = a[:, 0]
    fin += np.array([[1, 2], [3, 4]], np.float32)
    pick = np.where(np.arange(64)[:, None, None] < 32, fin, np.array([[1, 2], [3, 4]], np.float32))
    np.testing.assert_array_equal(out[:, :4], pick.reshape(64, 4))
    np.testing.assert_array_equal(out[:, 4:6], a[:, [2, 1]])
    np.testing.assert_array_equal(out[:, 6:], sel[:, 1])
