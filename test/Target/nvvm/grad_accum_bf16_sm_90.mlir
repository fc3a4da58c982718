// grad_accum = "bf16" on sm_90: the tiled kernel adds dQ into dq itself with packed bf16 atomics
// (red.relaxed.gpu.global.add.noftz.bf16x2, each pair rounded by cvt.rn.bf16x2.f32), no f32 vector
// atomic and no convert_dq kernel; the plan zero-fills dq and allocates no dq_acc workspace.
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target sm_90 --grad-accum bf16 --ptxas none --emit isa | FileCheck %s
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target sm_90 --grad-accum bf16 --ptxas none --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target sm_90 --grad-accum bf16 --ptxas none --emit manifest | FileCheck %s --check-prefix=PLAN

// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d64x64_g1_nomask_accbf16_{{.*}}_dq_dk_dv(
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK: cvt.rn.bf16x2.f32
// CHECK: red.relaxed.gpu.global.add.noftz.bf16x2

// NEVER-NOT: add.v2.f32
// NEVER-NOT: atom.
// NEVER-NOT: convert_dq

// PLAN: "numerics": {
// PLAN: "dq_add_block": 128
// PLAN-NOT: dq_acc
// PLAN: "op": "zero",
// PLAN-NEXT: "buffer": "dq"
