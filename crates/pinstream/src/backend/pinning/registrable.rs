//! Which ranges of the caller's memory registration really pins, whatever the API: the checks
//! every registration makes before it registers ([`check_registrable`], [`check_pinnable`]).
//! The NVIDIA driver accepts some ranges without pinning them (read-only mappings, shared
//! mappings of disk files), so they are refused before any API is asked.

use super::HostError;
use crate::backend::os::{self, Backing, Mapping};

/// Why the mapping `m` cannot be pinned by registration, if it cannot, naming its real
/// protection.
fn refusal(m: &Mapping) -> Option<&'static str> {
    if !m.readable && !m.writable {
        Some("it lies in a mapping with no access (neither readable nor writable, PROT_NONE)")
    } else if !m.readable {
        Some("it lies in a write-only mapping (not readable)")
    } else if !m.writable {
        Some("it lies in a read-only mapping")
    } else if m.shared && matches!(m.backing, Backing::File(_)) {
        Some("it lies in a shared mapping of a disk file")
    } else if matches!(m.backing, Backing::Special(_)) {
        Some("it lies in a mapping the kernel provides")
    } else {
        None
    }
}

/// Checks that every byte of `start..end` is mapped memory that registration really pins:
/// the check every registration makes before registering (OpenCL's `HostRegion::register`,
/// `HostApi::register`), with the same errors
/// ([`HostError::NotPinnable`], [`HostError::Unmapped`], [`HostError::MappingUnknown`]).
/// Callers that refuse some memory for their own reasons (a read-only NumPy array, say) call
/// it first, so that memory the driver would not pin gets the library's refusal.
pub fn check_pinnable(start: usize, end: usize) -> Result<(), HostError> {
    let maps = os::mappings(start, end).map_err(|e| HostError::MappingUnknown {
        start,
        end,
        source: e,
    })?;
    let mut at = start;
    for m in &maps {
        if m.start > at {
            return Err(HostError::Unmapped {
                start: at,
                end: m.start,
            });
        }
        if let Some(why) = refusal(m) {
            return Err(HostError::NotPinnable {
                start,
                end,
                why: why.to_string(),
                mapping: m.describe(),
            });
        }
        within_file(m, start, end)?;
        at = m.end;
    }
    if at < end {
        return Err(HostError::Unmapped { start: at, end });
    }
    Ok(())
}

/// Checks that registering `start..end` pins it, before anything is registered: every byte
/// is mapped memory that registration really pins ([`check_pinnable`]), and the pages to fault
/// in fit in the memory this process may still take ([`HostError::RegisterTooLarge`]). The
/// check every registration makes; registrations through other APIs (the C library's
/// `psVkHostRegister`) make it too.
pub fn check_registrable(start: usize, end: usize) -> Result<(), HostError> {
    check_pinnable(start, end)?;
    check_room(start, end)
}

/// The pages of `start..end` that registration must fault in (those not resident now: pages
/// already in memory cost nothing new) fit in the memory this process may still take
/// ([`os::host_room`]), so that registering ends in an error and not in the OOM killer.
fn check_room(start: usize, end: usize) -> Result<(), HostError> {
    let Some(absent) = os::nonresident_bytes(start, end) else {
        return Ok(());
    };
    room_for(end - start, absent, os::host_room())
}

/// [`check_room`]'s rule: `absent` bytes to fault in of `len` fit in `room`.
fn room_for(len: usize, absent: u64, room: Option<os::HostRoom>) -> Result<(), HostError> {
    match room {
        Some(room) if absent > room.bytes => Err(HostError::RegisterTooLarge { len, absent, room }),
        _ => Ok(()),
    }
}

/// `Err` when the part of `start..end` in the private file mapping `m` reaches past the
/// file's last page (reading the file's length; a file that cannot be read is left to the
/// registration).
fn within_file(m: &Mapping, start: usize, end: usize) -> Result<(), HostError> {
    let Backing::File(path) = &m.backing else {
        return Ok(());
    };
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    match past_end(m, end, meta.len(), os::page_size()) {
        Some(from) => Err(HostError::PastEndOfFile {
            start,
            end,
            from: from.max(start),
            file: path.clone(),
            file_len: meta.len(),
        }),
        None => Ok(()),
    }
}

/// The first address of mapping `m` (up to `end`) past the last page of a file of `file_len`
/// bytes, if the range reaches it: the page holding the file's last byte is whole, the
/// ones after it have nothing behind them.
fn past_end(m: &Mapping, end: usize, file_len: u64, page: usize) -> Option<usize> {
    let backed = file_len.div_ceil(page as u64) * page as u64;
    let stop = end.min(m.end);
    let stop_in_file = m.offset + (stop - m.start) as u64;
    (stop_in_file > backed).then(|| m.start + backed.saturating_sub(m.offset) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::os::{CgroupLimit, HostRoom};

    fn mapping(readable: bool, writable: bool, offset: u64) -> Mapping {
        Mapping {
            start: 0x10000,
            end: 0x20000,
            readable,
            writable,
            shared: false,
            offset,
            backing: Backing::File("/data/x".into()),
        }
    }

    #[test]
    fn refusals_name_the_real_protection() {
        let why = |r, w| refusal(&mapping(r, w, 0)).unwrap();
        assert!(why(false, false).contains("no access"));
        assert!(why(false, true).contains("write-only"));
        assert!(why(true, false).contains("read-only"));
        assert_eq!(refusal(&mapping(true, true, 0)), None);
    }

    #[test]
    fn pages_past_the_end_of_the_file_are_found() {
        let m = mapping(true, true, 0x1000);
        // The file covers 0x1000..0x5800 of itself: the mapping's pages 0x10000..0x15000,
        // the last of them partly.
        assert_eq!(past_end(&m, 0x14000, 0x5800, 0x1000), None);
        assert_eq!(past_end(&m, 0x15000, 0x5800, 0x1000), None);
        assert_eq!(past_end(&m, 0x15001, 0x5800, 0x1000), Some(0x15000));
        assert_eq!(past_end(&m, 0x30000, 0x5800, 0x1000), Some(0x15000));
        // A file shorter than the mapping's offset: nothing of it is backed.
        assert_eq!(past_end(&m, 0x10001, 0, 0x1000), Some(0x10000));
    }

    #[test]
    fn only_pages_to_fault_in_need_room() {
        let gib = 1u64 << 30;
        let limit = CgroupLimit {
            file: "memory.max",
            limit: gib,
            in_use: gib / 4,
        };
        let room = || HostRoom::smaller(Some(64 * gib), Some(limit.clone()));
        // 3 GiB all resident already: nothing new to take.
        assert!(room_for(3 << 30, 0, room()).is_ok());
        assert!(room_for(3 << 30, gib / 2, room()).is_ok());
        let e = room_for(3 << 30, 3 * gib, room()).unwrap_err().to_string();
        assert!(
            e.contains("registering 3 GiB would fault in 3 GiB")
                && e.contains("cgroup memory.max 1 GiB, 256 MiB in use"),
            "{e}"
        );
        assert!(room_for(3 << 30, 3 * gib, None).is_ok());
    }
}
