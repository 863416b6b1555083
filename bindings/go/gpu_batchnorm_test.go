// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
)

// bnLayout maps the logical index (n, c, p) of [N, C, P] (P the spatial
// positions flattened) to the memory offset of NCHW or NHWC.
type bnLayout struct {
	nhwc    bool
	N, C, P int
}

func (l bnLayout) at(n, c, p int) int {
	if l.nhwc {
		return (n*l.P+p)*l.C + c
	}
	return (n*l.C+c)*l.P + p
}

func (l bnLayout) desc(t *testing.T, dt fusednorm.DType, h, w int) *fusednorm.TensorDesc {
	dims := []int64{int64(l.N), int64(l.C), int64(h), int64(w)}
	var strides []int64
	if l.nhwc {
		strides = []int64{int64(h * w * l.C), 1, int64(w * l.C), int64(l.C)}
	}
	return tensor(t, dt, dims, strides)
}

// BatchNorm training forward (running statistics, saved statistics, the
// ReLU mask in the reserve space), backward from it, and inference with the
// updated running statistics, for every epilogue, NCHW and NHWC (NHWC with
// misaligned data pointers), every dtype, against float64.
func TestGPUBatchNorm(t *testing.T) {
	h := gpu(t)
	epis := []fusednorm.BNEpilogue{fusednorm.BNEpilogueNone, fusednorm.BNEpilogueReLU, fusednorm.BNEpilogueAddReLU}
	epiName := []string{"none", "relu", "add_relu"}
	for _, nhwc := range []bool{false, true} {
		for _, dt := range dtypes {
			for ei, epi := range epis {
				lay := map[bool]string{false: "nchw", true: "nhwc"}[nhwc]
				t.Run(name(lay, "/", dt, "/", epiName[ei]), func(t *testing.T) {
					runBNCase(t, h, nhwc, dt, epi, uint64(ei+10*int(dt))+map[bool]uint64{false: 0, true: 100}[nhwc])
				})
			}
		}
	}
}

