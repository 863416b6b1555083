// SPDX-License-Identifier: Apache-2.0
//! Deterministic random data and the result checker (NaN never passes).

/// splitmix64: the same numbers on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// Compares `got` with `want` element by element: |got - want| <= tol[i]
/// (a NaN anywhere fails). Returns the largest err/tol seen, or a message
/// naming the first mismatches.
pub fn compare(what: &str, got: &[f64], want: &[f64], tol: &[f64]) -> Result<f64, String> {
    if got.len() != want.len() || want.len() != tol.len() {
        return Err(format!("{what}: {} values, reference {}, tolerances {}", got.len(), want.len(), tol.len()));
    }
    let mut worst = 0f64;
    let mut bad = Vec::new();
    let mut nbad = 0usize;
    for i in 0..got.len() {
        let err = (got[i] - want[i]).abs();
        if !(err <= tol[i]) {
            nbad += 1;
            if bad.len() < 5 {
                bad.push(format!("[{i}] got {} want {} (tol {:.3e})", got[i], want[i], tol[i]));
            }
        } else if tol[i] > 0.0 {
            worst = worst.max(err / tol[i]);
        }
    }
    if nbad > 0 {
        return Err(format!("{what}: {nbad} of {} values off: {}", got.len(), bad.join("; ")));
    }
    Ok(worst)
}
