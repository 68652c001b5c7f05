//! What the `psStream*` calls exchange with C besides handles: element types
//! (`psDType`), residency values, the report of a run (`psStreamReport`), and the code of each
//! engine failure.

use crate::error::{
    cl_code, psError_t, Failure, PS_ERROR_CANCELLED, PS_ERROR_INTERNAL, PS_ERROR_INVALID_KERNEL,
    PS_ERROR_INVALID_VALUE, PS_ERROR_MEMORY_ALLOCATION, PS_ERROR_NOT_PINNABLE,
};
use pinstream::engine::{DType, Residency, StreamError, StreamReport};
use std::ffi::c_uint;

/// Element types of a stream's inputs and output (`psStreamSetTypes`), as the kernel declares
/// its buffers: the engine checks each buffer argument's type against them.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum psDType {
    /// `float` (the default).
    PS_DTYPE_F32 = 0,
    /// `half`.
    PS_DTYPE_F16 = 1,
    /// `double`.
    PS_DTYPE_F64 = 2,
    /// `char`.
    PS_DTYPE_I8 = 3,
    /// `uchar`.
    PS_DTYPE_U8 = 4,
    /// `short`.
    PS_DTYPE_I16 = 5,
    /// `ushort`.
    PS_DTYPE_U16 = 6,
    /// `int`.
    PS_DTYPE_I32 = 7,
    /// `uint`.
    PS_DTYPE_U32 = 8,
    /// `long`.
    PS_DTYPE_I64 = 9,
    /// `ulong`.
    PS_DTYPE_U64 = 10,
}

/// The engine's types, in `psDType` order.
const DTYPES: [DType; 11] = [
    DType::F32,
    DType::F16,
    DType::F64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I32,
    DType::U32,
    DType::I64,
    DType::U64,
];

/// The type a `psDType` value names; `what` names the argument in the refusal.
pub(crate) fn dtype(value: c_uint, what: &str) -> Result<DType, Failure> {
    DTYPES.get(value as usize).copied().ok_or_else(|| {
        Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!(
                "{what} is {value}, not a psDType value (PS_DTYPE_F32 = 0 to PS_DTYPE_U64 = 10)"
            ),
        )
    })
}

/// `residency` of `psStreamRun`: as many blocks stay in device memory across passes as the
/// budget leaves room for (the default).
pub const PS_RESIDENCY_AUTO: u64 = u64::MAX;
/// `residency` of `psStreamRun`: no block stays; every pass streams every block.
pub const PS_RESIDENCY_OFF: u64 = 0;

/// The engine's residency for a `residency` value: auto, off, or at most that many bytes.
pub(crate) fn residency(value: u64) -> Residency {
    match value {
        PS_RESIDENCY_AUTO => Residency::Auto,
        PS_RESIDENCY_OFF => Residency::Off,
        bytes => Residency::Bytes(bytes),
    }
}

/// What a stream run did (`psStreamRun`, `psStreamGetReport`): bytes, each stage's busy time
/// by the device's event clock, throughput, overlap, blocks and residency. Times are seconds,
/// rates GB/s (10^9 bytes per second).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct psStreamReport {
    /// Bytes uploaded (host to device), every pass and the residents counted.
    pub bytes_uploaded: u64,
    /// Bytes downloaded (device to host), every pass counted.
    pub bytes_downloaded: u64,
    /// Seconds the uploads were busy, summed over their commands.
    pub upload_busy_s: f64,
    /// Seconds the kernels were busy.
    pub kernel_busy_s: f64,
    /// Seconds the downloads were busy.
    pub download_busy_s: f64,
    /// Bytes uploaded over the uploads' busy time.
    pub upload_busy_gbps: f64,
    /// Bytes downloaded over the downloads' busy time.
    pub download_busy_gbps: f64,
    /// From the first command's start to the last one's end, by the device clock.
    pub device_wall_s: f64,
    /// On the host, from the first enqueue to the last completion.
    pub host_wall_s: f64,
    /// Bytes uploaded plus downloaded over `device_wall_s`.
    pub combined_gbps: f64,
    /// The busiest stage's busy time over `device_wall_s`: 1.0 means the stream ran as fast
    /// as its slowest stage allows.
    pub overlap: f64,
    /// Blocks streamed per pass.
    pub blocks: u64,
    /// Slots in the ring.
    pub slots: u64,
    /// Input bytes per block (per input).
    pub block_bytes: u64,
    /// Resident arguments' bytes, uploaded once.
    pub resident_bytes: u64,
    /// Blocks that stayed in device memory across the passes.
    pub resident_blocks: u64,
    /// Device bytes those blocks took.
    pub resident_block_bytes: u64,
    /// Device memory the ring, the residents and the resident blocks took.
    pub pool_bytes: u64,
    /// Passes over the job.
    pub passes: u64,
}

