/* psVkHostRegister streaming, as a Vulkan program does it (issue 24: "psVkHostRegister of
 * 10 GiB streams at the same speed as the CLI"). The program makes its own VkInstance and
 * VkDevice (VK_EXT_external_memory_host enabled), mallocs TOTAL bytes, registers them with
 * psVkHostRegister (timed), and copies them to device buffers and back with vkCmdCopyBuffer
 * in blocks of BLOCK over the chunks psVkHostGetChunks gives (a block that crosses two chunks
 * is two copy regions), on up to two queues of the transfer-only family where the device has
 * one (NVIDIA's copy engines, where pinstream's CLI copies by default), else of the first
 * family with compute, two blocks in flight per queue. Each pass is timed by the wall clock:
 *
 *   H2D   every block to a device buffer
 *   D2H   every block from a device buffer
 *   both  every block up on one queue while another block comes down on the other (two
 *         queues only; the bytes are overwritten, and refilled before the check)
 *
 * median of --repeat passes each, in GB/s (10^9 bytes/s) of TOTAL. Then the check: each block
 * up, the host block zeroed, the block back down, every byte compared with the pattern.
 * Compare with `pinstream bench --api vulkan` at the same block size (scripts/gpu-vulkan.sh).
 *
 * With --engine KERNEL.wgsl, the loop is pinstream's engine instead (psVkStreamCreate on the
 * program's GPU, psVkStreamSetKernel, psStreamSetInPlace over the registered range, psStreamRun):
 * the kernel's entry `seed` (examples/seed.wgsl: d[i] = d[i] * 2654435761 + 12345 over uint32)
 * in place through a --budget of device memory, --repeat runs of --passes passes each, every
 * word then checked against the CPU. It prints each run's combined GB/s (the report's: bytes up
 * and down over the device time), and the first run's wall time, which includes importing the
 * range into the stream's own device. Compare with `pinstream run --api vulkan --kernel
 * examples/seed.wgsl --entry seed --synthetic SIZE --dtype u32 --residency off`.
 *
 *   vk_stream [--total SIZE] [--block SIZE] [--repeat N] [--queues 1|2] [--max-chunk SIZE]
 *             [--engine KERNEL.wgsl [--budget SIZE] [--passes N]]
 *   SIZE: bytes, or with KiB, MiB, GiB (default --total 1GiB --block 256MiB --repeat 3)
 *   --max-chunk sets PINSTREAM_MAX_CHUNK (chunks below maxMemoryAllocationSize), so that a
 *   small range has blocks crossing chunks as a range above 4 GiB does.
 *
 * It loads the Vulkan loader itself (dlopen libvulkan.so.1, as volk does), so it needs only the
 * headers to build (libvulkan-dev), and takes the first discrete GPU, else the first device.
 * Exit code: 0 when every byte came back, 1 when some did not, 2 when Vulkan or pinstream
 * failed (the message says which call). */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300 /* pinstream.h includes CL/cl.h */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h> /* before pinstream.h: it declares the psVk calls */
#include <pinstream.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VK(call)                                                                    \
  do {                                                                              \
    VkResult r_ = (call);                                                           \
    if (r_ != VK_SUCCESS) {                                                         \
      fprintf(stderr, "vk_stream: %s failed: VkResult %d\n", #call, r_);            \
      exit(2);                                                                      \
    }                                                                               \
  } while (0)

#define PS(call)                                                                    \
  do {                                                                              \
    psError_t e_ = (call);                                                          \
    if (e_ != PS_SUCCESS) {                                                         \
      fprintf(stderr, "vk_stream: %s failed: %s (%s)\n", #call, psGetErrorString(e_), \
              psGetLastErrorDetail());                                              \
      exit(2);                                                                      \
    }                                                                               \
  } while (0)

/* The Vulkan functions this program calls, loaded through vkGetInstanceProcAddr. */
#define FUNCTIONS(X)                        \
  X(vkAllocateCommandBuffers)               \
  X(vkAllocateMemory)                       \
  X(vkBeginCommandBuffer)                   \
  X(vkBindBufferMemory)                     \
  X(vkCmdCopyBuffer)                        \
  X(vkCmdPipelineBarrier)                   \
  X(vkCreateBuffer)                         \
  X(vkCreateCommandPool)                    \
  X(vkCreateDevice)                         \
  X(vkCreateFence)                          \
  X(vkDestroyBuffer)                        \
  X(vkDestroyCommandPool)                   \
  X(vkDestroyDevice)                        \
  X(vkDestroyFence)                         \
  X(vkDestroyInstance)                      \
  X(vkEndCommandBuffer)                     \
  X(vkEnumeratePhysicalDevices)             \
  X(vkFreeMemory)                           \
  X(vkGetBufferMemoryRequirements)          \
  X(vkGetDeviceQueue)                       \
  X(vkGetPhysicalDeviceMemoryProperties)    \
  X(vkGetPhysicalDeviceProperties)          \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkQueueSubmit)                          \
  X(vkResetFences)                          \
  X(vkWaitForFences)
