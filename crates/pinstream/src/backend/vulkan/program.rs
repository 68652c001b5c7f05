//! Kernels: WGSL compiled to SPIR-V by naga at run time, one compute pipeline per entry
//! point, and the kernel's parameters read from naga's reflection of it.
//!
//! Why WGSL, and the binding convention: the parent module's documentation.

use super::device::Shared;
use super::{Result, VulkanError};
use crate::backend::api::{AddressSpace, ArgInfo, BuildError, KernelError};
use ash::vk;
use naga::{AddressSpace as Space, Handle, ScalarKind, TypeInner};
use std::collections::HashSet;
use std::sync::Arc;

/// One compiled entry point.
#[derive(Clone)]
struct Entry {
    name: String,
    spirv: Vec<u32>,
    params: Vec<ArgInfo>,
    /// Byte offset and width of each value parameter in the push constants.
    values: Vec<(u32, u32)>,
    /// Bytes of push constants.
    push: u32,
    group: u32,
    /// Per buffer parameter (by binding): the kernel reads its length (`arrayLength`).
    sized: Vec<bool>,
}

/// A built program: its compute entry points.
pub struct VulkanProgram {
    shared: Arc<Shared>,
    entries: Vec<Entry>,
}

/// Compiles WGSL `source` (no options: naga takes none).
pub(super) fn build(
    shared: &Arc<Shared>,
    source: &str,
    options: &str,
) -> std::result::Result<VulkanProgram, BuildError> {
    if !options.trim().is_empty() {
        return Err(BuildError::Options(format!(
            "`{}`: Vulkan kernels (WGSL through naga) take no compiler options",
            options.trim()
        )));
    }
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| BuildError::Source(e.emit_to_string(source)))?;
    // unpack2x16float (f16 data as packed words) is GLSL.std.450's UnpackHalf2x16, core in
    // every Vulkan.
    let caps = naga::valid::Capabilities::IMMEDIATES
        | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| BuildError::Source(e.emit_to_string(source)))?;
    let lengths = sized_globals(&module);
    let mut entries = Vec::new();
    for (i, ep) in module.entry_points.iter().enumerate() {
        if ep.stage != naga::ShaderStage::Compute {
            continue;
        }
        let used = info.get_entry_point(i);
        let (params, values, push) = reflect(&module, |g| !used[g].is_empty())
            .map_err(|why| BuildError::Source(format!("entry point `{}`: {why}", ep.name)))?;
        let spirv = spirv(&module, &info, &ep.name).map_err(BuildError::Source)?;
        let [x, y, z] = ep.workgroup_size;
        let sized = sized_bindings(&module, |g| !used[g].is_empty(), lengths.as_ref());
        entries.push(Entry {
            name: ep.name.clone(),
            spirv,
            params,
            values,
            push,
            group: x * y * z,
            sized,
        });
    }
    if entries.is_empty() {
        return Err(BuildError::Source(
            "the source defines no `@compute` entry point".into(),
        ));
    }
    Ok(VulkanProgram {
        shared: shared.clone(),
        entries,
    })
}

/// The globals whose length (`arrayLength`) a function of `module` reads; `None` where one
/// reads the length through a pointer that names no global (a pointer parameter): then any
/// buffer may be one.
fn sized_globals(module: &naga::Module) -> Option<HashSet<Handle<naga::GlobalVariable>>> {
    let functions = module.functions.iter().map(|(_, f)| f);
    let all = functions.chain(module.entry_points.iter().map(|e| &e.function));
    let mut sized = HashSet::new();
    for f in all {
        for (_, e) in f.expressions.iter() {
            let naga::Expression::ArrayLength(mut at) = *e else {
                continue;
            };
            let global = loop {
                match f.expressions[at] {
                    naga::Expression::GlobalVariable(g) => break g,
                    naga::Expression::AccessIndex { base, .. }
                    | naga::Expression::Access { base, .. } => at = base,
                    _ => return None,
                }
            };
            sized.insert(global);
        }
    }
    Some(sized)
}

/// Per storage buffer an entry point that uses the globals `used` says binds (by binding, as
/// [`reflect`] checked them: 0..n): whether the kernel reads its length, of the globals
/// `sized` (`None`: any).
fn sized_bindings(
    module: &naga::Module,
    used: impl Fn(Handle<naga::GlobalVariable>) -> bool,
    sized: Option<&HashSet<Handle<naga::GlobalVariable>>>,
) -> Vec<bool> {
    let buffers: Vec<_> = (module.global_variables.iter())
        .filter(|(h, g)| used(*h) && matches!(g.space, Space::Storage { .. }))
        .filter_map(|(h, g)| Some((h, g.binding.as_ref()?.binding as usize)))
        .collect();
    let mut out = vec![false; buffers.len()];
    for (h, binding) in buffers {
        if let Some(b) = out.get_mut(binding) {
            *b = sized.is_none_or(|s| s.contains(&h));
        }
    }
    out
}

