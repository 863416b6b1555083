// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Status is a libfusednorm status code (fnorm_status_t). The thousands digit
// is its category; see Status.Category.
type Status int32

// Status values, taken from the header by the compiler.
const (
	StatusSuccess               Status = C.FNORM_STATUS_SUCCESS
	StatusBadParam              Status = C.FNORM_STATUS_BAD_PARAM
	StatusBadParamNullPointer   Status = C.FNORM_STATUS_BAD_PARAM_NULL_POINTER
	StatusBadParamShape         Status = C.FNORM_STATUS_BAD_PARAM_SHAPE
	StatusInsufficientWorkspace Status = C.FNORM_STATUS_INSUFFICIENT_WORKSPACE
	StatusNotSupported          Status = C.FNORM_STATUS_NOT_SUPPORTED
	StatusNotSupportedBuild     Status = C.FNORM_STATUS_NOT_SUPPORTED_BUILD
	StatusInternalError         Status = C.FNORM_STATUS_INTERNAL_ERROR
	StatusAllocFailed           Status = C.FNORM_STATUS_ALLOC_FAILED
	StatusNoDevice              Status = C.FNORM_STATUS_NO_DEVICE
	StatusCUDAError             Status = C.FNORM_STATUS_CUDA_ERROR
	StatusCUBLASError           Status = C.FNORM_STATUS_CUBLAS_ERROR
	StatusCUDNNError            Status = C.FNORM_STATUS_CUDNN_ERROR
	StatusNCCLError             Status = C.FNORM_STATUS_NCCL_ERROR
)

// String is the library's static name of the status (fnorm_get_error_string).
func (s Status) String() string {
	return C.GoString(C.fnorm_get_error_string(C.fnorm_status_t(s)))
}

// Category is the status's band (fnorm_status_category): StatusSuccess,
// StatusBadParam, StatusNotSupported, StatusInternalError, StatusNoDevice
// or StatusCUDAError (a CUDA or library call failed during execution).
func (s Status) Category() Status {
	return Status(C.fnorm_status_category(C.fnorm_status_t(s)))
}

// Error is a call the library refused or that failed: the status, its
// category and the message naming the function, the argument and the value.
type Error struct {
	Status   Status
	Category Status
	Op       string // the C function called, e.g. "fnorm_norm_fwd"
	Message  string // the library's thread-local message for this failure
	sentinel bool
}

func (e *Error) Error() string {
	if e.sentinel {
		return "fusednorm: " + e.Status.String()
	}
	msg := e.Message
	if msg == "" {
		msg = e.Status.String()
	}
	if !strings.HasPrefix(msg, e.Op+":") { // the library's messages start with it
		msg = e.Op + ": " + msg
	}
	return fmt.Sprintf("fusednorm: %s (%s)", msg, statusName(e.Status))
}

// Is matches the sentinels: a category sentinel (ErrBadParam, ...) matches
// every status of its band, a precise one (ErrInsufficientWorkspace, ...)
// its own status only. Two non-sentinel errors match when their status does.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.sentinel && t.Status == t.Status.Category() {
		return e.Category == t.Status
	}
	return e.Status == t.Status
}

func sentinel(s Status) *Error {
	return &Error{Status: s, Category: s.Category(), sentinel: true}
}

// Category sentinels, for errors.Is.
var (
	ErrBadParam     = sentinel(StatusBadParam)      // fix the call
	ErrNotSupported = sentinel(StatusNotSupported)  // valid, but not done by this library or build
	ErrInternal     = sentinel(StatusInternalError) // a library bug, or host allocation failed
	ErrNoDevice     = sentinel(StatusNoDevice)      // no CUDA device or driver
	ErrExecution    = sentinel(StatusCUDAError)     // a CUDA / cuBLAS / cuDNN / NCCL call failed
)

// Precise sentinels, for errors.Is.
var (
	ErrNullPointer           = sentinel(StatusBadParamNullPointer)
	ErrShape                 = sentinel(StatusBadParamShape)
	ErrInsufficientWorkspace = sentinel(StatusInsufficientWorkspace)
	// Left out of this build, no code for this GPU, or a library the op
	// needs (cuBLASLt, cuDNN, NCCL) is missing at run time: the message says which.
	ErrNotSupportedBuild = sentinel(StatusNotSupportedBuild)
)

// statusName is the status's enumerator name ("FNORM_STATUS_BAD_PARAM"),
// the part of the library's string before the colon.
func statusName(s Status) string {
	str := s.String()
	for i := 0; i < len(str); i++ {
		if str[i] == ':' {
			return str[:i]
		}
	}
	return str
}

// check turns a wrapper's status and message into an error (nil on success)
// and frees the message.
func check(op string, st C.fnorm_status_t, msg *C.char) error {
	if msg != nil {
		defer C.free(unsafe.Pointer(msg))
	}
	if st == C.FNORM_STATUS_SUCCESS {
		return nil
	}
	s := Status(st)
	e := &Error{Status: s, Category: s.Category(), Op: op}
	if msg != nil {
		e.Message = C.GoString(msg)
	}
	return e
}

// goError is a refusal made on the Go side (a closed object, arguments that
// cannot be expressed to C), in the same form as the library's.
func goError(op string, s Status, format string, args ...any) error {
	return &Error{Status: s, Category: s.Category(), Op: op, Message: fmt.Sprintf(format, args...)}
}
