// SPDX-License-Identifier: Apache-2.0
//! LayerNorm forward + backward from Rust (mirrors examples/layernorm_demo.c,
//! plus the backward): a handle, fp32 [rows, cols] descriptors, workspace
//! queries, launches on a stream of our own, and a check of y, mean, rstd,
//! dx, dgamma and dbeta against a plain f64 computation.
//! Exit status: 0 on success, 1 on a wrong result or an error, 77 without a
//! usable GPU (with a message saying so).
use core::ptr::{null, null_mut};
use std::process::ExitCode;

use fusednorm::{Category, Dtype, Handle, NormDesc, NormMode, Stream, TensorDesc};
use fusednorm_testkit::check::{compare, Rng};
use fusednorm_testkit::cuda::{self, DeviceBuffer};

const ROWS: usize = 512;
const COLS: usize = 1000;

fn main() -> ExitCode {
    println!("libfusednorm {} (Rust binding for header {})", fusednorm::version(), fusednorm::HEADER_VERSION);
    let handle = match Handle::new() {
        Ok(h) => h,
        Err(e) if e.category() == Category::NoDevice => {
            println!("No usable CUDA GPU here, so the demo cannot run: {e}");
            return ExitCode::from(77);
        }
        Err(e) => {
            eprintln!("fnorm_create failed: {e}");
            return ExitCode::from(1);
        }
    };
    match run(&handle) {
        Ok(true) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("result does not match the reference");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn f32_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| (*x as f32).to_ne_bytes()).collect()
}
fn to_f64(v: Vec<f32>) -> Vec<f64> {
    v.into_iter().map(f64::from).collect()
}

