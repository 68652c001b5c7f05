//! Vulkan as an [`Api`]: glue from the traits to the device, queue and program modules.

use super::copy;
use super::device::{self, Backing, Piece, Shared, VulkanBuffer};
use super::plan::{Role, VkCopy};
use super::program::{self, VulkanKernel, VulkanProgram};
use super::queue::{Keep, VulkanEvent, VulkanQueue};
use super::{Result, VulkanAdapter, VulkanError, VulkanInstance};
use crate::backend::adapter::AdapterInfo;
use crate::backend::api::{
    self, Api, ArgInfo, BuildError, HostSpan, KernelArg, KernelError, LaunchSize, Profile,
    Unavailable, WorkGroupLimits,
};
use crate::backend::fault::{Operation, OutOfResources};
use ash::vk;
use std::sync::{Arc, Mutex};

/// The Vulkan API (compute only), through ash with the loader loaded at run time.
#[derive(Debug, Clone, Copy)]
pub struct Vulkan;

/// An opened Vulkan device.
pub struct VulkanDevice {
    pub(super) shared: Arc<Shared>,
    /// The copy shader, built by the first queue that needs it (`VkCopy::uses_shader`).
    copier: Mutex<Option<Arc<VulkanKernel>>>,
}

impl Clone for VulkanDevice {
    /// The same device (its queues, memory and registered host memory), as another handle.
    fn clone(&self) -> Self {
        VulkanDevice {
            shared: self.shared.clone(),
            copier: Mutex::new(crate::sync::lock(&self.copier).clone()),
        }
    }
}

impl Api for Vulkan {
    const NAME: &'static str = super::error::API_NAME;
    const ID: &'static str = "vulkan";
    const KERNEL_FORM: &'static str = "@compute @workgroup_size(N) fn NAME(...) (WGSL)";
    const HALVES_IN_WORDS: bool = true;
    const LANGUAGE: crate::backend::api::KernelLanguage = crate::backend::api::KernelLanguage::Wgsl;
    type Instance = VulkanInstance;
    type Adapter = VulkanAdapter;
    type Device = VulkanDevice;
    type Queue = VulkanQueue;
    type Buffer = VulkanBuffer;
    type Event = VulkanEvent;
    type Kernel = VulkanKernel;
    type Program = VulkanProgram;
    type Error = VulkanError;
}

