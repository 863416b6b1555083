// SPDX-License-Identifier: Apache-2.0
//! GPU test of GroupNorm through the safe crate: forward (y, mean, rstd) and
//! backward (dx, dgamma, dbeta, dscale, dshift) against a float64 host
//! reference of the header's formulas on random inputs, every dtype, NCHW
//! and channels-last, SiLU, the per-sample scale / shift (packed, and as the
//! halves of one [N, 2C] tensor, diffusers' `temb.chunk(2, dim=1)`), gamma /
//! beta in x's dtype and in fp32, odd shapes (C / G = 1, G = 1, rank 3 and
//! rank 5, one sample, misaligned pointers). Outputs are poisoned (NaN)
//! first, so an element left unwritten fails; the gaps between the rows of
//! a strided dscale / dshift must stay poisoned. Refused launches return the
//! library's status and message and write nothing. Without a device each
//! test prints `SKIP: <reason>` and passes.
//!
//! Tolerances, per element: |got - want| <= r * magnitude, r = 2 u + 1e-5
//! (u: the unit roundoff of the output's dtype), the magnitude being what
//! the value is computed from (for y: |x_hat| |gamma| |1 + scale| + |beta|
//! |1 + scale| + |shift| with |x_hat| counted from |x| + |mean|, the fp32
//! cancellation; for the gradients: the sums of |terms|, with |dy| (1 +
//! |v|) standing for SiLU's |du|).
use core::ffi::c_void;
use core::ptr::{null, null_mut};

use fusednorm::*;
use fusednorm_testkit::check::{compare, Rng};
use fusednorm_testkit::cuda::{self, DeviceBuffer};
use fusednorm_testkit::half::Dt;

mod common;
use common::*;

/// A device tensor of `dt`: uploaded values, or `n` poisoned elements, `off`
/// elements past the start of its allocation.
struct T {
    buf: DeviceBuffer,
    dt: Dt,
}

impl T {
    fn input(dt: Dt, vals: &[f64], off: usize) -> T {
        T { buf: DeviceBuffer::from_bytes(&dt.encode(vals), off * dt.size()).unwrap(), dt }
    }
    fn output(dt: Dt, n: usize, off: usize) -> T {
        let buf = DeviceBuffer::with_offset(n * dt.size(), off * dt.size()).unwrap();
        buf.poison().unwrap();
        T { buf, dt }
    }
    fn p(&self) -> *mut c_void {
        self.buf.ptr()
    }
    fn f(&self) -> *mut f32 {
        assert_eq!(self.dt, Dt::F32);
        self.buf.f32_ptr()
    }
    fn read(&self) -> Vec<f64> {
        self.dt.decode(&self.buf.download().unwrap())
    }
}

fn scratch(bytes: usize) -> Option<DeviceBuffer> {
    (bytes > 0).then(|| DeviceBuffer::new(bytes).unwrap())
}
fn sp(b: &Option<DeviceBuffer>) -> *mut c_void {
    b.as_ref().map_or(null_mut(), |b| b.ptr())
}
fn sl(b: &Option<DeviceBuffer>) -> usize {
    b.as_ref().map_or(0, |b| b.len())
}

fn rel(dt: Dt) -> f64 {
    2.0 * dt.eps() + 1e-5
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

#[derive(Clone, Copy, PartialEq)]
enum Ss {
    /// No scale / shift.
    None,
    /// scale and shift: two packed [N, C] tensors.
    Packed,
    /// The halves of one [N, 2C] tensor (row stride 2C), as [N, C, 1, 1].
    Chunked,
}

struct Case {
    dt: Dt,
    /// gamma / beta (and their gradients) in fp32 rather than x's dtype.
    w_f32: bool,
    /// scale / shift (and their gradients) in fp32 rather than x's dtype.
    ss_f32: bool,
    dims: Vec<usize>, // [N, C, spatial...]
    groups: usize,
    nhwc: bool,
    act: GnActivation,
    affine: bool,
    ss: Ss,
    misalign: bool,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "{:?} {:?} G={} {}{}{}{}{}{}",
            self.dt,
            self.dims,
            self.groups,
            if self.nhwc { "channels-last" } else { "channels-first" },
            if self.act == GnActivation::Silu { " +SiLU" } else { "" },
            if !self.affine { " no-affine" } else if self.w_f32 { " w-fp32" } else { "" },
            match self.ss {
                Ss::None => "",
                Ss::Packed => " +scale/shift",
                Ss::Chunked => " +scale/shift(chunked)",
            },
            if self.ss != Ss::None && self.ss_f32 { " ss-fp32" } else { "" },
            if self.misalign { " misaligned" } else { "" },
        )
    }
}

