//! What the copy kernels do to the caller's buffer, checked against its flags before anything
//! is enqueued: every gather writes its destination and every scatter reads its source with a
//! kernel, which OpenCL forbids on a `CL_MEM_READ_ONLY` (writes) or `CL_MEM_WRITE_ONLY`
//! (reads) buffer, and some drivers run anyway. One check for every front.

use super::{cl, GatherError};
use crate::backend::opencl::DeviceBuffer;

/// Refuses `buf` where its flags forbid the copy kernel's access to it: writing it (`write`,
/// an upload's destination) or reading it (a download's source). The flags are the buffer's
/// own, read from the driver at most once per buffer ([`DeviceBuffer::flags`]): no driver
/// query per call where a front has read them already.
pub(super) fn kernel_may(buf: &DeviceBuffer, write: bool) -> Result<(), GatherError> {
    match buf.flags().map_err(cl)?.kernel_forbids(write) {
        None => Ok(()),
        Some(flag) => Err(GatherError::KernelAccess { flag, write }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Destination, Gather, GatherError, GatherOptions};
    use crate::backend::opencl::{default_device, devices, Context, DeviceBuffer};
    use crate::host::HostRegion;
    use std::ptr;

    fn buffer(ctx: &Context, flags: u64) -> DeviceBuffer {
        let mem = ctx.create_mem(flags, 4096, ptr::null_mut()).unwrap();
        DeviceBuffer { mem }
    }

    fn refused<T>(r: Result<T, GatherError>, flag: &str, write: bool) {
        match r {
            Err(GatherError::KernelAccess { flag: f, write: w }) => {
                assert_eq!((f, w), (flag, write))
            }
            Err(e) => panic!("{flag}: refused for another reason: {e}"),
            Ok(_) => panic!("{flag}: not refused"),
        }
    }

    /// Every call refuses a destination its kernel may not write and a source it may not read,
    /// staged and zero-copy alike, before anything is enqueued; the other way round is fine.
    #[test]
    fn every_call_refuses_a_buffer_its_kernel_may_not_touch() {
        let Ok(all) = devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let ctx = Context::new(default_device(&all).unwrap()).unwrap();
        let q = ctx.queue().unwrap();
        let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
        let read_only = buffer(&ctx, cl3::memory::CL_MEM_READ_ONLY);
        let write_only = buffer(&ctx, cl3::memory::CL_MEM_WRITE_ONLY);
        let (ro, wo) = ("CL_MEM_READ_ONLY", "CL_MEM_WRITE_ONLY");
        let mut host = HostRegion::mapped(&ctx, 4096, false).unwrap();
        let one = [(0, 16, 0)];
        let bytes = [1u8; 16];
        refused(
            g.upload_gather(&q, &read_only, &[(&bytes[..], 0)], &[]),
            ro,
            true,
        );
        refused(
            g.upload_gather_mapped(&q, &read_only, &host, &one, &[]),
            ro,
            true,
        );
        let mut out = [0u8; 16];
        let down = g.download_scatter(&q, &write_only, &mut [(&mut out[..], 0)], &[]);
        refused(down, wo, false);
        let later: Vec<(Destination, usize)> = vec![(Box::new([0u8; 16]), 0)];
        refused(
            g.download_scatter_async(&q, &write_only, later, &[]),
            wo,
            false,
        );
        refused(
            g.download_scatter_mapped(&q, &write_only, &mut host, &one, &[]),
            wo,
            false,
        );
        let into = g.download_scatter_mapped_shared(&q, &write_only, &host, &one, &[]);
        refused(into, wo, false);
        g.upload_gather_mapped(&q, &write_only, &host, &one, &[])
            .unwrap()
            .wait()
            .unwrap();
        let down = g.download_scatter_mapped(&q, &read_only, &mut host, &one, &[]);
        down.unwrap().wait().unwrap();
    }
}
