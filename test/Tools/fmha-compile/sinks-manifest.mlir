// fmha-compile --sinks --dlse: the manifest reads dlse and the sinks as f32 inputs, returns dsinks as an
// f32 [heads_q] output, zero-fills dsinks before dot_do_o (which adds into it) and launches no convert
// of it; with --deterministic a [B, Hq, Sq] workspace of per-row terms and a one-wave-per-head convert.
// RUN: fmha-compile --dtype bf16 --hdim 64 --sinks --dlse --target sm_90 --emit manifest | FileCheck %s
// RUN: fmha-compile --dtype bf16 --hdim 64 --sinks --deterministic --target sm_90 --emit manifest | FileCheck %s --check-prefix=DET

// CHECK:      "sinks": true,
// CHECK-NEXT: "lse_grad": true
// CHECK:      "dlse": {
// CHECK-NEXT:   "role": "input",
// CHECK-NEXT:   "dtype": "f32",
// CHECK-NEXT:   "rank": 3,
// CHECK:      "sinks": {
// CHECK-NEXT:   "role": "input",
// CHECK-NEXT:   "dtype": "f32",
// CHECK-NEXT:   "rank": 1,
// CHECK-NEXT:   "dims": [
// CHECK-NEXT:     "heads_q"
// CHECK:      "dsinks": {
// CHECK-NEXT:   "role": "output",
// CHECK-NEXT:   "dtype": "f32",
// CHECK-NEXT:   "rank": 1,
// CHECK:      "steps": [
// CHECK-NEXT:   {
// CHECK-NEXT:     "op": "zero",
// CHECK-NEXT:     "buffer": "dsinks"
// CHECK:          "kernel": "{{.*}}_sinks_dlse_{{.*}}_dot_do_o",
// CHECK-NOT:      "kernel": "{{.*}}_convert_dsinks"
// CHECK:        "kernels": {

// DET:      "dsinks_acc": {
// DET-NEXT:   "role": "workspace",
// DET-NEXT:   "dtype": "f32",
// DET-NEXT:   "rank": 3,
// DET-NOT:    "buffer": "dsinks"
// DET:        "kernel": "{{.*}}_det_sinks_{{.*}}_dot_do_o",
// DET:        "kernel": "{{.*}}_det_sinks_{{.*}}_convert_dsinks",
// DET-NEXT:   "args": [
// DET-NEXT:     {
// DET-NEXT:       "buffer": "dsinks_acc"
// DET-NEXT:     },
// DET-NEXT:     {
// DET-NEXT:       "buffer": "dsinks"
// DET:        "block": [
// DET-NEXT:     32,
