/*
 * classic_recipe.c: the classic OpenCL pinned-memory recipe, written the way third-party
 * programs write it, for testing libpinstream_layer.so with and without the layer.
 *
 *   K buffers of N MiB with CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, each mapped and filled
 *   through the mapped pointer; then
 *   1. clEnqueueWriteBuffer from the mapped pointers into a device buffer (the staging use),
 *   2. unmapped, clEnqueueCopyBuffer from each into the device buffer,
 *   3. a kernel reading each directly (the buffer as a kernel argument);
 *   every step's data checked against the pattern, and one checksum over everything.
 *
 * Output: "key: value" lines; the results (checksum, mismatches, result) must be identical
 * with and without the layer, the timings and VRAM probes are for the GPU script.
 *
 *   classic_recipe [--count K] [--size-mib N] [--repeat R] [--platform SUBSTR]
 *                  [--device gpu|cpu|any] [--probe CMD] [--no-kernel] [--copy-host-ptr] [--list]
 *
 * --copy-host-ptr gives each buffer its data at creation (ALLOC_HOST_PTR | COPY_HOST_PTR)
 * instead of filling it through the mapped pointer.
 * --probe CMD runs CMD (e.g. nvidia-smi --query-gpu=memory.used ...) before the buffers are
 * made and once they are all mapped and filled, and prints its first line of output.
 * Build: cc -O2 -o classic_recipe classic_recipe.c -lOpenCL
 */
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cl_int rc_ = (call);                                                           \
        if (rc_ != CL_SUCCESS) {                                                       \
            fprintf(stderr, "classic_recipe: %s failed: %d (line %d)\n", #call, rc_,   \
                    __LINE__);                                                         \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

static const char *KERNEL =
    "__kernel void sum_words(__global const uint *src, ulong n, __global ulong *partial) {\n"
    "  size_t gid = get_global_id(0), gsz = get_global_size(0);\n"
    "  ulong s = 0;\n"
    "  for (ulong i = gid; i < n; i += gsz) s += src[i];\n"
    "  partial[gid] = s;\n"
    "}\n";

struct options {
    int count, size_mib, repeat, kernel, list, copy_host_ptr;
    const char *platform, *device, *probe;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t word(size_t i, int k) {
    return (uint32_t)(i * 2654435761u) ^ (uint32_t)((uint32_t)k * 0x9E3779B9u + 0x1234567u);
}

static void usage(void) {
    fprintf(stderr, "usage: classic_recipe [--count K] [--size-mib N] [--repeat R] [--platform SUBSTR]\n"
                    "                      [--device gpu|cpu|any] [--probe CMD] [--no-kernel] [--copy-host-ptr] [--list]\n");
    exit(64);
}

static struct options parse(int argc, char **argv) {
    struct options o = {4, 2, 3, 1, 0, 0, NULL, "gpu-first", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-kernel")) { o.kernel = 0; continue; }
        if (!strcmp(a, "--list")) { o.list = 1; continue; }
        if (!strcmp(a, "--copy-host-ptr")) { o.copy_host_ptr = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--count")) o.count = atoi(v);
        else if (!strcmp(a, "--size-mib")) o.size_mib = atoi(v);
        else if (!strcmp(a, "--repeat")) o.repeat = atoi(v);
        else if (!strcmp(a, "--platform")) o.platform = v;
        else if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--probe")) o.probe = v;
        else usage();
        i++;
    }
    if (o.count < 1 || o.size_mib < 1 || o.repeat < 1) usage();
    return o;
}

static void info_string(cl_platform_id p, cl_device_id d, cl_uint param, char *out, size_t n) {
    out[0] = 0;
    if (d) clGetDeviceInfo(d, param, n, out, NULL);
    else clGetPlatformInfo(p, param, n, out, NULL);
}

/* The first device of the wanted type on a platform whose name contains o->platform. */
static cl_device_id pick(const struct options *o, cl_platform_id *platform_out) {
    cl_platform_id platforms[16];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(16, platforms, &np));
    cl_device_id fallback = NULL;
    cl_platform_id fallback_p = NULL;
    for (cl_uint p = 0; p < np; p++) {
        char name[256];
        info_string(platforms[p], NULL, CL_PLATFORM_NAME, name, sizeof name);
        cl_device_id devs[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) nd = 0;
        for (cl_uint d = 0; d < nd; d++) {
            char dname[256];
            cl_device_type type;
            info_string(NULL, devs[d], CL_DEVICE_NAME, dname, sizeof dname);
            CHECK(clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL));
            int gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
            if (o->list) {
                printf("platform %u device %u: %s (%s)%s\n", p, d, dname, name, gpu ? " GPU" : "");
                continue;
            }
            if (o->platform && !strstr(name, o->platform)) continue;
            if (!strcmp(o->device, "cpu") && gpu) continue;
            if (!strcmp(o->device, "gpu") && !gpu) continue;
            if (!fallback) { fallback = devs[d]; fallback_p = platforms[p]; }
            if (gpu || strcmp(o->device, "gpu-first")) { *platform_out = platforms[p]; return devs[d]; }
        }
    }
    if (o->list) exit(0);
    if (!fallback) {
        fprintf(stderr, "classic_recipe: no OpenCL device matches (--platform %s --device %s)\n",
                o->platform ? o->platform : "any", o->device);
        exit(3);
    }
    *platform_out = fallback_p;
    return fallback;
}

static void probe(const char *cmd, const char *when) {
    if (!cmd) return;
    char line[512] = "";
    FILE *f = popen(cmd, "r");
    if (!f || !fgets(line, sizeof line, f)) snprintf(line, sizeof line, "(no output)\n");
    if (f) pclose(f);
    line[strcspn(line, "\n")] = 0;
    printf("probe_%s: %s\n", when, line);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Words of `got` that differ from buffer k's pattern. */
static size_t mismatches(const uint32_t *got, size_t words, int k) {
    size_t bad = 0;
    for (size_t i = 0; i < words; i++) bad += got[i] != word(i, k);
    return bad;
}

struct run {
    const struct options *o;
    cl_context ctx;
    cl_command_queue q;
    cl_mem *pinned, dev;
    uint32_t **mapped, *scratch;
    uint64_t *sums;
    size_t bytes, words, bad;
};

/* Buffer k's pattern into `dst`; returns its sum. */
static uint64_t fill_pattern(uint32_t *dst, size_t words, int k) {
    uint64_t s = 0;
    for (size_t i = 0; i < words; i++) s += dst[i] = word(i, k);
    return s;
}

/* The classic recipe: create with ALLOC_HOST_PTR, map, fill through the mapped pointer. With
 * --copy-host-ptr the data is given at creation (ALLOC_HOST_PTR | COPY_HOST_PTR) instead. */
static void make_pinned(struct run *r) {
    double t0 = now(), fill = 0;
    cl_mem_flags flags = CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR;
    for (int k = 0; k < r->o->count; k++) {
        cl_int err;
        double f0 = now();
        if (r->o->copy_host_ptr) r->sums[k] = fill_pattern(r->scratch, r->words, k);
        fill += now() - f0;
        void *host = r->o->copy_host_ptr ? r->scratch : NULL;
        r->pinned[k] = clCreateBuffer(r->ctx, flags | (host ? CL_MEM_COPY_HOST_PTR : 0), r->bytes, host, &err);
        CHECK(err);
        r->mapped[k] = clEnqueueMapBuffer(r->q, r->pinned[k], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, r->bytes, 0, NULL, NULL, &err);
        CHECK(err);
        f0 = now();
        if (!r->o->copy_host_ptr) r->sums[k] = fill_pattern(r->mapped[k], r->words, k);
        fill += now() - f0;
    }
    printf("create_map_s: %.3f\nfill_s: %.3f\n", now() - t0 - fill, fill);
}

/* R timed passes of `step` over every buffer; returns the median GB/s. */
static double timed(struct run *r, void (*step)(struct run *, int)) {
    double t[64];
    int n = r->o->repeat < 64 ? r->o->repeat : 64;
    for (int p = 0; p < n; p++) {
        double t0 = now();
        for (int k = 0; k < r->o->count; k++) step(r, k);
        CHECK(clFinish(r->q));
        t[p] = now() - t0;
    }
    return (double)r->bytes * r->o->count / median(t, n) / 1e9;
}

static void write_step(struct run *r, int k) {
    CHECK(clEnqueueWriteBuffer(r->q, r->dev, CL_FALSE, 0, r->bytes, r->mapped[k], 0, NULL, NULL));
}

static void copy_step(struct run *r, int k) {
    CHECK(clEnqueueCopyBuffer(r->q, r->pinned[k], r->dev, 0, 0, r->bytes, 0, NULL, NULL));
}

/* Runs `step` for buffer k alone, reads the device buffer back and checks it. */
static void verify(struct run *r, void (*step)(struct run *, int)) {
    for (int k = 0; k < r->o->count; k++) {
        step(r, k);
        CHECK(clEnqueueReadBuffer(r->q, r->dev, CL_TRUE, 0, r->bytes, r->scratch, 0, NULL, NULL));
        r->bad += mismatches(r->scratch, r->words, k);
    }
}

static cl_kernel build(struct run *r, cl_device_id device) {
    cl_int err;
    cl_program prog = clCreateProgramWithSource(r->ctx, 1, &KERNEL, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &device, "", NULL, NULL));
    cl_kernel kern = clCreateKernel(prog, "sum_words", &err);
    CHECK(err);
    CHECK(clReleaseProgram(prog));
    return kern;
}

/* The kernel reads each pinned buffer directly; returns the checksum over all of them. */
static uint64_t kernel_sums(struct run *r, cl_device_id device, int gpu) {
    size_t global = gpu ? 131072 : 64;
    cl_int err;
    cl_mem partial = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE, global * sizeof(uint64_t), NULL, &err);
    CHECK(err);
    uint64_t *host = malloc(global * sizeof(uint64_t)), checksum = 0;
    cl_kernel kern = build(r, device);
    cl_ulong n = r->words;
    double t[64];
    int passes = r->o->repeat < 64 ? r->o->repeat : 64;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        for (int k = 0; k < r->o->count; k++) {
            CHECK(clSetKernelArg(kern, 0, sizeof(cl_mem), &r->pinned[k]));
            CHECK(clSetKernelArg(kern, 1, sizeof n, &n));
            CHECK(clSetKernelArg(kern, 2, sizeof(cl_mem), &partial));
            CHECK(clEnqueueNDRangeKernel(r->q, kern, 1, NULL, &global, NULL, 0, NULL, NULL));
            CHECK(clEnqueueReadBuffer(r->q, partial, CL_TRUE, 0, global * sizeof(uint64_t), host, 0, NULL, NULL));
            uint64_t s = 0;
            for (size_t i = 0; i < global; i++) s += host[i];
            r->bad += s != r->sums[k];
            if (p == 0) checksum += s;
        }
        t[p] = now() - t0;
    }
    printf("kernel_gbps: %.2f\n", (double)r->bytes * r->o->count / median(t, passes) / 1e9);
    CHECK(clReleaseKernel(kern));
    CHECK(clReleaseMemObject(partial));
    free(host);
    return checksum;
}

