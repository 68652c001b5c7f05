/* The C API from C: every call, every misuse the header lists, several threads at once, and
 * registration of unaligned malloc memory. Built by tests/c_suite.rs with the system C
 * compiler against the installed library, under AddressSanitizer, on the first GPU, else the
 * first device (PoCL in CI), and by scripts/test-windows.sh with mingw-w64 against the DLL, run
 * under Wine. Ends with "N passed, N failed"; exits non-zero on any failure. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#ifdef _WIN32
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS /* clCreateCommandQueue: see open_context */
#endif
#include <pinstream.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
/* Windows (scripts/test-windows.sh, under Wine): the C runtime's names for the environment;
 * the unix mappings of test_not_pinnable have their own Windows test in the library. */
#include <process.h>
#define setenv(name, value, overwrite) _putenv_s(name, value)
#define unsetenv(name) _putenv_s(name, "")
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "check.h"

/* The call returned `want`, and on failure the detail names the call. */
#define EXPECT(call, want, name)                                                       \
  do {                                                                                 \
    psError_t got_ = (call);                                                           \
    CHECK(got_ == (want), "%s returned %d (%s), want %d; detail: %s", #call, got_,     \
          psGetErrorString(got_), (want), psGetLastErrorDetail());                     \
    if (got_ != PS_SUCCESS)                                                            \
      CHECK(strncmp(psGetLastErrorDetail(), name ": ", strlen(name) + 2) == 0,          \
            "detail of %s: %s", #call, psGetLastErrorDetail());                        \
  } while (0)

static int detail_has(const char *text) { return strstr(psGetLastErrorDetail(), text) != NULL; }

static cl_context ctx;
static cl_device_id device;
static cl_command_queue queue;

/* The first GPU of any platform, else the first device: the loader's order is no preference
 * (PoCL comes first on the H200 machine), as in examples/c/seed_port.c. */
static cl_device_id pick_device(void) {
  cl_platform_id platforms[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS || np == 0) {
    fprintf(stderr, "no OpenCL platform: apt-get install pocl-opencl-icd\n");
    exit(2);
  }
  cl_device_id first = NULL;
  for (cl_uint p = 0; p < np && p < 16; p++) {
    cl_device_id d = NULL;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_GPU, 1, &d, NULL) == CL_SUCCESS) return d;
    if (!first && clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 1, &d, NULL) == CL_SUCCESS)
      first = d;
  }
  if (!first) {
    fprintf(stderr, "no OpenCL device: apt-get install pocl-opencl-icd\n");
    exit(2);
  }
  return first;
}

static void open_context(void) {
  cl_int err;
  device = pick_device();
  char name[256] = "";
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
  fprintf(stderr, "test_capi: device %s\n", name);
  ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
#ifdef _WIN32
  /* Wine's opencl.dll has OpenCL 1.x entry points only. */
  queue = clCreateCommandQueue(ctx, device, 0, &err);
#else
  queue = clCreateCommandQueueWithProperties(ctx, device, NULL, &err);
#endif
  if (err != CL_SUCCESS) {
    fprintf(stderr, "OpenCL setup failed: %d\n", err);
    exit(2);
  }
}

/* What the device is, read through OpenCL: the answers that differ between a CPU device
 * (PoCL: nothing to pin, no VRAM counter, no cl_nv_create_buffer) and a GPU (NVIDIA's on the
 * H200 machine) are expected from these. */
static int device_is_cpu, device_has_nv_create_buffer;

static void read_device_kind(void) {
  cl_device_type type = 0;
  size_t n = 0;
  clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  device_is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &n);
  char *ext = calloc(1, n + 1);
  if (ext && clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS)
    device_has_nv_create_buffer = strstr(ext, "cl_nv_create_buffer") != NULL;
  free(ext);
  fprintf(stderr, "test_capi: %s device, cl_nv_create_buffer %s\n", device_is_cpu ? "CPU" : "GPU",
          device_has_nv_create_buffer ? "listed" : "not listed");
}

/* Memory pinned by the default strategy: nothing to pin on a CPU device, pinned on a GPU
 * (success means pinned there). */
static int pin_state_as_expected(const psHostInfo *info) {
  if (device_is_cpu) return info->pin_state == PS_PIN_NOT_NEEDED && info->pinned == 0;
  return info->pin_state == PS_PIN_PINNED && info->pinned == 1;
}

/* A CPU device has no VRAM counter; a GPU may have one (NVML), else the note says unknown. */
static int vram_as_expected(const psHostInfo *info) {
  int unknown = info->vram_cost_known == 0 && strstr(info->vram_note, "unknown") != NULL;
  return unknown || (!device_is_cpu && info->vram_cost_known == 1);
}

static cl_uint refcount(cl_context c) {
  cl_uint n = 0;
  clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL);
  return n;
}

/* The context's count once it is `want`, looking every millisecond for up to 10 s: the
 * references a call gives back on a thread of pinstream's own (psMemcpyBatchRelease: stages of
 * downloads still being copied out are freed by that thread) reach the count a little after
 * the call returns, later still on a loaded host (seen under Wine in CI). */
static cl_uint settled_refcount(cl_context c, cl_uint want) {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t never = PTHREAD_COND_INITIALIZER;
  cl_uint n = refcount(c);
  pthread_mutex_lock(&lock);
  for (int i = 0; i < 10000 && n != want; i++) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 1000000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&never, &lock, &until);
    n = refcount(c);
  }
  pthread_mutex_unlock(&lock);
  return n;
}

/* Writes a pattern, uploads it, clears the host copy, downloads, compares. */
static int round_trip(void *ptr, size_t n, unsigned seed) {
  unsigned char *p = ptr;
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed);
  cl_int err;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  if (err != CL_SUCCESS) return 0;
  err = clEnqueueWriteBuffer(queue, buf, CL_FALSE, 0, n, p, 0, NULL, NULL);
  clFinish(queue);
  memset(p, 0, n);
  err |= clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, n, p, 0, NULL, NULL);
  clReleaseMemObject(buf);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += p[i] != (unsigned char)(i * 31u + seed);
  return err == CL_SUCCESS && bad == 0;
}

