// In place: x = x * factor, one work item per element.
//   pinstream run --kernel examples/scale.cl --entry scale --synthetic 1GiB --arg factor=2
// The convention (see the engine docs): the streamed buffers first, then three integers
// (elements in this block, block index, element offset of the block), then user scalars.
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] *= factor;
}