fn run(handle: &Handle) -> Result<bool, Box<dyn std::error::Error>> {
    let eps = 1e-5;
    let mut rng = Rng::new(12345);
    let hx: Vec<f64> = rng.vec(ROWS * COLS, 2.0, 4.0).into_iter().map(|v| v as f32 as f64).collect();
    let hg: Vec<f64> = rng.vec(COLS, 0.5, 1.5).into_iter().map(|v| v as f32 as f64).collect();
    let hb: Vec<f64> = rng.vec(COLS, -0.5, 0.5).into_iter().map(|v| v as f32 as f64).collect();
    let hdy: Vec<f64> = rng.vec(ROWS * COLS, -1.0, 1.0).into_iter().map(|v| v as f32 as f64).collect();

    let x_desc = TensorDesc::with(Dtype::F32, &[ROWS as i64, COLS as i64], None)?;
    let w_desc = TensorDesc::with(Dtype::F32, &[COLS as i64], None)?;
    let norm = NormDesc::with(NormMode::LayerNorm, -1, eps)?;

    // The caller owns all memory: query, allocate, launch.
    let fwd_ws_bytes = handle.norm_fwd_workspace_size(&norm, &x_desc, &x_desc)?;
    let bwd_ws_bytes = handle.norm_bwd_workspace_size(&norm, &x_desc, Some(&w_desc))?;
    println!("workspace: forward {fwd_ws_bytes} bytes, backward {bwd_ws_bytes} bytes");
    let stream = cuda::Stream::new()?;
    let x = DeviceBuffer::from_bytes(&f32_bytes(&hx), 0)?;
    let dy = DeviceBuffer::from_bytes(&f32_bytes(&hdy), 0)?;
    let gamma = DeviceBuffer::from_bytes(&f32_bytes(&hg), 0)?;
    let beta = DeviceBuffer::from_bytes(&f32_bytes(&hb), 0)?;
    let (y, dx) = (DeviceBuffer::new(ROWS * COLS * 4)?, DeviceBuffer::new(ROWS * COLS * 4)?);
    let (mean, rstd) = (DeviceBuffer::new(ROWS * 4)?, DeviceBuffer::new(ROWS * 4)?);
    let (dgamma, dbeta) = (DeviceBuffer::new(COLS * 4)?, DeviceBuffer::new(COLS * 4)?);
    let fwd_ws = DeviceBuffer::new(fwd_ws_bytes)?;
    let bwd_ws = DeviceBuffer::new(bwd_ws_bytes)?;
    for b in [&y, &dx, &mean, &rstd, &dgamma, &dbeta] {
        b.poison()?; // NaN: an output never written fails the check
    }
    let s = stream.raw() as Stream;
    // SAFETY: every pointer is a live allocation of the described size on the
    // handle's device; all of them outlive the stream synchronization below.
    unsafe {
        handle.norm_fwd(s, &norm, &x_desc, x.ptr(), null(), null_mut(), Some(&w_desc), gamma.ptr(), beta.ptr(), &x_desc,
                        y.ptr(), mean.f32_ptr(), rstd.f32_ptr(), fwd_ws.ptr(), fwd_ws_bytes)?;
        handle.norm_bwd(s, &norm, &x_desc, x.ptr(), &x_desc, dy.ptr(), mean.f32_ptr(), rstd.f32_ptr(), Some(&w_desc),
                        gamma.ptr(), null(), &x_desc, dx.ptr(), dgamma.ptr(), dbeta.ptr(), bwd_ws.ptr(), bwd_ws_bytes)?;
    }
    stream.synchronize()?;

    let (mut ry, mut rdx) = (vec![0.0; ROWS * COLS], vec![0.0; ROWS * COLS]);
    let (mut rmean, mut rrstd) = (vec![0.0; ROWS], vec![0.0; ROWS]);
    let (mut rdg, mut rdb) = (vec![0.0; COLS], vec![0.0; COLS]);
    for r in 0..ROWS {
        let row = &hx[r * COLS..(r + 1) * COLS];
        let m = row.iter().sum::<f64>() / COLS as f64;
        let v = row.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / COLS as f64;
        let rs = 1.0 / (v + eps).sqrt();
        rmean[r] = m;
        rrstd[r] = rs;
        let xhat: Vec<f64> = row.iter().map(|x| (x - m) * rs).collect();
        let g: Vec<f64> = (0..COLS).map(|i| hdy[r * COLS + i] * hg[i]).collect();
        let mg = g.iter().sum::<f64>() / COLS as f64;
        let mgx = (0..COLS).map(|i| g[i] * xhat[i]).sum::<f64>() / COLS as f64;
        for i in 0..COLS {
            ry[r * COLS + i] = xhat[i] * hg[i] + hb[i];
            rdx[r * COLS + i] = rs * (g[i] - mg - xhat[i] * mgx);
            rdg[i] += hdy[r * COLS + i] * xhat[i];
            rdb[i] += hdy[r * COLS + i];
        }
    }
    let tol = |v: &[f64], abs: f64| -> Vec<f64> { v.iter().map(|x| abs + 1e-5 * x.abs()).collect() };
    let mut ok = true;
    for (what, got, want, t) in [
        ("y", to_f64(y.download_f32()?), &ry, tol(&ry, 1e-4)),
        ("mean", to_f64(mean.download_f32()?), &rmean, tol(&rmean, 1e-5)),
        ("rstd", to_f64(rstd.download_f32()?), &rrstd, tol(&rrstd, 1e-5)),
        ("dx", to_f64(dx.download_f32()?), &rdx, tol(&rdx, 1e-4)),
        ("dgamma", to_f64(dgamma.download_f32()?), &rdg, tol(&rdg, 1e-3)),
        ("dbeta", to_f64(dbeta.download_f32()?), &rdb, tol(&rdb, 1e-3)),
    ] {
        let maxerr = got.iter().zip(want.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, |m: f64, e| if e.is_nan() { f64::NAN } else { m.max(e) });
        match compare(what, &got, want, &t) {
            Ok(_) => println!("LayerNorm [{ROWS}, {COLS}] fp32 {what}: max |gpu - reference| = {maxerr:.3e}"),
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
    }
    Ok(ok)
}
