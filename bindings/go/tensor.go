// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

import (
	"math"
	"strconv"
)

// DType is an element type (fnorm_dtype_t).
type DType int32

// Element types, taken from the header by the compiler.
const (
	Float32  DType = C.FNORM_DTYPE_FLOAT32
	Float16  DType = C.FNORM_DTYPE_FLOAT16
	BFloat16 DType = C.FNORM_DTYPE_BFLOAT16
	// The one-byte quantized output types: only NormFwdQuant's Y takes them.
	Float8E4M3 DType = C.FNORM_DTYPE_FLOAT8_E4M3 // OCP E4M3 (torch.float8_e4m3fn), max 448
	Float8E5M2 DType = C.FNORM_DTYPE_FLOAT8_E5M2 // OCP E5M2 (torch.float8_e5m2), max 57344
	Int8       DType = C.FNORM_DTYPE_INT8        // codes -127..127
)

// Size is the element's size in bytes (0 for an unknown value).
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	case Float8E4M3, Float8E5M2, Int8:
		return 1
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	case Float8E4M3:
		return "float8_e4m3"
	case Float8E5M2:
		return "float8_e5m2"
	case Int8:
		return "int8"
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// TensorDesc describes a tensor: element type, sizes and strides in
// elements (fnorm_tensor_desc_t).
type TensorDesc struct {
	cdesc[C.fnorm_tensor_desc_t]
}

// NewTensorDesc creates an empty descriptor (fnorm_tensor_desc_create);
// needs no device. Set it before use.
func NewTensorDesc() (*TensorDesc, error) {
	td := &TensorDesc{}
	return opened(td, openDesc(td, &td.cdesc, "tensor descriptor",
		"fnorm_tensor_desc_create", func(d *C.fnorm_tensor_desc_t, m **C.char) C.fnorm_status_t { return C.gofn_tensor_desc_create(d, m) },
		"fnorm_tensor_desc_destroy", func(d C.fnorm_tensor_desc_t, m **C.char) C.fnorm_status_t { return C.gofn_tensor_desc_destroy(d, m) }))
}

// NewTensor creates a descriptor and sets it (see Set); on failure nothing
// is left behind.
func NewTensor(dtype DType, dims, strides []int64) (*TensorDesc, error) {
	td, err := NewTensorDesc()
	return newSet(td, err, func(d *TensorDesc) error { return d.Set(dtype, dims, strides) })
}

// Close destroys the descriptor (fnorm_tensor_desc_destroy). Closing twice
// is a no-op; a closed descriptor passed to a call is an error.
func (t *TensorDesc) Close() error {
	return t.base().close()
}

// Set describes the tensor (fnorm_tensor_desc_set): rank len(dims) (1 to
// MaxRank), each size >= 0 (a size of 0 makes an empty tensor), strides in
// elements (each >= 1), or nil for a packed row-major tensor. On failure the descriptor keeps its contents.
func (t *TensorDesc) Set(dtype DType, dims, strides []int64) error {
	const op = "fnorm_tensor_desc_set"
	if t == nil {
		return goError(op, StatusBadParamNullPointer, "desc is nil")
	}
	if strides != nil && len(strides) != len(dims) {
		return goError(op, StatusBadParam, "strides has %d entries for rank %d", len(strides), len(dims))
	}
	if len(dims) > math.MaxInt32 {
		return goError(op, StatusBadParam, "rank %d does not fit int32", len(dims))
	}
	d, unlock, err := t.base().lockWrite(op)
	if err != nil {
		return err
	}
	defer unlock()
	// C reads exactly rank entries of each array; Go memory holding no Go
	// pointers may be passed for the duration of the call.
	var dp, sp *C.int64_t
	if len(dims) > 0 {
		dp = (*C.int64_t)(&dims[0])
	} else {
		var none C.int64_t
		dp = &none // rank 0: let the library name what is wrong
	}
	if len(strides) > 0 {
		sp = (*C.int64_t)(&strides[0])
	}
	var msg *C.char
	return check(op, C.gofn_tensor_desc_set(d, C.fnorm_dtype_t(dtype), C.int32_t(len(dims)), dp, sp, &msg), msg)
}

// Get reads the descriptor back (fnorm_tensor_desc_get).
func (t *TensorDesc) Get() (dtype DType, dims, strides []int64, err error) {
	const op = "fnorm_tensor_desc_get"
	d, unlock, err := t.base().lockRead(op)
	if err != nil {
		return 0, nil, nil, err
	}
	defer unlock()
	var dt C.fnorm_dtype_t
	var rank C.int32_t
	var cd, cs [C.FNORM_MAX_RANK]C.int64_t
	var msg *C.char
	if err := check(op, C.gofn_tensor_desc_get(d, &dt, &rank, &cd[0], &cs[0], C.FNORM_MAX_RANK, &msg), msg); err != nil {
		return 0, nil, nil, err
	}
	n := min(int(rank), len(cd))
	dims = make([]int64, n)
	strides = make([]int64, n)
	for i := range n {
		dims[i], strides[i] = int64(cd[i]), int64(cs[i])
	}
	return DType(dt), dims, strides, nil
}

// Elements is the number of elements described (fnorm_tensor_desc_get_elements).
func (t *TensorDesc) Elements() (int64, error) {
	var n C.int64_t
	err := t.base().get("fnorm_tensor_desc_get_elements", func(d C.fnorm_tensor_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_tensor_desc_get_elements(d, &n, msg)
	})
	return int64(n), err
}

func (t *TensorDesc) base() *cdesc[C.fnorm_tensor_desc_t] {
	if t == nil {
		return nil
	}
	return &t.cdesc
}

func (t *TensorDesc) obj() *object { return t.base().obj() }
