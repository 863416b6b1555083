// SPDX-License-Identifier: Apache-2.0
//! GPU tests through the safe crate: every op against a double-precision
//! host reference on small odd shapes, every dtype, misaligned pointers,
//! outputs poisoned (NaN) before each launch; the error path of bad
//! launches; two threads sharing one handle. Without a device each test
//! prints `SKIP: <reason>` and passes.
use core::ffi::c_void;
use core::ptr::{null, null_mut};

use fusednorm::*;
use fusednorm_testkit::check::{compare, Rng};
use fusednorm_testkit::cuda::{self, DeviceBuffer};
use fusednorm_testkit::half::Dt;

fn gpu(test: &str) -> Option<Handle> {
    if cuda::device_count() == 0 {
        println!("SKIP: {test}: no CUDA device (cudaGetDeviceCount reports none or no driver)");
        return None;
    }
    match Handle::new() {
        Ok(h) => Some(h),
        Err(e) if e.category() == Category::NoDevice => {
            println!("SKIP: {test}: {e}");
            None
        }
        Err(e) => panic!("fnorm_create: {e}"),
    }
}

fn dtype(d: Dt) -> Dtype {
    match d {
        Dt::F32 => Dtype::F32,
        Dt::F16 => Dtype::F16,
        Dt::BF16 => Dtype::BF16,
    }
}

fn quant(dt: Dt, v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| dt.quantize(x)).collect()
}

/// A device tensor of `n` elements of `dt`, `off` bytes past an allocation.
struct T {
    buf: DeviceBuffer,
    dt: Dt,
}

