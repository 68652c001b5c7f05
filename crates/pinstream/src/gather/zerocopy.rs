//! Zero-copy gathers and scatters: pieces that lie in mapped memory
//! ([`HostRegion::mapped`]) are read or written by one kernel across the bus, with no host
//! packing and no DMA: the segment table lies in mapped memory too, so the call is one
//! launch on the caller's queue. On the H200, an OpenCL kernel on `clCreateBufferNV` host
//! memory moved 4,096 × 4 KiB pieces at 91% / 93% of the one-way peak, against 30% / 44% for
//! the staged path (gpu-facts.md, "Kernels reading pinned host memory directly").

mod checks;

use super::overlap::Scratch;
use super::stage::launch_rows;
use super::{cl, Gather, GatherError, OverlapCheck};
use crate::backend::opencl::{DeviceBuffer, Event, Queue};
use crate::host::HostRegion;
#[cfg(test)]
use checks::check_pieces;
use std::time::Instant;

/// Segment tables in mapped memory, each with the last kernel that reads it: a call takes one
/// whose kernel has ended and that is large enough (or makes one), so writing a table never
/// waits for the caller's queue.
#[derive(Default)]
pub(super) struct Tables {
    idle: Vec<(HostRegion, Option<Event>)>,
    scratch: Scratch,
}

/// The most tables kept between calls.
const KEPT_TABLES: usize = 4;
/// The smallest table made: room for 2,730 rows.
const MIN_TABLE: usize = 64 << 10;

impl Tables {
    /// A free table of at least `bytes`, from `gather`'s context.
    fn take(
        &mut self,
        ctx: &crate::backend::opencl::Context,
        bytes: usize,
    ) -> Result<HostRegion, GatherError> {
        let free = |(r, e): &(HostRegion, Option<Event>)| {
            r.len() >= bytes && e.as_ref().is_none_or(Event::is_done)
        };
        match self.idle.iter().position(free) {
            Some(i) => Ok(self.idle.swap_remove(i).0),
            None => {
                let size = bytes.max(MIN_TABLE).checked_next_power_of_two();
                Ok(HostRegion::mapped(ctx, size.unwrap_or(bytes), false)?)
            }
        }
    }

    /// Gives `table` back, in use until `last` ends (`None`: free now).
    fn give(&mut self, table: HostRegion, last: Option<Event>) {
        self.idle.push((table, last));
        if self.idle.len() > KEPT_TABLES {
            self.idle.remove(0);
        }
    }
}

/// Bytes of a row of a zero-copy table in the narrow form: three `uint`s (from offset, to
/// offset, length), used when both sides are under 4 GiB; otherwise three `ulong`s. The
/// CPU writes the table each call and every work-group reads its row across the bus, so
/// half the bytes is time saved on both sides (65,536 rows: 768 KiB, not 1.5 MiB).
const NARROW_ROW: usize = 12;
/// Bytes of a wide row: three `ulong`s.
const WIDE_ROW: usize = 24;

/// The shape of a zero-copy call's table: its rows (a piece is one row per
/// [`super::plan::SEGMENT_MAX`] bytes), its longest row and whether rows are narrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TableShape {
    rows: usize,
    longest: usize,
    narrow: bool,
}

impl TableShape {
    fn bytes(&self) -> usize {
        // Saturated: a table no allocation gets is refused as too large.
        (self.rows).saturating_mul(if self.narrow { NARROW_ROW } else { WIDE_ROW })
    }
}

/// Writes the rows of pieces `(host offset, length, device offset)` into `table` in
/// `shape`'s form, from the host side when `host_from`: a row `(from offset, to offset,
/// length)` per segment of at most [`super::plan::SEGMENT_MAX`] bytes, native-endian.
/// `table` is page-aligned mapped memory, so it is written as `uint`s or `ulong`s directly.
fn write_rows(
    table: &mut [u8],
    pieces: &[(usize, usize, usize)],
    host_from: bool,
    shape: TableShape,
) {
    match shape.narrow {
        true => put_all(Rows::<u32>::new(table, host_from), pieces),
        false => put_all(Rows::<u64>::new(table, host_from), pieces),
    }
}

