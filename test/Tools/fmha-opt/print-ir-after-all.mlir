// --mlir-print-ir-after-all prints the IR after each pass on stderr, under mlir-opt's header.
// RUN: fmha-opt %s --pass-pipeline='builtin.module(canonicalize,cse)' --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s
// RUN: fmha-opt %s --pass-pipeline='builtin.module(canonicalize,cse)' --mlir-print-ir-after-all 2>/dev/null | FileCheck %s --check-prefix=OUT

// CHECK: // -----// IR Dump After CanonicalizerPass
// CHECK-NEXT: module {
// CHECK-NEXT: func.func @twice
// CHECK-NOT: arith.addi
// CHECK: // -----// IR Dump After CSEPass
// CHECK-NEXT: module {

// OUT-NOT: IR Dump
// OUT-LABEL: func.func @twice
// OUT-NEXT: return %arg0 : i32
func.func @twice(%a: i32) -> i32 {
  %c0 = arith.constant 0 : i32
  %0 = arith.addi %a, %c0 : i32
  return %0 : i32
}
