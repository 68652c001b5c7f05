/* The Vulkan transfer ceiling, with no pinstream in it (issue 38): how fast can plain Vulkan
 * move bytes between imported host memory (VK_EXT_external_memory_host, the mechanism
 * pinstream's Vulkan backend uses) and device memory, one way and both ways at once, on every
 * engine the device offers?
 *
 * Engines: a copy (vkCmdCopyBuffer) or a shader (a compute kernel that reads one storage
 * buffer and writes the other, 16 bytes per item, grid-stride) on a queue of each family:
 *   T  the first transfer-only family (NVIDIA: the copy engines)
 *   U  the first family with graphics (the universal queue)
 *   C  the first compute family without graphics (NVIDIA: async compute)
 * two queues of each where the family has two (T0, T1, U0, U1, C0, C1; --queues N: up to N
 * of each, at most 4); a shader needs compute, so none runs on T. On an H100 a shader upload
 * from U0 beside a download on C1 moved 72.7 GB/s, from U1 49.8: queues of one family are not
 * alike, and --queues 4 measures U2, U3, C2 and C3 too.
 *
 * Measured, each the median of --repeat runs of --reps commands of --size bytes each:
 *   one way   every engine alone, host to device (up) and device to host (down)
 *   both ways every pair of engines on two different queues: one uploads while the other
 *             downloads (separate buffers), timed from the submits to the later fence
 * GB/s are 10^9 bytes/s. Before it measures, each engine copies a pattern up and back down and
 * every byte is compared: a wrong byte exits 1.
 *
 *   vk_ceiling [--size SIZE] [--reps N] [--repeat N] [--groups N] [--queues N] [--one-import]
 *              [--host import|driver] [--quad UP1,UP2,DOWN1,DOWN2]...
 *   SIZE: bytes or KiB/MiB/GiB (default 256MiB; --reps 4, --repeat 3, --groups 2048,
 *   --queues 2)
 *   --one-import: the upload's source and the download's target are two halves of one
 *   imported allocation, not two imports.
 *   --host driver: the host memory is the driver's own (vkAllocateMemory of a host-visible,
 *   host-cached type that is not device-local, mapped), not imported: whether the import is
 *   what caps both ways (gpu-facts: one way, the two run at the same speed).
 *   --quad A,B,C,D: also four engines at once, each direction cut in halves: A and B upload
 *   one half each, C and D download one half each (engine names as printed, e.g.
 *   shader@U0,copy@T0,copy@C1,copy@T1); `quad A B C D UP DOWN COMBINED` lines. Repeatable.
 *   --quads-only: measure only the --quad sets (after every engine's check).
 *
 * Output: one line per measurement, `one ENGINE up|down GBPS` and
 * `both UP_ENGINE DOWN_ENGINE UP_GBPS DOWN_GBPS COMBINED_GBPS`, then `best ...` lines.
 * It loads libvulkan.so.1 itself, so it needs only the headers to build:
 *   cc -O2 -std=c11 vk_ceiling.c -ldl -o vk_ceiling
 * Exit code: 0 done, 1 a wrong byte, 2 Vulkan failed (the message says which call). */
#define _GNU_SOURCE
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VK(call)                                                           \
  do {                                                                     \
    VkResult r_ = (call);                                                  \
    if (r_ != VK_SUCCESS) {                                                \
      fprintf(stderr, "vk_ceiling: %s failed: VkResult %d\n", #call, r_);  \
      exit(2);                                                             \
    }                                                                      \
  } while (0)

#define FUNCS(X)                                                                  \
  X(vkCreateInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties) \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceQueueFamilyProperties)     \
  X(vkGetPhysicalDeviceMemoryProperties) X(vkCreateDevice) X(vkGetDeviceQueue)       \
  X(vkCreateBuffer) X(vkGetBufferMemoryRequirements) X(vkAllocateMemory)             \
  X(vkBindBufferMemory) X(vkGetMemoryHostPointerPropertiesEXT) X(vkCreateCommandPool) \
  X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)          \
  X(vkCmdCopyBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets)                 \
  X(vkCmdPushConstants) X(vkCmdDispatch) X(vkQueueSubmit) X(vkCreateFence)          \
  X(vkGetFenceStatus) X(vkWaitForFences) X(vkResetFences) X(vkCreateShaderModule)    \
  X(vkCreateDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkCreateComputePipelines) \
  X(vkCreateDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets)    \
  X(vkDeviceWaitIdle) X(vkCmdPipelineBarrier) X(vkMapMemory)
