//! The host memory pinned with a device, by address ([`Registry`]): a copy from or into a
//! `HostSpan` finds the `VkBuffer`(s) over it here.

use crate::sync::lock;
use ash::vk;
use std::sync::Mutex;

/// One registered range of host memory and the buffer over it, which starts at `base` (at or
/// before `start`: a registration's buffers cover whole pages, its entries its own bytes).
#[derive(Debug, Clone, Copy)]
struct Registered {
    start: usize,
    len: usize,
    buffer: vk::Buffer,
    base: usize,
}

/// The host memory pinned with a device, by address: a copy from or into a `HostSpan`
/// finds the buffer(s) over it here.
#[derive(Debug, Default)]
pub(super) struct Registry(Mutex<Vec<Registered>>);

/// A piece of a host span inside one registered buffer: the buffer, the offset in it, the
/// length, and the offset in the span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Piece {
    pub(super) buffer: vk::Buffer,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) at: u64,
}

impl Registry {
    /// Registers `len` bytes at `start` as bytes of `buffer`, whose first byte is the host
    /// byte at `base` (at or before `start`).
    pub(super) fn add(&self, start: usize, len: usize, buffer: vk::Buffer, base: usize) {
        debug_assert!(base <= start);
        lock(&self.0).push(Registered {
            start,
            len,
            buffer,
            base,
        });
    }

    /// Forgets `buffer`.
    pub(super) fn remove(&self, buffer: vk::Buffer) {
        lock(&self.0).retain(|r| r.buffer != buffer);
    }

    /// The registered buffers covering `len` bytes at `start`, in order, or `None` where a
    /// byte of it is not registered.
    pub(super) fn find(&self, start: *const u8, len: usize) -> Option<Vec<Piece>> {
        let end = (start as usize).checked_add(len)?;
        let list = lock(&self.0);
        let (mut at, mut pieces) = (start as usize, Vec::new());
        while at < end {
            let r = list
                .iter()
                .find(|r| r.start <= at && at < r.start + r.len)?;
            let take = (r.start + r.len).min(end) - at;
            pieces.push(Piece {
                buffer: r.buffer,
                offset: (at - r.base) as u64,
                len: take as u64,
                at: (at - start as usize) as u64,
            });
            at += take;
        }
        Some(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    #[test]
    fn a_span_across_two_registrations_is_two_pieces() {
        let r = Registry::default();
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        r.add(0x1000, 0x1000, a, 0x1000);
        r.add(0x2000, 0x1000, b, 0x2000);
        let p = r.find(0x1800 as *const u8, 0x1000).unwrap();
        assert_eq!(
            p,
            vec![
                Piece {
                    buffer: a,
                    offset: 0x800,
                    len: 0x800,
                    at: 0
                },
                Piece {
                    buffer: b,
                    offset: 0,
                    len: 0x800,
                    at: 0x800
                },
            ]
        );
        assert!(
            r.find(0x2800 as *const u8, 0x1000).is_none(),
            "past the end"
        );
        r.remove(a);
        assert!(r.find(0x1800 as *const u8, 1).is_none());
        let top = (usize::MAX - 10) as *const u8;
        assert!(r.find(top, 100).is_none(), "a span past the address space");
    }

    /// Two registrations that share a page hold their own bytes: a span of the second finds
    /// the second's buffer, at its offset from the buffer's start (its page's start).
    #[test]
    fn registrations_sharing_a_page_find_their_own_buffers() {
        let r = Registry::default();
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        r.add(0x1000, 0x100, a, 0x1000);
        r.add(0x1100, 0x200, b, 0x1000);
        let p = r.find(0x1180 as *const u8, 0x10).unwrap();
        let want = Piece {
            buffer: b,
            offset: 0x180,
            len: 0x10,
            at: 0,
        };
        assert_eq!(p, vec![want]);
        r.remove(a);
        assert!(
            r.find(0x1000 as *const u8, 1).is_none(),
            "a's bytes are a's"
        );
        assert_eq!(r.find(0x1180 as *const u8, 0x10).unwrap(), vec![want]);
    }
}
