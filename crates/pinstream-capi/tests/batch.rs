//! The batched copies against a caller's own OpenCL objects: asynchronous (a batch queued
//! behind commands that wait on the caller returns at once, and completes after them), and
//! checked as the driver checks a transfer (images, host-access and kernel-access flags,
//! queues pinstream cannot use, each refused with the condition named).

mod common;

use common::{batch_call, release, status, within, Cl, Mem, Raw};
use pinstream_capi::*;
use std::ffi::{c_void, CStr};
use std::ptr;
use std::time::Duration;

const MIB: usize = 1 << 20;

fn detail() -> String {
    // SAFETY: this thread's NUL-terminated detail, read before another call.
    unsafe { CStr::from_ptr(psGetLastErrorDetail()) }
        .to_string_lossy()
        .into_owned()
}

/// Uploads `pieces` (offset, bytes) to `buf` on `queue`; the code and the event.
fn upload(queue: Raw, buf: Raw, pieces: &[(usize, Vec<u8>)]) -> (psError_t, cl_event) {
    let offs: Vec<usize> = pieces.iter().map(|p| p.0).collect();
    let srcs: Vec<*const c_void> = pieces.iter().map(|p| p.1.as_ptr().cast()).collect();
    let sizes: Vec<usize> = pieces.iter().map(|p| p.1.len()).collect();
    let mut ev: cl_event = ptr::null_mut();
    // SAFETY: live queue and buffer; arrays of `len` entries; sources readable.
    let code = unsafe {
        psMemcpyBatchHtoDAsync(
            queue.0,
            buf.0,
            offs.as_ptr(),
            srcs.as_ptr(),
            sizes.as_ptr(),
            pieces.len(),
            &mut ev,
        )
    };
    (code, ev)
}

/// Downloads `sizes.len()` pieces from offsets `offs` of `buf`, waiting for its event; the
/// code and the pieces.
fn download(cl: &Cl, buf: &Mem, offs: &[usize], sizes: &[usize]) -> (psError_t, Vec<Vec<u8>>) {
    let mut out: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let dsts: Vec<*mut c_void> = out.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
    let mut ev: cl_event = ptr::null_mut();
    // SAFETY: live queue and buffer; arrays of `len` entries; destinations writable and
    // untouched until the event completes (waited for below).
    let code = unsafe {
        psMemcpyBatchDtoHAsync(
            cl.queue,
            dsts.as_ptr(),
            buf.0,
            offs.as_ptr(),
            sizes.as_ptr(),
            offs.len(),
            &mut ev,
        )
    };
    if code == PS_SUCCESS {
        cl3::event::wait_for_events(&[ev]).unwrap();
        release(ev);
    }
    (code, out)
}

/// `count` pieces of 1 MiB, piece i at offset i MiB, each filled with its own pattern.
fn pieces(count: usize) -> Vec<(usize, Vec<u8>)> {
    (0..count)
        .map(|i| (i * MIB, (0..MIB).map(|b| (b * 7 + i * 31) as u8).collect()))
        .collect()
}

#[test]
fn an_upload_behind_a_user_event_returns_at_once_and_completes_after_it() {
    let cl = Cl::new();
    let count = 24; // 24 MiB: six batches, so both host stages are reused in the call
    let buf = cl.buffer(cl3::memory::CL_MEM_READ_WRITE, count * MIB);
    let (q, b) = (Raw(cl.queue), Raw(buf.0));
    // The first call in a context builds the copy kernels: not what is measured.
    let (code, ev) = upload(q, b, &[(0, vec![9u8; 64])]);
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    cl3::event::wait_for_events(&[ev]).unwrap();
    release(ev);

    let gate = cl.gate();
    let want = pieces(count);
    let sent = want.clone();
    let Some((code, ev)) = within(Duration::from_secs(30), move || {
        let (code, ev) = upload(q, b, &sent);
        (code, Raw(ev))
    }) else {
        let _ = cl3::event::set_user_event_status(gate, 0);
        panic!("psMemcpyBatchHtoDAsync did not return in 30 s: it waited for the caller's queue");
    };
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        status(ev.0) > 0,
        "the batch's event completed before the user event was set"
    );
    cl3::event::set_user_event_status(gate, 0).unwrap();
    cl3::event::wait_for_events(&[ev.0]).unwrap();
    let got = cl.read(&buf, count * MIB);
    for (off, bytes) in &want {
        assert!(
            got[*off..off + bytes.len()] == bytes[..],
            "piece at {off} differs"
        );
    }
    release(ev.0);
    release(gate);
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}

