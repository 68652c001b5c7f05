//! Random test data for the measuring tools, spread over the cores.

use rand::{RngCore, SeedableRng};

/// Fills the slices with random bytes from `seed` (same seed and layout, same bytes).
pub fn fill_random(slices: Vec<&mut [u8]>, seed: u64) {
    pinstream::par::for_pieces(slices, |i, p| piece_rng(seed, i).fill_bytes(p));
}

/// The generator of piece `i` (of [`pinstream::par::PIECE`] bytes) of [`fill_random`]'s data.
fn piece_rng(seed: u64, i: usize) -> rand::rngs::SmallRng {
    rand::rngs::SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Fills `buf` with bytes `off..off + buf.len()` of what [`fill_random`] writes into one
/// region from `seed` (a progressive pin's chunk; the same bytes as the whole fill), on all
/// cores. A piece the chunk holds only the end of is drawn from its start and its end
/// copied. The chunk must end on a multiple of 8 bytes or at the end of the region (the
/// generator's last partial word depends on where a fill ends); a pin's chunks do.
pub fn fill_random_at(seed: u64, off: usize, buf: &mut [u8]) {
    use pinstream::par::PIECE;
    let (mut parts, mut index) = (Vec::new(), Vec::new());
    let (mut rest, mut at) = (buf, off);
    while !rest.is_empty() {
        let skip = at % PIECE;
        let (head, tail) = rest.split_at_mut((PIECE - skip).min(rest.len()));
        index.push((at / PIECE, skip));
        at += head.len();
        parts.push(head);
        rest = tail;
    }
    pinstream::par::for_pieces(parts, |k, p| {
        let (i, skip) = index[k];
        let mut rng = piece_rng(seed, i);
        if skip == 0 {
            rng.fill_bytes(p);
        } else {
            let mut whole = vec![0u8; skip + p.len()];
            rng.fill_bytes(&mut whole);
            p.copy_from_slice(&whole[skip..]);
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chunk_gets_the_bytes_of_the_whole_fill() {
        let piece = pinstream::par::PIECE;
        let len = 2 * piece + 1004;
        let mut whole = vec![0u8; len];
        super::fill_random(vec![&mut whole[..]], 7);
        // Chunks end on 8-byte boundaries or at the region's end (see `fill_random_at`).
        let cases = [
            (0, 96),
            (piece - 16, 32),
            (piece + 8, piece),
            (len - 500, 500),
        ];
        for (off, n) in cases {
            let mut part = vec![0u8; n];
            super::fill_random_at(7, off, &mut part);
            assert_eq!(part, whole[off..off + n], "bytes {off}..{}", off + n);
        }
    }
}
