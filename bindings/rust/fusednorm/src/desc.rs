// SPDX-License-Identifier: Apache-2.0
//! The handle and the descriptors: owning types destroyed in `Drop`.
//!
//! Thread-safety, from the header: a handle may be used by several threads
//! at once (immutable device properties and an internally locked cache), so
//! `Handle` is `Send + Sync`; destroying it needs exclusive ownership, which
//! `Drop` has. Descriptors are plain host data that launches and size
//! queries only read; setting one takes `&mut self`, so no call can read it
//! meanwhile: `Send + Sync` too.
use core::ptr::{self, NonNull};

use fusednorm_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::types::*;

/// Runs a `*_create(&mut raw)` function and checks that it gave a pointer.
fn create<T>(f: unsafe extern "C" fn(*mut *mut T) -> sys::fnorm_status_t, what: &str) -> Result<NonNull<T>> {
    let mut raw: *mut T = ptr::null_mut();
    // SAFETY: f writes one pointer through a valid out-pointer.
    check(unsafe { f(&mut raw) })?;
    NonNull::new(raw)
        .ok_or_else(|| Error::binding(Status::INTERNAL_ERROR, format!("{what} returned SUCCESS and a NULL pointer")))
}

/// A library handle bound to the CUDA device that was current on the calling
/// thread when it was created.
pub struct Handle {
    raw: NonNull<sys::fnorm_handle>,
}

// SAFETY: the header allows use of one handle by several threads at once.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Handle {
    /// `fnorm_create`. Without a device or driver: `Err` with status
    /// NO_DEVICE (category `NoDevice`) and the library's reason.
    pub fn new() -> Result<Handle> {
        Ok(Handle { raw: create(sys::fnorm_create, "fnorm_create")? })
    }

    /// The CUDA device ordinal the handle is bound to (`fnorm_get_device`).
    pub fn device(&self) -> Result<i32> {
        let mut d = 0;
        check(unsafe { sys::fnorm_get_device(self.as_raw(), &mut d) })?;
        Ok(d)
    }

    /// The C handle, for calling `fusednorm_sys` directly. Owned by `self`.
    pub fn as_raw(&self) -> sys::fnorm_handle_t {
        self.raw.as_ptr()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // A destroy's status has nowhere to go; the header's only failure
        // would be a NULL handle, which this type never holds.
        let _ = unsafe { sys::fnorm_destroy(self.raw.as_ptr()) };
    }
}

impl core::fmt::Debug for Handle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Handle({:p}, device {:?})", self.raw, self.device().ok())
    }
}

macro_rules! descriptor {
    ($(#[$m:meta])* $name:ident, $raw:ident, $create:ident, $destroy:ident) => {
        $(#[$m])*
        pub struct $name {
            raw: NonNull<sys::$raw>,
        }
        // SAFETY: see the module comment (host data, mutated only through &mut).
        unsafe impl Send for $name {}
        unsafe impl Sync for $name {}

        impl $name {
            /// The C descriptor, for calling `fusednorm_sys` directly. Owned by `self`.
            pub fn as_raw(&self) -> *mut sys::$raw {
                self.raw.as_ptr()
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                let _ = unsafe { sys::$destroy(self.raw.as_ptr()) };
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.raw)
            }
        }
    };
}

descriptor!(
    /// A tensor descriptor: dtype, sizes and strides (in elements).
    TensorDesc, fnorm_tensor_desc, fnorm_tensor_desc_create, fnorm_tensor_desc_destroy
);
descriptor!(
    /// LayerNorm / RMSNorm settings.
    NormDesc, fnorm_norm_desc, fnorm_norm_desc_create, fnorm_norm_desc_destroy
);
descriptor!(
    /// BatchNorm settings (and SyncBatchNorm's communicator).
    BatchNormDesc, fnorm_batchnorm_desc, fnorm_batchnorm_desc_create, fnorm_batchnorm_desc_destroy
);
descriptor!(
    /// Fully-connected layer settings.
    LinearDesc, fnorm_linear_desc, fnorm_linear_desc_create, fnorm_linear_desc_destroy
);

descriptor!(
    /// GroupNorm settings: groups, epsilon, activation.
    GroupNormDesc, fnorm_groupnorm_desc, fnorm_groupnorm_desc_create, fnorm_groupnorm_desc_destroy
);

/// What a tensor descriptor holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub dtype: Dtype,
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
}

/// The largest rank a tensor descriptor holds.
pub const MAX_RANK: usize = sys::FNORM_MAX_RANK as usize;

