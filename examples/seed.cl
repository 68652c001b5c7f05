// In place: the seed's kernel, d[i] = d[i] * 2654435761 + 12345 over uint32.
//   pinstream run --kernel examples/seed.cl --entry seed --synthetic 10GiB --dtype u32
//   python3 examples/python/stream_larger_than_vram.py --total 10GiB   (the same work)
// The convention (docs/cli.md): the streamed buffer, then the block's element count.
__kernel void seed(__global uint* d, ulong n) {
    size_t i = get_global_id(0);
    if (i < n) d[i] = d[i] * 2654435761u + 12345u;
}
