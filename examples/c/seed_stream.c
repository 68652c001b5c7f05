/* The seed program on pinstream's streaming engine: seed_port.c with its hand-written loop
 * (device slots, three queues, events chained per block) replaced by one psStream call.
 *
 *   step 1  10 GiB of pinned host memory: psHostAlloc (with --register: malloc +
 *           psHostRegister), no VRAM spent on it;
 *   step 2  psStreamCreate: a ring of 256 MiB device blocks inside a 4 GiB budget;
 *   step 3  psStreamRun: per block upload -> kernel -> download, overlapped on the stream's
 *           own three queues, the caller's kernel run as pinstream's own object of it.
 *
 * Same options, data, checks and output as seed_port (so a GPU script compares the two):
 *
 *   seed_stream [--register] [--total 10GiB] [--block 256MiB] [--budget 4GiB] [--repeat 1]
 *               [--device N] [--corrupt-one]
 *
 * Build: cc seed_stream.c $(pkg-config --cflags --libs pinstream) -lOpenCL -lpthread
 * (examples/c/CMakeLists.txt does the same with find_package(pinstream)). */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <pinstream.h>

#include <string.h>

#include "../common/seed_common.h"

static const char *kernel_source =
    "__kernel void seed_step(__global uint *d, uint n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) d[i] = d[i] * 2654435761u + 12345u;\n"
    "}\n";

typedef struct {
  int reg, repeat, device, corrupt;
  size_t total, block, budget;
} options;

static void die(const char *what, long code) {
  fprintf(stderr, "seed_stream: %s failed (%ld)\n", what, code);
  exit(2);
}

#define CL_OK(call)                                \
  do {                                             \
    cl_int e_ = (call);                            \
    if (e_ != CL_SUCCESS) die(#call, (long)e_);    \
  } while (0)

static void ps_ok(psError_t e, const char *what) {
  if (e != PS_SUCCESS) {
    fprintf(stderr, "seed_stream: %s: %s\n  %s\n", what, psGetErrorString(e), psGetLastErrorDetail());
    exit(2);
  }
}

static options parse(int argc, char **argv) {
  options o = {0, 1, -1, 0, (size_t)(10 * GIB), (size_t)(256 * MIB), (size_t)(4 * GIB)};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--register")) { o.reg = 1; continue; }
    if (!strcmp(a, "--corrupt-one")) { o.corrupt = 1; continue; }
    if (!v) { fprintf(stderr, "seed_stream: unknown or incomplete option '%s'\n", a); exit(2); }
    if (!strcmp(a, "--total")) o.total = parse_size(v);
    else if (!strcmp(a, "--block")) o.block = parse_size(v);
    else if (!strcmp(a, "--budget")) o.budget = parse_size(v);
    else if (!strcmp(a, "--repeat")) o.repeat = atoi(v);
    else if (!strcmp(a, "--device")) o.device = atoi(v);
    else { fprintf(stderr, "seed_stream: unknown option '%s'\n", a); exit(2); }
    i++;
  }
  if (o.block % 4 || o.total % 4 || o.block > o.budget || o.repeat < 1) {
    fprintf(stderr, "seed_stream: --total and --block must be multiples of 4 bytes, --block <= --budget, --repeat >= 1\n");
    exit(2);
  }
  return o;
}

/* The device: --device N counts devices across platforms; default the first GPU, else the
 * first device (the loader's order is no preference: PoCL comes first on the H200 machine). */
