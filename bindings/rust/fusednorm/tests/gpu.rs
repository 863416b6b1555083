// SPDX-License-Identifier: Apache-2.0
//! GPU tests through the safe crate of what no single op owns: the error
//! path of bad launches (nothing written), two threads sharing one handle.
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
