// In place: the seed's kernel (examples/seed.cl) in WGSL, d[i] = d[i] * 2654435761 + 12345
// over uint32, for a Vulkan program's stream and `--api vulkan`:
//   pinstream run --api vulkan --kernel examples/seed.wgsl --entry seed --synthetic 10GiB --dtype u32
//   examples/c/vk_stream --engine examples/seed.wgsl --total 10GiB   (psVkStream*, the same work)
// The convention (docs/cli.md, Vulkan): the streamed buffer at binding 0, then the block's
// element count as the first member of the immediate (push-constant) struct. 256 per group;
// groups past maxComputeWorkGroupCount[0] come as a second grid dimension.
struct Counts {
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> d: array<u32>;
var<immediate> counts: Counts;

@compute @workgroup_size(256)
fn seed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 256u + lid;
    if (i < counts.n) {
        d[i] = d[i] * 2654435761u + 12345u;
    }
}
