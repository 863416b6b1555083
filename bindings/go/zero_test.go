// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

// Tensors with no elements through the Go binding (api/fusednorm.h, "Empty
// tensors"): a descriptor with a zero dimension is valid; with a device,
// the size queries answer 0 and launches over empty tensors (null data
// pointers) succeed, writing only the zeros of sums over no values
// (LayerNorm dgamma / dbeta over zero rows, BatchNorm dgamma / dbeta over an
// empty batch); an empty batch leaves BatchNorm's running statistics as
// they were and is counted, as torch.nn counts it.

import (
	"slices"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
)

func TestEmptyDescriptor(t *testing.T) {
	for _, dims := range [][]int64{{0, 768}, {4, 0}, {2, 0, 3}} {
		td, err := fusednorm.NewTensor(fusednorm.BFloat16, dims, nil)
		if err != nil {
			t.Fatalf("%v: %v", dims, err)
		}
		n, err := td.Elements()
		if err != nil || n != 0 {
			t.Fatalf("%v: elements %d, %v", dims, n, err)
		}
		_, got, _, err := td.Get()
		if err != nil || !slices.Equal(got, dims) {
			t.Fatalf("%v: read back %v, %v", dims, got, err)
		}
		td.Close()
	}
}

// devBuf is n bytes of device memory set to `fill`, freed with the test.
func devBuf(t *testing.T, n uint64, fill byte) fusednorm.DevicePtr {
	t.Helper()
	p, err := devmem.Malloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devmem.Free(p) })
	if err := devmem.Memset(p, fill, n); err != nil {
		t.Fatal(err)
	}
	return p
}

func allZero(t *testing.T, p fusednorm.DevicePtr, n int) {
	t.Helper()
	got := make([]float32, n)
	if err := devmem.Download(got, p); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 0 {
			t.Fatalf("element %d is %v; a sum over no values is 0", i, v)
		}
	}
}

func TestEmptyNorm(t *testing.T) {
	h := gpu(t)
	x, _ := fusednorm.NewTensor(fusednorm.Float16, []int64{0, 768}, nil)
	w, _ := fusednorm.NewTensor(fusednorm.Float32, []int64{768}, nil)
	norm, _ := fusednorm.NewNormDesc()
	defer x.Close()
	defer w.Close()
	defer norm.Close()
	if n, err := h.NormFwdWorkspaceSize(norm, x, x); err != nil || n != 0 {
		t.Fatalf("forward workspace %d, %v", n, err)
	}
	if n, err := h.NormBwdWorkspaceSize(norm, x, w); err != nil || n != 0 {
		t.Fatalf("backward workspace %d, %v", n, err)
	}
	if err := h.NormFwd(0, &fusednorm.NormFwd{Norm: norm, XDesc: x, YDesc: x}); err != nil {
		t.Fatal(err)
	}
	dg, db := devBuf(t, 768*4, 0xff), devBuf(t, 768*4, 0xff)
	err := h.NormBwd(0, &fusednorm.NormBwd{Norm: norm, XDesc: x, DYDesc: x, WDesc: w, DXDesc: x, DGamma: dg, DBeta: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := devmem.Synchronize(); err != nil {
		t.Fatal(err)
	}
	allZero(t, dg, 768)
	allZero(t, db, 768)
}

func TestEmptyBatchNorm(t *testing.T) {
	h := gpu(t)
	x, _ := fusednorm.NewTensor(fusednorm.Float16, []int64{0, 8, 3, 3}, nil)
	bn, _ := fusednorm.NewBatchNormDesc()
	defer x.Close()
	defer bn.Close()
	for name, q := range map[string]func(*fusednorm.BatchNormDesc, *fusednorm.TensorDesc) (uint64, error){
		"train": h.BatchNormFwdTrainWorkspaceSize, "infer": h.BatchNormFwdInferWorkspaceSize,
		"bwd": h.BatchNormBwdWorkspaceSize, "reserve": h.BatchNormReserveSpaceSize,
	} {
		if n, err := q(bn, x); err != nil || n != 0 {
			t.Fatalf("%s size query: %d, %v", name, n, err)
		}
	}
	mean0 := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	var0 := []float32{2, 2, 2, 2, 2, 2, 2, 2}
	rm, rv := devBuf(t, 32, 0), devBuf(t, 32, 0)
	count := devBuf(t, 8, 0)
	saved := devBuf(t, 64, 0xff)
	if err := devmem.Upload(rm, mean0); err != nil {
		t.Fatal(err)
	}
	if err := devmem.Upload(rv, var0); err != nil {
		t.Fatal(err)
	}
	if err := devmem.Upload(count, []int64{5}); err != nil {
		t.Fatal(err)
	}
	err := h.BatchNormFwdTrain(0, &fusednorm.BatchNormFwdTrain{BN: bn, XDesc: x, YDesc: x, RunningMean: rm,
		RunningVar: rv, NumBatchesTracked: count, SavedMean: saved, SavedInvstd: saved + 32})
	if err != nil {
		t.Fatal(err)
	}
	err = h.BatchNormFwdInfer(0, &fusednorm.BatchNormFwdInfer{BN: bn, XDesc: x, YDesc: x, RunningMean: rm,
		RunningVar: rv})
	if err != nil {
		t.Fatal(err)
	}
	dg, db := devBuf(t, 32, 0xff), devBuf(t, 32, 0xff)
	err = h.BatchNormBwd(0, &fusednorm.BatchNormBwd{BN: bn, XDesc: x, DYDesc: x, DXDesc: x, SavedMean: saved,
		SavedInvstd: saved + 32, DGamma: dg, DBeta: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := devmem.Synchronize(); err != nil {
		t.Fatal(err)
	}
	gotMean, gotVar, gotCount := make([]float32, 8), make([]float32, 8), make([]int64, 1)
	if err := devmem.Download(gotMean, rm); err != nil {
		t.Fatal(err)
	}
	if err := devmem.Download(gotVar, rv); err != nil {
		t.Fatal(err)
	}
	if err := devmem.Download(gotCount, count); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotMean, mean0) || !slices.Equal(gotVar, var0) {
		t.Fatalf("running statistics changed by an empty batch: %v %v", gotMean, gotVar)
	}
	if gotCount[0] != 6 {
		t.Fatalf("num_batches_tracked %d after an empty batch; torch.nn counts it (want 6)", gotCount[0])
	}
	allZero(t, dg, 8)
	allZero(t, db, 8)
}