int main(int argc, char **argv) {
    struct options o = parse(argc, argv);
    cl_platform_id platform;
    cl_device_id device = pick(&o, &platform);
    char pname[256], dname[256];
    cl_device_type type;
    info_string(platform, NULL, CL_PLATFORM_NAME, pname, sizeof pname);
    info_string(NULL, device, CL_DEVICE_NAME, dname, sizeof dname);
    CHECK(clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL));
    printf("device: %s (%s)\nbuffers: %d x %d MiB READ_WRITE|ALLOC_HOST_PTR%s\n", dname, pname, o.count, o.size_mib,
           o.copy_host_ptr ? "|COPY_HOST_PTR" : "");

    struct run r = {.o = &o};
    cl_int err;
    r.ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    r.q = clCreateCommandQueue(r.ctx, device, 0, &err);
    CHECK(err);
    r.bytes = (size_t)o.size_mib << 20;
    r.words = r.bytes / sizeof(uint32_t);
    r.pinned = calloc((size_t)o.count, sizeof(cl_mem));
    r.mapped = calloc((size_t)o.count, sizeof(uint32_t *));
    r.sums = calloc((size_t)o.count, sizeof(uint64_t));
    r.scratch = malloc(r.bytes);
    if (!r.pinned || !r.mapped || !r.sums || !r.scratch) { fprintf(stderr, "classic_recipe: out of host memory\n"); return 2; }

    probe(o.probe, "start");
    make_pinned(&r);
    probe(o.probe, "mapped");
    r.dev = clCreateBuffer(r.ctx, CL_MEM_READ_WRITE, r.bytes, NULL, &err);
    CHECK(err);

    /* 1. The staging use: writes from the mapped pointers while mapped. */
    printf("write_gbps: %.2f\n", timed(&r, write_step));
    verify(&r, write_step);
    for (int k = 0; k < o.count; k++)
        CHECK(clEnqueueUnmapMemObject(r.q, r.pinned[k], r.mapped[k], 0, NULL, NULL));
    CHECK(clFinish(r.q));
    /* 2. Unmapped, as a copy source. */
    printf("copy_gbps: %.2f\n", timed(&r, copy_step));
    verify(&r, copy_step);
    /* 3. As a kernel argument. */
    uint64_t checksum = 0;
    for (int k = 0; k < o.count; k++) checksum += r.sums[k];
    if (o.kernel) checksum = kernel_sums(&r, device, (type & CL_DEVICE_TYPE_GPU) != 0);

    printf("words_checked: %zu\nchecksum: 0x%016llx\nmismatches: %zu\nresult: %s\n",
           r.words * (size_t)o.count * 2, (unsigned long long)checksum, r.bad, r.bad ? "FAILED" : "ok");
    for (int k = 0; k < o.count; k++) CHECK(clReleaseMemObject(r.pinned[k]));
    CHECK(clReleaseMemObject(r.dev));
    CHECK(clReleaseCommandQueue(r.q));
    CHECK(clReleaseContext(r.ctx));
    free(r.pinned); free(r.mapped); free(r.sums); free(r.scratch);
    return r.bad ? 1 : 0;
}
