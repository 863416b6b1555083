// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

// GNActivation is what follows the GroupNorm normalization (fnorm_gn_activation_t).
type GNActivation int32

const (
	GNActivationNone GNActivation = C.FNORM_GN_ACTIVATION_NONE // y = v
	GNActivationSiLU GNActivation = C.FNORM_GN_ACTIVATION_SILU // y = v * sigmoid(v) (torch.nn.SiLU)
)

// GroupNormDesc holds a GroupNorm's group count, epsilon and activation
// (fnorm_groupnorm_desc_t). Defaults: 32 groups, epsilon 1e-5, no
// activation (torch.nn.GroupNorm(32, C)).
type GroupNormDesc struct {
	cdesc[C.fnorm_groupnorm_desc_t]
}

// NewGroupNormDesc creates a GroupNorm descriptor with the defaults
// (fnorm_groupnorm_desc_create).
func NewGroupNormDesc() (*GroupNormDesc, error) {
	gd := &GroupNormDesc{}
	err := openDesc(gd, &gd.cdesc, "GroupNorm descriptor",
		"fnorm_groupnorm_desc_create", func(d *C.fnorm_groupnorm_desc_t, m **C.char) C.fnorm_status_t {
			return C.gofn_groupnorm_desc_create(d, m)
		},
		"fnorm_groupnorm_desc_destroy", func(d C.fnorm_groupnorm_desc_t, m **C.char) C.fnorm_status_t {
			return C.gofn_groupnorm_desc_destroy(d, m)
		})
	if err != nil {
		return nil, err
	}
	return gd, nil
}

// NewGroupNorm creates a GroupNorm descriptor and sets it (see Set); on
// failure nothing is left behind.
func NewGroupNorm(groups int64, epsilon float64, activation GNActivation) (*GroupNormDesc, error) {
	gd, err := NewGroupNormDesc()
	if err != nil {
		return nil, err
	}
	if err := gd.Set(groups, epsilon, activation); err != nil {
		gd.Close()
		return nil, err
	}
	return gd, nil
}

// Close destroys the descriptor (fnorm_groupnorm_desc_destroy); twice is a no-op.
func (g *GroupNormDesc) Close() error {
	return g.base().close()
}

// Set sets the number of groups (>= 1; the launch checks that it divides
// C), epsilon (finite, >= 0, representable in fp32) and the activation
// (fnorm_groupnorm_desc_set). A refused Set leaves the descriptor as it was.
func (g *GroupNormDesc) Set(groups int64, epsilon float64, activation GNActivation) error {
	const op = "fnorm_groupnorm_desc_set"
	d, unlock, err := g.base().lockWrite(op)
	if err != nil {
		return err
	}
	defer unlock()
	var msg *C.char
	return check(op, C.gofn_groupnorm_desc_set(d, C.int64_t(groups), C.double(epsilon),
		C.fnorm_gn_activation_t(activation), &msg), msg)
}

// Get reads the descriptor back (fnorm_groupnorm_desc_get).
func (g *GroupNormDesc) Get() (groups int64, epsilon float64, activation GNActivation, err error) {
	const op = "fnorm_groupnorm_desc_get"
	d, unlock, err := g.base().lockRead(op)
	if err != nil {
		return 0, 0, 0, err
	}
	defer unlock()
	var gr C.int64_t
	var eps C.double
	var act C.fnorm_gn_activation_t
	var msg *C.char
	err = check(op, C.gofn_groupnorm_desc_get(d, &gr, &eps, &act, &msg), msg)
	return int64(gr), float64(eps), GNActivation(act), err
}

func (g *GroupNormDesc) base() *cdesc[C.fnorm_groupnorm_desc_t] {
	if g == nil {
		return nil
	}
	return &g.cdesc
}

func (g *GroupNormDesc) obj() *object { return g.base().obj() }

func (e *argErr) gn(g *GroupNormDesc, op, arg string) C.fnorm_groupnorm_desc_t {
	return descArg(e, g.base(), op, arg)
}

// GroupNormFwdWorkspaceSize is the scratch fnorm_groupnorm_fwd needs
// (fnorm_groupnorm_fwd_workspace_size): per-split partial statistics, from
// the descriptor, x and the device alone.
func (h *Handle) GroupNormFwdWorkspaceSize(gn *GroupNormDesc, x *TensorDesc) (uint64, error) {
	const op = "fnorm_groupnorm_fwd_workspace_size"
	unlock := rlock(h.obj(), gn.obj(), x.obj())
	defer unlock()
	var e argErr
	hp := e.handle(h, op)
	gp := e.gn(gn, op, "gn")
	xp := e.tensor(x, op, "x_desc")
	if e.err != nil {
		return 0, e.err
	}
	var n C.size_t
	var msg *C.char
	err := check(op, C.gofn_groupnorm_fwd_workspace_size(hp, gp, xp, &n, &msg), msg)
	return uint64(n), err
}

// GroupNormBwdWorkspaceSize is the scratch fnorm_groupnorm_bwd needs
// (fnorm_groupnorm_bwd_workspace_size); w nil: no DGamma / DBeta, ss nil: no
// DScale / DShift will be asked for.
func (h *Handle) GroupNormBwdWorkspaceSize(gn *GroupNormDesc, x, w, ss *TensorDesc) (uint64, error) {
	const op = "fnorm_groupnorm_bwd_workspace_size"
	unlock := rlock(h.obj(), gn.obj(), x.obj(), w.obj(), ss.obj())
	defer unlock()
	var e argErr
	hp := e.handle(h, op)
	gp := e.gn(gn, op, "gn")
	xp := e.tensor(x, op, "x_desc")
	wp := e.tensor(w, op, "w_desc")
	sp := e.tensor(ss, op, "ss_desc")
	if e.err != nil {
		return 0, e.err
	}
	var n C.size_t
	var msg *C.char
	err := check(op, C.gofn_groupnorm_bwd_workspace_size(hp, gp, xp, wp, sp, &n, &msg), msg)
	return uint64(n), err
}

