//! The pure half of a gather: checking the pieces and cutting them into batches of segments
//! that fit one staging buffer. No device here, so every rule is tested on its own.
//!
//! A staging buffer holds `data_cap` bytes of piece data from offset 0, then the batch's
//! table (one row of three `ulong`s per segment, [`ROW_BYTES`] each) at [`Batch::table_offset`]. Each
//! segment sits at a staging offset congruent to its device offset modulo 16, so the kernel
//! copies both sides with the same alignment: 16-byte loads and stores in the body, bytes at
//! the head and tail.

use super::error::GatherError;

/// The longest segment one work-group copies: longer pieces are cut, so a few large pieces
/// still spread over many work-groups.
pub const SEGMENT_MAX: usize = 64 << 10;
/// Bytes of one table row: three `ulong`s (staging offset, device offset, length).
pub const ROW_BYTES: usize = 24;
/// Alignment of segments in staging: the kernel's widest access (`uint4`).
pub const ALIGN: usize = 16;

/// One segment: `len` bytes of piece `piece` from its byte `piece_offset`, at `stage` in the
/// staging buffer and `device` in the device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The piece it belongs to (index in the caller's list).
    pub piece: usize,
    /// Its first byte within the piece.
    pub piece_offset: usize,
    /// Its offset in the staging buffer.
    pub stage: usize,
    /// Its offset in the device buffer.
    pub device: usize,
    /// Its length in bytes.
    pub len: usize,
}

/// The segments that fit one staging buffer, and where its data ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The segments, in the caller's order.
    pub segments: Vec<Segment>,
    /// The end of the data in staging (the first byte after the last segment).
    pub data_end: usize,
}

impl Batch {
    /// Where the table starts: after the data, 8-byte aligned.
    pub fn table_offset(&self) -> usize {
        self.data_end.next_multiple_of(8)
    }

    /// Where the table ends.
    pub fn table_end(&self) -> usize {
        self.table_offset() + self.segments.len() * ROW_BYTES
    }

    /// The table as the kernel reads it: native-endian `ulong` triples (the host and the
    /// device of one OpenCL platform share the byte order on every driver pinstream knows).
    pub fn table(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.segments.len() * ROW_BYTES);
        for s in &self.segments {
            for v in [s.stage, s.device, s.len] {
                out.extend_from_slice(&(v as u64).to_ne_bytes());
            }
        }
        out
    }
}

/// Checks pieces given as `(length, device offset)` against a device buffer of `size`
/// bytes: none empty, none past the end, and (for uploads, `writes`) no two overlapping,
/// whose order would be undefined.
pub fn check(pieces: &[(usize, usize)], size: usize, writes: bool) -> Result<(), GatherError> {
    if pieces.is_empty() {
        return Err(GatherError::NoPieces);
    }
    for (index, &(len, offset)) in pieces.iter().enumerate() {
        if len == 0 {
            return Err(GatherError::EmptyPiece { index });
        }
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(GatherError::OutOfBuffer {
                index,
                offset,
                len,
                size,
            });
        }
    }
    if writes {
        check_overlap(pieces)?;
    }
    Ok(())
}

