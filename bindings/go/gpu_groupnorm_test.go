// SPDX-License-Identifier: Apache-2.0

package fusednorm_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/libfusednorm/libfusednorm/bindings/go"
)

// gnCase is one GroupNorm configuration: dims [N, C, spatial...].
type gnCase struct {
	name     string
	dims     []int64
	groups   int64
	nhwc     bool // channels-last: C fastest, then the spatial dimensions, then N
	silu     bool
	affine   bool // gamma and beta
	wFloat32 bool // gamma / beta (and dgamma / dbeta) in fp32
	ss       int  // 0: no scale / shift; 1: packed [N, C]; 2: halves of one [N, 2C] as [N, C, 1, 1]
	off      int  // element offset of every data pointer (1: misaligned)
}

// gnStrides: the element strides of dims in the case's layout.
func gnStrides(dims []int64, nhwc bool) []int64 {
	r := len(dims)
	s := make([]int64, r)
	if nhwc {
		s[1] = 1
		acc := dims[1]
		for d := r - 1; d >= 2; d-- {
			s[d] = acc
			acc *= dims[d]
		}
		s[0] = acc
		return s
	}
	s[r-1] = 1
	for d := r - 2; d >= 0; d-- {
		s[d] = s[d+1] * dims[d+1]
	}
	return s
}

func sigmoid(v float64) float64 { return 1 / (1 + math.Exp(-v)) }

// gnRef is the header's forward and backward in float64. at(n, c, s) is
// the memory index of (sample, channel, spatial position); scale and shift
// are [N*C] (zeros when absent), gamma and beta [C].
type gnRef struct {
	y, mean, rstd                     []float64
	dx, dgamma, dbeta, dscale, dshift []float64
}

func groupNormRef(x, dy, gamma, beta, scale, shift []float64, n, c, hw, g int, silu bool, eps float64,
	at func(i, ch, s int) int) gnRef {
	cpg := c / g
	m := float64(cpg * hw)
	r := gnRef{y: make([]float64, len(x)), mean: make([]float64, n*g), rstd: make([]float64, n*g),
		dx: make([]float64, len(x)), dgamma: make([]float64, c), dbeta: make([]float64, c),
		dscale: make([]float64, n*c), dshift: make([]float64, n*c)}
	xhat := make([]float64, len(x))
	v0 := make([]float64, len(x))
	du := make([]float64, len(x))
	for i := range n {
		for gi := range g {
			mu, vr := 0.0, 0.0
			for ch := gi * cpg; ch < (gi+1)*cpg; ch++ {
				for s := range hw {
					mu += x[at(i, ch, s)]
				}
			}
			mu /= m
			for ch := gi * cpg; ch < (gi+1)*cpg; ch++ {
				for s := range hw {
					d := x[at(i, ch, s)] - mu
					vr += d * d
				}
			}
			rs := 1 / math.Sqrt(vr/m+eps)
			r.mean[i*g+gi], r.rstd[i*g+gi] = mu, rs
			mg, mgx := 0.0, 0.0
			for ch := gi * cpg; ch < (gi+1)*cpg; ch++ {
				a := 1 + scale[i*c+ch]
				for s := range hw {
					e := at(i, ch, s)
					xhat[e] = (x[e] - mu) * rs
					v0[e] = xhat[e]*gamma[ch] + beta[ch]
					v := v0[e]*a + shift[i*c+ch]
					r.y[e], du[e] = v, dy[e]
					if silu {
						sg := sigmoid(v)
						r.y[e] = v * sg
						du[e] = dy[e] * sg * (1 + v*(1-sg))
					}
					gg := du[e] * a * gamma[ch]
					mg += gg
					mgx += gg * xhat[e]
				}
			}
			mg /= m
			mgx /= m
			for ch := gi * cpg; ch < (gi+1)*cpg; ch++ {
				a := 1 + scale[i*c+ch]
				for s := range hw {
					e := at(i, ch, s)
					r.dx[e] = rs * (du[e]*a*gamma[ch] - mg - xhat[e]*mgx)
					r.dgamma[ch] += du[e] * a * xhat[e]
					r.dbeta[ch] += du[e] * a
					r.dscale[i*c+ch] += du[e] * v0[e]
					r.dshift[i*c+ch] += du[e]
				}
			}
		}
	}
	return r
}