impl T {
    fn input(dt: Dt, vals: &[f64], off: usize) -> T {
        T { buf: DeviceBuffer::from_bytes(&dt.encode(vals), off).unwrap(), dt }
    }
    fn output(dt: Dt, n: usize, off: usize) -> T {
        let buf = DeviceBuffer::with_offset(n * dt.size(), off).unwrap();
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

/// Scratch of `bytes` (null when 0), cudaMalloc-aligned.
fn scratch(bytes: usize) -> Option<DeviceBuffer> {
    (bytes > 0).then(|| DeviceBuffer::new(bytes).unwrap())
}
fn sp(b: &Option<DeviceBuffer>) -> *mut c_void {
    b.as_ref().map_or(null_mut(), |b| b.ptr())
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
    fn finish(self, test: &str) {
        println!("{test}: {} cases, {} failed, worst err/tol {:.3}", self.cases, self.failures.len(), self.worst);
        assert!(self.failures.is_empty(), "{test}:\n{}", self.failures.join("\n"));
    }
}

/// Rounding of the stored result plus fp32 arithmetic inside the kernels.
fn rel(dt: Dt) -> f64 {
    2.0 * dt.eps() + 1e-5
}

// ---------------------------------------------------------------------------
// LayerNorm / RMSNorm
// ---------------------------------------------------------------------------

struct NormCase {
    dt: Dt,
    wdt: Dt,
    mode: NormMode,
    rows: usize,
    cols: usize,
    residual: bool,
    zero_centered: bool,
    misalign: bool,
}

fn norm_case(h: &Handle, c: &NormCase, rep: &mut Report, seed: u64) -> Result<(), Error> {
    let (rows, cols, dt, wdt) = (c.rows, c.cols, c.dt, c.wdt);
    let ln = c.mode == NormMode::LayerNorm;
    let name = format!(
        "{:?} {:?} w{:?} [{rows}, {cols}]{}{}{}",
        c.mode,
        dt,
        wdt,
        if c.residual { " +residual" } else { "" },
        if c.zero_centered { " zero-centred" } else { "" },
        if c.misalign { " misaligned" } else { "" }
    );
    let off = if c.misalign { dt.size() } else { 0 };
    let woff = if c.misalign { wdt.size() } else { 0 };
    let foff = if c.misalign { 4 } else { 0 };
    let mut rng = Rng::new(seed);
    let n = rows * cols;
    let x = quant(dt, rng.vec(n, 1.0, 5.0)); // mean far from 0: Welford matters
    let r = quant(dt, rng.vec(n, -1.0, 1.0));
    let gamma = quant(wdt, rng.vec(cols, 0.5, 1.5));
    let beta = quant(wdt, rng.vec(cols, -0.5, 0.5));
    let dy = quant(dt, rng.vec(n, -1.0, 1.0));
    let dsum = quant(dt, rng.vec(n, -0.5, 0.5));
    let eps = 1e-5;

    let mut norm = NormDesc::with(c.mode, -1, eps)?;
    if c.zero_centered {
        norm.set_flags(NormFlags::ZERO_CENTERED_GAMMA)?;
    }
    let xd = TensorDesc::with(dtype(dt), &[rows as i64, cols as i64], None)?;
    let wd = TensorDesc::with(dtype(wdt), &[cols as i64], None)?;

    let dx_ = T::input(dt, &x, off);
    let dr = T::input(dt, &r, off);
    let dg = T::input(wdt, &gamma, woff);
    let db = T::input(wdt, &beta, woff);
    let y = T::output(dt, n, off);
    let sum = T::output(dt, n, off);
    let mean = T::output(Dt::F32, rows, foff);
    let rstd = T::output(Dt::F32, rows, foff);
    let ws = scratch(h.norm_fwd_workspace_size(&norm, &xd, &xd)?);
    unsafe {
        h.norm_fwd(
            null_mut(),
            &norm,
            &xd,
            dx_.p(),
            if c.residual { dr.p() } else { null() },
            if c.residual { sum.p() } else { null_mut() },
            Some(&wd),
            dg.p(),
            if ln { db.p() } else { null() },
            &xd,
            y.p(),
            if ln { mean.f() } else { null_mut() },
            rstd.f(),
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
        )?;
    }
    cuda::synchronize().unwrap();

    // Reference, in f64.
    let s: Vec<f64> = if c.residual { (0..n).map(|i| dt.quantize(x[i] + r[i])).collect() } else { x.clone() };
    let scale: Vec<f64> = gamma.iter().map(|g| if c.zero_centered { 1.0 + g } else { *g }).collect();
    let (mut yref, mut ytol) = (vec![0.0; n], vec![0.0; n]);
    let (mut mref, mut rref) = (vec![0.0; rows], vec![0.0; rows]);
    let mut xhat = vec![0.0; n];
    for i in 0..rows {
        let row = &s[i * cols..(i + 1) * cols];
        let mu = if ln { row.iter().sum::<f64>() / cols as f64 } else { 0.0 };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / cols as f64;
        let rs = 1.0 / (var + eps).sqrt();
        mref[i] = mu;
        rref[i] = rs;
        for j in 0..cols {
            let xh = (row[j] - mu) * rs;
            xhat[i * cols + j] = xh;
            let b = if ln { beta[j] } else { 0.0 };
            yref[i * cols + j] = xh * scale[j] + b;
            // s - mean in fp32 loses bits of |s|, not of |s - mean|.
            let xmag = (row[j].abs() + mu.abs()) * rs;
            ytol[i * cols + j] = rel(dt) * (xmag * scale[j].abs() + b.abs() + 1e-3);
        }
    }
    rep.check(&name, "y", &y.read(), &yref, &ytol);
    if c.residual {
        let t: Vec<f64> = s.iter().map(|v| dt.eps() * v.abs()).collect();
        rep.check(&name, "sum", &sum.read(), &s, &t);
    }
    if ln {
        let t: Vec<f64> = mref.iter().zip(&rref).map(|(m, r)| 1e-6 * (m.abs() + 1.0 / r)).collect();
        rep.check(&name, "mean", &mean.read(), &mref, &t);
    }
    let t: Vec<f64> = rref.iter().map(|r| 1e-5 * r).collect();
    rep.check(&name, "rstd", &rstd.read(), &rref, &t);

    // Backward from the forward's statistics; x is s (the forward's sum).
    let ddy = T::input(dt, &dy, off);
    let ddsum = T::input(dt, &dsum, off);
    let dx = T::output(dt, n, off);
    let dgamma = T::output(wdt, cols, woff);
    let dbeta = T::output(wdt, cols, woff);
    let ws = scratch(h.norm_bwd_workspace_size(&norm, &xd, Some(&wd))?);
    unsafe {
        h.norm_bwd(
            null_mut(),
            &norm,
            &xd,
            if c.residual { sum.p() } else { dx_.p() },
            &xd,
            ddy.p(),
            if ln { mean.f() } else { null() },
            rstd.f(),
            Some(&wd),
            dg.p(),
            if c.residual { ddsum.p() } else { null() },
            &xd,
            dx.p(),
            dgamma.p(),
            if ln { dbeta.p() } else { null_mut() },
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
        )?;
    }
    cuda::synchronize().unwrap();
    let (mut dxref, mut dxtol) = (vec![0.0; n], vec![0.0; n]);
    let (mut dgref, mut dgmag, mut dbref, mut dbmag) = (vec![0.0; cols], vec![0.0; cols], vec![0.0; cols], vec![0.0; cols]);
    for i in 0..rows {
        let o = i * cols;
        let g: Vec<f64> = (0..cols).map(|j| dy[o + j] * scale[j]).collect();
        let mg = if ln { g.iter().sum::<f64>() / cols as f64 } else { 0.0 };
        let mgx = (0..cols).map(|j| g[j] * xhat[o + j]).sum::<f64>() / cols as f64;
        let mag_g = g.iter().map(|v| v.abs()).sum::<f64>() / cols as f64;
        let mag_gx = (0..cols).map(|j| (g[j] * xhat[o + j]).abs()).sum::<f64>() / cols as f64;
        for j in 0..cols {
            let ds = if c.residual { dsum[o + j] } else { 0.0 };
            dxref[o + j] = rref[i] * (g[j] - mg - xhat[o + j] * mgx) + ds;
            let xmag = (s[o + j].abs() + mref[i].abs()) * rref[i];
            let mag = rref[i] * (g[j].abs() + mag_g + xmag * mag_gx) + ds.abs();
            dxtol[o + j] = rel(dt) * (mag + 1e-3);
            dgref[j] += dy[o + j] * xhat[o + j];
            dgmag[j] += (dy[o + j] * xhat[o + j]).abs();
            dbref[j] += dy[o + j];
            dbmag[j] += dy[o + j].abs();
        }
    }
    rep.check(&name, "dx", &dx.read(), &dxref, &dxtol);
    let t: Vec<f64> = dgmag.iter().map(|m| rel(wdt) * (m + 1e-3)).collect();
    rep.check(&name, "dgamma", &dgamma.read(), &dgref, &t);
    if ln {
        let t: Vec<f64> = dbmag.iter().map(|m| rel(wdt) * (m + 1e-3)).collect();
        rep.check(&name, "dbeta", &dbeta.read(), &dbref, &t);
    }
    rep.cases += 1;
    Ok(())
}

#[test]
fn norm_forward_backward_every_dtype() {
    let Some(h) = gpu("norm_forward_backward_every_dtype") else { return };
    let mut rep = Report::default();
    let mut seed = 1;
    for dt in Dt::ALL {
        for mode in NormMode::ALL {
            for residual in [false, true] {
                for (rows, cols, misalign, wf32) in [(37, 203, false, false), (5, 1000, true, true), (3, 4099, false, true)] {
                    let c = NormCase {
                        dt,
                        wdt: if wf32 { Dt::F32 } else { dt },
                        mode: *mode,
                        rows,
                        cols,
                        residual,
                        zero_centered: rows == 3 && residual,
                        misalign,
                    };
                    seed += 1;
                    if let Err(e) = norm_case(&h, &c, &mut rep, seed) {
                        rep.failures.push(format!("{:?} {dt:?} [{rows}, {cols}]: {e}", mode));
                    }
                }
            }
        }
    }
    rep.finish("norm");
}

// ---------------------------------------------------------------------------
// LayerNorm / RMSNorm with a quantized output
// ---------------------------------------------------------------------------

/// The value of an FP8 code (OCP E4M3 with `mant` 3, E5M2 with 2); NaN as NaN.
fn fp8_value(code: u8, mant: u32) -> f64 {
    let (ebits, bias) = if mant == 3 { (4, 7) } else { (5, 15) };
    let e = ((code >> mant) & ((1 << ebits) - 1)) as i32;
    let m = (code & ((1 << mant) - 1)) as f64;
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    if (mant == 3 && e == 15 && m == 7.0) || (mant == 2 && e == 31) {
        return if mant == 2 && m == 0.0 { sign * f64::INFINITY } else { f64::NAN };
    }
    let scale = |p: i32| 2f64.powi(p);
    if e == 0 {
        sign * m * scale(1 - bias - mant as i32)
    } else {
        sign * (1.0 + m / (1 << mant) as f64) * scale(e - bias)
    }
}

/// The header's FP8 rule for t (an f32 value): clamp to [-max, max], the
/// nearest code, ties to the even code; NaN -> 0x7F. By search over codes.
fn fp8_ref(t: f32, mant: u32) -> u8 {
    if t.is_nan() {
        return 0x7f;
    }
    let max = if mant == 3 { 448.0 } else { 57344.0 };
    let a = (t.abs() as f64).min(max);
    let top = if mant == 3 { 0x7e } else { 0x7b };
    let mut best = 0u8;
    for c in 0..=top {
        let (d, db) = ((fp8_value(c, mant) - a).abs(), (fp8_value(best, mant) - a).abs());
        if d < db || (d == db && c % 2 == 0) {
            best = c;
        }
    }
    best | if t.is_sign_negative() { 0x80 } else { 0 }
}

/// INT8: nearest, ties to even, clamped to [-127, 127]; NaN -> 0.
fn int8_ref(t: f32) -> i8 {
    if t.is_nan() {
        return 0;
    }
    let f = t.floor();
    let r = if t - f > 0.5 || (t - f == 0.5 && f % 2.0 != 0.0) { f + 1.0 } else { f };
    r.clamp(-127.0, 127.0) as i8
}

/// fp32 LayerNorm/RMSNorm computed by the library (y in f32), then the same
/// call quantized: codes, scales and amax must follow the header's rules
/// from those very fp32 values, bit for bit.
fn quant_case(h: &Handle, mode: NormMode, out: Dtype, scaling: QuantScaling, rows: usize, cols: usize, misalign: bool,
              rep: &mut Report, seed: u64) -> Result<(), Error> {
    let name = format!("{mode:?} -> {out:?} {scaling:?} [{rows}, {cols}]{}", if misalign { " misaligned" } else { "" });
    let ln = mode == NormMode::LayerNorm;
    let mut rng = Rng::new(seed);
    let n = rows * cols;
    let x = rng.vec(n, -3.0, 5.0);
    let gamma = rng.vec(cols, 0.25, 2.0);
    let beta = rng.vec(cols, -0.5, 0.5);
    let norm = NormDesc::with(mode, -1, 1e-5)?;
    let xd = TensorDesc::with(Dtype::F32, &[rows as i64, cols as i64], None)?;
    let wd = TensorDesc::with(Dtype::F32, &[cols as i64], None)?;
    let qd = TensorDesc::with(out, &[rows as i64, cols as i64], None)?;
    let (off, qoff) = if misalign { (4, 1) } else { (0, 0) };
    let dx_ = T::input(Dt::F32, &x, off);
    let dg = T::input(Dt::F32, &gamma, 0);
    let db = T::input(Dt::F32, &beta, 0);
    let y = T::output(Dt::F32, n, off);
    unsafe {
        h.norm_fwd(null_mut(), &norm, &xd, dx_.p(), null(), null_mut(), Some(&wd), dg.p(),
                   if ln { db.p() } else { null() }, &xd, y.p(), null_mut(), null_mut(), null_mut(), 0)?;
    }
    let q = DeviceBuffer::with_offset(n, qoff).unwrap();
    q.poison().unwrap();
    let sbytes = h.norm_fwd_quant_scale_size(&norm, &xd, scaling)?;
    assert_eq!(sbytes, if scaling == QuantScaling::PerToken { 4 * rows } else { 4 });
    let static_scale = 0.0123f32;
    let scale = if scaling == QuantScaling::PerToken {
        let b = DeviceBuffer::new(sbytes).unwrap();
        b.poison().unwrap();
        b
    } else {
        DeviceBuffer::from_f32(&[static_scale]).unwrap()
    };
    let amax = DeviceBuffer::new(4).unwrap();
    amax.poison().unwrap();
    let ws = scratch(h.norm_fwd_quant_workspace_size(&norm, &xd, &qd, scaling)?);
    unsafe {
        h.norm_fwd_quant(null_mut(), &norm, &xd, dx_.p(), null(), null_mut(), Some(&wd), dg.p(),
                         if ln { db.p() } else { null() }, &qd, q.ptr(), scaling, scale.f32_ptr(),
                         amax.f32_ptr(), null_mut(), null_mut(), sp(&ws), ws.as_ref().map_or(0, |b| b.len()))?;
    }
    cuda::synchronize().unwrap();
    let v: Vec<f32> = y.read().iter().map(|a| *a as f32).collect();
    let codes = q.download().unwrap();
    let scales = scale.download_f32().unwrap();
    let (m, floor) = match out {
        Dtype::F8E4M3 => (448f32, 1.0 / (448f32 * 512.0)),
        Dtype::F8E5M2 => (57344f32, 1.0 / (57344f32 * 512.0)),
        _ => (127f32, f32::EPSILON),
    };
    let mut bad = Vec::new();
    let mut tensor_amax = 0f32;
    for r in 0..rows {
        let row = &v[r * cols..(r + 1) * cols];
        let a = row.iter().fold(0f32, |acc, t| acc.max(t.abs()));
        tensor_amax = tensor_amax.max(a);
        let s = if scaling == QuantScaling::PerToken { (a / m).max(floor) } else { static_scale };
        if scaling == QuantScaling::PerToken && scales[r].to_bits() != s.to_bits() {
            bad.push(format!("scale[{r}] {} != {s}", scales[r]));
        }
        for c in 0..cols {
            let t = row[c] / s;
            let want = match out {
                Dtype::F8E4M3 => fp8_ref(t, 3),
                Dtype::F8E5M2 => fp8_ref(t, 2),
                _ => int8_ref(t) as u8,
            };
            let got = codes[r * cols + c];
            if got != want && bad.len() < 8 {
                bad.push(format!("[{r}, {c}] v {} / s {s} = {t}: code {got:#04x}, want {want:#04x}", row[c]));
            }
        }
    }
    let got_amax = amax.download_f32().unwrap()[0];
    if got_amax.to_bits() != tensor_amax.to_bits() {
        bad.push(format!("amax {got_amax} != {tensor_amax}"));
    }
    rep.cases += 1;
    if !bad.is_empty() {
        rep.failures.push(format!("{name}: {}", bad.join("; ")));
    }
    Ok(())
}

#[test]
fn norm_forward_quantized_bit_exact() {
    let Some(h) = gpu("norm_forward_quantized_bit_exact") else { return };
    let mut rep = Report::default();
    let mut seed = 100;
    for mode in NormMode::ALL {
        for (out, scaling) in [
            (Dtype::F8E4M3, QuantScaling::PerTensor),
            (Dtype::F8E4M3, QuantScaling::PerToken),
            (Dtype::F8E5M2, QuantScaling::PerTensor),
            (Dtype::F8E5M2, QuantScaling::PerToken),
            (Dtype::I8, QuantScaling::PerToken),
        ] {
            for (rows, cols, misalign) in [(37, 203, false), (5, 1000, true), (3, 4099, false)] {
                seed += 1;
                if let Err(e) = quant_case(&h, *mode, out, scaling, rows, cols, misalign, &mut rep, seed) {
                    rep.failures.push(format!("{mode:?} {out:?} {scaling:?} [{rows}, {cols}]: {e}"));
                }
            }
        }
    }
    // INT8 with a static scale is refused, and writes nothing.
    let norm = NormDesc::with(NormMode::RmsNorm, -1, 1e-6).unwrap();
    let xd = TensorDesc::with(Dtype::F32, &[4, 64], None).unwrap();
    let qd = TensorDesc::with(Dtype::I8, &[4, 64], None).unwrap();
    let e = h.norm_fwd_quant_workspace_size(&norm, &xd, &qd, QuantScaling::PerTensor).unwrap_err();
    assert_eq!(e.category(), Category::NotSupported);
    rep.finish("norm quantized");
}

// ---------------------------------------------------------------------------
// BatchNorm
// ---------------------------------------------------------------------------

struct BnCase {
    dt: Dt,
    nhwc: bool,
    epi: BnEpilogue,
    n: usize,
    c: usize,
    hw: (usize, usize), // (0, 0): rank 2 [N, C]
    misalign: bool,
}

fn bn_case(h: &Handle, k: &BnCase, rep: &mut Report, seed: u64) -> Result<(), Error> {
    let (dt, n, ch) = (k.dt, k.n, k.c);
    let rank2 = k.hw == (0, 0);
    let (hh, ww) = if rank2 { (1, 1) } else { k.hw };
    let hw = hh * ww;
    let total = n * ch * hw;
    let m = (n * hw) as f64;
    let name = format!(
        "{dt:?} {} {:?} [{n}, {ch}, {hh}, {ww}]{}{}",
        if k.nhwc { "NHWC" } else { "NCHW" },
        k.epi,
        if rank2 { " (rank 2)" } else { "" },
        if k.misalign { " misaligned" } else { "" }
    );
    let (dims, strides): (Vec<i64>, Option<Vec<i64>>) = if rank2 {
        (vec![n as i64, ch as i64], None)
    } else if k.nhwc {
        let (c_, h_, w_) = (ch as i64, hh as i64, ww as i64);
        (vec![n as i64, c_, h_, w_], Some(vec![h_ * w_ * c_, 1, w_ * c_, c_]))
    } else {
        (vec![n as i64, ch as i64, hh as i64, ww as i64], None)
    };
    // Memory index of (sample, channel, spatial position).
    let at = |i: usize, c: usize, s: usize| if k.nhwc { (i * hw + s) * ch + c } else { (i * ch + c) * hw + s };
    let off = if k.misalign { dt.size() } else { 0 };
    let foff = if k.misalign { 4 } else { 0 };
    let mut rng = Rng::new(seed);
    let mut x = vec![0.0; total];
    for i in 0..n {
        for c in 0..ch {
            for s in 0..hw {
                x[at(i, c, s)] = dt.quantize(3.0 * c as f64 - 4.0 + rng.uniform(-2.0, 2.0));
            }
        }
    }
    let z = quant(dt, rng.vec(total, -1.0, 1.0));
    let dy = quant(dt, rng.vec(total, -1.0, 1.0));
    let gamma = quant(Dt::F32, rng.vec(ch, 0.5, 1.5));
    let beta = quant(Dt::F32, rng.vec(ch, -0.5, 0.5));
    let rm0 = quant(Dt::F32, rng.vec(ch, -1.0, 1.0));
    let rv0 = quant(Dt::F32, rng.vec(ch, 0.5, 2.0));
    let (eps, momentum) = (1e-5, 0.1);
    let add = k.epi == BnEpilogue::AddRelu;
    let relu = k.epi != BnEpilogue::None;

    let bn = BatchNormDesc::with(k.epi, eps, BnAverage::Exponential, momentum)?;
    let xd = TensorDesc::with(dtype(dt), &dims, strides.as_deref())?;
    let tx = T::input(dt, &x, off);
    let tz = T::input(dt, &z, off);
    let tg = T::input(Dt::F32, &gamma, foff);
    let tb = T::input(Dt::F32, &beta, foff);
    let trm = T::input(Dt::F32, &rm0, foff);
    let trv = T::input(Dt::F32, &rv0, foff);
    let y = T::output(dt, total, off);
    let smean = T::output(Dt::F32, ch, foff);
    let sinv = T::output(Dt::F32, ch, foff);
    let ws = scratch(h.batchnorm_fwd_train_workspace_size(&bn, &xd)?);
    let reserve_bytes = h.batchnorm_reserve_space_size(&bn, &xd)?;
    if relu && reserve_bytes * 8 < total {
        rep.failures.push(format!("{name}: reserve space {reserve_bytes} bytes < one bit per element"));
    }
    let reserve = scratch(reserve_bytes);
    unsafe {
        h.batchnorm_fwd_train(
            null_mut(),
            &bn,
            &xd,
            tx.p(),
            if add { tz.p() } else { null() },
            tg.f(),
            tb.f(),
            trm.f(),
            trv.f(),
            null_mut(),
            &xd,
            y.p(),
            smean.f(),
            sinv.f(),
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
            sp(&reserve),
            reserve_bytes,
        )?;
    }
    cuda::synchronize().unwrap();

    let (mut mean, mut var) = (vec![0.0; ch], vec![0.0; ch]);
    for c in 0..ch {
        let vals: Vec<f64> = (0..n).flat_map(|i| (0..hw).map(move |s| (i, s))).map(|(i, s)| x[at(i, c, s)]).collect();
        mean[c] = vals.iter().sum::<f64>() / m;
        var[c] = vals.iter().map(|v| (v - mean[c]) * (v - mean[c])).sum::<f64>() / m;
    }
    let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let epilogue = |v: f64, e: usize| {
        let v = if add { v + z[e] } else { v };
        if relu { v.max(0.0) } else { v }
    };
    let (mut yref, mut ytol) = (vec![0.0; total], vec![0.0; total]);
    for i in 0..n {
        for c in 0..ch {
            for s in 0..hw {
                let e = at(i, c, s);
                let xh = (x[e] - mean[c]) * invstd[c];
                yref[e] = epilogue(xh * gamma[c] + beta[c], e);
                ytol[e] = rel(dt) * ((xh * gamma[c]).abs() + beta[c].abs() + if add { z[e].abs() } else { 0.0 } + 1e-3);
            }
        }
    }
    let ygot = y.read();
    rep.check(&name, "y", &ygot, &yref, &ytol);
    let t: Vec<f64> = mean.iter().zip(&var).map(|(mu, v)| 1e-6 * (mu.abs() + v.sqrt())).collect();
    rep.check(&name, "saved_mean", &smean.read(), &mean, &t);
    let t: Vec<f64> = invstd.iter().map(|v| 1e-5 * v).collect();
    rep.check(&name, "saved_invstd", &sinv.read(), &invstd, &t);
    let rm1: Vec<f64> = (0..ch).map(|c| (1.0 - momentum) * rm0[c] + momentum * mean[c]).collect();
    let rv1: Vec<f64> = (0..ch).map(|c| (1.0 - momentum) * rv0[c] + momentum * var[c] * m / (m - 1.0)).collect();
    let t: Vec<f64> = rm1.iter().map(|v| 1e-5 * (v.abs() + 1.0)).collect();
    rep.check(&name, "running_mean", &trm.read(), &rm1, &t);
    let t: Vec<f64> = rv1.iter().map(|v| 1e-5 * (v.abs() + 1.0)).collect();
    rep.check(&name, "running_var", &trv.read(), &rv1, &t);

    // Backward with the reserve space (the ReLU mask); y is not passed.
    let tdy = T::input(dt, &dy, off);
    let dx = T::output(dt, total, off);
    let dz = T::output(dt, total, off);
    let dgamma = T::output(Dt::F32, ch, foff);
    let dbeta = T::output(Dt::F32, ch, foff);
    let ws = scratch(h.batchnorm_bwd_workspace_size(&bn, &xd)?);
    unsafe {
        h.batchnorm_bwd(
            null_mut(),
            &bn,
            &xd,
            tx.p(),
            &xd,
            tdy.p(),
            null(),
            tg.f(),
            null(),
            smean.f(),
            sinv.f(),
            sp(&reserve),
            reserve_bytes,
            &xd,
            dx.p(),
            if add { dz.p() } else { null_mut() },
            dgamma.f(),
            dbeta.f(),
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
        )?;
    }
    cuda::synchronize().unwrap();
    // g = dy masked where the forward's y was not > 0 (the bit the forward wrote).
    let g: Vec<f64> = (0..total).map(|e| if relu && !(ygot[e] > 0.0) { 0.0 } else { dy[e] }).collect();
    let (mut dbref, mut dgref, mut gmag, mut gxmag) = (vec![0.0; ch], vec![0.0; ch], vec![0.0; ch], vec![0.0; ch]);
    for i in 0..n {
        for c in 0..ch {
            for s in 0..hw {
                let e = at(i, c, s);
                let xh = (x[e] - mean[c]) * invstd[c];
                dbref[c] += g[e];
                dgref[c] += g[e] * xh;
                gmag[c] += g[e].abs();
                gxmag[c] += (g[e] * xh).abs();
            }
        }
    }
    let (mut dxref, mut dxtol) = (vec![0.0; total], vec![0.0; total]);
    for i in 0..n {
        for c in 0..ch {
            for s in 0..hw {
                let e = at(i, c, s);
                let xh = (x[e] - mean[c]) * invstd[c];
                dxref[e] = (g[e] - dbref[c] / m - xh * dgref[c] / m) * gamma[c] * invstd[c];
                dxtol[e] = rel(dt) * ((g[e].abs() + gmag[c] / m + xh.abs() * gxmag[c] / m) * gamma[c] * invstd[c] + 1e-3);
            }
        }
    }
    rep.check(&name, "dx", &dx.read(), &dxref, &dxtol);
    let t: Vec<f64> = gxmag.iter().map(|v| 1e-5 * (v + 1.0)).collect();
    rep.check(&name, "dgamma", &dgamma.read(), &dgref, &t);
    let t: Vec<f64> = gmag.iter().map(|v| 1e-5 * (v + 1.0)).collect();
    rep.check(&name, "dbeta", &dbeta.read(), &dbref, &t);
    if add {
        rep.check(&name, "dz", &dz.read(), &g, &vec![0.0; total]);
    }

    // Inference with the updated running statistics.
    let yi = T::output(dt, total, off);
    let ws = scratch(h.batchnorm_fwd_infer_workspace_size(&bn, &xd)?);
    unsafe {
        h.batchnorm_fwd_infer(
            null_mut(),
            &bn,
            &xd,
            tx.p(),
            if add { tz.p() } else { null() },
            tg.f(),
            tb.f(),
            trm.f(),
            trv.f(),
            &xd,
            yi.p(),
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
        )?;
    }
    cuda::synchronize().unwrap();
    let (rm, rv) = (trm.read(), trv.read());
    let (mut yiref, mut yitol) = (vec![0.0; total], vec![0.0; total]);
    for i in 0..n {
        for c in 0..ch {
            for s in 0..hw {
                let e = at(i, c, s);
                let xh = (x[e] - rm[c]) / (rv[c] + eps).sqrt();
                yiref[e] = epilogue(xh * gamma[c] + beta[c], e);
                yitol[e] = rel(dt) * ((xh * gamma[c]).abs() + beta[c].abs() + if add { z[e].abs() } else { 0.0 } + 1e-3);
            }
        }
    }
    rep.check(&name, "y (inference)", &yi.read(), &yiref, &yitol);
    rep.cases += 1;
    Ok(())
}

#[test]
fn batchnorm_train_infer_backward_every_dtype_layout_epilogue() {
    let Some(h) = gpu("batchnorm_train_infer_backward_every_dtype_layout_epilogue") else { return };
    let mut rep = Report::default();
    let mut seed = 100;
    for dt in Dt::ALL {
        for nhwc in [false, true] {
            for epi in BnEpilogue::ALL {
                for (n, c, hw, misalign) in [(3, 5, (7, 3), false), (2, 6, (5, 5), true), (37, 3, (0, 0), false)] {
                    if hw == (0, 0) && nhwc {
                        continue; // [N, C] is both layouts
                    }
                    seed += 1;
                    let k = BnCase { dt, nhwc, epi: *epi, n, c, hw, misalign };
                    if let Err(e) = bn_case(&h, &k, &mut rep, seed) {
                        rep.failures.push(format!("{dt:?} nhwc={nhwc} {epi:?} [{n}, {c}, {hw:?}]: {e}"));
                    }
                }
            }
        }
    }
    rep.finish("batchnorm");
}

// ---------------------------------------------------------------------------
// Fully-connected layer
// ---------------------------------------------------------------------------

fn gelu(z: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * z * (1.0 + (k * (z + 0.044715 * z * z * z)).tanh())
}
fn gelu_grad(z: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let u = k * (z + 0.044715 * z * z * z);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * z * z)
}

/// Ok(false): NOT_SUPPORTED (allowed for misaligned pointers only).
#[allow(clippy::too_many_arguments)]
fn linear_case(
    h: &Handle,
    dt: Dt,
    layout: WeightLayout,
    epi: LinearEpilogue,
    (m, n, k): (usize, usize, usize),
    misalign: bool,
    rep: &mut Report,
    seed: u64,
) -> Result<bool, Error> {
    let name = format!("{dt:?} {layout:?} {epi:?} m={m} n={n} k={k}{}", if misalign { " misaligned" } else { "" });
    let off = if misalign { dt.size() } else { 0 };
    let kn = layout == WeightLayout::Kn;
    let mut rng = Rng::new(seed);
    let x = quant(dt, rng.vec(m * k, -1.0, 1.0));
    let wscale = 1.0 / (k as f64).sqrt();
    let w = quant(dt, rng.vec(k * n, -wscale, wscale));
    let bias = quant(dt, rng.vec(n, -0.5, 0.5));
    let dy = quant(dt, rng.vec(m * n, -1.0, 1.0));
    let has_bias = epi != LinearEpilogue::None;
    let wat = |kk: usize, nn: usize| if kn { w[kk * n + nn] } else { w[nn * k + kk] };

    let desc = LinearDesc::with(epi, layout, LinearFlags::NONE)?;
    let xd = TensorDesc::with(dtype(dt), &[m as i64, k as i64], None)?;
    let wdims = if kn { [k as i64, n as i64] } else { [n as i64, k as i64] };
    let wd = TensorDesc::with(dtype(dt), &wdims, None)?;
    let yd = TensorDesc::with(dtype(dt), &[m as i64, n as i64], None)?;
    let tx = T::input(dt, &x, off);
    let tw = T::input(dt, &w, off);
    let tb = T::input(dt, &bias, off);
    let y = T::output(dt, m * n, off);
    let aux_bytes = h.linear_aux_size(&desc, &yd)?;
    let aux = scratch(aux_bytes);
    let ws = scratch(h.linear_fwd_workspace_size(&desc, &xd, &wd, &yd)?);
    let r = unsafe {
        h.linear_fwd(
            null_mut(),
            &desc,
            &xd,
            tx.p(),
            &wd,
            tw.p(),
            if has_bias { tb.p() } else { null() },
            &yd,
            y.p(),
            sp(&aux),
            aux_bytes,
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
        )
    };
    match r {
        Err(e) if misalign && e.status() == Status::NOT_SUPPORTED => {
            println!("  NOT_SUPPORTED (allowed, misaligned): {name}: {}", e.message());
            return Ok(false);
        }
        r => r?,
    }
    cuda::synchronize().unwrap();
    let (mut z, mut zmag) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            let b = if has_bias { bias[j] } else { 0.0 };
            z[i * n + j] = (0..k).map(|kk| x[i * k + kk] * wat(kk, j)).sum::<f64>() + b;
            zmag[i * n + j] = (0..k).map(|kk| (x[i * k + kk] * wat(kk, j)).abs()).sum::<f64>() + b.abs();
        }
    }
    let act = |v: f64| match epi {
        LinearEpilogue::BiasRelu => v.max(0.0),
        LinearEpilogue::BiasGelu => gelu(v),
        _ => v,
    };
    let yref: Vec<f64> = z.iter().map(|v| act(*v)).collect();
    let ytol: Vec<f64> = (0..m * n).map(|e| rel(dt) * (zmag[e] + 1e-3) + dt.eps() * yref[e].abs()).collect();
    let ygot = y.read();
    rep.check(&name, "y", &ygot, &yref, &ytol);

    // Backward: dx, dw, db.
    let tdy = T::input(dt, &dy, off);
    let dx = T::output(dt, m * k, off);
    let dw = T::output(dt, k * n, off);
    let db = T::output(dt, n, off);
    let ws = scratch(h.linear_bwd_workspace_size(&desc, &xd, &wd, &yd, None)?);
    let r = unsafe {
        h.linear_bwd(
            null_mut(),
            &desc,
            &xd,
            tx.p(),
            &wd,
            tw.p(),
            &yd,
            tdy.p(),
            sp(&aux),
            aux_bytes,
            None,
            null(),
            0,
            Some(&xd),
            dx.p(),
            dw.p(),
            if has_bias { db.p() } else { null_mut() },
            null_mut(),
            sp(&ws),
            ws.as_ref().map_or(0, |b| b.len()),
        )
    };
    match r {
        Err(e) if misalign && e.status() == Status::NOT_SUPPORTED => {
            println!("  NOT_SUPPORTED (allowed, misaligned) backward: {name}: {}", e.message());
            rep.cases += 1;
            return Ok(false);
        }
        r => r?,
    }
    cuda::synchronize().unwrap();
    // dz = dy * act'(z). Where z is within rounding of 0, cuBLASLt's ReLU
    // bit may say either (the header's note on fnorm_linear_aux_size): such
    // an element's dz is dy or 0, so it is taken as dy/2 +- |dy|/2 (dzunc).
    let (mut dz, mut dzmag, mut dzunc) = (vec![0.0; m * n], vec![0.0; m * n], vec![0.0; m * n]);
    let mut undecided = 0;
    for e in 0..m * n {
        let (d, mag) = match epi {
            LinearEpilogue::BiasRelu if z[e].abs() <= 2.0 * rel(dt) * zmag[e] => {
                undecided += 1;
                dzunc[e] = dy[e].abs() / 2.0;
                (dy[e] / 2.0, dy[e].abs())
            }
            LinearEpilogue::BiasRelu => {
                let v = if z[e] > 0.0 { dy[e] } else { 0.0 };
                if (ygot[e] > 0.0) != (z[e] > 0.0) {
                    rep.failures.push(format!("{name}: y[{e}] = {} but z = {}", ygot[e], z[e]));
                }
                (v, v.abs())
            }
            LinearEpilogue::BiasGelu => (dy[e] * gelu_grad(z[e]), dy[e].abs() * (gelu_grad(z[e]).abs() + z[e].abs() + 1.0)),
            _ => (dy[e], dy[e].abs()),
        };
        dz[e] = d;
        dzmag[e] = mag;
    }
    let c = rel(dt) + dt.eps();
    let (mut dxref, mut dxtol) = (vec![0.0; m * k], vec![0.0; m * k]);
    for i in 0..m {
        for kk in 0..k {
            dxref[i * k + kk] = (0..n).map(|j| dz[i * n + j] * wat(kk, j)).sum();
            dxtol[i * k + kk] = c * ((0..n).map(|j| dzmag[i * n + j] * wat(kk, j).abs()).sum::<f64>() + 1e-3)
                + (0..n).map(|j| dzunc[i * n + j] * wat(kk, j).abs()).sum::<f64>();
        }
    }
    rep.check(&name, "dx", &dx.read(), &dxref, &dxtol);
    let (mut dwref, mut dwtol) = (vec![0.0; k * n], vec![0.0; k * n]);
    for kk in 0..k {
        for j in 0..n {
            let e = if kn { kk * n + j } else { j * k + kk };
            dwref[e] = (0..m).map(|i| x[i * k + kk] * dz[i * n + j]).sum();
            dwtol[e] = c * ((0..m).map(|i| (x[i * k + kk]).abs() * dzmag[i * n + j]).sum::<f64>() + 1e-3)
                + (0..m).map(|i| (x[i * k + kk]).abs() * dzunc[i * n + j]).sum::<f64>();
        }
    }
    rep.check(&name, "dw", &dw.read(), &dwref, &dwtol);
    if has_bias {
        let dbref: Vec<f64> = (0..n).map(|j| (0..m).map(|i| dz[i * n + j]).sum()).collect();
        let dbtol: Vec<f64> = (0..n)
            .map(|j| c * ((0..m).map(|i| dzmag[i * n + j]).sum::<f64>() + 1e-3) + (0..m).map(|i| dzunc[i * n + j]).sum::<f64>())
            .collect();
        rep.check(&name, "db", &db.read(), &dbref, &dbtol);
    }
    if undecided > 0 {
        println!("  {name}: {undecided} of {} ReLU signs within rounding of 0 (either derivative accepted there)", m * n);
    }
    rep.cases += 1;
    Ok(true)
}

