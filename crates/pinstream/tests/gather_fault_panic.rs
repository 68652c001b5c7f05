//! A scattered download that panics after its batches went to the unpacking thread
//! (`PINSTREAM_INJECT_FAULT=panic-sent:1`, process-wide: this binary has this one test), as a
//! front's panic boundary (the C library's) catches it: the thread writes nothing into the
//! caller's memory after the call unwound.

mod common;
#[path = "common/handed_over.rs"]
mod handed_over;

#[test]
fn a_call_that_panics_after_handing_its_batches_over_writes_nothing_after_it() {
    let msg = handed_over::nothing_is_written_after_the_call_fails("panic-sent:1")
        .expect_err("a panic, not an error");
    assert!(
        msg.contains("1 batch(es) went to the unpacking thread"),
        "{msg}"
    );
}
