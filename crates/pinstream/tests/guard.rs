//! The engine's bounds guard through the library: a kernel that writes past a buffer gives
//! `StreamError::Overrun` naming the argument and the block; the guard zones count in the
//! pool; `Off` allocates none; `Auto` guards on a CPU device (PoCL in CI) and not on a GPU.

mod common;

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::{
    run, BoundsCheck, DType, Job, OverrunError, Residency, StreamError, StreamOptions, WorkSize,
};
use pinstream::host::{HostRegion, PinOptions};

fn kernel(ctx: &Context, src: &str, name: &str) -> Kernel {
    ctx.build_program(src, "")
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel(name)
        .unwrap()
}

fn opts(check_bounds: BoundsCheck) -> StreamOptions {
    StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes: 64 << 10,
        in_per_out: 1,
        slots: Some(2),
        vram_budget: 64 << 20,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    }
}

/// Adds the resident's first element to each element; `past` elements past the block's end
/// are written too, in block `bad` only; and the resident gets one element past its end
/// written in block `bad_resident`.
const ADD: &str = r#"
__kernel void add(__global uint* x, __global uint* r, ulong n, ulong block, ulong past,
                  ulong bad, ulong bad_resident) {
    size_t i = get_global_id(0);
    if (i < n) x[i] += r[0];
    if (block == bad && i < past) x[n + i] = 7;
    if (block == bad_resident && i == 0) r[16] = 9;
}
"#;

/// Whether `BoundsCheck::Auto` guards on the test device: on CPU devices only.
fn auto_guards() -> bool {
    common::test_ctx().device().device_type == "CPU"
}

/// The settings that guard on the test device: `Auto` where it guards, else `On`.
fn guarding() -> Vec<BoundsCheck> {
    if auto_guards() {
        vec![BoundsCheck::Auto, BoundsCheck::On]
    } else {
        vec![BoundsCheck::On]
    }
}

/// The overrun a run stopped with, if that is what it stopped with.
fn overrun(e: StreamError) -> Option<OverrunError> {
    match e {
        StreamError::Overrun(o) => Some(*o),
        _ => None,
    }
}

/// Runs [`ADD`] in place over 1 MiB (16 blocks) with a resident of 16 uints, on 2 slots.
fn run_add(
    check: BoundsCheck,
    (past, bad): (u64, u64),
    bad_resident: u64,
) -> Result<(u64, bool), StreamError> {
    run_add_on(check, 2, (past, bad), bad_resident)
}

/// [`run_add`] on `slots` slots.
fn run_add_on(
    check: BoundsCheck,
    slots: usize,
    (past, bad): (u64, u64),
    bad_resident: u64,
) -> Result<(u64, bool), StreamError> {
    let c = common::test_ctx();
    let mut k = kernel(&c, ADD, "add");
    let mut x = HostRegion::new(&c, 1 << 20, &PinOptions::default()).unwrap();
    x.typed_mut::<u32>().unwrap().fill(1);
    let mut res = HostRegion::new(&c, 64, &PinOptions::default()).unwrap();
    res.typed_mut::<u32>().unwrap().fill(2);
    let job = Job {
        in_place: Some(&mut x),
        residents: vec![&res],
        args: vec![
            ("past".into(), past.to_string()),
            ("bad".into(), bad.to_string()),
            ("bad_resident".into(), bad_resident.to_string()),
        ],
        ..Job::default()
    };
    let o = StreamOptions {
        slots: Some(slots),
        ..opts(check)
    };
    let rep = run(&c, &mut k, job, &o, &|_, _| {})?;
    assert!(x.typed::<u32>().unwrap().iter().all(|&v| v == 3));
    Ok((rep.pool_bytes, rep.bounds_guard))
}