#define DECLARE(f) static PFN_##f f;
FUNCS(DECLARE)

/* copy.comp: d[i] = s[i] over uvec4, grid-stride, local size 256, push constant n
 * (glslangValidator -V; the source is in bench/ceiling/copy.comp). */
static const uint32_t copy_spv[] = {
#include "copy.spv.inc"
};

enum { COPY, SHADER };
enum { UP, DOWN };
typedef struct {
  char name[24];
  int kind;
  uint32_t family, index;
  VkQueue queue;
  VkCommandPool pool;
  VkCommandBuffer cb[2]; /* the timed upload and download, recorded once */
  VkCommandBuffer half[2][2]; /* [UP|DOWN][first|second half], for --quad (made on use) */
} engine;

static VkDevice dev;
static VkPhysicalDevice phys;
static VkPipeline pipeline;
/* Queues opened of each family (--queues), and at most: the engines are 2 per queue of U and
 * C and 1 per queue of T. */
#define MAX_QUEUES 4
#define MAX_ENGINES (5 * MAX_QUEUES)
static uint32_t queues_per_family = 2;
static VkPipelineLayout layout;
static VkDescriptorSetLayout set_layout;
static VkDescriptorPool desc_pool;
static size_t size;
static uint32_t reps = 4, repeat = 3, groups = 2048;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (!strcmp(end, "KiB")) v *= 1024.0;
  else if (!strcmp(end, "MiB")) v *= 1024.0 * 1024.0;
  else if (!strcmp(end, "GiB")) v *= 1024.0 * 1024.0 * 1024.0;
  else if (*end) {
    fprintf(stderr, "vk_ceiling: bad size %s (bytes, or KiB, MiB, GiB)\n", s);
    exit(2);
  }
  return (size_t)v;
}

static void load(void) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "vk_ceiling: no Vulkan loader (libvulkan.so.1): %s\n", dlerror());
    exit(2);
  }
  PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
  vkCreateInstance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "vk_ceiling", 1, NULL, 0,
                           VK_API_VERSION_1_1};
  VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0,
                              NULL};
  VkInstance inst;
  VK(vkCreateInstance(&ici, NULL, &inst));
#define LOAD(f)                                     \
  f = (PFN_##f)gipa(inst, #f);                      \
  if (!f) {                                         \
    fprintf(stderr, "vk_ceiling: no %s\n", #f);     \
    exit(2);                                        \
  }
  FUNCS(LOAD)
  uint32_t n = 0;
  VK(vkEnumeratePhysicalDevices(inst, &n, NULL));
  VkPhysicalDevice all[16];
  n = n > 16 ? 16 : n;
  VK(vkEnumeratePhysicalDevices(inst, &n, all));
  if (!n) {
    fprintf(stderr, "vk_ceiling: no Vulkan device\n");
    exit(2);
  }
  phys = all[0];
  for (uint32_t i = 0; i < n; i++) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(all[i], &p);
    if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
      phys = all[i];
      break;
    }
  }
}

/* The first family whose flags include `want` and exclude `avoid`, or -1. */
static int family(const VkQueueFamilyProperties *f, uint32_t n, VkQueueFlags want,
                  VkQueueFlags avoid) {
  for (uint32_t i = 0; i < n; i++)
    if ((f[i].queueFlags & want) == want && !(f[i].queueFlags & avoid)) return (int)i;
  return -1;
}