/// Downloads behind a user event: the call returns at once with its destinations untouched,
/// and its event completes, with every piece in place, only after the user event is set.
fn download_behind_a_gate(count: usize) {
    let cl = Cl::new();
    let buf = cl.buffer(cl3::memory::CL_MEM_READ_WRITE, count * MIB);
    let want = pieces(count);
    let (code, ev) = upload(Raw(cl.queue), Raw(buf.0), &want);
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    cl3::event::wait_for_events(&[ev]).unwrap();
    release(ev);
    let gate = cl.gate();
    let mut got: Vec<Vec<u8>> = (0..count).map(|_| vec![0u8; MIB]).collect();
    let dsts: Vec<Raw> = got.iter_mut().map(|v| Raw(v.as_mut_ptr().cast())).collect();
    let (q, b) = (Raw(cl.queue), Raw(buf.0));
    let Some((code, ev)) = within(Duration::from_secs(30), move || {
        let (q, b) = (q, b); // whole, not their raw fields: Raw is what may cross threads
        let offs: Vec<usize> = (0..count).map(|i| i * MIB).collect();
        let ptrs: Vec<*mut c_void> = dsts.iter().map(|d| d.0).collect();
        let mut ev: cl_event = ptr::null_mut();
        // SAFETY: live queue and buffer; arrays of `count` entries; destinations writable
        // and untouched until the event completes.
        let code = unsafe {
            psMemcpyBatchDtoHAsync(
                q.0,
                ptrs.as_ptr(),
                b.0,
                offs.as_ptr(),
                vec![MIB; count].as_ptr(),
                count,
                &mut ev,
            )
        };
        (code, Raw(ev))
    }) else {
        let _ = cl3::event::set_user_event_status(gate, 0);
        panic!("psMemcpyBatchDtoHAsync did not return in 30 s: it waited for the caller's queue");
    };
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        status(ev.0) > 0,
        "the download's event completed before the user event was set"
    );
    assert!(
        got.iter().all(|v| v.iter().all(|&x| x == 0)),
        "pieces written before the user event was set"
    );
    cl3::event::set_user_event_status(gate, 0).unwrap();
    cl3::event::wait_for_events(&[ev.0]).unwrap();
    for (i, (_, bytes)) in want.iter().enumerate() {
        assert!(got[i] == *bytes, "piece {i} differs");
    }
    release(ev.0);
    release(gate);
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}

#[test]
fn a_download_behind_a_user_event_returns_at_once_and_completes_after_it() {
    download_behind_a_gate(4);
}

#[test]
fn a_download_of_several_batches_behind_a_user_event_takes_more_stages_instead_of_waiting() {
    download_behind_a_gate(40); // three batches of up to 16 MiB: more than the two stages
}

/// A host-access flag: the driver's own write or read refuses it with CL_INVALID_OPERATION.
fn driver_refuses(cl: &Cl, buf: &Mem, write: bool) -> bool {
    let mut byte = [0u8; 1];
    let p = byte.as_mut_ptr().cast();
    // SAFETY: a live queue and buffer; blocking one-byte transfers of a local.
    let r = unsafe {
        match write {
            true => cl3::command_queue::enqueue_write_buffer(
                cl.queue,
                buf.0,
                1,
                0,
                1,
                p,
                0,
                ptr::null(),
            ),
            false => {
                cl3::command_queue::enqueue_read_buffer(cl.queue, buf.0, 1, 0, 1, p, 0, ptr::null())
            }
        }
    };
    r.map(release).err() == Some(cl3::error_codes::CL_INVALID_OPERATION)
}