static void test_error_strings(void) {
  CHECK(strcmp(psGetLastErrorDetail(), "no error") == 0, "%s", psGetLastErrorDetail());
  CHECK(strncmp(psGetErrorString(PS_SUCCESS), "PS_SUCCESS: ", 12) == 0, "%s", "message");
  CHECK(strncmp(psGetErrorString(PS_ERROR_NOT_PINNABLE), "PS_ERROR_NOT_PINNABLE: ", 23) == 0, "%s", "message");
  CHECK(strncmp(psGetErrorString(PS_ERROR_INTERNAL), "PS_ERROR_INTERNAL: ", 19) == 0, "%s", "message");
  CHECK(strncmp(psGetErrorString(PS_ERROR_NOT_MAPPED), "PS_ERROR_NOT_MAPPED: ", 21) == 0, "%s", "message");
  CHECK(strstr(psGetErrorString(-1), "unrecognized") != NULL, "%s", "message");
  CHECK(strstr(psGetErrorString(99), "unrecognized") != NULL, "%s", "message");
}

/* PS_STRATEGY_NV_HOST allocates and frees where the device lists cl_nv_create_buffer, and is
 * refused with the fix (auto) where it does not. */
static void test_nv_host(void) {
  void *p = NULL;
  if (!device_has_nv_create_buffer) {
    EXPECT(psHostAlloc(ctx, 4096, PS_STRATEGY_NV_HOST, &p), PS_ERROR_STRATEGY_UNAVAILABLE, "psHostAlloc");
    CHECK(detail_has("cl_nv_create_buffer") && detail_has("PS_STRATEGY_AUTO"), "%s", psGetLastErrorDetail());
    return;
  }
  EXPECT(psHostAlloc(ctx, 4096, PS_STRATEGY_NV_HOST, &p), PS_SUCCESS, "psHostAlloc");
  psHostInfo info;
  EXPECT(psHostGetInfo(p, &info), PS_SUCCESS, "psHostGetInfo");
  CHECK(info.strategy == PS_STRATEGY_NV_HOST && info.bytes == 4096, "strategy %d", info.strategy);
  CHECK(round_trip(p, 4096, 11), "round trip through nv-host memory");
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
}

