/* Kernel shapes for zero-copy gathers, side by side in one run (issue 23's small pieces).
 *
 * N pieces of S bytes lie in 1 GiB of host memory kernels read in place (clCreateBufferNV
 * LOCATION_HOST | PINNED on NVIDIA, CL_MEM_ALLOC_HOST_PTR elsewhere), each in a slot of S + 64
 * bytes at a random misalignment, slots shuffled: the offsets `pinstream bench --gather`
 * draws. Each shape copies every piece to its own random device offset (up) or back (down),
 * one work-group per piece unless it says otherwise, and is timed by its event and by the
 * wall clock (enqueue to clFinish), median of 9; each result is checked byte by byte.
 *
 *   cc -O2 -o zero-copy-probe scripts/zero-copy-probe.c -lOpenCL && ./zero-copy-probe
 * Shapes:
 *   lib     the library's kernels (gather/mod.rs as of c818cd6): words in ulong2, bytes out
 *           in a loop over the word's part of the piece;
 *   cuda    the CUDA anchor's shape (backend/cuda/zero_copy.rs): uint4 words, 16 predicated
 *           byte moves, unrolled;
 *   cuda+   `cuda` with a work item for every word of a misaligned piece (4 KiB: 257 words,
 *           288 items, one pass instead of two);
 *   warp    several pieces per work-group of 256, 32 items each (small pieces);
 *   aligned the ceiling: pieces moved to 16-byte aligned offsets, copied as uint4s.
 * Each shape runs with its table in host memory (one bus read per work-group before its
 * data) and in device memory (copied on the same queue, counted in the wall time). */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPAN ((size_t)1 << 30)
#define SLACK 64
#define REPS 9

