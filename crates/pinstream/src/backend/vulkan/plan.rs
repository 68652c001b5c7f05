//! Which hardware queues a device's commands go to: kernels on the compute family, copies as
//! the device's [`VkCopy`] says (on NVIDIA the transfer-only family's queues are the copy
//! engines, which run beside kernels and beside each other). A device opens two families:
//! the compute one and a side family, the transfer-only one, or the compute-only one for
//! [`VkCopy::Crossed`].

use ash::vk;
use std::sync::Mutex;

/// How the devices a Vulkan instance opens copy and pin host memory: chosen when the
/// instance is made ([`super::VulkanInstance::with_options`]; the CLI's `--vk-copy` and
/// `--vk-huge-pages`), not per command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VkOptions {
    /// How uploads and downloads run.
    pub copy: VkCopy,
    /// Host memory pinstream maps for imports asks for 2 MiB pages (`madvise(MADV_HUGEPAGE)`
    /// on a 2 MiB-aligned mapping; the default), else stays on the system's base pages: one
    /// GPU page-table entry per 4 KiB instead of per 2 MiB where the kernel backs the range
    /// with huge pages.
    pub huge_pages: bool,
}

impl Default for VkOptions {
    fn default() -> Self {
        VkOptions {
            copy: VkCopy::default(),
            huge_pages: true,
        }
    }
}

/// How a Vulkan device moves bytes between host memory and device buffers (chosen when the
/// instance is made: [`VkOptions::copy`]; `bench --vk-copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VkCopy {
    /// `vkCmdCopyBuffer` on the transfer-only queue family, uploads on one of its queues and
    /// downloads on another (one queue: both on it); the compute family where the device has
    /// no transfer-only family.
    Transfer,
    /// `vkCmdCopyBuffer` on the compute family (on NVIDIA the universal one), on the queue of
    /// the lane that enqueues it.
    Universal,
    /// A compute shader on the compute family reads the source buffer in 16-byte words and
    /// writes the destination (host memory imported as a storage buffer).
    Shader,
    /// Each copy cut in two halves, run at once on two queues of the transfer-only family
    /// (two of the compute family where it has fewer than two; with one queue in all, the
    /// halves run one after the other on it).
    Split,
    /// Uploads as [`VkCopy::Transfer`] (the copy engine), downloads as [`VkCopy::Shader`]
    /// (the compute family's shader writing host memory): the two directions on different
    /// hardware, for both ways at once.
    Mixed,
    /// Each copy where that measured fastest for what else is in flight: on the compute
    /// family's queue of its lane (as [`VkCopy::Universal`]) while no copy of the other
    /// direction is in flight, and on the transfer-only family's queue of its direction (as
    /// [`VkCopy::Transfer`]) while one is. On an H100 (plain Vulkan,
    /// `bench/ceiling/vk_ceiling.c`, 2026-12-06) one direction alone ran at 51.2 / 52.5 GB/s on
    /// the universal queue against 49.6 / 51.3 on a transfer queue, while both ways at once ran
    /// at 59.6 GB/s on the two transfer queues against 52.5-53.6 with one on each family. Where
    /// the device has no transfer-only family, as [`VkCopy::Transfer`] there (with one
    /// transfer queue, both directions share it while crossing). The default.
    #[default]
    Auto,
    /// Uploads by the copy shader on the compute family's first queue, every lane's, in 512
    /// workgroups (a grid-stride loop); downloads by `vkCmdCopyBuffer` on the first queue of
    /// the compute-only family (a family with compute and no graphics other than the compute
    /// family; NVIDIA's async-compute one), and the lanes' kernels on its second queue (a
    /// device opens two of that family, so every lane's kernels share that one queue; in
    /// place on an H100 that ran at 52.3–52.5 GB/s against 46.0 with each lane's kernels on its
    /// own universal queue). Plain Vulkan on an H100
    /// (`bench/ceiling/vk_ceiling.c --groups 512`) moved 72.7 GB/s both ways that way (36.4
    /// up, 37.0 down) against 59.6 on the two transfer queues. Where the device has no
    /// compute-only family, downloads run on the lane's compute queue.
    Crossed,
}

