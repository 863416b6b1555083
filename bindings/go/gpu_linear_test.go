package fusednorm_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"fusednorm"
)

func geluTanh(z float64) float64 {
	const c = 0.7978845608028654 // sqrt(2/pi)
	return 0.5 * z * (1 + math.Tanh(c*(z+0.044715*z*z*z)))
}

func geluTanhGrad(z float64) float64 {
	const c = 0.7978845608028654
	u := c * (z + 0.044715*z*z*z)
	th := math.Tanh(u)
	return 0.5*(1+th) + 0.5*z*(1-th*th)*c*(1+3*0.044715*z*z)
}

// The fully-connected layer, forward and backward, every epilogue, both
// weight layouts (NK with misaligned pointers), every dtype, odd sizes.
// Tolerances follow the GEMM's own error: a multiple of the dtype's
// precision times the sum of |terms| of each output.
func TestGPULinear(t *testing.T) {
	h := gpu(t)
	if ld, err := fusednorm.NewLinearDesc(); errors.Is(err, fusednorm.ErrNotSupportedBuild) {
		t.Skipf("library built without cuBLASLt: %v", err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		ld.Close()
	}
	epis := []fusednorm.LinearEpilogue{fusednorm.LinearEpilogueNone, fusednorm.LinearEpilogueBias,
		fusednorm.LinearEpilogueBiasReLU, fusednorm.LinearEpilogueBiasGELU}
	epiName := []string{"none", "bias", "bias_relu", "bias_gelu"}
	for _, layout := range []fusednorm.LinearWeightLayout{fusednorm.LinearWeightKN, fusednorm.LinearWeightNK} {
		for _, dt := range dtypes {
			for ei, epi := range epis {
				ln := map[fusednorm.LinearWeightLayout]string{fusednorm.LinearWeightKN: "kn", fusednorm.LinearWeightNK: "nk/misaligned"}[layout]
				t.Run(name(ln, "/", dt, "/", epiName[ei]), func(t *testing.T) {
					runLinearCase(t, h, layout, dt, epi, uint64(ei+10*int(dt)+100*int(layout)))
				})
			}
		}
	}
}

func runLinearCase(t *testing.T, h *fusednorm.Handle, layout fusednorm.LinearWeightLayout, dt fusednorm.DType, epi fusednorm.LinearEpilogue, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	const M, K, N = 7, 19, 13
	off := 0
	if layout == fusednorm.LinearWeightNK {
		off = 1
	}
	// x is [7, 19] given as [1, 7, 19] (leading dimensions collapse into m).
	xd := tensor(t, dt, []int64{1, M, K}, nil)
	wdims := []int64{K, N}
	if layout == fusednorm.LinearWeightNK {
		wdims = []int64{N, K}
	}
	wd := tensor(t, dt, wdims, nil)
	yd := tensor(t, dt, []int64{1, M, N}, nil)
	desc, err := fusednorm.NewLinear(epi, layout, fusednorm.LinearFlagNone)
	if err != nil {
		t.Fatal(err)
	}
	defer desc.Close()
	hasBias := epi != fusednorm.LinearEpilogueNone

	x := alloc(t, dt, M*K, off)
	xv := x.upload(t, randn(rng, M*K, 0, 1))
	w := alloc(t, dt, K*N, off)
	wv := w.upload(t, randn(rng, K*N, 0, 0.3))
	W := func(k, n int) float64 { // logical [k][n]
		if layout == fusednorm.LinearWeightNK {
			return wv[n*K+k]
		}
		return wv[k*N+n]
	}
	var bias *dev
	var bv []float64
	if hasBias {
		bias = alloc(t, dt, N, off)
		bv = bias.upload(t, randn(rng, N, 0, 0.5))
	}
	y := alloc(t, dt, M*N, off)
	auxN := must[uint64](t)(h.LinearAuxSize(desc, yd))
	aux := workspace(t, auxN) // cudaMalloc'd: 16-byte aligned as required
	ws := must[uint64](t)(h.LinearFwdWorkspaceSize(desc, xd, wd, yd))
	fa := &fusednorm.LinearFwd{Desc: desc, XDesc: xd, X: x.Ptr, WDesc: wd, W: w.Ptr, YDesc: yd, Y: y.Ptr,
		Aux: aux, AuxLen: auxN, Workspace: workspace(t, ws), WorkspaceLen: ws}
	if hasBias {
		fa.Bias = bias.Ptr
	}
	if err := h.LinearFwd(0, fa); err != nil {
		t.Fatal(err)
	}
	prec := map[fusednorm.DType]float64{fusednorm.Float32: 1.0 / (1 << 20), fusednorm.Float16: 1.0 / (1 << 9), fusednorm.BFloat16: 1.0 / (1 << 6)}[dt]
	z, zmag := make([]float64, M*N), make([]float64, M*N)
	yRef := make([]float64, M*N)
	for i := range M {
		for n := range N {
			s, a := 0.0, 0.0
			for k := range K {
				s += xv[i*K+k] * W(k, n)
				a += math.Abs(xv[i*K+k] * W(k, n))
			}
			if hasBias {
				s += bv[n]
				a += math.Abs(bv[n])
			}
			z[i*N+n], zmag[i*N+n] = s, a
			switch epi {
			case fusednorm.LinearEpilogueBiasReLU:
				s = max(s, 0)
			case fusednorm.LinearEpilogueBiasGELU:
				s = geluTanh(s)
			}
			yRef[i*N+n] = s
		}
	}
	checkMag(t, "y", y.download(t), yRef, zmag, prec)

	// Backward: dx, dw and db.
	dy := alloc(t, dt, M*N, off)
	dyv := dy.upload(t, randn(rng, M*N, 0, 1))
	dz := make([]float64, M*N)
	for i := range dz {
		dz[i] = dyv[i]
		switch epi {
		case fusednorm.LinearEpilogueBiasReLU:
			if z[i] <= 0 {
				dz[i] = 0
			}
		case fusednorm.LinearEpilogueBiasGELU:
			dz[i] *= geluTanhGrad(z[i])
		}
	}
	dx := alloc(t, dt, M*K, off)
	dw := alloc(t, dt, K*N, off)
	wsb := must[uint64](t)(h.LinearBwdWorkspaceSize(desc, xd, wd, yd, nil))
	ba := &fusednorm.LinearBwd{Desc: desc, XDesc: xd, X: x.Ptr, WDesc: wd, W: w.Ptr, DYDesc: yd, DY: dy.Ptr,
		DXDesc: xd, DX: dx.Ptr, DW: dw.Ptr, Workspace: workspace(t, wsb), WorkspaceLen: wsb}
	if auxN > 0 {
		ba.Aux, ba.AuxLen = aux, auxN
	}
	var db *dev
	if hasBias {
		db = alloc(t, dt, N, off)
		ba.DB = db.Ptr
	}
	if err := h.LinearBwd(0, ba); err != nil {
		t.Fatal(err)
	}
	dxRef, dxMag := make([]float64, M*K), make([]float64, M*K)
	for i := range M {
		for k := range K {
			for n := range N {
				dxRef[i*K+k] += dz[i*N+n] * W(k, n)
				dxMag[i*K+k] += math.Abs(dz[i*N+n] * W(k, n))
			}
		}
	}
	checkMag(t, "dx", dx.download(t), dxRef, dxMag, prec)
	dwRef, dwMag := make([]float64, K*N), make([]float64, K*N)
	for k := range K {
		for n := range N {
			j := k*N + n
			if layout == fusednorm.LinearWeightNK {
				j = n*K + k
			}
			for i := range M {
				dwRef[j] += xv[i*K+k] * dz[i*N+n]
				dwMag[j] += math.Abs(xv[i*K+k] * dz[i*N+n])
			}
		}
	}
	checkMag(t, "dw", dw.download(t), dwRef, dwMag, prec)
	if db != nil {
		dbRef, dbMag := make([]float64, N), make([]float64, N)
		for n := range N {
			for i := range M {
				dbRef[n] += dz[i*N+n]
				dbMag[n] += math.Abs(dz[i*N+n])
			}
		}
		checkMag(t, "db", db.download(t), dbRef, dbMag, prec)
	}
}

// checkMag: |got - want| <= 4 * prec * (sum of |terms| + |want|) + 1e-6;
// NaN never passes.
func checkMag(t *testing.T, what string, got, want, mag []float64, prec float64) {
	t.Helper()
	bad, wi, worst := 0, 0, 0.0
	for i := range want {
		lim := 4*prec*(mag[i]+math.Abs(want[i])) + 1e-6
		d := math.Abs(got[i] - want[i])
		if !(d <= lim) {
			bad++
		}
		if r := d / lim; !(r <= worst) {
			worst, wi = r, i
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off; worst [%d] got %v want %v (magnitude %.3g)", what, bad, len(want), wi, got[wi], want[wi], mag[wi])
	}
}