/// The overlap check of pieces `(length, device offset)`: neighbours compared when the
/// offsets come in order (pages of a cache often do), else the zero-copy calls' linear check
/// by buckets of starts ([`super::overlap`]; it replaced a parallel sort of every piece, most
/// of a large call's planning time).
fn check_overlap(pieces: &[(usize, usize)]) -> Result<(), GatherError> {
    if pieces.windows(2).all(|w| w[0].1 <= w[1].1) {
        return match pieces.windows(2).position(|w| w[0].1 + w[0].0 > w[1].1) {
            Some(first) => Err(GatherError::Overlap {
                first,
                second: first + 1,
            }),
            None => Ok(()),
        };
    }
    let (lo, hi) = pieces
        .iter()
        .fold((usize::MAX, 0), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let span = |i: usize| (pieces[i].1, pieces[i].0);
    super::overlap::check(pieces.len(), span, (lo, hi), &mut Default::default())
}

/// Cuts pieces given as `(length, device offset)` into batches of at most `data_cap` bytes
/// of staging and `rows` segments each, in order. Pieces longer than [`SEGMENT_MAX`] or than
/// what is left of a batch are cut into several segments.
pub fn batches(pieces: &[(usize, usize)], data_cap: usize, rows: usize) -> Vec<Batch> {
    // A batch must hold at least one aligned segment and one row, or no piece ever fits.
    assert!(
        data_cap >= ALIGN && rows > 0,
        "plan::batches: a batch needs at least {ALIGN} bytes and one row (got {data_cap}, {rows})"
    );
    let mut out = Vec::new();
    let mut batch = Batch::default();
    for (piece, &(len, device)) in pieces.iter().enumerate() {
        let mut done = 0;
        while done < len {
            let dev = device + done;
            let stage = aligned_like(batch.data_end, dev);
            let room = data_cap.saturating_sub(stage);
            if room == 0 || batch.segments.len() == rows {
                out.push(std::mem::take(&mut batch));
                continue;
            }
            let take = (len - done).min(SEGMENT_MAX).min(room);
            batch.segments.push(Segment {
                piece,
                piece_offset: done,
                stage,
                device: dev,
                len: take,
            });
            batch.data_end = stage + take;
            done += take;
        }
    }
    if !batch.segments.is_empty() {
        out.push(batch);
    }
    out
}

/// The first offset at or after `at` that is congruent to `like` modulo [`ALIGN`].
fn aligned_like(at: usize, like: usize) -> usize {
    // 2^64 is a multiple of ALIGN, so the wrapped difference keeps its residue.
    at + like.wrapping_sub(at) % ALIGN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_offsets_share_the_device_alignment_and_never_overlap() {
        let pieces = [(5, 3), (4096, 4096 + 7), (1, 100_000), (200_000, 300_001)];
        let b = batches(&pieces, 1 << 20, 1000);
        assert_eq!(b.len(), 1);
        let mut end = 0;
        for s in &b[0].segments {
            assert_eq!(s.stage % ALIGN, s.device % ALIGN, "{s:?}");
            assert!(s.stage >= end && s.stage < end + ALIGN, "{s:?} after {end}");
            assert!(s.len <= SEGMENT_MAX);
            end = s.stage + s.len;
        }
        let total: usize = b[0].segments.iter().map(|s| s.len).sum();
        assert_eq!(total, 5 + 4096 + 1 + 200_000);
        assert_eq!(b[0].data_end, end);
    }

    #[test]
    fn batches_respect_capacity_and_rows_and_cover_every_byte() {
        let pieces: Vec<(usize, usize)> = (0..50).map(|i| (1000 + i * 37, i * 10_000)).collect();
        for (cap, rows) in [(4096, 100), (1 << 20, 3), (777, 2)] {
            let b = batches(&pieces, cap, rows);
            let mut covered = vec![0usize; pieces.len()];
            for batch in &b {
                assert!(batch.data_end <= cap && batch.segments.len() <= rows);
                for s in &batch.segments {
                    assert_eq!(s.piece_offset, covered[s.piece], "in order, no gap");
                    assert_eq!(s.device, pieces[s.piece].1 + s.piece_offset);
                    covered[s.piece] += s.len;
                }
            }
            let want: Vec<usize> = pieces.iter().map(|p| p.0).collect();
            assert_eq!(covered, want, "cap {cap} rows {rows}");
        }
    }

    #[test]
    fn checks_name_the_piece_at_fault() {
        let e = |p: &[(usize, usize)], w| check(p, 100, w).unwrap_err().to_string();
        assert!(e(&[(1, 0), (0, 5)], true).contains("piece 1 is empty"));
        assert!(e(&[(10, 95)], false).contains("piece 0"));
        assert!(e(&[(10, 0), (5, 20), (4, 7)], true).contains("pieces 0 and 2 overlap"));
        assert!(
            check(&[(10, 0), (5, 5)], 100, false).is_ok(),
            "reads may overlap"
        );
        assert!(
            check(&[(10, 0), (5, 10)], 100, true).is_ok(),
            "touching is fine"
        );
        assert!(matches!(check(&[], 100, true), Err(GatherError::NoPieces)));
        assert!(check(&[(1, usize::MAX)], 100, false).is_err());
    }

    #[test]
    fn the_table_follows_the_data() {
        let b = batches(&[(3, 1), (2, 40)], 1024, 8);
        assert_eq!(b[0].table_offset() % 8, 0);
        assert!(b[0].table_offset() >= b[0].data_end);
        let t = b[0].table();
        assert_eq!(t.len(), 2 * ROW_BYTES);
        assert_eq!(u64::from_ne_bytes(t[32..40].try_into().unwrap()), 40);
    }
}