#[test]
fn linear_forward_backward_every_dtype_epilogue_layout() {
    let Some(h) = gpu("linear_forward_backward_every_dtype_epilogue_layout") else { return };
    if let Err(e) = LinearDesc::new() {
        println!("SKIP: linear: {e}");
        return;
    }
    let mut rep = Report::default();
    let mut not_supported = 0;
    let mut seed = 1000;
    for dt in Dt::ALL {
        for layout in WeightLayout::ALL {
            for epi in LinearEpilogue::ALL {
                for (shape, misalign) in [((17, 13, 64), false), ((64, 17, 3), false), ((3, 64, 17), false), ((17, 24, 40), true)] {
                    seed += 1;
                    match linear_case(&h, dt, *layout, *epi, shape, misalign, &mut rep, seed) {
                        Ok(true) => {}
                        Ok(false) => not_supported += 1,
                        Err(e) => rep.failures.push(format!("{dt:?} {layout:?} {epi:?} {shape:?}: {e}")),
                    }
                }
            }
        }
    }
    println!("linear: {not_supported} misaligned cases NOT_SUPPORTED (allowed, listed above)");
    rep.finish("linear");
}

// ---------------------------------------------------------------------------
// Bad launches, threads, SyncBatchNorm
// ---------------------------------------------------------------------------

