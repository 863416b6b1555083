// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
)

// fp8Value is an FP8 code's value by the OCP definition (mant 3: E4M3,
// 2: E5M2); NaN for NaN codes.
func fp8Value(code uint8, mant uint) float64 {
	ebits, bias := 4, 7
	if mant == 2 {
		ebits, bias = 5, 15
	}
	e := int(code>>mant) & (1<<ebits - 1)
	m := float64(code & (1<<mant - 1))
	sign := 1.0
	if code&0x80 != 0 {
		sign = -1
	}
	if (mant == 3 && e == 15 && m == 7) || (mant == 2 && e == 31) {
		if mant == 2 && m == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	if e == 0 {
		return sign * math.Ldexp(m, 1-bias-int(mant))
	}
	return sign * math.Ldexp(1+m/float64(int(1)<<mant), e-bias)
}

// fp8Ref is the header's FP8 rule for the fp32 value t: clamp, nearest
// code, ties to the even code, NaN -> 0x7F (by search over the codes).
func fp8Ref(t float32, mant uint) uint8 {
	if t != t {
		return 0x7f
	}
	top, max := uint8(0x7e), 448.0
	if mant == 2 {
		top, max = 0x7b, 57344
	}
	a := math.Min(math.Abs(float64(t)), max)
	best := uint8(0)
	for c := uint8(0); c <= top; c++ {
		d, db := math.Abs(fp8Value(c, mant)-a), math.Abs(fp8Value(best, mant)-a)
		if d < db || (d == db && c%2 == 0) {
			best = c
		}
	}
	if math.Signbit(float64(t)) {
		best |= 0x80
	}
	return best
}

// int8Ref: nearest, ties to even, clamped to [-127, 127]; NaN -> 0.
func int8Ref(t float32) int8 {
	if t != t {
		return 0
	}
	return int8(math.Max(-127, math.Min(127, math.RoundToEven(float64(t)))))
}

// The quantized forward against the header's rules applied to the very
// fp32 values the library's fp32 forward writes: codes, per-token scales and
// amax bit for bit; LayerNorm and RMSNorm, padded rows, misaligned pointers.
func TestGPUNormQuant(t *testing.T) {
	h := gpu(t)
	type qc struct {
		name    string
		out     fusednorm.DType
		scaling fusednorm.QuantScaling
	}
	outs := []qc{
		{"e4m3/static", fusednorm.Float8E4M3, fusednorm.QuantPerTensor},
		{"e4m3/per-token", fusednorm.Float8E4M3, fusednorm.QuantPerToken},
		{"e5m2/per-token", fusednorm.Float8E5M2, fusednorm.QuantPerToken},
		{"int8/per-token", fusednorm.Int8, fusednorm.QuantPerToken},
	}
	shapes := []struct {
		rows, cols, ld, off int
	}{{7, 37, 37, 1}, {5, 1029, 1032, 0}, {2, 3000, 3000, 1}}
	for _, mode := range []fusednorm.NormMode{fusednorm.LayerNorm, fusednorm.RMSNorm} {
		for qi, q := range outs {
			for si, sh := range shapes {
				t.Run(name(mode, "/", q.name, "/", sh.rows, "x", sh.cols), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(qi*10+si), uint64(mode)))
					rows, cols, ld := sh.rows, sh.cols, sh.ld
					n := rows * ld
					dims, strides := []int64{int64(rows), int64(cols)}, []int64{int64(ld), 1}
					xd := tensor(t, fusednorm.Float32, dims, strides)
					qd := tensor(t, q.out, dims, strides)
					wd := tensor(t, fusednorm.Float32, []int64{int64(cols)}, nil)
					nd, err := fusednorm.NewNorm(mode, -1, 1e-5)
					if err != nil {
						t.Fatal(err)
					}
					defer nd.Close()
					x := alloc(t, fusednorm.Float32, n, sh.off)
					x.upload(t, randn(rng, n, 1, 2))
					gamma := alloc(t, fusednorm.Float32, cols, 0)
					gamma.upload(t, randn(rng, cols, 1, 0.5))
					beta := alloc(t, fusednorm.Float32, cols, 0)
					beta.upload(t, randn(rng, cols, 0, 0.5))
					y := alloc(t, fusednorm.Float32, n, sh.off)
					fa := &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, WDesc: wd, Gamma: gamma.Ptr, YDesc: xd, Y: y.Ptr}
					qa := &fusednorm.NormFwdQuant{NormFwd: *fa, Scaling: q.scaling}
					qa.YDesc = qd
					if mode == fusednorm.LayerNorm {
						fa.Beta, qa.Beta = beta.Ptr, beta.Ptr
					}
					if err := h.NormFwd(0, fa); err != nil {
						t.Fatal(err)
					}
					codes, err := devmem.Malloc(uint64(n + sh.off))
					if err != nil {
						t.Fatal(err)
					}
					defer devmem.Free(codes)
					qa.Y = codes.Add(uint64(sh.off))
					sb := must[uint64](t)(h.NormFwdQuantScaleSize(nd, xd, q.scaling))
					scale := alloc(t, fusednorm.Float32, int(sb/4), 0)
					const static = float32(0.0173)
					if q.scaling == fusednorm.QuantPerTensor {
						scale.upload(t, []float64{float64(static)})
					}
					amax := alloc(t, fusednorm.Float32, 1, 0)
					qa.Scale, qa.Amax = scale.Ptr, amax.Ptr
					if err := h.NormFwdQuant(0, qa); err != nil {
						t.Fatal(err)
					}
					v := y.download(t)
					got := make([]uint8, n)
					if err := devmem.Download(got, qa.Y); err != nil {
						t.Fatal(err)
					}
					scales := scale.download(t)
					m, floor := float32(448), float32(1)/(448*512)
					switch q.out {
					case fusednorm.Float8E5M2:
						m, floor = 57344, float32(1)/(57344*512)
					case fusednorm.Int8:
						m, floor = 127, float32(math.Ldexp(1, -23))
					}
					bad, amaxRef := 0, float32(0)
					for r := range rows {
						a := float32(0)
						for c := range cols {
							a = max(a, float32(math.Abs(v[r*ld+c])))
						}
						amaxRef = max(amaxRef, a)
						s := static
						if q.scaling == fusednorm.QuantPerToken {
							s = max(a/m, floor)
							if float32(scales[r]) != s {
								t.Errorf("scale[%d] = %v, want %v", r, scales[r], s)
							}
						}
						for c := range cols {
							tv := float32(v[r*ld+c]) / s
							var want uint8
							switch q.out {
							case fusednorm.Float8E4M3:
								want = fp8Ref(tv, 3)
							case fusednorm.Float8E5M2:
								want = fp8Ref(tv, 2)
							default:
								want = uint8(int8Ref(tv))
							}
							if g := got[r*ld+c]; g != want {
								if bad++; bad <= 5 {
									t.Errorf("[%d,%d] v %v / %v: code %#02x, want %#02x", r, c, v[r*ld+c], s, g, want)
								}
							}
						}
					}
					if a := float32(amax.download(t)[0]); a != amaxRef {
						t.Errorf("amax = %v, want %v", a, amaxRef)
					}
					if bad > 0 {
						t.Errorf("%d of %d codes differ", bad, rows*cols)
					}
				})
			}
		}
	}
	// INT8 with a static scale is refused.
	nd, _ := fusednorm.NewNorm(fusednorm.RMSNorm, -1, 1e-6)
	defer nd.Close()
	xd := tensor(t, fusednorm.Float32, []int64{4, 64}, nil)
	qd := tensor(t, fusednorm.Int8, []int64{4, 64}, nil)
	if _, err := h.NormFwdQuantWorkspaceSize(nd, xd, qd, fusednorm.QuantPerTensor); err == nil {
		t.Error("INT8 with a per-tensor scale was accepted")
	}
}
