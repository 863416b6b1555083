// SPDX-License-Identifier: Apache-2.0
//! Statuses and the error type.
use core::ffi::{c_char, CStr};
use core::fmt;

use fusednorm_sys as sys;

/// A status code of the C API (`fnorm_status_t`). Any value the library
/// returns can be held, including codes added by a newer library; values are
/// never constructed from arbitrary integers on the Rust side.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Status(sys::fnorm_status_t);

impl Status {
    pub const SUCCESS: Status = Status(sys::FNORM_STATUS_SUCCESS);
    pub const BAD_PARAM: Status = Status(sys::FNORM_STATUS_BAD_PARAM);
    pub const BAD_PARAM_NULL_POINTER: Status = Status(sys::FNORM_STATUS_BAD_PARAM_NULL_POINTER);
    pub const BAD_PARAM_SHAPE: Status = Status(sys::FNORM_STATUS_BAD_PARAM_SHAPE);
    pub const INSUFFICIENT_WORKSPACE: Status = Status(sys::FNORM_STATUS_INSUFFICIENT_WORKSPACE);
    pub const NOT_SUPPORTED: Status = Status(sys::FNORM_STATUS_NOT_SUPPORTED);
    /// Left out of this build, no code for this GPU, or a library the op needs
    /// (cuBLASLt, cuDNN, NCCL) is missing at run time: the message says which.
    pub const NOT_SUPPORTED_BUILD: Status = Status(sys::FNORM_STATUS_NOT_SUPPORTED_BUILD);
    pub const INTERNAL_ERROR: Status = Status(sys::FNORM_STATUS_INTERNAL_ERROR);
    pub const ALLOC_FAILED: Status = Status(sys::FNORM_STATUS_ALLOC_FAILED);
    pub const NO_DEVICE: Status = Status(sys::FNORM_STATUS_NO_DEVICE);
    pub const CUDA_ERROR: Status = Status(sys::FNORM_STATUS_CUDA_ERROR);
    pub const CUBLAS_ERROR: Status = Status(sys::FNORM_STATUS_CUBLAS_ERROR);
    pub const CUDNN_ERROR: Status = Status(sys::FNORM_STATUS_CUDNN_ERROR);
    pub const NCCL_ERROR: Status = Status(sys::FNORM_STATUS_NCCL_ERROR);

    /// The C value.
    pub fn raw(self) -> sys::fnorm_status_t {
        self.0
    }

    /// The library's static name and description of this status
    /// (`fnorm_get_error_string`), e.g. "FNORM_STATUS_BAD_PARAM: an argument is invalid".
    pub fn description(self) -> &'static str {
        // SAFETY: the library returns a static, NUL-terminated string (never
        // NULL per the header; checked anyway).
        let p = unsafe { sys::fnorm_get_error_string(self.0) };
        if p.is_null() {
            return "FNORM_STATUS_UNKNOWN";
        }
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("FNORM_STATUS_UNKNOWN (not UTF-8)")
    }

    /// The category band (`fnorm_status_category`).
    pub fn category(self) -> Category {
        // SAFETY: a pure function of its argument.
        match unsafe { sys::fnorm_status_category(self.0) } {
            sys::FNORM_STATUS_SUCCESS => Category::Success,
            sys::FNORM_STATUS_BAD_PARAM => Category::BadParam,
            sys::FNORM_STATUS_NOT_SUPPORTED => Category::NotSupported,
            sys::FNORM_STATUS_INTERNAL_ERROR => Category::Internal,
            sys::FNORM_STATUS_NO_DEVICE => Category::NoDevice,
            sys::FNORM_STATUS_CUDA_ERROR => Category::Execution,
            _ => Category::Unknown,
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status({} = {})", self.0, self.description().split(':').next().unwrap_or(""))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// What kind of failure a status is: the thousands band of its value.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Category {
    Success,
    /// The call was wrong: fix the arguments.
    BadParam,
    /// A valid case the library (or this build of it) does not do.
    NotSupported,
    /// A bug in the library (or host memory exhausted).
    Internal,
    /// No usable CUDA device or driver.
    NoDevice,
    /// A CUDA, cuBLAS, cuDNN or NCCL call failed while executing.
    Execution,
    /// A band this binding does not know (a newer library).
    Unknown,
}

/// A failed call: the status, its category and the library's thread-local
/// message (naming the function, argument and value), read right after the
/// failing call on the same thread.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn category(&self) -> Category {
        self.status.category()
    }
    /// The library's message ("" if it left none), or the binding's own for
    /// what the Rust layer refuses before calling the library.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn binding(status: Status, message: String) -> Error {
        Error { status, message: format!("fusednorm (Rust): {message}") }
    }

    /// A value the library returned that this binding does not know.
    pub(crate) fn unknown_value(what: &str, value: u32) -> Error {
        Error::binding(
            Status::INTERNAL_ERROR,
            format!(
                "the library returned {what} value {value}, unknown to this binding (built for header version {}); update the fusednorm crate",
                sys::FNORM_VERSION
            ),
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("status", &self.status)
            .field("category", &self.category())
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{} ({})", self.message, self.status)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = core::result::Result<T, E>;

/// The calling thread's last error message (`fnorm_get_last_error_message`).
pub fn last_error_message() -> String {
    let mut buf = vec![0u8; 512];
    // SAFETY: buf holds buf.len() bytes; the library NUL-terminates within them.
    let full = unsafe { sys::fnorm_get_last_error_message(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if full >= buf.len() {
        // Bounded: a message is a line of text; a wild length must not exhaust memory.
        buf = vec![0u8; full.saturating_add(1).min(1 << 16)];
        // SAFETY: as above, with room for the whole message.
        unsafe { sys::fnorm_get_last_error_message(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf.truncate(len);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Turns a status into a Result, reading the message at once.
pub(crate) fn check(status: sys::fnorm_status_t) -> Result<()> {
    if status == sys::FNORM_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error { status: Status(status), message: last_error_message() })
    }
}
