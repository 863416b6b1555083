// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

// NormMode is LayerNorm or RMSNorm (fnorm_norm_mode_t).
type NormMode int32

const (
	LayerNorm NormMode = C.FNORM_NORM_LAYERNORM // y = (x - mean) * rstd * gamma + beta
	RMSNorm   NormMode = C.FNORM_NORM_RMSNORM   // y = x * rrms * gamma
)

// NormFlag is a normalization descriptor flag (fnorm_norm_flag_t), ORed.
type NormFlag uint32

const (
	NormFlagNone NormFlag = C.FNORM_NORM_FLAG_NONE
	// NormFlagZeroCenteredGamma: the scale applied is (1 + gamma).
	NormFlagZeroCenteredGamma NormFlag = C.FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA
	// NormFlagRoundXhat: Hugging Face's "Llama cast order": x_hat (fp32) is
	// rounded to x's dtype before the scale multiplies it (LlamaRMSNorm's
	// `weight * hidden_states.to(input_dtype)`); the backward's dgamma sums
	// dy * round(x_hat), dx keeps the fp32 formula.
	NormFlagRoundXhat NormFlag = C.FNORM_NORM_FLAG_ROUND_XHAT
)

// NormDesc says which normalization to compute (fnorm_norm_desc_t).
// Defaults: LayerNorm over the last dimension, epsilon 1e-5, no flags.
type NormDesc struct {
	cdesc[C.fnorm_norm_desc_t]
}

// NewNormDesc creates a normalization descriptor with the defaults
// (fnorm_norm_desc_create).
func NewNormDesc() (*NormDesc, error) {
	nd := &NormDesc{}
	return opened(nd, openDesc(nd, &nd.cdesc, "normalization descriptor",
		"fnorm_norm_desc_create", func(d *C.fnorm_norm_desc_t, m **C.char) C.fnorm_status_t { return C.gofn_norm_desc_create(d, m) },
		"fnorm_norm_desc_destroy", func(d C.fnorm_norm_desc_t, m **C.char) C.fnorm_status_t { return C.gofn_norm_desc_destroy(d, m) }))
}

// NewNorm creates a normalization descriptor and sets it (see Set).
func NewNorm(mode NormMode, beginNormAxis int32, epsilon float64) (*NormDesc, error) {
	nd, err := NewNormDesc()
	return newSet(nd, err, func(d *NormDesc) error { return d.Set(mode, beginNormAxis, epsilon) })
}

// Close destroys the descriptor (fnorm_norm_desc_destroy); twice is a no-op.
func (n *NormDesc) Close() error {
	return n.base().close()
}

// Set sets the mode, the first normalized dimension (negative counts from
// the end, -1 the last) and epsilon (fnorm_norm_desc_set). Flags are kept.
func (n *NormDesc) Set(mode NormMode, beginNormAxis int32, epsilon float64) error {
	return n.base().set("fnorm_norm_desc_set", func(d C.fnorm_norm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_norm_desc_set(d, C.fnorm_norm_mode_t(mode), C.int32_t(beginNormAxis), C.double(epsilon), msg)
	})
}

// Get reads the descriptor back (fnorm_norm_desc_get).
func (n *NormDesc) Get() (mode NormMode, beginNormAxis int32, epsilon float64, err error) {
	var m C.fnorm_norm_mode_t
	var ax C.int32_t
	var eps C.double
	err = n.base().get("fnorm_norm_desc_get", func(d C.fnorm_norm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_norm_desc_get(d, &m, &ax, &eps, msg)
	})
	return NormMode(m), int32(ax), float64(eps), err
}

// SetFlags replaces the flags (fnorm_norm_desc_set_flags).
func (n *NormDesc) SetFlags(flags NormFlag) error {
	return n.base().set("fnorm_norm_desc_set_flags", func(d C.fnorm_norm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_norm_desc_set_flags(d, C.uint32_t(flags), msg)
	})
}

