// SPDX-License-Identifier: Apache-2.0
//! BatchNorm + Add + ReLU training step from Rust (mirrors
//! examples/batchnorm_demo.c with the ADD_RELU epilogue): ask each size,
//! allocate, run the training forward (which writes the 1-bit ReLU mask into
//! the reserve space), keep the reserve space and the saved statistics, run
//! the backward. Checks y, the saved statistics, dx, dz, dgamma and dbeta
//! against a plain f64 computation.
//! Exit status: 0 on success, 1 on a wrong result or an error, 77 without a
//! usable GPU (with a message saying so).
use core::ptr::{null, null_mut};
use std::process::ExitCode;

use fusednorm::{BatchNormDesc, BnAverage, BnEpilogue, Dtype, Handle, Stream, TensorDesc};
use fusednorm_testkit::check::compare;
use fusednorm_testkit::cuda::{self, DeviceBuffer};

const N: usize = 8;
const C: usize = 16;
const H: usize = 13;
const W: usize = 11;
const ELEMS: usize = N * C * H * W;

fn main() -> ExitCode {
    if cuda::device_count() == 0 {
        println!("SKIP: no CUDA device; the demo needs one");
        return ExitCode::from(77);
    }
    match run() {
        Ok(true) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAILED");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| (*x as f32).to_ne_bytes()).collect()
}
fn read(b: &DeviceBuffer) -> Result<Vec<f64>, String> {
    Ok(b.download_f32()?.into_iter().map(f64::from).collect())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let hw = H * W;
    let mut hx = vec![0.0; ELEMS];
    let mut hz = vec![0.0; ELEMS];
    let mut hdy = vec![0.0; ELEMS];
    for i in 0..ELEMS {
        let c = (i / hw) % C;
        hx[i] = ((c as f32 - 8.0) + ((i * 7919) % 1000) as f32 / 250.0 - 2.0) as f64;
        hz[i] = (((i * 31) % 200) as f32 / 100.0 - 1.0) as f64;
        hdy[i] = (((i * 104729) % 2001) as f32 / 1000.0 - 1.0) as f64;
    }
    let hg: Vec<f64> = (0..C).map(|c| (1.0 + 0.05 * c as f32) as f64).collect();
    let hb: Vec<f64> = (0..C).map(|c| (0.1 * (c % 3) as f32) as f64).collect();
    let eps = 1e-5;

    let handle = Handle::new()?;
    let x_desc = TensorDesc::with(Dtype::F32, &[N as i64, C as i64, H as i64, W as i64], None)?; // NCHW, packed
    let bn = BatchNormDesc::with(BnEpilogue::AddRelu, eps, BnAverage::Exponential, 0.1)?;

    // 1. Ask the sizes (no GPU work), 2. allocate them once.
    let fwd_ws_bytes = handle.batchnorm_fwd_train_workspace_size(&bn, &x_desc)?;
    let bwd_ws_bytes = handle.batchnorm_bwd_workspace_size(&bn, &x_desc)?;
    let reserve_bytes = handle.batchnorm_reserve_space_size(&bn, &x_desc)?;
    println!(
        "workspace: forward {fwd_ws_bytes} bytes, backward {bwd_ws_bytes} bytes; reserve space (ReLU mask) {reserve_bytes} bytes for {ELEMS} elements"
    );
    let stream = cuda::Stream::new()?;
    let x = DeviceBuffer::from_bytes(&bytes(&hx), 0)?;
    let z = DeviceBuffer::from_bytes(&bytes(&hz), 0)?;
    let dy = DeviceBuffer::from_bytes(&bytes(&hdy), 0)?;
    let gamma = DeviceBuffer::from_bytes(&bytes(&hg), 0)?;
    let beta = DeviceBuffer::from_bytes(&bytes(&hb), 0)?;
    let running_mean = DeviceBuffer::from_bytes(&bytes(&vec![0.0; C]), 0)?;
    let running_var = DeviceBuffer::from_bytes(&bytes(&vec![1.0; C]), 0)?;
    let (y, dx, dz) = (DeviceBuffer::new(ELEMS * 4)?, DeviceBuffer::new(ELEMS * 4)?, DeviceBuffer::new(ELEMS * 4)?);
    let (smean, sinv, dgamma, dbeta) =
        (DeviceBuffer::new(C * 4)?, DeviceBuffer::new(C * 4)?, DeviceBuffer::new(C * 4)?, DeviceBuffer::new(C * 4)?);
    for b in [&y, &dx, &dz, &smean, &sinv, &dgamma, &dbeta] {
        b.poison()?;
    }
    let fwd_ws = DeviceBuffer::new(fwd_ws_bytes)?;
    let bwd_ws = DeviceBuffer::new(bwd_ws_bytes)?;
    let reserve = DeviceBuffer::new(reserve_bytes)?;
    let s = stream.raw() as Stream;
    // SAFETY: live allocations of the described sizes on the handle's device,
    // kept until the synchronization below.
    unsafe {
        // 3. Training forward: y = relu(bn(x) + z); saves mean / invstd and the mask.
        handle.batchnorm_fwd_train(s, &bn, &x_desc, x.ptr(), z.ptr(), gamma.f32_ptr(), beta.f32_ptr(),
                                   running_mean.f32_ptr(), running_var.f32_ptr(), null_mut(), &x_desc, y.ptr(),
                                   smean.f32_ptr(), sinv.f32_ptr(), fwd_ws.ptr(), fwd_ws_bytes, reserve.ptr(),
                                   reserve_bytes)?;
        // 4. Backward from the saved statistics and the mask (y is not read).
        handle.batchnorm_bwd(s, &bn, &x_desc, x.ptr(), &x_desc, dy.ptr(), null(), gamma.f32_ptr(), null(),
                             smean.f32_ptr(), sinv.f32_ptr(), reserve.ptr(), reserve_bytes, &x_desc, dx.ptr(),
                             dz.ptr(), dgamma.f32_ptr(), dbeta.f32_ptr(), bwd_ws.ptr(), bwd_ws_bytes)?;
    }
    stream.synchronize()?;

    let m = (N * hw) as f64;
    let idx = |n: usize, c: usize, s: usize| (n * C + c) * hw + s;
    let (mut mean, mut invstd) = (vec![0.0; C], vec![0.0; C]);
    for c in 0..C {
        let vals: Vec<f64> = (0..N).flat_map(|n| (0..hw).map(move |s| (n, s))).map(|(n, s)| hx[idx(n, c, s)]).collect();
        mean[c] = vals.iter().sum::<f64>() / m;
        let var = vals.iter().map(|v| (v - mean[c]) * (v - mean[c])).sum::<f64>() / m;
        invstd[c] = 1.0 / (var + eps).sqrt();
    }
    let gy = read(&y)?;
    let mut ry = vec![0.0; ELEMS];
    let mut g = vec![0.0; ELEMS];
    let (mut rdb, mut rdg) = (vec![0.0; C], vec![0.0; C]);
    for i in 0..ELEMS {
        let c = (i / hw) % C;
        let xh = (hx[i] - mean[c]) * invstd[c];
        ry[i] = (xh * hg[c] + hb[c] + hz[i]).max(0.0);
        g[i] = if gy[i] > 0.0 { hdy[i] } else { 0.0 }; // the mask the forward kept
        rdb[c] += g[i];
        rdg[c] += g[i] * xh;
    }
    let rdx: Vec<f64> = (0..ELEMS)
        .map(|i| {
            let c = (i / hw) % C;
            let xh = (hx[i] - mean[c]) * invstd[c];
            (g[i] - rdb[c] / m - xh * rdg[c] / m) * hg[c] * invstd[c]
        })
        .collect();
    let tol = |v: &[f64], abs: f64| -> Vec<f64> { v.iter().map(|x| abs + 1e-5 * x.abs()).collect() };
    let mut ok = true;
    for (what, got, want, t) in [
        ("y", gy.clone(), &ry, tol(&ry, 1e-4)),
        ("saved_mean", read(&smean)?, &mean, tol(&mean, 1e-5)),
        ("saved_invstd", read(&sinv)?, &invstd, tol(&invstd, 1e-5)),
        ("dx", read(&dx)?, &rdx, tol(&rdx, 1e-4)),
        ("dz", read(&dz)?, &g, tol(&g, 0.0)),
        ("dgamma", read(&dgamma)?, &rdg, tol(&rdg, 1e-3)),
        ("dbeta", read(&dbeta)?, &rdb, tol(&rdb, 1e-3)),
    ] {
        match compare(what, &got, want, &t) {
            Ok(w) => println!("BatchNorm+Add+ReLU [{N}, {C}, {H}, {W}] fp32 {what}: within {:.2} of the tolerance", w),
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
    }
    if !gy.iter().all(|v| *v >= 0.0) {
        eprintln!("y has values < 0 (or NaN) after ReLU");
        ok = false;
    }
    Ok(ok)
}
