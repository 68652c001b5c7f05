//! `HostApi::offer`, asked of an adapter, against what the opened device says
//! (`pinnings`, `lacking`, `default_pinning`): listings ask the one, pins the other.

use pinstream::backend::api::{Adapter, Instance};
use pinstream::host::HostApi;

/// For every adapter of `instance`: the offer equals the opened device's answers, the way
/// chosen is one offered, and no way lacking is offered. Returns how many adapters it saw.
pub fn offer_matches_the_opened_device<A: HostApi>(instance: &A::Instance) -> usize {
    let adapters = instance.adapters().expect("the API lists its devices");
    for adapter in &adapters {
        let offer = A::offer(adapter);
        let device = adapter.open().expect("the device opens");
        assert_eq!(offer.offered, A::pinnings(&device), "{}", A::NAME);
        assert_eq!(offer.lacking, A::lacking(&device), "{}", A::NAME);
        let chosen = A::default_pinning(&device);
        assert_eq!((offer.default, offer.why.clone()), chosen, "{}", A::NAME);
        let default = offer.default.expect("a way chosen");
        assert!(offer.offered.contains(&default), "{offer:?}");
        assert!(!offer.why.is_empty(), "{offer:?}");
        for (way, why) in &offer.lacking {
            assert!(!offer.offered.contains(way), "{offer:?}");
            assert!(!why.is_empty(), "{offer:?}");
        }
    }
    adapters.len()
}
