//! The engine through CUDA on the GPU: pinned memory, streams in place and y = W·x, the
//! budget refusal, and mapped buffers.

use super::*;

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn pinned_memory_round_trips_and_costs_no_vram() {
    let g = gpu();
    for how in [CudaPinning::HostAlloc, CudaPinning::Register] {
        let n = 1 << 30;
        let free_before = g.mem_info().unwrap().0;
        let mut host = g.pinned(n, how).unwrap();
        let free_after = g.mem_info().unwrap().0;
        assert!(
            free_before.saturating_sub(free_after) < 64 << 20,
            "{how}: pinning 1 GiB took {} bytes of VRAM",
            free_before - free_after
        );
        pinstream_lab::tools::random::fill_random(vec![host.as_mut_slice()], 99);
        let want = host.as_slice()[..n / 2].to_vec();
        let dev = g.alloc(n / 2).unwrap();
        let s = g.stream().unwrap();
        let up = host.upload(&s, 0..n / 2, &dev, 0, &[]).unwrap();
        // The download's event is dropped unwaited: the memory's in-flight guard must wait
        // for it before `as_slice` reads the bytes.
        drop(host.download(&s, &dev, 0, n / 2..n, &[&up]).unwrap());
        drop(up);
        assert!(host.as_slice()[n / 2..] == want[..], "{how}: data changed");
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn streams_in_place_through_a_small_budget_and_checks_every_element() {
    let g = gpu();
    let mut k = kernel(&g, MIX_U32_CUDA, "mix_u32");
    let n = 64 << 20;
    let mut x = g.pinned(n, CudaPinning::Register).unwrap();
    pinstream::par::fill_with::<u32>(vec![x.as_mut_slice()], |i| i as u32 ^ 0xabcd);
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let r = run(&g, &mut k, job, &opts(4 << 20, 16 << 20), &|_, _| {}).unwrap();
    assert_eq!(r.blocks, 16);
    assert_eq!(r.slots, 4);
    assert!(r.pool_bytes <= 16 << 20);
    assert_eq!(r.records.len(), 3 * 16);
    assert!(r.totals.upload.bytes == n as u64 && r.totals.download.bytes == n as u64);
    let v: &[u32] = bytemuck::cast_slice(x.as_slice());
    let bad = v
        .iter()
        .enumerate()
        .filter(|(i, &v)| v != mix_u32_ref(*i as u32 ^ 0xabcd, *i as u64))
        .count();
    assert_eq!(bad, 0);
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn gemv_through_the_engine_matches_the_cpu() {
    let g = gpu();
    let mut k = kernel(&g, GEMV_F16_CUDA, "gemv_f16");
    let (rows, cols) = (1000usize, 512usize);
    let mut w = g.pinned(rows * cols * 2, CudaPinning::HostAlloc).unwrap();
    for (i, v) in bytemuck::cast_slice_mut::<u8, half::f16>(w.as_mut_slice())
        .iter_mut()
        .enumerate()
    {
        *v = half::f16::from_f32((value(3, i as u64) % 2001) as f32 / 1000.0 - 1.0);
    }
    let mut x = g.pinned(cols * 4, CudaPinning::HostAlloc).unwrap();
    for (i, v) in bytemuck::cast_slice_mut::<u8, f32>(x.as_mut_slice())
        .iter_mut()
        .enumerate()
    {
        *v = (value(4, i as u64) % 1000) as f32 / 500.0 - 1.0;
    }
    let mut y = g.pinned(rows * 4, CudaPinning::HostAlloc).unwrap();
    let o = StreamOptions {
        dtype: DType::F16,
        out_dtype: DType::F32,
        in_per_out: cols,
        work: WorkSize {
            per_output: true,
            items_per: 256,
            local: Some(256),
        },
        ..opts(64 * cols * 2, 64 << 20)
    };
    let job = Job {
        inputs: vec![&w],
        output: Some(&mut y),
        residents: vec![&x],
        args: vec![("cols".into(), cols.to_string())],
        ..Job::default()
    };
    let rep = run(&g, &mut k, job, &o, &|_, _| {}).unwrap();
    assert_eq!(rep.blocks, 16);
    let wv: &[half::f16] = bytemuck::cast_slice(w.as_slice());
    let xv: &[f32] = bytemuck::cast_slice(x.as_slice());
    for (r, got) in bytemuck::cast_slice::<u8, f32>(y.as_slice())
        .iter()
        .enumerate()
    {
        let (want, scale) = gemv_row_ref(&wv[r * cols..(r + 1) * cols], xv);
        assert!(
            (*got as f64 - want).abs() <= 1e-5 * scale + 1e-6,
            "row {r}: {got} vs {want}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn a_budget_too_small_is_refused_with_the_fix() {
    let g = gpu();
    let mut k = kernel(&g, MIX_U32_CUDA, "mix_u32");
    let mut x = g.pinned(16 << 20, CudaPinning::HostAlloc).unwrap();
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let e = run(&g, &mut k, job, &opts(4 << 20, 4 << 20), &|_, _| {}).unwrap_err();
    assert!(matches!(e, StreamError::Budget(_)), "{e}");
    let e = pinstream_cli::advice::stream_error(&e, pinstream_cli::advice::Flags::RUN);
    assert!(e.contains("raise --vram-budget"), "{e}");
}

/// Mapped memory's buffer outlives the memory's own handle (the buffer holds it), and a
/// kernel's writes through it are the host's bytes.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn a_mapped_buffer_keeps_its_memory_alive() {
    use pinstream::host::HostApi;
    let g = gpu();
    let host = <pinstream::backend::cuda::Cuda as HostApi>::mapped(&g, 1 << 20, false).unwrap();
    assert!(host.is_mapped());
    let buffer = <pinstream::backend::cuda::Cuda as HostApi>::device_buffer(&host).unwrap();
    assert_eq!(buffer.len(), 1 << 20);
    drop(host);
    let s = g.stream().unwrap();
    let mut back = g.pinned(1 << 20, CudaPinning::HostAlloc).unwrap();
    drop(back.download(&s, &buffer, 0, 0..1 << 20, &[]).unwrap());
    assert!(
        back.as_slice().iter().all(|&b| b == 0),
        "cuMemHostAlloc memory is zeroed"
    );
    let plain = g.pinned(4096, CudaPinning::HostAlloc).unwrap();
    let refused = <pinstream::backend::cuda::Cuda as HostApi>::device_buffer(&plain);
    let e = refused.err().expect("memory that is not mapped is refused");
    assert!(e.to_string().contains("is not mapped"), "{e}");
}
