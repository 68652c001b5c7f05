//! The Vulkan backend on the machine's Vulkan device (lavapipe in CI: `mesa-vulkan-drivers`):
//! devices listed, WGSL built, host memory pinned both ways, and the generic engine streaming
//! through it, checked element by element. Without Vulkan these tests fail, saying what to
//! install: they are never skipped.

use pinstream::backend::api::{Adapter, BuildError, Device, Instance, KernelError, Program};
use pinstream::backend::lanes::HostMemory;
use pinstream::backend::vulkan::{VkPinning, Vulkan, VulkanDevice, VulkanHost, VulkanInstance};
use pinstream::engine::{run, DType, Job, Residency, StreamOptions, WorkSize};
use pinstream::host::{HostApi, PinRequest, Pinned};
use pinstream_lab::kernels::{gemv_row_ref, mix_u32_ref, value, Builtins, GEMV_GROUP};

mod common;

fn device() -> VulkanDevice {
    let inst = VulkanInstance::new().unwrap_or_else(|e| {
        panic!(
            "{e}: these tests need a Vulkan device: apt-get install mesa-vulkan-drivers (lavapipe)"
        )
    });
    let adapters = inst.adapters().unwrap();
    assert!(
        !adapters.is_empty(),
        "the Vulkan loader lists no device: apt-get install mesa-vulkan-drivers"
    );
    adapters[0].open().unwrap()
}

fn pin(dev: &VulkanDevice, bytes: usize, how: VkPinning, max_chunk: usize) -> VulkanHost {
    let request = PinRequest {
        pinning: Some(how),
        max_chunk: Some(max_chunk),
        ..PinRequest::default()
    };
    Vulkan::pin(dev, bytes, request).unwrap()
}