#[test]
fn buffers_whose_flags_forbid_the_copy_are_refused_as_the_driver_refuses_them() {
    use cl3::memory::*;
    let cl = Cl::new();
    let rw = CL_MEM_READ_WRITE;
    // (flags, the upload's expected code, the download's, the flag the refusal names)
    let op = PS_ERROR_INVALID_OPERATION;
    let cases = [
        (rw | CL_MEM_HOST_NO_ACCESS, op, op, "CL_MEM_HOST_NO_ACCESS"),
        (
            rw | CL_MEM_HOST_READ_ONLY,
            op,
            PS_SUCCESS,
            "CL_MEM_HOST_READ_ONLY",
        ),
        (
            rw | CL_MEM_HOST_WRITE_ONLY,
            PS_SUCCESS,
            op,
            "CL_MEM_HOST_WRITE_ONLY",
        ),
        (CL_MEM_READ_ONLY, op, PS_SUCCESS, "CL_MEM_READ_ONLY"),
        (CL_MEM_WRITE_ONLY, PS_SUCCESS, op, "CL_MEM_WRITE_ONLY"),
        (rw, PS_SUCCESS, PS_SUCCESS, ""),
    ];
    for (flags, up, down, name) in cases {
        let buf = cl.buffer(flags, 4096);
        let (code, ev) = upload(Raw(cl.queue), Raw(buf.0), &[(0, vec![5u8; 100])]);
        assert_eq!(code, up, "upload to {name}: {}", detail());
        if code == PS_SUCCESS {
            cl3::event::wait_for_events(&[ev]).unwrap();
            release(ev);
        } else {
            assert!(
                detail().contains(name) && detail().contains(": make it"),
                "{}",
                detail()
            );
            // Host-access flags: the driver's own write is refused too; READ_ONLY: it is
            // not (the refusal is for the copy kernel's write).
            let host_flag = name.contains("HOST");
            assert_eq!(host_flag, driver_refuses(&cl, &buf, true), "{name}");
        }
        let (code, _) = download(&cl, &buf, &[0], &[100]);
        assert_eq!(code, down, "download from {name}: {}", detail());
        if code != PS_SUCCESS {
            assert!(
                detail().contains(name) && detail().contains(": make it"),
                "{}",
                detail()
            );
        }
    }
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}

#[test]
fn host_access_flags_are_the_ones_the_driver_itself_refuses() {
    use cl3::memory::*;
    let cl = Cl::new();
    let rw = CL_MEM_READ_WRITE;
    let no = cl.buffer(rw | CL_MEM_HOST_NO_ACCESS, 64);
    let ro = cl.buffer(rw | CL_MEM_HOST_READ_ONLY, 64);
    let wo = cl.buffer(rw | CL_MEM_HOST_WRITE_ONLY, 64);
    assert!(driver_refuses(&cl, &no, true) && driver_refuses(&cl, &no, false));
    assert!(driver_refuses(&cl, &ro, true) && !driver_refuses(&cl, &ro, false));
    assert!(!driver_refuses(&cl, &wo, true) && driver_refuses(&cl, &wo, false));
}

#[test]
fn images_and_buffers_of_another_context_are_not_buffers_of_the_queue() {
    let cl = Cl::new();
    let other = Cl::new();
    let image = cl.image(1024);
    let foreign = other.buffer(cl3::memory::CL_MEM_READ_WRITE, 4096);
    for (mem, what) in [(&image, "an image"), (&foreign, "another context")] {
        let (code, _) = upload(Raw(cl.queue), Raw(mem.0), &[(0, vec![1u8; 16])]);
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "upload to {what}");
        assert!(
            detail().contains("CL_INVALID_") && detail().contains(what),
            "{}",
            detail()
        );
        let (code, _) = download(&cl, mem, &[0], &[16]);
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "download from {what}");
    }
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}

#[test]
fn a_refused_queue_is_refused_with_the_condition_that_failed() {
    let cl = Cl::new();
    let buf = cl.buffer(cl3::memory::CL_MEM_READ_WRITE, 4096);
    let ooo = cl3::command_queue::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    let q = common::queue(cl.ctx, cl.device, ooo);
    let (code, _) = upload(Raw(q), Raw(buf.0), &[(0, vec![1u8; 16])]);
    assert_eq!(code, PS_ERROR_NOT_SUPPORTED);
    let d = detail();
    assert!(
        d.contains("the queue is out of order") && d.contains("pass an in-order queue"),
        "{d}"
    );
    // SAFETY: the queue made above, released once.
    let _ = unsafe { cl3::command_queue::release_command_queue(q) };
    let (code, _) = upload(Raw(ptr::null_mut()), Raw(buf.0), &[(0, vec![1u8; 16])]);
    assert_eq!(code, PS_ERROR_INVALID_VALUE);
    assert!(
        detail().contains("pass the cl_command_queue"),
        "{}",
        detail()
    );
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}