// GroupNorm forward and backward against the float64 reference, every
// dtype, both layouts, with SiLU and the per-sample scale / shift (packed,
// and as the halves of one [N, 2C] tensor, diffusers' temb.chunk(2, dim=1)),
// on odd shapes: C / G = 1, G = 1, rank 3 and 5, one sample, misaligned
// pointers, no gamma / beta. Outputs are poisoned (NaN) first.
func TestGPUGroupNorm(t *testing.T) {
	h := gpu(t)
	cases := []gnCase{
		{name: "2x64x9x7/G32", dims: []int64{2, 64, 9, 7}, groups: 32, affine: true},
		{name: "2x64x9x7/G32/nhwc", dims: []int64{2, 64, 9, 7}, groups: 32, nhwc: true, affine: true},
		{name: "2x64x9x7/G32/silu/scale-shift/fp32-params", dims: []int64{2, 64, 9, 7}, groups: 32, silu: true,
			affine: true, wFloat32: true, ss: 1},
		{name: "2x64x9x7/G32/nhwc/silu/scale-shift-chunked", dims: []int64{2, 64, 9, 7}, groups: 32, nhwc: true,
			silu: true, affine: true, ss: 2},
		{name: "1x12x13/G12(C/G=1)/silu/scale-shift", dims: []int64{1, 12, 13}, groups: 12, silu: true, affine: true, ss: 1},
		{name: "3x6x5x3x7/G1/ndhwc/scale-shift-chunked/misaligned", dims: []int64{3, 6, 5, 3, 7}, groups: 1,
			nhwc: true, affine: true, ss: 2, off: 1},
		{name: "4x10x11x1/G5/silu/no-affine/misaligned", dims: []int64{4, 10, 11, 1}, groups: 5, silu: true, off: 1},
		{name: "2x96x17x19/G32/nhwc/silu/scale-shift", dims: []int64{2, 96, 17, 19}, groups: 32, nhwc: true,
			silu: true, affine: true, ss: 1},
	}
	for _, dt := range dtypes {
		for ci, c := range cases {
			t.Run(name("groupnorm/", dt, "/", c.name), func(t *testing.T) {
				runGroupNormCase(t, h, dt, c, uint64(ci*10+int(dt)+7000))
			})
		}
	}
}

