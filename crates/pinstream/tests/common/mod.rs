//! Helpers shared by the library's tests.
#![allow(dead_code)]

use rand::{RngCore, SeedableRng};

/// Fills the slices with random bytes from `seed`, spread over the cores.
pub fn fill_random(slices: Vec<&mut [u8]>, seed: u64) {
    pinstream::par::for_pieces(slices, |i, p| {
        rand::rngs::SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .fill_bytes(p)
    });
}
