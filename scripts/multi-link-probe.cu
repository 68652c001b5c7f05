// What the host lets several GPUs move at once, with no pinstream and no OpenCL in the way:
// cudaMemcpyAsync from cudaMallocHost memory in 256 MiB pieces, host to device, device to
// host, and both at once (two streams per GPU), on 1 GPU and on every GPU together, one
// host thread issuing every copy (they are asynchronous from pinned memory). Then the host's
// own memory bandwidth: memcpy between two buffers by T threads. Issue 14's in-place goal
// (2 GPUs >= 1.9x one) needs the host to serve both GPUs' uploads and downloads at once:
// this shows whether it can.
//
//   nvcc -O2 -o probe multi-link-probe.cu && ./probe [GiB per GPU per direction] [repeats]
// One JSON object per line on stdout.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static const size_t PIECE = 256ull << 20;

struct Gpu {
  int id;
  char *up_host, *down_host;   // pinned
  char *up_dev, *down_dev;     // device
  cudaStream_t s_up, s_down;
};

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One pass: every GPU of `gpus` moves `bytes` in `mode` (0 up, 1 down, 2 both); the wall time.
static double pass(std::vector<Gpu> &gpus, size_t bytes, int mode) {
  double t0 = now();
  for (size_t off = 0; off < bytes; off += PIECE) {
    size_t n = std::min(PIECE, bytes - off);
    for (auto &g : gpus) {
      CK(cudaSetDevice(g.id));
      if (mode != 1) CK(cudaMemcpyAsync(g.up_dev + off, g.up_host + off, n, cudaMemcpyHostToDevice, g.s_up));
      if (mode != 0) CK(cudaMemcpyAsync(g.down_host + off, g.down_dev + off, n, cudaMemcpyDeviceToHost, g.s_down));
    }
  }
  for (auto &g : gpus) {
    CK(cudaSetDevice(g.id));
    CK(cudaStreamSynchronize(g.s_up));
    CK(cudaStreamSynchronize(g.s_down));
  }
  return now() - t0;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  double gib = argc > 1 ? atof(argv[1]) : 2.0;
  int repeats = argc > 2 ? atoi(argv[2]) : 5;
  size_t bytes = (size_t)(gib * (1ull << 30));
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  std::vector<Gpu> all(count);
  for (int i = 0; i < count; i++) {
    Gpu &g = all[i];
    g.id = i;
    CK(cudaSetDevice(i));
    CK(cudaMallocHost(&g.up_host, bytes));
    CK(cudaMallocHost(&g.down_host, bytes));
    memset(g.up_host, i + 1, bytes);
    memset(g.down_host, 0, bytes);
    CK(cudaMalloc(&g.up_dev, bytes));
    CK(cudaMalloc(&g.down_dev, bytes));
    CK(cudaMemset(g.down_dev, 7, bytes));
    CK(cudaStreamCreateWithFlags(&g.s_up, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g.s_down, cudaStreamNonBlocking));
  }
  const char *names[] = {"h2d", "d2h", "both"};
  std::vector<int> counts = {1};
  if (count > 1) counts.push_back(count);
  for (int mode = 0; mode < 3; mode++) {
    for (int n : counts) {
      std::vector<Gpu> gpus(all.begin(), all.begin() + n);
      pass(gpus, bytes, mode);  // warm-up
      std::vector<double> rates;
      for (int r = 0; r < repeats; r++) {
        double t = pass(gpus, bytes, mode);
        double moved = (double)bytes * n * (mode == 2 ? 2 : 1);
        rates.push_back(moved / t / 1e9);
      }
      printf("{\"probe\":\"cuda-copies\",\"mode\":\"%s\",\"gpus\":%d,\"bytes_per_gpu_per_direction\":%zu,\"gbps\":%.2f,\"min_gbps\":%.2f,\"max_gbps\":%.2f}\n",
             names[mode], n, bytes, median(rates), *std::min_element(rates.begin(), rates.end()),
             *std::max_element(rates.begin(), rates.end()));
      fflush(stdout);
    }
  }
  // The host's memory: memcpy of `bytes` between two pinned buffers by T threads (every
  // byte read once and written once: DRAM traffic is twice the figure).
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t : {1u, 4u, hw / 2, hw}) {
    if (t == 0) continue;
    std::vector<double> rates;
    for (int r = 0; r < repeats + 1; r++) {
      double t0 = now();
      std::vector<std::thread> th;
      size_t per = bytes / t;
      for (unsigned k = 0; k < t; k++)
        th.emplace_back([&, k] { memcpy(all[0].down_host + k * per, all[0].up_host + k * per, per); });
      for (auto &x : th) x.join();
      if (r > 0) rates.push_back((double)per * t / (now() - t0) / 1e9);
    }
    printf("{\"probe\":\"host-memcpy\",\"threads\":%u,\"bytes\":%zu,\"gbps\":%.2f}\n", t, bytes, median(rates));
    fflush(stdout);
  }
  return 0;
}