/// Workgroups of [`VkCopy::Crossed`]'s upload shader (a grid-stride loop over them): the
/// plain-Vulkan ceiling's both-ways best came with 512, and one way it reads as fast as with
/// 8,192.
pub(super) const CROSSED_GROUPS: u32 = 512;

/// The compute family's queue every [`VkCopy::Crossed`] upload runs on. On NVIDIA (H100, H200)
/// the universal family's queues are not alike beside a download on the compute-only family:
/// plain Vulkan's shader upload moved 72.7 GB/s both ways from queue 0 against 49.8 from queue 1
/// (`vk_ceiling.c --groups 512`), and pinstream's, taking the lane's queue in turn, alternated
/// pass by pass between about 69 (queue 0) and 50 GB/s (queue 2) on an H200
/// (bench/results/h200/session-2026-12-07, `compare --api vulkan --vk-copy crossed`). The cost:
/// every stream's uploads on a device share this one in-order queue, so concurrent streams
/// (several rings, or a C or Python program's threads) take turns where each lane had a queue.
pub(super) const CROSSED_UPLOAD_QUEUE: usize = 0;

/// The compute-family queue of the `n`th lane opened on a device with `queues` of them: in
/// turn, leaving [`CROSSED_UPLOAD_QUEUE`] to the uploads when copying [`VkCopy::Crossed`] (with
/// more than one queue). There the lane's kernels run on it only where the device has no
/// compute-only family with two queues ([`route`]).
pub(super) fn lane_queue(way: VkCopy, n: usize, queues: usize) -> usize {
    match way {
        VkCopy::Crossed if queues > 1 => (CROSSED_UPLOAD_QUEUE + 1 + n % (queues - 1)) % queues,
        _ => n % queues.max(1),
    }
}

impl VkCopy {
    /// Every way, in the order `--help` lists them.
    pub const ALL: [VkCopy; 7] = [
        VkCopy::Transfer,
        VkCopy::Universal,
        VkCopy::Shader,
        VkCopy::Split,
        VkCopy::Mixed,
        VkCopy::Auto,
        VkCopy::Crossed,
    ];

    /// True when commands of `role` copy with the compute shader.
    pub(super) fn shader_for(self, role: Role) -> bool {
        match self {
            VkCopy::Shader => true,
            VkCopy::Mixed => role == Role::Download,
            VkCopy::Crossed => role == Role::Upload,
            _ => false,
        }
    }

    /// True when some copy runs the compute shader.
    pub(super) fn uses_shader(self) -> bool {
        matches!(self, VkCopy::Shader | VkCopy::Mixed | VkCopy::Crossed)
    }

    /// The name `--vk-copy` takes.
    pub fn name(self) -> &'static str {
        match self {
            VkCopy::Transfer => "transfer",
            VkCopy::Universal => "universal",
            VkCopy::Shader => "shader",
            VkCopy::Split => "split",
            VkCopy::Mixed => "mixed",
            VkCopy::Auto => "auto",
            VkCopy::Crossed => "crossed",
        }
    }
}

impl std::fmt::Display for VkCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for VkCopy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        VkCopy::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = VkCopy::ALL.iter().map(|w| w.name()).collect();
                format!(
                    "`{s}` is not a Vulkan copy way: use one of {}",
                    names.join(", ")
                )
            })
    }
}

/// One opened queue family: its index, its queues, and its timestamps' valid bits.
pub(super) struct Family {
    pub(super) index: u32,
    pub(super) queues: Vec<Mutex<vk::Queue>>,
    /// `timestampValidBits` (0: the family writes no timestamps).
    pub(super) timestamp_bits: u32,
}

/// A hardware queue: the compute family's (`side` false) or the side family's, by index in
/// that family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hw {
    pub(super) side: bool,
    pub(super) queue: usize,
}

/// What a command does, for choosing its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Upload,
    Download,
    Compute,
}

