// SPDX-License-Identifier: Apache-2.0
//! The C enums and flag sets as Rust types. Rust code can only name the
//! values below; a value the library returns that this binding does not know
//! becomes an `Err` (enums) or is kept as raw bits (flags), never undefined
//! behaviour: the C value is read as an integer and converted with a check.
use core::ops::{BitOr, BitOrAssign};

use fusednorm_sys as sys;

use crate::error::{Error, Result};

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident: $cty:ident, $what:literal {
        $($(#[$vm:meta])* $var:ident = $c:ident),+ $(,)?
    }) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vm])* $var),+
        }

        impl $name {
            /// Every value this binding knows.
            pub const ALL: &'static [$name] = &[$($name::$var),+];

            /// The C value.
            pub fn raw(self) -> sys::$cty {
                match self {
                    $($name::$var => sys::$c),+
                }
            }

            /// The value for a C integer; None for one this binding does not know.
            pub fn from_raw(raw: sys::$cty) -> Option<$name> {
                match raw {
                    $(sys::$c => Some($name::$var),)+
                    _ => None,
                }
            }

            // Not every enum is read back from the library (a quantization
            // scaling only goes in).
            #[allow(dead_code)]
            pub(crate) fn from_library(raw: sys::$cty) -> Result<$name> {
                $name::from_raw(raw).ok_or_else(|| Error::unknown_value($what, raw))
            }
        }
    };
}

c_enum! {
    /// Element type of a tensor. The one-byte types are quantized outputs:
    /// only [`Handle::norm_fwd_quant`](crate::Handle::norm_fwd_quant)'s y
    /// takes them.
    Dtype: fnorm_dtype_t, "fnorm_dtype_t" {
        F32 = FNORM_DTYPE_FLOAT32,
        F16 = FNORM_DTYPE_FLOAT16,
        BF16 = FNORM_DTYPE_BFLOAT16,
        /// OCP FP8 E4M3 (torch.float8_e4m3fn), largest finite 448.
        F8E4M3 = FNORM_DTYPE_FLOAT8_E4M3,
        /// OCP FP8 E5M2 (torch.float8_e5m2), largest finite 57344.
        F8E5M2 = FNORM_DTYPE_FLOAT8_E5M2,
        /// Signed 8-bit integers (codes -127..=127).
        I8 = FNORM_DTYPE_INT8,
    }
}

impl Dtype {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
            Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::I8 => 1,
        }
    }

    /// Whether this is a one-byte quantized output type.
    pub fn is_quantized(self) -> bool {
        matches!(self, Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::I8)
    }
}

c_enum! {
    /// How a quantized output is scaled (`fnorm_quant_scaling_t`).
    QuantScaling: fnorm_quant_scaling_t, "fnorm_quant_scaling_t" {
        /// Static: one fp32 scale for the tensor, given by the caller.
        PerTensor = FNORM_QUANT_SCALING_PER_TENSOR,
        /// Dynamic: one fp32 scale per row, written by the launch.
        PerToken = FNORM_QUANT_SCALING_PER_TOKEN,
    }
}

c_enum! {
    /// LayerNorm or RMSNorm.
    NormMode: fnorm_norm_mode_t, "fnorm_norm_mode_t" {
        /// y = (x - mean) * rstd * gamma + beta
        LayerNorm = FNORM_NORM_LAYERNORM,
        /// y = x * rrms * gamma
        RmsNorm = FNORM_NORM_RMSNORM,
    }
}

c_enum! {
    /// What follows BatchNorm.
    BnEpilogue: fnorm_bn_epilogue_t, "fnorm_bn_epilogue_t" {
        None = FNORM_BN_EPILOGUE_NONE,
        /// y = max(bn(x), 0)
        Relu = FNORM_BN_EPILOGUE_RELU,
        /// y = max(bn(x) + z, 0)
        AddRelu = FNORM_BN_EPILOGUE_ADD_RELU,
    }
}