func runGroupNormCase(t *testing.T, h *fusednorm.Handle, dt fusednorm.DType, c gnCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 38))
	const eps = 1e-5
	n, ch, g := int(c.dims[0]), int(c.dims[1]), int(c.groups)
	hw := 1
	for _, d := range c.dims[2:] {
		hw *= int(d)
	}
	total := n * ch * hw
	at := func(i, cc, s int) int {
		if c.nhwc {
			return (i*hw+s)*ch + cc
		}
		return (i*ch+cc)*hw + s
	}
	xd := tensor(t, dt, c.dims, gnStrides(c.dims, c.nhwc))
	wdt := dt
	if c.wFloat32 {
		wdt = fusednorm.Float32
	}
	gd, err := fusednorm.NewGroupNorm(c.groups, eps, map[bool]fusednorm.GNActivation{false: fusednorm.GNActivationNone,
		true: fusednorm.GNActivationSiLU}[c.silu])
	if err != nil {
		t.Fatal(err)
	}
	defer gd.Close()

	// x: each channel its own mean (the fp32 statistics must not cancel).
	xv0 := make([]float64, total)
	for i := range n {
		for cc := range ch {
			mu := 2*float64(cc%7) - 6
			for s := range hw {
				xv0[at(i, cc, s)] = mu + rng.NormFloat64()
			}
		}
	}
	x := alloc(t, dt, total, c.off)
	xv := x.upload(t, xv0)
	ones, zeros := make([]float64, ch), make([]float64, ch)
	for i := range ones {
		ones[i] = 1
	}
	gv, bv := ones, zeros
	var wd *fusednorm.TensorDesc
	var gamma, beta *dev
	if c.affine {
		wd = tensor(t, wdt, []int64{int64(ch)}, nil)
		gamma = alloc(t, wdt, ch, c.off)
		gv = gamma.upload(t, randn(rng, ch, 1, 0.3))
		beta = alloc(t, wdt, ch, c.off)
		bv = beta.upload(t, randn(rng, ch, 0, 0.3))
	}
	// scale / shift: [N, C] packed, or views into one [N, 2C] buffer.
	sv, shv := make([]float64, n*ch), make([]float64, n*ch)
	var ssd *fusednorm.TensorDesc
	var scaleP, shiftP fusednorm.DevicePtr
	ssLen, ssLd := n*ch, ch
	switch c.ss {
	case 1:
		ssd = tensor(t, dt, []int64{int64(n), int64(ch)}, nil)
		sc := alloc(t, dt, n*ch, c.off)
		sv = sc.upload(t, randn(rng, n*ch, 0, 0.3))
		sh := alloc(t, dt, n*ch, c.off)
		shv = sh.upload(t, randn(rng, n*ch, 0, 0.3))
		scaleP, shiftP = sc.Ptr, sh.Ptr
	case 2:
		ssLd, ssLen = 2*ch, (n-1)*2*ch+ch
		ssd = tensor(t, dt, []int64{int64(n), int64(ch), 1, 1}, []int64{int64(2 * ch), 1, 1, 1})
		both := alloc(t, dt, 2*n*ch, c.off)
		bothV := both.upload(t, randn(rng, 2*n*ch, 0, 0.3))
		for i := range n {
			copy(sv[i*ch:(i+1)*ch], bothV[i*2*ch:i*2*ch+ch])
			copy(shv[i*ch:(i+1)*ch], bothV[i*2*ch+ch:(i+1)*2*ch])
		}
		scaleP, shiftP = both.Ptr, both.Ptr.Add(uint64(ch*dt.Size()))
	}
	y := alloc(t, dt, total, c.off)
	mean := alloc(t, fusednorm.Float32, n*g, 0)
	rstd := alloc(t, fusednorm.Float32, n*g, 0)
	ws := must[uint64](t)(h.GroupNormFwdWorkspaceSize(gd, xd))
	fa := &fusednorm.GroupNormFwd{GN: gd, XDesc: xd, X: x.Ptr, WDesc: wd, SSDesc: ssd, Scale: scaleP, Shift: shiftP,
		YDesc: xd, Y: y.Ptr, Mean: mean.Ptr, Rstd: rstd.Ptr, Workspace: workspace(t, ws), WorkspaceLen: ws}
	if c.affine {
		fa.Gamma, fa.Beta = gamma.Ptr, beta.Ptr
	}
	if err := h.GroupNormFwd(0, fa); err != nil {
		t.Fatal(err)
	}
	dy := alloc(t, dt, total, c.off)
	dyv := dy.upload(t, randn(rng, total, 0, 1))
	ref := groupNormRef(xv, dyv, gv, bv, sv, shv, n, ch, hw, g, c.silu, eps, at)
	tl := tolOf(dt)
	compare(t, "y", y.download(t), ref.y, tl)
	compare(t, "mean", mean.download(t), ref.mean, tol{1e-5, 1e-5})
	compare(t, "rstd", rstd.download(t), ref.rstd, tol{1e-4, 1e-5})

	// Backward from the forward's statistics.
	dx := alloc(t, dt, total, c.off)
	var dgamma, dbeta, dscale, dshift *dev
	ba := &fusednorm.GroupNormBwd{GN: gd, XDesc: xd, X: x.Ptr, DYDesc: xd, DY: dy.Ptr, Mean: mean.Ptr, Rstd: rstd.Ptr,
		WDesc: wd, SSDesc: ssd, Scale: scaleP, Shift: shiftP, DXDesc: xd, DX: dx.Ptr}
	if c.affine {
		ba.Gamma, ba.Beta = gamma.Ptr, beta.Ptr
		dgamma, dbeta = alloc(t, wdt, ch, c.off), alloc(t, wdt, ch, c.off)
		ba.DGamma, ba.DBeta = dgamma.Ptr, dbeta.Ptr
	}
	if c.ss != 0 {
		// Described by ss_desc: for the chunked views, [N, 2C] buffers whose
		// second halves of each row are not the tensor's.
		dscale, dshift = alloc(t, dt, ssLen, c.off), alloc(t, dt, ssLen, c.off)
		ba.DScale, ba.DShift = dscale.Ptr, dshift.Ptr
	}
	wsb := must[uint64](t)(h.GroupNormBwdWorkspaceSize(gd, xd, wd, ssd))
	ba.Workspace, ba.WorkspaceLen = workspace(t, wsb), wsb
	if err := h.GroupNormBwd(0, ba); err != nil {
		t.Fatal(err)
	}
	compare(t, "dx", dx.download(t), ref.dx, tl)
	sums := func(d fusednorm.DType) tol { // sums over many values in fp32, rounded to d
		s := tolOf(d)
		s.rtol, s.atol = max(s.rtol, 1e-4), max(s.atol, 1e-4)
		return s
	}
	if c.affine {
		compare(t, "dgamma", dgamma.download(t), ref.dgamma, sums(wdt))
		compare(t, "dbeta", dbeta.download(t), ref.dbeta, sums(wdt))
	}
	if c.ss != 0 {
		for _, o := range []struct {
			what string
			d    *dev
			want []float64
		}{{"dscale", dscale, ref.dscale}, {"dshift", dshift, ref.dshift}} {
			got := o.d.download(t)
			rows := make([]float64, 0, n*ch)
			for i := range n {
				rows = append(rows, got[i*ssLd:i*ssLd+ch]...)
			}
			compare(t, o.what, rows, o.want, sums(dt))
			for j := range ssLen {
				if j%ssLd >= ch && !math.IsNaN(got[j]) {
					t.Errorf("%s: element %d lies between rows of the [N, C] view and was written (%v)", o.what, j, got[j])
					break
				}
			}
		}
	}
}