/// SPIR-V of entry point `name` alone.
fn spirv(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    name: &str,
) -> std::result::Result<Vec<u32>, String> {
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: name.into(),
    };
    naga::back::spv::write_vec(module, info, &options, Some(&pipeline))
        .map_err(|e| format!("naga could not write SPIR-V for `{name}`: {e}"))
}

/// OpenCL C's spelling of a scalar (the engine's type names).
fn scalar_name(s: naga::Scalar) -> String {
    match (s.kind, s.width) {
        (ScalarKind::Uint, 4) => "uint",
        (ScalarKind::Sint, 4) => "int",
        (ScalarKind::Uint, 8) => "ulong",
        (ScalarKind::Sint, 8) => "long",
        (ScalarKind::Float, 4) => "float",
        (ScalarKind::Float, 2) => "half",
        (ScalarKind::Float, 8) => "double",
        _ => "void",
    }
    .into()
}

/// The element type of a storage global's type, as a pointer type name.
fn pointee(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
    let inner = |t: naga::Handle<naga::Type>| &module.types[t].inner;
    let base = match inner(ty) {
        TypeInner::Array { base, .. } => inner(*base),
        t => t,
    };
    match base {
        TypeInner::Scalar(s) => format!("{}*", scalar_name(*s)),
        _ => "void*".into(),
    }
}

type Reflected = (Vec<ArgInfo>, Vec<(u32, u32)>, u32);

/// The parameters of an entry point that uses the globals `used` says: its storage buffers
/// by binding, then the members of its immediate (push constant) struct.
fn reflect(
    module: &naga::Module,
    used: impl Fn(naga::Handle<naga::GlobalVariable>) -> bool,
) -> std::result::Result<Reflected, String> {
    let mut buffers = Vec::new();
    let (mut params, mut values, mut push) = (Vec::new(), Vec::new(), 0);
    for (_, g) in module.global_variables.iter().filter(|(h, _)| used(*h)) {
        let name = g.name.clone().unwrap_or_default();
        match g.space {
            Space::Storage { .. } => {
                let b = g
                    .binding
                    .as_ref()
                    .ok_or("a storage buffer without @binding")?;
                if b.group != 0 {
                    return Err(format!(
                        "buffer `{name}` is in @group({}): put every buffer in @group(0)",
                        b.group
                    ));
                }
                buffers.push((
                    b.binding,
                    ArgInfo {
                        name,
                        type_name: pointee(module, g.ty),
                        space: AddressSpace::Global,
                    },
                ));
            }
            Space::Immediate => (values, push) = members(module, g.ty, &mut params)?,
            Space::Uniform | Space::Handle => {
                return Err(format!(
                "`{name}`: pass buffers as var<storage> and values in one var<immediate> struct"
            ))
            }
            _ => {}
        }
    }
    buffers.sort_by_key(|b| b.0);
    if let Some((i, (b, _))) = buffers
        .iter()
        .enumerate()
        .find(|(i, (b, _))| *b != *i as u32)
    {
        return Err(format!(
            "buffer bindings must be 0..{} in parameter order; binding {b} is parameter {i}",
            buffers.len()
        ));
    }
    let mut all: Vec<ArgInfo> = buffers.into_iter().map(|b| b.1).collect();
    all.append(&mut params);
    Ok((all, values, push))
}

/// The members of the immediate struct `ty` as value parameters, their offsets and widths,
/// and the struct's size.
fn members(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    params: &mut Vec<ArgInfo>,
) -> std::result::Result<(Vec<(u32, u32)>, u32), String> {
    let TypeInner::Struct { members, span } = &module.types[ty].inner else {
        return Err("the var<immediate> must be a struct of scalars".into());
    };
    let mut at = Vec::new();
    for m in members {
        let name = m.name.clone().unwrap_or_default();
        let (type_name, width) = member_type(&module.types[m.ty].inner).ok_or_else(|| {
            format!("immediate member `{name}` is not a scalar or a vec2<u32> (a 64-bit value)")
        })?;
        params.push(ArgInfo {
            name,
            type_name,
            space: AddressSpace::Private,
        });
        at.push((m.offset, width));
    }
    Ok((at, *span))
}

/// A value parameter's engine type name and width: a scalar, or a `vec2<u32>`, which is how a
/// WGSL kernel takes a 64-bit count (`ulong`: WGSL has no 64-bit integers), low word first
/// (`x`), as the engine writes a `ulong` on every little-endian device.
fn member_type(inner: &TypeInner) -> Option<(String, u32)> {
    match *inner {
        TypeInner::Scalar(s) => Some((scalar_name(s), u32::from(s.width))),
        TypeInner::Vector {
            size: naga::VectorSize::Bi,
            scalar:
                naga::Scalar {
                    kind: ScalarKind::Uint,
                    width: 4,
                },
        } => Some(("ulong".into(), 8)),
        _ => None,
    }
}