/// A piece that starts inside a block psHostAlloc made (mapped or not) and runs past its
/// end, or runs into one from before it, is refused in both directions, with and without
/// `PS_BATCH_DISJOINT`: nothing enqueued, nothing written. Before, such a piece failed the
/// zero-copy check and fell back to the staged path, which read or wrote past the block
/// (AddressSanitizer: heap-buffer-overflow), and the call returned PS_SUCCESS.
#[test]
fn a_piece_running_past_its_block_is_refused_both_ways() {
    let cl = Cl::new();
    let buf = cl.buffer(cl3::memory::CL_MEM_READ_WRITE, 8192);
    let (_, ev) = upload(Raw(cl.queue), Raw(buf.0), &[(0, vec![0x3c; 8192])]);
    cl3::event::wait_for_events(&[ev]).unwrap();
    release(ev);
    for flags in [0, PS_HOST_ALLOC_MAPPED] {
        let mut block: *mut c_void = ptr::null_mut();
        // SAFETY: a live context; `block` is writable.
        let code = unsafe { psHostAlloc(cl.ctx, 65536, flags, &mut block) };
        assert_eq!(code, PS_SUCCESS, "{}", detail());
        let b = block.cast::<u8>();
        // SAFETY: the block's 65536 bytes, ours until psHostFree.
        unsafe { std::slice::from_raw_parts_mut(b, 65536) }.fill(0xa5);
        let inside = (b.wrapping_add(100), 100, 0);
        let cases = [
            (
                b.wrapping_add(65536 - 50),
                100,
                "run 50 bytes past the end of",
            ),
            (b.wrapping_add(65535), 2, "run 1 byte past the end of"),
            (b.wrapping_sub(16), 32, "run into"),
        ];
        for (p, n, why) in cases {
            for check in [0, PS_BATCH_DISJOINT] {
                for up in [true, false] {
                    let pieces = [inside, (p, n, 4096)];
                    let (code, ev) = batch_call((cl.queue, buf.0), &pieces, check, up);
                    let d = detail();
                    assert_eq!(code, PS_ERROR_INVALID_VALUE, "{flags:#x} {up}: {d}");
                    assert!(ev.is_null(), "an event for a refused call");
                    let name = if up { "srcs[1]" } else { "dsts[1]" };
                    assert!(
                        d.contains(name) && d.contains(why) && d.contains("psHostAlloc"),
                        "{flags:#x} {up}: {d}"
                    );
                }
            }
        }
        assert!(cl.read(&buf, 8192).iter().all(|&x| x == 0x3c), "written");
        // SAFETY: as above.
        let mem = unsafe { std::slice::from_raw_parts(b, 65536) };
        assert!(mem.iter().all(|&x| x == 0xa5), "the block was written");
        assert_eq!(psHostFree(block), PS_SUCCESS);
    }
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}

/// Zero-copy uploads queued behind a user event, more of them than the gather keeps tables
/// for: each call returns at once (a table whose kernel is still to run is never freed by a
/// wait on the caller's queue, which holds the gather's and the registry's locks), and all
/// complete once the event is set.
#[test]
fn zero_copy_calls_behind_a_user_event_return_at_once() {
    let cl = Cl::new();
    let buf = cl.buffer(cl3::memory::CL_MEM_READ_WRITE, 65536);
    let mut block: *mut c_void = ptr::null_mut();
    // SAFETY: a live context; `block` is writable.
    let code = unsafe { psHostAlloc(cl.ctx, 65536, PS_HOST_ALLOC_MAPPED, &mut block) };
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    let b = block.cast::<u8>();
    // SAFETY: the block's 65536 bytes, ours until psHostFree.
    unsafe { std::slice::from_raw_parts_mut(b, 65536) }.fill(0x17);
    let gate = cl.gate();
    let (q, m, p) = (Raw(cl.queue), Raw(buf.0), Raw(block));
    let calls = within(Duration::from_secs(20), move || {
        let (q, m, p) = (q, m, p);
        (0..12)
            .map(|k| {
                let piece = [(p.0.cast::<u8>().wrapping_add(k * 4096), 4096, k * 4096)];
                let got = batch_call((q.0.cast(), m.0.cast()), &piece, 0, true);
                (got.0, Raw(got.1.cast()))
            })
            .collect::<Vec<_>>()
    });
    let Some(calls) = calls else {
        cl3::event::set_user_event_status(gate, 0).unwrap();
        panic!("a zero-copy call behind a user event waited for the queue");
    };
    cl3::event::set_user_event_status(gate, 0).unwrap();
    release(gate);
    for (code, ev) in calls {
        assert_eq!(code, PS_SUCCESS, "{}", detail());
        cl3::event::wait_for_events(&[ev.0.cast()]).unwrap();
        release(ev.0.cast());
    }
    assert!(cl.read(&buf, 12 * 4096).iter().all(|&x| x == 0x17));
    assert_eq!(psHostFree(block), PS_SUCCESS);
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
}