#define DECLARE(f) static PFN_##f f;
FUNCTIONS(DECLARE)
static PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
static PFN_vkCreateInstance vkCreateInstance;
static void *loader;

#define SLOTS_PER_QUEUE 2
#define MAX_SLOTS (2 * SLOTS_PER_QUEUE)

/* One block in flight: its command buffer, fence, queue and device buffer. */
struct slot {
  VkCommandBuffer cmd;
  VkFence fence;
  VkQueue queue;
  VkBuffer buffer;
  VkDeviceMemory memory;
  int busy;
};

struct gpu {
  VkInstance instance;
  VkPhysicalDevice physical;
  VkDevice dev;
  VkCommandPool pool;
  uint32_t family, queues;
  struct slot slots[MAX_SLOTS];
  int nslots;
};

static void *load(VkInstance inst, const char *name) {
  void *f = (void *)vkGetInstanceProcAddr(inst, name);
  if (!f) {
    fprintf(stderr, "vk_stream: vkGetInstanceProcAddr gave no %s\n", name);
    exit(2);
  }
  return f;
}

#define LOAD(f) *(void **)&f = load(g->instance, #f);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* "256MiB", "1GiB", "4096": bytes; 0 for anything else. */
static size_t parse_size(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (strcmp(end, "KiB") == 0) return (size_t)v << 10;
  if (strcmp(end, "MiB") == 0) return (size_t)v << 20;
  if (strcmp(end, "GiB") == 0) return (size_t)v << 30;
  return *end ? 0 : (size_t)v;
}

static void open_instance(struct gpu *g) {
  loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!loader) {
    fprintf(stderr, "vk_stream: no Vulkan loader (%s): apt-get install libvulkan1\n", dlerror());
    exit(2);
  }
  *(void **)&vkGetInstanceProcAddr = dlsym(loader, "vkGetInstanceProcAddr");
  *(void **)&vkCreateInstance = load(NULL, "vkCreateInstance");
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "vk_stream";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  VK(vkCreateInstance(&info, NULL, &g->instance));
  FUNCTIONS(LOAD)
}

/* The first discrete GPU, else the first device; prints its name. */
static void pick_device(struct gpu *g) {
  VkPhysicalDevice all[16];
  uint32_t n = 16;
  VkResult r = vkEnumeratePhysicalDevices(g->instance, &n, all);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
    fprintf(stderr, "vk_stream: no Vulkan device (lavapipe: apt-get install mesa-vulkan-drivers)\n");
    exit(2);
  }
  g->physical = all[0];
  for (uint32_t i = 0; i < n; i++) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(all[i], &p);
    if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
      g->physical = all[i];
      break;
    }
  }
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(g->physical, &p);
  printf("vk_stream: device \"%s\"\n", p.deviceName);
}

/* A device with up to `want` queues of the transfer-only family where there is one, else of the
 * first family with compute (which copies too), and VK_EXT_external_memory_host, which
 * psVkHostRegister needs. The first session on the H200 copied on the universal family at
 * 38 / 28 GB/s against the CLI's transfer family's 49 / 51. */
static void make_device(struct gpu *g, uint32_t want) {
  VkQueueFamilyProperties props[16];
  uint32_t n = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(g->physical, &n, props);
  g->family = UINT32_MAX;
  const VkQueueFlags others = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
  for (uint32_t i = 0; i < n && g->family == UINT32_MAX; i++)
    if ((props[i].queueFlags & VK_QUEUE_TRANSFER_BIT) && !(props[i].queueFlags & others))
      g->family = i;
  for (uint32_t i = 0; i < n && g->family == UINT32_MAX; i++)
    if (props[i].queueFlags & VK_QUEUE_COMPUTE_BIT) g->family = i;
  if (g->family == UINT32_MAX) {
    fprintf(stderr, "vk_stream: the device has no compute queue family\n");
    exit(2);
  }
  g->queues = props[g->family].queueCount < want ? props[g->family].queueCount : want;
  float priorities[2] = {1.0f, 1.0f};
  VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  q.queueFamilyIndex = g->family;
  q.queueCount = g->queues;
  q.pQueuePriorities = priorities;
  const char *ext = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
  VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &q;
  info.enabledExtensionCount = 1;
  info.ppEnabledExtensionNames = &ext;
  VK(vkCreateDevice(g->physical, &info, NULL, &g->dev));
  printf("vk_stream: %u queue(s) of family %u\n", g->queues, g->family);
}

