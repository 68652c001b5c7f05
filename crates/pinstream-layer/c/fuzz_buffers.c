/*
 * fuzz_buffers.c: a random program's buffer calls, for running with and without the layer
 * (tests/host_safety.rs). From a seed, STEPS calls among: clCreateBuffer and
 * clCreateBufferWithProperties with random flags (valid and invalid combinations, ALLOC_HOST_PTR
 * often), sizes (0, small, MiBs, far too large) and host pointers (none, COPY_HOST_PTR,
 * USE_HOST_PTR, one the flags do not ask for); writes, reads and copies at random offsets
 * (some out of range); maps and unmaps; sub-buffers; kernel arguments and a kernel run; and
 * releases. Every call's return code and every read's checksum is printed on stdout, one line
 * per step: the transcript must be the same with the layer as without it.
 *
 * A SIGUSR1 handler counts signals (installed without SA_RESTART, so a signal interrupts slow
 * system calls); --ignore-sigpipe sets SIGPIPE to SIG_IGN, otherwise it keeps the default.
 * It prints "ready" once the handler is in place. The program exits with its own code, 3,
 * when it completes (1: no OpenCL device).
 *
 * --open FILE opens FILE for writing once OpenCL is set up (the layer is loaded then, either way
 * in) and keeps it open: with fd 2 closed, it takes fd 2. Nothing may be written into it.
 *
 *   fuzz_buffers SEED STEPS [--ignore-sigpipe] [--open FILE]
 * Build: cc -O2 -o fuzz_buffers fuzz_buffers.c -lOpenCL
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 12
#define HELD 256

static volatile sig_atomic_t signals_seen;
static uint64_t rng;

static void on_usr1(int sig) {
    (void)sig;
    signals_seen++;
}

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

struct buffer {
    cl_mem mem;
    size_t size;
};

static struct buffer live[LIVE];
static void *held[HELD]; /* host memory given to the driver: freed only at the end */
static int nheld;
static cl_context ctx;
static cl_command_queue queue;
static cl_kernel kernel;

static uint64_t checksum(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static unsigned char *pattern(size_t n, int step) {
    unsigned char *p = malloc(n ? n : 1);
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + (size_t)step * 7);
    return p;
}

static size_t random_size(void) {
    switch (below(6)) {
    case 0: return 0;
    case 1: return 1 + below(4096);
    case 2: return ((size_t)1 << 20) + below((size_t)2 << 20);
    case 3: return (size_t)1 << 62; /* refused by the driver */
    default: return 4096 * (1 + below(64));
    }
}

static cl_mem_flags random_flags(void) {
    static const cl_mem_flags access[] = {CL_MEM_READ_WRITE, CL_MEM_READ_ONLY, CL_MEM_WRITE_ONLY,
                                          CL_MEM_READ_WRITE | CL_MEM_READ_ONLY, 0};
    cl_mem_flags f = access[below(5)];
    if (below(3)) f |= CL_MEM_ALLOC_HOST_PTR;
    if (!below(8)) f |= CL_MEM_HOST_NO_ACCESS;
    if (!below(10)) f |= CL_MEM_HOST_READ_ONLY;
    if (!below(20)) f |= (cl_mem_flags)1 << 40; /* a flag no one knows */
    return f;
}