#[test]
fn bad_launches_return_errors_and_write_nothing() {
    let Some(h) = gpu("bad_launches_return_errors_and_write_nothing") else { return };
    let (rows, cols) = (9usize, 300usize);
    let norm = NormDesc::new().unwrap();
    let xd = TensorDesc::with(Dtype::F32, &[rows as i64, cols as i64], None).unwrap();
    let yd16 = TensorDesc::with(Dtype::F16, &[rows as i64, cols as i64], None).unwrap();
    let unset = TensorDesc::new().unwrap();
    let x = T::input(Dt::F32, &vec![1.0; rows * cols], 0);
    let y = T::output(Dt::F32, rows * cols, 0);
    let failures = std::cell::RefCell::new(Vec::new());
    let expect = |what: &str, r: Result<(), Error>, cat: Category| match r {
        Err(e) if e.category() == cat && !e.message().is_empty() => println!("  {what}: {e}"),
        other => failures.borrow_mut().push(format!("{what}: expected {cat:?} with a message, got {other:?}")),
    };
    // dtype mismatch between x and y.
    let r = unsafe {
        h.norm_fwd(null_mut(), &norm, &xd, x.p(), null(), null_mut(), None, null(), null(), &yd16, y.p(), null_mut(), null_mut(), null_mut(), 0)
    };
    expect("norm_fwd with y fp16, x fp32", r, Category::BadParam);
    // An unset descriptor.
    let r = unsafe {
        h.norm_fwd(null_mut(), &norm, &unset, x.p(), null(), null_mut(), None, null(), null(), &xd, y.p(), null_mut(), null_mut(), null_mut(), 0)
    };
    expect("norm_fwd with an unset x descriptor", r, Category::BadParam);
    // A NULL required pointer.
    let r = unsafe {
        h.norm_fwd(null_mut(), &norm, &xd, null(), null(), null_mut(), None, null(), null(), &xd, y.p(), null_mut(), null_mut(), null_mut(), 0)
    };
    expect("norm_fwd with x NULL", r, Category::BadParam);
    // A short workspace.
    let wd = TensorDesc::with(Dtype::F32, &[cols as i64], None).unwrap();
    let need = h.norm_bwd_workspace_size(&norm, &xd, Some(&wd)).unwrap();
    if need > 0 {
        let ws = DeviceBuffer::new(need).unwrap();
        let st = T::output(Dt::F32, rows, 0);
        let rs = T::output(Dt::F32, rows, 0);
        let (dg, db) = (T::output(Dt::F32, cols, 0), T::output(Dt::F32, cols, 0));
        let dy = T::input(Dt::F32, &vec![0.5; rows * cols], 0);
        let r = unsafe {
            h.norm_bwd(null_mut(), &norm, &xd, x.p(), &xd, dy.p(), st.f(), rs.f(), Some(&wd), null(), null(), &xd, y.p(), dg.p(), db.p(), ws.ptr(), need - 1)
        };
        match &r {
            Err(e) if e.status() == Status::INSUFFICIENT_WORKSPACE => {}
            other => failures.borrow_mut().push(format!("norm_bwd short workspace: got {other:?}")),
        }
        expect("norm_bwd with workspace_bytes one short", r, Category::BadParam);
    }
    // BatchNorm with one value per channel (m = 1).
    let bn = BatchNormDesc::new().unwrap();
    let one = TensorDesc::with(Dtype::F32, &[1, 4], None).unwrap();
    let r = unsafe {
        h.batchnorm_fwd_train(null_mut(), &bn, &one, x.p(), null(), null(), null(), null_mut(), null_mut(), null_mut(), &one, y.p(), null_mut(), null_mut(), null_mut(), 0, null_mut(), 0)
    };
    expect("batchnorm_fwd_train with m = 1", r, Category::BadParam);
    // The linear layer's BIAS epilogue without a bias.
    if let Ok(lin) = LinearDesc::with(LinearEpilogue::Bias, WeightLayout::Kn, LinearFlags::NONE) {
        let xd = TensorDesc::with(Dtype::F32, &[3, 4], None).unwrap();
        let wd = TensorDesc::with(Dtype::F32, &[4, 5], None).unwrap();
        let yd = TensorDesc::with(Dtype::F32, &[3, 5], None).unwrap();
        let ws = scratch(h.linear_fwd_workspace_size(&lin, &xd, &wd, &yd).unwrap());
        let r = unsafe {
            h.linear_fwd(null_mut(), &lin, &xd, x.p(), &wd, x.p(), null(), &yd, y.p(), null_mut(), 0, sp(&ws), ws.as_ref().map_or(0, |b| b.len()))
        };
        expect("linear_fwd BIAS without bias", r, Category::BadParam);
    }
    cuda::synchronize().unwrap();
    // Nothing was written: y still holds the poison.
    if !y.read().iter().all(|v| v.is_nan()) {
        failures.borrow_mut().push("a refused launch wrote into y".into());
    }
    let failures = failures.into_inner();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn two_threads_share_one_handle() {
    let Some(h) = gpu("two_threads_share_one_handle") else { return };
    let (rows, cols) = (33usize, 517usize);
    let norm = NormDesc::with(NormMode::RmsNorm, -1, 1e-6).unwrap();
    let xd = TensorDesc::with(Dtype::F32, &[rows as i64, cols as i64], None).unwrap();
    let run = |seed: u64| -> Result<usize, String> {
        let stream = cuda::Stream::new()?;
        let mut rng = Rng::new(seed);
        let x = quant(Dt::F32, rng.vec(rows * cols, -3.0, 3.0));
        let tx = T::input(Dt::F32, &x, 0);
        let mut ok = 0;
        for it in 0..25 {
            let y = T::output(Dt::F32, rows * cols, 0);
            unsafe {
                h.norm_fwd(stream.raw() as Stream, &norm, &xd, tx.p(), null(), null_mut(), None, null(), null(), &xd, y.p(), null_mut(), null_mut(), null_mut(), 0)
                    .map_err(|e| e.to_string())?;
            }
            // This thread's own error, while the other thread succeeds.
            let bad = unsafe {
                h.norm_fwd(stream.raw() as Stream, &norm, &xd, null(), null(), null_mut(), None, null(), null(), &xd, y.p(), null_mut(), null_mut(), null_mut(), 0)
            };
            match bad {
                Err(e) if e.message().contains("x") => {}
                other => return Err(format!("iteration {it}: expected this thread's NULL-x error, got {other:?}")),
            }
            stream.synchronize()?;
            let got = y.read();
            for i in 0..rows {
                let row = &x[i * cols..(i + 1) * cols];
                let rr = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / cols as f64 + 1e-6).sqrt();
                for j in 0..cols {
                    let want = row[j] * rr;
                    let e = (got[i * cols + j] - want).abs();
                    if !(e <= 1e-5 * (want.abs() + 1e-3)) {
                        return Err(format!("seed {seed} iteration {it} [{i}, {j}]: {} vs {want}", got[i * cols + j]));
                    }
                }
            }
            ok += 1;
        }
        Ok(ok)
    };
    let (a, b) = std::thread::scope(|s| {
        let ta = s.spawn(|| run(1));
        let tb = s.spawn(|| run(2));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    println!("two threads, one handle: {a:?} and {b:?} checked launches");
    assert_eq!(a, Ok(25));
    assert_eq!(b, Ok(25));
}

/// NCCL's ncclCommInitAll / ncclCommDestroy from the libnccl that
/// libfusednorm loaded (looked up at run time, so this crate links no NCCL).
struct Nccl {
    init_all: unsafe extern "C" fn(*mut *mut NcclComm, i32, *const i32) -> i32,
    destroy: unsafe extern "C" fn(*mut NcclComm) -> i32,
}
extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const core::ffi::c_char) -> *mut c_void;
}
fn nccl() -> Option<Nccl> {
    // RTLD_DEFAULT is NULL on glibc: the global scope, where libnccl.so.2
    // sits as a dependency of libfusednorm.so.
    let a = unsafe { dlsym(null_mut(), c"ncclCommInitAll".as_ptr()) };
    let b = unsafe { dlsym(null_mut(), c"ncclCommDestroy".as_ptr()) };
    if a.is_null() || b.is_null() {
        return None;
    }
    Some(unsafe { Nccl { init_all: core::mem::transmute(a), destroy: core::mem::transmute(b) } })
}

