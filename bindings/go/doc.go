// SPDX-License-Identifier: Apache-2.0

// Package fusednorm is the Go binding of libfusednorm, fused normalization
// kernels for NVIDIA GPUs (LayerNorm / RMSNorm, BatchNorm with ReLU and
// Add+ReLU epilogues, SyncBatchNorm over the caller's NCCL communicator,
// GroupNorm with SiLU and a per-sample scale / shift, a cuBLASLt
// fully-connected layer), over its C ABI (api/fusednorm.h) alone.
//
// The C API's rules carry over: create a [Handle] bound to a device,
// describe tensors with descriptors, ask each op how much workspace it
// needs, allocate it yourself, and launch on your own [Stream]. Launches
// only enqueue work; nothing synchronizes the host or allocates device
// memory behind your back. The C header's documentation of each function
// (arguments, aliasing, what is optional) is the reference; each Go method
// names the function it calls.
//
// # Ownership
//
// Handles and descriptors own C objects: call Close when done with them.
// A runtime cleanup destroys one that was dropped without Close, as a
// safety net only (it runs whenever the garbage collector gets to it).
// A Close that races with calls using the object waits for them; a closed
// object passed to a call gives an [*Error], never a crash.
//
// # Device memory
//
// Device pointers and streams are plain numbers ([DevicePtr], [Stream]),
// as a CUDA runtime binding or another library hands them over. The caller
// owns them and keeps them alive until the work enqueued on them is done;
// the library cannot check a device pointer's size, so a too-small buffer
// is the caller's bug, as in C. Optional pointers are 0 and optional
// descriptors nil. The devmem subpackage allocates and copies device memory
// for tests and examples.
//
// # Errors
//
// Every call that the C library refuses returns an [*Error] carrying the
// status, its category and the library's message (read on the same OS
// thread as the failing call). Test categories with errors.Is against
// [ErrBadParam], [ErrNotSupported], [ErrInternal], [ErrNoDevice] and
// [ErrExecution], or a precise status such as [ErrInsufficientWorkspace];
// errors.As gives the [*Error].
//
// # Threads
//
// A handle may be used by several goroutines at once. A descriptor may be
// read by several calls at once; Set and Close wait for those calls.
package fusednorm
