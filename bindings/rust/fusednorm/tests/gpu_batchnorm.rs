// SPDX-License-Identifier: Apache-2.0
//! GPU tests of BatchNorm through the safe crate: training, inference and
//! backward against a double-precision host reference, every dtype, layout
//! and epilogue; SyncBatchNorm over the devices NCCL sees. Without a device
//! each test prints `SKIP: <reason>` and passes.
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
