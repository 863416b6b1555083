// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

// LinearEpilogue is what follows the GEMM (fnorm_linear_epilogue_t).
type LinearEpilogue int32

const (
	LinearEpilogueNone     LinearEpilogue = C.FNORM_LINEAR_EPILOGUE_NONE      // y = x W
	LinearEpilogueBias     LinearEpilogue = C.FNORM_LINEAR_EPILOGUE_BIAS      // y = x W + b
	LinearEpilogueBiasReLU LinearEpilogue = C.FNORM_LINEAR_EPILOGUE_BIAS_RELU // y = max(x W + b, 0)
	LinearEpilogueBiasGELU LinearEpilogue = C.FNORM_LINEAR_EPILOGUE_BIAS_GELU // y = gelu_tanh(x W + b)
)

// LinearWeightLayout is how W is stored (fnorm_linear_weight_layout_t).
type LinearWeightLayout int32

const (
	LinearWeightKN LinearWeightLayout = C.FNORM_LINEAR_WEIGHT_KN // w is [k, n]: y = x w
	LinearWeightNK LinearWeightLayout = C.FNORM_LINEAR_WEIGHT_NK // w is [n, k] (PyTorch's): y = x w^T
)

// LinearFlag is a linear descriptor flag (fnorm_linear_flag_t), ORed.
type LinearFlag uint32

const (
	LinearFlagNone      LinearFlag = C.FNORM_LINEAR_FLAG_NONE
	LinearFlagAllowTF32 LinearFlag = C.FNORM_LINEAR_FLAG_ALLOW_TF32 // fp32 GEMMs may use TF32
)

// LinearDesc configures the fully-connected layer (fnorm_linear_desc_t).
// Defaults: no epilogue, WEIGHT_KN, no flags.
type LinearDesc struct {
	cdesc[C.fnorm_linear_desc_t]
}

// NewLinearDesc creates a linear descriptor with the defaults
// (fnorm_linear_desc_create); ErrNotSupportedBuild without cuBLASLt.
func NewLinearDesc() (*LinearDesc, error) {
	ld := &LinearDesc{}
	return opened(ld, openDesc(ld, &ld.cdesc, "linear descriptor",
		"fnorm_linear_desc_create", func(d *C.fnorm_linear_desc_t, m **C.char) C.fnorm_status_t { return C.gofn_linear_desc_create(d, m) },
		"fnorm_linear_desc_destroy", func(d C.fnorm_linear_desc_t, m **C.char) C.fnorm_status_t { return C.gofn_linear_desc_destroy(d, m) }))
}

// NewLinear creates a linear descriptor and sets it (see Set).
func NewLinear(epilogue LinearEpilogue, layout LinearWeightLayout, flags LinearFlag) (*LinearDesc, error) {
	ld, err := NewLinearDesc()
	return newSet(ld, err, func(d *LinearDesc) error { return d.Set(epilogue, layout, flags) })
}

// Close destroys the descriptor (fnorm_linear_desc_destroy); twice is a no-op.
func (l *LinearDesc) Close() error {
	return l.base().close()
}

// Set sets the epilogue, the weight layout and the flags (fnorm_linear_desc_set).
func (l *LinearDesc) Set(epilogue LinearEpilogue, layout LinearWeightLayout, flags LinearFlag) error {
	return l.base().set("fnorm_linear_desc_set", func(d C.fnorm_linear_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_linear_desc_set(d, C.fnorm_linear_epilogue_t(epilogue),
			C.fnorm_linear_weight_layout_t(layout), C.uint32_t(flags), msg)
	})
}

// Get reads the descriptor back (fnorm_linear_desc_get).
func (l *LinearDesc) Get() (epilogue LinearEpilogue, layout LinearWeightLayout, flags LinearFlag, err error) {
	var ep C.fnorm_linear_epilogue_t
	var lay C.fnorm_linear_weight_layout_t
	var f C.uint32_t
	err = l.base().get("fnorm_linear_desc_get", func(d C.fnorm_linear_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_linear_desc_get(d, &ep, &lay, &f, msg)
	})
	return LinearEpilogue(ep), LinearWeightLayout(lay), LinearFlag(f), err
}

func (l *LinearDesc) base() *cdesc[C.fnorm_linear_desc_t] {
	if l == nil {
		return nil
	}
	return &l.cdesc
}

func (l *LinearDesc) obj() *object { return l.base().obj() }

func (e *argErr) linear(l *LinearDesc, op, arg string) C.fnorm_linear_desc_t {
	return descArg(e, l.base(), op, arg)
}

// LinearAuxSize is the bytes of the aux buffer a training forward writes
// and its backward reads (fnorm_linear_aux_size); 0 for None and Bias.
func (h *Handle) LinearAuxSize(desc *LinearDesc, y *TensorDesc) (uint64, error) {
	return querySize("fnorm_linear_aux_size", []*object{h.obj(), desc.obj(), y.obj()}, func(e *argErr, op string) sizeCall {
		hp := e.handle(h, op)
		lp := e.linear(desc, op, "desc")
		yp := e.tensor(y, op, "y_desc")
		return func(n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_linear_aux_size(hp, lp, yp, n, msg)
		}
	})
}

