// SPDX-License-Identifier: Apache-2.0
//! Tensors with no elements through the safe crate (api/fusednorm.h, "Empty
//! tensors"): a descriptor with a zero dimension is valid; the size queries
//! answer 0; launches over empty tensors succeed with null data pointers and
//! write nothing but the zeros of sums over no values (LayerNorm dgamma /
//! dbeta over zero rows, BatchNorm dgamma / dbeta over an empty batch),
//! leave BatchNorm's running statistics as they were and count the batch.
//! The descriptor part runs anywhere; the rest prints `SKIP: <reason>` and
//! passes without a device.
use core::ptr::{null, null_mut};

use fusednorm::*;
use fusednorm_testkit::cuda::{self, DeviceBuffer};

mod common;
use common::gpu;

#[test]
fn empty_descriptors_are_valid() {
    for dims in [vec![0i64, 768], vec![4, 0], vec![2, 0, 3]] {
        let d = TensorDesc::with(Dtype::BF16, &dims, None).unwrap();
        let info = d.get().unwrap();
        assert_eq!(info.dims, dims);
        assert_eq!(d.elements().unwrap(), 0);
    }
    let e = TensorDesc::with(Dtype::F32, &[0, -1], None).unwrap_err();
    assert_eq!(e.category(), Category::BadParam);
    assert!(e.message().contains("dims[1]"), "{e}");
}

#[test]
fn empty_norm() {
    let Some(h) = gpu("empty_norm") else { return };
    let x = TensorDesc::with(Dtype::F16, &[0, 768], None).unwrap();
    let w = TensorDesc::with(Dtype::F32, &[768], None).unwrap();
    let norm = NormDesc::new().unwrap();
    assert_eq!(h.norm_fwd_workspace_size(&norm, &x, &x).unwrap(), 0);
    assert_eq!(h.norm_bwd_workspace_size(&norm, &x, Some(&w)).unwrap(), 0);
    let stats = DeviceBuffer::new(64).unwrap();
    stats.poison().unwrap();
    // SAFETY: every data pointer is null (the tensors have no elements);
    // stats is a live device buffer the call must not write.
    unsafe {
        h.norm_fwd(null_mut(), &norm, &x, null(), null(), null_mut(), None, null(), null(), &x, null_mut(),
                   stats.f32_ptr(), stats.f32_ptr().add(8), null_mut(), 0)
            .unwrap();
    }
    let dg = DeviceBuffer::new(768 * 4).unwrap();
    let db = DeviceBuffer::new(768 * 4).unwrap();
    dg.poison().unwrap();
    db.poison().unwrap();
    // SAFETY: dgamma / dbeta are live device buffers of 768 fp32 values.
    unsafe {
        h.norm_bwd(null_mut(), &norm, &x, null(), &x, null(), null(), null(), Some(&w), null(), null(), &x,
                   null_mut(), dg.ptr(), db.ptr(), null_mut(), 0)
            .unwrap();
    }
    cuda::synchronize().unwrap();
    assert!(stats.download().unwrap().iter().all(|&b| b == 0xff), "mean / rstd written over no rows");
    assert!(dg.download_f32().unwrap().iter().all(|&v| v == 0.0), "dgamma over zero rows is 0");
    assert!(db.download_f32().unwrap().iter().all(|&v| v == 0.0), "dbeta over zero rows is 0");
}

