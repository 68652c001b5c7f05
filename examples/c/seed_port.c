/* The seed program, ported: a cudaMallocHost / cudaMemcpyAsync loop moved to OpenCL with
 * pinstream's C library, step for step.
 *
 *   step 1  10 GiB of pinned host memory: psHostAlloc (with --register: malloc +
 *           psHostRegister, the seed's own intent), no VRAM spent on it;
 *   step 2  device blocks of 256 MiB inside a 4 GiB budget, created once and reused;
 *   step 3  per block: clEnqueueWriteBuffer -> kernel -> clEnqueueReadBuffer, chained by
 *           events on three queues (upload, compute, download), a slot reused only once its
 *           previous read is done.
 *
 * Every result is checked against the CPU; per-stage event times and throughput are printed;
 * the exit code is non-zero on any mismatch or error. Sizes come from arguments:
 *
 *   seed_port [--register] [--total 10GiB] [--block 256MiB] [--budget 4GiB] [--repeat 1]
 *             [--device N] [--corrupt-one]
 *
 * --corrupt-one flips one result word before the check, to show that the check catches it
 * (the tests run it and expect a failure).
 *
 * Build: cc seed_port.c $(pkg-config --cflags --libs pinstream) -lOpenCL -lpthread
 * (examples/c/CMakeLists.txt does the same with find_package(pinstream)); what it shares with
 * seed_stream.c is in seed_opencl.h beside it, which includes ../common/seed_common.h. */
#define _GNU_SOURCE
#define SEED_NAME "seed_port"
#include "seed_opencl.h"

static double busy_ms(cl_event e, cl_ulong *first, cl_ulong *last) {
  cl_ulong a = 0, b = 0;
  clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
  clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
  if (*first == 0 || a < *first) *first = a;
  if (b > *last) *last = b;
  return (double)(b - a) * 1e-6;
}

struct rig {
  cl_context ctx;
  cl_command_queue up, compute, down;
  cl_kernel *kernels;
  cl_mem *slots;
  size_t nslots;
};

/* One pass of step 3 over the whole host range; returns the wall time in seconds. */
static double stream_pass(rig *r, const options *o, char *host, int pass) {
  size_t nblocks = (o->total + o->block - 1) / o->block;
  cl_event *w = calloc(nblocks, sizeof *w), *k = calloc(nblocks, sizeof *k), *rd = calloc(nblocks, sizeof *rd);
  double t0 = seed_now();
  for (size_t b = 0; b < nblocks; b++) {
    size_t off = b * o->block, n = o->total - off < o->block ? o->total - off : o->block;
    size_t s = b % r->nslots;
    cl_uint words = (cl_uint)(n / 4);
    size_t global = words;
    /* The slot is free once its previous block's read is done. */
    cl_uint nwait = b >= r->nslots ? 1 : 0;
    cl_event *reuse = nwait ? &rd[b - r->nslots] : NULL;
    CL_OK(clEnqueueWriteBuffer(r->up, r->slots[s], CL_FALSE, 0, n, host + off, nwait, reuse, &w[b]));
    CL_OK(clSetKernelArg(r->kernels[s], 0, sizeof(cl_mem), &r->slots[s]));
    CL_OK(clSetKernelArg(r->kernels[s], 1, sizeof(cl_uint), &words));
    CL_OK(clEnqueueNDRangeKernel(r->compute, r->kernels[s], 1, NULL, &global, NULL, 1, &w[b], &k[b]));
    CL_OK(clEnqueueReadBuffer(r->down, r->slots[s], CL_FALSE, 0, n, host + off, 1, &k[b], &rd[b]));
    clFlush(r->up);
    clFlush(r->compute);
    clFlush(r->down);
  }
  CL_OK(clFinish(r->up));
  CL_OK(clFinish(r->compute));
  CL_OK(clFinish(r->down));
  double wall = seed_now() - t0;
  double ms[3] = {0, 0, 0};
  cl_ulong first = 0, last = 0;
  for (size_t b = 0; b < nblocks; b++) {
    ms[0] += busy_ms(w[b], &first, &last);
    ms[1] += busy_ms(k[b], &first, &last);
    ms[2] += busy_ms(rd[b], &first, &last);
    clReleaseEvent(w[b]);
    clReleaseEvent(k[b]);
    clReleaseEvent(rd[b]);
  }
  double gb = o->total / 1e9;
  printf("pass %d: write busy %.1f ms (%.2f GB/s), kernel busy %.1f ms, read busy %.1f ms (%.2f GB/s); "
         "events span %.1f ms; wall %.1f ms\n",
         pass, ms[0], gb / (ms[0] * 1e-3), ms[1], ms[2], gb / (ms[2] * 1e-3), (last - first) * 1e-6, wall * 1e3);
  printf("pass %d: throughput h2d %.2f GB/s, d2h %.2f GB/s, combined %.2f GB/s\n", pass, gb / wall, gb / wall,
         2 * gb / wall);
  free(w);
  free(k);
  free(rd);
  return wall;
}

static void build_rig(rig *r, cl_device_id dev, const options *o) {
  cl_int err;
  r->ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CL_OK(err);
  cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  r->up = clCreateCommandQueueWithProperties(r->ctx, dev, props, &err);
  CL_OK(err);
  r->compute = clCreateCommandQueueWithProperties(r->ctx, dev, props, &err);
  CL_OK(err);
  r->down = clCreateCommandQueueWithProperties(r->ctx, dev, props, &err);
  CL_OK(err);
  cl_program prog = clCreateProgramWithSource(r->ctx, 1, &kernel_source, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  r->nslots = o->budget / o->block;
  size_t nblocks = (o->total + o->block - 1) / o->block;
  if (r->nslots > nblocks) r->nslots = nblocks;
  r->slots = calloc(r->nslots, sizeof *r->slots);
  r->kernels = calloc(r->nslots, sizeof *r->kernels);
  for (size_t s = 0; s < r->nslots; s++) {
    r->slots[s] = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE, o->block, NULL, &err);
    CL_OK(err);
    r->kernels[s] = clCreateKernel(prog, "seed_step", &err);
    CL_OK(err);
  }
  clReleaseProgram(prog);
}

static void free_rig(rig *r) {
  for (size_t s = 0; s < r->nslots; s++) {
    clReleaseKernel(r->kernels[s]);
    clReleaseMemObject(r->slots[s]);
  }
  free(r->kernels);
  free(r->slots);
  clReleaseCommandQueue(r->up);
  clReleaseCommandQueue(r->compute);
  clReleaseCommandQueue(r->down);
  clReleaseContext(r->ctx);
}

int main(int argc, char **argv) {
  options o = parse(argc, argv);
  if (o.passes != 1) {
    fprintf(stderr, "seed_port: --passes is seed_stream's (one psStreamRun of N passes); this loop streams one pass a run: use --repeat\n");
    return 2;
  }
  char name[256] = "";
  cl_device_id dev = pick_device(o.device, name, sizeof name);
  rig r;
  build_rig(&r, dev, &o);
  printf("seed_port: libpinstream %s\n", psGetVersion());
  printf("seed_port: mode=%s total=%.3f GiB block=%.1f MiB budget=%.3f GiB slots=%zu device=\"%s\"\n",
         o.reg ? "register" : "alloc", o.total / GIB, o.block / MIB, o.budget / GIB, r.nslots, name);

  void *owned, *host = pin_host(r.ctx, &o, &owned); /* step 1 */
  size_t bad_total = run_passes(&o, host, stream_pass, &r);
  unpin_host(&o, host, owned);
  free_rig(&r);
  return bad_total != 0;
}