static const char* SRC =
    "static uchar ps_byte(ulong2 w, ulong k) { return (uchar)((k < 8 ? w.x : w.y) >> (8 * (k & 7))); }\n"
    "__kernel void lib_up(__global const uchar* from, __global uchar* to, __global const ulong* table, ulong host_len) {\n"
    "  __global const ulong* row = table + 3 * get_group_id(0);\n"
    "  ulong s = row[0], end = s + row[2]; ulong d = row[1] - s;\n"
    "  for (ulong a = (s & ~(ulong)15) + 16 * get_local_id(0); a < end; a += 16 * get_local_size(0)) {\n"
    "    ulong2 w = (ulong2)(0, 0);\n"
    "    if (a + 16 <= host_len) { w = *(__global const ulong2*)(from + a); }\n"
    "    else { for (uint k = 0; a + k < host_len; k++) { ulong b = (ulong)from[a + k] << (8 * (k & 7)); if (k < 8) w.x |= b; else w.y |= b; } }\n"
    "    ulong lo = a < s ? s : a, hi = a + 16 < end ? a + 16 : end;\n"
    "    for (ulong x = lo; x < hi; x++) to[d + x] = ps_byte(w, x - a);\n"
    "  }\n"
    "}\n"
    "static void ps_edge(__global uchar* to, ulong x, ulong e, __global const uchar* from, ulong src) {\n"
    "  while (x < e) {\n"
    "    uint n = ((x & 7) == 0 && x + 8 <= e) ? 8 : ((x & 3) == 0 && x + 4 <= e) ? 4 : ((x & 1) == 0 && x + 2 <= e) ? 2 : 1;\n"
    "    ulong v = 0; for (uint k = 0; k < n; k++) v |= (ulong)from[src + x + k] << (8 * k);\n"
    "    if (n == 8) *(__global ulong*)(to + x) = v; else if (n == 4) *(__global uint*)(to + x) = (uint)v;\n"
    "    else if (n == 2) *(__global ushort*)(to + x) = (ushort)v; else to[x] = (uchar)v;\n"
    "    x += n;\n"
    "  }\n"
    "}\n"
    "static ulong ps_word(__global const uchar* from, ulong at) { ulong v = 0; for (uint k = 0; k < 8; k++) v |= (ulong)from[at + k] << (8 * k); return v; }\n"
    "__kernel void lib_down(__global const uchar* from, __global uchar* to, __global const ulong* table, ulong host_len) {\n"
    "  __global const ulong* row = table + 3 * get_group_id(0);\n"
    "  ulong s = row[1], end = s + row[2]; ulong src = row[0] - s;\n"
    "  for (ulong a = (s & ~(ulong)15) + 16 * get_local_id(0); a < end; a += 16 * get_local_size(0)) {\n"
    "    if (a >= s && a + 16 <= end) *(__global ulong2*)(to + a) = (ulong2)(ps_word(from, src + a), ps_word(from, src + a + 8));\n"
    "    else ps_edge(to, a > s ? a : s, a + 16 < end ? a + 16 : end, from, src);\n"
    "  }\n"
    "}\n"
    "#define B(k, c) { ulong x = a + k; if (x >= s && x < end) d[x] = b.c; }\n"
    "static void cu_up(__global const uchar* restrict from, __global uchar* restrict d, ulong s, ulong end, uint lid, uint lsz) {\n"
    "  for (ulong a = (s & ~(ulong)15) + 16 * lid; a < end; a += 16 * lsz) {\n"
    "    uchar16 b = as_uchar16(*(__global const uint4*)(from + a));\n"
    "    B(0,s0) B(1,s1) B(2,s2) B(3,s3) B(4,s4) B(5,s5) B(6,s6) B(7,s7)\n"
    "    B(8,s8) B(9,s9) B(10,sa) B(11,sb) B(12,sc) B(13,sd) B(14,se) B(15,sf)\n"
    "  }\n"
    "}\n"
    "__kernel void cuda_up(__global const uchar* restrict from, __global uchar* restrict to, __global const ulong* restrict table, ulong host_len) {\n"
    "  __global const ulong* row = table + 3 * get_group_id(0);\n"
    "  ulong s = row[0];\n"
    "  cu_up(from, to + row[1] - s, s, s + row[2], get_local_id(0), get_local_size(0));\n"
    "}\n"
    "__kernel void warp_up(__global const uchar* restrict from, __global uchar* restrict to, __global const ulong* restrict table, ulong rows) {\n"
    "  ulong r = get_group_id(0) * (get_local_size(0) / 32) + get_local_id(0) / 32;\n"
    "  if (r >= rows) return;\n"
    "  __global const ulong* row = table + 3 * r;\n"
    "  ulong s = row[0];\n"
    "  cu_up(from, to + row[1] - s, s, s + row[2], get_local_id(0) % 32, 32);\n"
    "}\n"
    "#define L(k, c) b.c = src[a + k];\n"
    "static void cu_down(__global const uchar* restrict src, __global uchar* restrict to, ulong s, ulong end, uint lid, uint lsz) {\n"
    "  for (ulong a = (s & ~(ulong)15) + 16 * lid; a < end; a += 16 * lsz) {\n"
    "    if (a >= s && a + 16 <= end) {\n"
    "      uchar16 b;\n"
    "      L(0,s0) L(1,s1) L(2,s2) L(3,s3) L(4,s4) L(5,s5) L(6,s6) L(7,s7)\n"
    "      L(8,s8) L(9,s9) L(10,sa) L(11,sb) L(12,sc) L(13,sd) L(14,se) L(15,sf)\n"
    "      *(__global uint4*)(to + a) = as_uint4(b);\n"
    "    } else ps_edge(to, a > s ? a : s, a + 16 < end ? a + 16 : end, src, 0);\n"
    "  }\n"
    "}\n"
    "__kernel void cuda_down(__global const uchar* restrict from, __global uchar* restrict to, __global const ulong* restrict table, ulong host_len) {\n"
    "  __global const ulong* row = table + 3 * get_group_id(0);\n"
    "  ulong s = row[1];\n"
    "  cu_down(from + row[0] - s, to, s, s + row[2], get_local_id(0), get_local_size(0));\n"
    "}\n"
    "__kernel void warp_down(__global const uchar* restrict from, __global uchar* restrict to, __global const ulong* restrict table, ulong rows) {\n"
    "  ulong r = get_group_id(0) * (get_local_size(0) / 32) + get_local_id(0) / 32;\n"
    "  if (r >= rows) return;\n"
    "  __global const ulong* row = table + 3 * r;\n"
    "  ulong s = row[1];\n"
    "  cu_down(from + row[0] - s, to, s, s + row[2], get_local_id(0) % 32, 32);\n"
    "}\n"
    "__kernel void aligned_up(__global const uint4* restrict from, __global uint4* restrict to, __global const ulong* restrict table, ulong host_len) {\n"
    "  __global const ulong* row = table + 3 * get_group_id(0);\n"
    "  ulong s = row[0] / 16, d = row[1] / 16, n = row[2] / 16;\n"
    "  for (ulong i = get_local_id(0); i < n; i += get_local_size(0)) to[d + i] = from[s + i];\n"
    "}\n"
    "__kernel void aligned_down(__global const uint4* restrict from, __global uint4* restrict to, __global const ulong* restrict table, ulong host_len) {\n"
    "  __global const ulong* row = table + 3 * get_group_id(0);\n"
    "  ulong s = row[0] / 16, d = row[1] / 16, n = row[2] / 16;\n"
    "  for (ulong i = get_local_id(0); i < n; i += get_local_size(0)) to[d + i] = from[s + i];\n"
    "}\n";