#[test]
fn empty_batchnorm() {
    let Some(h) = gpu("empty_batchnorm") else { return };
    let x = TensorDesc::with(Dtype::F16, &[0, 8, 3, 3], None).unwrap();
    let bn = BatchNormDesc::new().unwrap();
    assert_eq!(h.batchnorm_fwd_train_workspace_size(&bn, &x).unwrap(), 0);
    assert_eq!(h.batchnorm_fwd_infer_workspace_size(&bn, &x).unwrap(), 0);
    assert_eq!(h.batchnorm_bwd_workspace_size(&bn, &x).unwrap(), 0);
    assert_eq!(h.batchnorm_reserve_space_size(&bn, &x).unwrap(), 0);
    let mean0: Vec<f32> = (0..8).map(|c| c as f32).collect();
    let var0 = vec![2.0f32; 8];
    let rm = DeviceBuffer::from_f32(&mean0).unwrap();
    let rv = DeviceBuffer::from_f32(&var0).unwrap();
    let count = DeviceBuffer::from_bytes(&5i64.to_ne_bytes(), 0).unwrap();
    let saved = DeviceBuffer::new(64).unwrap();
    saved.poison().unwrap();
    // SAFETY: null data pointers (no elements); the per-channel vectors and
    // the counter are live device buffers.
    unsafe {
        h.batchnorm_fwd_train(null_mut(), &bn, &x, null(), null(), null(), null(), rm.f32_ptr(), rv.f32_ptr(),
                              count.ptr().cast(), &x, null_mut(), saved.f32_ptr(), saved.f32_ptr().add(8),
                              null_mut(), 0, null_mut(), 0)
            .unwrap();
        h.batchnorm_fwd_infer(null_mut(), &bn, &x, null(), null(), null(), null(), rm.f32_ptr(), rv.f32_ptr(), &x,
                              null_mut(), null_mut(), 0)
            .unwrap();
    }
    let dg = DeviceBuffer::new(32).unwrap();
    let db = DeviceBuffer::new(32).unwrap();
    dg.poison().unwrap();
    db.poison().unwrap();
    // SAFETY: as above; dgamma / dbeta hold C = 8 fp32 values.
    unsafe {
        h.batchnorm_bwd(null_mut(), &bn, &x, null(), &x, null(), null(), null(), null(), saved.f32_ptr(),
                        saved.f32_ptr().add(8), null(), 0, &x, null_mut(), null_mut(), dg.f32_ptr(), db.f32_ptr(),
                        null_mut(), 0)
            .unwrap();
    }
    cuda::synchronize().unwrap();
    assert_eq!(rm.download_f32().unwrap(), mean0, "running mean unchanged by an empty batch");
    assert_eq!(rv.download_f32().unwrap(), var0, "running var unchanged by an empty batch");
    let n = i64::from_ne_bytes(count.download().unwrap()[..8].try_into().unwrap());
    assert_eq!(n, 6, "the empty batch is counted, as torch.nn counts it");
    assert!(saved.download().unwrap().iter().all(|&b| b == 0xff), "saved statistics not written");
    assert!(dg.download_f32().unwrap().iter().all(|&v| v == 0.0));
    assert!(db.download_f32().unwrap().iter().all(|&v| v == 0.0));
}

#[test]
fn empty_linear() {
    let Some(h) = gpu("empty_linear") else { return };
    let Ok(mut desc) = LinearDesc::new() else {
        println!("SKIP: empty_linear: built without cuBLASLt");
        return;
    };
    desc.set(LinearEpilogue::Bias, WeightLayout::Nk, LinearFlags::NONE).unwrap();
    let x = TensorDesc::with(Dtype::F32, &[0, 16], None).unwrap();
    let w = TensorDesc::with(Dtype::F32, &[8, 16], None).unwrap();
    let y = TensorDesc::with(Dtype::F32, &[0, 8], None).unwrap();
    assert_eq!(h.linear_fwd_workspace_size(&desc, &x, &w, &y).unwrap(), 0);
    assert_eq!(h.linear_bwd_workspace_size(&desc, &x, &w, &y, None).unwrap(), 0);
    let dw = DeviceBuffer::new(8 * 16 * 4).unwrap();
    let db = DeviceBuffer::new(8 * 4).unwrap();
    dw.poison().unwrap();
    db.poison().unwrap();
    // SAFETY: x, dy, y have no elements (null); dw / db are live buffers of
    // w's and n's sizes.
    unsafe {
        h.linear_fwd(null_mut(), &desc, &x, null(), &w, dw.ptr(), db.ptr(), &y, null_mut(), null_mut(), 0,
                     null_mut(), 0)
            .unwrap();
        h.linear_bwd(null_mut(), &desc, &x, null(), &w, null(), &y, null(), null(), 0, None, null(), 0, Some(&x),
                     null_mut(), dw.ptr(), db.ptr(), null_mut(), null_mut(), 0)
            .unwrap();
    }
    cuda::synchronize().unwrap();
    assert!(dw.download_f32().unwrap().iter().all(|&v| v == 0.0), "dw over no rows is 0");
    assert!(db.download_f32().unwrap().iter().all(|&v| v == 0.0), "db over no rows is 0");
}
