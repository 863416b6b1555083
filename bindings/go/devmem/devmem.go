// SPDX-License-Identifier: Apache-2.0

// Package devmem allocates, fills, copies and frees CUDA device memory for
// the fusednorm tests and examples. It is not a general CUDA binding: a
// program that already has one (or cudarc-like wrappers) should use that.
//
// It links libcudart (the CUDA runtime libfusednorm itself uses); when the
// linker does not find it by default, set CGO_LDFLAGS=-L<cuda>/lib64.
package devmem

/*
#cgo LDFLAGS: -lcudart
#include <stddef.h>
#include <stdint.h>

// The few CUDA runtime entry points used, declared here (their C ABI is
// stable) so that building needs no CUDA header. cudaError_t is an int enum.
int cudaGetDeviceCount(int *count);
int cudaMalloc(void **ptr, size_t size);
int cudaFree(void *ptr);
int cudaMemcpy(void *dst, const void *src, size_t count, int kind);
int cudaMemset(void *ptr, int value, size_t count);
int cudaDeviceSynchronize(void);
int cudaStreamCreate(void **stream);
int cudaStreamDestroy(void *stream);
int cudaStreamSynchronize(void *stream);
const char *cudaGetErrorString(int error);

enum { H2D = 1, D2H = 2 }; // cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost

static int dm_malloc(uintptr_t *p, size_t n) {
  void *v = NULL;
  int e = cudaMalloc(&v, n);
  *p = (uintptr_t)v;
  return e;
}
static int dm_free(uintptr_t p) { return cudaFree((void *)p); }
static int dm_upload(uintptr_t dst, const void *src, size_t n) {
  return cudaMemcpy((void *)dst, src, n, H2D);
}
static int dm_download(void *dst, uintptr_t src, size_t n) {
  return cudaMemcpy(dst, (const void *)src, n, D2H);
}
static int dm_memset(uintptr_t p, int v, size_t n) { return cudaMemset((void *)p, v, n); }
static int dm_stream_create(uintptr_t *s) {
  void *v = NULL;
  int e = cudaStreamCreate(&v);
  *s = (uintptr_t)v;
  return e;
}
static int dm_stream_destroy(uintptr_t s) { return cudaStreamDestroy((void *)s); }
static int dm_stream_sync(uintptr_t s) { return cudaStreamSynchronize((void *)s); }
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/libfusednorm/libfusednorm/bindings/go"
)

// Error is a failed CUDA runtime call.
type Error struct {
	Op   string
	Code int
	Text string
}

func (e *Error) Error() string {
	return fmt.Sprintf("devmem: %s: CUDA error %d: %s", e.Op, e.Code, e.Text)
}

func check(op string, code C.int) error {
	if code == 0 {
		return nil
	}
	return &Error{Op: op, Code: int(code), Text: C.GoString(C.cudaGetErrorString(code))}
}

// Available says why there is no usable CUDA device (nil when there is one).
func Available() error {
	var n C.int
	if err := check("cudaGetDeviceCount", C.cudaGetDeviceCount(&n)); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("devmem: cudaGetDeviceCount: no CUDA device")
	}
	return nil
}

// Malloc allocates bytes of device memory (cudaMalloc: 256-byte aligned).
func Malloc(bytes uint64) (fusednorm.DevicePtr, error) {
	var p C.uintptr_t
	if err := check("cudaMalloc", C.dm_malloc(&p, C.size_t(bytes))); err != nil {
		return 0, err
	}
	return fusednorm.DevicePtr(p), nil
}

// Free releases memory from Malloc; 0 is accepted.
func Free(p fusednorm.DevicePtr) error {
	return check("cudaFree", C.dm_free(C.uintptr_t(p)))
}

// Elem is an element type that holds no Go pointers (so a slice of it may be
// handed to C).
type Elem interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~uint64 | ~int64 | ~float32 | ~float64
}

// Upload copies src to device memory at dst (cudaMemcpy; synchronous with
// the legacy default stream).
func Upload[T Elem](dst fusednorm.DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	n := uintptr(len(src)) * unsafe.Sizeof(src[0])
	return check("cudaMemcpy(HostToDevice)", C.dm_upload(C.uintptr_t(dst), unsafe.Pointer(&src[0]), C.size_t(n)))
}

// Download copies len(dst) elements from device memory at src.
func Download[T Elem](dst []T, src fusednorm.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	n := uintptr(len(dst)) * unsafe.Sizeof(dst[0])
	return check("cudaMemcpy(DeviceToHost)", C.dm_download(unsafe.Pointer(&dst[0]), C.uintptr_t(src), C.size_t(n)))
}

// Memset sets bytes of device memory to value (cudaMemset).
func Memset(p fusednorm.DevicePtr, value byte, bytes uint64) error {
	return check("cudaMemset", C.dm_memset(C.uintptr_t(p), C.int(value), C.size_t(bytes)))
}

// Synchronize waits for all work on the current device (cudaDeviceSynchronize)
// and returns an error left by an earlier asynchronous failure.
func Synchronize() error { return check("cudaDeviceSynchronize", C.cudaDeviceSynchronize()) }

// NewStream creates a stream (cudaStreamCreate).
func NewStream() (fusednorm.Stream, error) {
	var s C.uintptr_t
	if err := check("cudaStreamCreate", C.dm_stream_create(&s)); err != nil {
		return 0, err
	}
	return fusednorm.Stream(s), nil
}

// DestroyStream destroys a stream from NewStream.
func DestroyStream(s fusednorm.Stream) error {
	return check("cudaStreamDestroy", C.dm_stream_destroy(C.uintptr_t(s)))
}

// StreamSynchronize waits for the work enqueued on s.
func StreamSynchronize(s fusednorm.Stream) error {
	return check("cudaStreamSynchronize", C.dm_stream_sync(C.uintptr_t(s)))
}