impl From<&StreamReport> for psStreamReport {
    fn from(r: &StreamReport) -> Self {
        let t = &r.totals;
        psStreamReport {
            bytes_uploaded: t.upload.bytes,
            bytes_downloaded: t.download.bytes,
            upload_busy_s: t.upload.busy_s,
            kernel_busy_s: t.kernel.busy_s,
            download_busy_s: t.download.busy_s,
            upload_busy_gbps: t.upload.busy_gbps,
            download_busy_gbps: t.download.busy_gbps,
            device_wall_s: t.device_wall_s,
            host_wall_s: r.host_wall_s,
            combined_gbps: t.combined_gbps,
            overlap: t.overlap,
            blocks: r.blocks as u64,
            slots: r.slots as u64,
            block_bytes: r.block_bytes as u64,
            resident_bytes: r.resident_bytes,
            resident_blocks: r.residency.blocks as u64,
            resident_block_bytes: r.residency.bytes,
            pool_bytes: r.pool_bytes,
            passes: r.passes as u64,
        }
    }
}

/// The code of an engine failure: sizes and options the caller chose are values, the
/// kernel's mismatches and overruns the kernel's, a command's failure the driver's.
fn code(e: &StreamError) -> psError_t {
    match e {
        StreamError::Bind(_) | StreamError::Overrun(_) => PS_ERROR_INVALID_KERNEL,
        StreamError::Pool(_) => PS_ERROR_MEMORY_ALLOCATION,
        StreamError::Stage { source, .. } | StreamError::Backend(source) => cl_code(source),
        StreamError::NotPinned { .. } => PS_ERROR_NOT_PINNABLE,
        StreamError::OnDevice { source, .. } => code(source),
        StreamError::Stopped { .. } => PS_ERROR_CANCELLED,
        StreamError::Internal(_) => PS_ERROR_INTERNAL,
        _ => PS_ERROR_INVALID_VALUE,
    }
}

/// The failure of a run, with the engine's message.
pub(crate) fn stream_failure(e: &StreamError) -> Failure {
    let detail = match e {
        StreamError::Stopped { .. } => format!("{e} (psStreamCancel)"),
        _ => e.to_string(),
    };
    Failure::new(code(e), detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_value_names_its_type_in_order() {
        for (i, d) in DTYPES.iter().enumerate() {
            assert_eq!(dtype(i as c_uint, "t").unwrap(), *d);
        }
        assert_eq!(
            dtype(psDType::PS_DTYPE_U32 as c_uint, "t").unwrap(),
            DType::U32
        );
        assert_eq!(dtype(11, "t").unwrap_err().code, PS_ERROR_INVALID_VALUE);
    }

    #[test]
    fn an_engine_bug_is_internal_with_the_engine_message() {
        let f = stream_failure(&StreamError::Internal("what broke".into()));
        assert_eq!(f.code, PS_ERROR_INTERNAL);
        assert!(f.detail.contains("what broke") && f.detail.contains("report"));
    }

    #[test]
    fn residency_values() {
        assert_eq!(residency(PS_RESIDENCY_AUTO), Residency::Auto);
        assert_eq!(residency(PS_RESIDENCY_OFF), Residency::Off);
        assert_eq!(residency(4096), Residency::Bytes(4096));
    }
}