#[test]
fn an_overrun_names_the_argument_and_the_block_and_counts_the_bytes() {
    for check in guarding() {
        match run_add(check, (3, 3), u64::MAX).map_err(overrun) {
            Err(Some(OverrunError {
                kernel,
                argument,
                role,
                block: 3,
                pass: 0,
                size: 65536,
                guard: 65536,
                past: 12,
                at_least: false,
                in_per_out: 1,
                hosted: false,
            })) => {
                assert_eq!((kernel.as_str(), argument.as_str()), ("add", "x"));
                assert_eq!(role, "the in-place block");
            }
            other => panic!("{check}: {other:?}"),
        }
    }
    match run_add(BoundsCheck::On, (5000, 3), u64::MAX) {
        Err(StreamError::Overrun(e)) => {
            assert!((e.past, e.at_least) == (4096, true), "{e:?}");
            assert!(
                e.to_string().contains("wrote at least 4096 bytes past"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_resident_overrun_is_seen_too() {
    match run_add(BoundsCheck::On, (0, 0), 6) {
        Err(StreamError::Overrun(e)) => {
            assert_eq!((e.argument.as_str(), e.role.as_str()), ("r", "resident 0"));
            assert_eq!((e.block, e.size, e.past), (6, 64, 4));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_guard_zones_count_in_the_pool_and_off_has_none() {
    let guarded = run_add(BoundsCheck::On, (0, 0), u64::MAX).unwrap();
    let bare = run_add(BoundsCheck::Off, (0, 0), u64::MAX).unwrap();
    assert_eq!(bare, (2 * (64 << 10) + 64, false));
    assert_eq!(guarded, (2 * (128 << 10) + 64 + 4096, true));
    let auto = run_add(BoundsCheck::Auto, (0, 0), u64::MAX).unwrap();
    assert_eq!(auto, if auto_guards() { guarded } else { bare });
}

#[test]
fn the_last_blocks_are_checked_too() {
    // Blocks 14 and 15 have no later block on their slot: their guards are read as they
    // complete.
    for last in [14, 15] {
        match run_add(BoundsCheck::On, (1, last), u64::MAX).map_err(overrun) {
            Err(Some(e)) => assert_eq!(
                (e.block, e.past, e.argument.as_str()),
                (last as usize, 4, "x")
            ),
            other => panic!("{other:?}"),
        }
        match run_add(BoundsCheck::On, (0, 0), last).map_err(overrun) {
            Err(Some(e)) => assert_eq!(
                (e.block, e.past, e.argument.as_str()),
                (last as usize, 4, "r")
            ),
            other => panic!("{other:?}"),
        }
    }
}

/// With more slots than one, the first blocks' kernels run before any slot is read again: a
/// resident written in one of them is still named by its own block (it was named by the
/// last of the first slots' blocks, 3 of 0..=3 on 4 slots).
#[test]
fn a_resident_overrun_in_the_first_blocks_names_its_block() {
    for bad in 0..5 {
        match run_add_on(BoundsCheck::On, 4, (0, 0), bad).map_err(overrun) {
            Err(Some(e)) => assert_eq!(
                (e.block, e.past, e.argument.as_str()),
                (bad as usize, 4, "r")
            ),
            other => panic!("block {bad}: {other:?}"),
        }
    }
}

/// Adds a host-resident table's entries (bound by name, `t`, read in place from mapped
/// memory); two uints written past the table's end in block `bad`.
const LOOK: &str = r#"
__kernel void look(__global uint* x, __global uint* t, ulong n, ulong block, ulong bad) {
    size_t i = get_global_id(0);
    if (i < n) x[i] += t[i % 16];
    if (block == bad && i < 2) t[16 + i] = 9;
}
"#;

/// Runs [`LOOK`] in place over 1 MiB on 4 slots with a host-resident table of 16 uints in
/// mapped memory, made with a guard zone after it where `zone` (as the library says:
/// `guard::hosted_allocation`).
fn run_look(check: BoundsCheck, bad: u64, zone: bool) -> Result<(), StreamError> {
    use pinstream::engine::guard::{hosted_allocation, hosted_guard_bytes};
    let guard = if zone { hosted_guard_bytes(64) } else { 0 };
    run_look_in(check, bad, (hosted_allocation(64, zone), guard))
}

/// [`run_look`] with the table's memory made `memory` bytes and said to have a zone of
/// `guard` bytes after its 64.
fn run_look_in(
    check: BoundsCheck,
    bad: u64,
    (memory, guard): (usize, usize),
) -> Result<(), StreamError> {
    use pinstream::engine::{run_on, Hosted, Target};
    let c = common::test_ctx();
    let mut k = kernel(&c, LOOK, "look");
    let mut x = HostRegion::new(&c, 1 << 20, &PinOptions::default()).unwrap();
    x.typed_mut::<u32>().unwrap().fill(1);
    let mut table = HostRegion::mapped(&c, memory, false).unwrap();
    let words = table.typed_mut::<u32>().unwrap();
    let n = words.len().min(16);
    words[..n].fill(2);
    let buffer = table.device_buffer().unwrap();
    let hosted = vec![Hosted {
        name: "t".into(),
        buffer: &buffer,
        len: 64,
        guard,
    }];
    let job = Job {
        in_place: Some(&mut x),
        args: vec![("bad".into(), bad.to_string())],
        ..Job::default()
    };
    let o = StreamOptions {
        slots: Some(4),
        ..opts(check)
    };
    let mut targets = [Target::new(&c, &mut k).with_hosted(hosted)];
    run_on(&mut targets, job, &o, &|_, _| {})?;
    assert!(x.typed::<u32>().unwrap().iter().all(|&v| v == 3));
    Ok(())
}

/// A kernel writing past its host-resident buffer is stopped as one writing past any other
/// buffer it is bound to: the write lands in the zone after the table, and the run names the
/// table and the block. Before, the guard did not cover these buffers: the write went
/// unseen (into PoCL's heap after the table).
#[test]
fn a_host_resident_overrun_is_seen_and_named() {
    for check in guarding() {
        for bad in [1, 9] {
            match run_look(check, bad, true).map_err(overrun) {
                Err(Some(e)) => {
                    let what = (e.argument.as_str(), e.role.as_str(), e.hosted);
                    assert_eq!(what, ("t", "the host-resident buffer", true));
                    assert_eq!((e.block, e.size, e.past), (bad as usize, 64, 8), "{e:?}");
                    assert!(e.to_string().contains("by its size"), "{e}");
                }
                other => panic!("{check}, block {bad}: {other:?}"),
            }
        }
    }
    run_look(BoundsCheck::On, u64::MAX, true).expect("a kernel inside the table passes");
}

/// A run that guards refuses a host-resident buffer made without a zone (its overrun would
/// reach other memory unseen); one that does not guard takes it.
#[test]
fn a_host_resident_buffer_without_a_zone_is_refused_where_runs_guard() {
    match run_look(BoundsCheck::On, u64::MAX, false) {
        Err(StreamError::Layout(e)) => {
            let msg = e.to_string();
            assert!(
                msg.contains("`t` has no guard zone") && msg.contains("check_bounds Off"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    run_look(BoundsCheck::Off, u64::MAX, false).expect("an unguarded run takes it");
}

/// A host-resident buffer that holds fewer bytes than its `len` and `guard` say is refused
/// before anything is written, naming it and the sizes, guarded or not. Before, a guarded
/// run wrote the canary past the buffer's end and failed with the driver's error
/// (`CL_INVALID_VALUE` from the canary's write), and an unguarded one bound it as it was.
#[test]
fn a_host_resident_buffer_shorter_than_its_len_and_zone_is_refused() {
    for (check, memory, guard) in [
        (BoundsCheck::On, 64 + 1024, 4096),
        (BoundsCheck::Off, 32, 0),
    ] {
        match run_look_in(check, u64::MAX, (memory, guard)) {
            Err(StreamError::Layout(e)) => {
                let msg = e.to_string();
                let want = format!("buffer `t` holds {memory} bytes, fewer than the 64 bytes given to the kernel and the {guard}-byte guard zone");
                assert!(
                    msg.contains(&want) && msg.contains("hosted_allocation"),
                    "{msg}"
                );
            }
            other => panic!("{check}: {other:?}"),
        }
    }
}

/// Adds 1 to each element; the block's first work-item writes one element past the block
/// where its first element reaches 3: in place from 1, in the second pass.
const LATER: &str = r#"
__kernel void later(__global uint* x, ulong n) {
    size_t i = get_global_id(0);
    if (i < n) x[i] += 1;
    if (i == 0 && x[0] == 3) x[n] = 7;
}
"#;

/// Runs `src` (`later`) in place over `bytes` of 1s, with a resident of 16 uints (2s) where
/// `shared`, under `o`.
fn run_later(src: &str, bytes: usize, shared: bool, o: &StreamOptions) -> Result<(), StreamError> {
    let c = common::test_ctx();
    let mut k = kernel(&c, src, "later");
    let mut x = HostRegion::new(&c, bytes, &PinOptions::default()).unwrap();
    x.typed_mut::<u32>().unwrap().fill(1);
    let mut res = HostRegion::new(&c, 64, &PinOptions::default()).unwrap();
    res.typed_mut::<u32>().unwrap().fill(2);
    let job = Job {
        in_place: Some(&mut x),
        residents: if shared { vec![&res] } else { Vec::new() },
        ..Job::default()
    };
    run(&c, &mut k, job, o, &|_, _| {}).map(drop)
}

#[test]
fn an_overrun_in_a_later_pass_names_the_pass() {
    for residency in [Residency::Off, Residency::Auto] {
        let o = StreamOptions {
            passes: 3,
            residency,
            ..opts(BoundsCheck::On)
        };
        match run_later(LATER, 1 << 20, false, &o) {
            Err(StreamError::Overrun(e)) => {
                assert_eq!((e.block, e.pass, e.past), (0, 1, 4), "{residency:?}: {e:?}");
                assert!(e.to_string().contains("in block 0 in pass 2:"), "{e}");
            }
            other => panic!("{residency:?}: {other:?}"),
        }
    }
}

/// As [`LATER`], into the resident `r` (16 uints): a buffer every block shares, read after
/// kernels of later blocks ran (the guard names the last kernel before the read).
const LATER_SHARED: &str = r#"
__kernel void later(__global uint* x, __global uint* r, ulong n) {
    size_t i = get_global_id(0);
    if (i < n) x[i] += 1;
    if (i == 0 && x[0] == 3) r[16] = 9;
}
"#;

#[test]
fn an_overrun_of_a_shared_buffer_in_a_later_pass_names_that_pass() {
    // 4 blocks, 2 passes, on 1, 2 and 4 slots: on 2 the resident's guard is read at the check
    // of a block of the first pass, after the second pass's first kernel (the first to write
    // it) ran.
    for slots in [1, 2, 4] {
        let o = StreamOptions {
            passes: 2,
            slots: Some(slots),
            residency: Residency::Off,
            ..opts(BoundsCheck::On)
        };
        match run_later(LATER_SHARED, 256 << 10, true, &o) {
            Err(StreamError::Overrun(e)) => {
                assert_eq!(
                    (e.argument.as_str(), e.pass),
                    ("r", 1),
                    "{slots} slots: {e:?}"
                );
                assert!(e.to_string().contains(" in pass 2:"), "{e}");
            }
            other => panic!("{slots} slots: {other:?}"),
        }
    }
}
