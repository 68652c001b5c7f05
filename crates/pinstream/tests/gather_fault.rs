//! A scattered download that fails after its batches went to the unpacking thread, provoked by
//! the fault hook `PINSTREAM_INJECT_FAULT=mark:1` (process-wide: this binary has this one
//! test): the call returns the error, and the thread writes nothing into the caller's
//! memory after that. `gather_fault_flush.rs` and `gather_fault_panic.rs` fail the same call
//! at its flush and by a panic.

mod common;
#[path = "common/handed_over.rs"]
mod handed_over;

#[test]
fn a_call_that_fails_after_handing_its_batches_over_writes_nothing_after_it_returns() {
    let e = handed_over::nothing_is_written_after_the_call_fails("mark:1")
        .expect("an error, not a panic");
    assert!(e.to_string().contains("clEnqueueMarkerWithWaitList"), "{e}");
}