/// Collects per-case results; fails the test with all mismatches at the end.
#[derive(Default)]
struct Report {
    cases: usize,
    failures: Vec<String>,
    worst: f64,
}
impl Report {
    fn check(&mut self, case: &str, what: &str, got: &[f64], want: &[f64], tol: &[f64]) {
        match compare(what, got, want, tol) {
            Ok(w) => self.worst = self.worst.max(w),
            Err(e) => self.failures.push(format!("{case}: {e}")),
        }
    }
}

fn run_case(h: &Handle, k: &Case, rep: &mut Report, seed: u64) -> Result<(), Error> {
    let name = k.name();
    let dt = k.dt;
    let wdt = if k.w_f32 { Dt::F32 } else { dt };
    let sdt = if k.ss_f32 { Dt::F32 } else { dt };
    let (n, ch, g) = (k.dims[0], k.dims[1], k.groups);
    let hw: usize = k.dims[2..].iter().product();
    let total = n * ch * hw;
    let cpg = ch / g;
    let m = (cpg * hw) as f64;
    let eps = 1e-5;
    let silu = k.act == GnActivation::Silu;
    let off = usize::from(k.misalign);

    // Sizes [N, C, spatial...]; strides channels-first packed, or
    // channels-last: C fastest, then the spatial dimensions, then N.
    let dims: Vec<i64> = k.dims.iter().map(|&d| d as i64).collect();
    let strides: Vec<i64> = if k.nhwc {
        let r = dims.len();
        let mut s = vec![0i64; r];
        s[1] = 1;
        let mut acc = ch as i64;
        for d in (2..r).rev() {
            s[d] = acc;
            acc *= dims[d];
        }
        s[0] = acc;
        s
    } else {
        let mut s = vec![1i64; dims.len()];
        for d in (0..dims.len() - 1).rev() {
            s[d] = s[d + 1] * dims[d + 1];
        }
        s
    };
    let at = |i: usize, c: usize, s: usize| if k.nhwc { (i * hw + s) * ch + c } else { (i * ch + c) * hw + s };

    let mut rng = Rng::new(seed);
    // Each channel its own offset (groups far from mean 0: the fp32
    // statistics must not cancel), values in the dtype.
    let cmean: Vec<f64> = (0..ch).map(|_| rng.uniform(-3.0, 3.0)).collect();
    let mut x = vec![0.0; total];
    for i in 0..n {
        for c in 0..ch {
            for s in 0..hw {
                x[at(i, c, s)] = dt.quantize(cmean[c] + rng.uniform(-2.0, 2.0));
            }
        }
    }
    let dy = quant(dt, rng.vec(total, -1.0, 1.0));
    let gamma = if k.affine { quant(wdt, rng.vec(ch, 0.5, 1.5)) } else { vec![1.0; ch] };
    let beta = if k.affine { quant(wdt, rng.vec(ch, -0.5, 0.5)) } else { vec![0.0; ch] };
    let (scale, shift) = if k.ss != Ss::None {
        (quant(sdt, rng.vec(n * ch, -0.5, 0.5)), quant(sdt, rng.vec(n * ch, -0.5, 0.5)))
    } else {
        (vec![0.0; n * ch], vec![0.0; n * ch])
    };

    let gn = GroupNormDesc::with(g as i64, eps, k.act)?;
    let xd = TensorDesc::with(dtype(dt), &dims, Some(&strides))?;
    let wd = TensorDesc::with(dtype(wdt), &[ch as i64], None)?;
    // scale / shift: packed [N, C], or views [N, C, 1, 1] of one [N, 2C]
    // buffer with row stride 2C (scale the first half, shift the second).
    let (ssd, ss_ld) = match k.ss {
        Ss::Chunked => (TensorDesc::with(dtype(sdt), &[n as i64, ch as i64, 1, 1], Some(&[2 * ch as i64, 1, 1, 1]))?, 2 * ch),
        _ => (TensorDesc::with(dtype(sdt), &[n as i64, ch as i64], None)?, ch),
    };
    let ss_len = (n - 1) * ss_ld + ch; // elements one of scale / shift spans
    let spread = |v: &[f64]| {
        let mut out = vec![0.0; ss_len];
        for i in 0..n {
            out[i * ss_ld..i * ss_ld + ch].copy_from_slice(&v[i * ch..(i + 1) * ch]);
        }
        out
    };
    let gather = |v: &[f64]| (0..n * ch).map(|j| v[(j / ch) * ss_ld + j % ch]).collect::<Vec<f64>>();
    let (tscale, tshift, tss);
    match k.ss {
        Ss::Chunked => {
            let mut both = vec![0.0; n * 2 * ch];
            for i in 0..n {
                both[i * 2 * ch..i * 2 * ch + ch].copy_from_slice(&scale[i * ch..(i + 1) * ch]);
                both[i * 2 * ch + ch..(i + 1) * 2 * ch].copy_from_slice(&shift[i * ch..(i + 1) * ch]);
            }
            tss = Some(T::input(sdt, &both, off));
            tscale = None;
            tshift = None;
        }
        Ss::Packed => {
            tscale = Some(T::input(sdt, &spread(&scale), off));
            tshift = Some(T::input(sdt, &spread(&shift), off));
            tss = None;
        }
        Ss::None => {
            tscale = None;
            tshift = None;
            tss = None;
        }
    }
    let (scale_p, shift_p): (*const c_void, *const c_void) = match (&tss, &tscale, &tshift) {
        (Some(b), _, _) => (b.p(), unsafe { (b.p() as *const u8).add(ch * sdt.size()) } as *const c_void),
        (None, Some(a), Some(b)) => (a.p(), b.p()),
        _ => (null(), null()),
    };
    let use_ss = k.ss != Ss::None;

    let tx = T::input(dt, &x, off);
    let tg = T::input(wdt, &gamma, off);
    let tb = T::input(wdt, &beta, off);
    let y = T::output(dt, total, off);
    let mean = T::output(Dt::F32, n * g, off);
    let rstd = T::output(Dt::F32, n * g, off);
    let ws = scratch(h.groupnorm_fwd_workspace_size(&gn, &xd)?);
    unsafe {
        h.groupnorm_fwd(
            null_mut(),
            &gn,
            &xd,
            tx.p(),
            k.affine.then_some(&wd),
            if k.affine { tg.p() } else { null() },
            if k.affine { tb.p() } else { null() },
            use_ss.then_some(&ssd),
            scale_p,
            shift_p,
            &xd,
            y.p(),
            mean.f(),
            rstd.f(),
            sp(&ws),
            sl(&ws),
        )?;
    }
    cuda::synchronize().unwrap();

    // ---- float64 reference ----
    let (mut mref, mut rref, mut mtol, mut rtol) = (vec![0.0; n * g], vec![0.0; n * g], vec![0.0; n * g], vec![0.0; n * g]);
    let mut xhat = vec![0.0; total];
    let mut xmag = vec![0.0; total]; // |x_hat| as fp32 arithmetic sees it: (|x| + |mean|) rstd
    let (mut v0, mut v) = (vec![0.0; total], vec![0.0; total]);
    let (mut yref, mut ytol) = (vec![0.0; total], vec![0.0; total]);
    for i in 0..n {
        for gi in 0..g {
            let chans = gi * cpg..(gi + 1) * cpg;
            let mut sum = 0.0;
            let mut maxabs = 0f64;
            for c in chans.clone() {
                for s in 0..hw {
                    sum += x[at(i, c, s)];
                    maxabs = maxabs.max(x[at(i, c, s)].abs());
                }
            }
            let mu = sum / m;
            let mut var = 0.0;
            for c in chans.clone() {
                for s in 0..hw {
                    var += (x[at(i, c, s)] - mu).powi(2);
                }
            }
            var /= m;
            let rs = 1.0 / (var + eps).sqrt();
            mref[i * g + gi] = mu;
            rref[i * g + gi] = rs;
            mtol[i * g + gi] = 1e-6 * (maxabs + 1.0 / rs);
            rtol[i * g + gi] = 1e-5 * rs * (1.0 + maxabs * rs * 1e-2);
            for c in chans {
                let a = 1.0 + scale[i * ch + c];
                for s in 0..hw {
                    let e = at(i, c, s);
                    let xh = (x[e] - mu) * rs;
                    xhat[e] = xh;
                    xmag[e] = (x[e].abs() + mu.abs()) * rs;
                    v0[e] = xh * gamma[c] + beta[c];
                    v[e] = v0[e] * a + shift[i * ch + c];
                    yref[e] = if silu { v[e] * sigmoid(v[e]) } else { v[e] };
                    let vmag = (xmag[e] * gamma[c].abs() + beta[c].abs()) * a.abs() + shift[i * ch + c].abs();
                    ytol[e] = rel(dt) * (vmag + 1e-3);
                }
            }
        }
    }
    rep.check(&name, "y", &y.read(), &yref, &ytol);
    rep.check(&name, "mean", &mean.read(), &mref, &mtol);
    rep.check(&name, "rstd", &rstd.read(), &rref, &rtol);

    // ---- backward from the forward's statistics ----
    let tdy = T::input(dt, &dy, off);
    let dx = T::output(dt, total, off);
    let dgamma = T::output(wdt, ch, off);
    let dbeta = T::output(wdt, ch, off);
    // dscale / dshift are described by ss_desc: for the chunked views, two
    // buffers of [N, 2C] whose second halves of each row must stay poisoned.
    let dscale = T::output(sdt, ss_len, off);
    let dshift = T::output(sdt, ss_len, off);
    let ws = scratch(h.groupnorm_bwd_workspace_size(&gn, &xd, k.affine.then_some(&wd), use_ss.then_some(&ssd))?);
    unsafe {
        h.groupnorm_bwd(
            null_mut(),
            &gn,
            &xd,
            tx.p(),
            &xd,
            tdy.p(),
            mean.f(),
            rstd.f(),
            k.affine.then_some(&wd),
            if k.affine { tg.p() } else { null() },
            if k.affine { tb.p() } else { null() },
            use_ss.then_some(&ssd),
            scale_p,
            shift_p,
            &xd,
            dx.p(),
            if k.affine { dgamma.p() } else { null_mut() },
            if k.affine { dbeta.p() } else { null_mut() },
            if use_ss { dscale.p() } else { null_mut() },
            if use_ss { dshift.p() } else { null_mut() },
            sp(&ws),
            sl(&ws),
        )?;
    }
    cuda::synchronize().unwrap();

    // du and a magnitude for it: |du| <= 1.1 |dy| with SiLU, and fp32's v
    // is off by about u32 |v|.
    let du: Vec<f64> = (0..total)
        .map(|e| {
            if silu {
                let sg = sigmoid(v[e]);
                dy[e] * sg * (1.0 + v[e] * (1.0 - sg))
            } else {
                dy[e]
            }
        })
        .collect();
    let dumag: Vec<f64> = (0..total).map(|e| if silu { dy[e].abs() * (1.1 + v[e].abs()) } else { dy[e].abs() }).collect();
    let (mut dxref, mut dxtol) = (vec![0.0; total], vec![0.0; total]);
    let (mut dgref, mut dgmag, mut dbref, mut dbmag) = (vec![0.0; ch], vec![0.0; ch], vec![0.0; ch], vec![0.0; ch]);
    let (mut dsref, mut dsmag, mut dtref, mut dtmag) =
        (vec![0.0; n * ch], vec![0.0; n * ch], vec![0.0; n * ch], vec![0.0; n * ch]);
    for i in 0..n {
        for gi in 0..g {
            let rs = rref[i * g + gi];
            let chans = gi * cpg..(gi + 1) * cpg;
            let (mut mg, mut mgx, mut mag_g, mut mag_gx) = (0.0, 0.0, 0.0, 0.0);
            for c in chans.clone() {
                let a = 1.0 + scale[i * ch + c];
                for s in 0..hw {
                    let e = at(i, c, s);
                    let gg = du[e] * a * gamma[c];
                    mg += gg;
                    mgx += gg * xhat[e];
                    let gm = dumag[e] * (a * gamma[c]).abs();
                    mag_g += gm;
                    mag_gx += gm * xmag[e];
                }
            }
            mg /= m;
            mgx /= m;
            mag_g /= m;
            mag_gx /= m;
            for c in chans {
                let a = 1.0 + scale[i * ch + c];
                for s in 0..hw {
                    let e = at(i, c, s);
                    let gg = du[e] * a * gamma[c];
                    dxref[e] = rs * (gg - mg - xhat[e] * mgx);
                    let gm = dumag[e] * (a * gamma[c]).abs();
                    dxtol[e] = rel(dt) * (rs * (gm + mag_g + xmag[e] * mag_gx) + 1e-3);
                    dgref[c] += du[e] * a * xhat[e];
                    dgmag[c] += dumag[e] * a.abs() * xmag[e];
                    dbref[c] += du[e] * a;
                    dbmag[c] += dumag[e] * a.abs();
                    dtref[i * ch + c] += du[e];
                    dtmag[i * ch + c] += dumag[e];
                    dsref[i * ch + c] += du[e] * v0[e];
                    dsmag[i * ch + c] += dumag[e] * (xmag[e] * gamma[c].abs() + beta[c].abs());
                }
            }
        }
    }
    rep.check(&name, "dx", &dx.read(), &dxref, &dxtol);
    let tol = |mag: &[f64], d: Dt| mag.iter().map(|v| rel(d) * (v + 1e-3)).collect::<Vec<f64>>();
    if k.affine {
        rep.check(&name, "dgamma", &dgamma.read(), &dgref, &tol(&dgmag, wdt));
        rep.check(&name, "dbeta", &dbeta.read(), &dbref, &tol(&dbmag, wdt));
    }
    if use_ss {
        let (got_s, got_t) = (dscale.read(), dshift.read());
        rep.check(&name, "dscale", &gather(&got_s), &dsref, &tol(&dsmag, sdt));
        rep.check(&name, "dshift", &gather(&got_t), &dtref, &tol(&dtmag, sdt));
        // Elements between the rows of a strided dscale / dshift are not the
        // tensor's: they keep the poison.
        for (what, got) in [("dscale", &got_s), ("dshift", &got_t)] {
            let touched = (0..ss_len).filter(|&j| j % ss_ld >= ch && !got[j].is_nan()).count();
            if touched > 0 {
                rep.failures.push(format!("{name}: {what}: {touched} elements between rows were written"));
            }
        }
    }
    rep.cases += 1;
    Ok(())
}

