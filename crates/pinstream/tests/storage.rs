//! Files streamed from storage through staging rings smaller than the data
//! (`engine::storage`), on the default OpenCL device (PoCL in CI), checked against CPU
//! references byte for byte, for sizes that are and are not multiples of a page and of a
//! block, in place and out of place, direct and buffered.

mod common;
#[path = "common/storage_files.rs"]
mod storage_files;

use pinstream::engine::io::prepare_output;
use pinstream::engine::storage::{
    run_from_storage, staging_plan, StorageError, StorageJob, StorageOptions, StorageReport,
};
use pinstream::engine::{HostMemory, StreamOptions, Target};
use pinstream::host::{HostRegion, PinOptions};
use pinstream_lab::kernels::{mix_u32_ref, value, MIX_U32};
use std::path::Path;
use storage_files::{
    check_add, check_mixed, kernel, mix_in_out, opts, read_u32s, replaced_nothing, stream,
    stream_watched, two_inputs, write_u32s, ADD,
};

#[test]
fn in_place_files_of_every_size_come_back_exact_through_a_smaller_ring() {
    let (ctx, mut k, _dir, src, dst) = mix_in_out();
    // Elements: 1 (4 bytes), a page less one element, a page, a page and one, 1 MiB + 12
    // bytes, and 20 blocks of 64 KiB and a tail: more than the ring's 12 blocks.
    for (n, direct, slots, uring) in [
        (1, true, None, true),
        (1023, true, None, true),
        (1024, false, None, true),
        (1025, true, Some(2), false),
        ((1 << 18) + 3, true, None, true),
        ((1 << 18) + 3, true, None, false),
        (20 * 16384 + 77, true, Some(1), true),
        (20 * 16384 + 77, false, None, true),
    ] {
        write_u32s(&src, n, 5);
        let s = StorageOptions {
            direct,
            uring,
            ..StorageOptions::default()
        };
        let o = opts(64 << 10, slots);
        let r = stream(&ctx, &mut k, vec![src.clone()], &dst, true, &o, &s).unwrap();
        check_mixed(&dst, n, 5, 1, &format!("{n} elements"));
        assert_eq!(
            (r.read_bytes, r.written_bytes),
            (4 * n as u64, 4 * n as u64)
        );
        // Direct only where asked for and taken (this file system takes O_DIRECT, or the
        // report has the note saying it did not).
        assert!(!r.direct || direct, "forced buffered, reported direct");
        assert_eq!(r.direct, direct && r.notes.is_empty(), "{:?}", r.notes);
        let ring = staging_plan(4 * n, true, &o, &s).unwrap();
        assert!(
            ring.input_bytes <= 12 * (64 << 10),
            "the ring stays its size"
        );
    }
}

#[test]
fn two_inputs_stream_out_of_place_into_a_whole_output() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, ADD, "add");
    let dir = tempfile::tempdir().unwrap();
    let n = 30 * 8192 + 5;
    let (a, b, c) = two_inputs(dir.path(), n);
    let o = opts(32 << 10, Some(2));
    let s = StorageOptions::default();
    let r = stream(&ctx, &mut k, vec![a, b], &c, false, &o, &s).unwrap();
    check_add(&c, n);
    assert_eq!(r.read_bytes, 8 * n as u64);
    assert!(r.stream.blocks > 12 && r.read_s > 0.0 && r.write_s > 0.0);
}

#[test]
fn empty_and_mismatched_inputs_are_refused_and_nothing_is_written() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, ADD, "add");
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    write_u32s(&a, 100, 1);
    std::fs::write(&b, b"").unwrap();
    let (o, s) = (opts(4096, None), StorageOptions::default());
    let none = pinstream::engine::storage::open_inputs(&[], &s).err();
    assert!(matches!(none, Some(StorageError::NoInputs)), "{none:?}");
    let e = stream(&ctx, &mut k, vec![a.clone(), b.clone()], &c, false, &o, &s).unwrap_err();
    assert!(matches!(e, StorageError::Empty { .. }), "{e}");
    write_u32s(&b, 99, 1);
    let e = stream(&ctx, &mut k, vec![a.clone(), b], &c, false, &o, &s).unwrap_err();
    assert!(e.to_string().contains("must have one length"), "{e}");
    // Staging that is not what the plan says: refused before anything is read.
    let mut small = HostRegion::new(&ctx, 4096, &PinOptions::default()).unwrap();
    let job = StorageJob {
        inputs: vec![a],
        in_place: true,
        output: Some(prepare_output(&c).unwrap()),
        residents: Vec::new(),
        args: Vec::new(),
    };
    let mut kt = kernel(&ctx, MIX_U32, "mix_u32");
    let staging: Vec<&mut dyn HostMemory> = vec![&mut small];
    let e = run_from_storage(
        &mut Target::new(&ctx, &mut kt),
        job,
        staging,
        &o,
        &s,
        &|_| {},
    );
    let e = e.unwrap_err();
    assert!(
        matches!(
            e,
            StorageError::Staging {
                index: 0,
                have: 4096,
                need: 400
            }
        ),
        "{e}"
    );
    assert!(!c.exists());
}

