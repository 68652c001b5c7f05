//! The Vulkan backend's error: a failed call with its `VkResult`, a kernel naga or pinstream
//! refused, a misuse the backend caught before the driver saw it, or no usable Vulkan.

use crate::backend::error::{BackendError, ErrorKind};
use ash::vk;

/// The API's name in messages (`Vulkan::NAME`), kept here, the leaf every module uses.
pub const API_NAME: &str = "Vulkan";

/// A failed Vulkan call, or a refusal before one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VulkanError {
    /// A call returned an error.
    #[error("{call} failed: VK_{result:?}")]
    Call {
        /// The call, e.g. `vkAllocateMemory`.
        call: &'static str,
        /// What it returned.
        result: vk::Result,
    },
    /// The driver refused to import host memory (`VK_EXT_external_memory_host`).
    #[error("{call} failed: {}", import_text(*.bytes, *.address, *.result))]
    Import {
        /// The call that refused.
        call: &'static str,
        /// What it returned.
        result: vk::Result,
        /// Bytes asked for.
        bytes: usize,
        /// Where they start.
        address: usize,
    },
    /// The WGSL source did not parse or validate; the log names lines.
    #[error("naga could not compile the WGSL source:\n{0}")]
    Compile(String),
    /// A request the backend refuses before calling the driver, with the fix.
    #[error("{call}: {what}")]
    Misuse {
        /// The operation.
        call: &'static str,
        /// What was wrong, and what to do instead.
        what: String,
    },
    /// No usable Vulkan here, and what to install.
    #[error("{0}")]
    Unavailable(String),
    /// Host memory for an import could not be had (more than the address space, or the
    /// mapping failed), with the fix.
    #[error("{0}")]
    HostMemory(String),
    /// The instance or device lacks what the calls need: a core function its lookup does not
    /// give, or an API version below the one needed; with the fix.
    #[error("{0}")]
    Lacking(String),
}

/// What works where a driver refuses an import (NVIDIA's refuses file-backed mappings).
pub const IMPORT_HINT: &str = "Drivers import anonymous memory (malloc, mmap with MAP_ANONYMOUS); NVIDIA's refuses file-backed mappings (shared or private): copy the data into anonymous memory, or pin with the `host-visible` pinning (the driver's own host memory)";

/// What an import the driver refused says after its call's name, with what works instead.
fn import_text(bytes: usize, address: usize, result: vk::Result) -> String {
    format!("could not import {bytes} bytes of host memory at {address:#x}: VK_{result:?}. {IMPORT_HINT}")
}

impl VulkanError {
    /// The error of `call` returning `result`.
    pub(super) fn call(call: &'static str) -> impl FnOnce(vk::Result) -> VulkanError {
        move |result| VulkanError::Call { call, result }
    }

    /// A misuse of `call`.
    pub(super) fn misuse(call: &'static str, what: impl ToString) -> VulkanError {
        VulkanError::Misuse {
            call,
            what: what.to_string(),
        }
    }
}

/// The class of a `VkResult`.
pub fn kind_of(result: vk::Result) -> ErrorKind {
    match result {
        vk::Result::ERROR_OUT_OF_HOST_MEMORY
        | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        | vk::Result::ERROR_TOO_MANY_OBJECTS
        | vk::Result::ERROR_OUT_OF_POOL_MEMORY
        | vk::Result::ERROR_FRAGMENTED_POOL => ErrorKind::OutOfMemory,
        vk::Result::ERROR_DEVICE_LOST => ErrorKind::Lost,
        vk::Result::ERROR_FEATURE_NOT_PRESENT
        | vk::Result::ERROR_EXTENSION_NOT_PRESENT
        | vk::Result::ERROR_LAYER_NOT_PRESENT
        | vk::Result::ERROR_INCOMPATIBLE_DRIVER
        | vk::Result::ERROR_FORMAT_NOT_SUPPORTED
        | vk::Result::ERROR_INITIALIZATION_FAILED => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    }
}

impl From<VulkanError> for BackendError {
    /// The message holds what follows the call's name ([`BackendError`] names the call
    /// itself), so that the call is named once.
    fn from(e: VulkanError) -> Self {
        let message = match &e {
            VulkanError::Call { result, .. } => format!("VK_{result:?}"),
            VulkanError::Import {
                result,
                bytes,
                address,
                ..
            } => import_text(*bytes, *address, *result),
            VulkanError::Misuse { what, .. } => what.clone(),
            e => e.to_string(),
        };
        let (call, code, kind) = match e {
            VulkanError::Call { call, result } | VulkanError::Import { call, result, .. } => {
                (call, i64::from(result.as_raw()), kind_of(result))
            }
            VulkanError::Compile(_) => ("naga", 0, ErrorKind::Other),
            VulkanError::Misuse { call, .. } => (call, 0, ErrorKind::Other),
            VulkanError::HostMemory(_) => ("", 0, ErrorKind::OutOfMemory),
            VulkanError::Unavailable(_) | VulkanError::Lacking(_) => {
                ("", 0, ErrorKind::Unsupported)
            }
        };
        BackendError {
            api: API_NAME,
            call,
            code,
            message,
            kind,
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, VulkanError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// As the backend's error, a Vulkan failure names its call once, and says what the
    /// Vulkan error says.
    #[test]
    fn the_backend_error_names_the_call_once() {
        let errors = [
            VulkanError::Call {
                call: "vkCreateBuffer",
                result: vk::Result::ERROR_OUT_OF_HOST_MEMORY,
            },
            VulkanError::Import {
                call: "vkAllocateMemory",
                result: vk::Result::ERROR_INVALID_EXTERNAL_HANDLE,
                bytes: 4096,
                address: 0x1000,
            },
        ];
        for e in errors {
            let b = BackendError::from(e.clone());
            assert_eq!(b.to_string(), e.to_string());
            assert_eq!(b.to_string().matches(b.call).count(), 1, "{b}");
        }
        let misuse = BackendError::from(VulkanError::misuse("import", "no extension"));
        assert_eq!(misuse.to_string(), "import failed: no extension");
    }
}