impl VulkanProgram {
    /// The names of its compute entry points.
    pub(super) fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    /// Kernel `name`: its pipeline made.
    pub(super) fn kernel(&self, name: &str) -> std::result::Result<VulkanKernel, KernelError> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| KernelError::NotDefined { name: name.into() })?;
        VulkanKernel::new(&self.shared, entry.clone()).map_err(|e| KernelError::Backend(e.into()))
    }
}

/// A compute pipeline and its layouts.
pub struct VulkanKernel {
    pub(super) shared: Arc<Shared>,
    entry_name: String,
    pub(super) params: Vec<ArgInfo>,
    pub(super) values: Vec<(u32, u32)>,
    pub(super) push: u32,
    pub(super) group: u32,
    /// Per buffer parameter (by binding): the kernel reads its length (`arrayLength`), so a
    /// launch binds a [`crate::backend::api::KernelArg::Within`] buffer's usable bytes
    /// alone.
    pub(super) sized: Vec<bool>,
    module: vk::ShaderModule,
    pub(super) set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    pub(super) pipeline: vk::Pipeline,
}

impl Drop for VulkanKernel {
    fn drop(&mut self) {
        let d = &self.shared.device;
        // SAFETY: the Queue contract keeps the kernel alive until its launches completed;
        // null handles (a kernel whose making failed half-way) are ignored by the driver.
        unsafe {
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.module, None);
        }
    }
}

impl VulkanKernel {
    fn new(shared: &Arc<Shared>, e: Entry) -> Result<Self> {
        let buffers = e.params.iter().filter(|p| p.is_buffer()).count() as u32;
        let mut k = VulkanKernel {
            shared: shared.clone(),
            entry_name: e.name,
            params: e.params,
            values: e.values,
            push: e.push,
            group: e.group,
            sized: e.sized,
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
        };
        let d = &shared.device;
        let info = vk::ShaderModuleCreateInfo::default().code(&e.spirv);
        // SAFETY: `info` points to naga's validated SPIR-V, which lives through the call.
        k.module = unsafe { d.create_shader_module(&info, None) }
            .map_err(VulkanError::call("vkCreateShaderModule"))?;
        let bindings: Vec<_> = (0..buffers)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: as above.
        k.set_layout = unsafe { d.create_descriptor_set_layout(&info, None) }
            .map_err(VulkanError::call("vkCreateDescriptorSetLayout"))?;
        k.make_pipeline()?;
        Ok(k)
    }

    fn make_pipeline(&mut self) -> Result<()> {
        let d = &self.shared.device;
        let ranges = [vk::PushConstantRange {
            stage_flags: vk::ShaderStageFlags::COMPUTE,
            offset: 0,
            size: self.push,
        }];
        let layouts = [self.set_layout];
        let mut info = vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts);
        if self.push > 0 {
            info = info.push_constant_ranges(&ranges);
        }
        // SAFETY: `info` lives through the call; the set layout is live.
        self.layout = unsafe { d.create_pipeline_layout(&info, None) }
            .map_err(VulkanError::call("vkCreatePipelineLayout"))?;
        let name = std::ffi::CString::new(self.entry_name.clone()).map_err(|_| {
            VulkanError::misuse(
                "vkCreateComputePipelines",
                "an entry point name with a NUL byte",
            )
        })?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(self.module)
            .name(&name);
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(self.layout);
        // SAFETY: as above; the module and layout are live.
        let made = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) };
        self.pipeline = made.map_err(|(_, r)| VulkanError::Call {
            call: "vkCreateComputePipelines",
            result: r,
        })?[0];
        Ok(())
    }

    /// Its entry point's name.
    pub(super) fn name(&self) -> &str {
        &self.entry_name
    }
}

#[cfg(test)]
mod tests {
    use super::{sized_bindings, sized_globals};

    /// The buffers whose length a kernel reads are found by binding, directly, through a
    /// struct's last member and from a helper function; the others are not.
    #[test]
    fn the_buffers_whose_length_a_kernel_reads_are_found() {
        let src = r#"
struct S { head: u32, data: array<f32> }
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> b: S;
@group(0) @binding(2) var<storage, read_write> c: array<u32>;
@group(0) @binding(3) var<storage, read> d: array<u32>;
fn len_b() -> u32 { return arrayLength(&b.data); }
@compute @workgroup_size(1)
fn k() { c[0] = a[0] + len_b() + arrayLength(&d); }
"#;
        let m = naga::front::wgsl::parse_str(src).unwrap();
        let sized = sized_globals(&m);
        let found = sized_bindings(&m, |_| true, sized.as_ref());
        assert_eq!(found, [false, true, false, true]);
        assert_eq!(
            sized_bindings(&m, |_| true, None),
            [true; 4],
            "unknown: all"
        );
    }
}