#[test]
fn a_stopped_run_ends_its_readers_and_writer_and_replaces_nothing() {
    let (ctx, mut k, _dir, src, dst) = mix_in_out();
    write_u32s(&src, 40 * 1024, 3);
    std::fs::write(&dst, b"before").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(2));
    let o = StreamOptions {
        stop: Some(stop),
        ..opts(4096, None)
    };
    let e = stream(
        &ctx,
        &mut k,
        vec![src],
        &dst,
        true,
        &o,
        &StorageOptions::default(),
    );
    let e = e.unwrap_err();
    assert!(matches!(e, StorageError::Stream(_)), "{e}");
    replaced_nothing(&dst, 2, "stopped");
}

#[test]
fn an_input_that_shrinks_mid_run_stops_it_naming_the_file_and_nothing_is_written() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("shrinks"), dir.path().join("out"));
    // 40 blocks of 4 KiB: the ring holds 12, so blocks past it are read only after the first
    // completes, which is when the file is cut.
    write_u32s(&src, 40 * 1024, 9);
    let cut = |p: pinstream::engine::Progress| {
        if p.blocks == 1 {
            std::fs::File::options()
                .write(true)
                .open(&src)
                .unwrap()
                .set_len(4096)
                .unwrap();
        }
    };
    let (o, s) = (opts(4096, None), StorageOptions::default());
    let e =
        stream_watched(&ctx, &mut k, vec![src.clone()], &dst, (true, &o, &s), &cut).unwrap_err();
    assert!(matches!(&e, StorageError::Io(_)), "{e:?}");
    assert!(
        e.to_string().contains("shrinks") && e.to_string().contains("ended"),
        "{e}"
    );
    assert!(!dst.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}

/// Runs `f` on a thread of its own and returns what it gives, failing the test when it takes
/// longer than `secs` (a run that hangs fails here instead of hanging the test).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    let got = rx.recv_timeout(std::time::Duration::from_secs(secs));
    got.unwrap_or_else(|e| panic!("the run did not end within {secs} s ({e}): it hangs"))
}

/// Runs `test` again in a child process of this binary for each of `faults`, with
/// `PINSTREAM_INJECT_FAULT` set to it (the hook is read once per process, so only a child
/// may have it); true in the parent once every child passed, false in a child.
fn in_children_with_faults(test: &str, faults: &[&str]) -> bool {
    if std::env::var_os("PINSTREAM_INJECT_FAULT").is_some() {
        return false;
    }
    for fault in faults {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture"])
            .env("PINSTREAM_INJECT_FAULT", fault)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "PINSTREAM_INJECT_FAULT={fault}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    true
}

/// An in-place run of `mix_u32` over `n` elements streamed from `src` into `dst`, on a
/// thread of its own, failing the test if it does not end within a minute.
fn mix_within(
    src: &Path,
    dst: &Path,
    n: usize,
    s: StorageOptions,
) -> Result<StorageReport, StorageError> {
    write_u32s(src, n, 7);
    let (src, dst) = (src.to_path_buf(), dst.to_path_buf());
    within(60, move || {
        let ctx = common::test_ctx();
        let mut k = kernel(&ctx, MIX_U32, "mix_u32");
        let o = opts(16 << 10, None);
        stream(&ctx, &mut k, vec![src], &dst, true, &o, &s)
    })
}

#[test]
#[cfg(target_os = "linux")]
fn a_lasting_io_uring_failure_ends_the_run_with_its_error_and_replaces_nothing() {
    // uring:0: the first wait fails, before the kernel took any read; uring:3: a later one,
    // with reads in flight that must end before their memory is given back.
    let me = "a_lasting_io_uring_failure_ends_the_run_with_its_error_and_replaces_nothing";
    if in_children_with_faults(me, &["uring:0", "uring:3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in_uring"), dir.path().join("out"));
    std::fs::write(&dst, b"before").unwrap();
    let s = StorageOptions {
        readers: 1,
        ..StorageOptions::default()
    };
    if !pinstream::engine::io::direct::DirectReader::open_with(&dst, true, true)
        .unwrap()
        .uses_uring()
    {
        eprintln!("skipped: this kernel or file system gives no io_uring direct reads");
        return;
    }
    let e = mix_within(&src, &dst, 64 * 4096, s).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, StorageError::Io(_)), "{e:?}");
    assert!(
        text.contains("in_uring") && text.contains("os error 5"),
        "{text}"
    );
    replaced_nothing(&dst, 2, "io_uring failure");
}