static int open_device(engine *e) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
  VkQueueFamilyProperties fam[32];
  n = n > 32 ? 32 : n;
  vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, fam);
  int fams[3] = {family(fam, n, VK_QUEUE_TRANSFER_BIT, VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT),
                 family(fam, n, VK_QUEUE_GRAPHICS_BIT, 0),
                 family(fam, n, VK_QUEUE_COMPUTE_BIT, VK_QUEUE_GRAPHICS_BIT)};
  if (fams[1] < 0) fams[1] = family(fam, n, VK_QUEUE_COMPUTE_BIT, 0); /* a compute-only device */
  const char letter[3] = {'T', 'U', 'C'};
  float prio[MAX_QUEUES] = {1.0f, 1.0f, 1.0f, 1.0f};
  VkDeviceQueueCreateInfo qci[3];
  uint32_t nq = 0, ne = 0;
  for (int k = 0; k < 3; k++) {
    if (fams[k] < 0 || (k == 2 && fams[2] == fams[1])) continue;
    uint32_t have = fam[fams[k]].queueCount;
    uint32_t count = have > queues_per_family ? queues_per_family : have;
    qci[nq++] = (VkDeviceQueueCreateInfo){VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0,
                                          (uint32_t)fams[k], count, prio};
    for (uint32_t q = 0; q < count; q++)
      for (int kind = COPY; kind <= SHADER; kind++) {
        if (kind == SHADER && k == 0) continue;
        engine *x = &e[ne++];
        snprintf(x->name, sizeof x->name, "%s@%c%u", kind == COPY ? "copy" : "shader", letter[k], q);
        x->kind = kind;
        x->family = (uint32_t)fams[k];
        x->index = q;
      }
  }
  const char *ext[] = {"VK_EXT_external_memory_host", "VK_KHR_external_memory"};
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, nq, qci, 0, NULL, 2,
                            ext, NULL};
  VK(vkCreateDevice(phys, &dci, NULL, &dev));
  for (uint32_t i = 0; i < ne; i++) {
    vkGetDeviceQueue(dev, e[i].family, e[i].index, &e[i].queue);
    VkCommandPoolCreateInfo pci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL, 0,
                                   e[i].family};
    VK(vkCreateCommandPool(dev, &pci, NULL, &e[i].pool));
  }
  return (int)ne;
}

static uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) {
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(phys, &mp);
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
      VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
      if ((bits & (1u << i)) && (f & want) == want && (pass || !(f & avoid))) return i;
    }
  fprintf(stderr, "vk_ceiling: no memory type for bits %#x\n", bits);
  exit(2);
}

static VkBuffer buffer(size_t bytes, int external) {
  VkExternalMemoryBufferCreateInfo ext = {VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
                                          NULL,
                                          VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
  VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, external ? &ext : NULL, 0,
                            bytes,
                            VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                            VK_SHARING_MODE_CONCURRENT, 0, NULL};
  /* Concurrent over every family used, so any queue may touch it without ownership transfers. */
  uint32_t fams[32], nf = 0, n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
  for (uint32_t i = 0; i < n && i < 32; i++) fams[nf++] = i;
  bci.queueFamilyIndexCount = nf;
  bci.pQueueFamilyIndices = fams;
  if (nf < 2) bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer b;
  VK(vkCreateBuffer(dev, &bci, NULL, &b));
  return b;
}

static VkBuffer device_buffer(size_t bytes) {
  VkBuffer b = buffer(bytes, 0);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, b, &req);
  VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size,
                              memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                          VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)};
  VkDeviceMemory m;
  VK(vkAllocateMemory(dev, &mai, NULL, &m));
  VK(vkBindBufferMemory(dev, b, m, 0));
  return b;
}

/* `parts` buffers of `bytes` each over one import of `host` (parts * bytes long). */
static void import(void *host, size_t bytes, int parts, VkBuffer *out) {
  VkMemoryHostPointerPropertiesEXT hp = {.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  VK(vkGetMemoryHostPointerPropertiesEXT(
      dev, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, host, &hp));
  for (int i = 0; i < parts; i++) out[i] = buffer(bytes, 1);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, out[0], &req);
  VkImportMemoryHostPointerInfoEXT imp = {VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
                                          NULL,
                                          VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                                          host};
  VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &imp, bytes * (size_t)parts,
                              memory_type(hp.memoryTypeBits & req.memoryTypeBits,
                                          VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, 0)};
  VkDeviceMemory m;
  VK(vkAllocateMemory(dev, &mai, NULL, &m));
  for (int i = 0; i < parts; i++) VK(vkBindBufferMemory(dev, out[i], m, bytes * (size_t)i));
}

/* Two buffers of `bytes` each over one allocation of the driver's own host memory (a
 * host-visible, host-cached type that is not device-local), mapped: returns the mapping. */