/* A device-local buffer of `bytes` for slot `s`. */
static void slot_buffer(struct gpu *g, struct slot *s, VkDeviceSize bytes) {
  VkBufferCreateInfo b = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  b.size = bytes;
  b.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VK(vkCreateBuffer(g->dev, &b, NULL, &s->buffer));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(g->dev, s->buffer, &req);
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(g->physical, &mp);
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < mp.memoryTypeCount && type == UINT32_MAX; i++)
    if ((req.memoryTypeBits & (1u << i)) &&
        (mp.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
      type = i;
  VkMemoryAllocateInfo a = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  a.allocationSize = req.size;
  a.memoryTypeIndex = type == UINT32_MAX ? 0 : type;
  VK(vkAllocateMemory(g->dev, &a, NULL, &s->memory));
  VK(vkBindBufferMemory(g->dev, s->buffer, s->memory, 0));
}

/* Two slots per queue, each with a device buffer of `block` bytes. */
static void open_slots(struct gpu *g, VkDeviceSize block) {
  VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool.queueFamilyIndex = g->family;
  VK(vkCreateCommandPool(g->dev, &pool, NULL, &g->pool));
  g->nslots = (int)g->queues * SLOTS_PER_QUEUE;
  for (int i = 0; i < g->nslots; i++) {
    struct slot *s = &g->slots[i];
    VkCommandBufferAllocateInfo cb = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cb.commandPool = g->pool;
    cb.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cb.commandBufferCount = 1;
    VK(vkAllocateCommandBuffers(g->dev, &cb, &s->cmd));
    VkFenceCreateInfo f = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK(vkCreateFence(g->dev, &f, NULL, &s->fence));
    vkGetDeviceQueue(g->dev, g->family, (uint32_t)i % g->queues, &s->queue);
    slot_buffer(g, s, block);
    s->busy = 0;
  }
}

static void close_gpu(struct gpu *g) {
  for (int i = 0; i < g->nslots; i++) {
    vkDestroyBuffer(g->dev, g->slots[i].buffer, NULL);
    vkFreeMemory(g->dev, g->slots[i].memory, NULL);
    vkDestroyFence(g->dev, g->slots[i].fence, NULL);
  }
  vkDestroyCommandPool(g->dev, g->pool, NULL);
  vkDestroyDevice(g->dev, NULL);
  vkDestroyInstance(g->instance, NULL);
  dlclose(loader);
}

/* Waits for slot `s`'s submission, if any, and readies it for recording. */
static void acquire(struct gpu *g, struct slot *s) {
  if (s->busy) {
    VK(vkWaitForFences(g->dev, 1, &s->fence, VK_TRUE, UINT64_MAX));
    VK(vkResetFences(g->dev, 1, &s->fence));
    s->busy = 0;
  }
  VkCommandBufferBeginInfo b = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  b.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VK(vkBeginCommandBuffer(s->cmd, &b));
}

/* Ends slot `s`'s recording with a barrier (copies visible to the host and to later
 * copies) and submits it. */
static void submit(struct slot *s) {
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(s->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                       NULL, 0, NULL);
  VK(vkEndCommandBuffer(s->cmd));
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &s->cmd;
  VK(vkQueueSubmit(s->queue, 1, &si, s->fence));
  s->busy = 1;
}

static void drain(struct gpu *g) {
  for (int i = 0; i < g->nslots; i++) {
    struct slot *s = &g->slots[i];
    if (!s->busy) continue;
    VK(vkWaitForFences(g->dev, 1, &s->fence, VK_TRUE, UINT64_MAX));
    VK(vkResetFences(g->dev, 1, &s->fence));
    s->busy = 0;
  }
}

/* The registered range: its chunks. */
struct range {
  psVkChunk *chunks;
  size_t count;
};

/* Records copies of the range's bytes [at, at + n) to (up) or from the slot buffer's [0, n),
 * one region per chunk it crosses. */
static void record(struct slot *s, const struct range *r, size_t at, size_t n, int up) {
  for (size_t i = 0; i < r->count; i++) {
    const psVkChunk *c = &r->chunks[i];
    size_t lo = c->offset > at ? c->offset : at;
    size_t end = c->offset + c->size;
    size_t hi = end < at + n ? end : at + n;
    if (lo >= hi) continue;
    VkDeviceSize host = c->buffer_offset + (lo - c->offset);
    VkBufferCopy copy = {.srcOffset = up ? host : lo - at, .dstOffset = up ? lo - at : host,
                         .size = hi - lo};
    if (up)
      vkCmdCopyBuffer(s->cmd, c->buffer, s->buffer, 1, &copy);
    else
      vkCmdCopyBuffer(s->cmd, s->buffer, c->buffer, 1, &copy);
  }
}

/* One timed pass over every block: up (1), down (0), or both (2: block k up on the even
 * slots while block k comes down from the odd ones, on the other queue); seconds. */
static double pass(struct gpu *g, const struct range *r, size_t total, size_t block, int way) {
  double t0 = now();
  int next = 0;
  for (size_t at = 0; at < total; at += block) {
    size_t n = total - at < block ? total - at : block;
    int ways = way == 2 ? 2 : 1;
    for (int w = 0; w < ways; w++) {
      struct slot *s = &g->slots[next];
      next = (next + 1) % g->nslots;
      acquire(g, s);
      record(s, r, at, n, way == 2 ? w == 0 : way);
      submit(s);
    }
  }
  drain(g);
  return now() - t0;
}

static uint64_t pattern(size_t i) { return (uint64_t)i * 0x9e3779b97f4a7c15ull ^ (i >> 7); }

static void fill(char *mem, size_t total) {
  uint64_t *w = (uint64_t *)mem;
  for (size_t i = 0; i < total / 8; i++) w[i] = pattern(i);
  for (size_t i = total / 8 * 8; i < total; i++) mem[i] = (char)i;
}

/* Each block up, the host block zeroed, the block back down; the bytes that differ from the
 * pattern afterwards. */
static size_t check(struct gpu *g, const struct range *r, char *mem, size_t total, size_t block) {
  struct slot *s = &g->slots[0];
  for (size_t at = 0; at < total; at += block) {
    size_t n = total - at < block ? total - at : block;
    acquire(g, s);
    record(s, r, at, n, 1);
    submit(s);
    drain(g);
    memset(mem + at, 0, n);
    acquire(g, s);
    record(s, r, at, n, 0);
    submit(s);
    drain(g);
  }
  size_t bad = 0;
  const uint64_t *w = (const uint64_t *)mem;
  for (size_t i = 0; i < total / 8; i++) bad += w[i] != pattern(i);
  for (size_t i = total / 8 * 8; i < total; i++) bad += mem[i] != (char)i;
  return bad;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* GB/s of `total` bytes in the median of `secs`. */
static double median_gbps(double *secs, int n, size_t total) {
  qsort(secs, (size_t)n, sizeof *secs, by_value);
  return (double)total / secs[n / 2] * 1e-9;
}

static uint32_t seed_step(uint32_t x) { return x * 2654435761u + 12345u; }

/* The file at `path`, NUL-terminated (exits 2 if it cannot be read). */
static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "vk_stream: cannot open %s: pass the WGSL kernel (examples/seed.wgsl)\n", path);
    exit(2);
  }
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  char *text = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
  if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "vk_stream: cannot read %s\n", path);
    exit(2);
  }
  text[n] = 0;
  fclose(f);
  return text;
}

