// CUDA's own hand-written loop over the passes of issue 36's y = W·x, beside
// `pinstream demo --passes 10 --vram-budget 4GiB` (scripts/gpu-validate.sh cuda-passes): the
// blocks that do not stay resident (101 of 64 MiB at a 4 GiB budget) uploaded from pinned host
// memory (cudaHostAlloc) into a ring of --slots device buffers on one stream, each read by a
// kernel on a second stream, the ring chained by events as the engine chains it, for --passes
// passes. Whether a pass of CUDA's own loop, with no pinstream in it, also takes 3-40% longer
// than the median in some runs: the windows of slow uploads that pinstream's traces show.
//
// Prints one JSON object: the one-way peak measured first in the same process (--peak-reps
// copies of 256 MiB, median of 5 runs), each pass's seconds (device events, the first pass
// from its first upload, each later from the previous pass's end), each pass's bytes and floor
// (bytes / peak), and every upload's start and length (ms from the first upload).
//   nvcc -O2 cuda_passes.cu -o cuda_passes
//   cuda_passes [--blocks 101] [--block-mib 64] [--slots 4] [--passes 10] [--peak-reps 4]
// Exit code: 0, or 1 when a kernel's checksum disagrees with the host's, 2 on a CUDA error.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CU(call)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "cuda_passes: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

// Reads a whole block (as y = W·x reads W) and adds its words into *sum.
__global__ void read_block(const unsigned *w, size_t n, unsigned long long *sum) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += w[i];
  atomicAdd(sum, s);
}

