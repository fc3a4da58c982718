// softcap (passes/score_mods.py) in the expanded warp body: tanh(scale dot / C) = 1 - 2 / (e + 1) from
// fmha.exp2 and an approximate (afn) division, the capped score minus the row's lse, C tanh(.) - lse
// (natural units), into fmha.masked_score with scale log2(e) only, and dS times 1 - tanh^2 from a
// second tanh of the same dot. The kernels' names carry the cap.
// RUN: fmha-compile --dtype bf16 --hdim 64 --softcap 30 --target sm_90 --body warp --emit gpu | FileCheck %s
// RUN: fmha-compile --dtype bf16 --hdim 64 --target sm_90 --body warp --emit gpu | FileCheck %s --check-prefix=PLAIN

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