static cl_device_id pick_device(int want) {
  cl_platform_id platforms[16];
  cl_uint np = 0, seen = 0;
  CL_OK(clGetPlatformIDs(16, platforms, &np));
  cl_device_id first = NULL, gpu = NULL;
  for (cl_uint p = 0; p < np; p++) {
    cl_device_id ids[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, ids, &nd) != CL_SUCCESS) continue;
    for (cl_uint d = 0; d < nd; d++, seen++) {
      cl_device_type t;
      clGetDeviceInfo(ids[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
      if ((int)seen == want) return ids[d];
      if (!first) first = ids[d];
      if (!gpu && (t & CL_DEVICE_TYPE_GPU)) gpu = ids[d];
    }
  }
  if (want >= 0) { fprintf(stderr, "seed_stream: no device %d (%u devices)\n", want, seen); exit(2); }
  if (!first) die("finding an OpenCL device", 0);
  return gpu ? gpu : first;
}

typedef struct {
  cl_context ctx;
  cl_program prog;
  cl_kernel kernel;
  psStream_t stream;
} rig;

/* Steps 2 and 3 set up: the stream over the pinned range, the kernel the seed's. */
static void build_rig(rig *r, cl_device_id dev, const options *o) {
  cl_int err;
  r->ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CL_OK(err);
  r->prog = clCreateProgramWithSource(r->ctx, 1, &kernel_source, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(r->prog, 1, &dev, "", NULL, NULL));
  r->kernel = clCreateKernel(r->prog, "seed_step", &err);
  CL_OK(err);
  ps_ok(psStreamCreate(&r->stream, r->ctx, NULL, o->budget, o->block), "psStreamCreate");
  ps_ok(psStreamSetKernel(r->stream, r->kernel), "psStreamSetKernel");
  ps_ok(psStreamSetTypes(r->stream, PS_DTYPE_U32, PS_DTYPE_U32), "psStreamSetTypes");
}

/* One pass of step 3 over the whole host range; returns the wall time in seconds. */
static double stream_pass(rig *r, const options *o, char *host, int pass) {
  psStreamReport rep;
  double t0 = seed_now();
  ps_ok(psStreamSetInPlace(r->stream, host, o->total), "psStreamSetInPlace");
  ps_ok(psStreamRun(r->stream, 1, PS_RESIDENCY_OFF, &rep), "psStreamRun");
  double wall = seed_now() - t0, gb = o->total / 1e9;
  double ms[3] = {rep.upload_busy_s * 1e3, rep.kernel_busy_s * 1e3, rep.download_busy_s * 1e3};
  printf("pass %d: write busy %.1f ms (%.2f GB/s), kernel busy %.1f ms, read busy %.1f ms (%.2f GB/s); "
         "events span %.1f ms; wall %.1f ms\n",
         pass, ms[0], gb / (ms[0] * 1e-3), ms[1], ms[2], gb / (ms[2] * 1e-3), rep.device_wall_s * 1e3, wall * 1e3);
  printf("pass %d: throughput h2d %.2f GB/s, d2h %.2f GB/s, combined %.2f GB/s\n", pass, gb / wall, gb / wall,
         2 * gb / wall);
  printf("pass %d: stream blocks=%llu slots=%llu overlap %.2f\n", pass, (unsigned long long)rep.blocks,
         (unsigned long long)rep.slots, rep.overlap);
  return wall;
}

static void free_rig(rig *r) {
  ps_ok(psStreamDestroy(r->stream), "psStreamDestroy");
  clReleaseKernel(r->kernel);
  clReleaseProgram(r->prog);
  clReleaseContext(r->ctx);
}

static void print_info(const void *host, double seconds) {
  psHostInfo info;
  ps_ok(psHostGetInfo(host, &info), "psHostGetInfo");
  printf("pinned: %.2f GiB by %s in %.3f s (psHostGetInfo: pin %.3f s), %zu chunks of up to %.0f MiB, pinned=%d\n",
         info.bytes / GIB, info.strategy_name, seconds, info.pin_seconds, info.chunk_count, info.chunk_bytes / MIB,
         info.pinned);
  printf("pin note: %s\n", info.pin_note);
  if (info.vram_cost_known)
    printf("vram cost: %+.1f MiB (%s)\n", info.vram_cost_bytes / MIB, info.vram_note);
  else
    printf("vram cost: %s\n", info.vram_note);
}

int main(int argc, char **argv) {
  options o = parse(argc, argv);
  cl_device_id dev = pick_device(o.device);
  char name[256] = "";
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
  rig r;
  build_rig(&r, dev, &o);
  printf("seed_stream: libpinstream %s\n", psGetVersion());
  printf("seed_stream: mode=%s total=%.3f GiB block=%.1f MiB budget=%.3f GiB device=\"%s\"\n",
         o.reg ? "register" : "alloc", o.total / GIB, o.block / MIB, o.budget / GIB, name);

  /* Step 1: pinned host memory. */
  void *host = NULL, *owned = NULL;
  double t = seed_now();
  if (o.reg) {
    owned = malloc(o.total);
    if (!owned) die("malloc", 0);
    ps_ok(psHostRegister(r.ctx, owned, o.total, PS_HOST_REGISTER_DEFAULT), "psHostRegister");
    host = owned;
  } else {
    ps_ok(psHostAlloc(r.ctx, o.total, PS_HOST_ALLOC_DEFAULT, &host), "psHostAlloc");
  }
  print_info(host, seed_now() - t);

  size_t words = o.total / 4, bad_total = 0;
  double best = 0;
  for (int pass = 1; pass <= o.repeat; pass++) {
    seed_parallel(host, words, 0, 0);
    double wall = stream_pass(&r, &o, host, pass);
    if (o.corrupt) ((uint32_t *)host)[words / 2] ^= 1u;
    size_t bad = seed_parallel(host, words, 1, 1);
    printf("pass %d: check %zu mismatches of %zu values: %s\n", pass, bad, words, bad ? "FAIL" : "ok");
    bad_total += bad;
    double combined = 2 * o.total / 1e9 / wall;
    if (combined > best) best = combined;
  }
  printf("result: mode=%s passes=%d best_combined_gbps=%.2f mismatches=%zu %s\n", o.reg ? "register" : "alloc",
         o.repeat, best, bad_total, bad_total ? "FAIL" : "PASS");

  ps_ok(o.reg ? psHostUnregister(owned) : psHostFree(host), o.reg ? "psHostUnregister" : "psHostFree");
  free(owned);
  free_rig(&r);
  return bad_total != 0;
}
