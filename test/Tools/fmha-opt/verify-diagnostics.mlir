// Every way of pointing an expected diagnostic at a line, across split chunks (absolute lines).
// RUN: fmha-opt %s -split-input-file -verify-diagnostics

func.func @next_line(%i: index) -> f32 {
  // expected-error @+1 {{'fmha.exp2' op operand #0 ('x') must be f32 or a 1-D vector of it, got index}}
  %e = "fmha.exp2"(%i) : (index) -> f32
  return %e : f32
}

// -----

func.func @same_line(%i: index) -> f32 {
  %e = "fmha.exp2"(%i) : (index) -> f32 // expected-error {{must be f32 or a 1-D vector of it, got index}}
  return %e : f32
}

// -----

func.func @previous_line(%i: index) -> f32 {
  %e = "fmha.exp2"(%i) : (index) -> f32
  // expected-error @-1 {{must be f32}}
  return %e : f32
}

// -----

func.func @above_and_below(%i: index) -> f16 {
  // expected-error @below {{operand #0 ('x') must be f32}}
  %e = "fmha.wave_reduce"(%i) {kind = "add", width = 64 : i32} : (index) -> f16
  // expected-error @above {{must have one f32 result, got f16}}
  return %e : f16
}

// -----

func.func @regex(%x: f32) -> f32 {
  // expected-error-re @+1 {{attribute 'width' must be a power of two from 2 to 64, got {{[0-9]+}}}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 3 : i32} : (f32) -> f32
  return %r : f32
}

// -----

// Diagnostics of the parser and its notes are checked too.
func.func @parser(%x: f32) -> f32 {
  // expected-error @+2 {{'func.return' op has 0 operands, but enclosing function (@parser) returns 1}}
  // expected-note @+1 {{see current operation}}
  return
}
