// The CUDA twin of gemv_f16.cl, and the library's built-in GEMV_F16_CUDA (included from here):
// y = W·x over blocks of rows, W (f16 bits, row-major, `cols` per row) streamed, y (float)
// written, x (float, `cols` values) resident; one block of 256 threads per row:
//   pinstream run --api cuda --kernel examples/gemv_f16.cu --entry gemv_f16 --input W.f16 \
//     --dtype f16 --resident x.f32 --output y.f32 --out-dtype f32 --reduce COLS --work output \
//     --items 256 --local 256 --arg cols=COLS
extern "C" __global__ void gemv_f16(const unsigned short* w, float* y, const float* x,
                                    unsigned long long n, unsigned long long block,
                                    unsigned long long offset, unsigned int cols) {
    __shared__ float part[256];
    unsigned long long row = blockIdx.x;
    unsigned int lid = threadIdx.x;
    unsigned long long rows = n / cols;
    float acc = 0.0f;
    if (row < rows) {
        const unsigned short* wr = w + row * cols;
        for (unsigned int j = lid; j < cols; j += 256) {
            float f;
            asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(wr[j]));
            acc += f * x[j];
        }
    }
    part[lid] = acc;
    __syncthreads();
    for (unsigned int s = 128; s > 0; s >>= 1) {
        if (lid < s) part[lid] += part[lid + s];
        __syncthreads();
    }
    if (lid == 0 && row < rows) y[row] = part[0];
}
