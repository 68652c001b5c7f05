//! Where a zero-copy gather's wall time goes (issue 23): for N pieces of S bytes at random
//! offsets in mapped memory, each call's host time to return, then the kernel's queued →
//! submit → start → end (its event profile) and the host's wake-up after it, medians of 15;
//! checked (the overlap check on) and vouched ([`OverlapCheck::Vouched`]). "call us" is the
//! host side of one call, which the kernel waits for: measurable on PoCL without a GPU; "plan
//! us" is its part before the launch (the checks and the table's rows). "call min" is its
//! least of the 15, the call least disturbed on a shared host. Each is run with the call's
//! checks on one thread ("thr 1"), on two ("2"), split where measured to pay ("auto", the
//! default) and split over every thread of the pool ("all"): `GatherOptions::host_threads`;
//! and as "auto" with the pieces read just before each call ("warm"): whether the call's
//! time is its caches, cold after the wait. "table us" is the plan's part taking a segment
//! table and reaching its bytes, "launch us" the call's part setting the kernel's arguments
//! and enqueuing it (`CallStats::table_s`, `launch_s`). "hot" is a call made right after
//! another returned, without waiting for its kernel: its host times with the thread not
//! coming back from a wait (its kernel and wall columns then include the first call's
//! kernel). Last, what the OpenCL driver's own calls cost, with no pinstream around them: a
//! kernel of the zero-copy kernels' arguments, its arguments set and it enqueued.
//!
//!   cargo run --release --example zero_copy_timeline -- [PIECES SIZE]...
use pinstream::backend::opencl::{default_device, devices, Context, Queue};
use pinstream::gather::{Gather, GatherOptions, OverlapCheck};
use pinstream::host::HostRegion;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let shapes: Vec<(usize, usize)> = match args.len() {
        0 => vec![(4096, 4096), (65536, 256), (1024, 65536)],
        _ => args.chunks(2).map(|c| (c[0], c[1])).collect(),
    };
    let all = devices()?;
    let dev = default_device(&all).ok_or("no device")?;
    let ctx = Context::new(dev)?;
    println!("device: {}", dev.name);
    let q = ctx.queue()?;
    let all = rayon::current_num_threads();
    let mut gathers = Vec::new();
    for (name, host_threads) in [
        ("1", Some(1)),
        ("2", Some(2)),
        ("auto", None),
        ("all", Some(all)),
        ("warm", None),
        ("hot", None),
    ] {
        let opts = GatherOptions {
            profile: true,
            host_threads,
            ..GatherOptions::default()
        };
        gathers.push((name, Gather::new(&ctx, &opts)?));
    }
    println!(
        "{:>6} {:>6} {:>4} {:>7} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "pieces",
        "size",
        "dir",
        "check",
        "thr",
        "call us",
        "plan us",
        "table us",
        "launch us",
        "call min",
        "q->sub",
        "sub->start",
        "kernel",
        "wake",
        "wall us",
        "GB/s"
    );
    for (n, size) in shapes {
        let stride = size + 64;
        let span = n * stride;
        let mut src = HostRegion::mapped(&ctx, span, false)?;
        let dst = ctx.device_buffer(span)?;
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as usize
        };
        // Both sides shuffled, as `bench --gather` draws them.
        let mut shuffled = || {
            let mut slots: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                slots.swap(i, rnd() % (i + 1));
            }
            let at: Vec<usize> = slots.into_iter().map(|s| s * stride + rnd() % 64).collect();
            at
        };
        let (host, dev) = (shuffled(), shuffled());
        let pieces: Vec<(usize, usize, usize)> = (0..n).map(|i| (host[i], size, dev[i])).collect();
        let runs: Vec<_> = [true, false]
            .into_iter()
            .flat_map(|up| [(up, OverlapCheck::On), (up, OverlapCheck::Vouched)])
            .flat_map(|run| (0..gathers.len()).map(move |g| (run, g)))
            .collect();
        for ((up, check), at) in runs {
            let (thr, g) = &mut gathers[at];
            g.set_overlap_check(check);
            let mut cols: [Vec<f64>; 9] = Default::default();
            for rep in 0..16 {
                if *thr == "warm" {
                    std::hint::black_box(pieces.iter().map(|p| p.0 ^ p.2).sum::<usize>());
                }
                let first = match *thr == "hot" {
                    true => Some(match up {
                        true => g.upload_gather_mapped(&q, &dst, &src, &pieces, &[])?,
                        false => g.download_scatter_mapped(&q, &dst, &mut src, &pieces, &[])?,
                    }),
                    false => None,
                };
                let t0 = Instant::now();
                let e = match up {
                    true => g.upload_gather_mapped(&q, &dst, &src, &pieces, &[])?,
                    false => g.download_scatter_mapped(&q, &dst, &mut src, &pieces, &[])?,
                };
                let called = t0.elapsed().as_secs_f64() * 1e6;
                e.wait()?;
                drop(first);
                let wall = t0.elapsed().as_secs_f64() * 1e6;
                let p = e.profile()?;
                let us = |a: u64, b: u64| (b as f64 - a as f64) / 1e3;
                let (qd, sb) = (p.queued.unwrap(), p.submit.unwrap());
                let kernel = us(p.start, p.end);
                if rep > 0 {
                    cols[0].push(called);
                    cols[1].push(us(qd, sb));
                    cols[2].push(us(sb, p.start));
                    cols[3].push(kernel);
                    cols[4].push(wall - called - us(qd, p.end));
                    cols[5].push(wall);
                    let last = g.last_call();
                    cols[6].push(last.plan_s * 1e6);
                    cols[7].push(last.table_s * 1e6);
                    cols[8].push(last.launch_s * 1e6);
                }
            }
            let least = cols[0].iter().copied().fold(f64::INFINITY, f64::min);
            let m: Vec<f64> = cols.into_iter().map(median).collect();
            let dir = if up { "up" } else { "down" };
            let check = if check == OverlapCheck::On {
                "checked"
            } else {
                "vouched"
            };
            let gbps = (n * size) as f64 / m[5] / 1e3;
            println!("{n:>6} {size:>6} {dir:>4} {check:>7} {thr:>4} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {least:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {gbps:>7.1}", m[0], m[6], m[7], m[8], m[1], m[2], m[3], m[4], m[5]);
        }
    }
    table_writes(&ctx)?;
    driver_calls(&ctx, &q, "profiled")?;
    driver_calls(&ctx, &ctx.plain_queue()?, "plain")
}

