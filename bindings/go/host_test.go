// SPDX-License-Identifier: Apache-2.0

package fusednorm

// Host tests: descriptors, errors and bad input. They need no GPU and run
// in CI (meson test bindings-go).

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestVersion(t *testing.T) {
	if got := LibraryVersion(); got != HeaderVersion {
		t.Fatalf("library version %d, header version %d", got, HeaderVersion)
	}
}

func TestStatusStringsAndCategories(t *testing.T) {
	cases := []struct {
		s, cat Status
		name   string
	}{
		{StatusSuccess, StatusSuccess, "FNORM_STATUS_SUCCESS"},
		{StatusBadParamShape, StatusBadParam, "FNORM_STATUS_BAD_PARAM_SHAPE"},
		{StatusInsufficientWorkspace, StatusBadParam, "FNORM_STATUS_INSUFFICIENT_WORKSPACE"},
		{StatusNotSupportedBuild, StatusNotSupported, "FNORM_STATUS_NOT_SUPPORTED_BUILD"},
		{StatusAllocFailed, StatusInternalError, "FNORM_STATUS_ALLOC_FAILED"},
		{StatusNoDevice, StatusNoDevice, "FNORM_STATUS_NO_DEVICE"},
		{StatusNCCLError, StatusCUDAError, "FNORM_STATUS_NCCL_ERROR"},
	}
	for _, c := range cases {
		if got := c.s.Category(); got != c.cat {
			t.Errorf("%d.Category() = %d, want %d", c.s, got, c.cat)
		}
		if got := statusName(c.s); got != c.name {
			t.Errorf("statusName(%d) = %q, want %q (String %q)", c.s, got, c.name, c.s.String())
		}
	}
	if got := Status(999).String(); got != "FNORM_STATUS_UNKNOWN" {
		t.Errorf("unknown status string %q", got)
	}
}

// A refusal by the library comes back as *Error with the status, category
// and the library's message, and matches the category sentinels.
func TestErrorFromLibrary(t *testing.T) {
	td, err := NewTensorDesc()
	if err != nil {
		t.Fatal(err)
	}
	defer td.Close()
	err = td.Set(Float32, []int64{4, -3}, nil)
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("Set with a negative size: %v (%T), want *Error", err, err)
	}
	if fe.Category != StatusBadParam || fe.Op != "fnorm_tensor_desc_set" {
		t.Errorf("error %+v", fe)
	}
	if !strings.Contains(fe.Message, "-3") {
		t.Errorf("message %q does not name the value -3", fe.Message)
	}
	if !errors.Is(err, ErrBadParam) {
		t.Errorf("errors.Is(%v, ErrBadParam) = false", err)
	}
	for _, other := range []error{ErrNotSupported, ErrInternal, ErrNoDevice, ErrExecution, ErrInsufficientWorkspace} {
		if errors.Is(err, other) {
			t.Errorf("errors.Is(%v, %v) = true", err, other)
		}
	}
	if errors.Is(err, ErrInsufficientWorkspace) != (fe.Status == StatusInsufficientWorkspace) {
		t.Errorf("precise sentinel mismatch for %v", err)
	}
	wrapped := fmt.Errorf("layer 3: %w", err)
	if !errors.Is(wrapped, ErrBadParam) || !errors.As(wrapped, &fe) {
		t.Errorf("wrapped error lost its identity: %v", wrapped)
	}
	if s := err.Error(); !strings.Contains(s, "fnorm_tensor_desc_set") || !strings.Contains(s, "FNORM_STATUS_BAD_PARAM") {
		t.Errorf("Error() = %q", s)
	}
	// The descriptor kept its previous (unset) state: reading it is refused.
	if _, _, _, err := td.Get(); !errors.Is(err, ErrBadParam) {
		t.Errorf("Get of a never-set descriptor: %v", err)
	}
	if _, err := td.Elements(); !errors.Is(err, ErrBadParam) {
		t.Errorf("Elements of a never-set descriptor: %v", err)
	}
}