/// The families to open on a device copying `way`: the compute one (the first with compute)
/// and, where the device has one, the side family: the transfer-only one (transfer without
/// compute or graphics), or, for [`VkCopy::Crossed`], the compute-only one (compute without
/// graphics, not the compute family).
pub(super) fn pick_families(
    families: &[vk::QueueFamilyProperties],
    way: VkCopy,
) -> Option<(u32, Option<u32>)> {
    use vk::QueueFlags as F;
    let find = |ok: &dyn Fn(u32, F) -> bool| {
        (0u32..)
            .zip(families)
            .find(|&(i, f)| f.queue_count > 0 && ok(i, f.queue_flags))
            .map(|(i, _)| i)
    };
    let compute = find(&|_, f| f.contains(F::COMPUTE))?;
    let side = match way {
        VkCopy::Crossed => {
            find(&|i, f| i != compute && f.contains(F::COMPUTE) && !f.contains(F::GRAPHICS))
        }
        _ => find(&|_, f| f.contains(F::TRANSFER) && !f.intersects(F::COMPUTE | F::GRAPHICS)),
    };
    Some((compute, side))
}

/// The last copy submitted in each direction (uploads, downloads): the timeline semaphore its queue
/// signals and the value it signals there, so [`VkCopy::Auto`] can tell whether a copy of the other
/// direction is still in flight. Only the last: with several lanes of one direction, a short later
/// copy done hides a longer earlier one still running, and two lanes may both route before either
/// records its copy. Either only costs speed (the copy runs on the other queue); the order of every
/// lane's commands is its timeline's. A semaphore outlives every queue that gives it back
/// ([`super::device::Shared::retire`]) and goes on from the value it reached, so a value kept here
/// is reached once its copy completed, whichever queue holds it since.
#[derive(Default)]
pub(super) struct Traffic {
    last: [Mutex<Option<(vk::Semaphore, u64)>>; 2],
}

impl Traffic {
    /// Notes that a copy of `role` was submitted, signalling `semaphore` at `value`.
    pub(super) fn sent(&self, role: Role, semaphore: vk::Semaphore, value: u64) {
        if let Some(i) = direction(role) {
            *crate::sync::lock(&self.last[i]) = Some((semaphore, value));
        }
    }

    /// Whether the last copy of the direction other than `role`'s is still in flight, by
    /// `reached` (a semaphore's current value; a failure to read it counts as in flight).
    pub(super) fn crossing<E>(
        &self,
        role: Role,
        reached: impl Fn(vk::Semaphore) -> std::result::Result<u64, E>,
    ) -> bool {
        let Some(i) = direction(role) else {
            return false;
        };
        let last = *crate::sync::lock(&self.last[1 - i]);
        last.is_some_and(|(semaphore, value)| reached(semaphore).map_or(true, |r| r < value))
    }
}

/// The index of `role`'s direction in [`Traffic`]; `None` for kernels.
fn direction(role: Role) -> Option<usize> {
    match role {
        Role::Upload => Some(0),
        Role::Download => Some(1),
        Role::Compute => None,
    }
}

