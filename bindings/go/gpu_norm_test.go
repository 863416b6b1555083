// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
)

// gather takes the rows x cols values of a tensor whose rows are ld apart.
func gather(full []float64, rows, cols, ld int) []float64 {
	out := make([]float64, 0, rows*cols)
	for r := range rows {
		out = append(out, full[r*ld:r*ld+cols]...)
	}
	return out
}

// normRef is the float64 forward: s = x (+ r, rounded to x's dtype),
// y = normalized s, and the statistics.
func normRef(mode fusednorm.NormMode, dt fusednorm.DType, x, r, gamma, beta []float64, rows, cols int, eps float64, zeroCentered bool) (s, y, mean, rstd []float64) {
	s = make([]float64, rows*cols)
	y = make([]float64, rows*cols)
	mean = make([]float64, rows)
	rstd = make([]float64, rows)
	for i := range rows {
		row := s[i*cols : (i+1)*cols]
		for j := range cols {
			row[j] = x[i*cols+j]
			if r != nil {
				row[j] = round(dt, row[j]+r[i*cols+j])
			}
		}
		mu, ms := 0.0, 0.0
		for _, v := range row {
			mu += v
		}
		mu /= float64(cols)
		for _, v := range row {
			if mode == fusednorm.LayerNorm {
				ms += (v - mu) * (v - mu)
			} else {
				ms += v * v
			}
		}
		ms /= float64(cols)
		rs := 1 / math.Sqrt(ms+eps)
		if mode == fusednorm.RMSNorm {
			mu = 0
		}
		mean[i], rstd[i] = mu, rs
		for j, v := range row {
			g := gammaAt(gamma, j, zeroCentered)
			b := 0.0
			if beta != nil {
				b = beta[j]
			}
			y[i*cols+j] = (v-mu)*rs*g + b
		}
	}
	return
}

// gammaAt is the scale the reference applies in column j: gamma[j] (1
// without gamma), plus 1 where gamma is zero-centred.
func gammaAt(gamma []float64, j int, zeroCentered bool) float64 {
	gm := 1.0
	if gamma != nil {
		gm = gamma[j]
	}
	if zeroCentered {
		gm += 1
	}
	return gm
}

// normBwdRef: dx (plus dsum), dgamma, dbeta from the float64 statistics.
func normBwdRef(mode fusednorm.NormMode, s, dy, gamma, dsum, mean, rstd []float64, rows, cols int, zeroCentered bool) (dx, dgamma, dbeta []float64) {
	dx = make([]float64, rows*cols)
	dgamma = make([]float64, cols)
	dbeta = make([]float64, cols)
	for i := range rows {
		mg, mgx := 0.0, 0.0
		for j := range cols {
			gm := gammaAt(gamma, j, zeroCentered)
			xh := (s[i*cols+j] - mean[i]) * rstd[i]
			g := dy[i*cols+j] * gm
			mg += g
			mgx += g * xh
			dgamma[j] += dy[i*cols+j] * xh
			dbeta[j] += dy[i*cols+j]
		}
		mg /= float64(cols)
		mgx /= float64(cols)
		if mode == fusednorm.RMSNorm {
			mg = 0
		}
		for j := range cols {
			gm := gammaAt(gamma, j, zeroCentered)
			xh := (s[i*cols+j] - mean[i]) * rstd[i]
			dx[i*cols+j] = rstd[i] * (dy[i*cols+j]*gm - mg - xh*mgx)
			if dsum != nil {
				dx[i*cols+j] += dsum[i*cols+j]
			}
		}
	}
	return
}

type normCase struct {
	name         string
	rows, cols   int
	ld           int // row stride (>= cols)
	off          int // element offset of every data pointer (1: misaligned)
	residual     bool
	wFloat32     bool // gamma/beta in fp32 rather than x's dtype
	zeroCentered bool
}

// LayerNorm and RMSNorm, forward and backward, every dtype, on small odd
// shapes: with residual add (sum written out, dsum in backward) and
// misaligned pointers; with padded rows and fp32 parameters; zero-centred
// gamma. Outputs are poisoned (NaN) before each launch.
func TestGPUNorm(t *testing.T) {
	h := gpu(t)
	cases := []normCase{
		{name: "7x37/residual/misaligned", rows: 7, cols: 37, ld: 37, off: 1, residual: true},
		{name: "5x1029/padded-rows/fp32-params", rows: 5, cols: 1029, ld: 1032, wFloat32: true},
		{name: "3x5/zero-centred-gamma", rows: 3, cols: 5, ld: 5, zeroCentered: true},
		{name: "2x3000/residual", rows: 2, cols: 3000, ld: 3000, residual: true, off: 1},
	}
	for _, mode := range []fusednorm.NormMode{fusednorm.LayerNorm, fusednorm.RMSNorm} {
		for _, dt := range dtypes {
			for ci, c := range cases {
				mname := map[fusednorm.NormMode]string{fusednorm.LayerNorm: "layernorm", fusednorm.RMSNorm: "rmsnorm"}[mode]
				t.Run(name(mname, "/", dt, "/", c.name), func(t *testing.T) {
					runNormCase(t, h, mode, dt, c, uint64(ci*10+int(dt)+int(mode)*100))
				})
			}
		}
	}
}