/// What the driver's own calls of a launch cost: a kernel with the zero-copy kernels'
/// arguments (three buffers, a `ulong`, a `uint`) over 4,096 groups of 256 that return at
/// once: `clSetKernelArg` of each argument after the last call let go of its buffers (as a
/// zero-copy call does), then `clEnqueueNDRangeKernel` with them bound, `clFlush`, and the
/// wait; median and least µs of 200 (each waited for before the next), on `q`, a queue of
/// `kind` (with event profiling or without).
fn driver_calls(ctx: &Context, q: &Queue, kind: &str) -> Result<(), Box<dyn std::error::Error>> {
    let src = "__kernel void k(__global const uchar* a, __global uchar* b, __global const ulong* t, ulong n, uint m) { if (get_global_id(0) == n && m == 7) b[0] = a[0] + (uchar)t[0]; }";
    let program = ctx.build_program(src, "")?;
    let mut k = program.kernel("k")?;
    let (a, b, t) = (
        ctx.device_buffer(1 << 20)?,
        ctx.device_buffer(1 << 20)?,
        ctx.device_buffer(1 << 16)?,
    );
    let mut cols: [Vec<f64>; 4] = Default::default();
    for rep in 0..201 {
        let t0 = Instant::now();
        k.set_buffer(0, &a)?;
        k.set_buffer(1, &b)?;
        k.set_buffer(2, &t)?;
        k.set_bytes(3, &(u64::MAX - rep).to_ne_bytes())?;
        k.set_bytes(4, &(rep as u32).to_ne_bytes())?;
        let t1 = Instant::now();
        let e = q.launch(&k, 4096 * 256, Some(256), &[])?;
        let t2 = Instant::now();
        q.flush()?;
        let t3 = Instant::now();
        e.wait()?;
        let t4 = Instant::now();
        k.unbind_buffers();
        if rep > 0 {
            for (c, (x, y)) in cols
                .iter_mut()
                .zip([(t0, t1), (t1, t2), (t2, t3), (t3, t4)])
            {
                c.push((y - x).as_secs_f64() * 1e6);
            }
        }
    }
    println!(
        "\n{:>34} {:>9} {:>9}  ({kind} queue)",
        "driver call", "least us", "median us"
    );
    for (name, c) in [
        "clSetKernelArg x5 (3 buffers)",
        "clEnqueueNDRangeKernel",
        "clFlush",
        "the wait (empty kernel)",
    ]
    .into_iter()
    .zip(cols)
    {
        let least = c.iter().copied().fold(f64::INFINITY, f64::min);
        println!("{name:>34} {least:>9.1} {:>9.1}", median(c));
    }
    Ok(())
}

/// What writing a call's table costs by itself: 4,096 and 65,536 narrow rows (three `u32`s
/// each, as a zero-copy call writes them) into mapped memory, where the calls' tables lie,
/// and into ordinary memory, then copied into mapped memory at once; least and median µs of
/// 101 (the first not counted). Whether the mapped memory's own writes are the table's cost.
fn table_writes(ctx: &Context) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n{:>6} {:>22} {:>9} {:>9}",
        "rows", "written", "least us", "median us"
    );
    for rows in [4096usize, 65536] {
        let bytes = rows * 12;
        let mut mapped = HostRegion::mapped(ctx, bytes.next_power_of_two(), false)?;
        let mut plain = vec![0u32; rows * 3];
        let fill = |t: &mut [u32], k: u32| {
            for (i, r) in t.chunks_exact_mut(3).enumerate() {
                let i = std::hint::black_box(i as u32 ^ k);
                r.copy_from_slice(&[i, i.wrapping_mul(3), 4096]);
            }
        };
        for way in ["into mapped memory", "plain, then copied"] {
            let mut us = Vec::new();
            for k in 0..101u32 {
                let table = mapped.as_mut_slice().ok_or("the table is not contiguous")?;
                let words: &mut [u32] = bytemuck::cast_slice_mut(&mut table[..bytes]);
                let t0 = Instant::now();
                match way {
                    "into mapped memory" => fill(words, k),
                    _ => {
                        fill(&mut plain, k);
                        words.copy_from_slice(&plain);
                    }
                }
                std::hint::black_box(&words);
                if k > 0 {
                    us.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            let least = us.iter().copied().fold(f64::INFINITY, f64::min);
            println!("{rows:>6} {way:>22} {least:>9.1} {:>9.1}", median(us));
        }
    }
    Ok(())
}
