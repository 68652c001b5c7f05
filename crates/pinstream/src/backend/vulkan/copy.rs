//! Uploads and downloads as the device's [`super::VkCopy`] says: `vkCmdCopyBuffer` (on the queue
//! `plan` routes to; a split copy records each half in its own command buffer), or a compute
//! shader reading and writing 16-byte words (`COPY16`), bound over the ranges it copies.

use super::device::{Piece, Shared, VulkanBuffer};
use super::plan::{Role, VkCopy, CROSSED_GROUPS};
use super::program::VulkanKernel;
use super::queue::{Keep, Part, VulkanEvent, VulkanQueue};
use super::{Result, VulkanError};
use ash::vk;
use std::sync::Arc;

/// The copy shader: `n` 16-byte words from word `src_at` of binding 0 to word `dst_at` of
/// binding 1, a grid-stride loop over the groups launched.
pub(super) const COPY16: &str = "
struct Args { n: u32, src_at: u32, dst_at: u32 }
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
var<immediate> args: Args;
@compute @workgroup_size(256)
fn copy16(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = id.x; i < args.n; i += stride) {
        dst[args.dst_at + i] = src[args.src_at + i];
    }
}
";

/// The copy shader built on `shared`'s device.
pub(super) fn copier(shared: &Arc<Shared>) -> Result<VulkanKernel> {
    let program = super::program::build(shared, COPY16, "")
        .map_err(|e| VulkanError::misuse("copy shader", e.to_string()))?;
    program
        .kernel("copy16")
        .map_err(|e| VulkanError::misuse("copy shader", e.to_string()))
}

/// One copy between two buffers: `len` bytes from `src` at `src_at` to `dst` at `dst_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) src: vk::Buffer,
    pub(super) src_at: u64,
    pub(super) dst: vk::Buffer,
    pub(super) dst_at: u64,
    pub(super) len: u64,
}

/// Part `part` of `of` of `pieces` (a span's host buffers, `at` its offset in the span): the
/// bytes between two cuts at 4 KiB boundaries.
pub(super) fn cut(pieces: &[Piece], part: usize, of: usize) -> Vec<Piece> {
    let total: u64 = pieces.iter().map(|p| p.len).sum();
    // In u128: `total * i` fits, and the quotient is at most `total`.
    let share = |i: usize| (u128::from(total) * i as u128 / of as u128) as u64;
    let bound = |i: usize| match i {
        i if i >= of => total,
        i => share(i) / 4096 * 4096,
    };
    let (lo, hi) = (bound(part), bound(part + 1));
    pieces
        .iter()
        .filter_map(|p| {
            let (a, b) = (p.at.max(lo), (p.at + p.len).min(hi));
            (a < b).then(|| Piece {
                buffer: p.buffer,
                offset: p.offset + (a - p.at),
                len: b - a,
                at: a,
            })
        })
        .collect()
}

/// How `copy16` covers a span: dispatches over 16-byte words whose bindings fit the device
/// (offsets at `align`, at most `range` bytes), and the bytes left to `vkCmdCopyBuffer`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) dispatches: Vec<Span>,
    pub(super) rest: Vec<Span>,
}

/// The shape of copying `spans` with the shader: a span whose two offsets are multiples of 16
/// goes through the shader in pieces of at most `range - align` bytes (its last `len % 16`
/// bytes, and any other span, through `vkCmdCopyBuffer`).
pub(super) fn shape(spans: &[Span], align: u64, range: u64) -> Shape {
    let align = align.max(16).next_power_of_two();
    let most = (range.saturating_sub(align)) / 16 * 16;
    let mut out = Shape::default();
    for s in spans {
        let words = if s.src_at % 16 == 0 && s.dst_at % 16 == 0 && most > 0 {
            s.len / 16 * 16
        } else {
            0
        };
        let mut done = 0;
        while done < words {
            let len = (words - done).min(most);
            out.dispatches.push(Span {
                src_at: s.src_at + done,
                dst_at: s.dst_at + done,
                len,
                ..*s
            });
            done += len;
        }
        if done < s.len {
            out.rest.push(Span {
                src_at: s.src_at + done,
                dst_at: s.dst_at + done,
                len: s.len - done,
                ..*s
            });
        }
    }
    out
}

impl VulkanQueue {
    /// Copies `pieces` (host buffers) into `dst` at `dst_offset` after `wait`.
    pub(super) fn copy_in(
        &self,
        dst: &VulkanBuffer,
        dst_offset: u64,
        pieces: &[Piece],
        keep: Keep,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        let spans = |ps: &[Piece]| -> Vec<Span> {
            ps.iter()
                .map(|p| Span {
                    src: p.buffer,
                    src_at: p.offset,
                    dst: dst.buffer,
                    dst_at: dst_offset + p.at,
                    len: p.len,
                })
                .collect()
        };
        self.copy(Role::Upload, pieces, spans, keep, wait)
    }

