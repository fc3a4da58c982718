// -o writes the result to a file; stdin works as input; the generic form and locations can be printed.
// RUN: fmha-opt %s -o %t && FileCheck %s < %t
// RUN: fmha-opt < %s | FileCheck %s
// RUN: fmha-opt - < %s | FileCheck %s
// RUN: fmha-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: fmha-opt %s --mlir-print-debuginfo | FileCheck %s --check-prefix=DEBUGINFO
// RUN: fmha-opt --list-passes | FileCheck %s --check-prefix=LIST

// CHECK-LABEL: func.func @exp2
// CHECK: "fmha.exp2"(%arg0) : (f32) -> f32
// GENERIC: "func.func"() <{function_type = (f32) -> f32, sym_name = "exp2"}>
// GENERIC: "fmha.exp2"(%arg0) : (f32) -> f32
// GENERIC: "func.return"
// DEBUGINFO: "fmha.exp2"(%arg0) : (f32) -> f32 loc(#[[LOC:loc[0-9]*]])
// DEBUGINFO: #[[LOC]] = loc({{.*}}:[[# @LINE + 5]]:8)
// LIST: fmha passes:
// LIST: fmha-decompose-bwd
// LIST: fmha-stages-to-gpu
func.func @exp2(%x: f32) -> f32 {
  %e = "fmha.exp2"(%x) : (f32) -> f32
  return %e : f32
}