static unsigned char *driver_host(size_t bytes, VkBuffer *out) {
  for (int i = 0; i < 2; i++) out[i] = buffer(bytes, 0);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, out[0], &req);
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(phys, &mp);
  /* Coherent too: the pattern is written and the checks read with no flush or invalidate. */
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                               VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                               VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < mp.memoryTypeCount && type == UINT32_MAX; i++) {
    VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((req.memoryTypeBits & (1u << i)) && (f & want) == want && !(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
      type = i;
  }
  if (type == UINT32_MAX) {
    fprintf(stderr, "vk_ceiling: no host-visible, coherent, cached memory type that is not device-local\n");
    exit(2);
  }
  printf("host memory: the driver's, type %u (flags %#x), heap %u\n", type,
         mp.memoryTypes[type].propertyFlags, mp.memoryTypes[type].heapIndex);
  VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, 2 * bytes, type};
  VkDeviceMemory m;
  VK(vkAllocateMemory(dev, &mai, NULL, &m));
  for (int i = 0; i < 2; i++) VK(vkBindBufferMemory(dev, out[i], m, bytes * (size_t)i));
  void *p;
  VK(vkMapMemory(dev, m, 0, 2 * bytes, 0, &p));
  return p;
}

static void make_pipeline(void) {
  VkDescriptorSetLayoutBinding b[2] = {
      {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
      {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL}};
  VkDescriptorSetLayoutCreateInfo dl = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL,
                                        0, 2, b};
  VK(vkCreateDescriptorSetLayout(dev, &dl, NULL, &set_layout));
  VkPushConstantRange pc = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 4};
  VkPipelineLayoutCreateInfo pl = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1,
                                   &set_layout, 1, &pc};
  VK(vkCreatePipelineLayout(dev, &pl, NULL, &layout));
  VkShaderModuleCreateInfo sm = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0,
                                 sizeof copy_spv, copy_spv};
  VkShaderModule mod;
  VK(vkCreateShaderModule(dev, &sm, NULL, &mod));
  VkComputePipelineCreateInfo cp = {
      VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, NULL, 0,
      {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0, VK_SHADER_STAGE_COMPUTE_BIT,
       mod, "main", NULL},
      layout, VK_NULL_HANDLE, -1};
  VK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cp, NULL, &pipeline));
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 16};
  VkDescriptorPoolCreateInfo dp = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, 8, 1,
                                   &ps};
  VK(vkCreateDescriptorPool(dev, &dp, NULL, &desc_pool));
}

static VkDescriptorSet set_range(VkBuffer src, VkBuffer dst, VkDeviceSize at, VkDeviceSize len) {
  VkDescriptorSetAllocateInfo ai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL,
                                    desc_pool, 1, &set_layout};
  VkDescriptorSet s;
  VK(vkAllocateDescriptorSets(dev, &ai, &s));
  VkDescriptorBufferInfo bi[2] = {{src, at, len}, {dst, at, len}};
  VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, s, 0, 0, 2,
                            VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NULL, bi, NULL};
  vkUpdateDescriptorSets(dev, 1, &w, 0, NULL);
  return s;
}

static VkDescriptorSet set_of(VkBuffer src, VkBuffer dst) {
  return set_range(src, dst, 0, VK_WHOLE_SIZE);
}

/* A command buffer of `n` copies of `bytes` at `at` of src into dst by engine `e`'s kind (set:
 * the shader's, bound at `at` already). */
static VkCommandBuffer record_at(const engine *e, VkBuffer src, VkBuffer dst, VkDescriptorSet set,
                                 uint32_t n, VkDeviceSize at, VkDeviceSize bytes) {
  VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, e->pool,
                                    VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  VkCommandBuffer cb;
  VK(vkAllocateCommandBuffers(dev, &ai, &cb));
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VK(vkBeginCommandBuffer(cb, &bi));
  uint32_t items = (uint32_t)(bytes / 16);
  if (e->kind == SHADER) {
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
    vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &items);
  }
  VkBufferCopy region = {at, at, bytes};
  /* Each copy waits for the one before, as a stream's copies of one queue do: with no
   * barrier the dispatches of one command buffer may run at once, and dispatches too small
   * to fill the GPU (--groups 512) may then read the same host bytes together, some from the
   * GPU's cache (the likely cause of 67.8 GB/s "up" on an H100 without it, above what PCIe
   * gen 5 x16 carries). */
  VkPipelineStageFlags stage =
      e->kind == COPY ? VK_PIPELINE_STAGE_TRANSFER_BIT : VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
  for (uint32_t i = 0; i < n; i++) {
    if (i) vkCmdPipelineBarrier(cb, stage, stage, 0, 0, NULL, 0, NULL, 0, NULL);
    if (e->kind == COPY) vkCmdCopyBuffer(cb, src, dst, 1, &region);
    else vkCmdDispatch(cb, groups, 1, 1);
  }
  VK(vkEndCommandBuffer(cb));
  return cb;
}

