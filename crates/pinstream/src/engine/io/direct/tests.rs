//! The direct reader and writer: sizes, ends of files, refusals, temporary files.

use super::*;
use crate::engine::io::prepare_output;

/// Page-aligned bytes, as the pinned staging is.
struct Aligned(Vec<u8>, usize);
impl Aligned {
    fn new(len: usize) -> Self {
        let v = vec![0u8; len + DIRECT_ALIGN];
        let skip = v.as_ptr().align_offset(DIRECT_ALIGN);
        Aligned(v, skip)
    }
    fn bytes(&mut self, len: usize) -> &mut [u8] {
        &mut self.0[self.1..self.1 + len]
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4099) as u8).collect()
}

/// Reads `len` bytes back in blocks of `block` into aligned buffers (direct or forced
/// buffered), writes them to an output the same way, and checks both byte for byte.
fn round_trip(
    len: usize,
    block: usize,
    direct: bool,
    uring: bool,
) -> (Option<String>, Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    let want = data(len);
    std::fs::write(&src, &want).unwrap();
    let r = DirectReader::open_with(&src, direct, uring).unwrap();
    assert_eq!(r.len(), len as u64);
    let w = DirectWriter::create(&prepare_output(&dst).unwrap(), len as u64, direct).unwrap();
    let mut buf = Aligned::new(block);
    for off in (0..len).step_by(block) {
        let n = block.min(len - off);
        let b = buf.bytes(n);
        r.read_at(off as u64, &mut [&mut *b]).unwrap();
        assert!(b[..] == want[off..off + n], "read {len} at {off}");
        w.write_at(off as u64, &[&*b]).unwrap();
    }
    let notes = (r.note(), w.note());
    assert!(
        !dst.exists(),
        "nothing replaces the output before it is whole"
    );
    w.finish().unwrap();
    assert!(
        std::fs::read(&dst).unwrap() == want,
        "output of {len} bytes"
    );
    notes
}

#[test]
fn every_size_comes_back_byte_exact_direct_and_buffered() {
    let mib = 1 << 20;
    for len in [1, 4095, 4096, 4097, mib + 13, 5 * 65536 + 100] {
        for (direct, uring) in [(true, true), (true, false), (false, false)] {
            let (rn, wn) = round_trip(len, 65536, direct, uring);
            if !direct {
                assert!(rn.is_none() && wn.is_none(), "buffered by choice: no note");
            }
        }
    }
}

#[test]
fn a_read_past_the_end_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("short");
    std::fs::write(&src, data(5000)).unwrap();
    for uring in [true, false] {
        let r = DirectReader::open_with(&src, true, uring).unwrap();
        let mut buf = Aligned::new(8192);
        let e = r.read_at(0, &mut [buf.bytes(8192)]).unwrap_err();
        let ended = matches!(
            e,
            IoError::Ended {
                have: 5000,
                want: 8192,
                ..
            }
        );
        assert!(ended && e.to_string().contains("short"), "{e}");
        // The direct read came back short because the file ended, not because direct
        // I/O was refused: no refusal note, and reads still go direct.
        assert_eq!(r.note(), None, "io_uring: {uring}");
        assert!(r.is_direct(), "io_uring: {uring}");
    }
}

#[test]
fn reads_go_through_io_uring_where_the_kernel_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in");
    std::fs::write(&src, data(4096)).unwrap();
    let r = DirectReader::open_with(&src, true, true).unwrap();
    #[cfg(target_os = "linux")]
    let have = crate::backend::os::uring::Uring::new(4).is_ok();
    #[cfg(not(target_os = "linux"))]
    let have = false;
    assert_eq!(r.uses_uring(), have && r.note().is_none());
    assert!(!DirectReader::open_with(&src, true, false)
        .unwrap()
        .uses_uring());
}

#[test]
fn an_unwritten_output_is_removed_and_leaves_the_target_alone() {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("out");
    std::fs::write(&dst, b"old").unwrap();
    let w = DirectWriter::create(&prepare_output(&dst).unwrap(), 10, true).unwrap();
    w.write_at(0, &[b"hello"]).unwrap();
    drop(w);
    assert_eq!(std::fs::read(&dst).unwrap(), b"old");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}

