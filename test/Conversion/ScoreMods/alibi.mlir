// ALiBi (passes/score_mods.py) in the expanded warp body: the slope 2^(-8 (h + 1) / H) of the query head
// from the runtime head count, once before the key loop; per key the shifted bias -slope |q + Sk - Sq - k|
// - lse as one fma (natural units: never rounded at the score's size), added to scale * dot, which then
// enters fmha.masked_score with scale log2(e) only and is P's exponent as it is. No bias operand.
// RUN: fmha-compile --dtype f32 --hdim 64 --bias alibi --target sm_90 --emit gpu | FileCheck %s

// CHECK-LABEL: gpu.func @fmha_bwd_f32_d64x64_g1_nomask_alibi_warp32_dq_dk_dv
// CHECK-SAME:    (%[[Q:[^:]*]]: memref<?x?x?x64xf32
// CHECK:         %[[H:.*]] = memref.dim %[[Q]], %c1
// CHECK:         arith.sitofp %{{.*}} : i32 to f32
// CHECK:         %[[HF:.*]] = arith.sitofp %{{.*}} : i32 to f32
// CHECK:         arith.divf %{{.*}}, %[[HF]] : f32
// CHECK:         %[[SLOPE:.*]] = "fmha.exp2"
// CHECK:         scf.for
// CHECK:           %[[NEG:.*]] = arith.negf %[[SLOPE]] : f32
// CHECK:           %[[DIST:.*]] = arith.maxsi
// CHECK:           %[[SHIFT:.*]] = llvm.intr.fma(%{{.*}}, %[[NEG]], %{{.*}}) : (f32, f32, f32) -> f32
// CHECK:           %[[S:.*]] = arith.addf %{{.*}}, %[[SHIFT]] : f32
// CHECK:           %[[E:.*]] = "fmha.masked_score"(%[[S]], {{.*}}scale_log2 = 1.44269502 : f32
// CHECK-NEXT:      "fmha.exp2"(%[[E]]) : (f32) -> f32
// CHECK:         gpu.return