// Flags reads the flags (fnorm_norm_desc_get_flags).
func (n *NormDesc) Flags() (NormFlag, error) {
	var f C.uint32_t
	err := n.base().get("fnorm_norm_desc_get_flags", func(d C.fnorm_norm_desc_t, msg **C.char) C.fnorm_status_t {
		return C.gofn_norm_desc_get_flags(d, &f, msg)
	})
	return NormFlag(f), err
}

func (n *NormDesc) base() *cdesc[C.fnorm_norm_desc_t] {
	if n == nil {
		return nil
	}
	return &n.cdesc
}

func (n *NormDesc) obj() *object { return n.base().obj() }

// NormFwdWorkspaceSize is the scratch fnorm_norm_fwd needs for these
// descriptors (fnorm_norm_fwd_workspace_size).
func (h *Handle) NormFwdWorkspaceSize(norm *NormDesc, x, y *TensorDesc) (uint64, error) {
	return h.normSize("fnorm_norm_fwd_workspace_size", norm, x, y, "y_desc",
		func(hp C.fnorm_handle_t, np C.fnorm_norm_desc_t, xp, yp C.fnorm_tensor_desc_t, n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_fwd_workspace_size(hp, np, xp, yp, n, msg)
		})
}

// NormFwd holds the arguments of fnorm_norm_fwd (see the header for each).
// Optional pointers are 0, optional descriptors nil.
type NormFwd struct {
	Norm         *NormDesc
	XDesc        *TensorDesc
	X            DevicePtr
	Residual     DevicePtr // optional: s = x + residual is normalized
	Sum          DevicePtr // optional (with Residual): s written here
	WDesc        *TensorDesc
	Gamma, Beta  DevicePtr // optional (1 and 0); RMSNorm takes no Beta
	YDesc        *TensorDesc
	Y            DevicePtr
	Mean, Rstd   DevicePtr // optional fp32 outputs, one per row
	Workspace    DevicePtr
	WorkspaceLen uint64 // bytes at Workspace
}

