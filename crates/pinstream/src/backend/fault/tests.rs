//! `Faulty<Empty>`: the named command of each kind fails as the API's driver would say, and
//! nothing else; with no fault it changes nothing.

use super::{Fault, Faulty, FaultyInstance, Operation, OutOfResources};
use crate::backend::api::{Adapter, Device, Instance, Program};
use crate::backend::empty::{Empty, EmptyError, EmptyInstance};
use crate::backend::error::BackendError;
use crate::backend::lanes::{copies_in_flight, HostMemory, HostView};
use crate::engine::{run, DType, Job, StreamOptions, WorkSize};
use crate::host::{HostApi, PinRequest};

/// Two devices whose programs may define `inc(x, n, block, offset)`: adds one to each element.
fn empty() -> EmptyInstance {
    let params = [
        ("uint*", "x"),
        ("ulong", "n"),
        ("ulong", "block"),
        ("ulong", "offset"),
    ];
    EmptyInstance::new_with(2, 64 << 20).with_kernel("inc", &params, |bufs, values, _| {
        let n = u64::from_ne_bytes(values[0].try_into().unwrap()) as usize;
        let x: &mut [u32] = bytemuck::cast_slice_mut(&mut bufs[0][..n * 4]);
        x.iter_mut().for_each(|v| *v = v.wrapping_add(1));
    })
}

fn faulty(fault: Option<Fault>) -> FaultyInstance<Empty> {
    FaultyInstance::with_fault(empty(), fault)
}

fn at(op: Operation, index: usize) -> Option<Fault> {
    Some(Fault {
        op,
        index,
        device: None,
    })
}

/// 1 MiB of u32 streamed in place in 16 blocks, 4 slots.
fn opts() -> StreamOptions {
    StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes: 64 << 10,
        in_per_out: 1,
        slots: None,
        vram_budget: 4 * (64 << 10),
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: crate::engine::BoundsCheck::Auto,
        passes: 1,
        residency: crate::engine::Residency::Auto,
    }
}

/// Streams `inc` in place over 0, 1, 2, … on device `device` of `A`: the bytes after, or
/// the error.
fn stream<A: HostApi>(instance: &A::Instance, device: usize) -> Result<Vec<u8>, String> {
    let dev = instance.adapters().unwrap()[device].open().unwrap();
    let mut kernel = dev.build("inc", "").unwrap().kernel("inc").unwrap();
    let mut x = A::pin(&dev, 1 << 20, PinRequest::default()).unwrap();
    let start: Vec<u32> = (0..1 << 18).collect();
    let mut from: &[u8] = bytemuck::cast_slice(&start);
    for piece in x.slices_mut(0..1 << 20).unwrap() {
        let (head, rest) = from.split_at(piece.len());
        piece.copy_from_slice(head);
        from = rest;
    }
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    run(&dev, &mut kernel, job, &opts(), &|_, _| {}).map_err(|e| e.to_string())?;
    Ok(x.slices(0..1 << 20).unwrap().concat())
}

/// What a stream says of `op` failing: `A`'s error, as [`BackendError`] phrases it.
fn driver_says(op: Operation) -> String {
    BackendError::from(EmptyError::out_of_resources(op)).to_string()
}

#[test]
fn each_stage_fails_its_nth_command_with_the_drivers_error() {
    for (op, index, block) in [
        (Operation::Upload, 5, "block 5 (upload)"),
        // Launch 0 is the engine's warm-up: launch 4 is block 3's.
        (Operation::Launch, 4, "block 3 (kernel)"),
        (Operation::Download, 2, "block 2 (download)"),
        (Operation::Allocate, 2, "allocating slot 2"),
    ] {
        let e = stream::<Faulty<Empty>>(&faulty(at(op, index)), 0).unwrap_err();
        assert!(
            e.contains(block) && e.contains(&driver_says(op)),
            "{op:?} {index}: {e}"
        );
    }
}

#[test]
fn no_fault_changes_nothing() {
    let plain = stream::<Empty>(&empty(), 0).unwrap();
    let want: Vec<u32> = (1..=1 << 18).collect();
    assert!(plain == bytemuck::cast_slice::<u32, u8>(&want));
    assert_eq!(stream::<Faulty<Empty>>(&faulty(None), 0).unwrap(), plain);
    // A fault past the stream's commands, or of another device, is none.
    let past = at(Operation::Launch, 1000);
    assert_eq!(stream::<Faulty<Empty>>(&faulty(past), 0).unwrap(), plain);
    let other = Some(Fault {
        device: Some(1),
        ..at(Operation::Upload, 0).unwrap()
    });
    assert_eq!(stream::<Faulty<Empty>>(&faulty(other), 0).unwrap(), plain);
    let e = stream::<Faulty<Empty>>(&faulty(other), 1).unwrap_err();
    assert!(e.contains("block 0 (upload)"), "{e}");
}

/// Which of `n` uploads, `n` downloads and `n` allocations on one device fail.
fn failures(fault: Option<Fault>, n: usize) -> [Vec<usize>; 3] {
    let dev = faulty(fault).adapters().unwrap()[0].open().unwrap();
    let allocs: Vec<_> = (0..n).map(|_| dev.allocate(16)).collect();
    let failed = |r: &[bool]| (0..n).filter(|&i| !r[i]).collect::<Vec<_>>();
    let alloc_ok: Vec<bool> = allocs.iter().map(Result::is_ok).collect();
    let buffer = dev.allocate(16).unwrap();
    let src = [7u8; 16];
    let mut dst = [0u8; 16];
    let (up, down) = copies_in_flight::<Faulty<Empty>, _>(&dev, 1, |lanes| {
        let from = HostView::reading(vec![&src[..]]);
        let up: Vec<bool> = (0..n)
            .map(|_| lanes.upload(0, &buffer, 0, &from, 0..16, &[]).is_ok())
            .collect();
        let into = HostView::writing(vec![&mut dst[..]]);
        let down: Vec<bool> = (0..n)
            .map(|_| lanes.download(0, &into, 0..16, &buffer, 0, &[]).is_ok())
            .collect();
        (up, down)
    })
    .unwrap();
    [failed(&up), failed(&down), failed(&alloc_ok)]
}

#[test]
fn only_the_named_command_fails() {
    let none: Vec<usize> = Vec::new();
    assert_eq!(
        failures(None, 6),
        [none.clone(), none.clone(), none.clone()]
    );
    assert_eq!(
        failures(at(Operation::Upload, 3), 6),
        [vec![3], vec![], vec![]]
    );
    assert_eq!(
        failures(at(Operation::Download, 0), 6),
        [vec![], vec![0], vec![]]
    );
    // The allocation counter also counts the buffer the copies use (the 7th).
    assert_eq!(
        failures(at(Operation::Allocate, 5), 6),
        [vec![], vec![], vec![5]]
    );
    assert_eq!(
        failures(at(Operation::Launch, 0), 6),
        [none.clone(), none.clone(), none]
    );
}

#[test]
fn each_opened_device_counts_its_own_commands() {
    let instance = faulty(at(Operation::Allocate, 1));
    let adapter = &instance.adapters().unwrap()[0];
    for _ in 0..2 {
        let dev = adapter.open().unwrap();
        assert!(dev.allocate(8).is_ok());
        let e = dev.allocate(8).err();
        assert_eq!(e, Some(EmptyError::out_of_resources(Operation::Allocate)));
        assert!(dev.allocate(8).is_ok());
    }
}