// LinearFwdWorkspaceSize: fnorm_linear_fwd_workspace_size.
func (h *Handle) LinearFwdWorkspaceSize(desc *LinearDesc, x, w, y *TensorDesc) (uint64, error) {
	return querySize("fnorm_linear_fwd_workspace_size", []*object{h.obj(), desc.obj(), x.obj(), w.obj(), y.obj()}, func(e *argErr, op string) sizeCall {
		hp := e.handle(h, op)
		lp := e.linear(desc, op, "desc")
		xp := e.tensor(x, op, "x_desc")
		wp := e.tensor(w, op, "w_desc")
		yp := e.tensor(y, op, "y_desc")
		return func(n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_linear_fwd_workspace_size(hp, lp, xp, wp, yp, n, msg)
		}
	})
}

// LinearFwd holds the arguments of fnorm_linear_fwd.
type LinearFwd struct {
	Desc         *LinearDesc
	XDesc        *TensorDesc
	X            DevicePtr
	WDesc        *TensorDesc
	W            DevicePtr
	Bias         DevicePtr // the Bias* epilogues; else 0
	YDesc        *TensorDesc
	Y            DevicePtr
	Aux          DevicePtr // training with BiasReLU / BiasGELU; 0 for inference
	AuxLen       uint64
	Workspace    DevicePtr
	WorkspaceLen uint64
}

// LinearFwd enqueues y = act(x W + b) (fnorm_linear_fwd).
func (h *Handle) LinearFwd(stream Stream, a *LinearFwd) error {
	if a == nil {
		return goError("fnorm_linear_fwd", StatusBadParamNullPointer, "arguments are nil")
	}
	return callC("fnorm_linear_fwd", []*object{h.obj(), a.Desc.obj(), a.XDesc.obj(), a.WDesc.obj(), a.YDesc.obj()}, func(e *argErr, op string) cCall {
		hp := e.handle(h, op)
		lp := e.linear(a.Desc, op, "desc")
		xp := e.tensor(a.XDesc, op, "x_desc")
		wp := e.tensor(a.WDesc, op, "w_desc")
		yp := e.tensor(a.YDesc, op, "y_desc")
		return func(msg **C.char) C.fnorm_status_t {
			return C.gofn_linear_fwd(hp, C.uintptr_t(stream), lp, xp, up(a.X), wp, up(a.W), up(a.Bias),
				yp, up(a.Y), up(a.Aux), C.size_t(a.AuxLen), up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		}
	})
}

// LinearBwdWorkspaceSize: fnorm_linear_bwd_workspace_size (xProducer nil: none).
func (h *Handle) LinearBwdWorkspaceSize(desc *LinearDesc, x, w, dy *TensorDesc, xProducer *LinearDesc) (uint64, error) {
	return querySize("fnorm_linear_bwd_workspace_size", []*object{h.obj(), desc.obj(), x.obj(), w.obj(), dy.obj(), xProducer.obj()}, func(e *argErr, op string) sizeCall {
		hp := e.handle(h, op)
		lp := e.linear(desc, op, "desc")
		xp := e.tensor(x, op, "x_desc")
		wp := e.tensor(w, op, "w_desc")
		dyp := e.tensor(dy, op, "dy_desc")
		pp := e.linear(xProducer, op, "x_producer")
		return func(n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_linear_bwd_workspace_size(hp, lp, xp, wp, dyp, pp, n, msg)
		}
	})
}

// LinearBwd holds the arguments of fnorm_linear_bwd. Each output is
// optional (0: not computed).
type LinearBwd struct {
	Desc         *LinearDesc
	XDesc        *TensorDesc
	X            DevicePtr // needed for DW only
	WDesc        *TensorDesc
	W            DevicePtr // needed for DX only
	DYDesc       *TensorDesc
	DY           DevicePtr
	Aux          DevicePtr // the forward's aux (BiasReLU / BiasGELU)
	AuxLen       uint64
	XProducer    *LinearDesc // optional: the layer that produced x
	XAux         DevicePtr   // that layer's aux
	XAuxLen      uint64
	DXDesc       *TensorDesc
	DX, DW, DB   DevicePtr
	XDB          DevicePtr // the producer's bias gradient
	Workspace    DevicePtr
	WorkspaceLen uint64
}

// LinearBwd enqueues the backward of LinearFwd (fnorm_linear_bwd).
func (h *Handle) LinearBwd(stream Stream, a *LinearBwd) error {
	if a == nil {
		return goError("fnorm_linear_bwd", StatusBadParamNullPointer, "arguments are nil")
	}
	locks := []*object{h.obj(), a.Desc.obj(), a.XDesc.obj(), a.WDesc.obj(), a.DYDesc.obj(), a.XProducer.obj(),
		a.DXDesc.obj()}
	return callC("fnorm_linear_bwd", locks, func(e *argErr, op string) cCall {
		hp := e.handle(h, op)
		lp := e.linear(a.Desc, op, "desc")
		xp := e.tensor(a.XDesc, op, "x_desc")
		wp := e.tensor(a.WDesc, op, "w_desc")
		dyp := e.tensor(a.DYDesc, op, "dy_desc")
		pp := e.linear(a.XProducer, op, "x_producer")
		dxp := e.tensor(a.DXDesc, op, "dx_desc")
		return func(msg **C.char) C.fnorm_status_t {
			return C.gofn_linear_bwd(hp, C.uintptr_t(stream), lp, xp, up(a.X), wp, up(a.W), dyp, up(a.DY),
				up(a.Aux), C.size_t(a.AuxLen), pp, up(a.XAux), C.size_t(a.XAuxLen), dxp, up(a.DX),
				up(a.DW), up(a.DB), up(a.XDB), up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		}
	})
}
