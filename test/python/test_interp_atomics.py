"""Atomics: sequential (lane order) and random order, old values, kinds, fmha.atomic_add."""
import numpy as np
import pytest

from fmha_mlir.runtime.interp.errors import InterpreterError
from interp_support import GLOBAL_INDEX, run

ADD_BODY = GLOBAL_INDEX + """
    %x = memref.load %vals[%i] : memref<?xf32>
    %c4 = arith.constant 4 : index
    %slot = arith.remui %i, %c4 : index
    {atomic}"""
ARGS = "%vals: memref<?xf32>, %acc: memref<4xf32>"
RMW = "%old = memref.atomic_rmw addf %x, %acc[%slot] : (f32, memref<4xf32>) -> f32"
FMHA = '"fmha.atomic_add"(%x, %acc, %slot) : (f32, memref<4xf32>, index) -> ()'


def sequential_sums(vals):
    acc = np.zeros(4, np.float32)
    for i, v in enumerate(vals):
        acc[i % 4] += v
    return acc


@pytest.mark.parametrize("atomic", [RMW, FMHA])
def test_sequential_order_is_lane_order(atomic):
    vals = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    acc = np.zeros(4, np.float32)
    run(ADD_BODY.format(atomic=atomic), ARGS, [vals, acc], grid=(4, 1, 1))
    np.testing.assert_array_equal(acc, sequential_sums(vals))


def test_random_order_keeps_the_sum_and_shows_in_the_bits():
    # adversarial: large values that cancel, small ones that get absorbed depending on the order
    vals = np.tile(np.array([1e8, 1.0, -1e8, 3.0, 0.5, 1e-3, 2.0, -0.25], np.float32), 32)
    exact = vals.astype(np.float64).reshape(-1, 4).sum(axis=0)
    seen = set()
    for seed in range(6):
        acc = np.zeros(4, np.float32)
        run(ADD_BODY.format(atomic=FMHA), ARGS, [vals, acc], grid=(4, 1, 1), atomic_order="random", seed=seed)
        np.testing.assert_allclose(acc, exact, atol=64 * 8)  # rounding of terms of magnitude 1e8
        seen.add(acc.tobytes())
    assert len(seen) > 1, "random atomic order produced identical bits every time"


def test_old_values_follow_the_order():
    vals = np.arange(1, 129, dtype=np.float32)
    acc = np.zeros(4, np.float32)
    olds = np.zeros(128, np.float32)
    body = ADD_BODY.format(atomic=RMW) + "\n    memref.store %old, %olds[%i] : memref<?xf32>"
    run(body, ARGS + ", %olds: memref<?xf32>", [vals, acc, olds], grid=(2, 1, 1))
    per_slot = vals.reshape(-1, 4)
    expected = np.cumsum(per_slot, axis=0) - per_slot  # lane order: exclusive prefix sums per address
    np.testing.assert_array_equal(olds, expected.reshape(-1))
    np.testing.assert_array_equal(acc, per_slot.sum(axis=0))


def test_old_values_in_random_order_are_a_permutation_of_prefix_sums():
    vals = np.ones(64, np.float32)
    acc = np.zeros(4, np.float32)
    olds = np.zeros(64, np.float32)
    body = ADD_BODY.format(atomic=RMW) + "\n    memref.store %old, %olds[%i] : memref<?xf32>"
    run(body, ARGS + ", %olds: memref<?xf32>", [vals, acc, olds], atomic_order="random", seed=3)
    for slot in range(4):
        assert sorted(olds[slot::4]) == list(range(16))
    assert not np.array_equal(olds, np.repeat(np.arange(16, dtype=np.float32), 4))


@pytest.mark.parametrize("kind,reduce", [("maximumf", np.max), ("minnumf", np.min), ("assign", None)])
def test_other_kinds(kind, reduce):
    vals = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    acc = np.zeros(4, np.float32)
    atomic = f"%old = memref.atomic_rmw {kind} %x, %acc[%slot] : (f32, memref<4xf32>) -> f32"
    run(ADD_BODY.format(atomic=atomic), ARGS, [vals, acc])
    by_slot = vals.reshape(-1, 4)
    want = by_slot[-1] if reduce is None else reduce(np.vstack([by_slot, np.zeros((1, 4), np.float32)]), axis=0)
    np.testing.assert_array_equal(acc, want)


def test_atomics_only_from_executing_lanes():
    vals = np.ones(64, np.float32)
    acc = np.zeros(4, np.float32)
    atomic = f"""%c10 = arith.constant 10 : index
    %run = arith.cmpi ult, %t, %c10 : index
    scf.if %run {{
      {FMHA}
    }}"""
    run(ADD_BODY.format(atomic=atomic), ARGS, [vals, acc])
    np.testing.assert_array_equal(acc, [3, 3, 2, 2])


VECTOR_BODY = GLOBAL_INDEX + """
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %x = memref.load %vals[%i] : memref<?xf32>
    %y = arith.addf %x, %x : f32
    %pair = vector.from_elements %x, %y : vector<2xf32>
    %slot = arith.remui %i, %c3 : index
    %at = arith.muli %slot, %c2 : index
    "fmha.atomic_add"(%pair, %acc, %at) : (vector<2xf32>, memref<?xf32>, index) -> ()"""


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_vector_atomic_add_adds_each_element_at_the_next_position(order):
    """Lane i adds (v, 2v) at slots 2 (i % 3) and 2 (i % 3) + 1: the pair lands on adjacent elements."""
    vals = np.arange(1, 193, dtype=np.float32)  # 3 blocks of 64 lanes; exact sums in any order
    acc = np.zeros(6, np.float32)
    run(VECTOR_BODY, "%vals: memref<?xf32>, %acc: memref<?xf32>", [vals, acc], grid=(3, 1, 1),
        atomic_order=order, seed=4)
    per_slot = vals.reshape(-1, 3).sum(axis=0)
    np.testing.assert_array_equal(acc, np.stack([per_slot, 2 * per_slot], axis=1).reshape(-1))


def test_vector_atomic_add_past_the_end_is_an_error():
    vals = np.ones(64, np.float32)
    with pytest.raises(InterpreterError, match=r"out of bounds for a memref of shape \(5,\)"):
        run(VECTOR_BODY, "%vals: memref<?xf32>, %acc: memref<?xf32>", [vals, np.zeros(5, np.float32)], grid=(1, 1, 1))
