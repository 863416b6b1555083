// SPDX-License-Identifier: Apache-2.0
//! GPU tests of the fully-connected layer through the safe crate: forward
//! and backward against a double-precision host reference, every dtype,
//! epilogue and weight layout. Without a device each test prints
//! `SKIP: <reason>` and passes.
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
