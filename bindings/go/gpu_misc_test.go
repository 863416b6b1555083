// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
)

// Launches the library refuses: each comes back as *Error with the right
// category and the library's message, and writes nothing to the outputs.
func TestGPULaunchErrors(t *testing.T) {
	h := gpu(t)
	if dev, err := h.Device(); err != nil || dev < 0 {
		t.Fatalf("Device() = %d, %v", dev, err)
	}
	const rows, cols = 9, 33
	dt := fusednorm.Float16
	xd := tensor(t, dt, []int64{rows, cols}, nil)
	wd := tensor(t, dt, []int64{cols}, nil)
	nd, _ := fusednorm.NewNorm(fusednorm.LayerNorm, -1, 1e-5)
	defer nd.Close()
	x := alloc(t, dt, rows*cols, 0)
	x.upload(t, randn(rand.New(rand.NewPCG(1, 2)), rows*cols, 0, 1))
	dy, dx := alloc(t, dt, rows*cols, 0), alloc(t, dt, rows*cols, 0)
	dg := alloc(t, dt, cols, 0)
	stats := alloc(t, fusednorm.Float32, rows, 0)
	y := alloc(t, dt, rows*cols, 0)

	expect := func(what string, err error, sentinel error, op string, inMsg string) {
		t.Helper()
		var fe *fusednorm.Error
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v (%T), want *fusednorm.Error", what, err, err)
			return
		}
		if !errors.Is(err, sentinel) || fe.Op != op || fe.Message == "" || !strings.Contains(fe.Message, inMsg) {
			t.Errorf("%s: %+v; want %v from %s mentioning %q", what, fe, sentinel, op, inMsg)
		}
		t.Logf("%s: %v", what, err)
	}

	// Too little workspace for the backward.
	wsb := must[uint64](t)(h.NormBwdWorkspaceSize(nd, xd, wd))
	if wsb == 0 {
		t.Fatal("norm backward asks no workspace; the short-workspace case needs one")
	}
	err := h.NormBwd(0, &fusednorm.NormBwd{Norm: nd, XDesc: xd, X: x.Ptr, DYDesc: xd, DY: dy.Ptr,
		Mean: stats.Ptr, Rstd: stats.Ptr, WDesc: wd, DXDesc: xd, DX: dx.Ptr, DGamma: dg.Ptr,
		Workspace: workspace(t, wsb), WorkspaceLen: wsb - 1})
	expect("short workspace", err, fusednorm.ErrInsufficientWorkspace, "fnorm_norm_bwd", "workspace")
	if !errors.Is(err, fusednorm.ErrBadParam) {
		t.Errorf("short workspace is not in the bad-param category: %v", err)
	}

	// y's shape disagrees with x's.
	yd := tensor(t, dt, []int64{rows, cols + 1}, nil)
	err = h.NormFwd(0, &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, YDesc: yd, Y: y.Ptr})
	expect("shape mismatch", err, fusednorm.ErrShape, "fnorm_norm_fwd", "")

	// A required pointer missing.
	err = h.NormFwd(0, &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, YDesc: xd})
	expect("y NULL", err, fusednorm.ErrNullPointer, "fnorm_norm_fwd", "y")

	// A wrong dtype: parameters in a third dtype.
	wbad := tensor(t, fusednorm.BFloat16, []int64{cols}, nil)
	err = h.NormFwd(0, &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, WDesc: wbad, Gamma: dg.Ptr, YDesc: xd, Y: y.Ptr})
	expect("w dtype", err, fusednorm.ErrBadParam, "fnorm_norm_fwd", "")

	// RMSNorm with beta.
	rms, _ := fusednorm.NewNorm(fusednorm.RMSNorm, -1, 1e-5)
	defer rms.Close()
	err = h.NormFwd(0, &fusednorm.NormFwd{Norm: rms, XDesc: xd, X: x.Ptr, WDesc: wd, Gamma: dg.Ptr, Beta: dg.Ptr, YDesc: xd, Y: y.Ptr})
	expect("RMSNorm beta", err, fusednorm.ErrBadParam, "fnorm_norm_fwd", "beta")

	// BatchNorm ADD_RELU without z; m = 1.
	bn, _ := fusednorm.NewBatchNorm(fusednorm.BNEpilogueAddReLU, 1e-5, fusednorm.BNAverageExponential, 0.1)
	defer bn.Close()
	bxd := tensor(t, dt, []int64{rows, cols}, nil)
	rs := must[uint64](t)(h.BatchNormReserveSpaceSize(bn, bxd))
	bws := must[uint64](t)(h.BatchNormFwdTrainWorkspaceSize(bn, bxd))
	err = h.BatchNormFwdTrain(0, &fusednorm.BatchNormFwdTrain{BN: bn, XDesc: bxd, X: x.Ptr, YDesc: bxd, Y: y.Ptr,
		Reserve: workspace(t, rs), ReserveLen: rs, Workspace: workspace(t, bws), WorkspaceLen: bws})
	expect("ADD_RELU without z", err, fusednorm.ErrBadParam, "fnorm_batchnorm_fwd_train", "z")
	one := tensor(t, dt, []int64{1, cols}, nil)
	plain, _ := fusednorm.NewBatchNormDesc()
	defer plain.Close()
	ows := must[uint64](t)(h.BatchNormFwdTrainWorkspaceSize(plain, bxd)) // enough for one too: the launch must refuse m = 1 itself
	err = h.BatchNormFwdTrain(0, &fusednorm.BatchNormFwdTrain{BN: plain, XDesc: one, X: x.Ptr, YDesc: one, Y: y.Ptr,
		Workspace: workspace(t, ows), WorkspaceLen: ows})
	expect("BatchNorm m = 1", err, fusednorm.ErrBadParam, "fnorm_batchnorm_fwd_train", "")

	// Linear with a weight of the wrong inner size.
	if ld, err := fusednorm.NewLinear(fusednorm.LinearEpilogueNone, fusednorm.LinearWeightKN, 0); err == nil {
		defer ld.Close()
		wk := tensor(t, dt, []int64{cols + 2, 4}, nil)
		wok := tensor(t, dt, []int64{cols, 4}, nil)
		yk := tensor(t, dt, []int64{rows, 4}, nil)
		lws := must[uint64](t)(h.LinearFwdWorkspaceSize(ld, xd, wok, yk))
		err = h.LinearFwd(0, &fusednorm.LinearFwd{Desc: ld, XDesc: xd, X: x.Ptr, WDesc: wk, W: dg.Ptr, YDesc: yk, Y: y.Ptr,
			Workspace: workspace(t, lws), WorkspaceLen: lws})
		expect("linear k mismatch", err, fusednorm.ErrShape, "fnorm_linear_fwd", "")
	}

	// A closed descriptor in a launch: refused on the Go side.
	closed := tensor(t, dt, []int64{rows, cols}, nil)
	closed.Close()
	err = h.NormFwd(0, &fusednorm.NormFwd{Norm: nd, XDesc: closed, X: x.Ptr, YDesc: xd, Y: y.Ptr})
	expect("closed x_desc", err, fusednorm.ErrBadParam, "fnorm_norm_fwd", "closed")
	_, err = h.NormFwdWorkspaceSize(nd, xd, closed)
	expect("closed y_desc in a size query", err, fusednorm.ErrBadParam, "fnorm_norm_fwd_workspace_size", "closed")

	// Nothing was written by the refused launches: y is still NaN.
	for i, v := range y.download(t) {
		if !math.IsNaN(v) {
			t.Fatalf("y[%d] = %v after refused launches, want the poison (NaN)", i, v)
		}
	}
	if err := devmem.Synchronize(); err != nil {
		t.Fatalf("the device is in error after refused launches: %v", err)
	}

	// A closed handle.
	h2, err := fusednorm.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	h2.Close()
	err = h2.NormFwd(0, &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, YDesc: xd, Y: y.Ptr})
	expect("closed handle", err, fusednorm.ErrBadParam, "fnorm_norm_fwd", "closed")
}

