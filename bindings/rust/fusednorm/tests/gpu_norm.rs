// SPDX-License-Identifier: Apache-2.0
//! GPU tests of LayerNorm / RMSNorm through the safe crate (and its
//! quantized forward, bit-exact): a double-precision host reference on small
//! odd shapes, every dtype, misaligned pointers, outputs poisoned first.
//! Without a device each test prints `SKIP: <reason>` and passes.
#![allow(unused_imports)]
use core::ffi::c_void;
use core::ptr::{null, null_mut};

use fusednorm::*;
use fusednorm_testkit::check::{compare, Rng};
use fusednorm_testkit::cuda::{self, DeviceBuffer};
use fusednorm_testkit::half::Dt;

mod common;
use common::*;

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
