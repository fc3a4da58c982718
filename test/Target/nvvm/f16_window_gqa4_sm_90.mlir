// f16, sliding window (16, 0), hdim 64 (2 elements per lane), GQA 4 on sm_90.
// RUN: fmha-compile --body warp --dtype f16 --mask window:16,0 --hdim 64 --gqa 4 --target sm_90 --ptxas none --emit isa | FileCheck %s
// RUN: fmha-compile --body warp --dtype f16 --mask window:16,0 --hdim 64 --gqa 4 --target sm_90 --ptxas none --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK-LABEL: .visible .entry fmha_bwd_f16_d64x64_g4_win16_0_warp32_dot_do_o(
// CHECK-LABEL: .visible .entry fmha_bwd_f16_d64x64_g4_win16_0_warp32_dq_dk_dv(
// CHECK: shfl.sync.bfly.b32
// CHECK: ex2.approx.ftz.f32
// CHECK: atom.relaxed.gpu.global.add.f32
// CHECK-LABEL: .visible .entry fmha_bwd_f16_d64x64_g4_win16_0_warp32_convert_dk(
// CHECK: cvt.rn.f16x2.f32

// NEVER-NOT: atom.acq_rel
// NEVER-NOT: atom.global.cas
