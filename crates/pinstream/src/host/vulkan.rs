//! Vulkan's pinned host memory as the memory layer sees it: [`HostApi`] for
//! [`Vulkan`], over the backend's [`VulkanHost`].

use super::{HostApi, HostError, PinOffer, PinRequest, PinState, Pinned};
use crate::backend::api::Device;
use crate::backend::lanes::HostMemory;
use crate::backend::pinning::CallerRange;
use crate::backend::vulkan::{
    host_error, Caps, VkPinning, Vulkan, VulkanAdapter, VulkanBuffer, VulkanDevice, VulkanHost,
};
use crate::vram::VramProbe;
use std::time::Duration;

/// NVIDIA's PCI vendor id.
const NVIDIA: u32 = 0x10de;

impl Pinned for VulkanHost {
    fn pinning_name(&self) -> String {
        self.pinning().to_string()
    }

    fn reason(&self) -> String {
        match self.pinning() {
            VkPinning::Import if self.is_registered() => {
                "the caller's pages imported with VK_EXT_external_memory_host (no device memory)"
                    .into()
            }
            VkPinning::Import => {
                "pinstream's own pages imported with VK_EXT_external_memory_host (no device memory)"
                    .into()
            }
            VkPinning::HostVisible => {
                "the driver's host-visible memory, mapped (ggml's way)".into()
            }
        }
    }

    fn places_pages(&self) -> bool {
        false
    }

    fn pin_state(&self) -> PinState {
        VulkanHost::pin_state(self)
    }

    fn pin_time(&self) -> Duration {
        VulkanHost::pin_time(self)
    }

    fn chunk_count(&self) -> usize {
        VulkanHost::chunk_count(self)
    }

    fn is_contiguous(&self) -> bool {
        self.pinning() == VkPinning::Import || self.chunk_count() == 1
    }

    fn zero_copy(&self) -> Option<String> {
        self.is_mapped().then(|| mechanism(self.pinning()).into())
    }
}

/// The name of mapped memory's mechanism when pinned by `pinning`.
pub fn mechanism(pinning: VkPinning) -> &'static str {
    match pinning {
        VkPinning::Import => "vk-import-host",
        VkPinning::HostVisible => "vk-host-visible",
    }
}

/// For listings: how kernels read mapped memory on a device of `caps` in place, and why that
/// stays in host memory (no VRAM copy).
fn mapped_report(caps: &Caps) -> (Option<String>, String) {
    let binding = crate::units::Bytes(caps.max_storage_range);
    let (pinning, basis) = match caps.import_alignment {
        Some(_) => (VkPinning::Import, "pinstream's pages imported with VK_EXT_external_memory_host, bound as storage buffers: kernels read host memory across the bus, no VRAM copy"),
        None => (VkPinning::HostVisible, "the driver does not offer VK_EXT_external_memory_host, so its host-visible memory (not device-local where it offers a choice), bound as storage buffers: kernels read it across the bus"),
    };
    let chunks = format!("one binding per chunk of at most {binding} (maxStorageBufferRange)");
    (
        Some(mechanism(pinning).into()),
        format!("{basis}; {chunks}"),
    )
}

/// Why a device of `caps` cannot import host memory, where it cannot.
fn no_import(caps: &Caps) -> Option<String> {
    caps.import_alignment
        .is_none()
        .then(|| crate::backend::vulkan::NO_IMPORT.to_string())
}

/// What a device offers for pinning ([`HostApi::offer`]): import unless `no_import` says
/// why not, and its host-visible memory always.
fn offer_of(no_import: Option<String>) -> PinOffer<VkPinning> {
    let host_visible = VkPinning::HostVisible;
    match no_import {
        None => PinOffer {
            offered: vec![VkPinning::Import, host_visible],
            lacking: Vec::new(),
            default: Some(VkPinning::Import),
            why: "pinstream's own pages imported with VK_EXT_external_memory_host: no device memory spent".into(),
        },
        Some(why) => PinOffer {
            offered: vec![host_visible],
            default: Some(host_visible),
            why: format!("{why}, so the driver's host-visible memory"),
            lacking: vec![(VkPinning::Import, why)],
        },
    }
}

impl HostApi for Vulkan {
    type HostMemory = VulkanHost;
    type Pinning = VkPinning;
    /// Vulkan says of a device what every API says ([`crate::backend::adapter::AdapterInfo`]).
    type Details = crate::backend::details::NoDetails;

    fn vram(device: &VulkanDevice) -> VramProbe {
        let info = device.info();
        match &info.pci_address {
            Some(bus) if device.caps().vendor == NVIDIA => VramProbe::nvidia(bus, &info.name),
            _ => match device.budget_reader() {
                Some(read) => VramProbe::vulkan_budget(read),
                None => VramProbe::none(
                    "the driver offers no VK_EXT_memory_budget, and NVML reads NVIDIA GPUs only",
                ),
            },
        }
    }

    fn pin(
        device: &VulkanDevice,
        bytes: usize,
        request: PinRequest<'_, Self>,
    ) -> Result<VulkanHost, HostError> {
        super::check_size(bytes)?;
        if !request.shared_with.is_empty() {
            return Err(HostError::OneDevice {
                api: <Vulkan as crate::backend::api::Api>::NAME,
            });
        }
        let offer = Self::offer_on(device);
        let how = request
            .pinning
            .unwrap_or(offer.default.unwrap_or(VkPinning::HostVisible));
        if let Some((_, why)) = offer.lacking.into_iter().find(|(p, _)| *p == how) {
            return Err(HostError::Unsupported {
                pinning: how.to_string(),
                device: device.info().name,
                why,
            });
        }
        // Imports are one range of pinstream's pages; the driver's host-visible memory maps
        // one allocation at a time.
        let chunk = VulkanHost::chunk_bytes(device, how, request.max_chunk);
        if request.contiguous && how == VkPinning::HostVisible && bytes > chunk {
            return Err(HostError::NotContiguous {
                pinning: how.to_string(),
                bytes,
                chunk,
            });
        }
        VulkanHost::new(device, bytes, how, request.max_chunk)
            .map_err(|e| host_error(e, how, bytes))
    }