// GroupNormFwd holds the arguments of fnorm_groupnorm_fwd (see the header
// for each). Optional pointers are 0, optional descriptors nil.
//
// x: [N, C, spatial...], channels-first packed or channels-last; Y the same
// (Y may be X: in place). WDesc describes Gamma and Beta (C values, x's
// dtype or Float32); SSDesc describes Scale and Shift ([N, C] or [N, C, 1,
// ...], any strides: the halves of one [N, 2C] tensor are views with row
// stride 2C). Mean and Rstd receive N * G fp32 values (index n * G + g).
type GroupNormFwd struct {
	GN           *GroupNormDesc
	XDesc        *TensorDesc
	X            DevicePtr
	WDesc        *TensorDesc
	Gamma, Beta  DevicePtr // optional (1 and 0)
	SSDesc       *TensorDesc
	Scale, Shift DevicePtr // optional per-sample modulation: v * (1 + scale) + shift
	YDesc        *TensorDesc
	Y            DevicePtr
	Mean, Rstd   DevicePtr // optional fp32 outputs for the backward
	Workspace    DevicePtr
	WorkspaceLen uint64 // bytes at Workspace
}

// GroupNormFwd enqueues a GroupNorm forward (training and inference alike)
// on stream (fnorm_groupnorm_fwd).
func (h *Handle) GroupNormFwd(stream Stream, a *GroupNormFwd) error {
	const op = "fnorm_groupnorm_fwd"
	if a == nil {
		return goError(op, StatusBadParamNullPointer, "arguments are nil")
	}
	unlock := rlock(h.obj(), a.GN.obj(), a.XDesc.obj(), a.WDesc.obj(), a.SSDesc.obj(), a.YDesc.obj())
	defer unlock()
	var e argErr
	hp := e.handle(h, op)
	gp := e.gn(a.GN, op, "gn")
	xp := e.tensor(a.XDesc, op, "x_desc")
	wp := e.tensor(a.WDesc, op, "w_desc")
	sp := e.tensor(a.SSDesc, op, "ss_desc")
	yp := e.tensor(a.YDesc, op, "y_desc")
	if e.err != nil {
		return e.err
	}
	var msg *C.char
	return check(op, C.gofn_groupnorm_fwd(hp, C.uintptr_t(stream), gp, xp, up(a.X), wp, up(a.Gamma), up(a.Beta),
		sp, up(a.Scale), up(a.Shift), yp, up(a.Y), up(a.Mean), up(a.Rstd),
		up(a.Workspace), C.size_t(a.WorkspaceLen), &msg), msg)
}

// GroupNormBwd holds the arguments of fnorm_groupnorm_bwd: the forward's
// descriptor, x, statistics and parameters, and the outputs. Shift is read
// only with SiLU (whose derivative is recomputed from x), Beta with SiLU or
// for DScale. DGamma and
// DBeta are described by WDesc, DScale and DShift by SSDesc (its strides);
// each is optional. DX may be DY or X (in place). Every sum is deterministic.
type GroupNormBwd struct {
	GN             *GroupNormDesc
	XDesc          *TensorDesc
	X              DevicePtr
	DYDesc         *TensorDesc
	DY             DevicePtr
	Mean, Rstd     DevicePtr // required: the forward's outputs
	WDesc          *TensorDesc
	Gamma, Beta    DevicePtr // the forward's (0: gamma 1, beta 0)
	SSDesc         *TensorDesc
	Scale, Shift   DevicePtr // the forward's (0: none)
	DXDesc         *TensorDesc
	DX             DevicePtr
	DGamma, DBeta  DevicePtr // optional outputs described by WDesc
	DScale, DShift DevicePtr // optional outputs described by SSDesc
	Workspace      DevicePtr
	WorkspaceLen   uint64
}

// GroupNormBwd enqueues a GroupNorm backward on stream (fnorm_groupnorm_bwd).
func (h *Handle) GroupNormBwd(stream Stream, a *GroupNormBwd) error {
	const op = "fnorm_groupnorm_bwd"
	if a == nil {
		return goError(op, StatusBadParamNullPointer, "arguments are nil")
	}
	unlock := rlock(h.obj(), a.GN.obj(), a.XDesc.obj(), a.DYDesc.obj(), a.WDesc.obj(), a.SSDesc.obj(), a.DXDesc.obj())
	defer unlock()
	var e argErr
	hp := e.handle(h, op)
	gp := e.gn(a.GN, op, "gn")
	xp := e.tensor(a.XDesc, op, "x_desc")
	dyp := e.tensor(a.DYDesc, op, "dy_desc")
	wp := e.tensor(a.WDesc, op, "w_desc")
	sp := e.tensor(a.SSDesc, op, "ss_desc")
	dxp := e.tensor(a.DXDesc, op, "dx_desc")
	if e.err != nil {
		return e.err
	}
	var msg *C.char
	return check(op, C.gofn_groupnorm_bwd(hp, C.uintptr_t(stream), gp, xp, up(a.X), dyp, up(a.DY),
		up(a.Mean), up(a.Rstd), wp, up(a.Gamma), up(a.Beta), sp, up(a.Scale), up(a.Shift),
		dxp, up(a.DX), up(a.DGamma), up(a.DBeta), up(a.DScale), up(a.DShift),
		up(a.Workspace), C.size_t(a.WorkspaceLen), &msg), msg)
}
