//! The device a report is of, described the same way through every API.

use pinstream::backend::adapter::AdapterInfo;
use pinstream::backend::api::{Adapter, AdapterOf};
use pinstream::backend::details::{Details, DriverDetails};
use pinstream::backend::opencl::DeviceInfo;
use pinstream::host::HostApi;
use serde::{Serialize, Serializer};

/// The device a report is of: what every API says of it ([`AdapterInfo`]), and what its
/// driver says beyond that where the API has more to say ([`HostApi::driver_details`], kept
/// whatever the API as [`Details`]: OpenCL's [`DeviceInfo`]).
///
/// In JSON it is the driver's description where there is one, else the API's (the shape
/// reports have always had).
#[derive(Debug, Clone)]
pub struct DoctorDevice {
    /// What the API says.
    pub adapter: AdapterInfo,
    /// What its driver says beyond that, where the API has more to say.
    pub driver: Option<Details>,
}

impl DoctorDevice {
    /// `adapter` of `A`, as its API and its driver describe it.
    pub fn of<A: HostApi>(adapter: &AdapterOf<A>) -> Self {
        DoctorDevice {
            adapter: adapter.info(),
            driver: A::driver_details(adapter).map(Details::new),
        }
    }

    /// A device that its API alone describes.
    pub fn adapter(adapter: AdapterInfo) -> Self {
        DoctorDevice {
            adapter,
            driver: None,
        }
    }

    /// `INDEX: NAME (DRIVER, VERSION)`, as the report's first line names it (the version
    /// where the driver tells it).
    pub fn label(&self) -> String {
        match &self.driver {
            Some(d) => {
                let a = &self.adapter;
                format!(
                    "{}: {} ({}, {})",
                    a.index,
                    a.name,
                    a.driver,
                    d.driver_version()
                )
            }
            None => self.short_label(),
        }
    }

    /// What the device's driver says in `D`, the API's own description, where that API
    /// described it (OpenCL's sections of a report ask for its [`DeviceInfo`]).
    pub fn driver_as<D: DriverDetails>(&self) -> Option<&D> {
        self.driver.as_ref().and_then(Details::of_api)
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.adapter.name
    }

    /// The device's index in its API's list.
    pub fn index(&self) -> usize {
        self.adapter.index
    }

    /// `INDEX: NAME (DRIVER)`, as the demo and the bench name it.
    pub fn short_label(&self) -> String {
        self.adapter.label()
    }
}

impl From<DeviceInfo> for DoctorDevice {
    /// An OpenCL device, as OpenCL and its driver describe it.
    fn from(device: DeviceInfo) -> Self {
        DoctorDevice {
            adapter: device.info(),
            driver: Some(Details::new(device)),
        }
    }
}

impl Serialize for DoctorDevice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.driver {
            Some(d) => d.serialize(s),
            None => self.adapter.serialize(s),
        }
    }
}
