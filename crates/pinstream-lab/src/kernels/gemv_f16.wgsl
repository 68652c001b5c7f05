// y = W·x over blocks of rows in WGSL for `--api vulkan` (the twin of gemv_f16.cl): W (f16,
// row-major, `cols` per row) streamed, y (f32) out of place, x (f32, `cols`) resident. One
// work-group of 256 per row. W's halves are read as packed u32 words with unpack2x16float
// (WGSL's f16 type needs shaderFloat16, which not every device offers), so `w` is array<u32>.
//   pinstream run --api vulkan --kernel examples/gemv_f16.wgsl --entry gemv_f16 --input W.f16 \
//     --dtype f16 --resident x.f32 --output y.f32 --out-dtype f32 --reduce COLS \
//     --work output --items 256 --local 256 --arg cols=COLS
struct Args {
    n: u32,
    block: u32,
    offset: vec2<u32>, // a 64-bit count: low word, high word (WGSL has no 64-bit integers)
    cols: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
var<immediate> args: Args;
var<workgroup> part: array<f32, 256>;

// Element k of W.
fn half_at(k: u32) -> f32 {
    let pair = unpack2x16float(w[k >> 1u]);
    return select(pair.x, pair.y, (k & 1u) == 1u);
}

@compute @workgroup_size(256)
fn gemv_f16(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let row = wg.y * groups.x + wg.x;
    let rows = args.n / args.cols;
    var acc = 0.0;
    if (row < rows && (args.cols & 1u) == 0u) {
        // Rows of an even length start on a word: each thread takes whole words (two halves
        // per load, one unpack), adjacent threads adjacent words.
        let base = row * (args.cols >> 1u);
        for (var j = lid; j < args.cols >> 1u; j += 256u) {
            let pair = unpack2x16float(w[base + j]);
            acc += pair.x * x[2u * j] + pair.y * x[2u * j + 1u];
        }
    } else if (row < rows) {
        let base = row * args.cols;
        for (var j = lid; j < args.cols; j += 256u) {
            acc += half_at(base + j) * x[j];
        }
    }
    part[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            part[lid] += part[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u && row < rows) {
        y[row] = part[0];
    }
}