/// Writes every piece's rows with `rows`.
fn put_all<T: Word>(mut rows: Rows<'_, T>, pieces: &[(usize, usize, usize)]) {
    pieces.iter().for_each(|p| rows.put(p));
}

/// A word of a table's rows: `u32` (narrow) or `u64` (wide).
trait Word: bytemuck::Pod {
    /// `x` as a word: cut to its low bits, so only for values [`TableShape`] chose the
    /// word for (every offset and length of a narrow table is under 4 GiB); no branch per
    /// value, where writing the table is a large call's largest host cost after the checks.
    fn of(x: usize) -> Self;
}

impl Word for u32 {
    fn of(x: usize) -> Self {
        x as u32
    }
}

impl Word for u64 {
    fn of(x: usize) -> Self {
        x as u64
    }
}

/// A table being written as the pieces are checked: rows of `T`s (`u32` or `u64`; every
/// value fits, as [`TableShape`] chose), `next` counted on past a full table (a larger one
/// is then written again).
struct Rows<'a, T> {
    rows: &'a mut [[T; 3]],
    next: usize,
    host_from: bool,
}

impl<'a, T: Word> Rows<'a, T> {
    /// The rows that fit in `table` (page-aligned), written from the host side when
    /// `host_from`.
    fn new(table: &'a mut [u8], host_from: bool) -> Self {
        let whole = table.len() / size_of::<[T; 3]>() * size_of::<[T; 3]>();
        Self::over(bytemuck::cast_slice_mut(&mut table[..whole]), host_from)
    }

    /// Writing into `rows`, from the host side when `host_from`.
    fn over(rows: &'a mut [[T; 3]], host_from: bool) -> Self {
        Rows {
            rows,
            next: 0,
            host_from,
        }
    }

    /// Writes the rows of piece `(host offset, length, device offset)`: one per segment.
    #[inline]
    fn put(&mut self, &(host, len, dev): &(usize, usize, usize)) {
        let (from, to) = if self.host_from {
            (host, dev)
        } else {
            (dev, host)
        };
        let v = T::of;
        if len <= super::plan::SEGMENT_MAX {
            if let Some(row) = self.rows.get_mut(self.next) {
                *row = [v(from), v(to), v(len)];
            }
            self.next += 1;
            return;
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(super::plan::SEGMENT_MAX);
            if let Some(row) = self.rows.get_mut(self.next) {
                *row = [v(from + done), v(to + done), v(n)];
            }
            self.next += 1;
            done += n;
        }
    }
}

impl Gather {
    /// Copies pieces of mapped memory `src` to `dst`, with one kernel that reads them across
    /// the bus: piece `(host offset, length, device offset)`. Enqueued on `queue` after
    /// `wait`; returns the kernel's event and never waits for `queue`. The kernel reads
    /// `src` after the call returns: `src`'s accessors and its drop wait for the kernel's
    /// event (never for `queue`) before handing out its bytes or freeing them, and the caller must not change the pieces by raw pointer until the event
    /// completes. Refused as [`Self::upload_gather`] refuses, and memory that is not mapped
    /// ([`crate::host::HostError::NotMapped`]) or pieces past `src`.
    pub fn upload_gather_mapped(
        &mut self,
        queue: &Queue,
        dst: &DeviceBuffer,
        src: &HostRegion,
        pieces: &[(usize, usize, usize)],
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        super::access::kernel_may(dst, true)?;
        let host = self.mapped_buffer(src)?;
        let (table, shape) = self.fill_table(pieces, (src.len(), dst.size()), false)?;
        let from = (src, true);
        self.zero_copy(queue, (&host, dst), from, (table, shape), wait)
    }

