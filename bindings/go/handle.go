// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

import "runtime"

// DevicePtr is a CUDA device address (what cudaMalloc returns), or 0 for
// "none" where an argument is optional. The caller owns the memory.
type DevicePtr uintptr

// Add returns the address bytes further on (a slice of a buffer).
func (p DevicePtr) Add(bytes uint64) DevicePtr { return p + DevicePtr(bytes) }

// Stream is a cudaStream_t (or CUstream) as a number; 0 is the legacy
// default stream.
type Stream uintptr

// HeaderVersion is the version of the header this package was compiled
// against (major*10000 + minor*100 + patch).
const HeaderVersion = C.FNORM_VERSION

// MaxRank is the largest rank a tensor descriptor holds.
const MaxRank = C.FNORM_MAX_RANK

// LibraryVersion is the loaded library's version (fnorm_get_version), in
// HeaderVersion's encoding: compare them to detect a mismatch.
func LibraryVersion() uint32 { return uint32(C.fnorm_get_version()) }

// Handle is a libfusednorm context bound to one CUDA device (fnorm_handle_t).
// Safe for use by several goroutines at once.
type Handle struct {
	object
	h       C.fnorm_handle_t
	cleanup runtime.Cleanup
}

// NewHandle creates a handle bound to the calling OS thread's current CUDA
// device (fnorm_create): device 0 unless this thread called cudaSetDevice.
// To bind another device, lock the goroutine to its thread
// (runtime.LockOSThread) around cudaSetDevice and NewHandle. Without a
// device the error matches ErrNoDevice.
func NewHandle() (*Handle, error) {
	var h C.fnorm_handle_t
	var msg *C.char
	if err := check("fnorm_create", C.gofn_create(&h, &msg), msg); err != nil {
		return nil, err
	}
	hd := &Handle{h: h}
	hd.init()
	hd.cleanup = runtime.AddCleanup(hd, func(h C.fnorm_handle_t) { C.gofn_destroy(h, nil) }, h)
	return hd, nil
}

// Close destroys the handle (fnorm_destroy). Work already enqueued is not
// affected. Closing twice is a no-op; calls made after Close return an error.
func (h *Handle) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h == nil {
		return nil
	}
	h.cleanup.Stop()
	var msg *C.char
	err := check("fnorm_destroy", C.gofn_destroy(h.h, &msg), msg)
	h.h = nil
	return err
}

// Device is the CUDA device ordinal the handle is bound to (fnorm_get_device).
func (h *Handle) Device() (int, error) {
	unlock := rlock(h.obj())
	defer unlock()
	hp, err := h.ptr("fnorm_get_device")
	if err != nil {
		return 0, err
	}
	var dev C.int
	var msg *C.char
	err = check("fnorm_get_device", C.gofn_get_device(hp, &dev, &msg), msg)
	runtime.KeepAlive(h)
	return int(dev), err
}

func (h *Handle) obj() *object {
	if h == nil {
		return nil
	}
	return &h.object
}

// ptr is the C handle; a nil or closed handle is an error (the lock is held).
func (h *Handle) ptr(op string) (C.fnorm_handle_t, error) {
	if h == nil {
		return nil, goError(op, StatusBadParamNullPointer, "handle is nil")
	}
	if h.h == nil {
		return nil, goError(op, StatusBadParam, "handle was closed")
	}
	return h.h, nil
}
