// embedding_bag (demo --workload embedding) in WGSL for `--api vulkan`: the same sums as the
// OpenCL C kernel in crates/pinstream/src/engine/kernels.rs, one invocation per output value.
// The table comes a chunk (one binding) at a time: `table` holds rows `first..first + rows`;
// ids outside them are skipped; the launch over the chunk of row 0 writes `out`, the others
// add to it. Binding convention as mix_u32.wgsl (`bags`, a 64-bit count, is a vec2<u32>).
struct Args {
    bag: u32,
    dim: u32,
    bags: vec2<u32>,
    first: u32,
    rows: u32,
}

@group(0) @binding(0) var<storage, read> table: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<immediate> a: Args;

@compute @workgroup_size(256)
fn embedding_bag(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let g = (wg.y * groups.x + wg.x) * 256u + lid;
    if (g >= a.bags.x * a.dim) {
        return;
    }
    let b = g / a.dim;
    let d = g % a.dim;
    var s = 0.0;
    for (var k = 0u; k < a.bag; k++) {
        let r = ids[b * a.bag + k] - a.first; // wraps below `first`: skipped as rows past the chunk
        if (r < a.rows) {
            s += table[r * a.dim + d];
        }
    }
    if (a.first == 0u) {
        out[g] = s;
    } else {
        out[g] += s;
    }
}