// NormFwd enqueues a LayerNorm / RMSNorm forward on stream (fnorm_norm_fwd).
func (h *Handle) NormFwd(stream Stream, a *NormFwd) error {
	if a == nil {
		return goError("fnorm_norm_fwd", StatusBadParamNullPointer, "arguments are nil")
	}
	return h.normFwdCall("fnorm_norm_fwd", a.Norm, a.XDesc, a.WDesc, a.YDesc,
		func(hp C.fnorm_handle_t, np C.fnorm_norm_desc_t, xp, wp, yp C.fnorm_tensor_desc_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_fwd(hp, C.uintptr_t(stream), np, xp, up(a.X), up(a.Residual), up(a.Sum),
				wp, up(a.Gamma), up(a.Beta), yp, up(a.Y), up(a.Mean), up(a.Rstd),
				up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		})
}

// normFwdCall runs NormFwd or NormFwdQuant: the descriptors converted and
// locked as every call's are, then launch.
func (h *Handle) normFwdCall(op string, norm *NormDesc, x, w, y *TensorDesc,
	launch func(C.fnorm_handle_t, C.fnorm_norm_desc_t, C.fnorm_tensor_desc_t, C.fnorm_tensor_desc_t, C.fnorm_tensor_desc_t, **C.char) C.fnorm_status_t) error {
	return callC(op, []*object{h.obj(), norm.obj(), x.obj(), w.obj(), y.obj()}, func(e *argErr, op string) cCall {
		hp, np, xp, wp, yp := e.handle(h, op), e.norm(norm, op, "norm"), e.tensor(x, op, "x_desc"),
			e.tensor(w, op, "w_desc"), e.tensor(y, op, "y_desc")
		return func(msg **C.char) C.fnorm_status_t { return launch(hp, np, xp, wp, yp, msg) }
	})
}

// QuantScaling says how a quantized output is scaled (fnorm_quant_scaling_t).
type QuantScaling int32

// Scalings, taken from the header by the compiler.
const (
	QuantPerTensor QuantScaling = C.FNORM_QUANT_SCALING_PER_TENSOR // static: the caller's fp32 scale
	QuantPerToken  QuantScaling = C.FNORM_QUANT_SCALING_PER_TOKEN  // dynamic: one fp32 scale per row, written
)

// NormFwdQuantWorkspaceSize is the scratch fnorm_norm_fwd_quant needs
// (fnorm_norm_fwd_quant_workspace_size); y in a quantized dtype.
func (h *Handle) NormFwdQuantWorkspaceSize(norm *NormDesc, x, y *TensorDesc, scaling QuantScaling) (uint64, error) {
	return h.normSize("fnorm_norm_fwd_quant_workspace_size", norm, x, y, "y_desc",
		func(hp C.fnorm_handle_t, np C.fnorm_norm_desc_t, xp, yp C.fnorm_tensor_desc_t, n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_fwd_quant_workspace_size(hp, np, xp, yp, C.fnorm_quant_scaling_t(scaling), n, msg)
		})
}

// NormFwdQuantScaleSize is the bytes of NormFwdQuant's Scale
// (fnorm_norm_fwd_quant_scale_size): 4 per tensor, 4 per row per token.
func (h *Handle) NormFwdQuantScaleSize(norm *NormDesc, x *TensorDesc, scaling QuantScaling) (uint64, error) {
	return h.normSize("fnorm_norm_fwd_quant_scale_size", norm, x, nil, "",
		func(hp C.fnorm_handle_t, np C.fnorm_norm_desc_t, xp, _ C.fnorm_tensor_desc_t, n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_fwd_quant_scale_size(hp, np, xp, C.fnorm_quant_scaling_t(scaling), n, msg)
		})
}

// NormFwdQuant holds the arguments of fnorm_norm_fwd_quant: NormFwd's (its
// YDesc in Float8E4M3, Float8E5M2 or Int8), then the scaling, Scale (read
// per tensor, written per token) and the optional Amax (one fp32: the
// largest |value| before scaling). Rounding, saturation and NaN: the header.
type NormFwdQuant struct {
	NormFwd
	Scaling QuantScaling
	Scale   DevicePtr // fp32: one (per tensor, read) or one per row (per token, written)
	Amax    DevicePtr // optional fp32 output
}

// NormFwdQuant enqueues a LayerNorm / RMSNorm forward writing y quantized
// (fnorm_norm_fwd_quant).
func (h *Handle) NormFwdQuant(stream Stream, a *NormFwdQuant) error {
	if a == nil {
		return goError("fnorm_norm_fwd_quant", StatusBadParamNullPointer, "arguments are nil")
	}
	return h.normFwdCall("fnorm_norm_fwd_quant", a.Norm, a.XDesc, a.WDesc, a.YDesc,
		func(hp C.fnorm_handle_t, np C.fnorm_norm_desc_t, xp, wp, yp C.fnorm_tensor_desc_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_fwd_quant(hp, C.uintptr_t(stream), np, xp, up(a.X), up(a.Residual), up(a.Sum),
				wp, up(a.Gamma), up(a.Beta), yp, up(a.Y), C.fnorm_quant_scaling_t(a.Scaling), up(a.Scale), up(a.Amax),
				up(a.Mean), up(a.Rstd), up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		})
}

// NormBwdWorkspaceSize is the scratch fnorm_norm_bwd needs
// (fnorm_norm_bwd_workspace_size); w nil when no dgamma/dbeta is asked for.
func (h *Handle) NormBwdWorkspaceSize(norm *NormDesc, x, w *TensorDesc) (uint64, error) {
	return h.normSize("fnorm_norm_bwd_workspace_size", norm, x, w, "w_desc",
		func(hp C.fnorm_handle_t, np C.fnorm_norm_desc_t, xp, wp C.fnorm_tensor_desc_t, n *C.size_t, msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_bwd_workspace_size(hp, np, xp, wp, n, msg)
		})
}

// normSize runs one of the norm size queries over the handle, the norm
// descriptor, x and t (nil where the query has no fourth descriptor; tArg
// names it in a refusal), converted and locked as every call's are.
func (h *Handle) normSize(op string, norm *NormDesc, x, t *TensorDesc, tArg string,
	call func(C.fnorm_handle_t, C.fnorm_norm_desc_t, C.fnorm_tensor_desc_t, C.fnorm_tensor_desc_t, *C.size_t, **C.char) C.fnorm_status_t) (uint64, error) {
	return querySize(op, []*object{h.obj(), norm.obj(), x.obj(), t.obj()}, func(e *argErr, op string) sizeCall {
		hp, np, xp, tp := e.handle(h, op), e.norm(norm, op, "norm"), e.tensor(x, op, "x_desc"), e.tensor(t, op, tArg)
		return func(n *C.size_t, msg **C.char) C.fnorm_status_t { return call(hp, np, xp, tp, n, msg) }
	})
}

// NormBwd holds the arguments of fnorm_norm_bwd (see the header).
type NormBwd struct {
	Norm          *NormDesc
	XDesc         *TensorDesc
	X             DevicePtr // what was normalized (x, or the forward's sum)
	DYDesc        *TensorDesc
	DY            DevicePtr
	Mean, Rstd    DevicePtr // the forward's statistics (Mean 0 for RMSNorm)
	WDesc         *TensorDesc
	Gamma         DevicePtr // optional (1)
	DSum          DevicePtr // optional: gradient reaching the forward's sum
	DXDesc        *TensorDesc
	DX            DevicePtr
	DGamma, DBeta DevicePtr // optional outputs described by WDesc
	Workspace     DevicePtr
	WorkspaceLen  uint64
}

// NormBwd enqueues a LayerNorm / RMSNorm backward on stream (fnorm_norm_bwd).
func (h *Handle) NormBwd(stream Stream, a *NormBwd) error {
	if a == nil {
		return goError("fnorm_norm_bwd", StatusBadParamNullPointer, "arguments are nil")
	}
	return callC("fnorm_norm_bwd", []*object{h.obj(), a.Norm.obj(), a.XDesc.obj(), a.DYDesc.obj(), a.WDesc.obj(), a.DXDesc.obj()}, func(e *argErr, op string) cCall {
		hp := e.handle(h, op)
		np := e.norm(a.Norm, op, "norm")
		xp := e.tensor(a.XDesc, op, "x_desc")
		dyp := e.tensor(a.DYDesc, op, "dy_desc")
		wp := e.tensor(a.WDesc, op, "w_desc")
		dxp := e.tensor(a.DXDesc, op, "dx_desc")
		return func(msg **C.char) C.fnorm_status_t {
			return C.gofn_norm_bwd(hp, C.uintptr_t(stream), np, xp, up(a.X), dyp, up(a.DY),
				up(a.Mean), up(a.Rstd), wp, up(a.Gamma), up(a.DSum), dxp, up(a.DX),
				up(a.DGamma), up(a.DBeta), up(a.Workspace), C.size_t(a.WorkspaceLen), msg)
		}
	})
}

func up(p DevicePtr) C.uintptr_t { return C.uintptr_t(p) }

// argErr collects the C pointers of a call's Go objects and the first
// refusal (a nil handle, a closed object); the caller holds their locks.
type argErr struct{ err error }

func (e *argErr) set(err error) {
	if e.err == nil {
		e.err = err
	}
}

func (e *argErr) handle(h *Handle, op string) C.fnorm_handle_t {
	p, err := h.ptr(op)
	e.set(err)
	return p
}

func (e *argErr) tensor(t *TensorDesc, op, arg string) C.fnorm_tensor_desc_t {
	return descArg(e, t.base(), op, arg)
}

func (e *argErr) norm(n *NormDesc, op, arg string) C.fnorm_norm_desc_t {
	return descArg(e, n.base(), op, arg)
}
