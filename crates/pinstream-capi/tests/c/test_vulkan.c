/* The psVkHost* calls from a Vulkan program that makes its own VkInstance and VkDevice, as
 * ggml's Vulkan backend does. Built by tests/c_suite.rs under AddressSanitizer and run on the
 * first Vulkan device (lavapipe in CI).
 *
 *   test_vulkan misuse   every misuse refused with its code (sizes near SIZE_MAX, ranges nothing
 *                        maps, a Vulkan 1.0 instance), chunk layout, threads, fallback
 *   test_vulkan stream [BYTES]
 *                        registers, then allocates, a range of BYTES (default 1.25x
 *                        maxMemoryAllocationSize: 2.5 GiB on lavapipe), streams it to a device
 *                        buffer and back with vkCmdCopyBuffer over the chunks in 256 MiB pieces
 *                        (one submission at a time, waited for), checks every byte, releases
 *                        it; prints each direction's copy rate
 *
 * It loads the Vulkan loader itself (dlopen libvulkan.so.1, as volk does), so it needs only the
 * headers to build (libvulkan-dev; the GPU bundle carries them), and hands pinstream the
 * vkGetInstanceProcAddr it got.
 *
 * Ends with "N passed, N failed"; exits non-zero on any failure. */
#define _GNU_SOURCE
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h> /* before pinstream.h: it declares the psVk calls */
#include <pinstream.h>

#include <dlfcn.h>
#include <sys/mman.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define EXPECT(call, want)                                                                 \
  do {                                                                                     \
    psError_t got_ = (call);                                                               \
    CHECK(got_ == (want), "%s returned %d (%s), want %d; detail: %s", #call, got_,         \
          psGetErrorString(got_), (want), psGetLastErrorDetail());                         \
  } while (0)

#define VK(call)                                                        \
  do {                                                                  \
    VkResult r_ = (call);                                               \
    if (r_ != VK_SUCCESS) {                                             \
      fprintf(stderr, "%s:%d: %s: VkResult %d\n", __FILE__, __LINE__, #call, r_); \
      exit(2);                                                          \
    }                                                                   \
  } while (0)

static int detail_has(const char *text) { return strstr(psGetLastErrorDetail(), text) != NULL; }

static VkInstance instance;
static VkPhysicalDevice physical;
static VkDeviceSize max_alloc;

/* The Vulkan functions this program calls, loaded through vkGetInstanceProcAddr. */
#define INSTANCE_FUNCTIONS(X) \
  X(vkAllocateCommandBuffers) \
  X(vkAllocateMemory) \
  X(vkBeginCommandBuffer) \
  X(vkBindBufferMemory) \
  X(vkCmdCopyBuffer) \
  X(vkCmdPipelineBarrier) \
  X(vkCreateBuffer) \
  X(vkCreateCommandPool) \
  X(vkCreateDevice) \
  X(vkCreateFence) \
  X(vkDestroyBuffer) \
  X(vkDestroyCommandPool) \
  X(vkDestroyDevice) \
  X(vkDestroyFence) \
  X(vkDestroyInstance) \
  X(vkEndCommandBuffer) \
  X(vkEnumeratePhysicalDevices) \
  X(vkFreeMemory) \
  X(vkGetBufferMemoryRequirements) \
  X(vkGetDeviceQueue) \
  X(vkGetPhysicalDeviceMemoryProperties) \
  X(vkGetPhysicalDeviceProperties2) \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkQueueSubmit) \
  X(vkResetFences) \
  X(vkWaitForFences)
#define DECLARE(f) static PFN_##f f;
INSTANCE_FUNCTIONS(DECLARE)
static PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
static PFN_vkCreateInstance vkCreateInstance;

static void *load(VkInstance inst, const char *name) {
  void *f = (void *)vkGetInstanceProcAddr(inst, name);
  if (!f) {
    fprintf(stderr, "vkGetInstanceProcAddr gave no %s\n", name);
    exit(2);
  }
  return f;
}

