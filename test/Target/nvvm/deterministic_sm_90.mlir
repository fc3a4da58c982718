// Deterministic mode on sm_90: the tiled kernel stores its dQ partial (st.global.v2, no red / atom
// anywhere), the convert loops over the partials; the default kernel keeps its vector atomics.
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target sm_90 --deterministic --ptxas none --emit isa | FileCheck %s
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target sm_90 --deterministic --ptxas none --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target sm_90 --ptxas none --emit isa | FileCheck %s --check-prefix=ATOMIC

// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d64x64_g1_nomask_det_{{.*}}_dq_dk_dv(
// CHECK: st.global.v2.b32
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d64x64_g1_nomask_det_{{.*}}_convert_dq(
// CHECK: ld.global.v4.b32
// CHECK: add.rn.f32

// NEVER-NOT: {{\sred\.}}
// NEVER-NOT: {{\satom\.}}

// ATOMIC-LABEL: .visible .entry fmha_bwd_bf16_d64x64_g1_nomask_{{.*}}_dq_dk_dv(
// ATOMIC: red.relaxed.gpu.global.add.v2.f32
