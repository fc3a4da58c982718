"""The interpreter's generic-form parser, on text printed by MLIR itself."""
import numpy as np
import pytest

from fmha_mlir.runtime.interp import InterpreterError
from fmha_mlir.runtime.interp.parser import Dense, DialectAttr, Number, SymbolRef, parse_module
from fmha_mlir.runtime.interp.types import MemRefType, ScalarType, VectorType

from interp_support import generic

SOURCE = r"""
#map = affine_map<(d0)[s0] -> (d0 + s0)>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: memref<?x?x128xf16, strided<[?, ?, 1]>>, %v: memref<8xbf16, 3>, %n: index)
        workgroup(%wg: memref<64xf32, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>, rocdl.flat_work_group_size = "64,64"} {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %splat = arith.constant dense<1.5> : vector<4xf32>
      %list = arith.constant dense<[1.0, -0.0, 0x7F800000, 2.5]> : vector<4xf32>
      %ninf = arith.constant 0xFF800000 : f32
      %z = arith.constant 0.0 : f32
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (f32) {
        %x = arith.addf %acc, %z fastmath<fast> : f32
        %c = arith.cmpf olt, %x, %z : f32
        %y = scf.if %c -> f32 {
          scf.yield %x : f32
        } else {
          scf.yield %z : f32
        }
        scf.yield %y : f32
      }
      %c1i = arith.constant 1 : i32
      %c64 = arith.constant 64 : i32
      %s, %ok = gpu.shuffle xor %r, %c1i, %c64 : f32
      %ap = affine.apply #map(%c0)[%c1]
      gpu.return
    }
  }
  func.func @host() { return }
}
"""


@pytest.fixture(scope="module")
def module():
    return parse_module(generic(SOURCE))


def ops_named(module, name):
    return [op for op in module.walk() if op.name == name]


def test_kernel_signature_and_properties(module):
    (func,) = ops_named(module, "gpu.func")
    assert func.attributes["sym_name"] == "k"
    assert func.attributes["kernel"] is True
    assert func.attributes["known_block_size"] == (64, 1, 1)
    assert func.attributes["rocdl.flat_work_group_size"] == "64,64"
    assert func.attributes["workgroup_attributions"] == Number(1, ScalarType("i64"))
    a, v, n = func.attributes["function_type"].inputs
    assert a == MemRefType((None, None, 128), ScalarType("f16"), (None, None, 1))
    assert v == MemRefType((8,), ScalarType("bf16"), None, "3")
    assert n == ScalarType("index")
    block_args = func.regions[0].blocks[0].args
    assert [t for _, t in block_args][3].memory_space == "#gpu.address_space<workgroup>"


def test_constants_dense_and_hex_floats(module):
    values = {op.results[0]: op.attributes["value"] for op in ops_named(module, "arith.constant")}
    dense = [v for v in values.values() if isinstance(v, Dense)]
    assert dense[0].type == VectorType((4,), ScalarType("f32"))
    np.testing.assert_array_equal(dense[0].values, np.full(4, 1.5, np.float32))
    np.testing.assert_array_equal(dense[1].values, np.array([1.0, -0.0, np.inf, 2.5], np.float32))
    assert np.signbit(dense[1].values[1])
    assert Number(float("-inf"), ScalarType("f32")) in values.values()


def test_nested_regions_and_enum_attributes(module):
    (loop,) = ops_named(module, "scf.for")
    assert len(loop.operands) == 4 and loop.result_types == (ScalarType("f32"),)
    body = loop.regions[0].blocks[0]
    assert [t for _, t in body.args] == [ScalarType("index"), ScalarType("f32")]
    assert [op.name for op in body.ops] == ["arith.addf", "arith.cmpf", "scf.if", "scf.yield"]
    assert body.ops[0].attributes["fastmath"] == DialectAttr("#arith.fastmath<fast>")
    assert body.ops[1].attributes["predicate"] == Number(4, ScalarType("i64"))
    assert len(body.ops[2].regions) == 2
    (tid,) = ops_named(module, "gpu.thread_id")
    assert tid.attributes["dimension"].keyword == "x"


def test_multiple_results_and_aliases(module):
    (shuffle,) = ops_named(module, "gpu.shuffle")
    assert len(shuffle.results) == 2 and shuffle.results[1].endswith("#1")
    assert shuffle.attributes["mode"].keyword == "xor"
    (apply,) = ops_named(module, "affine.apply")
    assert "d0 + s0" in apply.attributes["map"].text


def test_debug_locations_are_resolved():
    module = parse_module(generic(SOURCE, debug_info=True))
    (shuffle,) = ops_named(module, "gpu.shuffle")
    where = module.location(shuffle)
    assert where.startswith(f"line {shuffle.line} of the interpreter IR")
    lines = SOURCE.split("\n")
    line = next(i for i, text in enumerate(lines) if "gpu.shuffle" in text)
    assert where.endswith(f'"-":{line + 1}:{lines[line].index("gpu.shuffle") + 1}')  # MLIR locates ops at their name


def test_handwritten_generic_text():
    text = r'''
    "gpu.module"() <{sym_name = "m"}> ({
      "gpu.func"() <{function_type = (memref<4xi32>) -> ()}> ({
      ^bb0(%arg0: memref<4xi32>):
        %0:2 = "test.two"() {s = "a\"b\\c", blob = dense<"0x0100000002000000"> : vector<2xi32>,
                             f = @sym::@inner} : () -> (i32, i32)
        "test.use"(%0#1) {list = [1 : i64, "x", unit]} : (i32) -> ()
        "gpu.return"() : () -> ()
      }) {kernel, sym_name = "k"} : () -> ()
    }) : () -> ()
    '''
    module = parse_module(text)
    two = ops_named(module, "test.two")[0]
    assert two.results == ["%0#0", "%0#1"]
    assert two.attributes["s"] == 'a"b\\c'
    np.testing.assert_array_equal(two.attributes["blob"].values, [1, 2])
    assert two.attributes["f"] == SymbolRef("sym::@inner")
    use = ops_named(module, "test.use")[0]
    assert use.operands == ["%0#1"]
    assert use.attributes["list"] == [Number(1, ScalarType("i64")), "x", True]


def test_parse_error_names_line_and_column():
    with pytest.raises(InterpreterError, match=r"line 2, column \d+: expected a generic op name"):
        parse_module('"builtin.module"() ({\n  gpu.return\n}) : () -> ()')