static void open_loader(void) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "no Vulkan loader (%s): apt-get install libvulkan1 mesa-vulkan-drivers\n", dlerror());
    exit(2);
  }
  *(void **)&vkGetInstanceProcAddr = dlsym(lib, "vkGetInstanceProcAddr");
  *(void **)&vkCreateInstance = load(NULL, "vkCreateInstance");
}

#define LOAD(f) *(void **)&f = load(instance, #f);


/* A device of `physical` with one queue of a family with transfer (or compute) work, and
 * VK_EXT_external_memory_host enabled when `import` is set. */
static VkDevice make_device(int import, uint32_t *family) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, NULL);
  VkQueueFamilyProperties props[16];
  n = n > 16 ? 16 : n;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, props);
  *family = 0;
  for (uint32_t i = 0; i < n; i++)
    if (props[i].queueFlags & (VK_QUEUE_TRANSFER_BIT | VK_QUEUE_COMPUTE_BIT)) {
      *family = i;
      break;
    }
  float priority = 1.0f;
  VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  q.queueFamilyIndex = *family;
  q.queueCount = 1;
  q.pQueuePriorities = &priority;
  const char *ext = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
  VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &q;
  info.enabledExtensionCount = import ? 1 : 0;
  info.ppEnabledExtensionNames = import ? &ext : NULL;
  VkDevice device;
  VK(vkCreateDevice(physical, &info, NULL, &device));
  return device;
}

static void open_instance(void) {
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "test_vulkan";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  VK(vkCreateInstance(&info, NULL, &instance));
  INSTANCE_FUNCTIONS(LOAD)
  uint32_t n = 1;
  VkResult r = vkEnumeratePhysicalDevices(instance, &n, &physical);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
    fprintf(stderr, "no Vulkan device: apt-get install mesa-vulkan-drivers\n");
    exit(2);
  }
  VkPhysicalDeviceMaintenance3Properties m3 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
  vkGetPhysicalDeviceProperties2(physical, &p2);
  max_alloc = m3.maxMemoryAllocationSize;
  fprintf(stderr, "test_vulkan: device %s, maxMemoryAllocationSize %llu\n",
          p2.properties.deviceName, (unsigned long long)max_alloc);
}

/* ---- misuse ---------------------------------------------------------------------------- */

#define ARGS(dev) instance, physical, dev, vkGetInstanceProcAddr

