// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
	"github.com/libfusednorm/libfusednorm/bindings/go/half"
)

const N, C, H, W = 4, 24, 9, 9

// NHWC offset of logical (n, c, p), p = h*W + w.
func at(n, c, p int) int { return (n*H*W+p)*C + c }

// BatchNorm + Add + ReLU (ResNet's residual join) forward and backward, fp16
// channels-last, with the 1-bit ReLU mask kept in the reserve space between
// the two, checked against a float64 reference.
func batchNormAddReLU(h *fusednorm.Handle) (string, error) {
	const total, eps = N * C * H * W, 1e-5
	m := float64(N * H * W)

	// Sizes are [N, C, H, W] whatever the layout; the strides say NHWC.
	x, err := fusednorm.NewTensor(fusednorm.Float16, []int64{N, C, H, W}, []int64{H * W * C, 1, W * C, C})
	if err != nil {
		return "", err
	}
	defer x.Close()
	bn, err := fusednorm.NewBatchNorm(fusednorm.BNEpilogueAddReLU, eps, fusednorm.BNAverageExponential, 0.1)
	if err != nil {
		return "", err
	}
	defer bn.Close()

	rng := rand.New(rand.NewPCG(3, 4))
	f16 := func(n int, mean, std float64) ([]uint16, []float64) {
		b, v := make([]uint16, n), make([]float64, n)
		for i := range b {
			b[i] = half.FromFloat32(float32(mean + std*rng.NormFloat64()))
			v[i] = float64(half.ToFloat32(b[i]))
		}
		return b, v
	}
	xb, xv := f16(total, 2, 3)
	zb, zv := f16(total, 0, 1)
	dyb, dyv := f16(total, 0, 1)
	gamma, beta := normals(rng, C, 1, 0.2), normals(rng, C, 0.1, 0.2)

	var bufs []fusednorm.DevicePtr
	defer func() {
		for _, p := range bufs {
			devmem.Free(p)
		}
	}()
	mk := func(bytes uint64) (fusednorm.DevicePtr, error) {
		if bytes == 0 {
			return 0, nil
		}
		p, err := devmem.Malloc(bytes)
		if err == nil {
			bufs = append(bufs, p)
			err = devmem.Memset(p, 0xff, bytes) // NaN until written
		}
		return p, err
	}
	fws, e1 := h.BatchNormFwdTrainWorkspaceSize(bn, x)
	bws, e2 := h.BatchNormBwdWorkspaceSize(bn, x)
	rs, e3 := h.BatchNormReserveSpaceSize(bn, x)
	if err := errors.Join(e1, e2, e3); err != nil {
		return "", err
	}
	dX, e1 := mk(total * 2)
	dZ, e2 := mk(total * 2)
	dY, e3 := mk(total * 2)
	dDY, e4 := mk(total * 2)
	dDX, e5 := mk(total * 2)
	dDZ, e6 := mk(total * 2)
	dG, e7 := mk(C * 4)
	dB, e8 := mk(C * 4)
	dMean, e9 := mk(C * 4)
	dInv, e10 := mk(C * 4)
	dDG, e11 := mk(C * 4)
	dDB, e12 := mk(C * 4)
	fw, e13 := mk(fws)
	bw, e14 := mk(bws)
	res, e15 := mk(rs)
	if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15,
		devmem.Upload(dX, xb), devmem.Upload(dZ, zb), devmem.Upload(dDY, dyb),
		devmem.Upload(dG, gamma), devmem.Upload(dB, beta)); err != nil {
		return "", err
	}

	if err := h.BatchNormFwdTrain(0, &fusednorm.BatchNormFwdTrain{BN: bn, XDesc: x, X: dX, Z: dZ,
		Gamma: dG, Beta: dB, YDesc: x, Y: dY, SavedMean: dMean, SavedInvstd: dInv,
		Workspace: fw, WorkspaceLen: fws, Reserve: res, ReserveLen: rs}); err != nil {
		return "", err
	}
	if err := h.BatchNormBwd(0, &fusednorm.BatchNormBwd{BN: bn, XDesc: x, X: dX, DYDesc: x, DY: dDY,
		Gamma: dG, SavedMean: dMean, SavedInvstd: dInv, Reserve: res, ReserveLen: rs,
		DXDesc: x, DX: dDX, DZ: dDZ, DGamma: dDG, DBeta: dDB, Workspace: bw, WorkspaceLen: bws}); err != nil {
		return "", err
	}
	if err := devmem.Synchronize(); err != nil {
		return "", err
	}
	yb, dxb, dzb := make([]uint16, total), make([]uint16, total), make([]uint16, total)
	dg, db := make([]float32, C), make([]float32, C)
	if err := errors.Join(devmem.Download(yb, dY), devmem.Download(dxb, dDX), devmem.Download(dzb, dDZ),
		devmem.Download(dg, dDG), devmem.Download(db, dDB)); err != nil {
		return "", err
	}

	// float64 reference and comparison (fp16 outputs: 2e-3 of the scale).
	bad := 0
	cmp := func(what string, got, want, scale float64) {
		if !(math.Abs(got-want) <= 2e-3*(math.Abs(want)+scale)) {
			if bad < 5 {
				fmt.Fprintf(os.Stderr, "%s: got %v, reference %v\n", what, got, want)
			}
			bad++
		}
	}
	for c := range C {
		mean, v := 0.0, 0.0
		for n := range N {
			for p := range H * W {
				mean += xv[at(n, c, p)]
			}
		}
		mean /= m
		for n := range N {
			for p := range H * W {
				d := xv[at(n, c, p)] - mean
				v += d * d
			}
		}
		inv := 1 / math.Sqrt(v/m+eps)
		g := make([]float64, 0, N*H*W)
		sg, sgx := 0.0, 0.0
		for n := range N {
			for p := range H * W {
				i := at(n, c, p)
				pre := (xv[i]-mean)*inv*float64(gamma[c]) + float64(beta[c]) + zv[i]
				cmp("y", float64(half.ToFloat32(yb[i])), max(pre, 0), 1)
				gi := 0.0
				if pre > 0 {
					gi = dyv[i]
				}
				cmp("dz", float64(half.ToFloat32(dzb[i])), gi, 0)
				g = append(g, gi)
				sg += gi
				sgx += gi * (xv[i] - mean)
			}
		}
		cmp("dbeta", float64(db[c]), sg, 1)
		cmp("dgamma", float64(dg[c]), sgx*inv, 1)
		k := 0
		for n := range N {
			for p := range H * W {
				i := at(n, c, p)
				want := (g[k] - sg/m - (xv[i]-mean)*inv*inv*sgx/m) * float64(gamma[c]) * inv
				cmp("dx", float64(half.ToFloat32(dxb[i])), want, 0.1)
				k++
			}
		}
	}
	if bad > 0 {
		return "", fmt.Errorf("%d values differ from the float64 reference", bad)
	}
	return fmt.Sprintf("batchnorm: BN+Add+ReLU fp16 NHWC [%d, %d, %d, %d] forward + backward (reserve space %d bytes) match the float64 reference",
		N, C, H, W, rs), nil
}