impl TensorDesc {
    /// An empty descriptor (never set: launches refuse it).
    pub fn new() -> Result<TensorDesc> {
        Ok(TensorDesc { raw: create(sys::fnorm_tensor_desc_create, "fnorm_tensor_desc_create")? })
    }

    /// A descriptor set to `dtype`, `dims`, `strides` (None: packed row-major).
    pub fn with(dtype: Dtype, dims: &[i64], strides: Option<&[i64]>) -> Result<TensorDesc> {
        let mut d = TensorDesc::new()?;
        d.set(dtype, dims, strides)?;
        Ok(d)
    }

    /// `fnorm_tensor_desc_set`. The rank is `dims.len()`; `strides`, when
    /// given, must have as many entries (checked here: the library would read
    /// `rank` of them). On failure the descriptor keeps its previous contents.
    pub fn set(&mut self, dtype: Dtype, dims: &[i64], strides: Option<&[i64]>) -> Result<()> {
        let rank = i32::try_from(dims.len())
            .map_err(|_| Error::binding(Status::BAD_PARAM, format!("rank {} does not fit in int32_t", dims.len())))?;
        let strides_ptr = match strides {
            Some(s) if s.len() != dims.len() => {
                return Err(Error::binding(
                    Status::BAD_PARAM,
                    format!("strides has {} entries and dims {}: they must have one per dimension", s.len(), dims.len()),
                ))
            }
            Some(s) => s.as_ptr(),
            None => ptr::null(),
        };
        // SAFETY: dims and strides hold `rank` entries each (or strides is NULL).
        check(unsafe { sys::fnorm_tensor_desc_set(self.as_raw(), dtype.raw(), rank, dims.as_ptr(), strides_ptr) })
    }

    /// `fnorm_tensor_desc_get`: Err (BAD_PARAM) when never set.
    pub fn get(&self) -> Result<TensorInfo> {
        let mut dtype: sys::fnorm_dtype_t = 0;
        let mut rank = 0i32;
        let mut dims = [0i64; MAX_RANK];
        let mut strides = [0i64; MAX_RANK];
        // SAFETY: dims and strides hold max_rank = MAX_RANK entries.
        check(unsafe {
            sys::fnorm_tensor_desc_get(
                self.as_raw(),
                &mut dtype,
                &mut rank,
                dims.as_mut_ptr(),
                strides.as_mut_ptr(),
                sys::FNORM_MAX_RANK,
            )
        })?;
        let n = usize::try_from(rank).unwrap_or(0).min(MAX_RANK);
        Ok(TensorInfo {
            dtype: Dtype::from_library(dtype)?,
            dims: dims.get(..n).unwrap_or(&[]).to_vec(),
            strides: strides.get(..n).unwrap_or(&[]).to_vec(),
        })
    }

    /// `fnorm_tensor_desc_get_elements`.
    pub fn elements(&self) -> Result<i64> {
        let mut e = 0i64;
        check(unsafe { sys::fnorm_tensor_desc_get_elements(self.as_raw(), &mut e) })?;
        Ok(e)
    }
}

/// What a normalization descriptor holds.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct NormConfig {
    pub mode: NormMode,
    pub begin_norm_axis: i32,
    pub epsilon: f64,
}

impl NormDesc {
    /// Defaults: LayerNorm over the last dimension, epsilon 1e-5, no flags.
    pub fn new() -> Result<NormDesc> {
        Ok(NormDesc { raw: create(sys::fnorm_norm_desc_create, "fnorm_norm_desc_create")? })
    }

    /// A descriptor with `set(mode, begin_norm_axis, epsilon)` applied.
    pub fn with(mode: NormMode, begin_norm_axis: i32, epsilon: f64) -> Result<NormDesc> {
        let mut d = NormDesc::new()?;
        d.set(mode, begin_norm_axis, epsilon)?;
        Ok(d)
    }

    /// `fnorm_norm_desc_set` (flags are kept).
    pub fn set(&mut self, mode: NormMode, begin_norm_axis: i32, epsilon: f64) -> Result<()> {
        check(unsafe { sys::fnorm_norm_desc_set(self.as_raw(), mode.raw(), begin_norm_axis, epsilon) })
    }

    /// `fnorm_norm_desc_get`.
    pub fn get(&self) -> Result<NormConfig> {
        let (mut mode, mut axis, mut eps) = (0, 0i32, 0f64);
        check(unsafe { sys::fnorm_norm_desc_get(self.as_raw(), &mut mode, &mut axis, &mut eps) })?;
        Ok(NormConfig { mode: NormMode::from_library(mode)?, begin_norm_axis: axis, epsilon: eps })
    }

