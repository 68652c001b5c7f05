//! Zero-copy gathers and scatters: pieces that lie in mapped memory
//! ([`HostRegion::mapped`]) are read or written by one kernel across the bus, with no host
//! packing and no DMA: the segment table lies in mapped memory too, so the call is one
//! launch on the caller's queue. On the H200, an OpenCL kernel on `clCreateBufferNV` host
//! memory moved 4,096 × 4 KiB pieces at 91% / 93% of the one-way peak, against 30% / 44% for
//! the staged path (gpu-facts.md, "Kernels reading pinned host memory directly").

use super::{cl, launch_rows, Gather, GatherError};
use crate::backend::opencl::{DeviceBuffer, Event, Queue};
use crate::host::HostRegion;
use std::time::Instant;

/// Segment tables in mapped memory, each with the last kernel that reads it: a call takes one
/// whose kernel has ended and that is large enough (or makes one), so writing a table never
/// waits for the caller's queue.
#[derive(Default)]
pub(super) struct Tables {
    idle: Vec<(HostRegion, Option<Event>)>,
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
            None => Ok(HostRegion::mapped(
                ctx,
                bytes.max(MIN_TABLE).next_power_of_two(),
                false,
            )?),
        }
    }

    /// Gives `table` back, in use until `last` ends.
    fn give(&mut self, table: HostRegion, last: Event) {
        self.idle.push((table, Some(last)));
        if self.idle.len() > KEPT_TABLES {
            self.idle.remove(0);
        }
    }
}

/// The rows of a zero-copy call: `(from offset, to offset, length)` per segment of at most
/// [`super::plan::SEGMENT_MAX`] bytes, as native-endian `ulong`s; with the count of rows and
/// the longest.
fn rows(pieces: impl Iterator<Item = (usize, usize, usize)>) -> (Vec<u8>, (usize, usize)) {
    let mut out = Vec::new();
    let (mut count, mut longest) = (0, 0);
    for (from, to, len) in pieces {
        longest = longest.max(len.min(super::plan::SEGMENT_MAX));
        let mut done = 0;
        while done < len {
            let n = (len - done).min(super::plan::SEGMENT_MAX);
            for v in [from + done, to + done, n] {
                out.extend_from_slice(&(v as u64).to_ne_bytes());
            }
            done += n;
            count += 1;
        }
    }
    (out, (count, longest))
}

/// Refuses pieces `(host offset, length, _)` that end past a region of `len` bytes.
fn check_host(pieces: &[(usize, usize, usize)], len: usize) -> Result<(), GatherError> {
    for (index, &(offset, n, _)) in pieces.iter().enumerate() {
        if offset.checked_add(n).is_none_or(|end| end > len) {
            return Err(GatherError::OutOfRegion {
                index,
                offset,
                len: n,
                size: len,
            });
        }
    }
    Ok(())
}

impl Gather {
    /// Copies pieces of mapped memory `src` to `dst`, with one kernel that reads them across
    /// the bus: piece `(host offset, length, device offset)`. Enqueued on `queue` after
    /// `wait`; returns the kernel's event and never waits for `queue`. The kernel reads
    /// `src` after the call returns: `src`'s accessors wait for `queue` before handing out
    /// its bytes, and the caller must not change the pieces by raw pointer until the event
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
        let shape: Vec<(usize, usize)> = pieces.iter().map(|p| (p.1, p.2)).collect();
        super::plan::check(&shape, dst.size(), true)?;
        let host = self.mapped_buffer(src)?;
        check_host(pieces, src.len())?;
        let rows = pieces.iter().map(|&(h, n, d)| (h, d, n));
        self.zero_copy(queue, (&host, dst), (src, true), rows, wait)
    }

    /// Copies pieces of `src` into mapped memory `dst`, with one kernel that writes them
    /// across the bus: piece `(host offset, length, device offset)`. Enqueued on `queue` after
    /// `wait`; returns the kernel's event and never waits for `queue`; `dst`'s accessors wait
    /// for `queue` before handing out its bytes. Refused as [`Self::download_scatter`]
    /// refuses, and memory that is not mapped, pieces past `dst`, or host pieces that overlap.
    pub fn download_scatter_mapped(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        dst: &mut HostRegion,
        pieces: &[(usize, usize, usize)],
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        let shape: Vec<(usize, usize)> = pieces.iter().map(|p| (p.1, p.2)).collect();
        super::plan::check(&shape, src.size(), false)?;
        let host = self.mapped_buffer(dst)?;
        check_host(pieces, dst.len())?;
        let on_host: Vec<(usize, usize)> = pieces.iter().map(|p| (p.1, p.0)).collect();
        super::plan::check(&on_host, dst.len(), true)?;
        let rows = pieces.iter().map(|&(h, n, d)| (d, h, n));
        self.zero_copy(queue, (src, &host), (dst, false), rows, wait)
    }

    /// The buffer over mapped `region`, refused where it is not mapped or of another context.
    fn mapped_buffer(&self, region: &HostRegion) -> Result<DeviceBuffer, GatherError> {
        let buf = region.device_buffer()?;
        match buf.in_context(&self.devices.ctx).map_err(cl)? {
            true => Ok(buf),
            false => Err(GatherError::OtherContext),
        }
    }

    /// Writes the rows into a free table and launches the copy kernel from `bufs.0` to
    /// `bufs.1` on `queue`; `region` (the mapped side, the source when `from_host`) is told
    /// that `queue` uses it.
    fn zero_copy(
        &mut self,
        queue: &Queue,
        bufs: (&DeviceBuffer, &DeviceBuffer),
        (region, from_host): (&HostRegion, bool),
        rows: impl Iterator<Item = (usize, usize, usize)>,
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        let start = Instant::now();
        let (table, count) = self::rows(rows);
        let mut held = self.tables.take(&self.devices.ctx, table.len())?;
        held.as_mut_slice().ok_or(GatherError::NotContiguous)?[..table.len()]
            .copy_from_slice(&table);
        self.begin(1, start.elapsed().as_secs_f64());
        let table_buf = held.device_buffer()?;
        region.touch(queue).map_err(cl)?;
        let k = &mut self.zero_copy[usize::from(!from_host)];
        let bufs = (bufs, region.len());
        let done = launch_rows(k, queue, bufs, &table_buf, count, self.group, wait)?;
        queue.flush().map_err(cl)?;
        self.tables.give(held, done.clone());
        self.keep(false, std::slice::from_ref(&done));
        self.last.call_s = start.elapsed().as_secs_f64();
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_cut_long_pieces_into_segments() {
        let seg = super::super::plan::SEGMENT_MAX;
        let (t, n) = super::rows([(5, 7, seg + 3), (0, 1, 2)].into_iter());
        assert_eq!(n, (3, seg));
        let at = |i: usize| u64::from_ne_bytes(t[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!([at(0), at(1), at(2)], [5, 7, seg as u64]);
        assert_eq!([at(3), at(4), at(5)], [5 + seg as u64, 7 + seg as u64, 3]);
        assert_eq!([at(6), at(7), at(8)], [0, 1, 2]);
    }
}
