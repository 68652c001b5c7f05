//! The library's adoption of a program's own Vulkan device, which the `psVkHost*` calls pin
//! through (`VulkanDevice::from_program`, then `HostApi` as every API's device): it pins by
//! import and by the driver's host-visible memory, registers the program's memory, has no
//! queues (refused, naming why), keeps the requests' chunk limits and contiguity, releases every buffer and memory it
//! made when dropped, and leaves the program's device alive and usable. On the first Vulkan
//! device (lavapipe in CI).
#![cfg(all(feature = "vulkan", target_os = "linux"))]

mod vk_common;

use ash::vk;
use pinstream::backend::api::Device;
use pinstream::backend::lanes::HostMemory as _;
use pinstream::backend::pinning::{CallerRange, PinState};
use pinstream::backend::vulkan::{VkPinning, Vulkan, VulkanDevice};
use pinstream::host::{HostApi, HostError, PinRequest, RegisterRequest};
use vk_common::{fake, Vk};

/// `dev` of `vk` adopted with `gipa`.
fn adopt(vk: &Vk, dev: &vk_common::Device, gipa: vk::PFN_vkGetInstanceProcAddr) -> VulkanDevice {
    let h = vk.args(dev, gipa);
    // SAFETY: live handles of this test, which outlive the adopted device.
    unsafe { VulkanDevice::from_program(gipa, h.instance, h.physical, h.device) }
        .expect("adopting the program's device")
}

#[test]
fn a_programs_device_pins_through_host_api_and_is_left_as_it_was() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    let gipa = fake::install(vk.gipa, vk.instance.handle());
    let dev = vk.device(true);
    let chunk = 1 << 20;
    {
        let device = adopt(&vk, &dev, gipa);
        let offer = <Vulkan as HostApi>::offer_on(&device);
        assert_eq!(offer.default, Some(VkPinning::Import), "{offer:?}");
        let queue = device
            .queue()
            .err()
            .expect("an adopted device has no queues");
        assert!(
            queue.to_string().contains("no queues of pinstream's"),
            "{queue}"
        );
        assert!(Device::copy_way(&device).is_none());
        let staged = device
            .staged_copies(4096)
            .err()
            .expect("no queues to copy on");
        assert!(
            staged.to_string().contains("no queues of pinstream's"),
            "{staged}"
        );
        assert!(
            device.copy_way().1.contains("no queues"),
            "{}",
            device.copy_way().1
        );

        let bytes = 3 * chunk + 100;
        let chunked = PinRequest {
            max_chunk: Some(chunk),
            contiguous: true,
            ..PinRequest::default()
        };
        let mut host = <Vulkan as HostApi>::pin(&device, bytes, chunked).expect("an import");
        assert_eq!(host.pinning(), VkPinning::Import);
        assert_eq!(host.chunk_count(), 4, "chunks of at most max_chunk");
        assert!(host.chunks().iter().all(|c| c.len <= chunk));
        assert_ne!(host.pin_state(), PinState::Unknown);
        host.slices_mut(0..bytes).unwrap()[0].fill(7);
        assert!(host.slices(0..4).unwrap()[0].iter().all(|&b| b == 7));

        let visible = PinRequest {
            pinning: Some(VkPinning::HostVisible),
            ..PinRequest::default()
        };
        let mapped = <Vulkan as HostApi>::pin(&device, 4096, visible).expect("host-visible");
        assert_eq!(mapped.pinning(), VkPinning::HostVisible);
        let page = pinstream::backend::os::page_size();
        // Host-visible chunks are whole pages: one pointer over more than one chunk is
        // refused, with a limit of one page and with a limit between pages (2.5 pages make
        // chunks of 2 pages, so 2 pages and 100 bytes would be two mappings).
        for (limit, bytes, chunk) in [
            (page, 2 * page, page),
            (5 * page / 2, 2 * page + 100, 2 * page),
        ] {
            let one_pointer = PinRequest {
                pinning: Some(VkPinning::HostVisible),
                max_chunk: Some(limit),
                contiguous: true,
                ..PinRequest::default()
            };
            let pieces = <Vulkan as HostApi>::pin(&device, bytes, one_pointer).err();
            let pieces = pieces.expect("host-visible memory of two chunks as one pointer");
            assert!(
                matches!(pieces, HostError::NotContiguous { chunk: c, .. } if c == chunk),
                "{limit}: {pieces}"
            );
        }

        let mut mine = vec![0u8; 3 * page];
        let at = (mine.as_mut_ptr() as usize).next_multiple_of(page);
        // SAFETY: two pages of `mine`, which outlives the registration.
        let range = unsafe { CallerRange::new(at as *mut u8, 2 * page) };
        let request = RegisterRequest {
            max_chunk: Some(page),
            measure_vram: false,
        };
        let reg = <Vulkan as HostApi>::register(&device, range, request).expect("registered");
        assert_eq!(reg.pinning(), VkPinning::Import);
        assert_eq!(reg.chunk_count(), 2, "chunks of at most one page");
        drop((host, mapped, reg));
        assert_eq!(fake::live(), (0, 0), "buffers or memory left by the pins");
    }
    // The program's device is still its own: the adopted one waited on nothing and destroyed
    // nothing of it (every call went through the fake, which counts those).
    assert_eq!(
        fake::owner_calls(),
        0,
        "waited on or destroyed the program's objects"
    );
    let again = adopt(&vk, &dev, gipa);
    let host = <Vulkan as HostApi>::pin(&again, 4096, PinRequest::default()).expect("again");
    drop((host, again));
    assert_eq!(fake::live(), (0, 0));
    assert_eq!(
        fake::owner_calls(),
        0,
        "the second adoption waited or destroyed"
    );
}

#[test]
fn a_device_made_without_the_import_extension_says_so_and_pins_host_visible() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    let dev = vk.device(false);
    let device = adopt(&vk, &dev, vk.gipa);
    let offer = <Vulkan as HostApi>::offer_on(&device);
    assert_eq!(offer.default, Some(VkPinning::HostVisible), "{offer:?}");
    let why = device.import_refusal().expect("no import");
    if why.contains("does not offer") {
        return pinstream_testkit::skip("this driver offers no VK_EXT_external_memory_host");
    }
    assert!(why.contains("created without it"), "{why}");
    assert!(offer.why.starts_with(&why), "{}", offer.why);
    let import = PinRequest {
        pinning: Some(VkPinning::Import),
        ..PinRequest::default()
    };
    let refused = <Vulkan as HostApi>::pin(&device, 4096, import)
        .err()
        .expect("refused");
    assert!(
        refused.to_string().contains("created without it"),
        "{refused}"
    );
    let host = <Vulkan as HostApi>::pin(&device, 4096, PinRequest::default()).expect("pinned");
    assert_eq!(host.pinning(), VkPinning::HostVisible);
}
