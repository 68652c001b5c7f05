//! What an adapter offers for pinning (`HostApi::offer`, which `pinstream devices` lists)
//! is what its opened device pins by, on the default OpenCL platform (PoCL in CI), the
//! empty API and the empty API with faults. Vulkan's is in `vulkan.rs` (it needs the
//! feature).

use pinstream::backend::api::Instance;
use pinstream::backend::empty::{Empty, EmptyInstance};
use pinstream::backend::fault::{Faulty, FaultyInstance};
use pinstream::backend::opencl::{ClInstance, OpenCl};

#[path = "common/offer.rs"]
mod offer;

#[test]
fn opencl_offers_what_its_opened_devices_pin_by() {
    let instance = ClInstance::new().expect("an OpenCL platform (PoCL in CI)");
    assert!(offer::offer_matches_the_opened_device::<OpenCl>(&instance) > 0);
}

#[test]
fn the_empty_api_offers_its_heap_with_or_without_faults() {
    let seen =
        offer::offer_matches_the_opened_device::<Empty>(&EmptyInstance::new_with(2, 1 << 20));
    assert_eq!(seen, 2);
    let faulty = FaultyInstance::<Empty>::with_fault(EmptyInstance::new_with(1, 1 << 20), None);
    assert_eq!(
        offer::offer_matches_the_opened_device::<Faulty<Empty>>(&faulty),
        1
    );
}