/* A command buffer of `n` copies of the whole of src into dst by engine `e`'s kind. */
static VkCommandBuffer record(const engine *e, VkBuffer src, VkBuffer dst, VkDescriptorSet set,
                              uint32_t n) {
  return record_at(e, src, dst, set, n, 0, size);
}

/* Submits cb[i] on queue q[i] (i < n <= 4) at once; returns each one's seconds to its fence. */
static void submit(int n, const VkCommandBuffer *cb, const VkQueue *q, double *secs) {
  static VkFence fence[4];
  if (!fence[0])
    for (int i = 0; i < 4; i++) {
      VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
      VK(vkCreateFence(dev, &fci, NULL, &fence[i]));
    }
  VK(vkResetFences(dev, (uint32_t)n, fence));
  double t0 = now();
  for (int i = 0; i < n; i++) {
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &cb[i], 0, NULL};
    VK(vkQueueSubmit(q[i], 1, &si, fence[i]));
  }
  int left = n;
  for (int i = 0; i < n; i++) secs[i] = -1;
  while (left)
    for (int i = 0; i < n; i++) {
      if (secs[i] >= 0) continue;
      VkResult r = vkGetFenceStatus(dev, fence[i]);
      if (r == VK_SUCCESS) {
        secs[i] = now() - t0;
        left--;
      } else if (r != VK_NOT_READY) {
        fprintf(stderr, "vk_ceiling: vkGetFenceStatus failed: VkResult %d\n", r);
        exit(2);
      }
    }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, uint32_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

#define MAX_QUADS 16

/* The engine named `name` among e[0..ne), or exit 2. */
static int engine_named(const engine *e, int ne, const char *name) {
  for (int i = 0; i < ne; i++)
    if (!strcmp(e[i].name, name)) return i;
  fprintf(stderr, "vk_ceiling: --quad names %s, which this device has not (see the engines printed)\n", name);
  exit(2);
}

/* The four engines of --quad `spec` into at[], or exit 2. */
static void parse_quad(const engine *e, int ne, const char *spec, int *at) {
  char copy[128];
  snprintf(copy, sizeof copy, "%s", spec);
  /* Split at every comma (not strtok, which takes A,,B,C,D as four names). */
  int n = 0;
  for (char *name = copy, *comma;; name = comma + 1) {
    comma = strchr(name, ',');
    if (comma) *comma = 0;
    if (!*name) {
      fprintf(stderr, "vk_ceiling: --quad %s has an empty engine name\n", spec);
      exit(2);
    }
    if (n < 4) at[n] = engine_named(e, ne, name);
    n++;
    if (!comma) break;
  }
  if (n != 4) {
    fprintf(stderr, "vk_ceiling: --quad takes four engine names, comma-separated: %s\n", spec);
    exit(2);
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < i; j++)
      if (e[at[i]].queue == e[at[j]].queue) {
        fprintf(stderr, "vk_ceiling: --quad %s puts two engines on one queue\n", spec);
        exit(2);
      }
}

/* Each --quad: A and B upload half of the bytes each, C and D download half each, all four
 * at once; `quad A B C D UP DOWN COMBINED` (GB/s, medians of --repeat). */