/// BatchNorm+ReLU training forward and backward with `bn`; returns
/// y, saved mean, saved invstd, dx, dgamma, dbeta.
fn bn_step(h: &Handle, bn: &BatchNormDesc, xd: &TensorDesc, x: &[f64], dy: &[f64], ch: usize) -> Result<Vec<Vec<f64>>, Error> {
    let n = x.len();
    let tx = T::input(Dt::F32, x, 0);
    let tdy = T::input(Dt::F32, dy, 0);
    let gamma = T::input(Dt::F32, &vec![1.25; ch], 0);
    let y = T::output(Dt::F32, n, 0);
    let dx = T::output(Dt::F32, n, 0);
    let (sm, si, dg, db) = (T::output(Dt::F32, ch, 0), T::output(Dt::F32, ch, 0), T::output(Dt::F32, ch, 0), T::output(Dt::F32, ch, 0));
    let ws = scratch(h.batchnorm_fwd_train_workspace_size(bn, xd)?);
    let rb = h.batchnorm_reserve_space_size(bn, xd)?;
    let reserve = scratch(rb);
    let wsb = scratch(h.batchnorm_bwd_workspace_size(bn, xd)?);
    unsafe {
        h.batchnorm_fwd_train(null_mut(), bn, xd, tx.p(), null(), gamma.f(), null(), null_mut(), null_mut(), null_mut(), xd, y.p(), sm.f(), si.f(), sp(&ws), ws.as_ref().map_or(0, |b| b.len()), sp(&reserve), rb)?;
        h.batchnorm_bwd(null_mut(), bn, xd, tx.p(), xd, tdy.p(), null(), gamma.f(), null(), sm.f(), si.f(), sp(&reserve), rb, xd, dx.p(), null_mut(), dg.f(), db.f(), sp(&wsb), wsb.as_ref().map_or(0, |b| b.len()))?;
    }
    cuda::synchronize().unwrap();
    Ok(vec![y.read(), sm.read(), si.read(), dx.read(), dg.read(), db.read()])
}