/* The engine over the registered `mem`: `repeat` runs of `passes` passes of the seed's kernel
 * in place, then every word checked; the words that differ. */
static size_t engine(struct gpu *g, uint32_t *mem, size_t total, size_t block, size_t budget,
                     int repeat, int passes, const char *kernel) {
  size_t words = total / 4;
  for (size_t i = 0; i < words; i++) mem[i] = (uint32_t)pattern(i);
  char *source = read_file(kernel);
  psStream_t s;
  PS(psVkStreamCreate(&s, g->instance, g->physical, vkGetInstanceProcAddr, budget, block));
  PS(psVkStreamSetKernel(s, source, "seed"));
  free(source);
  PS(psStreamSetInPlace(s, mem, total));
  PS(psStreamSetTypes(s, PS_DTYPE_U32, PS_DTYPE_U32));
  for (int k = 0; k < repeat; k++) {
    psStreamReport r;
    double t0 = now();
    PS(psStreamRun(s, (unsigned)passes, PS_RESIDENCY_OFF, &r));
    printf("vk_stream: engine run %d: %d pass(es), combined %.2f GB/s, device %.3f s, wall %.3f s%s\n",
           k + 1, passes, r.combined_gbps, r.device_wall_s, now() - t0,
           k == 0 ? " (the range imported into the stream's device first)" : "");
  }
  PS(psStreamDestroy(s));
  /* The step is affine (mod 2^32): k steps are one, x * a + b. */
  uint32_t a = 1, b = 0;
  for (int k = 0; k < repeat * passes; k++) {
    a = a * 2654435761u;
    b = seed_step(b);
  }
  size_t bad = 0;
  for (size_t i = 0; i < words; i++) bad += mem[i] != (uint32_t)pattern(i) * a + b;
  printf("vk_stream: engine check: %s (%zu of %zu words differ)\n", bad ? "FAIL" : "PASS", bad,
         words);
  return bad;
}

