/* What seed_port.c and seed_stream.c share, all but their loop: the options, the kernel, the
 * error checks, the device, step 1 (the pinned host memory) and the passes with their checks.
 * A program defines SEED_NAME (its name in its messages) before it includes this file, which
 * stays beside it (examples/c/) with ../common/seed_common.h. */
#ifndef SEED_OPENCL_H
#define SEED_OPENCL_H

#ifndef SEED_NAME
#error "define SEED_NAME, the program's name in its messages, before including seed_opencl.h"
#endif
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300 /* pinstream.h includes CL/cl.h */
#endif
#include <pinstream.h>

#include <string.h>

#include "../common/seed_common.h"

static const char *kernel_source =
    "__kernel void seed_step(__global uint *d, uint n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) d[i] = d[i] * 2654435761u + 12345u;\n"
    "}\n";

typedef struct {
  int reg, repeat, device, corrupt, passes;
  size_t total, block, budget;
} options;

static void die(const char *what, long code) {
  fprintf(stderr, SEED_NAME ": %s failed (%ld)\n", what, code);
  exit(2);
}

#define CL_OK(call)                                \
  do {                                             \
    cl_int e_ = (call);                            \
    if (e_ != CL_SUCCESS) die(#call, (long)e_);    \
  } while (0)

static void ps_ok(psError_t e, const char *what) {
  if (e != PS_SUCCESS) {
    fprintf(stderr, SEED_NAME ": %s: %s\n  %s\n", what, psGetErrorString(e), psGetLastErrorDetail());
    exit(2);
  }
}

static options parse(int argc, char **argv) {
  options o = {0, 1, -1, 0, 1, (size_t)(10 * GIB), (size_t)(256 * MIB), (size_t)(4 * GIB)};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--register")) { o.reg = 1; continue; }
    if (!strcmp(a, "--corrupt-one")) { o.corrupt = 1; continue; }
    if (!v) { fprintf(stderr, SEED_NAME ": unknown or incomplete option '%s'\n", a); exit(2); }
    if (!strcmp(a, "--total")) o.total = parse_size(v);
    else if (!strcmp(a, "--block")) o.block = parse_size(v);
    else if (!strcmp(a, "--budget")) o.budget = parse_size(v);
    else if (!strcmp(a, "--repeat")) o.repeat = atoi(v);
    else if (!strcmp(a, "--passes")) o.passes = atoi(v);
    else if (!strcmp(a, "--device")) o.device = atoi(v);
    else { fprintf(stderr, SEED_NAME ": unknown option '%s'\n", a); exit(2); }
    i++;
  }
  if (o.block % 4 || o.total % 4 || o.block > o.budget || o.repeat < 1 || o.passes < 1) {
    fprintf(stderr, SEED_NAME ": --total and --block must be multiples of 4 bytes, --block <= --budget, --repeat >= 1, --passes >= 1\n");
    exit(2);
  }
  return o;
}

/* The device: --device N counts devices across platforms; default the first GPU, else the
 * first device (the loader's order is no preference: PoCL comes first on the H200 machine). */
static cl_device_id find_device(int want) {
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
  if (want >= 0) { fprintf(stderr, SEED_NAME ": no device %d (%u devices)\n", want, seen); exit(2); }
  if (!first) die("finding an OpenCL device", 0);
  return gpu ? gpu : first;
}

/* The device find_device picks, its name in name[size]. */
static cl_device_id pick_device(int want, char *name, size_t size) {
  cl_device_id dev = find_device(want);
  clGetDeviceInfo(dev, CL_DEVICE_NAME, size, name, NULL);
  return dev;
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

/* Step 1: pinned host memory, psHostAlloc (--register: malloc + psHostRegister, the malloc'd
 * range then in *owned, else NULL there), timed and described. */
static void *pin_host(cl_context ctx, const options *o, void **owned) {
  void *host = NULL;
  *owned = NULL;
  double t = seed_now();
  if (o->reg) {
    *owned = malloc(o->total);
    if (!*owned) die("malloc", 0);
    ps_ok(psHostRegister(ctx, *owned, o->total, PS_HOST_REGISTER_DEFAULT), "psHostRegister");
    host = *owned;
  } else {
    ps_ok(psHostAlloc(ctx, o->total, PS_HOST_ALLOC_DEFAULT, &host), "psHostAlloc");
  }
  print_info(host, seed_now() - t);
  return host;
}

/* Step 1 undone: what pin_host gave back. */
static void unpin_host(const options *o, void *host, void *owned) {
  ps_ok(o->reg ? psHostUnregister(owned) : psHostFree(host), o->reg ? "psHostUnregister" : "psHostFree");
  free(owned);
}

/* The program's device objects, its own struct rig. */
typedef struct rig rig;

/* One run of step 3 over the whole host range (--passes passes in a row, 1 unless given);
 * returns the wall time in seconds. */
typedef double (*stream_pass_fn)(rig *r, const options *o, char *host, int pass);

/* The --repeat runs ("pass N" in the output): each fills the range, streams it with `pass`,
 * checks every value (--passes kernel steps) against the CPU (after flipping one with --corrupt-one) and prints the check, then the
 * result line; returns the mismatches of all passes. */
static size_t run_passes(const options *o, void *host, stream_pass_fn pass, rig *r) {
  size_t words = o->total / 4, bad_total = 0;
  double best = 0;
  for (int p = 1; p <= o->repeat; p++) {
    seed_parallel(host, words, 0, 0);
    double wall = pass(r, o, host, p);
    if (o->corrupt) ((uint32_t *)host)[words / 2] ^= 1u;
    size_t bad = seed_parallel(host, words, 1, o->passes);
    printf("pass %d: check %zu mismatches of %zu values: %s\n", p, bad, words, bad ? "FAIL" : "ok");
    bad_total += bad;
    double combined = 2.0 * o->passes * o->total / 1e9 / wall;
    if (combined > best) best = combined;
  }
  printf("result: mode=%s passes=%d passes_per_run=%d best_combined_gbps=%.2f mismatches=%zu %s\n",
         o->reg ? "register" : "alloc", o->repeat, o->passes, best, bad_total, bad_total ? "FAIL" : "PASS");
  return bad_total;
}

#endif
