//! The batch copies (`BatchApi`) on PoCL (OpenCL's `Gather`) and, with feature `vulkan`, on
//! the machine's Vulkan device (lavapipe in CI): random piece lists both ways checked byte for
//! byte, calls cut into many batches, the refusals, the zero-copy calls or their refusal.
//! Without a device these tests fail, saying what to install.

#[path = "batch/checks.rs"]
mod checks;

use pinstream::backend::opencl::{default_device, devices, Context, OpenCl};
use pinstream::gather::GatherOptions;

fn context() -> Context {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    Context::new(default_device(&all).expect("an OpenCL device is needed")).unwrap()
}

/// A staging of 4 KiB and 8 rows: every call of many pieces is cut into many batches.
fn small() -> GatherOptions {
    GatherOptions {
        rows: 8,
        ..GatherOptions::for_capacity(4096)
    }
}

#[test]
fn opencl_moves_random_pieces_both_ways() {
    let ctx = context();
    for seed in 1..4 {
        checks::round_trip::<OpenCl>(&ctx, &GatherOptions::default(), seed, 300, 5000);
        checks::round_trip::<OpenCl>(&ctx, &small(), seed, 60, 9000);
    }
}

#[test]
fn opencl_refuses_as_the_gather_does() {
    checks::refusals::<OpenCl>(&context());
}

#[test]
fn opencl_zero_copy_moves_mapped_pieces() {
    checks::zero_copy::<OpenCl>(&context());
}

#[cfg(feature = "vulkan")]
mod vulkan {
    use super::{checks, small};
    use pinstream::backend::api::{Adapter, Instance};
    use pinstream::backend::vulkan::{Vulkan, VulkanDevice, VulkanInstance};
    use pinstream::gather::{BatchApi, GatherOptions};

    fn device() -> VulkanDevice {
        let inst = VulkanInstance::new()
            .unwrap_or_else(|e| panic!("{e}: apt-get install mesa-vulkan-drivers (lavapipe)"));
        inst.adapters().unwrap()[0].open().unwrap()
    }

    #[test]
    fn vulkan_moves_random_pieces_both_ways() {
        let dev = device();
        for seed in 1..4 {
            checks::round_trip::<Vulkan>(&dev, &GatherOptions::default(), seed, 300, 5000);
            checks::round_trip::<Vulkan>(&dev, &small(), seed, 60, 9000);
        }
        let batch = Vulkan::batch(&dev, &small()).unwrap();
        assert!(Vulkan::batch_way(&batch).contains("vkCmdCopyBuffer"));
        assert!(Vulkan::last_call(&batch).batches == 0, "no call yet");
    }

    #[test]
    fn vulkan_refuses_as_the_gather_does() {
        checks::refusals::<Vulkan>(&device());
    }

    #[test]
    fn vulkan_says_why_it_has_no_zero_copy() {
        checks::zero_copy::<Vulkan>(&device());
    }
}