c_enum! {
    /// How training updates the running statistics.
    BnAverage: fnorm_bn_average_t, "fnorm_bn_average_t" {
        /// running = (1 - momentum) * running + momentum * batch
        Exponential = FNORM_BN_AVERAGE_EXPONENTIAL,
        /// factor 1 / (num_batches_tracked + 1) (PyTorch's momentum=None)
        Cumulative = FNORM_BN_AVERAGE_CUMULATIVE,
    }
}

c_enum! {
    /// Which implementation runs a BatchNorm call.
    BnEngine: fnorm_bn_engine_t, "fnorm_bn_engine_t" {
        Auto = FNORM_BN_ENGINE_AUTO,
        Native = FNORM_BN_ENGINE_NATIVE,
        Cudnn = FNORM_BN_ENGINE_CUDNN,
    }
}

c_enum! {
    /// What follows the GEMM of the linear layer.
    LinearEpilogue: fnorm_linear_epilogue_t, "fnorm_linear_epilogue_t" {
        /// y = x W
        None = FNORM_LINEAR_EPILOGUE_NONE,
        /// y = x W + b
        Bias = FNORM_LINEAR_EPILOGUE_BIAS,
        /// y = max(x W + b, 0)
        BiasRelu = FNORM_LINEAR_EPILOGUE_BIAS_RELU,
        /// y = gelu_tanh(x W + b)
        BiasGelu = FNORM_LINEAR_EPILOGUE_BIAS_GELU,
    }
}

c_enum! {
    /// How the weight is stored.
    WeightLayout: fnorm_linear_weight_layout_t, "fnorm_linear_weight_layout_t" {
        /// w is [k, n]: y = x w
        Kn = FNORM_LINEAR_WEIGHT_KN,
        /// w is [n, k] (PyTorch's Linear.weight): y = x w^T
        Nk = FNORM_LINEAR_WEIGHT_NK,
    }
}

c_enum! {
    /// The activation after GroupNorm (`fnorm_gn_activation_t`).
    GnActivation: fnorm_gn_activation_t, "fnorm_gn_activation_t" {
        /// y = v
        None = FNORM_GN_ACTIVATION_NONE,
        /// y = v * sigmoid(v) (torch.nn.SiLU)
        Silu = FNORM_GN_ACTIVATION_SILU,
    }
}

macro_rules! c_flags {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $flag:ident = $c:ident),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            pub const NONE: $name = $name(0);
            $($(#[$vm])* pub const $flag: $name = $name(sys::$c);)+
            const KNOWN: u32 = 0 $(| sys::$c)+;

            /// The C bits.
            pub fn bits(self) -> u32 {
                self.0
            }
            /// The set for these bits; None when a bit is unknown to this binding.
            pub fn from_bits(bits: u32) -> Option<$name> {
                if bits & !Self::KNOWN == 0 { Some($name(bits)) } else { None }
            }
            pub fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            /// Bits as the library reported them (a newer library's may be unknown here).
            pub(crate) fn from_library(bits: u32) -> $name {
                $name(bits)
            }
        }

        impl BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }
        impl BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }
    };
}

c_flags! {
    /// Flags of a normalization descriptor.
    NormFlags {
        /// gamma is stored zero-centred: the scale is (1 + gamma).
        ZERO_CENTERED_GAMMA = FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA,
        /// Hugging Face's "Llama cast order": x_hat (fp32) is rounded to x's
        /// dtype before the scale multiplies it (LlamaRMSNorm's
        /// `weight * hidden_states.to(input_dtype)`); the backward's dgamma
        /// sums dy * round(x_hat), dx keeps the fp32 formula.
        ROUND_XHAT = FNORM_NORM_FLAG_ROUND_XHAT,
    }
}

c_flags! {
    /// Flags of a linear descriptor.
    LinearFlags {
        /// fp32 only: allow TF32 tensor cores.
        ALLOW_TF32 = FNORM_LINEAR_FLAG_ALLOW_TF32,
    }
}

c_flags! {
    /// Flags of SyncBatchNorm (`BatchNormDesc::set_comm`).
    BnSyncFlags {
        /// dgamma / dbeta summed over all ranks.
        GLOBAL_WEIGHT_GRADS = FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS,
    }
}
