// SPDX-License-Identifier: Apache-2.0
//! The few CUDA runtime functions the tests and examples need, declared
//! here (libcudart is linked by build.rs), and an owning device buffer.
use core::ffi::{c_char, c_int, c_void, CStr};

#[allow(non_camel_case_types)]
pub type cudaStream_t = *mut c_void;

extern "C" {
    fn cudaGetDeviceCount(count: *mut c_int) -> c_int;
    fn cudaMalloc(ptr: *mut *mut c_void, bytes: usize) -> c_int;
    fn cudaFree(ptr: *mut c_void) -> c_int;
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int) -> c_int;
    fn cudaMemset(ptr: *mut c_void, value: c_int, bytes: usize) -> c_int;
    fn cudaDeviceSynchronize() -> c_int;
    fn cudaStreamCreate(stream: *mut cudaStream_t) -> c_int;
    fn cudaStreamDestroy(stream: cudaStream_t) -> c_int;
    fn cudaStreamSynchronize(stream: cudaStream_t) -> c_int;
    fn cudaGetErrorString(err: c_int) -> *const c_char;
}

const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;

fn err(call: &str, e: c_int) -> String {
    let p = unsafe { cudaGetErrorString(e) };
    let s = if p.is_null() { "?".into() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
    format!("{call} failed: CUDA error {e} ({s})")
}

fn ok(call: &str, e: c_int) -> Result<(), String> {
    if e == 0 { Ok(()) } else { Err(err(call, e)) }
}

/// Number of CUDA devices; 0 when there is no driver or device.
pub fn device_count() -> i32 {
    let mut n: c_int = 0;
    if unsafe { cudaGetDeviceCount(&mut n) } != 0 {
        return 0;
    }
    n
}

/// cudaDeviceSynchronize.
pub fn synchronize() -> Result<(), String> {
    ok("cudaDeviceSynchronize", unsafe { cudaDeviceSynchronize() })
}

/// A stream of its own (destroyed on drop).
pub struct Stream(cudaStream_t);
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}
impl Stream {
    pub fn new() -> Result<Stream, String> {
        let mut s: cudaStream_t = core::ptr::null_mut();
        ok("cudaStreamCreate", unsafe { cudaStreamCreate(&mut s) })?;
        Ok(Stream(s))
    }
    /// As the library takes it.
    pub fn raw(&self) -> fusednorm_stream {
        self.0 as fusednorm_stream
    }
    pub fn synchronize(&self) -> Result<(), String> {
        ok("cudaStreamSynchronize", unsafe { cudaStreamSynchronize(self.0) })
    }
}
impl Drop for Stream {
    fn drop(&mut self) {
        unsafe { cudaStreamDestroy(self.0) };
    }
}

/// The opaque stream type as fusednorm-sys names it (`*mut CUstream_st`):
/// a cast of the pointer, so the testkit need not depend on the binding.
#[allow(non_camel_case_types)]
pub type fusednorm_stream = *mut CUstreamOpaque;
#[repr(C)]
pub struct CUstreamOpaque {
    _p: [u8; 0],
}

/// Device memory (cudaMalloc), freed on drop. `offset` bytes are skipped
/// at the start, to hand the library pointers that are not 16-byte aligned.
pub struct DeviceBuffer {
    base: *mut c_void,
    bytes: usize,
    offset: usize,
}
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    pub fn new(bytes: usize) -> Result<DeviceBuffer, String> {
        DeviceBuffer::with_offset(bytes, 0)
    }

    pub fn with_offset(bytes: usize, offset: usize) -> Result<DeviceBuffer, String> {
        let mut p: *mut c_void = core::ptr::null_mut();
        ok("cudaMalloc", unsafe { cudaMalloc(&mut p, (bytes + offset).max(1)) })?;
        Ok(DeviceBuffer { base: p, bytes, offset })
    }

    /// A buffer holding `data`.
    pub fn from_bytes(data: &[u8], offset: usize) -> Result<DeviceBuffer, String> {
        let b = DeviceBuffer::with_offset(data.len(), offset)?;
        b.upload(data)?;
        Ok(b)
    }

    pub fn from_f32(data: &[f32]) -> Result<DeviceBuffer, String> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_ne_bytes()).collect();
        DeviceBuffer::from_bytes(&bytes, 0)
    }

    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    pub fn ptr(&self) -> *mut c_void {
        unsafe { (self.base as *mut u8).add(self.offset) as *mut c_void }
    }
    pub fn f32_ptr(&self) -> *mut f32 {
        self.ptr() as *mut f32
    }

    pub fn upload(&self, data: &[u8]) -> Result<(), String> {
        assert!(data.len() <= self.bytes, "upload of {} bytes into {}", data.len(), self.bytes);
        ok("cudaMemcpy(H2D)", unsafe { cudaMemcpy(self.ptr(), data.as_ptr() as *const c_void, data.len(), HOST_TO_DEVICE) })
    }

    pub fn download(&self) -> Result<Vec<u8>, String> {
        let mut v = vec![0u8; self.bytes];
        ok("cudaMemcpy(D2H)", unsafe { cudaMemcpy(v.as_mut_ptr() as *mut c_void, self.ptr(), self.bytes, DEVICE_TO_HOST) })?;
        Ok(v)
    }

    pub fn download_f32(&self) -> Result<Vec<f32>, String> {
        Ok(self.download()?.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Fill with 0xFF bytes: NaN in fp32, fp16 and bf16 alike.
    pub fn poison(&self) -> Result<(), String> {
        ok("cudaMemset", unsafe { cudaMemset(self.ptr(), 0xFF, self.bytes) })
    }

    pub fn zero(&self) -> Result<(), String> {
        ok("cudaMemset", unsafe { cudaMemset(self.ptr(), 0, self.bytes) })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        unsafe { cudaFree(self.base) };
    }
}