#[test]
fn a_device_is_refused_naming_what_it_is_and_no_flag() {
    #[cfg(unix)]
    {
        let e = DirectReader::open(Path::new("/dev/zero"), true)
            .err()
            .unwrap();
        let m = e.to_string();
        assert!(
            matches!(
                e,
                IoError::NotRegular {
                    kind: "a character device",
                    ..
                }
            ) && m.contains("/dev/zero: it is a character device, not a regular file"),
            "{m}"
        );
        assert!(!m.contains("--"), "the library names no flag: {m}");
    }
}

/// A FIFO with no writer is refused at once: a plain `open` of it would wait for a writer
/// forever. (Should it hang, a writer is opened to free the reader, and the test fails.)
#[cfg(unix)]
#[test]
fn a_fifo_with_no_writer_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || tx.send(DirectReader::open_with(&path, true, true).err()));
    let got = rx.recv_timeout(std::time::Duration::from_secs(10));
    if got.is_err() {
        let _writer = OpenOptions::new().write(true).open(&fifo);
    }
    let e = got.expect("open returned within 10 s").expect("refused");
    assert!(
        matches!(e, IoError::NotRegular { kind: "a FIFO", .. }),
        "{e}"
    );
}

/// An output being written is listed (what `remove_temporaries`, which a program ending at
/// once calls, removes) until it is renamed over its target or dropped; then no longer, so
/// that such a call cannot touch the new target. (The list is the process's: calling
/// `remove_temporaries` here would remove the files of the tests running beside this one.)
#[test]
fn an_output_is_listed_as_temporary_until_renamed_or_dropped() {
    use crate::engine::io::temporary::is_listed;
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("out");
    std::fs::write(&dst, b"old").unwrap();
    for finish in [false, true] {
        let w = DirectWriter::create(&prepare_output(&dst).unwrap(), 5, true).unwrap();
        let tmp = w.tmp.as_ref().unwrap().1.path().to_path_buf();
        w.write_at(0, &[b"hello"]).unwrap();
        assert!(is_listed(&tmp) && tmp.exists());
        match finish {
            true => w.finish().unwrap(),
            false => drop(w),
        }
        assert!(!is_listed(&tmp) && !tmp.exists());
        let want: &[u8] = if finish { b"hello" } else { b"old" };
        assert_eq!(std::fs::read(&dst).unwrap(), want);
    }
}

/// Offsets whose sums pass the largest file offset are errors naming the file, never an
/// overflow (a panic in a debug build, a wrapped offset in a release build).
#[test]
fn offsets_past_the_largest_file_offset_are_errors_not_overflows() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&src, data(8192)).unwrap();
    let near_end = u64::MAX - 4095; // aligned: the direct and io_uring paths take it
    for (direct, uring) in [(true, true), (true, false), (false, false)] {
        let r = DirectReader::open_with(&src, direct, uring).unwrap();
        let mut buf = Aligned::new(8192);
        let (a, b) = buf.bytes(8192).split_at_mut(4096);
        let e = r.read_at(near_end, &mut [a, b]).unwrap_err();
        assert!(e.to_string().contains("in"), "{e}");
    }
    let w = DirectWriter::create(&prepare_output(&dst).unwrap(), 10, true).unwrap();
    let e = w
        .write_at(near_end, &[&[1u8; 4096], &[2u8; 4096]])
        .unwrap_err();
    assert!(e.to_string().contains("out"), "{e}");
    let f = std::fs::File::open(&src).unwrap();
    let mut buf = vec![0u8; (64 << 20) + 4096]; // two pieces: the second's offset is a sum
    assert!(crate::engine::io::read_chunk(&f, near_end, vec![&mut buf[..]]).is_err());
    assert!(crate::engine::io::read_exact_at(&f, &src, near_end, &mut buf).is_err());
}