typedef cl_mem (*CreateBufferNv)(cl_context, cl_mem_flags, cl_ulong, size_t, void*, cl_int*);

static cl_context ctx;
static cl_command_queue q;
static cl_program prog;
static CreateBufferNv create_nv;

static void die(const char* what, cl_int err) {
  if (err == CL_SUCCESS) return;
  fprintf(stderr, "%s failed: %d\n", what, err);
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Host memory kernels read in place, mapped for the host at *ptr. */
static cl_mem host_mem(size_t n, unsigned char** ptr) {
  cl_int err;
  cl_mem m = create_nv ? create_nv(ctx, CL_MEM_READ_WRITE, 3 /* LOCATION_HOST | PINNED */, n, NULL, &err)
                       : clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
  die("host buffer", err);
  *ptr = clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
  die("map", err);
  return m;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return rng;
}

/* Slot offsets of `n` pieces of `size` bytes, shuffled, each at a random misalignment
   (a multiple of 16 when `aligned`). */
static void offsets(size_t* out, size_t n, size_t size, int aligned) {
  size_t stride = size + SLACK;
  for (size_t i = 0; i < n; i++) out[i] = i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = next() % (i + 1), t = out[i];
    out[i] = out[j]; out[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    size_t mis = next() % SLACK;
    out[i] = out[i] * stride + (aligned ? mis & ~(size_t)15 : mis);
  }
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

typedef struct { const char* name; const char* up; const char* down; int items; int per_group; int aligned; } Shape;

/* Work items per work-group of `shape` for pieces of `size` bytes. */
static size_t local_size(const Shape* sh, size_t size) {
  if (sh->per_group) return 256;
  size_t words = size / 16 + (sh->items ? 2 : 0);
  size_t l = 32;
  if (sh->items) { l = (words + 31) / 32 * 32; return l > 1024 ? 1024 : l; }
  while (l < (size + 15) / 16 && l < 256) l *= 2;
  return l;
}

int main(int argc, char** argv) {
  cl_platform_id plats[8]; cl_uint np; cl_device_id dev; cl_int err;
  die("platforms", clGetPlatformIDs(8, plats, &np));
  /* A GPU if there is one, else the first device. */
  int found = 0;
  for (int pass = 0; pass < 2 && !found; pass++)
    for (cl_uint i = 0; i < np && !found; i++) {
      cl_device_type want = pass ? CL_DEVICE_TYPE_ALL : CL_DEVICE_TYPE_GPU;
      if (clGetDeviceIDs(plats[i], want, 1, &dev, NULL) != CL_SUCCESS) continue;
      create_nv = (CreateBufferNv)clGetExtensionFunctionAddressForPlatform(plats[i], "clCreateBufferNV");
      found = 1;
    }
  if (!found) die("no OpenCL device", -1);
  char name[256]; clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
  ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); die("context", err);
  cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  q = clCreateCommandQueueWithProperties(ctx, dev, props, &err); die("queue", err);
  prog = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err); die("program", err);
  if ((err = clBuildProgram(prog, 1, &dev, "", NULL, NULL)) != CL_SUCCESS) {
    char log[16384]; clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    fprintf(stderr, "%s\n", log); die("build", err);
  }
  size_t span = argc > 1 ? (size_t)atol(argv[1]) << 20 : SPAN;
  unsigned char *host, *back;
  cl_mem hbuf = host_mem(span, &host);
  for (size_t i = 0; i < span; i++) host[i] = (unsigned char)(next() >> 32);
  cl_mem dbuf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, span, NULL, &err); die("device buffer", err);
  unsigned char* devcopy = malloc(span); back = malloc(span);
  for (size_t i = 0; i < span; i++) devcopy[i] = (unsigned char)(next() >> 40);
  printf("device: %s, host memory: %s, %zu MiB\n", name, create_nv ? "clCreateBufferNV host" : "ALLOC_HOST_PTR", span >> 20);
  /* The CPU's own speed on that memory (the table is written by the CPU each call). */
  {
    size_t m = span < ((size_t)64 << 20) ? span : ((size_t)64 << 20);
    unsigned char* plain = malloc(m);
    memset(plain, 1, m);
    double t0 = now(); memcpy(host, plain, m); double t1 = now();
    memcpy(plain, host, m); double t2 = now();
    memset(plain, 2, m); double t3 = now(); memcpy(back, plain, m); double t4 = now();
    printf("CPU memcpy %zu MiB: into that memory %.2f GB/s, out of it %.2f GB/s; malloc to malloc %.2f GB/s\n",
           m >> 20, m / (t1 - t0) * 1e-9, m / (t2 - t1) * 1e-9, m / (t4 - t3) * 1e-9);
    double t5 = now(); memcpy(host, plain, 1536 << 10); double t6 = now();
    printf("CPU memcpy 1.5 MiB (a 65,536-row table) into that memory: %.1f us\n", (t6 - t5) * 1e6);
    free(plain);
  }
  printf("%-8s %-6s %-5s %9s %5s %10s %10s %10s  %s\n", "shape", "table", "dir", "pieces", "size", "local", "event GB/s", "wall GB/s", "check");
  Shape shapes[] = {
    {"lib", "lib_up", "lib_down", 0, 0, 0},
    {"cuda", "cuda_up", "cuda_down", 0, 0, 0},
    {"cuda+", "cuda_up", "cuda_down", 1, 0, 0},
    {"warp", "warp_up", "warp_down", 0, 1, 0},
    {"aligned", "aligned_up", "aligned_down", 0, 0, 1},
  };
  size_t sizes[][2] = {{4096, 4096}, {65536, 256}, {1024, 65536}};
  for (size_t z = 0; z < 3; z++) {
    size_t n = sizes[z][0], size = sizes[z][1];
    if (n * (size + SLACK) > span) continue;
    size_t *ho = malloc(n * sizeof *ho), *dof = malloc(n * sizeof *dof);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      const Shape* sh = &shapes[s];
      if (sh->per_group && size > 4096) continue;
      offsets(ho, n, size, sh->aligned);
      offsets(dof, n, size, sh->aligned);
      size_t tbytes = n * 3 * sizeof(cl_ulong);
      for (int dir = 0; dir < 2; dir++) {
        for (int where = 0; where < 2; where++) {
          unsigned char* tptr;
          cl_mem thost = host_mem(tbytes, &tptr);
          cl_ulong* t = (cl_ulong*)tptr;
          for (size_t i = 0; i < n; i++) {
            t[3 * i] = dir ? dof[i] : ho[i];
            t[3 * i + 1] = dir ? ho[i] : dof[i];
            t[3 * i + 2] = size;
          }
          cl_mem tdev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, tbytes, NULL, &err); die("table", err);
          cl_kernel k = clCreateKernel(prog, dir ? sh->down : sh->up, &err); die("kernel", err);
          cl_mem from = dir ? dbuf : hbuf, to = dir ? hbuf : dbuf, tb = where ? tdev : thost;
          cl_ulong last = sh->per_group ? n : span;
          clSetKernelArg(k, 0, sizeof(cl_mem), &from);
          clSetKernelArg(k, 1, sizeof(cl_mem), &to);
          clSetKernelArg(k, 2, sizeof(cl_mem), &tb);
          clSetKernelArg(k, 3, sizeof(cl_ulong), &last);
          size_t local = local_size(sh, size);
          size_t groups = sh->per_group ? (n + local / 32 - 1) / (local / 32) : n;
          size_t global = groups * local;
          /* Reference contents: device gets random bytes first (down), or zeros (up). */
          if (dir) {
            memset(host, (int)(s * 31 + where * 7 + 1), span); /* stale bytes would not pass */
            die("fill", clEnqueueWriteBuffer(q, dbuf, CL_TRUE, 0, span, devcopy, 0, NULL, NULL));
          } else {
            cl_uchar zero = 0;
            die("zero", clEnqueueFillBuffer(q, dbuf, &zero, 1, 0, span, 0, NULL, NULL));
          }
          clFinish(q);
          double ev[REPS], wall[REPS];
          for (int r = 0; r < REPS + 1; r++) {
            cl_event e;
            double t0 = now();
            if (where) clEnqueueWriteBuffer(q, tdev, CL_FALSE, 0, tbytes, tptr, 0, NULL, NULL);
            die("launch", clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &e));
            clFinish(q);
            double t1 = now();
            cl_ulong a, b;
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
            clReleaseEvent(e);
            if (r > 0) { ev[r - 1] = (b - a) * 1e-9; wall[r - 1] = t1 - t0; }
          }
          qsort(ev, REPS, sizeof *ev, cmp); qsort(wall, REPS, sizeof *wall, cmp);
          /* Check every piece. */
          size_t bad = 0;
          if (dir) {
            for (size_t i = 0; i < n && !bad; i++) bad += memcmp(host + ho[i], devcopy + dof[i], size) != 0;
          } else {
            die("read", clEnqueueReadBuffer(q, dbuf, CL_TRUE, 0, span, back, 0, NULL, NULL));
            for (size_t i = 0; i < n && !bad; i++) bad += memcmp(back + dof[i], host + ho[i], size) != 0;
          }
          double bytes = (double)n * size;
          printf("%-8s %-6s %-5s %9zu %5zu %10zu %10.1f %10.1f  %s\n", sh->name, where ? "device" : "host",
                 dir ? "down" : "up", n, size, local, bytes / ev[REPS / 2] * 1e-9, bytes / wall[REPS / 2] * 1e-9,
                 bad ? "MISMATCH" : "ok");
          fflush(stdout);
          clReleaseKernel(k); clReleaseMemObject(tdev);
          clEnqueueUnmapMemObject(q, thost, tptr, 0, NULL, NULL); clFinish(q); clReleaseMemObject(thost);
        }
      }
    }
    free(ho); free(dof);
  }
  return 0;
}
