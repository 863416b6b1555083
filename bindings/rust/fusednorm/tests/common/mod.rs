// SPDX-License-Identifier: Apache-2.0
//! What the GPU test files share: the device or a SKIP, device tensors
//! poisoned before each launch, scratch buffers, the per-test report and the
//! tolerance of a dtype.
#![allow(dead_code)] // each test file uses its part

use core::ffi::c_void;
use core::ptr::null_mut;

use fusednorm::*;
use fusednorm_testkit::check::compare;
use fusednorm_testkit::cuda::{self, DeviceBuffer};
use fusednorm_testkit::half::Dt;

pub fn gpu(test: &str) -> Option<Handle> {
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

pub fn dtype(d: Dt) -> Dtype {
    match d {
        Dt::F32 => Dtype::F32,
        Dt::F16 => Dtype::F16,
        Dt::BF16 => Dtype::BF16,
    }
}

pub fn quant(dt: Dt, v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| dt.quantize(x)).collect()
}

/// A device tensor of `n` elements of `dt`, `off` bytes past an allocation.
pub struct T {
    pub buf: DeviceBuffer,
    pub dt: Dt,
}

impl T {
    pub fn input(dt: Dt, vals: &[f64], off: usize) -> T {
        T { buf: DeviceBuffer::from_bytes(&dt.encode(vals), off).unwrap(), dt }
    }
    pub fn output(dt: Dt, n: usize, off: usize) -> T {
        let buf = DeviceBuffer::with_offset(n * dt.size(), off).unwrap();
        buf.poison().unwrap();
        T { buf, dt }
    }
    pub fn p(&self) -> *mut c_void {
        self.buf.ptr()
    }
    pub fn f(&self) -> *mut f32 {
        assert_eq!(self.dt, Dt::F32);
        self.buf.f32_ptr()
    }
    pub fn read(&self) -> Vec<f64> {
        self.dt.decode(&self.buf.download().unwrap())
    }
}

/// Scratch of `bytes` (null when 0), cudaMalloc-aligned.
pub fn scratch(bytes: usize) -> Option<DeviceBuffer> {
    (bytes > 0).then(|| DeviceBuffer::new(bytes).unwrap())
}
pub fn sp(b: &Option<DeviceBuffer>) -> *mut c_void {
    b.as_ref().map_or(null_mut(), |b| b.ptr())
}

/// Collects per-case results; fails the test with all mismatches at the end.
#[derive(Default)]
pub struct Report {
    pub cases: usize,
    pub failures: Vec<String>,
    pub worst: f64,
}
impl Report {
    pub fn check(&mut self, case: &str, what: &str, got: &[f64], want: &[f64], tol: &[f64]) {
        match compare(what, got, want, tol) {
            Ok(w) => self.worst = self.worst.max(w),
            Err(e) => self.failures.push(format!("{case}: {e}")),
        }
    }
    pub fn finish(self, test: &str) {
        println!("{test}: {} cases, {} failed, worst err/tol {:.3}", self.cases, self.failures.len(), self.worst);
        assert!(self.failures.is_empty(), "{test}:\n{}", self.failures.join("\n"));
    }
}

/// Rounding of the stored result plus fp32 arithmetic inside the kernels.
pub fn rel(dt: Dt) -> f64 {
    2.0 * dt.eps() + 1e-5
}

