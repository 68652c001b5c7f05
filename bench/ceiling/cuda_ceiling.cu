// CUDA's transfer ceiling beside bench/ceiling/vk_ceiling.c (issue 38): pinned host memory
// (cudaHostAlloc), one way and both ways at once on two streams, each the median of --repeat
// runs of --reps copies of --size bytes. Prints lines in vk_ceiling's format:
//   one cuda up|down GBPS
//   both cuda cuda UP_GBPS DOWN_GBPS COMBINED_GBPS
// and checks that a pattern comes back whole (exit 1 if not).
//   nvcc -O2 cuda_ceiling.cu -o cuda_ceiling
//   cuda_ceiling [--size MiB] [--reps N] [--repeat N]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <chrono>

#define CU(call)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "cuda_ceiling: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
  size_t size = 256u << 20;
  int reps = 4, repeat = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = (size_t)atoi(argv[++i]) << 20;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: cuda_ceiling [--size MiB] [--reps N] [--repeat N]\n");
      return 2;
    }
  }
  if (reps < 1 || repeat < 1 || repeat > 64 || !size) return 2;
  unsigned char *h_up, *h_down, *d_up, *d_down;
  CU(cudaHostAlloc(&h_up, size, cudaHostAllocDefault));
  CU(cudaHostAlloc(&h_down, size, cudaHostAllocDefault));
  CU(cudaMalloc(&d_up, size));
  CU(cudaMalloc(&d_down, size));
  for (size_t i = 0; i < size / 4; i++) ((unsigned *)h_up)[i] = (unsigned)i * 2654435761u + 12345u;
  memset(h_down, 0, size);
  CU(cudaMemcpy(d_down, h_up, size, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(h_down, d_down, size, cudaMemcpyDeviceToHost));
  if (memcmp(h_up, h_down, size)) {
    printf("check cuda: WRONG bytes came back\n");
    return 1;
  }
  printf("check cuda: every byte came back\n");
  cudaStream_t s[2];
  CU(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
  double bytes = (double)size * reps, v[64], w[64], c[64];
  auto up = [&] { for (int i = 0; i < reps; i++) CU(cudaMemcpyAsync(d_up, h_up, size, cudaMemcpyHostToDevice, s[0])); };
  auto down = [&] { for (int i = 0; i < reps; i++) CU(cudaMemcpyAsync(h_down, d_down, size, cudaMemcpyDeviceToHost, s[1])); };
  const char *name[2] = {"up", "down"};
  for (int dir = 0; dir < 2; dir++) {
    for (int r = 0; r < repeat; r++) {
      double t0 = now();
      dir ? down() : up();
      CU(cudaStreamSynchronize(s[dir]));
      v[r] = bytes / (now() - t0) / 1e9;
    }
    std::sort(v, v + repeat);
    printf("one cuda %s %.1f\n", name[dir], v[repeat / 2]);
  }
  for (int r = 0; r < repeat; r++) {
    double t0 = now(), t[2] = {-1, -1};
    up();
    down();
    while (t[0] < 0 || t[1] < 0)
      for (int i = 0; i < 2; i++)
        if (t[i] < 0 && cudaStreamQuery(s[i]) == cudaSuccess) t[i] = now() - t0;
    v[r] = bytes / t[0] / 1e9;
    w[r] = bytes / t[1] / 1e9;
    c[r] = 2 * bytes / std::max(t[0], t[1]) / 1e9;
  }
  std::sort(v, v + repeat);
  std::sort(w, w + repeat);
  std::sort(c, c + repeat);
  printf("both cuda cuda %.1f %.1f %.1f\n", v[repeat / 2], w[repeat / 2], c[repeat / 2]);
  return 0;
}