/// Streams mix_u32 in place over `n` bytes pinned `how` in chunks of `chunk`, in blocks of
/// `block`, and checks every element.
fn stream_in_place(how: VkPinning, n: usize, chunk: usize, block: usize) -> VulkanHost {
    let dev = device();
    let mut kernel = dev
        .build(Vulkan::MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let mut x = pin(&dev, n, how, chunk);
    let mut i = 0u32;
    for s in x.slices_mut(0..n).unwrap() {
        for v in bytemuck::cast_slice_mut::<u8, u32>(s) {
            *v = i ^ 0xabcd;
            i += 1;
        }
    }
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let r = run(&dev, &mut kernel, job, &common::u32_opts(block), &|_, _| {}).unwrap();
    assert_eq!(r.blocks, n.div_ceil(block));
    let mut i = 0u32;
    for s in x.slices(0..n).unwrap() {
        for v in bytemuck::cast_slice::<u8, u32>(s) {
            assert_eq!(*v, mix_u32_ref(i ^ 0xabcd, u64::from(i)), "element {i}");
            i += 1;
        }
    }
    x
}

#[test]
fn lavapipe_is_listed_with_its_limits() {
    let inst = VulkanInstance::new().expect("install mesa-vulkan-drivers");
    let info = inst.adapters().unwrap()[0].info();
    assert_eq!(info.api, "Vulkan");
    assert!(
        info.max_alloc > 0 && info.memory >= info.max_alloc,
        "{info:?}"
    );
}

#[test]
fn imported_memory_streams_in_place_across_chunks() {
    // Blocks of 384 KiB over chunks of 1 MiB: some copies cross two imports.
    let x = stream_in_place(VkPinning::Import, 6 << 20, 1 << 20, 384 << 10);
    assert_eq!(x.chunk_count(), 6);
    assert_eq!(x.pinning_name(), "import");
}

#[test]
fn host_visible_memory_streams_in_place_across_chunks() {
    let x = stream_in_place(VkPinning::HostVisible, (3 << 20) + 4096, 1 << 20, 640 << 10);
    assert_eq!(x.chunk_count(), 4);
    assert!(!x.is_contiguous());
}

#[test]
fn gemv_over_f16_matches_the_cpu_reference() {
    // Even rows: whole words per thread; odd rows start mid-word: half by half.
    gemv_matches(1000, 512);
    gemv_matches(999, 301);
}

fn gemv_matches(rows: usize, cols: usize) {
    let dev = device();
    let mut w = pin(&dev, rows * cols * 2, VkPinning::Import, 1 << 20);
    let wv: Vec<half::f16> = (0..rows * cols)
        .map(|i| half::f16::from_f32((value(3, i as u64) % 2001) as f32 / 1000.0 - 1.0))
        .collect();
    let xv: Vec<f32> = (0..cols)
        .map(|i| (value(4, i as u64) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    fill(&mut w, bytemuck::cast_slice(&wv));
    let mut x = pin(&dev, cols * 4, VkPinning::HostVisible, 1 << 20);
    fill(&mut x, bytemuck::cast_slice(&xv));
    let mut y = pin(&dev, rows * 4, VkPinning::Import, 1 << 20);
    let mut k = dev
        .build(Vulkan::GEMV_F16, "")
        .unwrap()
        .kernel("gemv_f16")
        .unwrap();
    let o = StreamOptions {
        dtype: DType::F16,
        out_dtype: DType::F32,
        in_per_out: cols,
        block_bytes: 64 * cols * 2,
        work: WorkSize {
            per_output: true,
            items_per: GEMV_GROUP,
            local: Some(GEMV_GROUP),
        },
        ..common::u32_opts(1 << 20)
    };
    let job = Job {
        inputs: vec![&w],
        output: Some(&mut y),
        residents: vec![&x],
        args: vec![("cols".into(), cols.to_string())],
        ..Job::default()
    };
    let rep = run(&dev, &mut k, job, &o, &|_, _| {}).unwrap();
    assert_eq!(rep.blocks, rows.div_ceil(64));
    let got: Vec<f32> = y
        .slices(0..rows * 4)
        .unwrap()
        .concat()
        .chunks(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    for (r, g) in got.iter().enumerate() {
        let (want, scale) = gemv_row_ref(&wv[r * cols..(r + 1) * cols], &xv);
        assert!(
            (f64::from(*g) - want).abs() <= 1e-5 * scale + 1e-6,
            "row {r}: {g} vs {want}"
        );
    }
}

fn fill(m: &mut VulkanHost, bytes: &[u8]) {
    let mut at = 0;
    for s in m.slices_mut(0..bytes.len()).unwrap() {
        s.copy_from_slice(&bytes[at..at + s.len()]);
        at += s.len();
    }
}

#[test]
fn wgsl_mistakes_come_back_with_the_line() {
    let dev = device();
    let e = dev
        .build(
            "@compute @workgroup_size(1) fn k() { let a: u32 = 1.5; }",
            "",
        )
        .err()
        .unwrap();
    assert!(
        matches!(&e, BuildError::Source(log) if log.contains(":1:")),
        "{e}"
    );
    assert!(matches!(dev.build("", ""), Err(BuildError::Source(_))));
    assert!(matches!(
        dev.build(Vulkan::MIX_U32, "-O3"),
        Err(BuildError::Options(_))
    ));
    let p = dev.build(Vulkan::MIX_U32, "").unwrap();
    assert_eq!(p.kernel_names(), ["mix_u32"]);
    assert!(matches!(
        p.kernel("other"),
        Err(KernelError::NotDefined { .. })
    ));
}

/// Buffers in binding order, then the immediate struct's members; a `vec2<u32>` member is a
/// 64-bit count (`ulong`), which WGSL has no scalar for.
#[test]
fn kernel_parameters_follow_the_binding_convention() {
    let dev = device();
    let k = dev
        .build(Vulkan::GEMV_F16, "")
        .unwrap()
        .kernel("gemv_f16")
        .unwrap();
    let params = pinstream::backend::api::Kernel::params(&k).unwrap();
    let names: Vec<_> = params
        .iter()
        .map(|p| format!("{} {}", p.type_name, p.name))
        .collect();
    assert_eq!(
        names,
        [
            "uint* w",
            "float* y",
            "float* x",
            "uint n",
            "uint block",
            "ulong offset",
            "uint cols"
        ]
    );
}

/// Where the driver offers VK_EXT_memory_budget (NVIDIA's does; lavapipe 22.3 does not), an
/// allocation shows in its reading; where it does not, the probe says so.
#[test]
fn device_memory_in_use_is_read_from_the_memory_budget_where_offered() {
    let dev = device();
    let Some(read) = dev.budget_reader() else {
        let probe = Vulkan::vram(&dev);
        assert_eq!(probe.source(), pinstream::vram::VramSource::Unknown);
        assert!(probe.note().unwrap().contains("VK_EXT_memory_budget"));
        return;
    };
    let before = read().unwrap();
    let buffer = dev.allocate(64 << 20).unwrap();
    let during = read().unwrap();
    drop(buffer);
    assert!(during >= before + (64 << 20), "{before} -> {during}");
    assert!(read().unwrap() < during);
}

/// Host bytes not pinned with the device (a plain vector) go through a staging buffer both
/// ways; the copies are ordered by the events they wait on, across two queues, and profiled.
#[test]
fn unpinned_bytes_go_through_staging_in_order_across_queues() {
    use pinstream::backend::lanes::{copies_in_flight, HostView};
    let dev = device();
    let n = (1 << 20) + 12;
    let src: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    let mut back = vec![0u8; n];
    let buffer = dev.allocate(n).unwrap();
    let (reading, writing) = (
        HostView::reading(vec![&src]),
        HostView::writing(vec![&mut back]),
    );
    copies_in_flight::<Vulkan, _>(&dev, 2, |l| {
        let up = l.upload(0, &buffer, 0, &reading, 0..n, &[]).unwrap();
        let down = l
            .download(1, &writing, 0..n, &buffer, 0, &[&up[0]])
            .unwrap();
        l.wait(&down[0]).unwrap();
        let p = l.profile(&down[0], &up[0]).unwrap();
        assert!(p.end >= p.start, "{p:?}");
    })
    .unwrap();
    drop(writing);
    assert!(back == src, "the bytes came back unchanged");
}

/// Launches `kernel` over `global` invocations with `buffers` and `values` at their
/// parameter indices, and waits for it.
fn launch_once(
    dev: &VulkanDevice,
    kernel: &mut pinstream::backend::vulkan::VulkanKernel,
    buffers: &[(u32, &pinstream::backend::vulkan::VulkanBuffer)],
    values: &[(u32, &[u8])],
    global: usize,
) {
    let size = pinstream::backend::api::LaunchSize {
        global,
        local: None,
    };
    pinstream::backend::lanes::in_flight::<Vulkan, _>(dev, kernel, 1, |lanes| {
        let e = lanes.launch(0, buffers, values, size, &[]).unwrap();
        lanes.wait(&e).unwrap();
    })
    .unwrap();
}

fn builtin(
    dev: &VulkanDevice,
    source: Option<&str>,
    entry: &str,
) -> pinstream::backend::vulkan::VulkanKernel {
    dev.build(source.expect("Vulkan has the built-in"), "")
        .unwrap()
        .kernel(entry)
        .unwrap()
}

/// Mapped memory in several chunks (one binding each): the write kernel writes every word of
/// each chunk in place and the read kernel's XOR of each chunk matches the CPU's, both ways
/// of pinning.
#[test]
fn mapped_memory_is_written_and_read_in_place_chunk_by_chunk() {
    let dev = device();
    let mut write = builtin(&dev, Vulkan::MAPPED_STREAM, "mapped_write");
    let mut read = builtin(&dev, Vulkan::MAPPED_STREAM, "mapped_read");
    let items = 4096;
    let sums = Vulkan::mapped(&dev, items * 4, false).unwrap();
    let out = Vulkan::device_buffer(&sums).unwrap();
    for how in [VkPinning::Import, VkPinning::HostVisible] {
        let bytes = (3 << 20) + (64 << 10);
        let m = VulkanHost::mapped(&dev, bytes, how, Some(1 << 20)).unwrap();
        let want = match how {
            VkPinning::Import => "vk-import-host",
            VkPinning::HostVisible => "vk-host-visible",
        };
        assert_eq!(m.zero_copy().as_deref(), Some(want));
        let bufs = Vulkan::device_buffers(&m).unwrap();
        let ranges: Vec<_> = bufs.iter().map(|b| b.0.clone()).collect();
        assert_eq!(
            ranges,
            [
                0..1 << 20,
                1 << 20..2 << 20,
                2 << 20..3 << 20,
                3 << 20..bytes
            ],
            "{how}"
        );
        for (k, (range, buf)) in bufs.iter().enumerate() {
            let (n, salt) = (
                (range.len() as u64 / 16).to_ne_bytes(),
                (k as u32 + 7).to_ne_bytes(),
            );
            launch_once(&dev, &mut write, &[(0, buf)], &[(1, &n), (2, &salt)], items);
            launch_once(&dev, &mut read, &[(0, buf), (1, &out)], &[(2, &n)], items);
            let got = &m.slices(range.clone()).unwrap().concat();
            let mut xor = 0;
            for (w, word) in got.chunks_exact(16).enumerate() {
                let want = pinstream_lab::kernels::mapped_word(w as u64, k as u32 + 7);
                let word: &[u32] = bytemuck::cast_slice(word);
                assert_eq!(word, want, "{how}: chunk {k}, word {w}");
                xor ^= want.iter().fold(0, |a, b| a ^ b);
            }
            let s = sums.slices(0..items * 4).unwrap().concat();
            let kernel_xor = bytemuck::cast_slice::<u8, u32>(&s)
                .iter()
                .fold(0, |a, b| a ^ b);
            assert_eq!(kernel_xor, xor, "{how}: chunk {k}");
        }
    }
}

/// The buffers keep mapped memory alive; memory of several chunks has no one buffer; memory
/// that is not mapped is refused.
#[test]
fn mapped_buffers_keep_the_memory_and_misuse_is_refused() {
    let dev = device();
    let m = VulkanHost::mapped(&dev, 2 << 20, VkPinning::Import, Some(1 << 20)).unwrap();
    let e = Vulkan::device_buffer(&m).err().unwrap().to_string();
    assert!(
        e.contains("lies in 2 buffers of at most 1 MiB (maxStorageBufferRange")
            && e.contains("ask for at most 1 MiB per allocation"),
        "{e}"
    );
    let bufs = Vulkan::device_buffers(&m).unwrap();
    drop(m);
    // The pages are still imported and mapped: the kernel writes into them.
    let mut write = builtin(&dev, Vulkan::MAPPED_STREAM, "mapped_write");
    let n = ((1u64 << 20) / 16).to_ne_bytes();
    launch_once(
        &dev,
        &mut write,
        &[(0, &bufs[1].1)],
        &[(1, &n), (2, &[1, 0, 0, 0])],
        4096,
    );
    drop(bufs);
    let pinned = pin(&dev, 1 << 20, VkPinning::Import, 1 << 20);
    assert_eq!(pinned.zero_copy(), None);
    let e = Vulkan::device_buffer(&pinned).err().unwrap().to_string();
    assert!(e.contains("is not mapped"), "{e}");
}

/// The embedding lookup over a table in chunks, four bindings per launch (the last repeated
/// where fewer are left; rows outside a launch's bindings skipped, the launch from row 0
/// writing and the next adding): 3 chunks in one launch, 6 (the last shorter) in two; the
/// sums equal the CPU's.
#[test]
fn the_embedding_bag_sums_a_chunked_table_as_the_cpu_does() {
    let dev = device();
    let mut k = builtin(&dev, Vulkan::EMBEDDING_BAG, "embedding_bag");
    assert_eq!(Vulkan::EMBEDDING_TABLES, 4);
    for (rows, chunk, chunks) in [(1536usize, 256usize << 10, 3usize), (1500, 128 << 10, 6)] {
        let (dim, bag, bags) = (128usize, 8usize, 300usize);
        let mut table =
            VulkanHost::mapped(&dev, rows * dim * 4, VkPinning::Import, Some(chunk)).unwrap();
        let values: Vec<f32> = (0..rows * dim)
            .map(|i| ((i * 37) % 1021) as f32 / 64.0 - 8.0)
            .collect();
        fill(&mut table, bytemuck::cast_slice(&values));
        let ids: Vec<u32> = (0..bags * bag)
            .map(|i| ((i * 7919) % rows) as u32)
            .collect();
        let mut id_mem = Vulkan::mapped(&dev, ids.len() * 4, false).unwrap();
        fill(&mut id_mem, bytemuck::cast_slice(&ids));
        let out_mem = Vulkan::mapped(&dev, bags * dim * 4, false).unwrap();
        let id_buf = Vulkan::device_buffer(&id_mem).unwrap();
        let out_buf = Vulkan::device_buffer(&out_mem).unwrap();
        let bufs = Vulkan::device_buffers(&table).unwrap();
        assert_eq!(bufs.len(), chunks);
        for group in bufs.chunks(4) {
            let first = (group[0].0.start / (dim * 4)) as u32;
            let per = (group[0].0.len() / (dim * 4)) as u32;
            let last = &group[group.len() - 1].1;
            let t: Vec<_> = (0..4)
                .map(|j| group.get(j).map_or(last, |b| &b.1))
                .collect();
            let (b32, d32) = ((bag as u32).to_ne_bytes(), (dim as u32).to_ne_bytes());
            let bags64 = (bags as u64).to_ne_bytes();
            let (f, p) = (first.to_ne_bytes(), per.to_ne_bytes());
            launch_once(
                &dev,
                &mut k,
                &[
                    (0, t[0]),
                    (1, t[1]),
                    (2, t[2]),
                    (3, t[3]),
                    (4, &id_buf),
                    (5, &out_buf),
                ],
                &[(6, &b32), (7, &d32), (8, &bags64), (9, &f), (10, &p)],
                bags * dim,
            );
        }
        let got = out_mem.slices(0..bags * dim * 4).unwrap().concat();
        let got: &[f32] = bytemuck::cast_slice(&got);
        for b in 0..bags {
            let want = pinstream_lab::kernels::embedding_bag_ref(
                &values,
                &ids[b * bag..(b + 1) * bag],
                dim,
            );
            assert_eq!(
                &got[b * dim..(b + 1) * dim],
                &want[..],
                "{chunks} chunks: bag {b}"
            );
        }
    }
}

/// Vulkan memory is pinned for one device: a request to share it with others is refused with
/// the library's own words, no front's flag (it reaches C and Python callers too; the CLI adds
/// its flags in its advice). Before, it said "stream through one device with --api vulkan".
#[test]
fn memory_shared_with_another_device_is_refused_naming_no_flag() {
    let (dev, other) = (device(), device());
    let request = PinRequest {
        shared_with: &[&other],
        ..PinRequest::default()
    };
    let Err(e) = Vulkan::pin(&dev, 1 << 20, request) else {
        panic!("memory shared with another device was pinned");
    };
    let text = e.to_string();
    assert!(
        text.contains("pinned for one device") && !text.contains("--"),
        "{text}"
    );
    assert!(
        matches!(e, pinstream::host::HostError::OneDevice { api: "Vulkan" }),
        "{e:?}"
    );
}

/// Passes through Vulkan (issue 36): three passes in place give mix_u32 applied three times,
/// with blocks resident or not, and later passes upload only the blocks not resident.
#[test]
fn passes_in_place_with_and_without_resident_blocks() {
    let dev = device();
    let mut kernel = dev
        .build(Vulkan::MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let (block, blocks) = (64 << 10, 12);
    let n = block * blocks;
    for residency in [Residency::Off, Residency::Auto] {
        let mut x = pin(&dev, n, VkPinning::Import, n);
        fill(
            &mut x,
            bytemuck::cast_slice(&(0..n as u32 / 4).collect::<Vec<_>>()),
        );
        let o = StreamOptions {
            // Lavapipe is a CPU device: the bounds guard doubles each slot.
            vram_budget: 16 * block as u64,
            passes: 3,
            residency,
            ..common::u32_opts(block)
        };
        let job = Job {
            in_place: Some(&mut x),
            ..Job::default()
        };
        let r = run(&dev, &mut kernel, job, &o, &|_, _| {}).unwrap();
        let kept = r.residency.blocks;
        assert_eq!(kept > 0, residency == Residency::Auto, "{}", r.residency);
        assert_eq!(r.pass_bytes[1].h2d, ((blocks - kept) * block) as u64);
        let got: Vec<u8> = x.slices(0..n).unwrap().concat();
        for (i, v) in bytemuck::cast_slice::<u8, u32>(&got).iter().enumerate() {
            let want = (0..3).fold(i as u32, |v, _| mix_u32_ref(v, i as u64));
            assert_eq!(*v, want, "element {i}, {residency:?}");
        }
    }
}

#[path = "common/registered.rs"]
mod registered;

/// `HostApi::register` through Vulkan: the caller's memory imported with
/// `VK_EXT_external_memory_host`, streamed in place in blocks of 64 KiB, back in the caller's
/// memory; lavapipe is a CPU device, so nothing needed pinning.
#[test]
fn the_callers_memory_is_imported_and_streams_both_ways() {
    let dev = device();
    let pin = registered::round_trip::<Vulkan>(&dev, 1 << 20, &common::u32_opts(64 << 10));
    let cpu = dev.info().kind == pinstream::backend::adapter::DeviceKind::Cpu;
    assert_eq!(pin == pinstream::host::PinState::NotNeeded, cpu, "{pin:?}");
}

/// A range 16 bytes into a page, registered in chunks of one page (the whole pages it
/// touches), streams in place through the device: copies find its bytes in the chunks.
#[test]
fn a_misaligned_range_in_chunks_streams_in_place() {
    let dev = device();
    let page = dev.caps().import_alignment.expect("an importing device") as usize;
    let request = pinstream::host::RegisterRequest {
        max_chunk: Some(page),
        measure_vram: false,
    };
    let n = 6 * page + 100 * 4;
    let opts = common::u32_opts(page);
    registered::round_trip_at::<Vulkan>(&dev, (16, n), request, &opts);
}

/// A range at any alignment is registered: the import covers the whole pages it touches, and
/// the memory is the caller's bytes alone, read and written in place.
#[test]
fn a_misaligned_range_is_registered_over_its_pages() {
    let dev = device();
    let mut owned = registered::Owned::new(128 << 10);
    let words = owned.words();
    words
        .iter_mut()
        .enumerate()
        .for_each(|(i, w)| *w = i as u32);
    let base: *mut u8 = words.as_mut_ptr().cast();
    let (at, len) = (16, (64 << 10) + 100);
    // SAFETY: bytes of `owned`, which outlives the registration.
    let range = unsafe { pinstream::host::CallerRange::new(base.wrapping_add(at), len) };
    let mut memory = Vulkan::register(&dev, range, Default::default()).expect("registered");
    assert_eq!(memory.len(), len);
    let first: Vec<u8> = memory.slices(0..8).unwrap().concat();
    assert_eq!(
        first,
        [4, 0, 0, 0, 5, 0, 0, 0],
        "the range's own first bytes"
    );
    memory.slices_mut(len - 4..len).unwrap()[0].fill(0xee);
    drop(memory);
    let tail = owned.words()[(at + len) / 4 - 1];
    assert_eq!(tail, 0xeeee_eeee, "written in place, at the range's end");
}

#[path = "common/offer.rs"]
mod offer;

/// What `pinstream devices --api vulkan` lists for pinning (`HostApi::offer`, of the
/// adapter) is what the opened device pins by.
#[test]
fn vulkan_offers_what_its_opened_devices_pin_by() {
    let instance =
        VulkanInstance::new().expect("a Vulkan device: apt-get install mesa-vulkan-drivers");
    assert!(offer::offer_matches_the_opened_device::<Vulkan>(&instance) > 0);
}