func TestTensorDescRoundTrip(t *testing.T) {
	td, err := NewTensor(BFloat16, []int64{2, 3, 5}, []int64{40, 8, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer td.Close()
	dt, dims, strides, err := td.Get()
	if err != nil {
		t.Fatal(err)
	}
	if dt != BFloat16 || fmt.Sprint(dims) != "[2 3 5]" || fmt.Sprint(strides) != "[40 8 1]" {
		t.Errorf("Get = %v %v %v", dt, dims, strides)
	}
	if n, err := td.Elements(); err != nil || n != 30 {
		t.Errorf("Elements = %d, %v", n, err)
	}
	// Packed strides when nil.
	if err := td.Set(Float16, []int64{7, 9}, nil); err != nil {
		t.Fatal(err)
	}
	if dt, dims, strides, _ := td.Get(); dt != Float16 || fmt.Sprint(dims) != "[7 9]" || fmt.Sprint(strides) != "[9 1]" {
		t.Errorf("packed Get = %v %v %v", dt, dims, strides)
	}
}

// Wrong sizes, ranks and dtypes are errors, never crashes, and leave the
// descriptor as it was.
func TestTensorDescBadInput(t *testing.T) {
	td, err := NewTensor(Float32, []int64{3, 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer td.Close()
	bad := []struct {
		name    string
		dt      DType
		dims    []int64
		strides []int64
		want    error
	}{
		{"rank 0", Float32, nil, nil, ErrBadParam},
		{"rank 0, empty", Float32, []int64{}, nil, ErrBadParam},
		{"rank 9", Float32, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1}, nil, ErrBadParam},
		{"negative size", Float32, []int64{3, -1}, nil, ErrBadParam},
		{"stride 0", Float32, []int64{3, 4}, []int64{4, 0}, ErrBadParam},
		{"strides too short", Float32, []int64{3, 4}, []int64{1}, ErrBadParam},
		{"strides too long", Float32, []int64{3}, []int64{1, 1}, ErrBadParam},
		{"bad dtype", DType(7), []int64{3, 4}, nil, ErrBadParam},
		{"negative dtype", DType(-1), []int64{3, 4}, nil, ErrBadParam},
		{"element count overflow", Float32, []int64{1 << 32, 1 << 32}, nil, ErrBadParam},
	}
	for _, c := range bad {
		err := td.Set(c.dt, c.dims, c.strides)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Set = %v, want %v", c.name, err, c.want)
			continue
		}
		var fe *Error
		if errors.As(err, &fe) && fe.Message == "" {
			t.Errorf("%s: no message", c.name)
		}
	}
	if dt, dims, _, err := td.Get(); err != nil || dt != Float32 || fmt.Sprint(dims) != "[3 4]" {
		t.Errorf("descriptor changed by refused Sets: %v %v %v", dt, dims, err)
	}
}

// Closed and nil objects are errors in every method, never a crash.
func TestClosedAndNilObjects(t *testing.T) {
	td, _ := NewTensor(Float32, []int64{2, 8}, nil)
	nd, _ := NewNormDesc()
	bd, _ := NewBatchNormDesc()
	ld, lerr := NewLinearDesc()
	for _, c := range []interface{ Close() error }{td, nd, bd} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	if lerr == nil {
		ld.Close()
		if _, _, _, err := ld.Get(); !errors.Is(err, ErrBadParam) {
			t.Errorf("closed LinearDesc.Get: %v", err)
		}
		if err := ld.Set(LinearEpilogueBias, LinearWeightNK, 0); !errors.Is(err, ErrBadParam) {
			t.Errorf("closed LinearDesc.Set: %v", err)
		}
	}
	expectBad := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrBadParam) {
			t.Errorf("%s: %v, want a bad-param error", what, err)
		}
	}
	expectBad("closed TensorDesc.Set", td.Set(Float32, []int64{1}, nil))
	_, _, _, err := td.Get()
	expectBad("closed TensorDesc.Get", err)
	_, err = td.Elements()
	expectBad("closed TensorDesc.Elements", err)
	expectBad("closed NormDesc.Set", nd.Set(RMSNorm, -1, 1e-6))
	_, _, _, err = nd.Get()
	expectBad("closed NormDesc.Get", err)
	expectBad("closed NormDesc.SetFlags", nd.SetFlags(NormFlagZeroCenteredGamma))
	_, err = nd.Flags()
	expectBad("closed NormDesc.Flags", err)
	expectBad("closed BatchNormDesc.Set", bd.Set(BNEpilogueReLU, 1e-5, BNAverageExponential, 0.1))
	_, _, _, _, err = bd.Get()
	expectBad("closed BatchNormDesc.Get", err)
	expectBad("closed BatchNormDesc.SetEngine", bd.SetEngine(BNEngineNative))
	_, err = bd.Engine()
	expectBad("closed BatchNormDesc.Engine", err)
	expectBad("closed BatchNormDesc.SetComm", bd.SetComm(nil, 0))
	_, _, err = bd.Comm()
	expectBad("closed BatchNormDesc.Comm", err)

	// nil receivers
	var ntd *TensorDesc
	var nnd *NormDesc
	var nbd *BatchNormDesc
	var nld *LinearDesc
	var nh *Handle
	expectBad("nil TensorDesc.Set", ntd.Set(Float32, []int64{1}, nil))
	_, _, _, err = ntd.Get()
	expectBad("nil TensorDesc.Get", err)
	expectBad("nil NormDesc.Set", nnd.Set(LayerNorm, -1, 1e-5))
	expectBad("nil BatchNormDesc.SetEngine", nbd.SetEngine(BNEngineAuto))
	expectBad("nil LinearDesc.Set", nld.Set(LinearEpilogueNone, LinearWeightKN, 0))
	_, err = nh.Device()
	expectBad("nil Handle.Device", err)
	for _, c := range []interface{ Close() error }{ntd, nnd, nbd, nld, nh} {
		if err := c.Close(); err != nil {
			t.Errorf("Close of nil %T: %v", c, err)
		}
	}

	// Launches and size queries with a nil handle, nil arguments or closed
	// descriptors: errors.
	x, _ := NewTensor(Float32, []int64{2, 8}, nil)
	defer x.Close()
	expectBad("NormFwd nil handle", nh.NormFwd(0, &NormFwd{XDesc: x, YDesc: x}))
	expectBad("NormFwd nil args", nh.NormFwd(0, nil))
	expectBad("NormBwd nil handle", nh.NormBwd(0, &NormBwd{}))
	expectBad("BatchNormFwdTrain nil handle", nh.BatchNormFwdTrain(0, &BatchNormFwdTrain{}))
	expectBad("BatchNormFwdInfer nil handle", nh.BatchNormFwdInfer(0, &BatchNormFwdInfer{}))
	expectBad("BatchNormBwd nil handle", nh.BatchNormBwd(0, &BatchNormBwd{}))
	expectBad("LinearFwd nil handle", nh.LinearFwd(0, &LinearFwd{}))
	expectBad("LinearBwd nil handle", nh.LinearBwd(0, &LinearBwd{}))
	_, err = nh.NormFwdWorkspaceSize(nil, x, x)
	expectBad("NormFwdWorkspaceSize nil handle", err)
	_, err = nh.BatchNormReserveSpaceSize(nil, x)
	expectBad("BatchNormReserveSpaceSize nil handle", err)
	_, err = nh.LinearAuxSize(nil, x)
	expectBad("LinearAuxSize nil handle", err)
}

