// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
)

// fma32 is a*b + c rounded once to float32 (C's fmaf): exact in big.Float,
// then one rounding (a float64 FMA would round twice).
func fma32(a, b, c float32) float32 {
	p := new(big.Float).SetPrec(256).SetFloat64(float64(a))
	p.Mul(p, new(big.Float).SetPrec(256).SetFloat64(float64(b)))
	p.Add(p, new(big.Float).SetPrec(256).SetFloat64(float64(c)))
	f, _ := p.Float32()
	return f
}

func sameBits(a, b []float64) bool {
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// NormFlagRoundXhat (Hugging Face's Llama cast order), every dtype, LayerNorm
// and RMSNorm, gamma in x's dtype, with and without zero-centred gamma:
// y bit for bit against the host's float32 recomputation from the kernel's
// own mean / rstd (x_hat = (s - mean) * rstd in float32, rounded to the
// dtype, times the scale, + beta unfused or as one FMA, rounded); rstd within
// 1e-5 of a float64 reference; the flag changes some 16-bit outputs and no
// fp32 one. Backward: dgamma against float64 sums of dy * round(x_hat);
// dx and dbeta are the flag-off run's bits. Outputs are poisoned first.
func TestGPUNormRoundXhat(t *testing.T) {
	h := gpu(t)
	shapes := []struct {
		rows, cols   int
		zeroCentered bool
	}{{1, 7, false}, {33, 1000, true}, {5, 4104, false}}
	for _, dt := range dtypes {
		changed := 0
		for _, mode := range []fusednorm.NormMode{fusednorm.LayerNorm, fusednorm.RMSNorm} {
			for si, sh := range shapes {
				mname := map[fusednorm.NormMode]string{fusednorm.LayerNorm: "layernorm", fusednorm.RMSNorm: "rmsnorm"}[mode]
				t.Run(name(mname, "/", dt, "/", sh.rows, "x", sh.cols), func(t *testing.T) {
					changed += runRoundXhat(t, h, mode, dt, sh.rows, sh.cols, sh.zeroCentered, uint64(si+10*int(dt)+100*int(mode)))
				})
			}
		}
		t.Logf("%v: the flag changed %d outputs", dt, changed)
		if dt == fusednorm.Float32 && changed != 0 {
			t.Errorf("fp32: the flag changed %d outputs (rounding to fp32 is nothing)", changed)
		}
		if dt != fusednorm.Float32 && changed == 0 && !t.Failed() {
			t.Errorf("%v: the flag changed no output (is it wired?)", dt)
		}
	}
}

// runRoundXhat runs one case and returns how many y elements the flag changed.
func runRoundXhat(t *testing.T, h *fusednorm.Handle, mode fusednorm.NormMode, dt fusednorm.DType, rows, cols int, zc bool, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 7))
	ln := mode == fusednorm.LayerNorm
	n := rows * cols
	xd := tensor(t, dt, []int64{int64(rows), int64(cols)}, nil)
	wd := tensor(t, dt, []int64{int64(cols)}, nil)
	base := fusednorm.NormFlagNone
	if zc {
		base = fusednorm.NormFlagZeroCenteredGamma
	}
	desc := func(f fusednorm.NormFlag) *fusednorm.NormDesc {
		nd, err := fusednorm.NewNorm(mode, -1, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		if err := nd.SetFlags(f); err != nil {
			t.Fatal(err)
		}
		return nd
	}
	on, off := desc(base|fusednorm.NormFlagRoundXhat), desc(base)

	x := alloc(t, dt, n, 0)
	xv := x.upload(t, randn(rng, n, 1, 2))
	gamma := alloc(t, dt, cols, 0)
	gmean := 1.0
	if zc {
		gmean = 0
	}
	gv := gamma.upload(t, randn(rng, cols, gmean, 0.3))
	var beta *dev
	var bv []float64
	if ln {
		beta = alloc(t, dt, cols, 0)
		bv = beta.upload(t, randn(rng, cols, 0, 0.5))
	}
	dy := alloc(t, dt, n, 0)
	dyv := dy.upload(t, randn(rng, n, 0, 1))

	fwd := func(nd *fusednorm.NormDesc) (y, mean, rstd *dev) {
		y, mean, rstd = alloc(t, dt, n, 0), alloc(t, fusednorm.Float32, rows, 0), alloc(t, fusednorm.Float32, rows, 0)
		ws := must[uint64](t)(h.NormFwdWorkspaceSize(nd, xd, xd))
		a := &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, WDesc: wd, Gamma: gamma.Ptr, YDesc: xd, Y: y.Ptr,
			Rstd: rstd.Ptr, Workspace: workspace(t, ws), WorkspaceLen: ws}
		if ln {
			a.Beta, a.Mean = beta.Ptr, mean.Ptr
		}
		if err := h.NormFwd(0, a); err != nil {
			t.Fatal(err)
		}
		return
	}
	y, mean, rstd := fwd(on)
	yOff, _, rstdOff := fwd(off)
	yv, mv, rv := y.download(t), mean.download(t), rstd.download(t)
	if !sameBits(rv, rstdOff.download(t)) {
		t.Errorf("rstd differs from the flag-off run's")
	}
	// x_hat as the kernel computes it (float32), rounded to the dtype.
	xr := func(i int) float32 {
		m := float32(0)
		if ln {
			m = float32(mv[i/cols])
		}
		return float32(round(dt, float64((float32(xv[i])-m)*float32(rv[i/cols]))))
	}
	for r := range rows {
		mu, ms := 0.0, 0.0
		if ln {
			for j := range cols {
				mu += xv[r*cols+j]
			}
			mu /= float64(cols)
		}
		for j := range cols {
			ms += (xv[r*cols+j] - mu) * (xv[r*cols+j] - mu)
		}
		want := 1 / math.Sqrt(ms/float64(cols)+float64(float32(1e-5)))
		if !(math.Abs(rv[r]-want) <= 1e-5*want) {
			t.Errorf("rstd[%d] = %v, float64 reference %v", r, rv[r], want)
		}
	}
	bad := 0
	for i := range n {
		j := i % cols
		sc := float32(gv[j])
		if zc {
			sc = 1 + sc
		}
		p := float32(xr(i) * sc) // the conversion forbids fusing with what follows
		unfused, fused := p, p
		if ln {
			unfused = float32(p + float32(bv[j]))
			fused = fma32(xr(i), sc, float32(bv[j]))
		}
		if yv[i] != round(dt, float64(unfused)) && yv[i] != round(dt, float64(fused)) {
			if bad++; bad <= 5 {
				t.Errorf("y[%d] = %v, want %v (x_hat rounded %v)", i, yv[i], round(dt, float64(unfused)), xr(i))
			}
		}
	}
	changed := 0
	for i, v := range yOff.download(t) {
		if math.Float64bits(v) != math.Float64bits(yv[i]) {
			changed++
		}
	}

	// Backward from the flag-on forward's statistics, flag on and off.
	bwd := func(nd *fusednorm.NormDesc) (dx, dgamma, dbeta *dev) {
		dx, dgamma, dbeta = alloc(t, dt, n, 0), alloc(t, dt, cols, 0), alloc(t, dt, cols, 0)
		ws := must[uint64](t)(h.NormBwdWorkspaceSize(nd, xd, wd))
		a := &fusednorm.NormBwd{Norm: nd, XDesc: xd, X: x.Ptr, DYDesc: xd, DY: dy.Ptr, Rstd: rstd.Ptr, WDesc: wd,
			Gamma: gamma.Ptr, DXDesc: xd, DX: dx.Ptr, DGamma: dgamma.Ptr, Workspace: workspace(t, ws), WorkspaceLen: ws}
		if ln {
			a.Mean, a.DBeta = mean.Ptr, dbeta.Ptr
		}
		if err := h.NormBwd(0, a); err != nil {
			t.Fatal(err)
		}
		return
	}
	dx, dg, db := bwd(on)
	dxOff, _, dbOff := bwd(off)
	if !sameBits(dx.download(t), dxOff.download(t)) {
		t.Errorf("dx differs from the flag-off run's (the flag changes dgamma only)")
	}
	if ln && !sameBits(db.download(t), dbOff.download(t)) {
		t.Errorf("dbeta differs from the flag-off run's")
	}
	got := dg.download(t)
	for j := range cols {
		want, mag := 0.0, 0.0
		for r := range rows {
			v := dyv[r*cols+j] * float64(xr(r*cols+j))
			want += v
			mag += math.Abs(v)
		}
		eps := map[fusednorm.DType]float64{fusednorm.Float32: 0x1p-24, fusednorm.Float16: 0x1p-11, fusednorm.BFloat16: 0x1p-8}[dt]
		if !(math.Abs(got[j]-want) <= 1e-5*mag+eps*math.Abs(want)+1e-6) {
			t.Errorf("dgamma[%d] = %v, float64 sum of dy * round(x_hat) %v", j, got[j], want)
			break
		}
	}
	return changed
}