#[test]
fn groupnorm_forward_backward_against_f64() {
    let Some(h) = gpu("groupnorm_forward_backward_against_f64") else { return };
    let mut rep = Report::default();
    let mut seed = 100;
    let base = |dt: Dt, dims: &[usize], groups: usize| Case {
        dt,
        w_f32: false,
        ss_f32: false,
        dims: dims.to_vec(),
        groups,
        nhwc: false,
        act: GnActivation::None,
        affine: true,
        ss: Ss::None,
        misalign: false,
    };
    let mut cases = Vec::new();
    for dt in Dt::ALL {
        for nhwc in [false, true] {
            for act in GnActivation::ALL {
                for ss in [Ss::None, Ss::Packed, Ss::Chunked] {
                    // [2, 64, 9, 7]: 32 groups of 2 channels, odd spatial sizes.
                    let mut c = base(dt, &[2, 64, 9, 7], 32);
                    c.nhwc = nhwc;
                    c.act = *act;
                    c.ss = ss;
                    c.w_f32 = ss == Ss::Packed;
                    c.ss_f32 = ss == Ss::Chunked && dt != Dt::F32;
                    cases.push(c);
                }
            }
        }
        // Odd shapes.
        let mut c = base(dt, &[1, 12, 13], 12); // rank 3, one sample, C / G = 1 (G = C)
        c.act = GnActivation::Silu;
        c.ss = Ss::Packed;
        cases.push(c);
        let mut c = base(dt, &[3, 6, 5, 3, 7], 1); // rank 5 (NDHWC), G = 1
        c.nhwc = true;
        c.ss = Ss::Chunked;
        c.misalign = true;
        cases.push(c);
        let mut c = base(dt, &[4, 10, 11, 1], 5); // a spatial dimension of size 1, no gamma / beta
        c.affine = false;
        c.act = GnActivation::Silu;
        c.misalign = true;
        cases.push(c);
        let mut c = base(dt, &[2, 96, 17, 19], 32); // bigger groups (3 channels x 323 values)
        c.nhwc = true;
        c.act = GnActivation::Silu;
        c.ss = Ss::Packed;
        cases.push(c);
    }
    for c in &cases {
        seed += 1;
        if let Err(e) = run_case(&h, c, &mut rep, seed) {
            rep.failures.push(format!("{}: {e}", c.name()));
        }
    }
    println!(
        "groupnorm: {} of {} cases ran, {} failures, worst err/tol {:.3}",
        rep.cases,
        cases.len(),
        rep.failures.len(),
        rep.worst
    );
    assert!(rep.failures.is_empty(), "groupnorm:\n{}", rep.failures.join("\n"));
    assert_eq!(rep.cases, cases.len());
}

