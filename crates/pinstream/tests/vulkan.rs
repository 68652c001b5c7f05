//! The Vulkan backend on the machine's Vulkan device (lavapipe in CI: `mesa-vulkan-drivers`):
//! devices listed, WGSL built, host memory pinned both ways, and the generic engine streaming
//! through it, checked element by element. Without Vulkan these tests fail, saying what to
//! install: they are never skipped.

use pinstream::backend::api::{Adapter, BuildError, Device, Instance, KernelError, Program};
use pinstream::backend::lanes::HostMemory;
use pinstream::backend::vulkan::{VkPinning, Vulkan, VulkanDevice, VulkanHost, VulkanInstance};
use pinstream::engine::kernels::{gemv_row_ref, mix_u32_ref, value, Builtins, GEMV_GROUP};
use pinstream::engine::{run, DType, Job, StreamOptions, WorkSize};
use pinstream::host::{HostApi, PinRequest, Pinned};

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
