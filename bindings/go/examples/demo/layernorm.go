// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
)

// LayerNorm forward and backward, fp32, checked against a float64 reference.
func layerNorm(h *fusednorm.Handle) (string, error) {
	const rows, cols, eps = 64, 768, 1e-5
	x, err := fusednorm.NewTensor(fusednorm.Float32, []int64{rows, cols}, nil)
	if err != nil {
		return "", err
	}
	defer x.Close()
	w, err := fusednorm.NewTensor(fusednorm.Float32, []int64{cols}, nil)
	if err != nil {
		return "", err
	}
	defer w.Close()
	norm, err := fusednorm.NewNorm(fusednorm.LayerNorm, -1, eps)
	if err != nil {
		return "", err
	}
	defer norm.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	xh, gh, bh, dyh := normals(rng, rows*cols, 3, 2), normals(rng, cols, 1, 0.2), normals(rng, cols, 0, 0.2), normals(rng, rows*cols, 0, 1)

	// Device buffers: inputs, outputs, saved statistics.
	var bufs []fusednorm.DevicePtr
	defer func() {
		for _, p := range bufs {
			devmem.Free(p)
		}
	}()
	mk := func(n uint64, init []float32) (fusednorm.DevicePtr, error) {
		p, err := devmem.Malloc(n * 4)
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, p)
		if init != nil {
			return p, devmem.Upload(p, init)
		}
		return p, devmem.Memset(p, 0xff, n*4) // NaN until written
	}
	dX, e1 := mk(rows*cols, xh)
	dG, e2 := mk(cols, gh)
	dB, e3 := mk(cols, bh)
	dY, e4 := mk(rows*cols, nil)
	dMean, e5 := mk(rows, nil)
	dRstd, e6 := mk(rows, nil)
	dDY, e7 := mk(rows*cols, dyh)
	dDX, e8 := mk(rows*cols, nil)
	dDG, e9 := mk(cols, nil)
	dDB, e10 := mk(cols, nil)
	if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8, e9, e10); err != nil {
		return "", err
	}

	fws, err := h.NormFwdWorkspaceSize(norm, x, x)
	if err != nil {
		return "", err
	}
	bws, err := h.NormBwdWorkspaceSize(norm, x, w)
	if err != nil {
		return "", err
	}
	ws, err := mk(max(fws, bws)/4+1, nil)
	if err != nil {
		return "", err
	}
	if err := h.NormFwd(0, &fusednorm.NormFwd{Norm: norm, XDesc: x, X: dX, WDesc: w, Gamma: dG, Beta: dB,
		YDesc: x, Y: dY, Mean: dMean, Rstd: dRstd, Workspace: ws, WorkspaceLen: fws}); err != nil {
		return "", err
	}
	if err := h.NormBwd(0, &fusednorm.NormBwd{Norm: norm, XDesc: x, X: dX, DYDesc: x, DY: dDY,
		Mean: dMean, Rstd: dRstd, WDesc: w, Gamma: dG, DXDesc: x, DX: dDX, DGamma: dDG, DBeta: dDB,
		Workspace: ws, WorkspaceLen: bws}); err != nil {
		return "", err
	}
	if err := devmem.Synchronize(); err != nil {
		return "", err
	}
	y, dx, dg, db := make([]float32, rows*cols), make([]float32, rows*cols), make([]float32, cols), make([]float32, cols)
	for _, c := range []struct {
		dst []float32
		src fusednorm.DevicePtr
	}{{y, dY}, {dx, dDX}, {dg, dDG}, {db, dDB}} {
		if err := devmem.Download(c.dst, c.src); err != nil {
			return "", err
		}
	}

	// float64 reference.
	yr, dxr := make([]float64, rows*cols), make([]float64, rows*cols)
	dgr, dbr := make([]float64, cols), make([]float64, cols)
	for r := range rows {
		row := xh[r*cols : (r+1)*cols]
		mu, v := 0.0, 0.0
		for _, a := range row {
			mu += float64(a)
		}
		mu /= cols
		for _, a := range row {
			v += (float64(a) - mu) * (float64(a) - mu)
		}
		rs := 1 / math.Sqrt(v/cols+eps)
		mg, mgx := 0.0, 0.0
		for j, a := range row {
			xhat := (float64(a) - mu) * rs
			yr[r*cols+j] = xhat*float64(gh[j]) + float64(bh[j])
			g := float64(dyh[r*cols+j]) * float64(gh[j])
			mg += g / cols
			mgx += g * xhat / cols
			dgr[j] += float64(dyh[r*cols+j]) * xhat
			dbr[j] += float64(dyh[r*cols+j])
		}
		for j, a := range row {
			xhat := (float64(a) - mu) * rs
			dxr[r*cols+j] = rs * (float64(dyh[r*cols+j])*float64(gh[j]) - mg - xhat*mgx)
		}
	}
	worst := 0.0
	check := func(what string, got []float32, want []float64) error {
		for i := range want {
			d := math.Abs(float64(got[i]) - want[i])
			if !(d <= 1e-4*(1+math.Abs(want[i]))) {
				return fmt.Errorf("%s[%d] = %v, reference %v: mismatch", what, i, got[i], want[i])
			}
			worst = max(worst, d)
		}
		return nil
	}
	if err := errors.Join(check("y", y, yr), check("dx", dx, dxr), check("dgamma", dg, dgr), check("dbeta", db, dbr)); err != nil {
		return "", err
	}
	dev, _ := h.Device()
	return fmt.Sprintf("layernorm: fp32 [%d, %d] forward + backward on device %d match the float64 reference (max abs error %.2g)",
		rows, cols, dev, worst), nil
}
