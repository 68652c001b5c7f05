// mapped_read / mapped_write (doctor's kernel bandwidth over mapped memory) in WGSL for
// `--api vulkan`: the same work as the OpenCL C kernels in crates/pinstream-lab/src/kernels.rs,
// grid-strided over every invocation. Binding convention as mix_u32.wgsl. One binding is at
// most maxStorageBufferRange (< 4 GiB) bytes, under 2^28 16-byte words: the word index `k` and
// the count's low word suffice (the count's high word is 0).
struct ReadCounts {
    n: vec2<u32>,
}

struct WriteCounts {
    n: vec2<u32>,
    salt: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> sums: array<u32>;
@group(0) @binding(0) var<storage, read_write> dst: array<vec4<u32>>;
var<immediate> rc: ReadCounts;
var<immediate> wc: WriteCounts;

@compute @workgroup_size(256)
fn mapped_read(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 256u + lid;
    if (i >= arrayLength(&sums)) {
        return;
    }
    let g = groups.x * groups.y * 256u;
    var acc = vec4<u32>(0u);
    for (var k = i; k < rc.n.x; k += g) {
        acc ^= src[k];
    }
    sums[i] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}

@compute @workgroup_size(256)
fn mapped_write(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 256u + lid;
    let g = groups.x * groups.y * 256u;
    for (var k = i; k < wc.n.x; k += g) {
        dst[k] = vec4<u32>(k ^ wc.salt, 0u, wc.salt, k);
    }
}
