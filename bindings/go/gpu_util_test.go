// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

// Helpers of the GPU tests (package fusednorm_test: they use only the public
// API, as a user would, plus devmem for device memory and half for the
// 16-bit formats).

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
	"github.com/libfusednorm/libfusednorm/bindings/go/half"
)

// gpu returns a handle, or skips the test (with the reason) without a device.
func gpu(t *testing.T) *fusednorm.Handle {
	t.Helper()
	if err := devmem.Available(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	h, err := fusednorm.NewHandle()
	if errors.Is(err, fusednorm.ErrNoDevice) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

var dtypes = []fusednorm.DType{fusednorm.Float32, fusednorm.Float16, fusednorm.BFloat16}

// round is v as the dtype holds it.
func round(dt fusednorm.DType, v float64) float64 {
	switch dt {
	case fusednorm.Float16:
		return float64(half.ToFloat32(half.FromFloat32(float32(v))))
	case fusednorm.BFloat16:
		return float64(half.BFloat16ToFloat32(half.BFloat16FromFloat32(float32(v))))
	}
	return float64(float32(v))
}

// tol is the per-dtype tolerance: |got - want| <= rtol*|want| + atol*scale,
// scale being the largest |want| of the tensor (or a magnitude given).
type tol struct{ rtol, atol float64 }

func tolOf(dt fusednorm.DType) tol {
	switch dt {
	case fusednorm.Float16:
		return tol{2e-3, 2e-3} // output rounding 2^-11, fp32 math
	case fusednorm.BFloat16:
		return tol{1.6e-2, 1.6e-2} // output rounding 2^-8
	}
	return tol{2e-5, 2e-5}
}

// dev is a device buffer of n elements of dt, starting off elements into
// its allocation (off = 1 makes every pointer only element-aligned).
type dev struct {
	dt   fusednorm.DType
	n    int
	Ptr  fusednorm.DevicePtr
	base fusednorm.DevicePtr
}

func alloc(t *testing.T, dt fusednorm.DType, n, off int) *dev {
	t.Helper()
	sz := uint64(dt.Size())
	base, err := devmem.Malloc(uint64(n+off)*sz + 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devmem.Free(base) })
	d := &dev{dt: dt, n: n, base: base, Ptr: base.Add(uint64(off) * sz)}
	d.poison(t)
	return d
}

// poison fills the buffer with all-ones bytes: NaN in fp32, fp16 and bf16.
func (d *dev) poison(t *testing.T) {
	t.Helper()
	if err := devmem.Memset(d.Ptr, 0xff, uint64(d.n*d.dt.Size())); err != nil {
		t.Fatal(err)
	}
}

// upload rounds v to the buffer's dtype, copies it, and returns the rounded
// values (what the reference must use).
func (d *dev) upload(t *testing.T, v []float64) []float64 {
	t.Helper()
	if len(v) != d.n {
		t.Fatalf("upload of %d values into %d", len(v), d.n)
	}
	r := make([]float64, len(v))
	var err error
	switch d.dt {
	case fusednorm.Float32:
		b := make([]float32, len(v))
		for i, x := range v {
			b[i] = float32(x)
			r[i] = float64(b[i])
		}
		err = devmem.Upload(d.Ptr, b)
	default:
		b := make([]uint16, len(v))
		for i, x := range v {
			if d.dt == fusednorm.Float16 {
				b[i] = half.FromFloat32(float32(x))
				r[i] = float64(half.ToFloat32(b[i]))
			} else {
				b[i] = half.BFloat16FromFloat32(float32(x))
				r[i] = float64(half.BFloat16ToFloat32(b[i]))
			}
		}
		err = devmem.Upload(d.Ptr, b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (d *dev) download(t *testing.T) []float64 {
	t.Helper()
	if err := devmem.Synchronize(); err != nil {
		t.Fatal(err)
	}
	r := make([]float64, d.n)
	switch d.dt {
	case fusednorm.Float32:
		b := make([]float32, d.n)
		if err := devmem.Download(b, d.Ptr); err != nil {
			t.Fatal(err)
		}
		for i, x := range b {
			r[i] = float64(x)
		}
	default:
		b := make([]uint16, d.n)
		if err := devmem.Download(b, d.Ptr); err != nil {
			t.Fatal(err)
		}
		for i, x := range b {
			if d.dt == fusednorm.Float16 {
				r[i] = float64(half.ToFloat32(x))
			} else {
				r[i] = float64(half.BFloat16ToFloat32(x))
			}
		}
	}
	return r
}

func randn(rng *rand.Rand, n int, mean, std float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = mean + std*rng.NormFloat64()
	}
	return v
}

// compare checks got against want; NaN never passes. idx maps the compared
// positions (nil: all) for strided tensors. Returns the worst error ratio.
func compare(t *testing.T, what string, got, want []float64, tl tol) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	worst, wi, bad := 0.0, -1, 0
	for i := range want {
		lim := tl.rtol*math.Abs(want[i]) + tl.atol*scale
		d := math.Abs(got[i] - want[i])
		if !(d <= lim) { // NaN fails here
			bad++
		}
		r := d / lim
		if math.IsNaN(r) || lim == 0 && d != 0 {
			r = math.Inf(1)
		}
		if wi < 0 || r > worst {
			worst, wi = r, i
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off; worst [%d] got %v want %v (limit %.3g)",
			what, bad, len(want), wi, got[wi], want[wi], tl.rtol*math.Abs(want[wi])+tl.atol*scale)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func tensor(t *testing.T, dt fusednorm.DType, dims, strides []int64) *fusednorm.TensorDesc {
	t.Helper()
	d, err := fusednorm.NewTensor(dt, dims, strides)
	if err != nil {
		t.Fatalf("tensor %v %v %v: %v", dt, dims, strides, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// workspace allocates n bytes (nil pointer for 0), 256-byte aligned.
func workspace(t *testing.T, n uint64) fusednorm.DevicePtr {
	t.Helper()
	if n == 0 {
		return 0
	}
	p, err := devmem.Malloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devmem.Free(p) })
	return p
}

func name(parts ...any) string { return fmt.Sprint(parts...) }
