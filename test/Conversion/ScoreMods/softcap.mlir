// softcap (passes/score_mods.py) in the expanded warp body: tanh(scale dot / C) = 1 - 2 / (e + 1) from
// fmha.exp2 and an approximate (afn) division, the capped score minus the row's lse, C tanh(.) - lse
// (natural units), into fmha.masked_score with scale log2(e) only, and dS times 1 - tanh^2 from a
// second tanh of the same dot. The kernels' names carry the cap.
// RUN: fmha-compile --dtype bf16 --hdim 64 --softcap 30 --target sm_90 --body warp --emit gpu | FileCheck %s
// RUN: fmha-compile --dtype bf16 --hdim 64 --target sm_90 --body warp --emit gpu | FileCheck %s --check-prefix=PLAIN
// RUN: fmha-compile --dtype f32 --hdim 64 --softcap 30 --target sm_90 --body warp --emit gpu | FileCheck %s --check-prefix=F32

// CHECK-LABEL: gpu.func @fmha_bwd_bf16_d64x64_g1_nomask_cap30_warp32_dq_dk_dv
// CHECK:         %[[QK:.*]] = "fmha.wave_reduce"
// 2 x 0.125 x log2(e) / 30
// CHECK:         %[[Y:.*]] = arith.mulf %[[QK]], %{{.*}} : f32
// CHECK:         %[[E:.*]] = "fmha.exp2"(%[[Y]])
// CHECK:         %[[D:.*]] = arith.addf %[[E]], %[[ONE:.*]] : f32
// CHECK:         %[[R:.*]] = arith.divf %{{.*}}, %[[D]] fastmath<afn> : f32
// CHECK:         %[[T:.*]] = arith.subf %[[ONE]], %[[R]] : f32
// CHECK:         %[[CAPPED:.*]] = arith.mulf %[[T]], %{{.*}} : f32
// CHECK:         %[[SHIFTED:.*]] = arith.subf %[[CAPPED]], %{{.*}} : f32
// CHECK:         "fmha.masked_score"(%[[SHIFTED]], {{.*}}scale_log2 = 1.44269502 : f32
// CHECK:         "fmha.exp2"
// CHECK:         "fmha.exp2"
// CHECK:         arith.divf
// CHECK-LABEL: gpu.func @fmha_bwd_bf16_d64x64_g1_nomask_cap30_warp32_convert_dk

// Without softcap: no tanh, the softmax scale folded into masked_score.
// PLAIN-LABEL: gpu.func @fmha_bwd_bf16_d64x64_g1_nomask_warp32_dq_dk_dv
// PLAIN-NOT:     arith.divf
// PLAIN:         "fmha.masked_score"({{.*}}scale_log2 = 0.180336878 : f32
// PLAIN-NOT:     arith.divf
// PLAIN-LABEL: gpu.func @fmha_bwd_bf16_d64x64_g1_nomask_warp32_convert_dk

// f32: the exponential form of |y| with an IEEE division, the odd series y + y^3 p(y^2) (4 fma in
// Horner's order, one more for y + y^3 p), the sign restored and the series selected below |y| = 0.625
// (x = 2 |y| log2 e < 1.8034).
// F32-LABEL: gpu.func @fmha_bwd_f32_d64x64_g1_nomask_cap30_warp32_dq_dk_dv
// F32:         %[[QK:.*]] = "fmha.wave_reduce"
// F32:         %[[X:.*]] = arith.mulf %[[QK]], %{{.*}} : f32
// F32:         %[[NEG:.*]] = arith.cmpf olt, %[[QK]], %{{.*}} : f32
// F32:         %[[MX:.*]] = arith.negf %[[X]] : f32
// F32:         %[[AX:.*]] = arith.select %[[NEG]], %[[MX]], %[[X]] : f32
// F32:         %[[E:.*]] = "fmha.exp2"(%[[AX]])
// F32:         %[[D:.*]] = arith.addf %[[E]], %[[ONE:.*]] : f32
// F32:         %[[R:.*]] = arith.divf %{{.*}}, %[[D]] : f32
// F32-NEXT:    %[[T:.*]] = arith.subf %[[ONE]], %[[R]] : f32
// F32:         %[[Y:.*]] = arith.mulf %[[QK]], %{{.*}} : f32
// F32:         %[[Z:.*]] = arith.mulf %[[Y]], %[[Y]] : f32
// F32-COUNT-4: llvm.intr.fma({{.*}}, %[[Z]], {{.*}})
// F32:         %[[SERIES:.*]] = llvm.intr.fma(%{{.*}}, %{{.*}}, %[[Y]])
// F32:         %[[SMALL:.*]] = arith.cmpf olt, %[[AX]], %{{.*}} : f32
// F32:         %[[MT:.*]] = arith.subf %[[R]], %[[ONE]] : f32
// F32:         %[[SIGNED:.*]] = arith.select %[[NEG]], %[[MT]], %[[T]] : f32
// F32:         arith.select %[[SMALL]], %[[SERIES]], %[[SIGNED]] : f32
// F32:         "fmha.masked_score"
