//! A scattered download that fails after its batches went to the unpacking thread, by the
//! fault the calling test binary sets with `PINSTREAM_INJECT_FAULT` (read once per process:
//! one fault per binary): the call returns the error, or panics, and the thread writes
//! nothing into the caller's memory after that.

use crate::common::{reported, PATIENCE};
use pinstream::backend::opencl::{default_device, devices, Context};
use pinstream::gather::{Gather, GatherError, GatherOptions};
use pinstream::host::{HostRegion, PinOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// How the call ended: its error, or the message of its panic.
pub type Ended = Result<GatherError, String>;

/// Runs one download of a 100-byte piece whose DMA waits for a user event set only after the
/// call ended (`fault` set for the process first), and returns how it ended; panics if the
/// piece was written after that.
pub fn nothing_is_written_after_the_call_fails(fault: &str) -> Ended {
    std::env::set_var("PINSTREAM_INJECT_FAULT", fault);
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
    let (piece, bytes) = reported(100);
    let call = AssertUnwindSafe(|| {
        gather.download_scatter_async(&queue, &src, vec![(Box::new(piece), 8)], &[&gate])
    });
    let ended = match catch_unwind(call) {
        Ok(Ok(_)) => panic!("the injected fault ({fault}) fails the call"),
        Ok(Err(e)) => Ok(e),
        Err(p) => Err(p
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a panic".into())),
    };
    gate.set_user_status(0).unwrap();
    let piece = bytes.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        piece,
        vec![0u8; 100],
        "written after the call returned its error"
    );
    ended
}