    /// Copies `src` at `src_offset` into `pieces` (host buffers) after `wait`, then makes
    /// the bytes visible to the host.
    pub(super) fn copy_out(
        &self,
        pieces: &[Piece],
        src: &VulkanBuffer,
        src_offset: u64,
        keep: Keep,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        let spans = |ps: &[Piece]| -> Vec<Span> {
            ps.iter()
                .map(|p| Span {
                    src: src.buffer,
                    src_at: src_offset + p.at,
                    dst: p.buffer,
                    dst_at: p.offset,
                    len: p.len,
                })
                .collect()
        };
        self.copy(Role::Download, pieces, spans, keep, wait)
    }

    /// One copy command of `role` over `pieces`, each part's spans made by `spans`.
    fn copy(
        &self,
        role: Role,
        pieces: &[Piece],
        spans: impl Fn(&[Piece]) -> Vec<Span>,
        mut keep: Keep,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        let pieces: Vec<Piece> = pieces.iter().copied().filter(|p| p.len > 0).collect();
        if let Some(k) = self
            .copier
            .clone()
            .filter(|_| self.shared.copy.shader_for(role))
        {
            let caps = self.shared.caps;
            let groups = match self.shared.copy {
                VkCopy::Crossed => CROSSED_GROUPS.min(caps.max_groups[0]),
                _ => caps.max_groups[0],
            };
            let shape = shape(
                &spans(&pieces),
                caps.min_storage_offset,
                caps.max_storage_range,
            );
            let sets = match descriptor_sets(&k, &shape.dispatches) {
                Ok(s) => s,
                Err(e) => {
                    self.discard(keep);
                    return Err(e);
                }
            };
            keep.descriptors = sets.as_ref().map(|s| s.0);
            let sets = sets.map_or_else(Vec::new, |s| s.1);
            return self.submit(role, wait, keep, |d, cmd, _| {
                record_shader(d, cmd, &k, &shape, &sets, groups);
                record_spans(d, cmd, &shape.rest);
                to_host(d, cmd, role, true);
                Ok(())
            });
        }
        self.submit(role, wait, keep, |d, cmd, part: Part| {
            record_spans(d, cmd, &spans(&cut(&pieces, part.index, part.of)));
            to_host(d, cmd, role, false);
            Ok(())
        })
    }
}

/// Records `vkCmdCopyBuffer` for each span.
fn record_spans(d: &ash::Device, cmd: vk::CommandBuffer, spans: &[Span]) {
    for s in spans.iter().filter(|s| s.len > 0) {
        let region = vk::BufferCopy {
            src_offset: s.src_at,
            dst_offset: s.dst_at,
            size: s.len,
        };
        // SAFETY: recording into `cmd`; both buffers are live (the Queue contract) and the
        // ranges were checked by the caller.
        unsafe { d.cmd_copy_buffer(cmd, s.src, s.dst, &[region]) };
    }
}

/// After a download: the copy's writes made visible to the host (the shader's too where
/// `shader`; a transfer queue knows only the transfer stage).
fn to_host(d: &ash::Device, cmd: vk::CommandBuffer, role: Role, shader: bool) {
    if role != Role::Download {
        return;
    }
    let (mut stages, mut access) = (
        vk::PipelineStageFlags::TRANSFER,
        vk::AccessFlags::TRANSFER_WRITE,
    );
    if shader {
        stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
        access |= vk::AccessFlags::SHADER_WRITE;
    }
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(access)
        .dst_access_mask(vk::AccessFlags::HOST_READ);
    // SAFETY: recording into `cmd`.
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            stages,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        )
    };
}

/// The binding of `len` bytes at `at` of `buffer`: its offset aligned down to `align`, and
/// the word the bytes start at in it.
fn binding(buffer: vk::Buffer, at: u64, len: u64, align: u64) -> (vk::DescriptorBufferInfo, u32) {
    let base = at / align * align;
    let info = vk::DescriptorBufferInfo {
        buffer,
        offset: base,
        range: at - base + len,
    };
    (info, ((at - base) / 16) as u32)
}

/// A descriptor pool with one set per dispatch, each binding its source and destination, or
/// `None` for no dispatch.
fn descriptor_sets(
    k: &VulkanKernel,
    dispatches: &[Span],
) -> Result<Option<(vk::DescriptorPool, Vec<vk::DescriptorSet>)>> {
    if dispatches.is_empty() {
        return Ok(None);
    }
    let d = &k.shared.device;
    let n = dispatches.len() as u32;
    let sizes = [vk::DescriptorPoolSize {
        ty: vk::DescriptorType::STORAGE_BUFFER,
        descriptor_count: 2 * n,
    }];
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(n)
        .pool_sizes(&sizes);
    // SAFETY: `info` lives through the call.
    let pool = unsafe { d.create_descriptor_pool(&info, None) }
        .map_err(VulkanError::call("vkCreateDescriptorPool"))?;
    let layouts = vec![k.set_layout; n as usize];
    let alloc = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    // SAFETY: the pool and layout are live.
    let sets = match unsafe { d.allocate_descriptor_sets(&alloc) } {
        Ok(s) => s,
        Err(result) => {
            // SAFETY: the pool is unused.
            unsafe { d.destroy_descriptor_pool(pool, None) };
            return Err(VulkanError::Call {
                call: "vkAllocateDescriptorSets",
                result,
            });
        }
    };
    write_sets(k, dispatches, &sets);
    Ok(Some((pool, sets)))
}

