// Chunks are processed on their own and printed joined by the split marker.
// RUN: fmha-opt %s -split-input-file | FileCheck %s
// RUN: fmha-opt %s | FileCheck %s --check-prefix=WHOLE

// CHECK-LABEL: func.func @first
// CHECK: "fmha.exp2"
// CHECK: // -----
// CHECK-LABEL: func.func @second
// CHECK-NOT: func.func @first

// WHOLE: module {
// WHOLE-LABEL: func.func @first
// WHOLE-LABEL: func.func @second
// WHOLE-NOT: // -----
func.func @first(%x: f32) -> f32 {
  %e = "fmha.exp2"(%x) : (f32) -> f32
  return %e : f32
}

// -----

func.func @second() {
  return
}