#[test]
fn a_file_system_refusing_direct_transfers_at_the_first_is_read_buffered_exactly_and_said() {
    // direct:0: the files open for direct I/O, but every direct transfer is refused (EINVAL),
    // as by a file system that checks at the first transfer, not at open.
    let me =
        "a_file_system_refusing_direct_transfers_at_the_first_is_read_buffered_exactly_and_said";
    if in_children_with_faults(me, &["direct:0"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (
        dir.path().join("in_refused"),
        dir.path().join("out_refused"),
    );
    let n = 20 * 16384 + 77;
    for uring in [true, false] {
        let s = StorageOptions {
            uring,
            ..StorageOptions::default()
        };
        let r = mix_within(&src, &dst, n, s).unwrap();
        let got = read_u32s(&dst);
        assert_eq!(got.len(), n);
        for (i, v) in got.iter().enumerate() {
            let want = mix_u32_ref(value(7, i as u64) as u32, i as u64);
            assert_eq!(*v, want, "io_uring {uring}: element {i}");
        }
        assert!(!r.direct && !r.io_uring, "io_uring {uring}: {r:?}");
        let says = |name: &str| {
            let n = r.notes.iter();
            n.filter(|t| t.contains(name) && t.contains("refuses direct I/O"))
                .count()
        };
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert_eq!(
            (says("in_refused"), says("out_refused")),
            (1, 1),
            "{:?}",
            r.notes
        );
    }
}

#[test]
fn two_inputs_one_failing_mid_run_end_with_its_error_and_release_everything() {
    // Either input fails; each case a few times, the hang it guards against being a race
    // (a ring failing between the engine's wait for a block and its upload).
    for (failing, _) in (0..2).flat_map(|f| (0..5).map(move |t| (f, t))) {
        one_of_two_inputs_fails_mid_run(failing);
    }
}

/// Two inputs of 40 blocks of 4 KiB, input `failing` cut to one block once the first block
/// completes: the run ends with its error within a minute, and nothing is left.
fn one_of_two_inputs_fails_mid_run(failing: usize) {
    let dir = tempfile::tempdir().unwrap();
    let ins = [dir.path().join("a"), dir.path().join("b")];
    let c = dir.path().join("c");
    // Each ring holds 12 blocks, so the later blocks are read only after the first completes,
    // which is when the failing input is cut.
    let n = 40 * 1024;
    write_u32s(&ins[0], n, 1);
    write_u32s(&ins[1], n, 2);
    let run = |cut: bool| {
        let (ins, c) = (ins.clone(), c.clone());
        within(60, move || {
            let ctx = common::test_ctx();
            let mut k = kernel(&ctx, ADD, "add");
            let (o, s) = (opts(4096, Some(2)), StorageOptions::default());
            let shrink = |p: pinstream::engine::Progress| {
                if cut && p.blocks == 1 {
                    let f = std::fs::File::options().write(true).open(&ins[failing]);
                    f.unwrap().set_len(4096).unwrap();
                }
            };
            stream_watched(&ctx, &mut k, ins.to_vec(), &c, (false, &o, &s), &shrink)
        })
    };
    let e = run(true).unwrap_err();
    assert!(matches!(&e, StorageError::Io(_)), "{e:?}");
    let (text, name) = (e.to_string(), ins[failing].display().to_string());
    assert!(text.contains(&name) && text.contains("ended"), "{text}");
    assert!(!c.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "no temporary file left"
    );
    // Nothing of the failed run is held: the same run over whole inputs completes.
    write_u32s(&ins[failing], n, failing as u64 + 1);
    let r = run(false).unwrap();
    assert_eq!((r.read_bytes, read_u32s(&c).len()), (8 * n as u64, n));
}