static void quads(engine *e, int ne, char quad[][128], int nquad, const VkBuffer *h, VkBuffer d_up,
                  VkBuffer d_down, unsigned char *host) {
  VkDeviceSize half = size / 2;
  int ce = 0; /* a copy engine, for the check's whole-buffer copies */
  while (ce < ne && e[ce].kind != COPY) ce++;
  if (nquad && ce == ne) {
    fprintf(stderr, "vk_ceiling: no copy engine for the quads' check\n");
    exit(2);
  }
  VkCommandBuffer zero = nquad ? record(&e[ce], h[1], d_up, VK_NULL_HANDLE, 1) : VK_NULL_HANDLE;
  VkCommandBuffer across = nquad ? record(&e[ce], d_up, d_down, VK_NULL_HANDLE, 1) : VK_NULL_HANDLE;
  VkDescriptorSet sets[2][2];
  for (int k = 0; k < 2; k++) {
    sets[UP][k] = set_range(h[0], d_up, half * k, half);
    sets[DOWN][k] = set_range(d_down, h[1], half * k, half);
  }
  for (int x = 0; x < nquad; x++) {
    int at[4];
    parse_quad(e, ne, quad[x], at);
    VkCommandBuffer cb[4];
    VkQueue q[4];
    for (int i = 0; i < 4; i++) {
      engine *g = &e[at[i]];
      int dir = i < 2 ? UP : DOWN, k = i % 2;
      if (!g->half[dir][k]) {
        VkBuffer src = dir == UP ? h[0] : d_down, dst = dir == UP ? d_up : h[1];
        g->half[dir][k] = record_at(g, src, dst, sets[dir][k], reps, half * k, half);
      }
      cb[i] = g->half[dir][k];
      q[i] = g->queue;
    }
    /* The check: the device buffer zeroed, the halves up, moved across whole, the halves
     * down into zeroed host memory, every byte compared with the source. */
    double t[4];
    memset(host + size, 0, size);
    submit(1, &zero, &e[ce].queue, t);
    submit(2, cb, q, t);
    submit(1, &across, &e[ce].queue, t);
    submit(2, cb + 2, q + 2, t);
    if (memcmp(host, host + size, size)) {
      printf("check quad %s: WRONG bytes came back\n", quad[x]);
      exit(1);
    }
    printf("check quad %s: every byte came back\n", quad[x]);
    double bytes = (double)size * reps, v[64], w[64], c[64];
    for (uint32_t r = 0; r < repeat; r++) {
      submit(4, cb, q, t);
      double up = t[0] > t[1] ? t[0] : t[1], down = t[2] > t[3] ? t[2] : t[3];
      v[r] = bytes / up / 1e9;
      w[r] = bytes / down / 1e9;
      c[r] = 2 * bytes / (up > down ? up : down) / 1e9;
    }
    printf("quad %s %s %s %s %.1f %.1f %.1f\n", e[at[0]].name, e[at[1]].name, e[at[2]].name,
           e[at[3]].name, median(v, repeat), median(w, repeat), median(c, repeat));
  }
}