static void test_alloc(void) {
  void *p = (void *)1;
  EXPECT(psHostAlloc(ctx, 4096, 0, NULL), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  EXPECT(psHostAlloc(ctx, 0, 0, &p), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  CHECK(p == NULL, "*ptr is NULL after a failure");
  EXPECT(psHostAlloc(NULL, 4096, 0, &p), PS_ERROR_INVALID_CONTEXT, "psHostAlloc");
  EXPECT(psHostAlloc(ctx, 4096, 0x400, &p), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  EXPECT(psHostAlloc(ctx, 4096, 9, &p), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  test_nv_host();

  size_t n = (10u << 20) + 3;
  EXPECT(psHostAlloc(ctx, n, PS_HOST_ALLOC_DEFAULT, &p), PS_SUCCESS, "psHostAlloc");
  CHECK(p != NULL && round_trip(p, n, 7), "round trip through psHostAlloc memory");
  psHostInfo info;
  memset(&info, 0xff, sizeof info);
  EXPECT(psHostGetInfo((char *)p + 12345, &info), PS_SUCCESS, "psHostGetInfo");
  CHECK(info.base == p && info.bytes == n, "base %p bytes %zu", info.base, info.bytes);
  CHECK(info.kind == PS_HOST_ALLOCATED && info.strategy == PS_STRATEGY_REGISTER, "kind %d strategy %d", info.kind, info.strategy);
  CHECK(strcmp(info.strategy_name, "register") == 0, "%s", info.strategy_name);
  CHECK(pin_state_as_expected(&info), "pin state %d, pinned %d", info.pin_state, info.pinned);
  CHECK(info.chunk_count >= 1 && info.chunk_bytes >= 1 && info.device_count == 1, "chunks %zu", info.chunk_count);
  /* The chunks tile the range: the first, then whole chunks, the last ending it. */
  CHECK(info.first_chunk_bytes >= 1 && info.first_chunk_bytes <= info.chunk_bytes &&
            info.first_chunk_bytes + (info.chunk_count - 1) * info.chunk_bytes >= info.bytes &&
            info.first_chunk_bytes + (info.chunk_count - 1) * info.chunk_bytes < info.bytes + info.chunk_bytes,
        "first chunk %zu, chunks %zu of %zu", info.first_chunk_bytes, info.chunk_count, info.chunk_bytes);
  CHECK(vram_as_expected(&info), "known %d: %s", info.vram_cost_known, info.vram_note);
  CHECK(strstr(info.reason, "auto") != NULL && strlen(info.pin_note) > 0, "%s", info.reason);
  EXPECT(psHostGetInfo(p, NULL), PS_ERROR_INVALID_VALUE, "psHostGetInfo");
  EXPECT(psHostGetInfo(NULL, &info), PS_ERROR_INVALID_VALUE, "psHostGetInfo");

  /* Freeing: NULL, interior, foreign, registered, then the real one, then twice. */
  EXPECT(psHostFree(NULL), PS_ERROR_INVALID_VALUE, "psHostFree");
  EXPECT(psHostFree((char *)p + 1), PS_ERROR_INVALID_HOST_POINTER, "psHostFree");
  CHECK(detail_has("1 bytes into"), "%s", psGetLastErrorDetail());
  void *foreign = malloc(64);
  EXPECT(psHostFree(foreign), PS_ERROR_INVALID_HOST_POINTER, "psHostFree");
  EXPECT(psHostUnregister(p), PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "psHostUnregister");
  CHECK(detail_has("psHostFree"), "%s", psGetLastErrorDetail());
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
  EXPECT(psHostFree(p), PS_ERROR_INVALID_HOST_POINTER, "psHostFree");
  EXPECT(psHostGetInfo(p, &info), PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "psHostGetInfo");
  free(foreign);
}

static void test_strategy_env(void) {
  void *p = NULL;
  psHostInfo info;
  setenv("PINSTREAM_STRATEGY", "bogus", 1);
  EXPECT(psHostAlloc(ctx, 4096, 0, &p), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  CHECK(detail_has("PINSTREAM_STRATEGY") && detail_has("unknown strategy"), "%s", psGetLastErrorDetail());
  setenv("PINSTREAM_STRATEGY", "pageable", 1);
  EXPECT(psHostAlloc(ctx, 4096, 0, &p), PS_SUCCESS, "psHostAlloc");
  EXPECT(psHostGetInfo(p, &info), PS_SUCCESS, "psHostGetInfo");
  CHECK(info.strategy == PS_STRATEGY_PAGEABLE && strstr(info.reason, "PINSTREAM_STRATEGY") != NULL, "%s", info.reason);
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
  /* Flags win over the environment. */
  EXPECT(psHostAlloc(ctx, 4096, PS_STRATEGY_REGISTER, &p), PS_SUCCESS, "psHostAlloc");
  EXPECT(psHostGetInfo(p, &info), PS_SUCCESS, "psHostGetInfo");
  CHECK(info.strategy == PS_STRATEGY_REGISTER && strstr(info.reason, "flags") != NULL, "%s", info.reason);
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
  unsetenv("PINSTREAM_STRATEGY");
}

static void test_register(void) {
  size_t n = (3u << 20) + 5;
  unsigned char *backing = malloc(n + 64);
  unsigned char *p = backing + 19; /* no page alignment, not even 16-byte alignment */
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i ^ 0x5a);
  /* A registration refused on the way (here: a bad PINSTREAM_MAX_CHUNK) leaves the range free. */
  setenv("PINSTREAM_MAX_CHUNK", "bogus", 1);
  EXPECT(psHostRegister(ctx, p, n, PS_HOST_REGISTER_DEFAULT), PS_ERROR_INVALID_VALUE, "psHostRegister");
  CHECK(detail_has("PINSTREAM_MAX_CHUNK"), "%s", psGetLastErrorDetail());
  unsetenv("PINSTREAM_MAX_CHUNK");
  EXPECT(psHostRegister(ctx, p, n, PS_HOST_REGISTER_DEFAULT), PS_SUCCESS, "psHostRegister");
  size_t changed = 0;
  for (size_t i = 0; i < n; i++) changed += p[i] != (unsigned char)(i ^ 0x5a);
  CHECK(changed == 0, "registration changed %zu bytes", changed);
  CHECK(round_trip(p, n, 3), "round trip through registered unaligned malloc memory");
  psHostInfo info;
  EXPECT(psHostGetInfo(p + n - 1, &info), PS_SUCCESS, "psHostGetInfo");
  CHECK(info.kind == PS_HOST_REGISTERED && info.base == p && info.bytes == n, "kind %d", info.kind);
  CHECK(pin_state_as_expected(&info), "pin state %d, pinned %d", info.pin_state, info.pinned);

  /* Overlaps: the same range, a part, a range reaching into it. */
  EXPECT(psHostRegister(ctx, p, n, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "psHostRegister");
  EXPECT(psHostRegister(ctx, p + 100, 10, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "psHostRegister");
  EXPECT(psHostRegister(ctx, backing, 20, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "psHostRegister");
  CHECK(detail_has("registered by psHostRegister"), "%s", psGetLastErrorDetail());
  /* Misuse. */
  EXPECT(psHostRegister(ctx, NULL, n, 0), PS_ERROR_INVALID_VALUE, "psHostRegister");
  EXPECT(psHostRegister(ctx, backing, 0, 0), PS_ERROR_INVALID_VALUE, "psHostRegister");
  EXPECT(psHostRegister(ctx, backing, 8, 1), PS_ERROR_INVALID_VALUE, "psHostRegister");
  EXPECT(psHostRegister(NULL, backing, 8, 0), PS_ERROR_INVALID_CONTEXT, "psHostRegister");
  EXPECT(psHostFree(p), PS_ERROR_INVALID_HOST_POINTER, "psHostFree");
  CHECK(detail_has("psHostUnregister"), "%s", psGetLastErrorDetail());
  EXPECT(psHostUnregister(p + 1), PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "psHostUnregister");
  EXPECT(psHostUnregister(NULL), PS_ERROR_INVALID_VALUE, "psHostUnregister");
  EXPECT(psHostUnregister(p), PS_SUCCESS, "psHostUnregister");
  EXPECT(psHostUnregister(p), PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "psHostUnregister");
  CHECK(round_trip(p, n, 5), "the memory is still the caller's after psHostUnregister");

  /* A registration may not overlap psHostAlloc memory either. */
  void *a = NULL;
  EXPECT(psHostAlloc(ctx, 1u << 20, 0, &a), PS_SUCCESS, "psHostAlloc");
  EXPECT(psHostRegister(ctx, (char *)a + 4096, 4096, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "psHostRegister");
  CHECK(detail_has("allocated by psHostAlloc"), "%s", psGetLastErrorDetail());
  EXPECT(psHostFree(a), PS_SUCCESS, "psHostFree");
  free(backing);
}

#ifndef _WIN32
static void test_not_pinnable(void) {
  char path[] = "/var/tmp/pinstream-capi-XXXXXX";
  int fd = mkstemp(path);
  size_t n = 1u << 20;
  CHECK(fd >= 0 && ftruncate(fd, (off_t)n) == 0, "temporary file");
  void *ro = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  EXPECT(psHostRegister(ctx, ro, n, 0), PS_ERROR_NOT_PINNABLE, "psHostRegister");
  CHECK(detail_has("read-only mapping") && detail_has("MAP_PRIVATE") && detail_has("psHostAlloc"), "%s", psGetLastErrorDetail());
  void *priv = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  EXPECT(psHostRegister(ctx, priv, n, 0), PS_SUCCESS, "psHostRegister");
  EXPECT(psHostUnregister(priv), PS_SUCCESS, "psHostUnregister");
  munmap(ro, n);
  munmap(priv, n);
  close(fd);
  unlink(path);
  /* A hole: three pages with the middle one unmapped. */
  long page = sysconf(_SC_PAGESIZE);
  char *three = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(three + page, page);
  EXPECT(psHostRegister(ctx, three, 3 * page, 0), PS_ERROR_NOT_PINNABLE, "psHostRegister");
  CHECK(detail_has("not mapped memory"), "%s", psGetLastErrorDetail());
  munmap(three, page);
  munmap(three + 2 * page, page);
}
#endif

static void test_context_lifetime(void) {
  cl_int err;
  cl_context own = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  cl_uint before = refcount(own);
  void *p = NULL;
  EXPECT(psHostAlloc(own, 1u << 20, 0, &p), PS_SUCCESS, "psHostAlloc");
  /* The block's own reference, and on PoCL one per registration buffer (memory objects keep
   * their context alive too). */
  CHECK(refcount(own) > before, "a block holds the context: %u -> %u", before, refcount(own));
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
  CHECK(refcount(own) == before, "freed, every reference released: %u", refcount(own));
  /* The caller may release its context before freeing the block. */
  EXPECT(psHostAlloc(own, 1u << 20, 0, &p), PS_SUCCESS, "psHostAlloc");
  clReleaseContext(own);
  memset(p, 1, 1u << 20);
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
}

/* Threads: each allocates, registers, describes and frees its own memory many times; then all
 * race to register one shared range, and exactly one wins. */
enum { THREADS = 8, ROUNDS = 12 };
static unsigned char *shared_range;
static int wins[THREADS], thread_failures[THREADS];
static pthread_barrier_t barrier;

static void *worker(void *arg) {
  int id = (int)(size_t)arg, bad = 0;
  for (int r = 0; r < ROUNDS; r++) {
    void *p = NULL;
    size_t n = (size_t)(64 + id * 8 + r) << 10;
    bad += psHostAlloc(ctx, n, 0, &p) != PS_SUCCESS;
    unsigned char *mine = malloc(n + 7);
    bad += psHostRegister(ctx, mine + 7, n, 0) != PS_SUCCESS;
    psHostInfo info;
    bad += psHostGetInfo(p, &info) != PS_SUCCESS || info.bytes != n;
    bad += psHostFree((char *)p + 1) != PS_ERROR_INVALID_HOST_POINTER;
    bad += strstr(psGetLastErrorDetail(), "psHostFree: ") != psGetLastErrorDetail();
    bad += psHostUnregister(mine + 7) != PS_SUCCESS;
    bad += psHostFree(p) != PS_SUCCESS;
    free(mine);
  }
  for (int r = 0; r < ROUNDS; r++) {
    pthread_barrier_wait(&barrier);
    psError_t e = psHostRegister(ctx, shared_range, 1u << 20, 0);
    if (e == PS_SUCCESS) wins[id]++;
    else bad += e != PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    pthread_barrier_wait(&barrier);
    if (e == PS_SUCCESS) bad += psHostUnregister(shared_range) != PS_SUCCESS;
  }
  thread_failures[id] = bad;
  return NULL;
}

static void test_threads(void) {
  pthread_t t[THREADS];
  shared_range = malloc(1u << 20);
  pthread_barrier_init(&barrier, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(size_t)i);
  int total_wins = 0, bad = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    total_wins += wins[i];
    bad += thread_failures[i];
  }
  CHECK(bad == 0, "%d unexpected results across threads", bad);
  CHECK(total_wins == ROUNDS, "exactly one registration wins each round: %d wins in %d rounds", total_wins, ROUNDS);
  pthread_barrier_destroy(&barrier);
  free(shared_range);
}

/* Batched copies: BATCH pieces of odd sizes from unaligned malloc'd (pageable) memory to
 * disjoint unaligned device offsets and back, against a reference; the sources are
 * overwritten as soon as the call returns (they were packed); the refusals; the cache's
 * reference to the context released by psMemcpyBatchRelease. */
#define BATCH 300
static size_t batch_sizes[BATCH], batch_offsets[BATCH];

static size_t batch_layout(void) {
  size_t at = 5;
  for (int i = 0; i < BATCH; i++) {
    batch_sizes[i] = i % 7 == 0 ? 4096 : 1 + (size_t)(i * 2654435761u % 5000u);
    batch_offsets[(i * 7) % BATCH] = 0; /* filled below in a shuffled order */
  }
  for (int k = 0; k < BATCH; k++) {
    int i = (k * 7) % BATCH; /* 7 and 300 are coprime: a permutation */
    batch_offsets[i] = at;
    at += batch_sizes[i] + (size_t)(k % 13);
  }
  return at + 3;
}

static void batch_round_trip(cl_mem buf, size_t size, unsigned char *want) {
  unsigned char *host = malloc(3 * size + 64);
  const void *srcs[BATCH];
  for (size_t i = 0; i < 3 * size + 64; i++) host[i] = (unsigned char)(i * 131u + 7u);
  memset(want, 0, size);
  for (int i = 0; i < BATCH; i++) {
    srcs[i] = host + 1 + (size_t)i * 11; /* unaligned; pieces may share host bytes */
    memcpy(want + batch_offsets[i], srcs[i], batch_sizes[i]);
  }
  cl_event done = NULL;
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, batch_offsets, srcs, batch_sizes, BATCH, &done), PS_SUCCESS, "psMemcpyBatchHtoDAsync");
  memset(host, 0xee, 3 * size + 64); /* packed already: this must not reach the device */
  free(host);
  CHECK(done != NULL && clWaitForEvents(1, &done) == CL_SUCCESS, "the upload's event completes");
  if (done) clReleaseEvent(done);
  unsigned char *got = malloc(size);
  clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, size, got, 0, NULL, NULL);
  CHECK(memcmp(got, want, size) == 0, "device bytes match the reference after psMemcpyBatchHtoDAsync");
  void *dsts[BATCH];
  for (int i = 0; i < BATCH; i++) dsts[i] = calloc(1, batch_sizes[i] + 1);
  cl_event down = NULL;
  EXPECT(psMemcpyBatchDtoHAsync(queue, dsts, buf, batch_offsets, batch_sizes, BATCH, &down), PS_SUCCESS, "psMemcpyBatchDtoHAsync");
  /* Asynchronous: the pieces are the caller's again once the event completes. */
  CHECK(down != NULL && clWaitForEvents(1, &down) == CL_SUCCESS, "the download's event completes");
  if (down) clReleaseEvent(down);
  int bad = 0;
  for (int i = 0; i < BATCH; i++) {
    bad += memcmp(dsts[i], want + batch_offsets[i], batch_sizes[i]) != 0;
    bad += ((unsigned char *)dsts[i])[batch_sizes[i]] != 0; /* nothing written past a piece */
    free(dsts[i]);
  }
  CHECK(bad == 0, "%d pieces differ after psMemcpyBatchDtoHAsync", bad);
  free(got);
}

/* Any address that is not NULL, to see a refused call clear an out-parameter. */
static int err_sentinel;

static void batch_refusals(cl_mem buf, size_t size) {
  unsigned char src[64] = {1};
  const void *srcs[2] = {src, src};
  size_t offs[2] = {0, 100}, sizes[2] = {10, 10};
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, offs, srcs, sizes, 0, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  CHECK(detail_has("count is 0"), "%s", psGetLastErrorDetail());
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, offs, NULL, sizes, 2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  EXPECT(psMemcpyBatchHtoDAsync(NULL, buf, offs, srcs, sizes, 2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  EXPECT(psMemcpyBatchHtoDAsync(queue, NULL, offs, srcs, sizes, 2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  sizes[1] = 0;
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, offs, srcs, sizes, 2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  CHECK(detail_has("piece 1 is empty"), "%s", psGetLastErrorDetail());
  sizes[1] = (size_t)-1;
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, offs, srcs, sizes, 2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  CHECK(detail_has("more than any memory can hold"), "%s", psGetLastErrorDetail());
  sizes[1] = 10;
  offs[1] = size - 5;
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, offs, srcs, sizes, 2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  CHECK(detail_has("ends past"), "%s", psGetLastErrorDetail());
  offs[1] = 5;
  /* A refused call sets *event to NULL: a caller that releases it on every path is safe. */
  cl_event ev = (cl_event)&err_sentinel;
  EXPECT(psMemcpyBatchHtoDAsync(queue, buf, offs, srcs, sizes, 2, &ev), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsync");
  CHECK(detail_has("overlap"), "%s", psGetLastErrorDetail());
  CHECK(ev == NULL, "a refused psMemcpyBatchHtoDAsync leaves *event NULL");
  void *dsts[2] = {src, NULL};
  ev = (cl_event)&err_sentinel;
  EXPECT(psMemcpyBatchDtoHAsync(queue, dsts, buf, offs, sizes, 2, &ev), PS_ERROR_INVALID_VALUE, "psMemcpyBatchDtoHAsync");
  CHECK(detail_has("dsts[1] is NULL"), "%s", psGetLastErrorDetail());
  CHECK(ev == NULL, "a refused psMemcpyBatchDtoHAsync leaves *event NULL");
  cl_int err;
#ifdef _WIN32
  /* Wine's opencl.dll has OpenCL 1.x entry points only (see open_context). */
  cl_command_queue q2 = clCreateCommandQueue(ctx, device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
#else
  cl_queue_properties ooo[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, 0};
  cl_command_queue q2 = clCreateCommandQueueWithProperties(ctx, device, ooo, &err);
#endif
  if (err == CL_SUCCESS) {
    EXPECT(psMemcpyBatchHtoDAsync(q2, buf, offs, srcs, sizes, 1, NULL), PS_ERROR_NOT_SUPPORTED, "psMemcpyBatchHtoDAsync");
    CHECK(detail_has("in-order queue"), "%s", psGetLastErrorDetail());
    clReleaseCommandQueue(q2);
  }
  EXPECT(psMemcpyBatchRelease(NULL), PS_ERROR_INVALID_CONTEXT, "psMemcpyBatchRelease");
}

static void test_batch(void) {
  size_t size = batch_layout();
  cl_uint before = refcount(ctx);
  cl_int err;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, size, NULL, &err);
  unsigned char *want = malloc(size);
  unsigned char zero = 0;
  clEnqueueFillBuffer(queue, buf, &zero, 1, 0, size, 0, NULL, NULL);
  batch_round_trip(buf, size, want);
  batch_round_trip(buf, size, want); /* the cached staging, again */
  batch_refusals(buf, size);
  free(want);
  clReleaseMemObject(buf);
  CHECK(refcount(ctx) > before, "the cached staging holds the context");
  EXPECT(psMemcpyBatchRelease(ctx), PS_SUCCESS, "psMemcpyBatchRelease");
  cl_uint after = settled_refcount(ctx, before);
  CHECK(after == before, "released: %u references, %u before", after, before);
  EXPECT(psMemcpyBatchRelease(ctx), PS_SUCCESS, "psMemcpyBatchRelease");
}

/* Several threads upload disjoint pieces of one buffer through one context's cached staging. */
#define BATCH_THREADS 4
static cl_mem batch_shared;

static void *batch_worker(void *arg) {
  int t = (int)(size_t)arg;
  static const size_t n = 50, len = 777;
  unsigned char *src = malloc(n * len);
  const void *srcs[50];
  size_t offs[50], sizes[50];
  for (size_t i = 0; i < n; i++) {
    memset(src + i * len, t * 50 + (int)i + 1, len);
    srcs[i] = src + i * len;
    offs[i] = ((size_t)t * n + i) * len;
    sizes[i] = len;
  }
  cl_event done = NULL;
  psError_t e = psMemcpyBatchHtoDAsync(queue, batch_shared, offs, srcs, sizes, n, &done);
  free(src);
  if (e == PS_SUCCESS) {
    clWaitForEvents(1, &done);
    clReleaseEvent(done);
  }
  return (void *)(size_t)(e != PS_SUCCESS);
}

static void test_batch_threads(void) {
  size_t total = BATCH_THREADS * 50 * 777;
  cl_int err;
  batch_shared = clCreateBuffer(ctx, CL_MEM_READ_WRITE, total, NULL, &err);
  pthread_t th[BATCH_THREADS];
  for (size_t t = 0; t < BATCH_THREADS; t++) pthread_create(&th[t], NULL, batch_worker, (void *)t);
  int bad = 0;
  for (int t = 0; t < BATCH_THREADS; t++) {
    void *r;
    pthread_join(th[t], &r);
    bad += r != NULL;
  }
  unsigned char *got = malloc(total);
  clEnqueueReadBuffer(queue, batch_shared, CL_TRUE, 0, total, got, 0, NULL, NULL);
  for (size_t k = 0; k < total; k++) bad += got[k] != (unsigned char)(k / 777 + 1);
  CHECK(bad == 0, "%d failures or wrong bytes across threads", bad);
  free(got);
  clReleaseMemObject(batch_shared);
  EXPECT(psMemcpyBatchRelease(ctx), PS_SUCCESS, "psMemcpyBatchRelease");
}

static const char *bump_src =
    "__kernel void bump(__global uint *a, uint first) {\n"
    "  size_t i = first + get_global_id(0);\n"
    "  a[i] = a[i] * 2u + 1u;\n"
    "}\n";

/* Runs `bump` over `count` words of `buf` from word `first`, and waits for it. */
static int run_bump(cl_mem buf, cl_uint first, size_t count) {
  cl_int err;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &bump_src, NULL, &err);
  if (err != CL_SUCCESS) return 0;
  err = clBuildProgram(prog, 1, &device, "", NULL, NULL);
  cl_kernel k = err == CL_SUCCESS ? clCreateKernel(prog, "bump", &err) : NULL;
  if (k) {
    err |= clSetKernelArg(k, 0, sizeof buf, &buf);
    err |= clSetKernelArg(k, 1, sizeof first, &first);
    err |= clEnqueueNDRangeKernel(queue, k, 1, NULL, &count, NULL, 0, NULL, NULL);
    err |= clFinish(queue);
    clReleaseKernel(k);
  }
  clReleaseProgram(prog);
  return err == CL_SUCCESS;
}

/* Word i, first i, after `bump` ran `times` times over words 1000..6000. */
static cl_uint bumped(cl_uint i, int times) {
  cl_uint w = i;
  for (int t = 0; t < times && i >= 1000 && i < 6000; t++) w = w * 2u + 1u;
  return w;
}

/* Batched copies from and to mapped memory (the zero-copy path): 64 pieces of 100..163
 * bytes at interior pointers of a mapped block of 64 KiB, up to a device buffer and back into
 * the block's second half. */
static void test_mapped_batch(void) {
  enum { PIECES = 64 };
  unsigned char *mapped = NULL;
  EXPECT(psHostAlloc(ctx, 65536, PS_HOST_ALLOC_MAPPED, (void **)&mapped), PS_SUCCESS, "psHostAlloc");
  if (!mapped) return;
  for (int i = 0; i < 32768; i++) mapped[i] = (unsigned char)(i * 7 + 3);
  const void *srcs[PIECES];
  void *dsts[PIECES];
  size_t offs[PIECES], lens[PIECES];
  for (int i = 0; i < PIECES; i++) {
    srcs[i] = mapped + 300 * i;
    dsts[i] = mapped + 32768 + 300 * i;
    offs[i] = 256 * (size_t)i + 5;
    lens[i] = 100 + (size_t)i;
  }
  cl_int err;
  cl_mem dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, PIECES * 256 + 8, NULL, &err);
  cl_event ev = NULL;
  EXPECT(psMemcpyBatchHtoDAsync(queue, dev, offs, srcs, lens, PIECES, &ev), PS_SUCCESS, "psMemcpyBatchHtoDAsync");
  if (ev) clWaitForEvents(1, &ev), clReleaseEvent(ev), ev = NULL;
  unsigned char got[PIECES * 256 + 8];
  clEnqueueReadBuffer(queue, dev, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
  size_t bad = 0;
  for (int i = 0; i < PIECES; i++) bad += memcmp(got + offs[i], srcs[i], lens[i]) != 0;
  CHECK(bad == 0, "%zu pieces wrong on the device", bad);
  memset(mapped + 32768, 0, 32768);
  EXPECT(psMemcpyBatchDtoHAsync(queue, dsts, dev, offs, lens, PIECES, &ev), PS_SUCCESS, "psMemcpyBatchDtoHAsync");
  if (ev) clWaitForEvents(1, &ev), clReleaseEvent(ev);
  bad = 0;
  for (int i = 0; i < PIECES; i++) bad += memcmp(dsts[i], srcs[i], lens[i]) != 0;
  CHECK(bad == 0, "%zu pieces wrong in mapped memory", bad);
  clReleaseMemObject(dev);
  EXPECT(psHostFree(mapped), PS_SUCCESS, "psHostFree");
}

static void test_mapped_misuse(void *mapped) {
  cl_mem buf = (cl_mem)1;
  size_t off = 1;
  EXPECT(psHostGetDeviceBuffer(mapped, NULL, &off), PS_ERROR_INVALID_VALUE, "psHostGetDeviceBuffer");
  EXPECT(psHostGetDeviceBuffer(mapped, &buf, NULL), PS_ERROR_INVALID_VALUE, "psHostGetDeviceBuffer");
  EXPECT(psHostGetDeviceBuffer(NULL, &buf, &off), PS_ERROR_INVALID_VALUE, "psHostGetDeviceBuffer");
  CHECK(buf == NULL && off == 0, "outputs cleared on failure: %p %zu", (void *)buf, off);
  int local = 0;
  EXPECT(psHostGetDeviceBuffer(&local, &buf, &off), PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "psHostGetDeviceBuffer");
  void *plain = NULL;
  EXPECT(psHostAlloc(ctx, 4096, PS_HOST_ALLOC_DEFAULT, &plain), PS_SUCCESS, "psHostAlloc");
  EXPECT(psHostGetDeviceBuffer(plain, &buf, &off), PS_ERROR_NOT_MAPPED, "psHostGetDeviceBuffer");
  CHECK(detail_has("PS_HOST_ALLOC_MAPPED") && detail_has("VRAM"), "%s", psGetLastErrorDetail());
  psHostInfo info;
  EXPECT(psHostGetInfo(plain, &info), PS_SUCCESS, "psHostGetInfo");
  CHECK(info.mapped == 0 && info.zero_copy[0] == 0, "mapped %d", info.mapped);
  EXPECT(psHostFree(plain), PS_SUCCESS, "psHostFree");
  char *mine = malloc(8192);
  EXPECT(psHostRegister(ctx, mine, 8192, PS_HOST_REGISTER_DEFAULT), PS_SUCCESS, "psHostRegister");
  EXPECT(psHostGetDeviceBuffer(mine + 10, &buf, &off), PS_ERROR_NOT_MAPPED, "psHostGetDeviceBuffer");
  EXPECT(psHostUnregister(mine), PS_SUCCESS, "psHostUnregister");
  free(mine);
  void *p = (void *)1;
  EXPECT(psHostAlloc(ctx, 4096, PS_HOST_ALLOC_MAPPED | PS_STRATEGY_REGISTER, &p), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  CHECK(p == NULL && detail_has("PS_HOST_ALLOC_MAPPED alone"), "%s", psGetLastErrorDetail());
  EXPECT(psHostAlloc(ctx, 4096, 0x200, &p), PS_ERROR_INVALID_VALUE, "psHostAlloc");
  cl_ulong max_alloc = 0;
  clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  EXPECT(psHostAlloc(ctx, (size_t)max_alloc + 1, PS_HOST_ALLOC_MAPPED, &p), PS_ERROR_STRATEGY_UNAVAILABLE, "psHostAlloc");
  CHECK(p == NULL && detail_has("CL_DEVICE_MAX_MEM_ALLOC_SIZE") && detail_has("once per part"), "%s", psGetLastErrorDetail());
}

/* Mapped memory: a kernel reads and writes it in place through psHostGetDeviceBuffer's
 * buffer, from its start and from an interior pointer; the buffer keeps the memory alive after
 * psHostFree; every misuse is refused. */
static void test_mapped(void) {
  const size_t words = 1 << 14, n = words * sizeof(cl_uint);
  cl_uint *p = NULL;
  psError_t e = psHostAlloc(ctx, n, PS_HOST_ALLOC_MAPPED, (void **)&p);
  if (!device_is_cpu && !device_has_nv_create_buffer && e == PS_ERROR_STRATEGY_UNAVAILABLE) {
    CHECK(detail_has("no zero-copy mechanism"), "%s", psGetLastErrorDetail());
    return;
  }
  EXPECT(e, PS_SUCCESS, "psHostAlloc");
  if (!p) return;
  psHostInfo info;
  EXPECT(psHostGetInfo(p + 7, &info), PS_SUCCESS, "psHostGetInfo");
  const char *want = device_is_cpu ? "cpu-heap" : "nv-host";
  CHECK(info.mapped == 1 && strcmp(info.zero_copy, want) == 0, "mapped %d by %s", info.mapped, info.zero_copy);
  for (cl_uint i = 0; i < words; i++) p[i] = i;
  cl_mem buf = NULL, inner = NULL;
  size_t off = 1, inner_off = 0;
  EXPECT(psHostGetDeviceBuffer(p, &buf, &off), PS_SUCCESS, "psHostGetDeviceBuffer");
  EXPECT(psHostGetDeviceBuffer((char *)p + 4001, &inner, &inner_off), PS_SUCCESS, "psHostGetDeviceBuffer");
  CHECK(buf != NULL && buf == inner && off == 0 && inner_off == 4001, "%p %p %zu %zu", (void *)buf, (void *)inner, off, inner_off);
  if (inner) clReleaseMemObject(inner);
  CHECK(buf && run_bump(buf, 1000, 5000), "the kernel ran on the mapped buffer");
  size_t bad = 0;
  for (cl_uint i = 0; i < words; i++) bad += p[i] != bumped(i, 1);
  CHECK(bad == 0, "%zu words not bumped in place", bad);
  test_mapped_batch();
  test_mapped_misuse(p);
  EXPECT(psHostFree(p), PS_SUCCESS, "psHostFree");
  cl_mem stale = (cl_mem)1;
  EXPECT(psHostGetDeviceBuffer(p, &stale, &off), PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "psHostGetDeviceBuffer");
  /* The buffer still holds the memory: bump again and read it back. */
  CHECK(buf && run_bump(buf, 1000, 5000), "the kernel ran after psHostFree");
  cl_uint *back = calloc(words, sizeof *back);
  if (buf) clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, n, back, 0, NULL, NULL);
  bad = 0;
  for (cl_uint i = 0; i < words; i++) bad += back[i] != bumped(i, 2);
  CHECK(bad == 0, "%zu words wrong after psHostFree", bad);
  free(back);
  if (buf) clReleaseMemObject(buf);
}

/* A failing call from an atexit handler, after this thread's locals are gone: a code, never an
 * abort (the detail has nowhere to live then). */
static void failing_call_at_exit(void) {
  psError_t e = psHostFree((void *)0x1234);
  if (e != PS_ERROR_INVALID_HOST_POINTER) {
    fprintf(stderr, "at exit: psHostFree gave %d\n", (int)e);
    _exit(3);
  }
}

/* PS_BATCH_DISJOINT: the caller vouches that written ranges are disjoint, so overlapping
 * ones are no longer refused (their bytes unspecified, nothing outside them written), while
 * every bound is still checked and unknown flags are refused. Staged (pageable sources) and
 * zero-copy (pieces in a mapped block) alike. */
static void test_batch_disjoint(void) {
  enum { N = 64, LEN = 100 };
  cl_int err;
  cl_mem dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 8192, NULL, &err);
  unsigned char *mapped = NULL, src[N * LEN], got[8192];
  EXPECT(psHostAlloc(ctx, 65536, PS_HOST_ALLOC_MAPPED, (void **)&mapped), PS_SUCCESS, "psHostAlloc");
  if (!mapped || err != CL_SUCCESS) return;
  const void *srcs[N];
  void *dsts[N];
  size_t offs[N], sizes[N];
  for (int i = 0; i < N; i++) { /* shuffled device offsets: the unordered check's path */
    srcs[i] = src + LEN * i;
    dsts[i] = mapped + 128 * ((i * 37) % N);
    offs[i] = 128 * (size_t)((i * 29) % N);
    sizes[i] = LEN;
  }
  for (int i = 0; i < N * LEN; i++) src[i] = (unsigned char)(i * 13 + 1);
  cl_event ev = NULL;
  EXPECT(psMemcpyBatchHtoDAsyncWithFlags(queue, dev, offs, srcs, sizes, N, PS_BATCH_DISJOINT, &ev), PS_SUCCESS, "psMemcpyBatchHtoDAsyncWithFlags");
  if (ev) clWaitForEvents(1, &ev), clReleaseEvent(ev), ev = NULL;
  clEnqueueReadBuffer(queue, dev, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += memcmp(got + offs[i], srcs[i], LEN) != 0;
  CHECK(bad == 0, "%d pieces wrong on the device after a vouched upload", bad);
  memset(mapped, 0x5a, 65536);
  EXPECT(psMemcpyBatchDtoHAsyncWithFlags(queue, dsts, dev, offs, sizes, N, PS_BATCH_DISJOINT, &ev), PS_SUCCESS, "psMemcpyBatchDtoHAsyncWithFlags");
  if (ev) clWaitForEvents(1, &ev), clReleaseEvent(ev), ev = NULL;
  bad = 0;
  for (int i = 0; i < N; i++) bad += memcmp(dsts[i], got + offs[i], LEN) != 0 || mapped[128 * i + LEN] != 0x5a;
  CHECK(bad == 0, "%d pieces wrong in mapped memory after a vouched download", bad);
  /* Overlapping written ranges: refused when checked, taken when vouched, nothing outside. */
  offs[1] = offs[0] + 20;
  EXPECT(psMemcpyBatchHtoDAsyncWithFlags(queue, dev, offs, srcs, sizes, N, 0, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsyncWithFlags");
  CHECK(detail_has("overlap"), "%s", psGetLastErrorDetail());
  EXPECT(psMemcpyBatchHtoDAsyncWithFlags(queue, dev, offs, srcs, sizes, N, PS_BATCH_DISJOINT, NULL), PS_SUCCESS, "psMemcpyBatchHtoDAsyncWithFlags");
  dsts[1] = (unsigned char *)dsts[0] + 20; /* inside piece 0's slot: 20..120 of 0..128 */
  EXPECT(psMemcpyBatchDtoHAsync(queue, dsts, dev, offs, sizes, N, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchDtoHAsync");
  CHECK(detail_has("overlap"), "%s", psGetLastErrorDetail());
  memset(mapped, 0x5a, 65536);
  EXPECT(psMemcpyBatchDtoHAsyncWithFlags(queue, dsts, dev, offs, sizes, N, PS_BATCH_DISJOINT, &ev), PS_SUCCESS, "psMemcpyBatchDtoHAsyncWithFlags");
  if (ev) clWaitForEvents(1, &ev), clReleaseEvent(ev), ev = NULL;
  unsigned char *after = (unsigned char *)dsts[1] + LEN;
  CHECK(after[0] == 0x5a && mapped[128 * N] == 0x5a, "bytes past the overlapping pieces untouched");
  /* Bounds are still checked when vouched; unknown flags are refused. */
  offs[1] = 8192 - 10;
  EXPECT(psMemcpyBatchHtoDAsyncWithFlags(queue, dev, offs, srcs, sizes, N, PS_BATCH_DISJOINT, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsyncWithFlags");
  CHECK(detail_has("ends past"), "%s", psGetLastErrorDetail());
  EXPECT(psMemcpyBatchDtoHAsyncWithFlags(queue, dsts, dev, offs, sizes, N, PS_BATCH_DISJOINT, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchDtoHAsyncWithFlags");
  CHECK(detail_has("ends past"), "%s", psGetLastErrorDetail());
  offs[1] = 128;
  EXPECT(psMemcpyBatchHtoDAsyncWithFlags(queue, dev, offs, srcs, sizes, N, 0x2, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchHtoDAsyncWithFlags");
  CHECK(detail_has("PS_BATCH_DISJOINT"), "%s", psGetLastErrorDetail());
  EXPECT(psMemcpyBatchDtoHAsyncWithFlags(queue, dsts, dev, offs, sizes, N, 0x3, NULL), PS_ERROR_INVALID_VALUE, "psMemcpyBatchDtoHAsyncWithFlags");
  clFinish(queue);
  clReleaseMemObject(dev);
  EXPECT(psHostFree(mapped), PS_SUCCESS, "psHostFree");
}

#include "test_stream.inc.c"

int main(void) {
  atexit(failing_call_at_exit);
  open_context();
  read_device_kind();
  test_error_strings();
  test_alloc();
  test_strategy_env();
  test_register();
#ifdef _WIN32
  printf("test_not_pinnable: not built on Windows (unix mappings: mmap, MAP_SHARED)\n");
#else
  test_not_pinnable();
#endif
  test_context_lifetime();
  test_threads();
  test_batch();
  test_batch_threads();
  test_mapped();
  test_batch_disjoint();
  test_stream();
  clReleaseCommandQueue(queue);
  clReleaseContext(ctx);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
