// The CUDA twin of scale.cl: in place, x = x * factor, one thread per element.
//   pinstream run --api cuda --kernel examples/scale.cu --entry scale --synthetic 1GiB --arg factor=2
// The same convention as the OpenCL kernels: the streamed buffers first, then three integers
// (elements in this block, block index, element offset of the block), then user scalars.
// pinstream reads the parameters from this signature, so write it plainly (no macros) and
// declare the kernel extern "C".
extern "C" __global__ void scale(float* x, unsigned long long n, unsigned long long block,
                                 unsigned long long offset, float factor) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
