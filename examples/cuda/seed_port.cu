// The CUDA original of examples/c/seed_port.c: the seed's loop as CUDA programs write it.
//
//   step 1  10 GiB of pinned host memory: cudaMallocHost (with --register: malloc +
//           cudaHostRegister);
//   step 2  device blocks of 256 MiB inside a 4 GiB budget, allocated once and reused;
//   step 3  per block: cudaMemcpyAsync H2D -> kernel -> cudaMemcpyAsync D2H, chained by events
//           on three streams (upload, compute, download), a slot reused only once its previous
//           download is done.
//
// Same sizes, data, kernel, checks and output lines as the OpenCL port, so that
// scripts/gpu-seed-port.sh can put them side by side:
//
//   seed_port_cuda [--register] [--total 10GiB] [--block 256MiB] [--budget 4GiB] [--repeat 1]
//
// Build: nvcc -O2 -o seed_port_cuda seed_port.cu
#include <cuda_runtime.h>
#include <string.h>

#include "../common/seed_common.h"

__global__ void seed_step(uint32_t *d, uint32_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = d[i] * 2654435761u + 12345u;
}

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "seed_port_cuda: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

struct options {
  int reg, repeat;
  size_t total, block, budget;
};

static options parse(int argc, char **argv) {
  options o = {0, 1, (size_t)(10 * GIB), (size_t)(256 * MIB), (size_t)(4 * GIB)};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--register")) { o.reg = 1; continue; }
    if (!v) { fprintf(stderr, "seed_port_cuda: unknown or incomplete option '%s'\n", a); exit(2); }
    if (!strcmp(a, "--total")) o.total = parse_size(v);
    else if (!strcmp(a, "--block")) o.block = parse_size(v);
    else if (!strcmp(a, "--budget")) o.budget = parse_size(v);
    else if (!strcmp(a, "--repeat")) o.repeat = atoi(v);
    else { fprintf(stderr, "seed_port_cuda: unknown option '%s'\n", a); exit(2); }
    i++;
  }
  if (o.block % 4 || o.total % 4 || o.block > o.budget || o.repeat < 1) {
    fprintf(stderr, "seed_port_cuda: --total and --block must be multiples of 4, --block <= --budget, --repeat >= 1\n");
    exit(2);
  }
  return o;
}

struct rig {
  cudaStream_t up, compute, down;
  uint32_t **slots;
  size_t nslots;
};

// Per block: an event pair around each of the three commands (for stage times) and the
// "done" events that chain them.
enum { W0, W1, K0, K1, R0, R1, EVENTS };
struct block_events {
  cudaEvent_t e[EVENTS];
};

static float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

static double stream_pass(rig *r, const options *o, char *host, int pass) {
  size_t nblocks = (o->total + o->block - 1) / o->block;
  block_events *ev = (block_events *)calloc(nblocks, sizeof *ev);
  for (size_t b = 0; b < nblocks; b++) {
    for (int i = 0; i < EVENTS; i++) CUDA_OK(cudaEventCreate(&ev[b].e[i]));
  }
  double t0 = seed_now();
  for (size_t b = 0; b < nblocks; b++) {
    size_t off = b * o->block, n = o->total - off < o->block ? o->total - off : o->block;
    size_t s = b % r->nslots;
    uint32_t words = (uint32_t)(n / 4);
    if (b >= r->nslots) CUDA_OK(cudaStreamWaitEvent(r->up, ev[b - r->nslots].e[R1], 0));
    CUDA_OK(cudaEventRecord(ev[b].e[W0], r->up));
    CUDA_OK(cudaMemcpyAsync(r->slots[s], host + off, n, cudaMemcpyHostToDevice, r->up));
    CUDA_OK(cudaEventRecord(ev[b].e[W1], r->up));
    CUDA_OK(cudaStreamWaitEvent(r->compute, ev[b].e[W1], 0));
    CUDA_OK(cudaEventRecord(ev[b].e[K0], r->compute));
    seed_step<<<(words + 255) / 256, 256, 0, r->compute>>>(r->slots[s], words);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventRecord(ev[b].e[K1], r->compute));
    CUDA_OK(cudaStreamWaitEvent(r->down, ev[b].e[K1], 0));
    CUDA_OK(cudaEventRecord(ev[b].e[R0], r->down));
    CUDA_OK(cudaMemcpyAsync(host + off, r->slots[s], n, cudaMemcpyDeviceToHost, r->down));
    CUDA_OK(cudaEventRecord(ev[b].e[R1], r->down));
  }
  CUDA_OK(cudaStreamSynchronize(r->up));
  CUDA_OK(cudaStreamSynchronize(r->compute));
  CUDA_OK(cudaStreamSynchronize(r->down));
  double wall = seed_now() - t0;
  double ms[3] = {0, 0, 0};
  for (size_t b = 0; b < nblocks; b++) {
    ms[0] += elapsed(ev[b].e[W0], ev[b].e[W1]);
    ms[1] += elapsed(ev[b].e[K0], ev[b].e[K1]);
    ms[2] += elapsed(ev[b].e[R0], ev[b].e[R1]);
  }
  double span_ms = elapsed(ev[0].e[W0], ev[nblocks - 1].e[R1]);
  for (size_t b = 0; b < nblocks; b++) {
    for (int i = 0; i < EVENTS; i++) cudaEventDestroy(ev[b].e[i]);
  }
  free(ev);
  double gb = o->total / 1e9;
  printf("pass %d: write busy %.1f ms (%.2f GB/s), kernel busy %.1f ms, read busy %.1f ms (%.2f GB/s); "
         "events span %.1f ms; wall %.1f ms\n",
         pass, ms[0], gb / (ms[0] * 1e-3), ms[1], ms[2], gb / (ms[2] * 1e-3), span_ms, wall * 1e3);
  printf("pass %d: throughput h2d %.2f GB/s, d2h %.2f GB/s, combined %.2f GB/s\n", pass, gb / wall, gb / wall,
         2 * gb / wall);
  return wall;
}