    /// Imported with `VK_EXT_external_memory_host` ([`VulkanHost::register`]); one device.
    fn register(
        device: &VulkanDevice,
        range: CallerRange,
        request: super::RegisterRequest,
    ) -> Result<VulkanHost, HostError> {
        range.check()?;
        // The neighbouring bytes the import's pages take in are checked there.
        VulkanHost::register(device, range, request.max_chunk)
    }

    #[cfg(feature = "baselines")]
    fn native_copies(device: &VulkanDevice) -> Option<&dyn crate::backend::native::NativeCopies> {
        Some(device)
    }

    fn up_front(_: &VulkanDevice, _: Option<VkPinning>) -> Option<String> {
        Some("through Vulkan (each chunk is imported or allocated whole)".into())
    }

    fn offer(adapter: &VulkanAdapter) -> PinOffer<VkPinning> {
        offer_of(no_import(&adapter.caps()))
    }

    /// As [`Self::offer`], with the device's own reason where it cannot import (a program's
    /// adopted device may lack the extension the driver offers).
    fn offer_on(device: &VulkanDevice) -> PinOffer<VkPinning> {
        offer_of(device.import_refusal())
    }

    /// Import where the driver offers it, else its host-visible memory, in chunks of one
    /// kernel binding each ([`VulkanHost::mapped`]). Its VRAM cost is not measured here (the
    /// VRAM probe measures it around the caller's use).
    fn mapped(device: &VulkanDevice, bytes: usize, _: bool) -> Result<VulkanHost, HostError> {
        super::check_size(bytes)?;
        let pinning = Self::default_pinning(device)
            .0
            .unwrap_or(VkPinning::HostVisible);
        VulkanHost::mapped(device, bytes, pinning, None).map_err(|e| host_error(e, pinning, bytes))
    }

    /// The one buffer over mapped memory of one chunk; memory of several chunks is refused
    /// ([`HostError::MappedInChunks`]: [`HostApi::device_buffers`] gives one per chunk).
    fn device_buffer(memory: &VulkanHost) -> Result<VulkanBuffer, HostError> {
        let mut all = Self::device_buffers(memory)?;
        match all.len() {
            1 => Ok(all.remove(0).1),
            chunks => Err(HostError::MappedInChunks {
                bytes: memory.len(),
                chunks,
                binding: all[0].0.len(),
            }),
        }
    }

    fn mapped_mechanism(adapter: &VulkanAdapter) -> (Option<String>, String) {
        mapped_report(&adapter.caps())
    }

    /// Mapped memory comes in chunks of one binding each: host memory is its limit.
    fn largest_mapped(_: &VulkanDevice) -> u64 {
        u64::MAX
    }

    /// One buffer covers one chunk of the memory [`Self::mapped`] makes
    /// ([`VulkanHost::mapped_chunk`]: one kernel binding).
    fn one_buffer_covers(device: &VulkanDevice, bytes: usize) -> Result<(), HostError> {
        let pinning = Self::default_pinning(device)
            .0
            .unwrap_or(VkPinning::HostVisible);
        let binding = VulkanHost::mapped_chunk(device, pinning, None)
            .map_err(|e| HostError::Backend(e.into()))?;
        match bytes > binding {
            true => Err(HostError::MappedInChunks {
                bytes,
                chunks: bytes.div_ceil(binding),
                binding,
            }),
            false => Ok(()),
        }
    }

    fn device_buffers(
        memory: &VulkanHost,
    ) -> Result<super::DeviceBuffers<VulkanBuffer>, HostError> {
        match memory.device_buffers() {
            Some(made) => made.map_err(|e| HostError::Backend(e.into())),
            None => Err(HostError::NoZeroCopy {
                why: format!("this Vulkan memory ({}) is not mapped: make it as mapped memory to hand it to kernels", memory.pinning()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{no_import, offer_of, Caps, VkPinning};

    fn caps(import_alignment: Option<u64>) -> Caps {
        Caps {
            api_version: 0,
            import_alignment,
            memory_budget: false,
            max_storage_range: 1 << 27,
            min_storage_offset: 16,
            max_buffer: 1 << 30,
            max_groups: [65535, 65535],
            max_group_size: 256,
            timestamp_period: 1.0,
            vendor: 0,
        }
    }

    #[test]
    fn a_device_that_imports_offers_import_first_and_lacks_nothing() {
        let offer = offer_of(no_import(&caps(Some(4096))));
        let want = vec![VkPinning::Import, VkPinning::HostVisible];
        assert_eq!(offer.offered, want);
        assert!(offer.lacking.is_empty());
        assert_eq!(offer.default, Some(VkPinning::Import));
    }

    #[test]
    fn a_device_without_the_import_extension_offers_host_visible_and_says_why() {
        let offer = offer_of(no_import(&caps(None)));
        assert_eq!(offer.offered, vec![VkPinning::HostVisible]);
        assert_eq!(offer.default, Some(VkPinning::HostVisible));
        let [(VkPinning::Import, why)] = &offer.lacking[..] else {
            panic!("{offer:?}");
        };
        assert!(why.contains("VK_EXT_external_memory_host"), "{why}");
        assert!(offer.why.starts_with(why.as_str()), "{}", offer.why);
    }
}