    /// Copies pieces of `src` into mapped memory `dst`, with one kernel that writes them
    /// across the bus: piece `(host offset, length, device offset)`. Enqueued on `queue` after
    /// `wait`; returns the kernel's event and never waits for `queue`; `dst`'s accessors and
    /// its drop wait for the kernel's event (never for `queue`) before handing out its bytes
    /// or freeing them. Refused as [`Self::download_scatter`]
    /// refuses, and memory that is not mapped, pieces past `dst`, or host pieces that overlap.
    pub fn download_scatter_mapped(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        dst: &mut HostRegion,
        pieces: &[(usize, usize, usize)],
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        self.download_scatter_mapped_shared(queue, src, dst, pieces, wait)
    }

    /// [`Self::download_scatter_mapped`] into a region its holders share and so cannot lend
    /// mutably (Python's arrays): the kernel is in flight on `dst` as there (its accessors,
    /// its drop and [`HostRegion::release_when_idle`] wait for it, or free it only once it
    /// has run), but nothing stops a slice of `dst` handed out before the call from being
    /// read while the kernel writes: the caller holds none over the pieces until the
    /// returned event completes, as `&mut` makes sure there.
    pub fn download_scatter_mapped_shared(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        dst: &HostRegion,
        pieces: &[(usize, usize, usize)],
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        super::access::kernel_may(src, false)?;
        let host = self.mapped_buffer(dst)?;
        let (table, shape) = self.fill_table(pieces, (dst.len(), src.size()), true)?;
        let to = (dst, false);
        self.zero_copy(queue, (src, &host), to, (table, shape), wait)
    }

    /// Checks `pieces` against `sizes` (the mapped region's, the device buffer's) and
    /// writes their table in the same pass, rows from the host side unless `host_written`.
    /// The table taken has a row per piece; pieces longer than a segment that overflow it
    /// get a larger one, written again. A refusal gives the table back unused.
    fn fill_table(
        &mut self,
        pieces: &[(usize, usize, usize)],
        sizes: (usize, usize),
        host_written: bool,
    ) -> Result<(HostRegion, TableShape), GatherError> {
        if pieces.is_empty() {
            return Err(GatherError::NoPieces);
        }
        let start = Instant::now();
        let narrow = sizes.0.max(sizes.1) <= u32::MAX as usize;
        let row = if narrow { NARROW_ROW } else { WIDE_ROW };
        let mut held = (self.tables).take(&self.devices.ctx, pieces.len().saturating_mul(row))?;
        let checked = match held.as_mut_slice() {
            Some(table) => {
                let table_s = start.elapsed().as_secs_f64();
                let shape = self.check_into(table, pieces, sizes, (host_written, narrow));
                shape.map(|shape| (table_s, shape))
            }
            None => Err(GatherError::NotContiguous),
        };
        let (mut table_s, shape) = match checked {
            Ok((table_s, shape)) if shape.bytes() <= held.len() => {
                self.begin(1, start.elapsed().as_secs_f64());
                self.last.table_s = table_s;
                return Ok((held, shape));
            }
            Ok(found) => found,
            Err(e) => {
                self.tables.give(held, None);
                return Err(e);
            }
        };
        self.tables.give(held, None);
        let again = Instant::now();
        let mut held = self.tables.take(&self.devices.ctx, shape.bytes())?;
        let table = held.as_mut_slice().ok_or(GatherError::NotContiguous)?;
        table_s += again.elapsed().as_secs_f64();
        write_rows(&mut table[..shape.bytes()], pieces, !host_written, shape);
        self.begin(1, start.elapsed().as_secs_f64());
        self.last.table_s = table_s;
        Ok((held, shape))
    }

    /// [`checks::check_rows`] into `table` (a segment table's bytes): the rows that fit are
    /// written as the pieces are checked, on several threads for large batches
    /// ([`checks::split`]).
    fn check_into(
        &mut self,
        table: &mut [u8],
        pieces: &[(usize, usize, usize)],
        sizes: (usize, usize),
        (host_written, narrow): (bool, bool),
    ) -> Result<TableShape, GatherError> {
        let check = (host_written, self.options.overlap_check);
        let split = checks::split(pieces.len(), self.options.host_threads);
        let scratch = (&mut self.tables.scratch, split);
        if narrow {
            let rows = Rows::<u32>::new(table, !host_written).rows;
            checks::check_rows(rows, pieces, sizes, check, scratch)
        } else {
            let rows = Rows::<u64>::new(table, !host_written).rows;
            checks::check_rows(rows, pieces, sizes, check, scratch)
        }
    }