/// The hardware queue(s) a command of `role` from a lane on compute queue `slot` runs on,
/// copying `way`, on a device whose side family has `side_queues` queues (0: none) and whose
/// compute family has `compute_queues` opened; `crossing`: a copy of the other
/// direction is in flight (read by [`VkCopy::Auto`] only). Two: the halves of a split copy.
pub(super) fn route(
    way: VkCopy,
    (role, slot): (Role, usize),
    side_queues: usize,
    compute_queues: usize,
    crossing: bool,
) -> Vec<Hw> {
    let compute = |queue| Hw { side: false, queue };
    let side = |queue| Hw { side: true, queue };
    let copy_queue = if role == Role::Download { 1 } else { 0 };
    let way = match way {
        // Without a side family both come to the lane's compute queue.
        VkCopy::Auto if crossing => VkCopy::Transfer,
        VkCopy::Auto => VkCopy::Universal,
        way => way,
    };
    match (way, role) {
        // Off the universal family, whose queue 0 the uploads' shader has to itself.
        // The lane on compute queue `slot` (1 and up: 0 is the uploads') on side queue
        // `slot` where there are that many, so lanes on different queues get different ones.
        (VkCopy::Crossed, Role::Compute) if side_queues > 1 => {
            let others = side_queues - 1;
            vec![side(1 + (slot + others - 1) % others)]
        }
        (_, Role::Compute) | (VkCopy::Universal | VkCopy::Shader | VkCopy::Auto, _) => {
            vec![compute(slot)] // (`Auto` was made one of the others above)
        }
        (VkCopy::Mixed, Role::Download) => vec![compute(slot)],
        (VkCopy::Crossed, Role::Upload) => vec![compute(CROSSED_UPLOAD_QUEUE)],
        (VkCopy::Crossed, _) if side_queues > 0 => vec![side(0)],
        (VkCopy::Transfer | VkCopy::Mixed, _) if side_queues > 0 => {
            vec![side(copy_queue.min(side_queues - 1))]
        }
        (VkCopy::Transfer | VkCopy::Mixed | VkCopy::Crossed, _) => vec![compute(slot)],
        (VkCopy::Split, _) if side_queues > 1 => vec![side(0), side(1)],
        (VkCopy::Split, _) => vec![compute(slot), compute((slot + 1) % compute_queues.max(1))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(flags: vk::QueueFlags, count: u32) -> vk::QueueFamilyProperties {
        vk::QueueFamilyProperties {
            queue_flags: flags,
            queue_count: count,
            ..Default::default()
        }
    }

    #[test]
    fn nvidia_families_give_the_universal_and_the_transfer_only_one() {
        use vk::QueueFlags as F;
        let nvidia = [
            family(F::GRAPHICS | F::COMPUTE | F::TRANSFER, 16),
            family(F::TRANSFER | F::SPARSE_BINDING, 2),
            family(F::COMPUTE | F::TRANSFER, 8),
            family(F::VIDEO_DECODE_KHR, 1),
        ];
        assert_eq!(pick_families(&nvidia, VkCopy::Auto), Some((0, Some(1))));
        assert_eq!(pick_families(&nvidia, VkCopy::Crossed), Some((0, Some(2))));
        let lavapipe = [family(F::GRAPHICS | F::COMPUTE | F::TRANSFER, 1)];
        for way in VkCopy::ALL {
            assert_eq!(pick_families(&lavapipe, way), Some((0, None)));
        }
        let compute_first = [family(F::COMPUTE, 2), family(F::GRAPHICS | F::COMPUTE, 1)];
        assert_eq!(
            pick_families(&compute_first, VkCopy::Crossed),
            Some((0, None))
        );
        assert_eq!(pick_families(&[family(F::GRAPHICS, 1)], VkCopy::Auto), None);
    }

    #[test]
    fn copies_go_to_the_transfer_family_where_there_is_one() {
        let t = |queue| Hw { side: true, queue };
        let c = |queue| Hw { side: false, queue };
        use Role::*;
        use VkCopy::*;
        assert_eq!(route(Transfer, (Upload, 3), 2, 4, false), [t(0)]);
        assert_eq!(route(Transfer, (Download, 3), 2, 4, false), [t(1)]);
        assert_eq!(route(Transfer, (Download, 3), 1, 4, false), [t(0)]);
        assert_eq!(route(Transfer, (Compute, 3), 2, 4, false), [c(3)]);
        assert_eq!(route(Transfer, (Upload, 2), 0, 4, false), [c(2)]);
        assert_eq!(route(Universal, (Download, 1), 2, 4, false), [c(1)]);
        assert_eq!(route(Shader, (Upload, 1), 2, 4, false), [c(1)]);
        assert_eq!(route(Split, (Upload, 1), 2, 4, false), [t(0), t(1)]);
        assert_eq!(route(Split, (Download, 3), 0, 4, false), [c(3), c(0)]);
        assert_eq!(route(Split, (Download, 0), 0, 1, false), [c(0), c(0)]);
        assert_eq!(route(Mixed, (Upload, 3), 2, 4, false), [t(0)]);
        assert_eq!(route(Mixed, (Download, 3), 2, 4, false), [c(3)]);
        assert_eq!(route(Mixed, (Upload, 2), 0, 4, false), [c(2)]);
        assert!(Mixed.shader_for(Download) && !Mixed.shader_for(Upload));
        // Auto: the lane's compute queue alone, the direction's transfer queue crossing.
        assert_eq!(route(Auto, (Upload, 3), 2, 4, false), [c(3)]);
        assert_eq!(route(Auto, (Download, 1), 2, 4, false), [c(1)]);
        assert_eq!(route(Auto, (Upload, 3), 2, 4, true), [t(0)]);
        assert_eq!(route(Auto, (Download, 3), 2, 4, true), [t(1)]);
        assert_eq!(route(Auto, (Download, 3), 0, 4, true), [c(3)]);
        assert_eq!(route(Auto, (Compute, 2), 2, 4, true), [c(2)]);
        // Crossed: every lane's shader uploads on the first compute queue, downloads on the
        // side (compute-only) family, or the lane's queue without one.
        assert_eq!(route(Crossed, (Upload, 3), 2, 4, false), [c(0)]);
        assert_eq!(route(Crossed, (Upload, 0), 0, 1, false), [c(0)]);
        assert_eq!(route(Crossed, (Download, 3), 2, 4, false), [t(0)]);
        assert_eq!(route(Crossed, (Download, 3), 0, 4, false), [c(3)]);
        // Kernels on the side family's queues after the downloads' (its first), or the
        // lane's compute queue where it has fewer than two.
        assert_eq!(route(Crossed, (Compute, 2), 2, 4, false), [t(1)]);
        // The lanes on compute queues 1, 2 and 3: with 4 side queues each lane's kernels on
        // its own, none on the downloads'; with 2 (as a device opens them now), all on the
        // second.
        let lanes = |side_queues| -> Vec<_> {
            (0..6)
                .map(|n| lane_queue(Crossed, n, 4))
                .map(|slot| route(Crossed, (Compute, slot), side_queues, 4, false))
                .collect()
        };
        assert_eq!(lanes(4), [[t(1)], [t(2)], [t(3)], [t(1)], [t(2)], [t(3)]]);
        assert_eq!(lanes(2), [[t(1)]; 6]);
        assert_eq!(route(Crossed, (Compute, 0), 4, 1, false), [t(3)]);
        assert_eq!(route(Crossed, (Compute, 2), 1, 4, false), [c(2)]);
        assert!(Crossed.shader_for(Upload) && !Crossed.shader_for(Download));
    }

    #[test]
    fn crossed_lanes_leave_the_upload_queue_to_uploads() {
        let lanes = |way, queues| {
            (0..6)
                .map(|n| lane_queue(way, n, queues))
                .collect::<Vec<_>>()
        };
        assert_eq!(lanes(VkCopy::Crossed, 4), [1, 2, 3, 1, 2, 3]);
        assert_eq!(lanes(VkCopy::Crossed, 2), [1; 6]);
        assert_eq!(lanes(VkCopy::Crossed, 1), [0; 6]);
        assert_eq!(lanes(VkCopy::Auto, 4), [0, 1, 2, 3, 0, 1]);
        assert_eq!(lanes(VkCopy::Transfer, 1), [0; 6]);
        for queues in 2..=16 {
            for n in 0..64 {
                let q = lane_queue(VkCopy::Crossed, n, queues);
                assert!((1..queues).contains(&q), "{n} of {queues}: {q}");
            }
        }
    }

    #[test]
    fn traffic_says_whether_the_other_direction_is_in_flight() {
        use ash::vk::Handle;
        use Role::*;
        let t = Traffic::default();
        let (up, down) = (vk::Semaphore::from_raw(1), vk::Semaphore::from_raw(2));
        let at = |up_at: u64, down_at: u64| {
            move |s: vk::Semaphore| -> Result<u64, ()> { Ok(if s == up { up_at } else { down_at }) }
        };
        assert!(!t.crossing(Upload, at(0, 0)), "nothing sent yet");
        t.sent(Download, down, 5);
        assert!(t.crossing(Upload, at(0, 4)), "download 5 not reached");
        assert!(!t.crossing(Upload, at(0, 5)), "reached");
        assert!(!t.crossing(Download, at(0, 0)), "no upload sent");
        assert!(!t.crossing(Compute, at(0, 0)), "kernels cross nothing");
        t.sent(Upload, up, 3);
        t.sent(Compute, up, 9); // not a copy: not kept
        assert!(t.crossing(Download, at(2, 9)));
        assert!(!t.crossing(Download, at(3, 9)));
        assert!(
            t.crossing(Download, |_| Err::<u64, ()>(())),
            "unread counts as in flight"
        );
    }

    #[test]
    fn every_way_parses_from_its_name() {
        for w in VkCopy::ALL {
            assert_eq!(w.name().parse::<VkCopy>(), Ok(w));
        }
        let e = "fast".parse::<VkCopy>().unwrap_err();
        assert!(
            e.contains("transfer, universal") && e.contains("crossed"),
            "{e}"
        );
    }
}
