// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"
)

// BNEpilogue is what follows the BatchNorm normalization (fnorm_bn_epilogue_t).
type BNEpilogue int32

const (
	BNEpilogueNone    BNEpilogue = C.FNORM_BN_EPILOGUE_NONE     // y = bn(x)
	BNEpilogueReLU    BNEpilogue = C.FNORM_BN_EPILOGUE_RELU     // y = max(bn(x), 0)
	BNEpilogueAddReLU BNEpilogue = C.FNORM_BN_EPILOGUE_ADD_RELU // y = max(bn(x) + z, 0)
)

// BNAverage is how training updates the running statistics (fnorm_bn_average_t).
type BNAverage int32

const (
	BNAverageExponential BNAverage = C.FNORM_BN_AVERAGE_EXPONENTIAL // momentum
	BNAverageCumulative  BNAverage = C.FNORM_BN_AVERAGE_CUMULATIVE  // PyTorch's momentum=None
)

// BNEngine picks the implementation (fnorm_bn_engine_t).
type BNEngine int32

const (
	BNEngineAuto   BNEngine = C.FNORM_BN_ENGINE_AUTO
	BNEngineNative BNEngine = C.FNORM_BN_ENGINE_NATIVE
	BNEngineCUDNN  BNEngine = C.FNORM_BN_ENGINE_CUDNN
)

// BNSyncFlag is a SyncBatchNorm flag (fnorm_bn_sync_flag_t), ORed.
type BNSyncFlag uint32

const (
	BNSyncNone BNSyncFlag = C.FNORM_BN_SYNC_NONE
	// BNSyncGlobalWeightGrads: dgamma / dbeta summed over all ranks.
	BNSyncGlobalWeightGrads BNSyncFlag = C.FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS
)

// BatchNormDesc configures BatchNorm / SyncBatchNorm (fnorm_batchnorm_desc_t).
// Defaults: no epilogue, epsilon 1e-5, exponential averaging with momentum
// 0.1, engine Auto, no communicator.
type BatchNormDesc struct {
	cdesc[C.fnorm_batchnorm_desc_t]
}

// NewBatchNormDesc creates a BatchNorm descriptor with the defaults
// (fnorm_batchnorm_desc_create).
func NewBatchNormDesc() (*BatchNormDesc, error) {
	bd := &BatchNormDesc{}
	return opened(bd, openDesc(bd, &bd.cdesc, "BatchNorm descriptor",
		"fnorm_batchnorm_desc_create", func(d *C.fnorm_batchnorm_desc_t, m **C.char) C.fnorm_status_t {
			return C.gofn_batchnorm_desc_create(d, m)
		},
		"fnorm_batchnorm_desc_destroy", func(d C.fnorm_batchnorm_desc_t, m **C.char) C.fnorm_status_t {
			return C.gofn_batchnorm_desc_destroy(d, m)
		}))
}

// NewBatchNorm creates a BatchNorm descriptor and sets it (see Set).
func NewBatchNorm(epilogue BNEpilogue, epsilon float64, average BNAverage, momentum float64) (*BatchNormDesc, error) {
	bd, err := NewBatchNormDesc()
	return newSet(bd, err, func(d *BatchNormDesc) error { return d.Set(epilogue, epsilon, average, momentum) })
}

// Close destroys the descriptor (fnorm_batchnorm_desc_destroy); twice is a
// no-op. An attached communicator is the caller's and is not touched.
func (b *BatchNormDesc) Close() error {
	return b.base().close()
}

// Set sets the epilogue, epsilon, averaging and momentum
// (fnorm_batchnorm_desc_set); the engine and communicator are kept.
func (b *BatchNormDesc) Set(epilogue BNEpilogue, epsilon float64, average BNAverage, momentum float64) error {
	return b.base().set("fnorm_batchnorm_desc_set", func(d C.fnorm_batchnorm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_desc_set(d, C.fnorm_bn_epilogue_t(epilogue), C.double(epsilon),
			C.fnorm_bn_average_t(average), C.double(momentum), msg)
	})
}