    /// The buffer over mapped `region`, refused where it is not mapped or of another context.
    fn mapped_buffer(&self, region: &HostRegion) -> Result<DeviceBuffer, GatherError> {
        let buf = region.device_buffer()?;
        self.ours(&buf)?;
        Ok(buf)
    }

    /// Refuses `buf` where it is of another context.
    fn ours(&self, buf: &DeviceBuffer) -> Result<(), GatherError> {
        match buf.in_context(&self.devices.ctx).map_err(cl)? {
            true => Ok(()),
            false => Err(GatherError::OtherContext),
        }
    }

    /// Launches the copy kernel from `bufs.0` to `bufs.1` on `queue` with `table` (written
    /// in `shape`); the mapped side (the source when `from_host`) is `region`, which keeps the kernel's event to wait for before it hands out a slice or
    /// is freed (`queue` is the caller's: it is never finished).
    fn zero_copy(
        &mut self,
        queue: &Queue,
        bufs: (&DeviceBuffer, &DeviceBuffer),
        (region, from_host): (&HostRegion, bool),
        (held, shape): (HostRegion, TableShape),
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        let start = Instant::now();
        let table_buf = held.device_buffer()?;
        let k = &mut self.zero_copy[usize::from(!from_host)];
        let bufs = (bufs, region.len());
        let table = (&table_buf, shape.narrow);
        let count = (shape.rows, shape.longest);
        let group = self.group;
        let launch = || launch_rows(k, queue, bufs, table, count, group, wait);
        let at = Instant::now();
        let done = region.in_flight_until(queue, launch)?;
        self.last.launch_s = at.elapsed().as_secs_f64();
        queue.flush().map_err(cl)?;
        self.tables.give(held, Some(done.clone()));
        self.keep(false, std::slice::from_ref(&done));
        self.last.call_s = self.last.plan_s + start.elapsed().as_secs_f64();
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::{check_pieces, write_rows, OverlapCheck, TableShape};
    use crate::gather::GatherError;

    #[test]
    fn rows_cut_long_pieces_into_segments_in_either_form() {
        let seg = super::super::plan::SEGMENT_MAX;
        let pieces = [(5, seg + 3, 7), (0, 2, 1 << 20)];
        let shape = check_pieces(
            &pieces,
            (1 << 20, 2 << 20),
            (false, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .unwrap();
        assert_eq!(
            shape,
            TableShape {
                rows: 3,
                longest: seg,
                narrow: true
            }
        );
        let want = [5, 7, seg, 5 + seg, 7 + seg, 3, 0, 1 << 20, 2];
        for narrow in [true, false] {
            let shape = TableShape { narrow, ..shape };
            let mut words = vec![0u64; shape.bytes() / 4]; // aligned as the mapped table is
            let t = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..shape.bytes()];
            write_rows(t, &pieces, true, shape);
            let w = if narrow { 4 } else { 8 };
            let at = |i: usize| {
                let mut b = [0; 8];
                b[..w].copy_from_slice(&t[i * w..i * w + w]);
                u64::from_ne_bytes(b) as usize
            };
            assert_eq!((0..9).map(at).collect::<Vec<_>>(), want, "narrow {narrow}");
        }
    }

    #[test]
    fn rows_past_a_full_table_are_counted_not_written() {
        let seg = super::super::plan::SEGMENT_MAX;
        let mut words = [0u32; 7]; // two narrow rows and a word to spare
        let table = bytemuck::cast_slice_mut::<u32, u8>(&mut words);
        let mut rows = super::Rows::<u32>::new(table, false);
        rows.put(&(1, 2 * seg + 1, 9)); // three rows: from the device side
        assert_eq!(rows.next, 3, "the third is counted, for a larger table");
        let seg = seg as u32;
        assert_eq!(words, [9, 1, seg, 9 + seg, 1 + seg, seg, 0]);
    }

    #[test]
    fn sides_past_4_gib_take_wide_rows() {
        let shape = check_pieces(
            &[(0, 8, 0)],
            (8, 5 << 30),
            (false, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .unwrap();
        assert!(!shape.narrow);
    }

    #[test]
    fn overlaps_are_found_on_the_written_side_in_any_order() {
        // (host, len, device): hosts overlap (pieces 0 and 2), devices do not.
        let mut pieces: Vec<(usize, usize, usize)> = vec![(100, 10, 0), (0, 10, 20), (105, 10, 40)];
        let sizes = (1000, 1000);
        assert!(
            check_pieces(
                &pieces,
                sizes,
                (false, OverlapCheck::On),
                &mut Default::default(),
                |_| (),
            )
            .is_ok(),
            "reads may overlap"
        );
        let e = check_pieces(
            &pieces,
            sizes,
            (true, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                GatherError::Overlap {
                    first: 0,
                    second: 2
                }
            ),
            "{e:?}"
        );
        // In order, and many pieces (the sorted and the parallel paths).
        pieces = (0..40_000)
            .map(|i| (i * 16, 16, (39_999 - i) * 16))
            .collect();
        assert!(check_pieces(
            &pieces,
            (1 << 20, 1 << 20),
            (true, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .is_ok());
        assert!(check_pieces(
            &pieces,
            (1 << 20, 1 << 20),
            (false, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .is_ok());
        pieces[30_000].2 = pieces[123].2 + 15;
        let e = check_pieces(
            &pieces,
            (1 << 20, 1 << 20),
            (false, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                GatherError::Overlap {
                    first: 123,
                    second: 30_000
                }
            ),
            "{e:?}"
        );
        pieces[7].0 = 9 * 16 - 1;
        let e = check_pieces(
            &pieces,
            (1 << 20, 1 << 20),
            (true, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                GatherError::Overlap {
                    first: 7,
                    second: 8
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn vouched_calls_skip_the_overlap_check_but_not_the_bounds() {
        let pieces = [(0, 10, 0), (5, 10, 100), (20, 10, 3)];
        let vouched = (true, OverlapCheck::Vouched);
        let sizes = (100, 200);
        assert!(check_pieces(&pieces, sizes, vouched, &mut Default::default(), |_| ()).is_ok());
        let on = check_pieces(
            &pieces,
            sizes,
            (true, OverlapCheck::On),
            &mut Default::default(),
            |_| (),
        );
        assert!(
            matches!(
                on,
                Err(GatherError::Overlap {
                    first: 0,
                    second: 1
                })
            ),
            "{on:?}"
        );
        let past = [(0, 10, 0), (95, 10, 0)];
        let e = check_pieces(&past, sizes, vouched, &mut Default::default(), |_| ()).unwrap_err();
        assert!(
            matches!(e, GatherError::OutOfRegion { index: 1, .. }),
            "{e:?}"
        );
    }

    #[test]
    fn bad_pieces_are_refused_by_index() {
        let sizes = (100, 200);
        let refused = |p: &[(usize, usize, usize)]| {
            check_pieces(
                p,
                sizes,
                (false, OverlapCheck::On),
                &mut Default::default(),
                |_| (),
            )
            .unwrap_err()
        };
        assert!(matches!(refused(&[]), GatherError::NoPieces));
        assert!(matches!(
            refused(&[(0, 1, 0), (0, 0, 0)]),
            GatherError::EmptyPiece { index: 1 }
        ));
        let e = refused(&[(0, 10, 195)]);
        assert!(
            matches!(
                e,
                GatherError::OutOfBuffer {
                    index: 0,
                    offset: 195,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = refused(&[(0, 1, 0), (95, 10, 0)]);
        assert!(
            matches!(
                e,
                GatherError::OutOfRegion {
                    index: 1,
                    offset: 95,
                    size: 100,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = refused(&[(usize::MAX, 2, 0)]);
        assert!(
            matches!(e, GatherError::OutOfRegion { index: 0, .. }),
            "{e:?}"
        );
    }
}