int main(int argc, char **argv) {
  options o = parse(argc, argv);
  CUDA_OK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  rig r;
  CUDA_OK(cudaStreamCreateWithFlags(&r.up, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&r.compute, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&r.down, cudaStreamNonBlocking));
  size_t nblocks = (o.total + o.block - 1) / o.block;
  r.nslots = o.budget / o.block < nblocks ? o.budget / o.block : nblocks;
  r.slots = (uint32_t **)calloc(r.nslots, sizeof *r.slots);
  for (size_t s = 0; s < r.nslots; s++) CUDA_OK(cudaMalloc((void **)&r.slots[s], o.block));
  printf("seed_port: mode=%s total=%.3f GiB block=%.1f MiB budget=%.3f GiB slots=%zu device=\"%s\" api=cuda\n",
         o.reg ? "register" : "alloc", o.total / GIB, o.block / MIB, o.budget / GIB, r.nslots, prop.name);

  void *host = NULL;
  double t = seed_now();
  if (o.reg) {
    host = malloc(o.total);
    if (!host) { fprintf(stderr, "seed_port_cuda: malloc failed\n"); return 2; }
    CUDA_OK(cudaHostRegister(host, o.total, cudaHostRegisterDefault));
  } else {
    CUDA_OK(cudaMallocHost(&host, o.total));
  }
  printf("pinned: %.2f GiB by %s in %.3f s\n", o.total / GIB, o.reg ? "cudaHostRegister" : "cudaMallocHost",
         seed_now() - t);

  size_t words = o.total / 4, bad_total = 0;
  double best = 0;
  for (int pass = 1; pass <= o.repeat; pass++) {
    seed_parallel((uint32_t *)host, words, 0, 0);
    double wall = stream_pass(&r, &o, (char *)host, pass);
    size_t bad = seed_parallel((uint32_t *)host, words, 1, 1);
    printf("pass %d: check %zu mismatches of %zu values: %s\n", pass, bad, words, bad ? "FAIL" : "ok");
    bad_total += bad;
    double combined = 2 * o.total / 1e9 / wall;
    if (combined > best) best = combined;
  }
  printf("result: mode=%s passes=%d best_combined_gbps=%.2f mismatches=%zu %s\n", o.reg ? "register" : "alloc",
         o.repeat, best, bad_total, bad_total ? "FAIL" : "PASS");

  if (o.reg) {
    CUDA_OK(cudaHostUnregister(host));
    free(host);
  } else {
    CUDA_OK(cudaFreeHost(host));
  }
  for (size_t s = 0; s < r.nslots; s++) cudaFree(r.slots[s]);
  free(r.slots);
  cudaStreamDestroy(r.up);
  cudaStreamDestroy(r.compute);
  cudaStreamDestroy(r.down);
  return bad_total != 0;
}