// Get reads the descriptor back (fnorm_batchnorm_desc_get).
func (b *BatchNormDesc) Get() (epilogue BNEpilogue, epsilon float64, average BNAverage, momentum float64, err error) {
	var ep C.fnorm_bn_epilogue_t
	var av C.fnorm_bn_average_t
	var eps, mom C.double
	err = b.base().get("fnorm_batchnorm_desc_get", func(d C.fnorm_batchnorm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_desc_get(d, &ep, &eps, &av, &mom, msg)
	})
	return BNEpilogue(ep), float64(eps), BNAverage(av), float64(mom), err
}

// SetEngine chooses the engine (fnorm_batchnorm_desc_set_engine).
func (b *BatchNormDesc) SetEngine(engine BNEngine) error {
	return b.base().set("fnorm_batchnorm_desc_set_engine", func(d C.fnorm_batchnorm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_desc_set_engine(d, C.fnorm_bn_engine_t(engine), msg)
	})
}

// Engine reads the engine (fnorm_batchnorm_desc_get_engine).
func (b *BatchNormDesc) Engine() (BNEngine, error) {
	var e C.fnorm_bn_engine_t
	err := b.base().get("fnorm_batchnorm_desc_get_engine", func(d C.fnorm_batchnorm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_desc_get_engine(d, &e, msg)
	})
	return BNEngine(e), err
}

// SetComm attaches the caller's NCCL communicator (an ncclComm_t, which
// points to C memory NCCL allocated; nil detaches) so that training forward
// and backward with this descriptor compute SyncBatchNorm
// (fnorm_batchnorm_desc_set_comm). The library neither creates nor destroys
// it: keep it alive while the descriptor uses it. Never pass a Go pointer.
func (b *BatchNormDesc) SetComm(comm unsafe.Pointer, flags BNSyncFlag) error {
	return b.base().set("fnorm_batchnorm_desc_set_comm", func(d C.fnorm_batchnorm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_desc_set_comm(d, (*C.struct_ncclComm)(comm), C.uint32_t(flags), msg)
	})
}

// Comm reads the attached communicator (nil: none) and flags
// (fnorm_batchnorm_desc_get_comm).
func (b *BatchNormDesc) Comm() (unsafe.Pointer, BNSyncFlag, error) {
	var c *C.struct_ncclComm
	var f C.uint32_t
	err := b.base().get("fnorm_batchnorm_desc_get_comm", func(d C.fnorm_batchnorm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_desc_get_comm(d, &c, &f, msg)
	})
	return unsafe.Pointer(c), BNSyncFlag(f), err
}

func (b *BatchNormDesc) base() *cdesc[C.fnorm_batchnorm_desc_t] {
	if b == nil {
		return nil
	}
	return &b.cdesc
}

func (b *BatchNormDesc) obj() *object { return b.base().obj() }

func (e *argErr) bn(b *BatchNormDesc, op, arg string) C.fnorm_batchnorm_desc_t {
	return descArg(e, b.base(), op, arg)
}

// bnSize answers a size query of (bn, x).
func (h *Handle) bnSize(op string, bn *BatchNormDesc, x *TensorDesc,
	fn func(C.fnorm_handle_t, C.fnorm_batchnorm_desc_t, C.fnorm_tensor_desc_t, *C.size_t, **C.char) C.fnorm_status_t) (uint64, error) {
	return querySize(op, []*object{h.obj(), bn.obj(), x.obj()}, func(e *argErr, op string) sizeCall {
		hp, bp, xp := e.handle(h, op), e.bn(bn, op, "bn"), e.tensor(x, op, "x_desc")
		return func(n *C.size_t, msg **C.char) C.fnorm_status_t { return fn(hp, bp, xp, n, msg) }
	})
}

// BatchNormFwdTrainWorkspaceSize: fnorm_batchnorm_fwd_train_workspace_size.
func (h *Handle) BatchNormFwdTrainWorkspaceSize(bn *BatchNormDesc, x *TensorDesc) (uint64, error) {
	return h.bnSize("fnorm_batchnorm_fwd_train_workspace_size", bn, x, func(a C.fnorm_handle_t, b C.fnorm_batchnorm_desc_t, c C.fnorm_tensor_desc_t, n *C.size_t, m **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_fwd_train_workspace_size(a, b, c, n, m)
	})
}

