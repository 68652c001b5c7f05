//! A scattered download that fails after its batches went to the unpacking thread, provoked by
//! the fault hook `PINSTREAM_INJECT_FAULT=mark:1` (process-wide: this binary has this one
//! test): the call returns the error, and the thread writes nothing into the caller's
//! memory after that.

mod common;

use pinstream::backend::opencl::{default_device, devices, Context};
use pinstream::gather::{Gather, GatherOptions};
use pinstream::host::{HostRegion, PinOptions};

#[test]
fn a_call_that_fails_after_handing_its_batches_over_writes_nothing_after_it_returns() {
    std::env::set_var("PINSTREAM_INJECT_FAULT", "mark:1");
    let all = devices().expect("an OpenCL platform is needed");
    let ctx = Context::new(default_device(&all).expect("an OpenCL device")).unwrap();
    let queue = ctx.queue().unwrap();
    let src = ctx.device_buffer(4096).unwrap();
    let mut host = HostRegion::new(&ctx, 4096, &PinOptions::default()).unwrap();
    host.as_mut_slice().unwrap().fill(7);
    for e in host.upload(&queue, 0..4096, &src, 0, &[]).unwrap() {
        e.wait().unwrap();
    }
    let mut gather = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    // The batch's DMA waits for `gate`, so it is still to come when the call fails.
    let gate = ctx.user_event().unwrap();
    let (piece, bytes) = common::reported(100);
    let Err(e) = gather.download_scatter_async(&queue, &src, vec![(Box::new(piece), 8)], &[&gate])
    else {
        panic!("the injected fault fails the call");
    };
    assert!(e.to_string().contains("clEnqueueMarkerWithWaitList"), "{e}");
    gate.set_user_status(0).unwrap();
    let piece = bytes.recv_timeout(common::PATIENCE).unwrap();
    assert_eq!(
        piece,
        vec![0u8; 100],
        "written after the call returned its error"
    );
}