func runBNCase(t *testing.T, h *fusednorm.Handle, nhwc bool, dt fusednorm.DType, epi fusednorm.BNEpilogue, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	const N, C, H, W = 3, 5, 3, 7
	const eps, momentum = 1e-5, 0.1
	l := bnLayout{nhwc: nhwc, N: N, C: C, P: H * W}
	total := N * C * H * W
	m := float64(N * H * W)
	off := 0
	if nhwc {
		off = 1
	}
	xd := l.desc(t, dt, H, W)
	bn, err := fusednorm.NewBatchNorm(epi, eps, fusednorm.BNAverageExponential, momentum)
	if err != nil {
		t.Fatal(err)
	}
	defer bn.Close()

	x := alloc(t, dt, total, off)
	xv := x.upload(t, randn(rng, total, 1, 2))
	var z *dev
	var zv []float64
	if epi == fusednorm.BNEpilogueAddReLU {
		z = alloc(t, dt, total, off)
		zv = z.upload(t, randn(rng, total, 0, 1))
	}
	f32 := fusednorm.Float32
	gamma, beta := alloc(t, f32, C, 0), alloc(t, f32, C, 0)
	gv := gamma.upload(t, randn(rng, C, 1, 0.3))
	bv := beta.upload(t, randn(rng, C, 0, 0.3))
	rmean, rvar := alloc(t, f32, C, 0), alloc(t, f32, C, 0)
	rm0 := rmean.upload(t, randn(rng, C, 0, 1))
	rv0 := rvar.upload(t, randn(rng, C, 2, 0.2))
	smean, sinv := alloc(t, f32, C, 0), alloc(t, f32, C, 0)
	y := alloc(t, dt, total, off)

	ws := must[uint64](t)(h.BatchNormFwdTrainWorkspaceSize(bn, xd))
	rs := must[uint64](t)(h.BatchNormReserveSpaceSize(bn, xd))
	if (epi == fusednorm.BNEpilogueNone) != (rs == 0) {
		t.Errorf("reserve space %d bytes with epilogue %d", rs, epi)
	}
	reserve := workspace(t, rs)
	fa := &fusednorm.BatchNormFwdTrain{BN: bn, XDesc: xd, X: x.Ptr, Gamma: gamma.Ptr, Beta: beta.Ptr,
		RunningMean: rmean.Ptr, RunningVar: rvar.Ptr, YDesc: xd, Y: y.Ptr,
		SavedMean: smean.Ptr, SavedInvstd: sinv.Ptr, Workspace: workspace(t, ws), WorkspaceLen: ws,
		Reserve: reserve, ReserveLen: rs}
	if z != nil {
		fa.Z = z.Ptr
	}
	if err := h.BatchNormFwdTrain(0, fa); err != nil {
		t.Fatal(err)
	}

	// Reference.
	mean, vr, inv := make([]float64, C), make([]float64, C), make([]float64, C)
	for c := range C {
		for n := range N {
			for p := range H * W {
				mean[c] += xv[l.at(n, c, p)]
			}
		}
		mean[c] /= m
		for n := range N {
			for p := range H * W {
				d := xv[l.at(n, c, p)] - mean[c]
				vr[c] += d * d
			}
		}
		vr[c] /= m
		inv[c] = 1 / math.Sqrt(vr[c]+eps)
	}
	yRef := make([]float64, total)
	pos := make([]bool, total) // the ReLU mask
	nearZero := 0
	for c := range C {
		for n := range N {
			for p := range H * W {
				i := l.at(n, c, p)
				v := (xv[i]-mean[c])*inv[c]*gv[c] + bv[c]
				if z != nil {
					v += zv[i]
				}
				if epi != fusednorm.BNEpilogueNone {
					if math.Abs(v) < 1e-5 {
						nearZero++
					}
					pos[i] = v > 0
					v = max(v, 0)
				}
				yRef[i] = v
			}
		}
	}
	if nearZero > 0 {
		t.Logf("%d pre-activation values within 1e-5 of 0 (mask may differ there)", nearZero)
	}
	tl := tolOf(dt)
	compare(t, "y", y.download(t), yRef, tl)
	compare(t, "saved_mean", smean.download(t), mean, tol{1e-5, 1e-5})
	compare(t, "saved_invstd", sinv.download(t), inv, tol{1e-4, 1e-5})
	rmRef, rvRef := make([]float64, C), make([]float64, C)
	for c := range C {
		rmRef[c] = (1-momentum)*rm0[c] + momentum*mean[c]
		rvRef[c] = (1-momentum)*rv0[c] + momentum*vr[c]*m/(m-1)
	}
	rmGot, rvGot := rmean.download(t), rvar.download(t)
	compare(t, "running_mean", rmGot, rmRef, tol{1e-5, 1e-5})
	compare(t, "running_var", rvGot, rvRef, tol{1e-5, 1e-5})

	// Backward: the mask from the reserve space, dz for ADD_RELU.
	dy := alloc(t, dt, total, off)
	dyv := dy.upload(t, randn(rng, total, 0, 1))
	dx := alloc(t, dt, total, off)
	dgamma, dbeta := alloc(t, f32, C, 0), alloc(t, f32, C, 0)
	wsb := must[uint64](t)(h.BatchNormBwdWorkspaceSize(bn, xd))
	ba := &fusednorm.BatchNormBwd{BN: bn, XDesc: xd, X: x.Ptr, DYDesc: xd, DY: dy.Ptr, Gamma: gamma.Ptr,
		SavedMean: smean.Ptr, SavedInvstd: sinv.Ptr, Reserve: reserve, ReserveLen: rs,
		DXDesc: xd, DX: dx.Ptr, DGamma: dgamma.Ptr, DBeta: dbeta.Ptr,
		Workspace: workspace(t, wsb), WorkspaceLen: wsb}
	var dz *dev
	if epi == fusednorm.BNEpilogueAddReLU {
		dz = alloc(t, dt, total, off)
		ba.DZ = dz.Ptr
	}
	if err := h.BatchNormBwd(0, ba); err != nil {
		t.Fatal(err)
	}
	g := make([]float64, total)
	for i := range g {
		g[i] = dyv[i]
		if epi != fusednorm.BNEpilogueNone && !pos[i] {
			g[i] = 0
		}
	}
	dxRef, dgRef, dbRef := make([]float64, total), make([]float64, C), make([]float64, C)
	for c := range C {
		sg, sgx := 0.0, 0.0
		for n := range N {
			for p := range H * W {
				i := l.at(n, c, p)
				sg += g[i]
				sgx += g[i] * (xv[i] - mean[c])
			}
		}
		dbRef[c], dgRef[c] = sg, sgx*inv[c]
		for n := range N {
			for p := range H * W {
				i := l.at(n, c, p)
				dxRef[i] = (g[i] - sg/m - (xv[i]-mean[c])*inv[c]*inv[c]*sgx/m) * gv[c] * inv[c]
			}
		}
	}
	compare(t, "dx", dx.download(t), dxRef, tl)
	compare(t, "dgamma", dgamma.download(t), dgRef, tol{1e-4, 1e-4})
	compare(t, "dbeta", dbeta.download(t), dbRef, tol{1e-4, 1e-4})
	if dz != nil {
		compare(t, "dz", dz.download(t), g, tol{0, 0})
	}

	// Inference with the running statistics the forward left.
	y.poison(t)
	wsi := must[uint64](t)(h.BatchNormFwdInferWorkspaceSize(bn, xd))
	ia := &fusednorm.BatchNormFwdInfer{BN: bn, XDesc: xd, X: x.Ptr, Gamma: gamma.Ptr, Beta: beta.Ptr,
		RunningMean: rmean.Ptr, RunningVar: rvar.Ptr, YDesc: xd, Y: y.Ptr,
		Workspace: workspace(t, wsi), WorkspaceLen: wsi}
	if z != nil {
		ia.Z = z.Ptr
	}
	if err := h.BatchNormFwdInfer(0, ia); err != nil {
		t.Fatal(err)
	}
	yInf := make([]float64, total)
	for c := range C {
		ic := 1 / math.Sqrt(rvGot[c]+eps)
		for n := range N {
			for p := range H * W {
				i := l.at(n, c, p)
				v := (xv[i]-rmGot[c])*ic*gv[c] + bv[c]
				if z != nil {
					v += zv[i]
				}
				if epi != fusednorm.BNEpilogueNone {
					v = max(v, 0)
				}
				yInf[i] = v
			}
		}
	}
	compare(t, "y (inference)", y.download(t), yInf, tl)
}