static int arg(int argc, char **argv, const char *name, int dflt) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
  return dflt;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i += 2) {
    const char *known[] = {"--blocks", "--block-mib", "--slots", "--passes", "--peak-reps"};
    bool ok = i + 1 < argc;
    bool found = false;
    for (const char *k : known) found |= !strcmp(argv[i], k);
    if (!ok || !found) {
      fprintf(stderr, "usage: cuda_passes [--blocks N] [--block-mib MiB] [--slots N] [--passes N] [--peak-reps N]\n");
      return 2;
    }
  }
  const int blocks = arg(argc, argv, "--blocks", 101), slots = arg(argc, argv, "--slots", 4);
  const int passes = arg(argc, argv, "--passes", 10), peak_reps = arg(argc, argv, "--peak-reps", 4);
  const size_t block = (size_t)arg(argc, argv, "--block-mib", 64) << 20;
  if (blocks < 1 || slots < 1 || passes < 1 || peak_reps < 1 || !block) {
    fprintf(stderr, "cuda_passes: every count must be at least 1\n");
    return 2;
  }
  const size_t total = block * blocks, words = block / 4;
  unsigned char *host;
  CU(cudaHostAlloc(&host, total, cudaHostAllocDefault));
  unsigned long long expect = 0;
  for (size_t i = 0; i < total / 4; i++) {
    unsigned v = (unsigned)i * 2654435761u + 12345u;
    ((unsigned *)host)[i] = v;
    expect += v;
  }
  std::vector<unsigned *> dev(slots);
  for (auto &d : dev) CU(cudaMalloc(&d, block));
  unsigned long long *sums;
  CU(cudaMalloc(&sums, sizeof(unsigned long long) * passes));
  CU(cudaMemset(sums, 0, sizeof(unsigned long long) * passes));
  cudaStream_t up, run;
  CU(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&run, cudaStreamNonBlocking));

  // The one-way peak: --peak-reps copies of 256 MiB (or the whole range, if smaller), median
  // of 5 runs, as cuda_ceiling measures it.
  const size_t peak_size = std::min(total, (size_t)256 << 20);
  unsigned char *peak_dev;
  CU(cudaMalloc(&peak_dev, peak_size));
  cudaEvent_t p0, p1;
  CU(cudaEventCreate(&p0));
  CU(cudaEventCreate(&p1));
  std::vector<double> peaks;
  for (int r = 0; r < 5; r++) {
    CU(cudaEventRecord(p0, up));
    for (int i = 0; i < peak_reps; i++) CU(cudaMemcpyAsync(peak_dev, host, peak_size, cudaMemcpyHostToDevice, up));
    CU(cudaEventRecord(p1, up));
    CU(cudaEventSynchronize(p1));
    float ms;
    CU(cudaEventElapsedTime(&ms, p0, p1));
    peaks.push_back((double)peak_size * peak_reps / (ms * 1e-3) / 1e9);
  }
  std::sort(peaks.begin(), peaks.end());
  const double peak = peaks[2];
  CU(cudaFree(peak_dev));

  // One launch before timing: the first launch loads (and, built for another architecture,
  // compiles) the kernel, which would delay the first pass.
  read_block<<<1, 256, 0, run>>>(dev[0], 0, sums);
  CU(cudaGetLastError());
  CU(cudaStreamSynchronize(run));

  const int n = blocks * passes;
  std::vector<cudaEvent_t> c0(n), c1(n), freed(slots), pass_end(passes);
  for (int i = 0; i < n; i++) {
    CU(cudaEventCreate(&c0[i]));
    CU(cudaEventCreate(&c1[i]));
  }
  for (auto &e : freed) CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (auto &e : pass_end) CU(cudaEventCreate(&e));
  for (int i = 0; i < n; i++) {
    const int pass = i / blocks, b = i % blocks, slot = i % slots;
    // The slot's last kernel must have read it before it is written again.
    if (i >= slots) CU(cudaStreamWaitEvent(up, freed[slot], 0));
    CU(cudaEventRecord(c0[i], up));
    CU(cudaMemcpyAsync(dev[slot], host + (size_t)b * block, block, cudaMemcpyHostToDevice, up));
    CU(cudaEventRecord(c1[i], up));
    CU(cudaStreamWaitEvent(run, c1[i], 0));
    read_block<<<1024, 256, 0, run>>>(dev[slot], words, sums + pass);
    CU(cudaGetLastError());
    CU(cudaEventRecord(freed[slot], run));
    if (b == blocks - 1) CU(cudaEventRecord(pass_end[pass], run));
  }
  CU(cudaStreamSynchronize(up));
  CU(cudaStreamSynchronize(run));
  std::vector<unsigned long long> got(passes);
  CU(cudaMemcpy(got.data(), sums, sizeof(unsigned long long) * passes, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int p = 0; p < passes; p++) wrong += got[p] != expect;

  printf("{\"program\": \"cuda_passes\", \"peak_gbps\": %.3f, \"peak_runs_gbps\": [", peak);
  for (size_t r = 0; r < peaks.size(); r++) printf("%s%.3f", r ? ", " : "", peaks[r]);
  printf("], \"block_bytes\": %zu, \"blocks\": %d, \"slots\": %d, \"pass_bytes\": %zu, \"pass_floor_s\": %.6f,\n",
         block, blocks, slots, total, total / (peak * 1e9));
  printf(" \"checksums_wrong\": %d, \"pass_seconds\": [", wrong);
  for (int p = 0; p < passes; p++) {
    float ms;
    CU(cudaEventElapsedTime(&ms, p ? pass_end[p - 1] : c0[0], pass_end[p]));
    printf("%s%.6f", p ? ", " : "", ms * 1e-3);
  }
  printf("],\n \"uploads\": [");
  for (int i = 0; i < n; i++) {
    float at, ms;
    CU(cudaEventElapsedTime(&at, c0[0], c0[i]));
    CU(cudaEventElapsedTime(&ms, c0[i], c1[i]));
    printf("%s[%d, %d, %.4f, %.4f]", i ? ", " : "", i / blocks + 1, i % blocks, at, ms);
  }
  printf("]}\n");
  if (wrong) fprintf(stderr, "cuda_passes: %d passes' checksums disagree with the host's\n", wrong);
  return wrong ? 1 : 0;
}