    /// `fnorm_norm_desc_set_flags`.
    pub fn set_flags(&mut self, flags: NormFlags) -> Result<()> {
        check(unsafe { sys::fnorm_norm_desc_set_flags(self.as_raw(), flags.bits()) })
    }

    /// `fnorm_norm_desc_get_flags`.
    pub fn flags(&self) -> Result<NormFlags> {
        let mut f = 0u32;
        check(unsafe { sys::fnorm_norm_desc_get_flags(self.as_raw(), &mut f) })?;
        Ok(NormFlags::from_library(f))
    }
}

/// What a BatchNorm descriptor holds (besides engine and communicator).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BatchNormConfig {
    pub epilogue: BnEpilogue,
    pub epsilon: f64,
    pub average: BnAverage,
    pub momentum: f64,
}

/// NCCL's communicator, as the header names it (`struct ncclComm`): an
/// `ncclComm_t` from any NCCL binding casts to `*mut NcclComm`.
pub type NcclComm = sys::ncclComm;

impl BatchNormDesc {
    /// Defaults: epilogue None, epsilon 1e-5, exponential averaging with
    /// momentum 0.1, engine Auto, no communicator.
    pub fn new() -> Result<BatchNormDesc> {
        Ok(BatchNormDesc { raw: create(sys::fnorm_batchnorm_desc_create, "fnorm_batchnorm_desc_create")? })
    }

    /// A descriptor with `set(...)` applied.
    pub fn with(epilogue: BnEpilogue, epsilon: f64, average: BnAverage, momentum: f64) -> Result<BatchNormDesc> {
        let mut d = BatchNormDesc::new()?;
        d.set(epilogue, epsilon, average, momentum)?;
        Ok(d)
    }

    /// `fnorm_batchnorm_desc_set` (the engine is kept).
    pub fn set(&mut self, epilogue: BnEpilogue, epsilon: f64, average: BnAverage, momentum: f64) -> Result<()> {
        check(unsafe { sys::fnorm_batchnorm_desc_set(self.as_raw(), epilogue.raw(), epsilon, average.raw(), momentum) })
    }

    /// `fnorm_batchnorm_desc_get`.
    pub fn get(&self) -> Result<BatchNormConfig> {
        let (mut e, mut eps, mut a, mut m) = (0, 0f64, 0, 0f64);
        check(unsafe { sys::fnorm_batchnorm_desc_get(self.as_raw(), &mut e, &mut eps, &mut a, &mut m) })?;
        Ok(BatchNormConfig {
            epilogue: BnEpilogue::from_library(e)?,
            epsilon: eps,
            average: BnAverage::from_library(a)?,
            momentum: m,
        })
    }

    /// `fnorm_batchnorm_desc_set_engine`.
    pub fn set_engine(&mut self, engine: BnEngine) -> Result<()> {
        check(unsafe { sys::fnorm_batchnorm_desc_set_engine(self.as_raw(), engine.raw()) })
    }

    /// `fnorm_batchnorm_desc_get_engine`.
    pub fn engine(&self) -> Result<BnEngine> {
        let mut e = 0;
        check(unsafe { sys::fnorm_batchnorm_desc_get_engine(self.as_raw(), &mut e) })?;
        BnEngine::from_library(e)
    }

    /// Attach an NCCL communicator (`fnorm_batchnorm_desc_set_comm`): training
    /// forward and backward with this descriptor then compute SyncBatchNorm
    /// over its ranks. A NULL `comm` is refused here (BAD_PARAM_NULL_POINTER):
    /// use [`detach_comm`](Self::detach_comm), which says what it does.
    /// NOT_SUPPORTED_BUILD when the library was built without NCCL.
    ///
    /// # Safety
    /// `comm` must be an NCCL communicator (`ncclComm_t`) from the same
    /// libnccl the library loaded, on the device of the handles it will be
    /// used with, and must stay valid until it is detached or this
    /// descriptor is dropped. The library neither creates nor destroys it.
    pub unsafe fn set_comm(&mut self, comm: *mut NcclComm, flags: BnSyncFlags) -> Result<()> {
        if comm.is_null() {
            return Err(Error::binding(
                Status::BAD_PARAM_NULL_POINTER,
                "BatchNormDesc::set_comm: comm is NULL (to detach a communicator, call detach_comm)".into(),
            ));
        }
        check(sys::fnorm_batchnorm_desc_set_comm(self.as_raw(), comm, flags.bits()))
    }

