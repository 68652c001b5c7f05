// mix_u32 (pinstream's in-place built-in) in WGSL for `--api vulkan`: the same arithmetic as
// the OpenCL C kernel in crates/pinstream-lab/src/kernels.rs, one invocation per element.
// Binding convention: buffers at @group(0) @binding(0..), values (counts, then user scalars)
// as the members of one var<immediate> struct, in parameter order; a 64-bit count (WGSL has
// no 64-bit integers) is a vec2<u32>, low word first. Groups past
// maxComputeWorkGroupCount[0] come as a second grid dimension.
struct Counts {
    n: u32,
    block: u32,
    offset: vec2<u32>,
}

@group(0) @binding(0) var<storage, read_write> x: array<u32>;
var<immediate> counts: Counts;

@compute @workgroup_size(256)
fn mix_u32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 256u + lid;
    if (i >= counts.n) {
        return;
    }
    var v = x[i];
    v ^= v >> 15u;
    v *= 0x2c1b3c6du;
    v ^= v >> 12u;
    v += counts.offset.x + i; // the salt wraps at 32 bits, as the OpenCL kernel's (uint) cast
    x[i] = v;
}