func TestNormDesc(t *testing.T) {
	nd, err := NewNormDesc()
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if m, ax, eps, err := nd.Get(); err != nil || m != LayerNorm || ax != -1 || eps != 1e-5 {
		t.Errorf("defaults %v %v %v %v", m, ax, eps, err)
	}
	if err := nd.Set(RMSNorm, -2, 1e-6); err != nil {
		t.Fatal(err)
	}
	if err := nd.SetFlags(NormFlagZeroCenteredGamma); err != nil {
		t.Fatal(err)
	}
	if m, ax, eps, _ := nd.Get(); m != RMSNorm || ax != -2 || eps != 1e-6 {
		t.Errorf("Get %v %v %v", m, ax, eps)
	}
	if f, err := nd.Flags(); err != nil || f != NormFlagZeroCenteredGamma {
		t.Errorf("Flags %v %v", f, err)
	}
	if err := nd.Set(NormMode(5), -1, 1e-5); !errors.Is(err, ErrBadParam) {
		t.Errorf("bad mode: %v", err)
	}
	if err := nd.Set(LayerNorm, -1, -1); !errors.Is(err, ErrBadParam) {
		t.Errorf("negative epsilon: %v", err)
	}
	if err := nd.SetFlags(NormFlag(0x80)); !errors.Is(err, ErrBadParam) {
		t.Errorf("unknown flag bits: %v", err)
	}
	// The two flags combine; the next bit is still unknown, and a refused
	// set keeps the flags.
	both := NormFlagZeroCenteredGamma | NormFlagRoundXhat
	if both != 3 {
		t.Errorf("NormFlagZeroCenteredGamma | NormFlagRoundXhat = %d, want 3", both)
	}
	for _, f := range []NormFlag{NormFlagRoundXhat, both} {
		if err := nd.SetFlags(f); err != nil {
			t.Fatal(err)
		}
		if got, err := nd.Flags(); err != nil || got != f {
			t.Errorf("Flags after SetFlags(%d): %v %v", f, got, err)
		}
	}
	if err := nd.SetFlags(both | 4); !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "0x4") {
		t.Errorf("flag bit 4: %v", err)
	}
	if got, _ := nd.Flags(); got != both {
		t.Errorf("a refused SetFlags changed the flags to %d", got)
	}
	if _, err := NewNorm(LayerNorm, -1, math.Inf(1)); !errors.Is(err, ErrBadParam) {
		t.Errorf("NewNorm with an infinite epsilon: %v", err)
	}
}