#[derive(Debug, Clone, Copy)]
enum Want {
    Status(Status),
    Category(Category),
}
impl Want {
    fn matches(self, e: &Error) -> bool {
        match self {
            Want::Status(s) => e.status() == s,
            Want::Category(c) => e.category() == c,
        }
    }
}

/// Refused launches: the library's status and a message naming the
/// argument, and nothing written.
#[test]
fn groupnorm_refusals_name_the_argument_and_write_nothing() {
    let Some(h) = gpu("groupnorm_refusals_name_the_argument_and_write_nothing") else { return };
    let (n, ch, hw) = (2usize, 12usize, 5usize);
    let total = n * ch * hw;
    let x = T::input(Dt::F32, &vec![1.5; total], 0);
    let y = T::output(Dt::F32, total, 0);
    let stats = T::output(Dt::F32, 64, 0);
    let xd = TensorDesc::with(Dtype::F32, &[n as i64, ch as i64, hw as i64], None).unwrap();
    let failures = std::cell::RefCell::new(Vec::new());
    // The header fixes the status for some refusals (a group count that does
    // not divide C, a layout, a short workspace); for the others the
    // category, and the message must name the argument (one of `words`).
    let expect = |what: &str, r: Result<(), Error>, want: Want, words: &[&str]| match r {
        Err(e) if want.matches(&e) && words.iter().any(|w| e.message().contains(w)) => println!("  {what}: {e}"),
        other => failures.borrow_mut().push(format!("{what}: expected {want:?} naming one of {words:?}, got {other:?}")),
    };
    let fwd = |gn: &GroupNormDesc, xd: &TensorDesc, yd: &TensorDesc, wd: Option<&TensorDesc>, ws: usize| unsafe {
        h.groupnorm_fwd(null_mut(), gn, xd, x.p(), wd, null(), null(), None, null(), null(), yd, y.p(), stats.f(),
                        stats.f().add(32), null_mut(), ws)
    };
    // 5 groups do not divide 12 channels: refused by the size query and the launch.
    let g5 = GroupNormDesc::with(5, 1e-5, GnActivation::None).unwrap();
    match h.groupnorm_fwd_workspace_size(&g5, &xd) {
        Err(e) if e.status() == Status::BAD_PARAM_SHAPE && e.message().contains("group") => println!("  query: {e}"),
        other => failures.borrow_mut().push(format!("workspace query with 5 groups of 12 channels: {other:?}")),
    }
    expect("groups not dividing C", fwd(&g5, &xd, &xd, None, 0), Want::Status(Status::BAD_PARAM_SHAPE), &["group"]);
    let g4 = GroupNormDesc::with(4, 1e-5, GnActivation::Silu).unwrap();
    // y of another dtype / shape.
    let y16 = TensorDesc::with(Dtype::F16, &[n as i64, ch as i64, hw as i64], None).unwrap();
    expect("y fp16, x fp32", fwd(&g4, &xd, &y16, None, 0), Want::Category(Category::BadParam), &["y_desc"]);
    // A w_desc of the wrong length.
    let w5 = TensorDesc::with(Dtype::F32, &[5], None).unwrap();
    let r = fwd(&g4, &xd, &xd, Some(&w5), 0);
    expect("w_desc of 5 values for 12 channels", r, Want::Category(Category::BadParam), &["w_desc"]);
    // A layout that is neither channels-first nor channels-last (a slice).
    let sliced = TensorDesc::with(Dtype::F32, &[n as i64, ch as i64, 4], Some(&[(ch * hw) as i64, hw as i64, 1])).unwrap();
    let r = unsafe {
        h.groupnorm_fwd(null_mut(), &g4, &sliced, x.p(), None, null(), null(), None, null(), null(), &sliced, y.p(),
                        null_mut(), null_mut(), null_mut(), 0)
    };
    expect("a sliced x", r, Want::Status(Status::NOT_SUPPORTED), &["x_desc", "layout"]);
    // A short workspace, where one is needed.
    let need = h.groupnorm_fwd_workspace_size(&g4, &xd).unwrap();
    if need > 0 {
        let ws = DeviceBuffer::new(need).unwrap();
        let r = unsafe {
            h.groupnorm_fwd(null_mut(), &g4, &xd, x.p(), None, null(), null(), None, null(), null(), &xd, y.p(),
                            null_mut(), null_mut(), ws.ptr(), need - 1)
        };
        expect("workspace one byte short", r, Want::Status(Status::INSUFFICIENT_WORKSPACE), &["workspace"]);
    }
    // x NULL; the backward without its statistics.
    let r = unsafe {
        h.groupnorm_fwd(null_mut(), &g4, &xd, null(), None, null(), null(), None, null(), null(), &xd, y.p(),
                        null_mut(), null_mut(), null_mut(), 0)
    };
    expect("x NULL", r, Want::Status(Status::BAD_PARAM_NULL_POINTER), &["x"]);
    let wsb = scratch(h.groupnorm_bwd_workspace_size(&g4, &xd, None, None).unwrap());
    let r = unsafe {
        h.groupnorm_bwd(null_mut(), &g4, &xd, x.p(), &xd, x.p(), null(), stats.f(), None, null(), null(), None,
                        null(), null(), &xd, y.p(), null_mut(), null_mut(), null_mut(), null_mut(), sp(&wsb), sl(&wsb))
    };
    expect("backward without mean", r, Want::Category(Category::BadParam), &["mean"]);
    // dgamma asked for without w_desc.
    let dg = T::output(Dt::F32, ch, 0);
    let r = unsafe {
        h.groupnorm_bwd(null_mut(), &g4, &xd, x.p(), &xd, x.p(), stats.f(), stats.f(), None, null(), null(), None,
                        null(), null(), &xd, y.p(), dg.p(), null_mut(), null_mut(), null_mut(), sp(&wsb), sl(&wsb))
    };
    expect("dgamma without w_desc", r, Want::Category(Category::BadParam), &["w_desc"]);
    cuda::synchronize().unwrap();
    if !y.read().iter().all(|v| v.is_nan()) || !stats.read().iter().all(|v| v.is_nan()) || !dg.read().iter().all(|v| v.is_nan()) {
        failures.borrow_mut().push("a refused launch wrote into y, the statistics or dgamma".into());
    }
    let failures = failures.into_inner();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
