// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"errors"
	"fmt"

	fusednorm "github.com/libfusednorm/libfusednorm/bindings/go"
)

// A LayerNorm forward over [rows, cols] fp16 with fp32 gamma/beta: describe,
// ask for the workspace, launch on your stream. x, y, gamma, beta and the
// workspace are device memory you allocated (cudaMalloc, or devmem.Malloc in
// this module's tests).
func ExampleHandle_NormFwd() {
	const rows, cols = 8192, 4096
	var x, y, gamma, beta, workspace fusednorm.DevicePtr // your device buffers
	var stream fusednorm.Stream                          // a cudaStream_t; 0: the default stream

	h, err := fusednorm.NewHandle() // bound to this thread's current CUDA device
	if err != nil {
		fmt.Println(err) // errors.Is(err, fusednorm.ErrNoDevice) without a GPU
		return
	}
	defer h.Close()
	xd, _ := fusednorm.NewTensor(fusednorm.Float16, []int64{rows, cols}, nil) // nil strides: packed
	defer xd.Close()
	wd, _ := fusednorm.NewTensor(fusednorm.Float32, []int64{cols}, nil)
	defer wd.Close()
	ln, _ := fusednorm.NewNorm(fusednorm.LayerNorm, -1, 1e-5)
	defer ln.Close()

	need, err := h.NormFwdWorkspaceSize(ln, xd, xd)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("workspace bytes:", need) // allocate at least this much at workspace
	err = h.NormFwd(stream, &fusednorm.NormFwd{
		Norm: ln, XDesc: xd, X: x, WDesc: wd, Gamma: gamma, Beta: beta,
		YDesc: xd, Y: y, Workspace: workspace, WorkspaceLen: need,
	})
	if err != nil {
		fmt.Println(err)
	}
}

// Errors carry the status, its category and the library's message naming
// the argument; test the category with errors.Is, read the rest with
// errors.As. Descriptors need no GPU.
func ExampleError() {
	td, err := fusednorm.NewTensorDesc()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer td.Close()
	err = td.Set(fusednorm.Float32, []int64{4, -1}, nil) // a negative size
	fmt.Println(errors.Is(err, fusednorm.ErrBadParam))
	var fe *fusednorm.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Status == fusednorm.StatusBadParamShape || fe.Status == fusednorm.StatusBadParam)
	}
	// Output:
	// true
	// true
}

// A BatchNorm descriptor with the ReLU epilogue, run on cuDNN where AUTO
// would pick the native engine.
func ExampleNewBatchNorm() {
	bn, err := fusednorm.NewBatchNorm(fusednorm.BNEpilogueReLU, 1e-5, fusednorm.BNAverageExponential, 0.1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer bn.Close()
	if err := bn.SetEngine(fusednorm.BNEngineCUDNN); err != nil {
		fmt.Println(err)
	}
	ep, eps, _, momentum, _ := bn.Get()
	fmt.Println(ep == fusednorm.BNEpilogueReLU, eps, momentum)
	// Output: true 1e-05 0.1
}