/// Binds each dispatch's source and destination in its set.
fn write_sets(k: &VulkanKernel, dispatches: &[Span], sets: &[vk::DescriptorSet]) {
    let align = k.shared.caps.min_storage_offset.max(16).next_power_of_two();
    let infos: Vec<[[vk::DescriptorBufferInfo; 1]; 2]> = dispatches
        .iter()
        .map(|s| {
            [
                [binding(s.src, s.src_at, s.len, align).0],
                [binding(s.dst, s.dst_at, s.len, align).0],
            ]
        })
        .collect();
    let writes: Vec<_> = infos
        .iter()
        .zip(sets)
        .flat_map(|(pair, &set)| {
            pair.iter().enumerate().map(move |(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
        })
        .collect();
    // SAFETY: the sets and buffers are live; the sets are not in use yet.
    unsafe { k.shared.device.update_descriptor_sets(&writes, &[]) };
}

/// Records one `copy16` dispatch per span of `shape`, over `sets`.
fn record_shader(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    k: &VulkanKernel,
    shape: &Shape,
    sets: &[vk::DescriptorSet],
    max_groups: u32,
) {
    let align = k.shared.caps.min_storage_offset.max(16).next_power_of_two();
    for (s, &set) in shape.dispatches.iter().zip(sets) {
        let n = s.len / 16;
        let src_at = binding(s.src, s.src_at, s.len, align).1;
        let dst_at = binding(s.dst, s.dst_at, s.len, align).1;
        let push: Vec<u8> = [n as u32, src_at, dst_at]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let groups = n.div_ceil(256).min(u64::from(max_groups.clamp(1, 65535))) as u32;
        // SAFETY: recording into `cmd`; the pipeline, layout and set are live (the queue keeps
        // the kernel, the command keeps the pool); the push constants are the kernel's 12 bytes.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, k.pipeline);
            let point = vk::PipelineBindPoint::COMPUTE;
            d.cmd_bind_descriptor_sets(cmd, point, k.layout, 0, &[set], &[]);
            let stage = vk::ShaderStageFlags::COMPUTE;
            d.cmd_push_constants(cmd, k.layout, stage, 0, &push);
            d.cmd_dispatch(cmd, groups, 1, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    #[test]
    fn halves_cut_at_4_kib_across_pieces() {
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        let pieces = [
            Piece {
                buffer: a,
                offset: 100,
                len: 6000,
                at: 0,
            },
            Piece {
                buffer: b,
                offset: 0,
                len: 6000,
                at: 6000,
            },
        ];
        let first = cut(&pieces, 0, 2);
        let second = cut(&pieces, 1, 2);
        assert_eq!(
            first,
            [Piece {
                buffer: a,
                offset: 100,
                len: 4096,
                at: 0
            }]
        );
        assert_eq!(
            second,
            [
                Piece {
                    buffer: a,
                    offset: 4196,
                    len: 1904,
                    at: 4096
                },
                Piece {
                    buffer: b,
                    offset: 0,
                    len: 6000,
                    at: 6000
                },
            ]
        );
        assert_eq!(cut(&pieces, 0, 1), pieces);
        // Thirds of a span of 3 * 2^62 bytes (no overflow in the cut).
        let huge = [Piece {
            buffer: a,
            offset: 0,
            len: 3 << 62,
            at: 0,
        }];
        assert_eq!(cut(&huge, 1, 3)[0].len, 1 << 62);
    }

    #[test]
    fn the_shader_takes_aligned_words_in_bindings_that_fit() {
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        let s = |src_at, dst_at, len| Span {
            src: a,
            src_at,
            dst: b,
            dst_at,
            len,
        };
        // 3 words + 5 bytes, bindings of at most 64 - 16 = 48 bytes: 3 words a dispatch.
        let got = shape(&[s(16, 32, 53)], 16, 64);
        assert_eq!(got.dispatches, [s(16, 32, 48)]);
        assert_eq!(got.rest, [s(64, 80, 5)]);
        let got = shape(&[s(8, 32, 64)], 16, 1 << 20);
        assert!(
            got.dispatches.is_empty(),
            "a misaligned source is copied whole"
        );
        assert_eq!(got.rest, [s(8, 32, 64)]);
        let got = shape(&[s(0, 0, 4 << 20)], 64, 1 << 20);
        assert_eq!(got.dispatches.len(), 5);
        assert_eq!(got.dispatches.iter().map(|d| d.len).sum::<u64>(), 4 << 20);
        assert!(got.rest.is_empty());
    }
}