func runNormCase(t *testing.T, h *fusednorm.Handle, mode fusednorm.NormMode, dt fusednorm.DType, c normCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	rows, cols, ld := c.rows, c.cols, c.ld
	const eps = 1e-5
	n := rows * ld
	strides := []int64{int64(ld), 1}
	dims := []int64{int64(rows), int64(cols)}
	xd := tensor(t, dt, dims, strides)
	wdt := dt
	if c.wFloat32 {
		wdt = fusednorm.Float32
	}
	wd := tensor(t, wdt, []int64{int64(cols)}, nil)
	nd, err := fusednorm.NewNorm(mode, -1, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if c.zeroCentered {
		if err := nd.SetFlags(fusednorm.NormFlagZeroCenteredGamma); err != nil {
			t.Fatal(err)
		}
	}

	x := alloc(t, dt, n, c.off)
	xv := gather(x.upload(t, randn(rng, n, 0.5, 2)), rows, cols, ld)
	var r, sum *dev
	var rv []float64
	if c.residual {
		r = alloc(t, dt, n, c.off)
		rv = gather(r.upload(t, randn(rng, n, -0.3, 1)), rows, cols, ld)
		sum = alloc(t, dt, n, c.off)
	}
	gamma := alloc(t, wdt, cols, c.off)
	gv := gamma.upload(t, randn(rng, cols, 1, 0.5))
	var beta *dev
	var bv []float64
	if mode == fusednorm.LayerNorm {
		beta = alloc(t, wdt, cols, c.off)
		bv = beta.upload(t, randn(rng, cols, 0, 0.5))
	}
	y := alloc(t, dt, n, c.off)
	mean := alloc(t, fusednorm.Float32, rows, 0)
	rstd := alloc(t, fusednorm.Float32, rows, 0)

	ws := must[uint64](t)(h.NormFwdWorkspaceSize(nd, xd, xd))
	fa := &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, WDesc: wd, Gamma: gamma.Ptr,
		YDesc: xd, Y: y.Ptr, Rstd: rstd.Ptr, Workspace: workspace(t, ws), WorkspaceLen: ws}
	if beta != nil {
		fa.Beta = beta.Ptr
		fa.Mean = mean.Ptr
	}
	if c.residual {
		fa.Residual, fa.Sum = r.Ptr, sum.Ptr
	}
	if err := h.NormFwd(0, fa); err != nil {
		t.Fatal(err)
	}
	s, yRef, meanRef, rstdRef := normRef(mode, dt, xv, rv, gv, bv, rows, cols, eps, c.zeroCentered)
	tl := tolOf(dt)
	compare(t, "y", gather(y.download(t), rows, cols, ld), yRef, tl)
	compare(t, "rstd", rstd.download(t), rstdRef, tol{1e-4, 1e-5})
	if mode == fusednorm.LayerNorm {
		compare(t, "mean", mean.download(t), meanRef, tol{1e-5, 1e-5})
	}
	if c.residual {
		compare(t, "sum", gather(sum.download(t), rows, cols, ld), s, tl)
	}

	// Backward from the forward's saved statistics.
	dy := alloc(t, dt, n, c.off)
	dyv := gather(dy.upload(t, randn(rng, n, 0, 1)), rows, cols, ld)
	var dsum *dev
	var dsv []float64
	xs := x // what was normalized
	if c.residual {
		dsum = alloc(t, dt, n, c.off)
		dsv = gather(dsum.upload(t, randn(rng, n, 0, 0.5)), rows, cols, ld)
		xs = sum
	}
	dx := alloc(t, dt, n, c.off)
	dgamma := alloc(t, wdt, cols, c.off)
	wsb := must[uint64](t)(h.NormBwdWorkspaceSize(nd, xd, wd))
	ba := &fusednorm.NormBwd{Norm: nd, XDesc: xd, X: xs.Ptr, DYDesc: xd, DY: dy.Ptr, Rstd: rstd.Ptr,
		WDesc: wd, Gamma: gamma.Ptr, DXDesc: xd, DX: dx.Ptr, DGamma: dgamma.Ptr,
		Workspace: workspace(t, wsb), WorkspaceLen: wsb}
	var dbeta *dev
	if mode == fusednorm.LayerNorm {
		ba.Mean = mean.Ptr
		dbeta = alloc(t, wdt, cols, c.off)
		ba.DBeta = dbeta.Ptr
	}
	if dsum != nil {
		ba.DSum = dsum.Ptr
	}
	if err := h.NormBwd(0, ba); err != nil {
		t.Fatal(err)
	}
	dxRef, dgRef, dbRef := normBwdRef(mode, s, dyv, gv, dsv, meanRef, rstdRef, rows, cols, c.zeroCentered)
	compare(t, "dx", gather(dx.download(t), rows, cols, ld), dxRef, tl)
	wtl := tolOf(wdt)
	wtl.rtol, wtl.atol = max(wtl.rtol, 1e-4), max(wtl.atol, 1e-4) // sums over rows in fp32
	compare(t, "dgamma", dgamma.download(t), dgRef, wtl)
	if dbeta != nil {
		compare(t, "dbeta", dbeta.download(t), dbRef, wtl)
	}
}