// BatchNormReserveSpaceSize is what training forward writes for backward
// (the ReLU mask): fnorm_batchnorm_reserve_space_size.
func (h *Handle) BatchNormReserveSpaceSize(bn *BatchNormDesc, x *TensorDesc) (uint64, error) {
	return h.bnSize("fnorm_batchnorm_reserve_space_size", bn, x, func(a C.fnorm_handle_t, b C.fnorm_batchnorm_desc_t, c C.fnorm_tensor_desc_t, n *C.size_t, m **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_reserve_space_size(a, b, c, n, m)
	})
}

// BatchNormFwdInferWorkspaceSize: fnorm_batchnorm_fwd_infer_workspace_size.
func (h *Handle) BatchNormFwdInferWorkspaceSize(bn *BatchNormDesc, x *TensorDesc) (uint64, error) {
	return h.bnSize("fnorm_batchnorm_fwd_infer_workspace_size", bn, x, func(a C.fnorm_handle_t, b C.fnorm_batchnorm_desc_t, c C.fnorm_tensor_desc_t, n *C.size_t, m **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_fwd_infer_workspace_size(a, b, c, n, m)
	})
}

// BatchNormBwdWorkspaceSize: fnorm_batchnorm_bwd_workspace_size.
func (h *Handle) BatchNormBwdWorkspaceSize(bn *BatchNormDesc, x *TensorDesc) (uint64, error) {
	return h.bnSize("fnorm_batchnorm_bwd_workspace_size", bn, x, func(a C.fnorm_handle_t, b C.fnorm_batchnorm_desc_t, c C.fnorm_tensor_desc_t, n *C.size_t, m **C.char) C.fnorm_status_t {
		return C.gofn_batchnorm_bwd_workspace_size(a, b, c, n, m)
	})
}

// BatchNormFwdTrain holds the arguments of fnorm_batchnorm_fwd_train.
// Per-channel vectors are C fp32 values.
type BatchNormFwdTrain struct {
	BN                      *BatchNormDesc
	XDesc                   *TensorDesc
	X                       DevicePtr
	Z                       DevicePtr // the ADD_RELU addend, else 0
	Gamma, Beta             DevicePtr // optional (1 and 0)
	RunningMean, RunningVar DevicePtr // optional, both or neither; updated
	NumBatchesTracked       DevicePtr // optional device int64 counter
	YDesc                   *TensorDesc
	Y                       DevicePtr
	SavedMean, SavedInvstd  DevicePtr // optional outputs for backward
	Workspace               DevicePtr
	WorkspaceLen            uint64
	Reserve                 DevicePtr // the ReLU mask, kept for backward
	ReserveLen              uint64
}

// BatchNormFwdTrain enqueues a training forward (fnorm_batchnorm_fwd_train);
// with a communicator attached to BN, SyncBatchNorm.
func (h *Handle) BatchNormFwdTrain(stream Stream, a *BatchNormFwdTrain) error {
	if a == nil {
		return goError("fnorm_batchnorm_fwd_train", StatusBadParamNullPointer, "arguments are nil")
	}
	return callC("fnorm_batchnorm_fwd_train", []*object{h.obj(), a.BN.obj(), a.XDesc.obj(), a.YDesc.obj()}, func(e *argErr, op string) cCall {
		hp := e.handle(h, op)
		bp := e.bn(a.BN, op, "bn")
		xp := e.tensor(a.XDesc, op, "x_desc")
		yp := e.tensor(a.YDesc, op, "y_desc")
		return func(msg **C.char) C.fnorm_status_t {
			return C.gofn_batchnorm_fwd_train(hp, C.uintptr_t(stream), bp, xp, up(a.X), up(a.Z),
				up(a.Gamma), up(a.Beta), up(a.RunningMean), up(a.RunningVar), up(a.NumBatchesTracked),
				yp, up(a.Y), up(a.SavedMean), up(a.SavedInvstd), up(a.Workspace), C.size_t(a.WorkspaceLen),
				up(a.Reserve), C.size_t(a.ReserveLen), msg)
		}
	})
}