// Several goroutines share one handle, each with its own stream and
// buffers, launching LayerNorm forward and checking every result; and a
// refused call on each goroutine carries that goroutine's own message.
func TestGPUGoroutinesShareHandle(t *testing.T) {
	h := gpu(t)
	const goroutines, iters = 8, 25
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- shareWorker(t, h, g, iters)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
}

func shareWorker(t *testing.T, h *fusednorm.Handle, g, iters int) error {
	rows, cols := 3+g, 17+64*g // a different shape (and kernel tier) per goroutine
	dt := []fusednorm.DType{fusednorm.Float32, fusednorm.Float16, fusednorm.BFloat16}[g%3]
	s, err := devmem.NewStream()
	if err != nil {
		return err
	}
	defer devmem.DestroyStream(s)
	xd, err := fusednorm.NewTensor(dt, []int64{int64(rows), int64(cols)}, nil)
	if err != nil {
		return err
	}
	defer xd.Close()
	bad, err := fusednorm.NewTensor(dt, []int64{int64(rows), int64(cols + 1 + g)}, nil)
	if err != nil {
		return err
	}
	defer bad.Close()
	nd, err := fusednorm.NewNorm(fusednorm.LayerNorm, -1, 1e-5)
	if err != nil {
		return err
	}
	defer nd.Close()
	n := rows * cols
	x, y := alloc(t, dt, n, g%2), alloc(t, dt, n, g%2)
	rng := rand.New(rand.NewPCG(uint64(g), 99))
	for it := range iters {
		xv := x.upload(t, randn(rng, n, float64(it), 1))
		y.poison(t)
		if err := h.NormFwd(s, &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, YDesc: xd, Y: y.Ptr}); err != nil {
			return fmt.Errorf("goroutine %d iteration %d: %w", g, it, err)
		}
		// A refused call in between: its message names this goroutine's size.
		err := h.NormFwd(s, &fusednorm.NormFwd{Norm: nd, XDesc: xd, X: x.Ptr, YDesc: bad, Y: y.Ptr})
		var fe *fusednorm.Error
		if !errors.As(err, &fe) || !strings.Contains(fe.Message, fmt.Sprint(cols+1+g)) {
			return fmt.Errorf("goroutine %d: refused call gave %v, want a message naming %d", g, err, cols+1+g)
		}
		if err := devmem.StreamSynchronize(s); err != nil {
			return err
		}
		_, yRef, _, _ := normRef(fusednorm.LayerNorm, dt, xv, nil, nil, nil, rows, cols, 1e-5, false)
		got := y.download(t)
		tl := tolOf(dt)
		for i := range yRef {
			if d := math.Abs(got[i] - yRef[i]); !(d <= tl.rtol*math.Abs(yRef[i])+tl.atol*4) {
				return fmt.Errorf("goroutine %d iteration %d: y[%d] = %v, want %v", g, it, i, got[i], yRef[i])
			}
		}
	}
	return nil
}