func TestBatchNormDesc(t *testing.T) {
	bd, err := NewBatchNorm(BNEpilogueAddReLU, 1e-3, BNAverageCumulative, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	if ep, eps, av, mom, err := bd.Get(); err != nil || ep != BNEpilogueAddReLU || eps != 1e-3 || av != BNAverageCumulative || mom != 0.2 {
		t.Errorf("Get %v %v %v %v %v", ep, eps, av, mom, err)
	}
	if e, err := bd.Engine(); err != nil || e != BNEngineAuto {
		t.Errorf("default engine %v %v", e, err)
	}
	if err := bd.SetEngine(BNEngineNative); err != nil {
		t.Fatal(err)
	}
	if e, _ := bd.Engine(); e != BNEngineNative {
		t.Errorf("engine %v", e)
	}
	if err := bd.SetEngine(BNEngine(9)); !errors.Is(err, ErrBadParam) {
		t.Errorf("bad engine: %v", err)
	}
	if err := bd.Set(BNEpilogueReLU, 1e-5, BNAverageExponential, 1.5); !errors.Is(err, ErrBadParam) {
		t.Errorf("momentum 1.5: %v", err)
	}
	if err := bd.SetComm(nil, BNSyncGlobalWeightGrads); err != nil && !errors.Is(err, ErrNotSupportedBuild) {
		t.Fatal(err)
	} else if err == nil {
		if c, f, err := bd.Comm(); err != nil || c != nil || f != BNSyncGlobalWeightGrads {
			t.Errorf("Comm %v %v %v", c, f, err)
		}
	}
	if err := bd.SetComm(nil, BNSyncFlag(0x40)); !errors.Is(err, ErrBadParam) && !errors.Is(err, ErrNotSupportedBuild) {
		t.Errorf("unknown sync flags: %v", err)
	}
}

func TestGroupNormDesc(t *testing.T) {
	gd, err := NewGroupNormDesc()
	if err != nil {
		t.Fatal(err)
	}
	defer gd.Close()
	// The header's defaults: torch.nn.GroupNorm(32, C).
	if g, eps, act, err := gd.Get(); err != nil || g != 32 || eps != 1e-5 || act != GNActivationNone {
		t.Errorf("defaults %v %v %v %v", g, eps, act, err)
	}
	for _, act := range []GNActivation{GNActivationSiLU, GNActivationNone, GNActivationSiLU} {
		if err := gd.Set(7, 1e-6, act); err != nil {
			t.Fatal(err)
		}
		if g, eps, got, err := gd.Get(); err != nil || g != 7 || eps != 1e-6 || got != act {
			t.Errorf("Get after Set(7, 1e-6, %d): %v %v %v %v", act, g, eps, got, err)
		}
	}
	// Refusals: BAD_PARAM, the library's message naming the argument, the
	// descriptor unchanged.
	bad := []struct {
		name   string
		groups int64
		eps    float64
		act    GNActivation
		word   string
	}{
		{"0 groups", 0, 1e-5, GNActivationNone, "groups"},
		{"negative groups", -3, 1e-5, GNActivationNone, "groups"},
		{"NaN epsilon", 32, math.NaN(), GNActivationNone, "epsilon"},
		{"negative epsilon", 32, -1e-5, GNActivationNone, "epsilon"},
		{"infinite epsilon", 32, math.Inf(1), GNActivationNone, "epsilon"},
		{"epsilon beyond fp32", 32, 1e300, GNActivationNone, "epsilon"},
		{"unknown activation", 32, 1e-5, GNActivation(2), "activation"},
		{"negative activation", 32, 1e-5, GNActivation(-1), "activation"},
	}
	for _, c := range bad {
		err := gd.Set(c.groups, c.eps, c.act)
		var fe *Error
		if !errors.As(err, &fe) || fe.Status != StatusBadParam || fe.Op != "fnorm_groupnorm_desc_set" {
			t.Errorf("%s: Set = %v, want a BAD_PARAM *Error from fnorm_groupnorm_desc_set", c.name, err)
			continue
		}
		if !strings.Contains(fe.Message, c.word) {
			t.Errorf("%s: message %q does not name %s", c.name, fe.Message, c.word)
		}
		if g, eps, act, _ := gd.Get(); g != 7 || eps != 1e-6 || act != GNActivationSiLU {
			t.Errorf("%s: a refused Set changed the descriptor to %v %v %v", c.name, g, eps, act)
		}
	}
	if _, err := NewGroupNorm(0, 1e-5, GNActivationSiLU); !errors.Is(err, ErrBadParam) || !strings.Contains(err.Error(), "groups") {
		t.Errorf("NewGroupNorm with 0 groups: %v", err)
	}
	if g1, err := NewGroupNorm(1, 0, GNActivationSiLU); err != nil {
		t.Errorf("NewGroupNorm(1, 0, SiLU): %v", err)
	} else {
		g1.Close()
	}
	// Closed and nil descriptors are errors, never a crash.
	gd.Close()
	if err := gd.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := gd.Set(4, 1e-5, GNActivationNone); !errors.Is(err, ErrBadParam) {
		t.Errorf("closed GroupNormDesc.Set: %v", err)
	}
	if _, _, _, err := gd.Get(); !errors.Is(err, ErrBadParam) {
		t.Errorf("closed GroupNormDesc.Get: %v", err)
	}
	var ngd *GroupNormDesc
	if err := ngd.Set(4, 1e-5, GNActivationNone); !errors.Is(err, ErrNullPointer) {
		t.Errorf("nil GroupNormDesc.Set: %v", err)
	}
	if _, _, _, err := ngd.Get(); !errors.Is(err, ErrBadParam) {
		t.Errorf("nil GroupNormDesc.Get: %v", err)
	}
	if err := ngd.Close(); err != nil {
		t.Errorf("nil GroupNormDesc.Close: %v", err)
	}
	// Launches and size queries with a nil handle or nil arguments.
	var nh *Handle
	x, _ := NewTensor(Float16, []int64{2, 64, 3, 3}, nil)
	defer x.Close()
	g2, _ := NewGroupNormDesc()
	defer g2.Close()
	if _, err := nh.GroupNormFwdWorkspaceSize(g2, x); !errors.Is(err, ErrNullPointer) {
		t.Errorf("GroupNormFwdWorkspaceSize nil handle: %v", err)
	}
	if _, err := nh.GroupNormBwdWorkspaceSize(g2, x, nil, nil); !errors.Is(err, ErrNullPointer) {
		t.Errorf("GroupNormBwdWorkspaceSize nil handle: %v", err)
	}
	if err := nh.GroupNormFwd(0, &GroupNormFwd{GN: g2, XDesc: x, YDesc: x}); !errors.Is(err, ErrBadParam) {
		t.Errorf("GroupNormFwd nil handle: %v", err)
	}
	if err := nh.GroupNormFwd(0, nil); !errors.Is(err, ErrNullPointer) {
		t.Errorf("GroupNormFwd nil args: %v", err)
	}
	if err := nh.GroupNormBwd(0, &GroupNormBwd{}); !errors.Is(err, ErrBadParam) {
		t.Errorf("GroupNormBwd nil handle: %v", err)
	}
	if err := nh.GroupNormBwd(0, nil); !errors.Is(err, ErrNullPointer) {
		t.Errorf("GroupNormBwd nil args: %v", err)
	}
}

func TestLinearDesc(t *testing.T) {
	ld, err := NewLinearDesc()
	if errors.Is(err, ErrNotSupportedBuild) {
		t.Skip("library built without cuBLASLt: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	if ep, lay, f, err := ld.Get(); err != nil || ep != LinearEpilogueNone || lay != LinearWeightKN || f != 0 {
		t.Errorf("defaults %v %v %v %v", ep, lay, f, err)
	}
	if err := ld.Set(LinearEpilogueBiasGELU, LinearWeightNK, LinearFlagAllowTF32); err != nil {
		t.Fatal(err)
	}
	if ep, lay, f, _ := ld.Get(); ep != LinearEpilogueBiasGELU || lay != LinearWeightNK || f != LinearFlagAllowTF32 {
		t.Errorf("Get %v %v %v", ep, lay, f)
	}
	if err := ld.Set(LinearEpilogue(4), LinearWeightKN, 0); !errors.Is(err, ErrBadParam) {
		t.Errorf("bad epilogue: %v", err)
	}
	if err := ld.Set(LinearEpilogueNone, LinearWeightLayout(2), 0); !errors.Is(err, ErrBadParam) {
		t.Errorf("bad layout: %v", err)
	}
}

// The C library's message is per OS thread, and goroutines move between
// threads: every goroutine must get the message of its own failure.
func TestErrorMessagePerGoroutine(t *testing.T) {
	const goroutines, iters = 16, 300
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			td, err := NewTensorDesc()
			if err != nil {
				errs <- err.Error()
				return
			}
			defer td.Close()
			for i := range iters {
				bad := -int64(1000*g + i + 1)
				err := td.Set(Float32, []int64{2, bad}, nil)
				var fe *Error
				if !errors.As(err, &fe) || !strings.Contains(fe.Message, fmt.Sprint(bad)) {
					errs <- fmt.Sprintf("goroutine %d: size %d gave %v", g, bad, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Close racing with calls that use the object waits for them: no crash.
func TestCloseRacesWithUse(t *testing.T) {
	for range 50 {
		td, err := NewTensor(Float32, []int64{4, 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if _, _, _, err := td.Get(); err != nil && !errors.Is(err, ErrBadParam) {
						t.Error(err)
					}
					td.Set(Float16, []int64{2, 2}, nil)
				}
			}()
		}
		td.Close()
		wg.Wait()
	}
}

func TestNoDevice(t *testing.T) {
	h, err := NewHandle()
	if err == nil {
		h.Close()
		t.Skip("a CUDA device is present: the no-device path is not reachable here")
	}
	if !errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrExecution) {
		t.Fatalf("NewHandle without a device: %v", err)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Message == "" {
		t.Fatalf("no message: %v", err)
	}
	t.Logf("NewHandle without a device: %v", err)
}

// Objects dropped without Close are destroyed by their runtime cleanup
// (the safety net): many of them, collected, must not crash or leak into
// objects still in use.
func TestCleanupSafetyNet(t *testing.T) {
	keep, err := NewTensor(Float16, []int64{3, 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	for range 2000 {
		td, err := NewTensor(Float32, []int64{2, 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = td
		nd, _ := NewNormDesc()
		_ = nd
		bd, _ := NewBatchNormDesc()
		_ = bd
		gd, _ := NewGroupNormDesc()
		_ = gd
	}
	runtime.GC()
	runtime.GC()
	if dt, dims, _, err := keep.Get(); err != nil || dt != Float16 || fmt.Sprint(dims) != "[3 5]" {
		t.Fatalf("a live descriptor changed after the collection: %v %v %v", dt, dims, err)
	}
}
