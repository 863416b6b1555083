// SPDX-License-Identifier: Apache-2.0
//! GPU test of `NormFlags::ROUND_XHAT` (Hugging Face's "Llama cast order")
//! through the safe crate, every dtype, LayerNorm and RMSNorm, gamma in x's
//! dtype (transformers' case), with and without ZERO_CENTERED_GAMMA:
//! - y bit for bit against the host's f32 recomputation from the kernel's own
//!   mean / rstd: x_hat = (s - mean) * rstd in f32, rounded to x's dtype,
//!   times the scale, + beta (unfused, or one FMA as the device may contract
//!   it), rounded to x's dtype; rstd within 1e-5 of an f64 reference;
//! - the flag changes some 16-bit outputs and no f32 one (it is wired, and
//!   rounding to f32 is nothing);
//! - backward: dgamma against f64 sums of dy * round(x_hat) (1e-5 of the sum
//!   of |terms| plus half an ulp of the output), dx and dbeta the flag-off
//!   run's bits.
//! Outputs are poisoned (NaN) first. Without a device the test prints
//! `SKIP: <reason>` and passes.
use core::ffi::c_void;
use core::ptr::{null, null_mut};

use fusednorm::*;
use fusednorm_testkit::check::Rng;
use fusednorm_testkit::cuda::{self, DeviceBuffer};
use fusednorm_testkit::half::Dt;

mod common;
use common::{dtype, gpu, scratch, sp};

/// A device tensor of `dt`: uploaded values, or `n` poisoned elements.
struct T {
    buf: DeviceBuffer,
    dt: Dt,
}

impl T {
    fn input(dt: Dt, vals: &[f64]) -> T {
        T { buf: DeviceBuffer::from_bytes(&dt.encode(vals), 0).unwrap(), dt }
    }
    fn output(dt: Dt, n: usize) -> T {
        let buf = DeviceBuffer::new(n * dt.size()).unwrap();
        buf.poison().unwrap();
        T { buf, dt }
    }
    fn p(&self) -> *mut c_void {
        self.buf.ptr()
    }
    fn f(&self) -> *mut f32 {
        self.buf.f32_ptr()
    }
    fn bytes(&self) -> Vec<u8> {
        self.buf.download().unwrap()
    }
    fn read(&self) -> Vec<f64> {
        self.dt.decode(&self.bytes())
    }
}