int main(int argc, char **argv) {
  size = 256u << 20;
  int one_import = 0, driver = 0, nquad = 0, quads_only = 0;
  static char quad[MAX_QUADS][128];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--groups") && i + 1 < argc) groups = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--queues") && i + 1 < argc) queues_per_family = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--one-import")) one_import = 1;
    else if (!strcmp(argv[i], "--quads-only")) quads_only = 1;
    else if (!strcmp(argv[i], "--host") && i + 1 < argc && !strcmp(argv[i + 1], "import")) i++;
    else if (!strcmp(argv[i], "--host") && i + 1 < argc && !strcmp(argv[i + 1], "driver")) driver = 1, i++;
    else if (!strcmp(argv[i], "--quad") && i + 1 < argc && nquad == MAX_QUADS) {
      fprintf(stderr, "vk_ceiling: at most %d --quad sets\n", MAX_QUADS);
      return 2;
    } else if (!strcmp(argv[i], "--quad") && i + 1 < argc)
      snprintf(quad[nquad++], sizeof quad[0], "%s", argv[++i]);
    else {
      fprintf(stderr, "usage: vk_ceiling [--size SIZE] [--reps N] [--repeat N] [--groups N] [--queues N] [--one-import] [--host import|driver] [--quad A,B,C,D]... [--quads-only]\n");
      return 2;
    }
  }
  size = (size + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1); /* whole 2 MiB pages */
  if (driver && one_import) {
    fprintf(stderr, "vk_ceiling: --host driver makes no import: drop --one-import\n");
    return 2;
  }
  if (!reps || !repeat || !groups || repeat > 64) {
    fprintf(stderr, "vk_ceiling: --reps, --repeat (<= 64) and --groups must be positive\n");
    return 2;
  }
  if (queues_per_family < 1 || queues_per_family > MAX_QUEUES) {
    fprintf(stderr, "vk_ceiling: --queues takes 1 to %d\n", MAX_QUEUES);
    return 2;
  }
  load();
  engine e[MAX_ENGINES];
  memset(e, 0, sizeof e); /* each half[][] is made on use, from NULL */
  int ne = open_device(e);
  for (int x = 0; x < nquad; x++) { /* refused before anything is measured */
    int at[4];
    parse_quad(e, ne, quad[x], at);
  }
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(phys, &props);
  printf("device %s, %d engines, size %zu MiB, reps %u, repeat %u, groups %u, queues %u, %s\n",
         props.deviceName, ne, size >> 20, reps, repeat, groups, queues_per_family,
         driver ? "driver host memory" : one_import ? "one import" : "two imports");
  make_pipeline();
  VkBuffer h[2];
  unsigned char *host = driver ? driver_host(size, h) : aligned_alloc(2u << 20, 2 * size);
  if (!host) {
    fprintf(stderr, "vk_ceiling: out of host memory for 2 x %zu bytes\n", size);
    return 2;
  }
  uint32_t *words = (uint32_t *)host;
  for (size_t i = 0; i < size / 4; i++) words[i] = (uint32_t)i * 2654435761u + 12345u;
  memset(host + size, 0, size);
  if (driver) {
  } else if (one_import) import(host, size, 2, h);
  else {
    import(host, size, 1, &h[0]);
    import(host + size, size, 1, &h[1]);
  }
  VkBuffer d_up = device_buffer(size), d_down = device_buffer(size), d_chk = device_buffer(size);
  VkDescriptorSet s_up = set_of(h[0], d_up), s_down = set_of(d_down, h[1]);
  VkDescriptorSet s_cu = set_of(h[0], d_chk), s_cd = set_of(d_chk, h[1]);
  for (int i = 0; i < ne; i++) { /* the check: up and back down through each engine */
    VkCommandBuffer c[2] = {record(&e[i], h[0], d_chk, s_cu, 1), record(&e[i], d_chk, h[1], s_cd, 1)};
    double t;
    memset(host + size, 0, size);
    submit(1, &c[0], &e[i].queue, &t);
    submit(1, &c[1], &e[i].queue, &t);
    if (memcmp(host, host + size, size)) {
      printf("check %s: WRONG bytes came back\n", e[i].name);
      return 1;
    }
    printf("check %s: every byte came back\n", e[i].name);
    e[i].cb[UP] = record(&e[i], h[0], d_up, s_up, reps);
    e[i].cb[DOWN] = record(&e[i], d_down, h[1], s_down, reps);
  }
  double bytes = (double)size * reps, v[64], w[64], c[64], best = 0, best1[2] = {0, 0};
  char best_name[64] = "", best1_name[2][24] = {"", ""};
  for (int i = 0; i < (quads_only ? 0 : ne); i++)
    for (int dir = UP; dir <= DOWN; dir++) {
      for (uint32_t r = 0; r < repeat; r++) {
        double t;
        submit(1, &e[i].cb[dir], &e[i].queue, &t);
        v[r] = bytes / t / 1e9;
      }
      double g = median(v, repeat);
      printf("one %s %s %.1f\n", e[i].name, dir == UP ? "up" : "down", g);
      if (g > best1[dir]) best1[dir] = g, strcpy(best1_name[dir], e[i].name);
    }
  for (int i = 0; i < (quads_only ? 0 : ne); i++)
    for (int j = 0; j < ne; j++) {
      if (e[i].queue == e[j].queue) continue;
      for (uint32_t r = 0; r < repeat; r++) {
        VkCommandBuffer cb[2] = {e[i].cb[UP], e[j].cb[DOWN]};
        VkQueue q[2] = {e[i].queue, e[j].queue};
        double t[2];
        submit(2, cb, q, t);
        v[r] = bytes / t[0] / 1e9;
        w[r] = bytes / t[1] / 1e9;
        c[r] = 2 * bytes / (t[0] > t[1] ? t[0] : t[1]) / 1e9;
      }
      double cm = median(c, repeat);
      printf("both %s %s %.1f %.1f %.1f\n", e[i].name, e[j].name, median(v, repeat),
             median(w, repeat), cm);
      if (cm > best) best = cm, snprintf(best_name, sizeof best_name, "%.15s %.15s", e[i].name, e[j].name);
    }
  if (!quads_only) {
    printf("best one up %s %.1f\n", best1_name[UP], best1[UP]);
    printf("best one down %s %.1f\n", best1_name[DOWN], best1[DOWN]);
    if (best > 0) printf("best both %s %.1f\n", best_name, best);
    else printf("best both none (the device has one queue)\n");
  }
  quads(e, ne, quad, nquad, h, d_up, d_down, host);
  VK(vkDeviceWaitIdle(dev));
  return 0;
}