static void create(int step) {
    cl_mem_flags flags = random_flags();
    size_t size = random_size();
    void *host = NULL;
    int host_kind = (int)below(5); /* 0 copy, 1 use, 2 stray pointer, else none */
    if (host_kind < 3 && size <= ((size_t)4 << 20) && nheld < HELD) {
        host = pattern(size, step);
        held[nheld++] = host;
        if (host_kind == 0) flags |= CL_MEM_COPY_HOST_PTR;
        if (host_kind == 1) flags |= CL_MEM_USE_HOST_PTR;
    }
    cl_int rc = CL_SUCCESS;
    cl_mem m;
    int props = (int)below(3);
    if (props == 0) {
        m = clCreateBuffer(ctx, flags, size, host, &rc);
    } else {
        cl_mem_properties none[] = {0};
        m = clCreateBufferWithProperties(ctx, props == 1 ? NULL : none, flags, size, host, &rc);
    }
    printf("%d create%s flags=0x%llx size=%zu host=%d: rc=%d made=%d\n", step, props ? "_props" : "",
           (unsigned long long)flags, size, host != NULL, rc, m != NULL);
    if (!m) return;
    if (host_kind > 1 || !host) {
        /* Its contents are undefined until written (they differ from run to run): filled. */
        unsigned char byte = (unsigned char)step;
        cl_int fill = clEnqueueFillBuffer(queue, m, &byte, 1, 0, size, 0, NULL, NULL);
        printf("%d fill: rc=%d finish=%d\n", step, fill, clFinish(queue));
    }
    struct buffer *slot = &live[below(LIVE)];
    if (slot->mem) clReleaseMemObject(slot->mem);
    slot->mem = m;
    slot->size = size;
}

static struct buffer *some(void) {
    struct buffer *b = &live[below(LIVE)];
    return b->mem ? b : NULL;
}

static void region(const struct buffer *b, size_t *off, size_t *n) {
    *off = below(b->size + 1);
    *n = below(b->size - *off + 1);
    if (!below(10)) *n += 1 + below(64); /* out of range */
}

static void transfer(int step, int write) {
    struct buffer *b = some();
    if (!b) return;
    size_t off, n;
    region(b, &off, &n);
    unsigned char *data = pattern(n, step);
    cl_int rc = write ? clEnqueueWriteBuffer(queue, b->mem, CL_TRUE, off, n, data, 0, NULL, NULL)
                      : clEnqueueReadBuffer(queue, b->mem, CL_TRUE, off, n, data, 0, NULL, NULL);
    printf("%d %s off=%zu n=%zu: rc=%d sum=%llx\n", step, write ? "write" : "read", off, n, rc,
           (unsigned long long)(rc == CL_SUCCESS && !write ? checksum(data, n) : 0));
    free(data);
}

static void copy(int step) {
    struct buffer *a = some(), *b = some();
    if (!a || !b) return;
    size_t so = below(a->size + 1), dof = below(b->size + 1);
    size_t n = below((a->size - so < b->size - dof ? a->size - so : b->size - dof) + 1);
    cl_int rc = clEnqueueCopyBuffer(queue, a->mem, b->mem, so, dof, n, 0, NULL, NULL);
    cl_int fin = clFinish(queue);
    printf("%d copy so=%zu do=%zu n=%zu: rc=%d finish=%d\n", step, so, dof, n, rc, fin);
}

static void map(int step) {
    struct buffer *b = some();
    if (!b) return;
    size_t off, n;
    region(b, &off, &n);
    cl_map_flags mf = below(2) ? CL_MAP_READ : CL_MAP_WRITE;
    cl_int rc = CL_SUCCESS;
    unsigned char *p = clEnqueueMapBuffer(queue, b->mem, CL_TRUE, mf, off, n, 0, NULL, NULL, &rc);
    uint64_t sum = 0;
    if (p && mf == CL_MAP_READ) sum = checksum(p, n);
    if (p && mf == CL_MAP_WRITE) memset(p, step & 0xff, n);
    cl_int un = p ? clEnqueueUnmapMemObject(queue, b->mem, p, 0, NULL, NULL) : 0;
    cl_int fin = clFinish(queue);
    printf("%d map%s off=%zu n=%zu: rc=%d sum=%llx unmap=%d finish=%d\n", step,
           mf == CL_MAP_READ ? "_read" : "_write", off, n, rc, (unsigned long long)sum, un, fin);
}

