// SPDX-License-Identifier: Apache-2.0
//! fp16 and bfloat16 by hand (round to nearest even), and host encoding of
//! test data in each dtype.

/// f32 -> IEEE binary16 bits, round to nearest even.
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (r & 1) == 1) {
        r += 1; // may carry into the exponent: still correct (up to inf)
    }
    sign | r as u16
}

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            let v = man as f32 * (1.0 / 16_777_216.0); // 2^-24
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

pub fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    if v.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    let lsb = (x >> 16) & 1;
    ((x + 0x7fff + lsb) >> 16) as u16
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// The dtypes the tests use (mirrors fusednorm::Dtype without depending on it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dt {
    F32,
    F16,
    BF16,
}

impl Dt {
    pub const ALL: [Dt; 3] = [Dt::F32, Dt::F16, Dt::BF16];

    pub fn size(self) -> usize {
        if self == Dt::F32 { 4 } else { 2 }
    }

    /// Unit roundoff of the storage type.
    pub fn eps(self) -> f64 {
        match self {
            Dt::F32 => 2f64.powi(-24),
            Dt::F16 => 2f64.powi(-11),
            Dt::BF16 => 2f64.powi(-8),
        }
    }

    pub fn quantize(self, v: f64) -> f64 {
        let f = v as f32;
        match self {
            Dt::F32 => f as f64,
            Dt::F16 => f16_to_f32(f32_to_f16(f)) as f64,
            Dt::BF16 => bf16_to_f32(f32_to_bf16(f)) as f64,
        }
    }

    pub fn encode(self, vals: &[f64]) -> Vec<u8> {
        let mut out = Vec::with_capacity(vals.len() * self.size());
        for &v in vals {
            let f = v as f32;
            match self {
                Dt::F32 => out.extend_from_slice(&f.to_ne_bytes()),
                Dt::F16 => out.extend_from_slice(&f32_to_f16(f).to_ne_bytes()),
                Dt::BF16 => out.extend_from_slice(&f32_to_bf16(f).to_ne_bytes()),
            }
        }
        out
    }

    pub fn decode(self, bytes: &[u8]) -> Vec<f64> {
        match self {
            Dt::F32 => bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
            Dt::F16 => bytes.chunks_exact(2).map(|c| f16_to_f32(u16::from_ne_bytes([c[0], c[1]])) as f64).collect(),
            Dt::BF16 => bytes.chunks_exact(2).map(|c| bf16_to_f32(u16::from_ne_bytes([c[0], c[1]])) as f64).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_and_rounds_to_even() {
        for h in 0u16..=0xffff {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#x} -> {f}");
            }
        }
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00); // tie -> even
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02); // tie -> even (up)
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // rounds to inf
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // tie -> even (zero)
        assert_eq!(f32_to_f16(3.0 * 2f32.powi(-26)), 1);
    }

    #[test]
    fn bf16_round_trips_and_rounds_to_even() {
        for h in 0u16..=0xffff {
            let f = bf16_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_bf16(f), h);
            }
        }
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
    }
}
