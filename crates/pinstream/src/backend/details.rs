//! What a device's driver says of it beyond [`AdapterInfo`](super::adapter::AdapterInfo),
//! whatever the API. Each API names its own description ([`crate::host::HostApi::Details`]:
//! OpenCL's [`DeviceInfo`](super::opencl::DeviceInfo), with its platform, versions and
//! extensions; [`NoDetails`] where the API says no more), as wgpu-hal gives each backend its
//! own associated types. [`Details`] holds any API's description, so that reports and listings
//! are written once: its fields in JSON (in the order its type declares them), its driver's
//! version for labels, and the API's own type for the sections only that API has
//! ([`Details::of_api`], as wgpu's `as_hal`). A leaf module: plain data, no driver calls.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use std::any::Any;
use std::fmt::{self, Debug};
use std::sync::Arc;

/// An API's own description of a device, beyond what every API says of it.
pub trait DriverDetails: Serialize + Debug + Send + Sync + 'static {
    /// The driver's version, as the driver writes it.
    fn driver_version(&self) -> &str;
}

/// The description of an API whose driver says nothing beyond
/// [`AdapterInfo`](super::adapter::AdapterInfo): there is none to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum NoDetails {}

impl DriverDetails for NoDetails {
    fn driver_version(&self) -> &str {
        match *self {}
    }
}

/// Any API's description of a device ([`DriverDetails`]), kept for reports and listings.
///
/// In JSON it is the description's own fields, in the order its type declares them.
#[derive(Clone)]
pub struct Details {
    fields: Fields,
    driver_version: String,
    own: Arc<dyn Any + Send + Sync>,
}

impl Details {
    /// Keeps `details`, an API's own description.
    pub fn new<D: DriverDetails>(details: D) -> Self {
        Details {
            fields: Fields::of(&details),
            driver_version: details.driver_version().to_string(),
            own: Arc::new(details),
        }
    }

    /// The driver's version, as the driver writes it.
    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    /// The API's own description, where it is a `D` (OpenCL's sections of a listing or a
    /// report ask for OpenCL's [`DeviceInfo`](super::opencl::DeviceInfo)); `None` where
    /// another API described the device.
    pub fn of_api<D: DriverDetails>(&self) -> Option<&D> {
        self.own.downcast_ref()
    }
}

impl Debug for Details {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Details")
            .field("driver_version", &self.driver_version)
            .field("fields", &self.fields)
            .finish()
    }
}

impl Serialize for Details {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.fields.serialize(s)
    }
}

/// A description as JSON: its fields in the order they were written (a `serde_json` map
/// sorts its keys), or the whole value where it is not a map.
#[derive(Debug, Clone, PartialEq)]
enum Fields {
    Ordered(Vec<(String, Value)>),
    Whole(Value),
}

impl Fields {
    /// `details` as JSON; `null` where it does not serialize (a description that cannot be
    /// written says nothing, rather than failing the report it is in).
    fn of(details: &impl Serialize) -> Self {
        let text = serde_json::to_string(details).unwrap_or_else(|_| "null".into());
        serde_json::from_str(&text)
            .map(|OrderedMap(fields)| Fields::Ordered(fields))
            .unwrap_or_else(|_| Fields::Whole(serde_json::from_str(&text).unwrap_or(Value::Null)))
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Fields::Whole(v) => v.serialize(s),
            Fields::Ordered(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// Reads a JSON map into its fields in the order they come.
struct InOrder;

impl<'de> Visitor<'de> for InOrder {
    type Value = Vec<(String, Value)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(entry) = map.next_entry()? {
            fields.push(entry);
        }
        Ok(fields)
    }
}

/// Only [`Fields::of`] reads it, for [`InOrder`].
struct OrderedMap(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for OrderedMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(InOrder).map(OrderedMap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Serialize, PartialEq)]
    struct Said {
        zeta: u32,
        alpha: &'static str,
        middle: Option<u64>,
        driver_version: &'static str,
    }

    impl DriverDetails for Said {
        fn driver_version(&self) -> &str {
            self.driver_version
        }
    }

    fn said() -> Said {
        Said {
            zeta: 1,
            alpha: "a",
            middle: None,
            driver_version: "3.1",
        }
    }

    #[test]
    fn serializes_as_the_description_in_its_own_order() {
        let text = serde_json::to_string(&Details::new(said())).unwrap();
        assert_eq!(text, serde_json::to_string(&said()).unwrap());
        assert_eq!(
            text,
            r#"{"zeta":1,"alpha":"a","middle":null,"driver_version":"3.1"}"#
        );
    }

    #[test]
    fn pretty_output_matches_the_description() {
        let pretty = serde_json::to_string_pretty(&Details::new(said())).unwrap();
        assert_eq!(pretty, serde_json::to_string_pretty(&said()).unwrap());
    }

    #[test]
    fn gives_the_api_its_own_type_and_no_other() {
        let details = Details::new(said());
        assert_eq!(details.driver_version(), "3.1");
        assert_eq!(details.of_api::<Said>(), Some(&said()));
        assert!(details.of_api::<NoDetails>().is_none());
    }

    #[test]
    fn a_description_that_is_no_map_serializes_whole() {
        #[derive(Debug, serde::Serialize)]
        struct Version(&'static str);
        impl DriverDetails for Version {
            fn driver_version(&self) -> &str {
                self.0
            }
        }
        let text = serde_json::to_string(&Details::new(Version("2.0"))).unwrap();
        assert_eq!(text, r#""2.0""#);
    }
}