// BatchNormFwdInfer holds the arguments of fnorm_batchnorm_fwd_infer.
type BatchNormFwdInfer struct {
	BN                      *BatchNormDesc
	XDesc                   *TensorDesc
	X                       DevicePtr
	Z                       DevicePtr // the ADD_RELU addend, else 0
	Gamma, Beta             DevicePtr // optional
	RunningMean, RunningVar DevicePtr // required
	YDesc                   *TensorDesc
	Y                       DevicePtr
	Workspace               DevicePtr
	WorkspaceLen            uint64
}

// BatchNormFwdInfer enqueues an inference forward (fnorm_batchnorm_fwd_infer).
func (h *Handle) BatchNormFwdInfer(stream Stream, a *BatchNormFwdInfer) error {
	if a == nil {
		return goError("fnorm_batchnorm_fwd_infer", StatusBadParamNullPointer, "arguments are nil")
	}
	return callC("fnorm_batchnorm_fwd_infer", []*object{h.obj(), a.BN.obj(), a.XDesc.obj(), a.YDesc.obj()}, func(e *argErr, op string) cCall {
		hp := e.handle(h, op)
		bp := e.bn(a.BN, op, "bn")
		xp := e.tensor(a.XDesc, op, "x_desc")
		yp := e.tensor(a.YDesc, op, "y_desc")
		return func(msg **C.char) C.fnorm_status_t {
			return C.gofn_batchnorm_fwd_infer(hp, C.uintptr_t(stream), bp, xp, up(a.X), up(a.Z),
				up(a.Gamma), up(a.Beta), up(a.RunningMean), up(a.RunningVar), yp, up(a.Y),
				up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		}
	})
}

// BatchNormBwd holds the arguments of fnorm_batchnorm_bwd.
type BatchNormBwd struct {
	BN                     *BatchNormDesc
	XDesc                  *TensorDesc
	X                      DevicePtr
	DYDesc                 *TensorDesc
	DY                     DevicePtr
	Y, Beta                DevicePtr // read by the cuDNN engine only; else 0
	Gamma                  DevicePtr // optional (1)
	SavedMean, SavedInvstd DevicePtr // required: the forward's outputs
	Reserve                DevicePtr // what the forward wrote there
	ReserveLen             uint64
	DXDesc                 *TensorDesc
	DX                     DevicePtr
	DZ                     DevicePtr // optional (ADD_RELU): gradient of z
	DGamma, DBeta          DevicePtr // optional fp32 outputs
	Workspace              DevicePtr
	WorkspaceLen           uint64
}

// BatchNormBwd enqueues a BatchNorm backward (fnorm_batchnorm_bwd).
func (h *Handle) BatchNormBwd(stream Stream, a *BatchNormBwd) error {
	if a == nil {
		return goError("fnorm_batchnorm_bwd", StatusBadParamNullPointer, "arguments are nil")
	}
	return callC("fnorm_batchnorm_bwd", []*object{h.obj(), a.BN.obj(), a.XDesc.obj(), a.DYDesc.obj(), a.DXDesc.obj()}, func(e *argErr, op string) cCall {
		hp := e.handle(h, op)
		bp := e.bn(a.BN, op, "bn")
		xp := e.tensor(a.XDesc, op, "x_desc")
		dyp := e.tensor(a.DYDesc, op, "dy_desc")
		dxp := e.tensor(a.DXDesc, op, "dx_desc")
		return func(msg **C.char) C.fnorm_status_t {
			return C.gofn_batchnorm_bwd(hp, C.uintptr_t(stream), bp, xp, up(a.X), dyp, up(a.DY),
				up(a.Y), up(a.Gamma), up(a.Beta), up(a.SavedMean), up(a.SavedInvstd),
				up(a.Reserve), C.size_t(a.ReserveLen), dxp, up(a.DX), up(a.DZ), up(a.DGamma), up(a.DBeta),
				up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		}
	})
}