    /// Detach the communicator: plain BatchNorm again.
    pub fn detach_comm(&mut self) -> Result<()> {
        check(unsafe { sys::fnorm_batchnorm_desc_set_comm(self.as_raw(), ptr::null_mut(), 0) })
    }

    /// `fnorm_batchnorm_desc_get_comm`: the attached communicator (NULL when
    /// none) and the flags.
    pub fn comm(&self) -> Result<(*mut NcclComm, BnSyncFlags)> {
        let mut c: *mut NcclComm = ptr::null_mut();
        let mut f = 0u32;
        check(unsafe { sys::fnorm_batchnorm_desc_get_comm(self.as_raw(), &mut c, &mut f) })?;
        Ok((c, BnSyncFlags::from_library(f)))
    }
}

/// What a GroupNorm descriptor holds.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct GroupNormConfig {
    pub groups: i64,
    pub epsilon: f64,
    pub activation: GnActivation,
}

impl GroupNormDesc {
    /// Defaults: 32 groups, epsilon 1e-5, activation None
    /// (torch.nn.GroupNorm(32, C)).
    pub fn new() -> Result<GroupNormDesc> {
        Ok(GroupNormDesc { raw: create(sys::fnorm_groupnorm_desc_create, "fnorm_groupnorm_desc_create")? })
    }

    /// A descriptor with `set(groups, epsilon, activation)` applied.
    pub fn with(groups: i64, epsilon: f64, activation: GnActivation) -> Result<GroupNormDesc> {
        let mut d = GroupNormDesc::new()?;
        d.set(groups, epsilon, activation)?;
        Ok(d)
    }

    /// `fnorm_groupnorm_desc_set`: groups >= 1 (the launch checks that it
    /// divides C), epsilon finite, >= 0 and representable in fp32. On
    /// failure (BAD_PARAM naming the value) the descriptor is unchanged.
    pub fn set(&mut self, groups: i64, epsilon: f64, activation: GnActivation) -> Result<()> {
        check(unsafe { sys::fnorm_groupnorm_desc_set(self.as_raw(), groups, epsilon, activation.raw()) })
    }

    /// `fnorm_groupnorm_desc_get`.
    pub fn get(&self) -> Result<GroupNormConfig> {
        let (mut g, mut eps, mut act) = (0i64, 0f64, 0);
        check(unsafe { sys::fnorm_groupnorm_desc_get(self.as_raw(), &mut g, &mut eps, &mut act) })?;
        Ok(GroupNormConfig { groups: g, epsilon: eps, activation: GnActivation::from_library(act)? })
    }
}

/// What a linear descriptor holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LinearConfig {
    pub epilogue: LinearEpilogue,
    pub weight_layout: WeightLayout,
    pub flags: LinearFlags,
}

impl LinearDesc {
    /// Defaults: epilogue None, weight [k, n], no flags. NOT_SUPPORTED_BUILD
    /// when the library was built without cuBLASLt.
    pub fn new() -> Result<LinearDesc> {
        Ok(LinearDesc { raw: create(sys::fnorm_linear_desc_create, "fnorm_linear_desc_create")? })
    }

    /// A descriptor with `set(...)` applied.
    pub fn with(epilogue: LinearEpilogue, weight_layout: WeightLayout, flags: LinearFlags) -> Result<LinearDesc> {
        let mut d = LinearDesc::new()?;
        d.set(epilogue, weight_layout, flags)?;
        Ok(d)
    }

    /// `fnorm_linear_desc_set`.
    pub fn set(&mut self, epilogue: LinearEpilogue, weight_layout: WeightLayout, flags: LinearFlags) -> Result<()> {
        check(unsafe { sys::fnorm_linear_desc_set(self.as_raw(), epilogue.raw(), weight_layout.raw(), flags.bits()) })
    }

    /// `fnorm_linear_desc_get`.
    pub fn get(&self) -> Result<LinearConfig> {
        let (mut e, mut l, mut f) = (0, 0, 0u32);
        check(unsafe { sys::fnorm_linear_desc_get(self.as_raw(), &mut e, &mut l, &mut f) })?;
        Ok(LinearConfig {
            epilogue: LinearEpilogue::from_library(e)?,
            weight_layout: WeightLayout::from_library(l)?,
            flags: LinearFlags::from_library(f),
        })
    }
}