#[test]
fn syncbatchnorm() {
    let Some(h) = gpu("syncbatchnorm") else { return };
    let mut bn = BatchNormDesc::with(BnEpilogue::Relu, 1e-5, BnAverage::Exponential, 0.1).unwrap();
    let e = unsafe { bn.set_comm(null_mut(), BnSyncFlags::NONE) }.unwrap_err();
    assert_eq!(e.status(), Status::BAD_PARAM_NULL_POINTER);
    let Some(nccl) = nccl() else {
        println!("SKIP: syncbatchnorm numerics: libnccl's ncclCommInitAll is not loaded in this process (library built without NCCL?)");
        return;
    };
    // One rank on the handle's device: SyncBatchNorm over a 1-rank
    // communicator (the NCCL collectives really run) must equal BatchNorm.
    let dev = h.device().unwrap();
    let mut comm: *mut NcclComm = null_mut();
    let rc = unsafe { (nccl.init_all)(&mut comm, 1, &dev) };
    assert_eq!(rc, 0, "ncclCommInitAll failed: {rc}");
    let (n, ch, hw) = (4usize, 3usize, 25usize);
    let xd = TensorDesc::with(Dtype::F32, &[n as i64, ch as i64, 5, 5], None).unwrap();
    let mut rng = Rng::new(77);
    let x = quant(Dt::F32, rng.vec(n * ch * hw, -2.0, 3.0));
    let dy = quant(Dt::F32, rng.vec(n * ch * hw, -1.0, 1.0));
    let plain = bn_step(&h, &bn, &xd, &x, &dy, ch).unwrap();
    unsafe { bn.set_comm(comm, BnSyncFlags::GLOBAL_WEIGHT_GRADS) }.unwrap();
    assert_eq!(bn.comm().unwrap(), (comm, BnSyncFlags::GLOBAL_WEIGHT_GRADS));
    let synced = bn_step(&h, &bn, &xd, &x, &dy, ch);
    bn.detach_comm().unwrap();
    unsafe { (nccl.destroy)(comm) };
    let synced = synced.unwrap();
    let mut rep = Report::default();
    for (i, what) in ["y", "saved_mean", "saved_invstd", "dx", "dgamma", "dbeta"].iter().enumerate() {
        let tol: Vec<f64> = plain[i].iter().map(|v| 1e-5 * (v.abs() + 1.0)).collect();
        rep.check("1-rank SyncBatchNorm vs BatchNorm", what, &synced[i], &plain[i], &tol);
    }
    rep.cases += 1;
    rep.finish("syncbatchnorm (1 rank)");
    println!(
        "SKIP: syncbatchnorm across GPUs: this test runs one rank on one of {} GPU(s); the multi-GPU numerics are tests/gpu/test_syncbn.py's (nvidia-h200-x2)",
        cuda::device_count()
    );
}
