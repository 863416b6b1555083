// SPDX-License-Identifier: Apache-2.0

package half

import (
	"math"
	"testing"
)

// Every fp16 value survives a round trip through float32, and rounding a
// float32 picks the nearer neighbour (ties to even) among fp16 values.
func TestFloat16RoundTripAndRounding(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := ToFloat32(uint16(h))
		if f != f { // NaN
			if g := FromFloat32(f); ToFloat32(g) == ToFloat32(g) {
				t.Fatalf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := FromFloat32(f); g != uint16(h) {
			t.Fatalf("fp16 %#04x -> %v -> %#04x", h, f, g)
		}
	}
	cases := []struct {
		in   float32
		want float32
	}{
		{1 + 1.0/2048, 1},            // halfway between 1 and 1+2^-10: even (1)
		{1 + 3.0/2048, 1 + 2.0/1024}, // halfway: to even mantissa
		{65504, 65504},
		{65520, float32(math.Inf(1))}, // rounds up past the largest finite
		{-2.5e-8, 0},                  // below half the smallest subnormal
		{6e-8, 5.9604645e-08},         // the smallest subnormal
		{0.1, 0.099975586},
	}
	for _, c := range cases {
		if got := ToFloat32(FromFloat32(c.in)); got != c.want && !(got == 0 && c.want == 0) {
			t.Errorf("fp16(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestBFloat16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BFloat16ToFloat32(uint16(h))
		if f != f {
			continue
		}
		if g := BFloat16FromFloat32(f); g != uint16(h) {
			t.Fatalf("bf16 %#04x -> %v -> %#04x", h, f, g)
		}
	}
	if got := BFloat16ToFloat32(BFloat16FromFloat32(1 + 1.0/256)); got != 1 {
		t.Errorf("tie to even: got %v", got)
	}
	if got := BFloat16ToFloat32(BFloat16FromFloat32(1 + 3.0/256)); got != 1+2.0/128 {
		t.Errorf("tie to even: got %v", got)
	}
	if g := BFloat16FromFloat32(float32(math.NaN())); BFloat16ToFloat32(g) == BFloat16ToFloat32(g) {
		t.Errorf("NaN lost: %#04x", g)
	}
}