// Refused GroupNorm launches return *Error with the library's status and a
// message naming the argument, and write nothing.
func TestGPUGroupNormRefusals(t *testing.T) {
	h := gpu(t)
	dims := []int64{2, 12, 5}
	xd := tensor(t, fusednorm.Float32, dims, nil)
	x := alloc(t, fusednorm.Float32, 120, 0)
	x.upload(t, randn(rand.New(rand.NewPCG(1, 2)), 120, 0, 1))
	y := alloc(t, fusednorm.Float32, 120, 0)
	stats := alloc(t, fusednorm.Float32, 64, 0)
	g5, err := fusednorm.NewGroupNorm(5, 1e-5, fusednorm.GNActivationNone)
	if err != nil {
		t.Fatal(err)
	}
	defer g5.Close()
	g4, err := fusednorm.NewGroupNorm(4, 1e-5, fusednorm.GNActivationSiLU)
	if err != nil {
		t.Fatal(err)
	}
	defer g4.Close()
	expect := func(what string, err error, want error, words ...string) {
		t.Helper()
		var fe *fusednorm.Error
		if !errors.Is(err, want) || !errors.As(err, &fe) {
			t.Errorf("%s: %v, want %v", what, err, want)
			return
		}
		for _, w := range words {
			if strings.Contains(fe.Message, w) {
				t.Logf("%s: %v", what, err)
				return
			}
		}
		t.Errorf("%s: message %q names none of %q", what, fe.Message, words)
	}
	_, err = h.GroupNormFwdWorkspaceSize(g5, xd)
	expect("workspace query, 5 groups of 12 channels", err, fusednorm.ErrShape, "group")
	fwd := func(gd *fusednorm.GroupNormDesc, yd, wd *fusednorm.TensorDesc) *fusednorm.GroupNormFwd {
		return &fusednorm.GroupNormFwd{GN: gd, XDesc: xd, X: x.Ptr, WDesc: wd, YDesc: yd, Y: y.Ptr,
			Mean: stats.Ptr, Rstd: stats.Ptr.Add(128)}
	}
	expect("5 groups of 12 channels", h.GroupNormFwd(0, fwd(g5, xd, nil)), fusednorm.ErrShape, "group")
	y16 := tensor(t, fusednorm.Float16, dims, nil)
	expect("y fp16, x fp32", h.GroupNormFwd(0, fwd(g4, y16, nil)), fusednorm.ErrBadParam, "y_desc")
	w5 := tensor(t, fusednorm.Float32, []int64{5}, nil)
	a := fwd(g4, xd, w5)
	a.Gamma = stats.Ptr
	expect("w_desc of 5 values", h.GroupNormFwd(0, a), fusednorm.ErrBadParam, "w_desc")
	a = fwd(g4, xd, nil)
	a.Gamma = stats.Ptr
	expect("gamma without w_desc", h.GroupNormFwd(0, a), fusednorm.ErrBadParam, "w_desc")
	sliced := tensor(t, fusednorm.Float32, []int64{2, 12, 4}, []int64{60, 5, 1})
	a = fwd(g4, sliced, nil)
	a.XDesc = sliced
	expect("a sliced x", h.GroupNormFwd(0, a), fusednorm.ErrNotSupported, "x_desc", "layout")
	if need := must[uint64](t)(h.GroupNormFwdWorkspaceSize(g4, xd)); need > 0 {
		a = fwd(g4, xd, nil)
		a.Workspace, a.WorkspaceLen = workspace(t, need), need-1
		expect("workspace one byte short", h.GroupNormFwd(0, a), fusednorm.ErrInsufficientWorkspace, "workspace")
	}
	a = fwd(g4, xd, nil)
	a.X = 0
	expect("x NULL", h.GroupNormFwd(0, a), fusednorm.ErrNullPointer, "x")
	wsb := must[uint64](t)(h.GroupNormBwdWorkspaceSize(g4, xd, nil, nil))
	dg := alloc(t, fusednorm.Float32, 12, 0)
	ba := &fusednorm.GroupNormBwd{GN: g4, XDesc: xd, X: x.Ptr, DYDesc: xd, DY: x.Ptr, Rstd: stats.Ptr, DXDesc: xd,
		DX: y.Ptr, Workspace: workspace(t, wsb), WorkspaceLen: wsb}
	expect("backward without mean", h.GroupNormBwd(0, ba), fusednorm.ErrBadParam, "mean")
	ba.Mean, ba.DGamma = stats.Ptr, dg.Ptr
	expect("dgamma without w_desc", h.GroupNormBwd(0, ba), fusednorm.ErrBadParam, "w_desc")
	for _, o := range []struct {
		what string
		d    *dev
	}{{"y", y}, {"mean / rstd", stats}, {"dgamma", dg}} {
		for i, v := range o.d.download(t) {
			if !math.IsNaN(v) {
				t.Errorf("a refused launch wrote %s[%d] = %v", o.what, i, v)
				break
			}
		}
	}
}