/* The program's own loop over the range: --repeat timed passes of each way, then the check;
 * the words that differ. */
static size_t copies(struct gpu *g, const struct range *r, char *mem, size_t total, size_t block,
                     int repeat) {
  double up[99], down[99], both[99];
  for (int k = 0; k < repeat; k++) {
    up[k] = pass(g, r, total, block, 1);
    down[k] = pass(g, r, total, block, 0);
    both[k] = g->queues > 1 ? pass(g, r, total, block, 2) : 0;
  }
  printf("vk_stream: blocks of %zu bytes: H2D %.2f GB/s, D2H %.2f GB/s", block,
         median_gbps(up, repeat, total), median_gbps(down, repeat, total));
  if (g->queues > 1) printf(", both %.2f GB/s", median_gbps(both, repeat, 2 * total));
  printf(" (median of %d passes)\n", repeat);
  fill(mem, total);
  size_t bad = check(g, r, mem, total, block);
  printf("vk_stream: check: %s (%zu of %zu words differ)\n", bad ? "FAIL" : "PASS", bad,
         total / 8);
  return bad;
}

int main(int argc, char **argv) {
  size_t total = (size_t)1 << 30, block = (size_t)256 << 20;
  int repeat = 3, queues = 2, passes = 1;
  size_t budget = (size_t)4 << 30;
  const char *kernel = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--total") == 0) total = parse_size(argv[i + 1]);
    else if (strcmp(argv[i], "--block") == 0) block = parse_size(argv[i + 1]);
    else if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--queues") == 0) queues = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--max-chunk") == 0) setenv("PINSTREAM_MAX_CHUNK", argv[i + 1], 1);
    else if (strcmp(argv[i], "--engine") == 0) kernel = argv[i + 1];
    else if (strcmp(argv[i], "--budget") == 0) budget = parse_size(argv[i + 1]);
    else if (strcmp(argv[i], "--passes") == 0) passes = atoi(argv[i + 1]);
    else total = 0;
  }
  if (argc % 2 == 0 || total == 0 || block == 0 || repeat < 1 || repeat > 99 || queues < 1 ||
      queues > 2 || budget == 0 || passes < 1 || (kernel && total % 4)) {
    fprintf(stderr, "usage: vk_stream [--total SIZE] [--block SIZE] [--repeat 1..99] [--queues 1|2] [--max-chunk SIZE]\n"
                    "                 [--engine KERNEL.wgsl [--budget SIZE] [--passes N]]\n"
                    "  SIZE: bytes, or with KiB, MiB, GiB (e.g. --total 10GiB --block 256MiB);\n"
                    "  with --engine, --total a multiple of 4 (uint32 words)\n");
    return 2;
  }
  if (block > total) block = total;
  struct gpu g = {0};
  open_instance(&g);
  pick_device(&g);
  make_device(&g, (uint32_t)queues);
  if (!kernel) open_slots(&g, block);
  char *mem = malloc(total);
  if (!mem) {
    fprintf(stderr, "vk_stream: malloc of %zu bytes failed: pass a smaller --total\n", total);
    return 2;
  }
  fill(mem, total);
  double t0 = now();
  PS(psVkHostRegister(g.instance, g.physical, g.dev, vkGetInstanceProcAddr, mem, total, 0));
  double reg = now() - t0;
  struct range r = {NULL, 0};
  PS(psVkHostGetChunks(mem, NULL, 0, &r.count));
  r.chunks = calloc(r.count, sizeof *r.chunks);
  PS(psVkHostGetChunks(mem, r.chunks, r.count, &r.count));
  printf("vk_stream: registered %zu bytes of malloc memory in %.3f s: %zu chunk(s)\n", total, reg,
         r.count);
  size_t bad = kernel ? engine(&g, (uint32_t *)mem, total, block, budget, repeat, passes, kernel)
                      : copies(&g, &r, mem, total, block, repeat);
  PS(psVkHostUnregister(mem));
  free(r.chunks);
  free(mem);
  close_gpu(&g);
  return bad ? 1 : 0;
}
