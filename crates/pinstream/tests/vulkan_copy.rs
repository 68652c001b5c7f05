//! Every Vulkan copy way (`VkCopy`) on the machine's Vulkan device (lavapipe in CI): bytes
//! uploaded and downloaded across imported chunks, at aligned and odd offsets, checked byte
//! by byte, and each copy timed. Without Vulkan these tests fail, saying what to install.

use pinstream::backend::api::{Adapter, Device, Instance, Program};
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView};
use pinstream::backend::vulkan::{
    VkCopy, VkOptions, VkPinning, Vulkan, VulkanDevice, VulkanInstance,
};
use pinstream::engine::{run, Job};
use pinstream::host::{HostApi, PinRequest};
use pinstream_lab::kernels::{mix_u32_ref, Builtins};

mod common;

fn device(way: VkCopy) -> VulkanDevice {
    device_with(VkOptions {
        copy: way,
        ..VkOptions::default()
    })
}

fn device_with(options: VkOptions) -> VulkanDevice {
    let inst = VulkanInstance::new()
        .unwrap_or_else(|e| panic!("{e}: apt-get install mesa-vulkan-drivers (lavapipe)"));
    let dev = inst.with_options(options).adapters().unwrap()[0]
        .open()
        .unwrap();
    assert_eq!(dev.copy_way().0, options.copy);
    dev
}

/// `n` bytes `i * 7 + seed` (mod 251) in the first half of imported memory pinned in chunks
/// of 1 MiB, zeros in the second; uploads `range` of the first half into a device buffer at
/// `at`, downloads it back into the second half at the same range, and checks every byte.
fn round_trip(way: VkCopy, range: std::ops::Range<usize>, at: usize) {
    round_trip_on(&device(way), range, at);
}

fn round_trip_on(dev: &VulkanDevice, range: std::ops::Range<usize>, at: usize) {
    let way = dev.copy_way().0;
    let n = (3 << 20) + 4096;
    let request = PinRequest {
        pinning: Some(VkPinning::Import),
        max_chunk: Some(1 << 20),
        ..PinRequest::default()
    };
    let mut host = Vulkan::pin(dev, 2 * n, request).unwrap();
    let mut i = 0usize;
    for s in host.slices_mut(0..2 * n).unwrap() {
        for b in s {
            *b = if i < n { (i * 7 % 251) as u8 } else { 0 };
            i += 1;
        }
    }
    let buf = dev.allocate(n + at).unwrap();
    let back = range.start + n..range.end + n;
    {
        let view = HostView::of_mut(&mut host);
        let ran = copies_in_flight::<Vulkan, _>(dev, 2, |lanes| {
            let up = lanes.upload(0, &buf, at, &view, range.clone(), &[])?;
            let last: Vec<_> = up.iter().collect();
            let down = lanes.download(1, &view, back.clone(), &buf, at, &last)?;
            for e in up.iter().chain(&down) {
                let p = lanes.profile(e, &up[0])?;
                assert!(p.start <= p.end, "{way}: {p:?}");
            }
            Ok::<_, pinstream::backend::vulkan::VulkanError>(())
        });
        ran.unwrap().unwrap();
    }
    let all = host.slices(0..2 * n).unwrap().concat();
    for j in 0..n {
        let want = if range.contains(&j) { all[j] } else { 0 };
        assert_eq!(all[n + j], want, "{way}: byte {j} of {range:?} at {at}");
    }
}

#[test]
fn every_copy_way_moves_whole_chunks_and_crosses_them() {
    for way in VkCopy::ALL {
        round_trip(way, 0..(3 << 20) + 4096, 0);
    }
}

#[test]
fn every_copy_way_moves_odd_offsets_and_lengths() {
    for way in VkCopy::ALL {
        round_trip(way, 5..(3 << 20) - 3, 37);
        round_trip(way, 16..(2 << 20) + 48, 64);
    }
}

/// Imported memory kept on base pages (`VkOptions::huge_pages` off: the H200's measure of
/// 2 MiB against 4 KiB pages) is imported and copied like the default's.
#[test]
fn imports_on_base_pages_copy_too() {
    let options = VkOptions {
        huge_pages: false,
        ..VkOptions::default()
    };
    round_trip_on(&device_with(options), 5..(3 << 20) - 3, 37);
}

#[test]
fn the_copy_way_names_its_queues() {
    let (way, text) = device(VkCopy::Split).copy_way();
    assert_eq!(way, VkCopy::Split);
    assert!(
        text.starts_with("split (vkCmdCopyBuffer; uploads on 2 queue(s)"),
        "{text}"
    );
    let (_, text) = device(VkCopy::Shader).copy_way();
    assert!(text.contains("a compute-shader copy"), "{text}");
    let (_, text) = device(VkCopy::Mixed).copy_way();
    assert!(
        text.starts_with("mixed (vkCmdCopyBuffer up, a compute-shader copy down"),
        "{text}"
    );
    // Auto names both of its places where the device has a transfer-only family; lavapipe
    // has none, so its copies stay on the compute family as transfer's do there.
    let (_, text) = device(VkCopy::Crossed).copy_way();
    assert!(
        text.starts_with("crossed (a compute-shader copy up, vkCmdCopyBuffer down"),
        "{text}"
    );
    let (way, text) = device(VkCopy::Auto).copy_way();
    assert_eq!(way, VkCopy::Auto);
    assert!(
        text.starts_with("auto (vkCmdCopyBuffer; ")
            && (text.contains("while the other has no copy in flight")
                || text.contains("uploads on 1 queue(s)")),
        "{text}"
    );
}

#[test]
fn the_engine_streams_in_place_with_each_copy_way() {
    let n = (2 << 20) + 4096;
    for way in VkCopy::ALL {
        let dev = device(way);
        let mut k = dev
            .build(Vulkan::MIX_U32, "")
            .unwrap()
            .kernel("mix_u32")
            .unwrap();
        let request = PinRequest {
            pinning: Some(VkPinning::Import),
            max_chunk: Some(1 << 20),
            ..PinRequest::default()
        };
        let mut x = Vulkan::pin(&dev, n, request).unwrap();
        let mut i = 0u32;
        for s in x.slices_mut(0..n).unwrap() {
            for v in bytemuck::cast_slice_mut::<u8, u32>(s) {
                *v = i ^ 0x5a5a;
                i += 1;
            }
        }
        let job = Job {
            in_place: Some(&mut x),
            ..Job::default()
        };
        run(&dev, &mut k, job, &common::u32_opts(320 << 10), &|_, _| {}).unwrap();
        let mut i = 0u32;
        for s in x.slices(0..n).unwrap() {
            for v in bytemuck::cast_slice::<u8, u32>(s) {
                assert_eq!(
                    *v,
                    mix_u32_ref(i ^ 0x5a5a, u64::from(i)),
                    "{way}: element {i}"
                );
                i += 1;
            }
        }
    }
}