impl OutOfResources for VulkanError {
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY` from the call that makes the command.
    fn out_of_resources(op: Operation) -> VulkanError {
        let call = match op {
            Operation::Allocate => "vkAllocateMemory",
            _ => "vkQueueSubmit",
        };
        VulkanError::Call {
            call,
            result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        }
    }
}

impl api::Instance for VulkanInstance {
    type A = Vulkan;

    fn new() -> std::result::Result<Self, Unavailable> {
        VulkanInstance::load()
    }

    fn adapters(&self) -> std::result::Result<Vec<VulkanAdapter>, Unavailable> {
        self.list().map_err(|e| Unavailable {
            api: Vulkan::NAME,
            reason: e.to_string(),
        })
    }
}

impl api::Adapter for VulkanAdapter {
    type A = Vulkan;

    fn info(&self) -> AdapterInfo {
        self.info.clone()
    }

    fn open(&self) -> Result<VulkanDevice> {
        Ok(VulkanDevice::over(device::open(self)?))
    }
}

impl api::Device for VulkanDevice {
    type A = Vulkan;

    fn info(&self) -> AdapterInfo {
        self.shared.info.clone()
    }

    fn build(&self, source: &str, options: &str) -> std::result::Result<VulkanProgram, BuildError> {
        program::build(&self.shared, source, options)
    }

    fn copy_way(&self) -> Option<String> {
        (!self.shared.adopted()).then(|| self.shared.copy_text())
    }

    /// A queue of the device; refused on a program's device adopted for host memory
    /// ([`VulkanDevice::from_program`]), which has none of pinstream's.
    fn queue(&self) -> Result<VulkanQueue> {
        self.shared.has_queues("queue")?;
        VulkanQueue::new(&self.shared, self.copier()?)
    }

    fn allocate(&self, bytes: usize) -> Result<VulkanBuffer> {
        VulkanBuffer::new(&self.shared, bytes, Backing::Device)
    }

    fn buffer_len(&self, buffer: &VulkanBuffer) -> usize {
        usize::try_from(buffer.size).unwrap_or(usize::MAX)
    }

    fn wait(&self, event: &VulkanEvent) -> Result<()> {
        event.wait()
    }

    /// Vulkan timestamps are one device clock: `origin` is not needed.
    fn profile(&self, event: &VulkanEvent, _origin: &VulkanEvent) -> Result<Profile> {
        event.profile()
    }
}

/// `len` bytes at `offset` lie inside a buffer of `size` bytes (a sum past `u64` does not).
fn inside(call: &'static str, size: u64, offset: usize, len: usize) -> Result<()> {
    let end = offset.checked_add(len).and_then(|e| u64::try_from(e).ok());
    match end {
        Some(end) if end <= size => Ok(()),
        _ => Err(VulkanError::misuse(
            call,
            format!("{len} bytes at offset {offset} lie past a buffer of {size}"),
        )),
    }
}

/// The registered host buffers over `span`, or a staging buffer standing in for it (memory
/// pinstream did not pin with this device: a small read-back, a caller's own bytes).
fn host_pieces(shared: &Arc<Shared>, span: HostSpan) -> Result<(Vec<Piece>, Option<VulkanBuffer>)> {
    if let Some(p) = shared.registry.find(span.ptr, span.len) {
        return Ok((p, None));
    }
    let staging = VulkanBuffer::new(shared, span.len, Backing::HostVisible)?;
    let piece = Piece {
        buffer: staging.buffer,
        offset: 0,
        len: span.len as u64,
        at: 0,
    };
    Ok((vec![piece], Some(staging)))
}

impl api::Queue for VulkanQueue {
    type A = Vulkan;

    unsafe fn upload(
        &self,
        dst: &VulkanBuffer,
        dst_offset: usize,
        src: HostSpan,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        inside("upload", dst.size, dst_offset, src.len)?;
        let (pieces, staging) = host_pieces(&dst.shared, src)?;
        if let Some(s) = &staging {
            // SAFETY: the caller keeps `src` alive and unwritten; the staging buffer is
            // mapped, `src.len` bytes long and distinct from it.
            unsafe { std::ptr::copy_nonoverlapping(src.ptr, s.mapped, src.len) };
        }
        self.copy_in(
            dst,
            dst_offset as u64,
            &pieces,
            Keep {
                _staging: staging,
                descriptors: None,
            },
            wait,
        )
    }

    unsafe fn download(
        &self,
        dst: HostSpan,
        src: &VulkanBuffer,
        src_offset: usize,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        inside("download", src.size, src_offset, dst.len)?;
        let (pieces, staging) = host_pieces(&src.shared, dst)?;
        let Some(s) = staging else {
            return self.copy_out(&pieces, src, src_offset as u64, Keep::default(), wait);
        };
        // Through staging: the copy completes before this returns, then the bytes are copied.
        let event = self.copy_out(&pieces, src, src_offset as u64, Keep::default(), wait)?;
        event.wait()?;
        // SAFETY: the copy completed; the caller keeps `dst` alive and untouched; the staging
        // buffer is mapped and `dst.len` bytes long.
        unsafe { std::ptr::copy_nonoverlapping(s.mapped, dst.ptr, dst.len) };
        Ok(event)
    }

    unsafe fn launch(
        &self,
        kernel: &mut VulkanKernel,
        args: &[KernelArg<'_, Vulkan>],
        size: LaunchSize,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        let (push, buffers) = launch_args(kernel, args)?;
        let groups = dispatch(kernel, size)?;
        let pool = descriptors(kernel, &buffers)?;
        let keep = Keep {
            _staging: None,
            descriptors: pool.map(|p| p.0),
        };
        self.submit(Role::Compute, wait, keep, |d, cmd, _| {
            // SAFETY: recording into `cmd`; the pipeline, layout and set are live (the kernel
            // and buffers outlive the command by the Queue contract).
            unsafe {
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
                if let Some((_, set)) = pool {
                    d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        kernel.layout,
                        0,
                        &[set],
                        &[],
                    );
                }
                if !push.is_empty() {
                    d.cmd_push_constants(
                        cmd,
                        kernel.layout,
                        vk::ShaderStageFlags::COMPUTE,
                        0,
                        &push,
                    );
                }
                if groups[0] > 0 {
                    d.cmd_dispatch(cmd, groups[0], groups[1], 1);
                }
            }
            Ok(())
        })
    }

    fn mark(&self) -> Result<VulkanEvent> {
        self.submit(Role::Compute, &[], Keep::default(), |_, _, _| Ok(()))
    }

    /// Every command is submitted when enqueued.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        VulkanQueue::finish(self)
    }
}

/// A buffer as a launch binds it: whole (`None`), or its first bytes.
type Bind<'a> = (&'a VulkanBuffer, Option<u64>);

/// The push constant bytes and the buffers (in binding order) of `args`, checked against
/// the kernel's parameters. A [`KernelArg::Within`] buffer is bound as its usable bytes
/// alone where the kernel reads the buffer's length (`arrayLength` then counts the data, not
/// the guard zone), whole elsewhere (a write past the end lands in the zone, where the guard
/// sees it, even on a driver that drops writes past the binding, as lavapipe does).
fn launch_args<'a>(
    k: &VulkanKernel,
    args: &[KernelArg<'a, Vulkan>],
) -> Result<(Vec<u8>, Vec<Bind<'a>>)> {
    let bad =
        |what: String| VulkanError::misuse("launch", format!("kernel `{}`: {what}", k.name()));
    if args.len() != k.params.len() {
        return Err(bad(format!(
            "takes {} arguments, given {}",
            k.params.len(),
            args.len()
        )));
    }
    let (mut push, mut buffers, mut values) =
        (vec![0u8; k.push as usize], Vec::new(), k.values.iter());
    for (a, p) in args.iter().zip(&k.params) {
        match (a, p.is_buffer()) {
            (KernelArg::Buffer(b), true) => buffers.push((*b, None)),
            (&KernelArg::Within(b, len), true) => {
                inside("launch", b.size, 0, len)?;
                let sized = k.sized.get(buffers.len()) == Some(&true);
                // A range of 0 is invalid: 1 byte holds no element either.
                buffers.push((b, sized.then_some(len.max(1) as u64)));
            }
            (KernelArg::Value(v), false) => {
                let &(at, width) = values.next().expect("one offset per value parameter");
                if v.len() != width as usize {
                    return Err(bad(format!(
                        "value `{}` is {width} bytes, given {}",
                        p.name,
                        v.len()
                    )));
                }
                push[at as usize..(at + width) as usize].copy_from_slice(v);
            }
            _ => {
                return Err(bad(format!(
                    "argument `{}` is the wrong kind (a buffer for a value or the reverse)",
                    p.name
                )))
            }
        }
    }
    let limit = k.shared.caps.max_storage_range;
    // The bytes bound: a range given, or the buffer's own size, rounded up to 4 as it was made.
    let bound = |&(b, range): &Bind| range.unwrap_or(b.size);
    let too_large = |size: u64| size.checked_next_multiple_of(4).is_none_or(|s| s > limit);
    if let Some(size) = buffers.iter().map(bound).find(|&s| too_large(s)) {
        return Err(bad(format!("a buffer of {size} bytes exceeds the device's maxStorageBufferRange ({limit} bytes): use smaller blocks")));
    }
    Ok((push, buffers))
}

/// The grid of groups for `size`: at most `maxComputeWorkGroupCount[0]` wide.
fn dispatch(k: &VulkanKernel, size: LaunchSize) -> Result<[u32; 2]> {
    if let Some(l) = size.local.filter(|&l| l != k.group as usize) {
        return Err(VulkanError::misuse("launch", format!("kernel `{}` declares @workgroup_size({}) and runs only with it, not {l}: give it that work-group size, or none", k.name(), k.group)));
    }
    let groups = size.global.div_ceil(k.group.max(1) as usize);
    let [mx, my] = k.shared.caps.max_groups.map(|m| m.max(1) as usize);
    let x = groups.min(mx);
    let y = if x == 0 { 0 } else { groups.div_ceil(x) };
    if y > my {
        return Err(VulkanError::misuse(
            "launch",
            format!(
                "{groups} work-groups exceed the device's {mx} x {my} grid: use smaller blocks"
            ),
        ));
    }
    Ok([x as u32, y as u32])
}

/// A descriptor pool holding one set that binds `buffers` at bindings 0.. (each whole, or
/// its first bytes), or `None` for a kernel without buffers.
fn descriptors(
    k: &VulkanKernel,
    buffers: &[Bind<'_>],
) -> Result<Option<(vk::DescriptorPool, vk::DescriptorSet)>> {
    if buffers.is_empty() {
        return Ok(None);
    }
    let d = &k.shared.device;
    let sizes = [vk::DescriptorPoolSize {
        ty: vk::DescriptorType::STORAGE_BUFFER,
        descriptor_count: buffers.len() as u32,
    }];
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(1)
        .pool_sizes(&sizes);
    // SAFETY: `info` lives through the call.
    let pool = unsafe { d.create_descriptor_pool(&info, None) }
        .map_err(VulkanError::call("vkCreateDescriptorPool"))?;
    let layouts = [k.set_layout];
    let alloc = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    // SAFETY: the pool and layout are live.
    let set = match unsafe { d.allocate_descriptor_sets(&alloc) } {
        Ok(s) => s[0],
        Err(r) => {
            // SAFETY: the pool is unused.
            unsafe { d.destroy_descriptor_pool(pool, None) };
            return Err(VulkanError::Call {
                call: "vkAllocateDescriptorSets",
                result: r,
            });
        }
    };
    let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
        .iter()
        .map(|&(b, range)| {
            [vk::DescriptorBufferInfo {
                buffer: b.buffer,
                offset: 0,
                range: range.unwrap_or(vk::WHOLE_SIZE),
            }]
        })
        .collect();
    let writes: Vec<_> = infos
        .iter()
        .enumerate()
        .map(|(i, info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(i as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info)
        })
        .collect();
    // SAFETY: the set and buffers are live; the set is not in use yet.
    unsafe { d.update_descriptor_sets(&writes, &[]) };
    Ok(Some((pool, set)))
}

impl api::Program for VulkanProgram {
    type A = Vulkan;

    fn kernel_names(&self) -> Vec<String> {
        self.names()
    }

    fn kernel(&self, name: &str) -> std::result::Result<VulkanKernel, KernelError> {
        VulkanProgram::kernel(self, name)
    }
}

impl api::Kernel for VulkanKernel {
    type A = Vulkan;

    fn name(&self) -> &str {
        VulkanKernel::name(self)
    }

    fn params(&self) -> Result<Vec<ArgInfo>> {
        Ok(self.params.clone())
    }

    fn work_group_limits(&self) -> Result<WorkGroupLimits> {
        Ok(WorkGroupLimits {
            kernel: self.group as usize,
            device_dim0: self.shared.caps.max_group_size as usize,
            // Not `required`: a launch that leaves the size to the API gets the declared one
            // (as CUDA's default block); [`dispatch`] refuses any other size.
            required: None,
            names: ["@workgroup_size", "maxComputeWorkGroupSize[0]"],
        })
    }
}

impl VulkanDevice {
    /// Over an opened or adopted device.
    pub(super) fn over(shared: Shared) -> Self {
        VulkanDevice {
            shared: Arc::new(shared),
            copier: Mutex::new(None),
        }
    }

    /// The copy shader where the device copies with it, built once.
    fn copier(&self) -> Result<Option<Arc<VulkanKernel>>> {
        if !self.shared.copy.uses_shader() {
            return Ok(None);
        }
        let mut slot = crate::sync::lock(&self.copier);
        if slot.is_none() {
            *slot = Some(Arc::new(copy::copier(&self.shared)?));
        }
        Ok(slot.clone())
    }

    /// How the device copies, in words: the way, and the queue families it runs on.
    pub fn copy_way(&self) -> (VkCopy, String) {
        (self.shared.copy, self.shared.copy_text())
    }

    /// What the device offers beyond its [`AdapterInfo`].
    pub fn caps(&self) -> super::Caps {
        self.shared.caps
    }

    /// Why the device cannot import host memory (`VK_EXT_external_memory_host`), where it
    /// cannot: the driver does not offer it, or (on a program's adopted device) the device
    /// was created without it.
    pub fn import_refusal(&self) -> Option<String> {
        self.shared.raw.import.as_ref().err().cloned()
    }

    /// A reader of this process's use of the device's device-local memory
    /// (`VK_EXT_memory_budget`), or `None` where the driver does not offer it.
    pub fn budget_reader(&self) -> Option<impl Fn() -> Option<u64> + Send + Sync + 'static> {
        let shared = self.shared.clone();
        self.shared
            .caps
            .memory_budget
            .then_some(move || shared.budget_used())
    }
}

impl VulkanDevice {
    /// A program's own device, adopted to pin host memory with it (the C library's
    /// `psVkHost*` calls, through [`crate::host::HostApi`] as every other device): its
    /// functions come from the program's `vkGetInstanceProcAddr`, checked before any is
    /// called, and it is refused ([`VulkanError::Lacking`]) where one the calls need is
    /// missing or the instance or device is below Vulkan 1.1. It imports host memory where the
    /// physical device offers `VK_EXT_external_memory_host` and the program enabled it on
    /// `device`; else [`crate::host::HostApi::offer_on`] says which is missing, and pins with
    /// the driver's host-visible memory.
    ///
    /// It has no queues of pinstream's (the program made the device and its queues):
    /// [`crate::backend::api::Device::queue`] refuses. Dropping it never waits on nor destroys
    /// the program's device or instance. Its driver is not asked (a Vulkan 1.2 query, and
    /// the program's instance may be 1.1): `info().driver` is empty, and the vendor is told
    /// by the PCI id alone, so an NVIDIA GPU reads `Other` (NVIDIA's driver and Mesa's NVK
    /// cannot be told apart without it).
    ///
    /// # Safety
    /// `gipa` is a valid `vkGetInstanceProcAddr`; `instance`, `physical` and `device` are live
    /// handles of it, `physical` of `instance` and `device` made from `physical`, and they
    /// outlive the returned device and everything made with it.
    pub unsafe fn from_program(
        gipa: vk::PFN_vkGetInstanceProcAddr,
        instance: vk::Instance,
        physical: vk::PhysicalDevice,
        device: vk::Device,
    ) -> Result<Self> {
        // SAFETY: the caller's contract.
        let a = unsafe { super::adopt::adopt(gipa, instance, physical, device) }?;
        let import = a.raw.import.as_ref().ok().copied();
        let (info, caps) = super::instance::adopted_info(&a.instance, physical, &a.limits, import);
        let shared = super::device::adopted(a, physical, info, caps);
        Ok(Self::over(shared))
    }
}

#[cfg(test)]
mod tests {
    use super::inside;

    #[test]
    fn ranges_past_the_buffer_or_the_address_space_are_refused() {
        assert!(inside("upload", 100, 60, 40).is_ok());
        assert!(inside("upload", 100, 60, 41).is_err());
        let e = inside("download", 100, usize::MAX, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lie past a buffer of 100"), "{e}");
    }
}
