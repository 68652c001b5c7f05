/* The seed program on pinstream's streaming engine: seed_port.c with its hand-written loop
 * (device slots, three queues, events chained per block) replaced by one psStream call.
 *
 *   step 1  10 GiB of pinned host memory: psHostAlloc (with --register: malloc +
 *           psHostRegister), no VRAM spent on it;
 *   step 2  psStreamCreate: a ring of 256 MiB device blocks inside a 4 GiB budget;
 *   step 3  psStreamRun: per block upload -> kernel -> download, overlapped on the stream's
 *           own three queues, the caller's kernel run as pinstream's own object of it.
 *
 * Same options (and --passes), data, checks and output as seed_port (so a GPU script compares
 * the two):
 *
 *   seed_stream [--register] [--total 10GiB] [--block 256MiB] [--budget 4GiB] [--repeat 1]
 *               [--passes 1] [--device N] [--corrupt-one]
 *
 * --passes N makes each run one psStreamRun of N passes in a row (pass k+1 reads what pass k
 * wrote, the check counts N kernel steps), as `pinstream run --passes N` does: the figures are
 * then the whole run's bytes over its time, one pipeline fill and drain for N passes.
 *
 * Build: cc seed_stream.c $(pkg-config --cflags --libs pinstream) -lOpenCL -lpthread
 * (examples/c/CMakeLists.txt does the same with find_package(pinstream)); what it shares with
 * seed_port.c is in seed_opencl.h beside it, which includes ../common/seed_common.h. */
#define _GNU_SOURCE
#define SEED_NAME "seed_stream"
#include "seed_opencl.h"

struct rig {
  cl_context ctx;
  cl_program prog;
  cl_kernel kernel;
  psStream_t stream;
};

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

/* One run of step 3 over the whole host range, o->passes passes in one call; returns the
 * wall time in seconds. */
static double stream_pass(rig *r, const options *o, char *host, int pass) {
  psStreamReport rep;
  double t0 = seed_now();
  ps_ok(psStreamSetInPlace(r->stream, host, o->total), "psStreamSetInPlace");
  ps_ok(psStreamRun(r->stream, (unsigned)o->passes, PS_RESIDENCY_OFF, &rep), "psStreamRun");
  double wall = seed_now() - t0, gb = (double)o->passes * o->total / 1e9;
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

int main(int argc, char **argv) {
  options o = parse(argc, argv);
  char name[256] = "";
  cl_device_id dev = pick_device(o.device, name, sizeof name);
  rig r;
  build_rig(&r, dev, &o);
  printf("seed_stream: libpinstream %s\n", psGetVersion());
  printf("seed_stream: mode=%s total=%.3f GiB block=%.1f MiB budget=%.3f GiB device=\"%s\"\n",
         o.reg ? "register" : "alloc", o.total / GIB, o.block / MIB, o.budget / GIB, name);

  void *owned, *host = pin_host(r.ctx, &o, &owned); /* step 1 */
  size_t bad_total = run_passes(&o, host, stream_pass, &r);
  unpin_host(&o, host, owned);
  free_rig(&r);
  return bad_total != 0;
}
