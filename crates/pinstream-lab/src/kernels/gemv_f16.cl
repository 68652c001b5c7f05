// y = W·x over blocks of rows: W (half, row-major, `cols` per row) streamed from --input,
// y (float) written to --output, x (float, `cols` values) uploaded once with --resident.
// One work-group of 256 per row:
//   pinstream run --kernel examples/gemv_f16.cl --entry gemv_f16 --input W.f16 --dtype f16 \
//     --resident x.f32 --output y.f32 --out-dtype f32 --reduce COLS --work output \
//     --items 256 --local 256 --arg cols=COLS
__kernel void gemv_f16(__global const half* w, __global float* y, __global const float* x,
                       ulong n, ulong block, ulong offset, uint cols) {
    __local float part[256];
    size_t row = get_group_id(0);
    uint lid = get_local_id(0);
    size_t rows = n / cols;
    float acc = 0.0f;
    if (row < rows) {
        __global const half* wr = w + row * cols;
        for (uint j = lid; j < cols; j += 256) acc += vload_half(j, wr) * x[j];
    }
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = 128; s > 0; s >>= 1) {
        if (lid < s) part[lid] += part[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && row < rows) y[row] = part[0];
}