static void sub_buffer(int step) {
    struct buffer *b = some();
    if (!b) return;
    cl_buffer_region r;
    region(b, &r.origin, &r.size);
    if (below(2)) r.origin &= ~(size_t)127;
    cl_int rc = CL_SUCCESS;
    cl_mem s = clCreateSubBuffer(b->mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &rc);
    printf("%d sub origin=%zu size=%zu: rc=%d made=%d\n", step, r.origin, r.size, rc, s != NULL);
    if (!s) return;
    struct buffer *slot = &live[below(LIVE)];
    if (slot->mem) clReleaseMemObject(slot->mem);
    slot->mem = s;
    slot->size = r.size;
}

static void run_kernel(int step) {
    struct buffer *b = some();
    if (!b) return;
    cl_int rc = clSetKernelArg(kernel, 0, sizeof(cl_mem), &b->mem);
    cl_uint words = (cl_uint)(b->size / 4);
    cl_int rc2 = clSetKernelArg(kernel, 1, sizeof words, &words);
    cl_int run = -1, fin = -1;
    cl_mem_flags f = 0;
    clGetMemObjectInfo(b->mem, CL_MEM_FLAGS, sizeof f, &f, NULL);
    if (rc == CL_SUCCESS && words && !(f & (CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY))) {
        size_t global = 64;
        run = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, NULL, 0, NULL, NULL);
        fin = clFinish(queue);
    }
    printf("%d kernel words=%u: arg=%d arg1=%d run=%d finish=%d\n", step, words, rc, rc2, run, fin);
}

static void release(int step) {
    struct buffer *b = some();
    if (!b) return;
    cl_int rc = clReleaseMemObject(b->mem);
    b->mem = NULL;
    printf("%d release: rc=%d\n", step, rc);
}

static const char *SOURCE =
    "__kernel void bump(__global uint *p, uint n) {\n"
    "  for (uint i = get_global_id(0); i < n; i += get_global_size(0)) p[i] = p[i] * 3u + 1u;\n"
    "}\n";

static int setup(void) {
    cl_platform_id platform;
    cl_device_id device;
    cl_int rc;
    if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS) return 0;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) return 0;
    ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &rc);
    if (!ctx) return 0;
    queue = clCreateCommandQueueWithProperties(ctx, device, NULL, &rc);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &SOURCE, NULL, &rc);
    if (!queue || !prog || clBuildProgram(prog, 1, &device, NULL, NULL, NULL) != CL_SUCCESS) return 0;
    kernel = clCreateKernel(prog, "bump", &rc);
    clReleaseProgram(prog);
    return kernel != NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fuzz_buffers SEED STEPS [--ignore-sigpipe] [--open FILE]\n");
        return 64;
    }
    rng = strtoull(argv[1], NULL, 10) * 2654435761u + 88172645463325252ull;
    int steps = atoi(argv[2]);
    const char *own_file = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--ignore-sigpipe")) {
            signal(SIGPIPE, SIG_IGN);
        } else if (!strcmp(argv[i], "--open") && i + 1 < argc) {
            own_file = argv[++i];
        } else {
            fprintf(stderr, "fuzz_buffers: unknown option %s\n", argv[i]);
            return 64;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: slow system calls see EINTR */
    sigaction(SIGUSR1, &sa, NULL);
    printf("ready\n"); /* the handler is in place: signals may come */
    fflush(stdout);
    if (!setup()) {
        fprintf(stderr, "fuzz_buffers: no OpenCL device to run on\n");
        return 1;
    }
    /* A file of the program's own, open from here on: with fd 2 closed, it is fd 2. */
    if (own_file && !fopen(own_file, "w")) return 2;
    for (int step = 0; step < steps; step++) {
        switch (below(9)) {
        case 0: case 1: create(step); break;
        case 2: transfer(step, 1); break;
        case 3: transfer(step, 0); break;
        case 4: copy(step); break;
        case 5: map(step); break;
        case 6: sub_buffer(step); break;
        case 7: run_kernel(step); break;
        default: release(step); break;
        }
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i].mem) clReleaseMemObject(live[i].mem);
    printf("finish: %d\n", clFinish(queue));
    clReleaseKernel(kernel);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    for (int i = 0; i < nheld; i++) free(held[i]);
    printf("done\n");
    return 3;
}
