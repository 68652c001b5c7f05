//! A scattered download whose flush fails after its batches went to the unpacking thread
//! (`PINSTREAM_INJECT_FAULT=flush:1`, process-wide: this binary has this one test): the call
//! returns the error, and the thread writes nothing into the caller's memory after that.

mod common;
#[path = "common/handed_over.rs"]
mod handed_over;

#[test]
fn a_call_whose_flush_fails_after_handing_its_batches_over_writes_nothing_after_it() {
    let e = handed_over::nothing_is_written_after_the_call_fails("flush:1")
        .expect("an error, not a panic");
    assert!(e.to_string().contains("clFlush"), "{e}");
}
