// embedding_bag (demo --workload embedding) in WGSL for `--api vulkan`: the same sums as the
// OpenCL C kernel in crates/pinstream-lab/src/kernels.rs, one invocation per output value.
// One binding reaches at most maxStorageBufferRange bytes, so the table comes as up to four
// bindings (t0..t3, each `rows` rows but the last, which may be shorter; unused ones repeat the
// last): rows `first..first + 4 * rows` of the table. Ids outside them are skipped; the launch
// with `first` 0 writes `out`, a launch over later rows (a table above four bindings) adds to
// it. Binding convention as mix_u32.wgsl (`bags`, a 64-bit count, is a vec2<u32>).
struct Args {
    bag: u32,
    dim: u32,
    bags: vec2<u32>,
    first: u32,
    rows: u32,
}

@group(0) @binding(0) var<storage, read> t0: array<f32>;
@group(0) @binding(1) var<storage, read> t1: array<f32>;
@group(0) @binding(2) var<storage, read> t2: array<f32>;
@group(0) @binding(3) var<storage, read> t3: array<f32>;
@group(0) @binding(4) var<storage, read> ids: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
var<immediate> a: Args;

// Element `k` of binding `c`, or 0 past its end.
fn at(c: u32, k: u32) -> f32 {
    switch c {
        case 0u: { if (k < arrayLength(&t0)) { return t0[k]; } }
        case 1u: { if (k < arrayLength(&t1)) { return t1[k]; } }
        case 2u: { if (k < arrayLength(&t2)) { return t2[k]; } }
        case 3u: { if (k < arrayLength(&t3)) { return t3[k]; } }
        default: {}
    }
    return 0.0;
}

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
        let r = ids[b * a.bag + k] - a.first; // wraps below `first`: skipped as rows past these
        let c = r / a.rows;
        if (c < 4u) {
            s += at(c, (r - c * a.rows) * a.dim + d);
        }
    }
    if (a.first == 0u) {
        out[g] = s;
    } else {
        out[g] += s;
    }
}