/// One case; returns how many y elements the flag changed.
fn case(h: &Handle, dt: Dt, mode: NormMode, rows: usize, cols: usize, zc: bool, seed: u64) -> Result<usize, String> {
    let ln = mode == NormMode::LayerNorm;
    let n = rows * cols;
    let mut rng = Rng::new(seed);
    let q = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| dt.quantize(x)).collect() };
    let x = q(rng.vec(n, -2.0, 4.0));
    let gamma = q(if zc { rng.vec(cols, -0.5, 0.5) } else { rng.vec(cols, 0.5, 1.5) });
    let beta = q(rng.vec(cols, -0.5, 0.5));
    let dy = q(rng.vec(n, -1.0, 1.0));
    let e = |e: Error| e.to_string();

    let base = if zc { NormFlags::ZERO_CENTERED_GAMMA } else { NormFlags::NONE };
    let mut on = NormDesc::with(mode, -1, 1e-5).map_err(e)?;
    on.set_flags(base | NormFlags::ROUND_XHAT).map_err(e)?;
    let mut off = NormDesc::with(mode, -1, 1e-5).map_err(e)?;
    off.set_flags(base).map_err(e)?;
    let xd = TensorDesc::with(dtype(dt), &[rows as i64, cols as i64], None).map_err(e)?;
    let wd = TensorDesc::with(dtype(dt), &[cols as i64], None).map_err(e)?;
    let (dx_, dg, db, ddy) = (T::input(dt, &x), T::input(dt, &gamma), T::input(dt, &beta), T::input(dt, &dy));

    // Forward, flag on and off, each into poisoned outputs.
    let fwd = |norm: &NormDesc| -> Result<(T, T, T), String> {
        let (y, mean, rstd) = (T::output(dt, n), T::output(Dt::F32, rows), T::output(Dt::F32, rows));
        let ws = scratch(h.norm_fwd_workspace_size(norm, &xd, &xd).map_err(e)?);
        unsafe {
            h.norm_fwd(
                null_mut(),
                norm,
                &xd,
                dx_.p(),
                null(),
                null_mut(),
                Some(&wd),
                dg.p(),
                if ln { db.p() } else { null() },
                &xd,
                y.p(),
                if ln { mean.f() } else { null_mut() },
                rstd.f(),
                sp(&ws),
                ws.as_ref().map_or(0, |b| b.len()),
            )
            .map_err(e)?;
        }
        cuda::synchronize()?;
        Ok((y, mean, rstd))
    };
    let (y, mean, rstd) = fwd(&on)?;
    let (y_off, _, rstd_off) = fwd(&off)?;
    let (yv, mv, rv) = (y.read(), mean.read(), rstd.read());
    if rstd_off.bytes() != rstd.bytes() {
        return Err("rstd differs from the flag-off run's".into());
    }
    // x_hat as the kernel computes it (f32), rounded to x's dtype.
    let xr = |i: usize| -> f32 {
        let r = i / cols;
        let m = if ln { mv[r] as f32 } else { 0.0 };
        dt.quantize(((x[i] as f32 - m) * rv[r] as f32) as f64) as f32
    };
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mu = if ln { row.iter().sum::<f64>() / cols as f64 } else { 0.0 };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / cols as f64;
        let want = 1.0 / (var + (1e-5f32 as f64)).sqrt();
        if !((rv[r] - want).abs() <= 1e-5 * want) {
            return Err(format!("rstd[{r}] = {}, f64 reference {want}", rv[r]));
        }
    }
    for i in 0..n {
        let j = i % cols;
        let sc = if zc { 1.0f32 + gamma[j] as f32 } else { gamma[j] as f32 };
        let b = beta[j] as f32;
        let (unfused, fused) = if ln { (xr(i) * sc + b, xr(i).mul_add(sc, b)) } else { (xr(i) * sc, xr(i) * sc) };
        let (u, f) = (dt.quantize(unfused as f64), dt.quantize(fused as f64));
        if yv[i] != u && yv[i] != f {
            return Err(format!("y[{i}] = {}, want {u} (x_hat rounded {})", yv[i], xr(i)));
        }
    }
    let changed = y.bytes().chunks(dt.size()).zip(y_off.bytes().chunks(dt.size())).filter(|(a, b)| a != b).count();

    // Backward from the flag-on forward's statistics, flag on and off.
    let bwd = |norm: &NormDesc| -> Result<(T, T, T), String> {
        let (dx, dgamma, dbeta) = (T::output(dt, n), T::output(dt, cols), T::output(dt, cols));
        let ws = scratch(h.norm_bwd_workspace_size(norm, &xd, Some(&wd)).map_err(e)?);
        unsafe {
            h.norm_bwd(
                null_mut(),
                norm,
                &xd,
                dx_.p(),
                &xd,
                ddy.p(),
                if ln { mean.f() } else { null() },
                rstd.f(),
                Some(&wd),
                dg.p(),
                null(),
                &xd,
                dx.p(),
                dgamma.p(),
                if ln { dbeta.p() } else { null_mut() },
                sp(&ws),
                ws.as_ref().map_or(0, |b| b.len()),
            )
            .map_err(e)?;
        }
        cuda::synchronize()?;
        Ok((dx, dgamma, dbeta))
    };
    let (dx, dgamma, dbeta) = bwd(&on)?;
    let (dx_off, _, dbeta_off) = bwd(&off)?;
    if dx.bytes() != dx_off.bytes() {
        return Err("dx differs from the flag-off run's (the flag changes dgamma only)".into());
    }
    if ln && dbeta.bytes() != dbeta_off.bytes() {
        return Err("dbeta differs from the flag-off run's".into());
    }
    let got = dgamma.read();
    for (j, g) in got.iter().enumerate() {
        let (mut want, mut mag) = (0.0f64, 0.0f64);
        for r in 0..rows {
            let t = dy[r * cols + j] * xr(r * cols + j) as f64;
            want += t;
            mag += t.abs();
        }
        if !((g - want).abs() <= 1e-5 * mag + dt.eps() * want.abs() + 1e-6) {
            return Err(format!("dgamma[{j}] = {g}, f64 sum of dy * round(x_hat) {want}"));
        }
    }
    Ok(changed)
}

#[test]
fn round_xhat_llama_cast_order() {
    let Some(h) = gpu("round_xhat_llama_cast_order") else { return };
    let (mut failures, mut cases, mut seed) = (Vec::new(), 0, 11);
    for dt in Dt::ALL {
        let mut changed = 0;
        for mode in NormMode::ALL {
            for (rows, cols, zc) in [(1, 7, false), (33, 1000, true), (5, 4104, false)] {
                seed += 1;
                cases += 1;
                match case(&h, dt, *mode, rows, cols, zc, seed) {
                    Ok(c) => changed += c,
                    Err(e) => {
                        failures.push(format!("{mode:?} {dt:?} [{rows}, {cols}]{}: {e}", if zc { " zc" } else { "" }))
                    }
                }
            }
        }
        println!("{dt:?}: the flag changed {changed} outputs");
        if dt == Dt::F32 {
            assert_eq!(changed, 0, "f32: rounding x_hat to f32 changes nothing");
        } else if failures.is_empty() {
            assert!(changed > 0, "{dt:?}: the flag changed no output (is it wired?)");
        }
    }
    println!("round_xhat: {cases} cases, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