static void test_null_and_values(VkDevice dev) {
  CHECK(strncmp(psGetErrorString(PS_ERROR_VULKAN), "PS_ERROR_VULKAN: ", 17) == 0, "%s",
        psGetErrorString(PS_ERROR_VULKAN));
  void *p = (void *)1;
  EXPECT(psVkHostAlloc(NULL, physical, dev, vkGetInstanceProcAddr, 4096, 0, &p),
         PS_ERROR_INVALID_VALUE);
  CHECK(p == NULL && detail_has("psVkHostAlloc: ") && detail_has("VkInstance is NULL"), "%s",
        psGetLastErrorDetail());
  EXPECT(psVkHostAlloc(instance, NULL, dev, vkGetInstanceProcAddr, 4096, 0, &p),
         PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostAlloc(instance, physical, NULL, vkGetInstanceProcAddr, 4096, 0, &p),
         PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostAlloc(instance, physical, dev, NULL, 4096, 0, &p), PS_ERROR_INVALID_VALUE);
  CHECK(detail_has("vkGetInstanceProcAddr is NULL"), "%s", psGetLastErrorDetail());
  EXPECT(psVkHostAlloc(ARGS(dev), 0, 0, &p), PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostAlloc(ARGS(dev), 4096, 1, &p), PS_ERROR_INVALID_VALUE);
  CHECK(detail_has("PS_VK_HOST_DEFAULT"), "%s", psGetLastErrorDetail());
  EXPECT(psVkHostAlloc(ARGS(dev), 4096, 0, NULL), PS_ERROR_INVALID_VALUE);
  char buf[64];
  EXPECT(psVkHostRegister(ARGS(dev), NULL, 64, 0), PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostRegister(ARGS(dev), buf, 0, 0), PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostRegister(ARGS(dev), buf, 64, 2), PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostRegister(ARGS(dev), (void *)(UINTPTR_MAX - 8), 64, 0), PS_ERROR_INVALID_VALUE);
  CHECK(detail_has("wraps"), "%s", psGetLastErrorDetail());
  EXPECT(psVkHostFree(NULL), PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostUnregister(NULL), PS_ERROR_INVALID_VALUE);
  EXPECT(psVkHostFree(buf), PS_ERROR_INVALID_HOST_POINTER);
  EXPECT(psVkHostUnregister(buf), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  size_t count = 7;
  EXPECT(psVkHostGetChunks(buf, NULL, 0, &count), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT(psVkHostGetChunks(NULL, NULL, 0, &count), PS_ERROR_INVALID_VALUE);
  psVkHostInfo info;
  EXPECT(psVkHostGetInfo(buf, &info), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT(psVkHostGetInfo(buf, NULL), PS_ERROR_INVALID_VALUE);
}

/* A 200 KiB registration at an address 100 bytes past a page, in 64 KiB chunks
 * (PINSTREAM_MAX_CHUNK): whole pages imported, the chunks tile the range exactly. */
static void test_chunk_layout(VkDevice dev) {
  setenv("PINSTREAM_MAX_CHUNK", "64KiB", 1);
  size_t bytes = 200 << 10;
  char *mem = aligned_alloc(4096, bytes + 8192);
  char *ptr = mem + 100;
  EXPECT(psVkHostRegister(ARGS(dev), ptr, bytes, 0), PS_SUCCESS);
  size_t count = 0;
  EXPECT(psVkHostGetChunks(ptr + 5000, NULL, 0, &count), PS_SUCCESS);
  CHECK(count == 4, "%zu chunks", count); /* 100 + 200 KiB spans 51 pages: 16+16+16+3 */
  psVkChunk few[2];
  size_t got = 0;
  EXPECT(psVkHostGetChunks(ptr, few, 2, &got), PS_ERROR_INVALID_VALUE);
  CHECK(got == count && detail_has("capacity 2"), "%zu; %s", got, psGetLastErrorDetail());
  psVkChunk chunks[8];
  EXPECT(psVkHostGetChunks(ptr, chunks, 8, &got), PS_SUCCESS);
  size_t at = 0;
  for (size_t i = 0; i < got && i < 8; i++) {
    CHECK(chunks[i].offset == at && chunks[i].size > 0, "chunk %zu at %zu", i, chunks[i].offset);
    CHECK(chunks[i].buffer != VK_NULL_HANDLE && chunks[i].memory != VK_NULL_HANDLE, "handles");
    CHECK(chunks[i].buffer_offset == (i == 0 ? 100u : 0u), "chunk %zu buffer_offset %llu", i,
          (unsigned long long)chunks[i].buffer_offset);
    at += chunks[i].size;
  }
  CHECK(at == bytes, "chunks cover %zu of %zu bytes", at, bytes);
  psVkHostInfo info;
  EXPECT(psVkHostGetInfo(ptr + bytes - 1, &info), PS_SUCCESS);
  CHECK(info.base == ptr && info.bytes == bytes && info.kind == PS_HOST_REGISTERED &&
            info.pinning == PS_VK_PINNING_IMPORT && info.chunk_count == 4,
        "info %p %zu %d %d %zu", info.base, info.bytes, info.kind, info.pinning,
        info.chunk_count);
  /* Overlaps, interior pointers, the wrong release call. */
  EXPECT(psVkHostRegister(ARGS(dev), ptr + 4096, 10, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(detail_has("registered by psVkHostRegister"), "%s", psGetLastErrorDetail());
  EXPECT(psVkHostRegister(ARGS(dev), mem, 200, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT(psVkHostUnregister(ptr + 8), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(detail_has("pass its start, as psVkHostUnregister("), "%s", psGetLastErrorDetail());
  EXPECT(psVkHostFree(ptr), PS_ERROR_INVALID_HOST_POINTER);
  CHECK(detail_has("registered by psVkHostRegister"), "%s", psGetLastErrorDetail());
  /* A neighbour sharing the first page is no overlap: both import that page. */
  EXPECT(psVkHostRegister(ARGS(dev), mem, 100, 0), PS_SUCCESS);
  EXPECT(psVkHostUnregister(mem), PS_SUCCESS);
  EXPECT(psVkHostUnregister(ptr), PS_SUCCESS);
  EXPECT(psVkHostUnregister(ptr), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT(psVkHostGetChunks(ptr, NULL, 0, &count), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  free(mem);
  unsetenv("PINSTREAM_MAX_CHUNK");
}

static void test_alloc_misuse(VkDevice dev) {
  void *p = NULL;
  EXPECT(psVkHostAlloc(ARGS(dev), 12345, 0, &p), PS_SUCCESS);
  CHECK(p != NULL && ((uintptr_t)p % 4096) == 0, "%p", p);
  memset(p, 0x5a, 12345); /* ours to write, every byte */
  psVkHostInfo info;
  EXPECT(psVkHostGetInfo(p, &info), PS_SUCCESS);
  CHECK(info.kind == PS_HOST_ALLOCATED && info.pinning == PS_VK_PINNING_IMPORT &&
            strstr(info.note, "VK_EXT_external_memory_host"),
        "%d %d %s", info.kind, info.pinning, info.note);
  EXPECT(psVkHostUnregister(p), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(detail_has("allocated by psVkHostAlloc: pass its start, as psVkHostFree("), "%s",
        psGetLastErrorDetail());
  EXPECT(psVkHostRegister(ARGS(dev), (char *)p + 10, 10, 0), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT(psVkHostFree((char *)p + 1), PS_ERROR_INVALID_HOST_POINTER);
  EXPECT(psVkHostFree(p), PS_SUCCESS);
  EXPECT(psVkHostFree(p), PS_ERROR_INVALID_HOST_POINTER);
  CHECK(detail_has("released already"), "%s", psGetLastErrorDetail());
}

/* A device created without VK_EXT_external_memory_host: registration is refused with the
 * fix; allocation falls back to host-visible memory up to one allocation, and says so. */
static void test_no_import(void) {
  uint32_t family;
  VkDevice plain = make_device(0, &family);
  char buf[256];
  EXPECT(psVkHostRegister(ARGS(plain), buf, sizeof buf, 0), PS_ERROR_STRATEGY_UNAVAILABLE);
  CHECK(detail_has("ppEnabledExtensionNames"), "%s", psGetLastErrorDetail());
  void *p = NULL;
  EXPECT(psVkHostAlloc(ARGS(plain), 1 << 20, 0, &p), PS_SUCCESS);
  psVkHostInfo info;
  EXPECT(psVkHostGetInfo(p, &info), PS_SUCCESS);
  CHECK(info.pinning == PS_VK_PINNING_HOST_VISIBLE && info.chunk_count == 1 &&
            strstr(info.note, "host-visible") && strstr(info.note, "ppEnabledExtensionNames"),
        "%d %s", info.pinning, info.note);
  memset(p, 1, 1 << 20);
  EXPECT(psVkHostFree(p), PS_SUCCESS);
  EXPECT(psVkHostAlloc(ARGS(plain), (size_t)max_alloc + 1, 0, &p), PS_ERROR_STRATEGY_UNAVAILABLE);
  CHECK(p == NULL && detail_has("allocate in parts"), "%s", psGetLastErrorDetail());
  vkDestroyDevice(plain, NULL);
}

/* Sizes near SIZE_MAX are refused with their size, never wrapped into a small one. */
static void test_hostile_sizes(VkDevice dev) {
  size_t sizes[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4095, (size_t)1 << 63};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    void *p = (void *)1;
    EXPECT(psVkHostAlloc(ARGS(dev), sizes[i], 0, &p), PS_ERROR_MEMORY_ALLOCATION);
    CHECK(p == NULL && !detail_has(" 0 bytes"), "%zu: %p: %s", sizes[i], p, psGetLastErrorDetail());
  }
}

/* Ranges nothing maps are refused as psHostRegister refuses them, by the same check. */
static void test_unmapped(VkDevice dev) {
  long page = 4096;
  /* Two pages at a low address, which the kernel does not pick for mappings (it places them
   * top-down from the stack), the second unmapped: a hole no other thread's mapping fills. */
  char *m = NULL;
  for (uintptr_t n = 1; n < 64 && !m; n++) {
    void *at = (void *)(n << 36);
    void *r = mmap(at, 2 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (r == at)
      m = r;
    else if (r != MAP_FAILED)
      munmap(r, 2 * page);
  }
  CHECK(m != NULL, "no two free pages at a low address");
  if (!m) return;
  munmap(m + page, page);
  char stack[64];
  EXPECT(psVkHostRegister(ARGS(dev), m + 100, page, 0), PS_ERROR_NOT_PINNABLE);
  CHECK(detail_has("not mapped memory") && detail_has("psVkHostRegister: "), "%s",
        psGetLastErrorDetail());
  EXPECT(psVkHostRegister(ARGS(dev), stack, (size_t)1 << 40, 0), PS_ERROR_NOT_PINNABLE);
  EXPECT(psVkHostRegister(ARGS(dev), (void *)(UINTPTR_MAX - 4095), 64, 0), PS_ERROR_NOT_PINNABLE);
  EXPECT(psVkHostGetInfo(stack, &(psVkHostInfo){0}), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
  munmap(m, page);
}

/* An instance of Vulkan 1.0 (the loader emulates vkGetPhysicalDeviceProperties2 for it, and
 * fills no 1.1 structure): refused naming the version, with or without the extension. */
static void test_vulkan_1_0(void) {
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_0;
  VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  VkInstance old;
  VK(vkCreateInstance(&info, NULL, &old));
  uint32_t n = 1;
  VkPhysicalDevice phys;
  VkResult r = vkEnumeratePhysicalDevices(old, &n, &phys);
  CHECK((r == VK_SUCCESS || r == VK_INCOMPLETE) && n == 1, "no device of the 1.0 instance");
  VkPhysicalDevice saved = physical;
  physical = phys;
  for (int import = 0; import < 2; import++) {
    uint32_t family;
    VkDevice dev = make_device(import, &family);
    void *p = (void *)1;
    EXPECT(psVkHostAlloc(old, phys, dev, vkGetInstanceProcAddr, 4096, 0, &p), PS_ERROR_INVALID_VALUE);
    CHECK(p == NULL && detail_has("VK_API_VERSION_1_1"), "%s", psGetLastErrorDetail());
    char buf[256];
    EXPECT(psVkHostRegister(old, phys, dev, vkGetInstanceProcAddr, buf, sizeof buf, 0),
           PS_ERROR_INVALID_VALUE);
    vkDestroyDevice(dev, NULL);
  }
  physical = saved;
  vkDestroyInstance(old, NULL);
}

/* Eight threads register the same range at once: exactly one wins. */
static VkDevice shared_dev;
static char *shared_mem;
static void *register_once(void *out) {
  *(psError_t *)out = psVkHostRegister(ARGS(shared_dev), shared_mem, 1 << 20, 0);
  return NULL;
}

static void test_threads(VkDevice dev) {
  shared_dev = dev;
  shared_mem = malloc(1 << 20);
  pthread_t t[8];
  psError_t rc[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, register_once, &rc[i]);
  int won = 0, refused = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    won += rc[i] == PS_SUCCESS;
    refused += rc[i] == PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  CHECK(won == 1 && refused == 7, "%d won, %d refused", won, refused);
  EXPECT(psVkHostUnregister(shared_mem), PS_SUCCESS);
  free(shared_mem);
}

/* ---- stream ---------------------------------------------------------------------------- */

struct gpu {
  VkDevice dev;
  VkQueue queue;
  VkCommandPool pool;
  VkCommandBuffer cmd;
  VkFence fence;
  VkBuffer buffer; /* the device buffer: `piece` bytes */
  VkDeviceMemory memory;
  VkDeviceSize piece;
};

static void open_gpu(struct gpu *g, VkDeviceSize piece) {
  uint32_t family;
  g->dev = make_device(1, &family);
  g->piece = piece;
  vkGetDeviceQueue(g->dev, family, 0, &g->queue);
  VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool.queueFamilyIndex = family;
  VK(vkCreateCommandPool(g->dev, &pool, NULL, &g->pool));
  VkCommandBufferAllocateInfo cb = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cb.commandPool = g->pool;
  cb.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cb.commandBufferCount = 1;
  VK(vkAllocateCommandBuffers(g->dev, &cb, &g->cmd));
  VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK(vkCreateFence(g->dev, &fence, NULL, &g->fence));
  VkBufferCreateInfo b = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  b.size = piece;
  b.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VK(vkCreateBuffer(g->dev, &b, NULL, &g->buffer));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(g->dev, g->buffer, &req);
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(physical, &mp);
  uint32_t type = 0;
  for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
    if ((req.memoryTypeBits & (1u << i)) &&
        (mp.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) {
      type = i;
      break;
    }
  VkMemoryAllocateInfo a = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  a.allocationSize = req.size;
  a.memoryTypeIndex = type;
  VK(vkAllocateMemory(g->dev, &a, NULL, &g->memory));
  VK(vkBindBufferMemory(g->dev, g->buffer, g->memory, 0));
}

static void close_gpu(struct gpu *g) {
  vkDestroyBuffer(g->dev, g->buffer, NULL);
  vkFreeMemory(g->dev, g->memory, NULL);
  vkDestroyFence(g->dev, g->fence, NULL);
  vkDestroyCommandPool(g->dev, g->pool, NULL);
  vkDestroyDevice(g->dev, NULL);
}

/* Records copies of the range's bytes [at, at + n) to (up) or from the device buffer's
 * [0, n), one region per chunk it crosses; returns how many regions. */
static int record(struct gpu *g, const psVkChunk *chunks, size_t count, size_t at, size_t n,
                  int up) {
  int regions = 0;
  for (size_t i = 0; i < count; i++) {
    size_t lo = chunks[i].offset > at ? chunks[i].offset : at;
    size_t end = chunks[i].offset + chunks[i].size;
    size_t hi = end < at + n ? end : at + n;
    if (lo >= hi) continue;
    VkBufferCopy c;
    VkDeviceSize host = chunks[i].buffer_offset + (lo - chunks[i].offset);
    c.srcOffset = up ? host : lo - at;
    c.dstOffset = up ? lo - at : host;
    c.size = hi - lo;
    if (up)
      vkCmdCopyBuffer(g->cmd, chunks[i].buffer, g->buffer, 1, &c);
    else
      vkCmdCopyBuffer(g->cmd, g->buffer, chunks[i].buffer, 1, &c);
    regions++;
  }
  return regions;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Submits the recorded copies and waits for them; returns the seconds that took. */
static double submit(struct gpu *g) {
  /* Device writes to host memory made visible to the host once the fence signals. */
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(g->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb,
                       0, NULL, 0, NULL);
  VK(vkEndCommandBuffer(g->cmd));
  VkSubmitInfo s = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
  s.commandBufferCount = 1;
  s.pCommandBuffers = &g->cmd;
  double t0 = now();
  VK(vkQueueSubmit(g->queue, 1, &s, g->fence));
  VK(vkWaitForFences(g->dev, 1, &g->fence, VK_TRUE, UINT64_MAX));
  double t = now() - t0;
  VK(vkResetFences(g->dev, 1, &g->fence));
  return t;
}

static void begin(struct gpu *g) {
  VkCommandBufferBeginInfo b = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  b.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VK(vkBeginCommandBuffer(g->cmd, &b));
}

static uint64_t pattern(size_t i) { return (uint64_t)i * 0x9e3779b97f4a7c15ull ^ (i >> 7); }

/* Fills the range, then piece by piece: up to the device, zero the host piece, back down;
 * checks every byte came back. Returns the number of copy regions that crossed a chunk. */
static int round_trip(struct gpu *g, char *ptr, size_t bytes, const char *what) {
  size_t count = 0;
  EXPECT(psVkHostGetChunks(ptr, NULL, 0, &count), PS_SUCCESS);
  CHECK(count >= 2 || bytes <= max_alloc, "%s: %zu chunks over %zu bytes: want several", what,
        count, bytes);
  psVkChunk *chunks = calloc(count, sizeof *chunks);
  EXPECT(psVkHostGetChunks(ptr, chunks, count, &count), PS_SUCCESS);
  for (size_t i = 0; i < count; i++)
    CHECK(chunks[i].buffer_offset + chunks[i].size <= max_alloc, "%s: chunk %zu too big", what, i);
  size_t words = bytes / 8;
  uint64_t *w = (uint64_t *)ptr;
  for (size_t i = 0; i < words; i++) w[i] = pattern(i);
  int crossed = 0;
  double up = 0, down = 0;
  for (size_t at = 0; at < bytes; at += g->piece) {
    size_t n = bytes - at < g->piece ? bytes - at : g->piece;
    begin(g);
    crossed += record(g, chunks, count, at, n, 1) > 1;
    up += submit(g);
    memset(ptr + at, 0, n);
    begin(g);
    record(g, chunks, count, at, n, 0);
    down += submit(g);
  }
  printf("%s: %zu bytes in %zu chunks: H2D %.2f GB/s, D2H %.2f GB/s\n", what, bytes, count,
         (double)bytes / up * 1e-9, (double)bytes / down * 1e-9);
  size_t bad = 0;
  for (size_t i = 0; i < words; i++) bad += w[i] != pattern(i);
  CHECK(bad == 0, "%s: %zu of %zu words differ after the round trip", what, bad, words);
  free(chunks);
  return crossed;
}

static void test_stream(const char *size) {
  struct gpu g;
  open_gpu(&g, 256u << 20);
  size_t bytes = size ? (size_t)strtoull(size, NULL, 0) : 0;
  if (bytes == 0) bytes = (size_t)max_alloc + (size_t)max_alloc / 4;
  fprintf(stderr, "test_vulkan: streaming %zu bytes (maxMemoryAllocationSize %llu)\n", bytes,
          (unsigned long long)max_alloc);
  /* malloc'd memory (not page-aligned: glibc puts a header before large blocks). */
  char *mem = malloc(bytes);
  CHECK(mem != NULL, "malloc %zu", bytes);
  EXPECT(psVkHostRegister(ARGS(g.dev), mem, bytes, 0), PS_SUCCESS);
  int crossed = round_trip(&g, mem, bytes, "register");
  EXPECT(psVkHostUnregister(mem), PS_SUCCESS);
  free(mem);
  void *p = NULL;
  EXPECT(psVkHostAlloc(ARGS(g.dev), bytes, 0, &p), PS_SUCCESS);
  if (p) crossed += round_trip(&g, p, bytes, "alloc");
  EXPECT(psVkHostFree(p), PS_SUCCESS);
  CHECK(crossed >= 1 || bytes <= max_alloc, "no piece crossed a chunk boundary");
  close_gpu(&g);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "misuse";
  open_loader();
  open_instance();
  if (strcmp(mode, "stream") == 0) {
    test_stream(argc > 2 ? argv[2] : NULL);
  } else {
    uint32_t family;
    VkDevice dev = make_device(1, &family);
    test_null_and_values(dev);
    test_chunk_layout(dev);
    test_alloc_misuse(dev);
    test_threads(dev);
    test_hostile_sizes(dev);
    test_unmapped(dev);
    test_no_import();
    test_vulkan_1_0();
    vkDestroyDevice(dev, NULL);
  }
  vkDestroyInstance(instance, NULL);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
