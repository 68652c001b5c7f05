/*
 * pinstream.h: CUDA's pinned host-memory calls for OpenCL programs, in your own cl_context.
 *
 *   CUDA                                  pinstream
 *   cudaHostAlloc / cudaMallocHost        psHostAlloc(ctx, bytes, flags, &ptr)
 *   cudaHostAlloc(cudaHostAllocMapped)   psHostAlloc(ctx, bytes, PS_HOST_ALLOC_MAPPED, &ptr)
 *   cudaHostGetDevicePointer              psHostGetDeviceBuffer(ptr, &buf, &offset): a cl_mem
 *                                         kernels read and write in place, and ptr's offset in it
 *   cudaFreeHost                          psHostFree(ptr)
 *   cudaHostRegister                      psHostRegister(ctx, ptr, bytes, flags)
 *   cudaHostUnregister                    psHostUnregister(ptr)
 *   cudaPointerGetAttributes (host)       psHostGetInfo(ptr, &info)
 *   cudaGetErrorString                    psGetErrorString(err), psGetLastErrorDetail()
 *   cudaMemcpyBatchAsync (host to device) psMemcpyBatchHtoDAsync(q, dst, offs, srcs, sizes, n, &ev)
 *   cudaMemcpyBatchAsync (device to host) psMemcpyBatchDtoHAsync(q, dsts, src, offs, sizes, n, &ev)
 *   (written ranges vouched disjoint)     psMemcpyBatch{HtoD,DtoH}AsyncWithFlags(..., n, PS_BATCH_DISJOINT, &ev)
 *   (staging of the batched copies)       psMemcpyBatchRelease(ctx)
 *   cudaRuntimeGetVersion                 psGetVersion()
 *   (a hand-written stream loop)          psStreamCreate(&s, ctx, NULL, budget, block),
 *                                         psStreamSetKernel(s, k), psStreamSetInPlace(s, p, n),
 *                                         psStreamRun(s, passes, PS_RESIDENCY_AUTO, &report)
 *   cudaStreamSynchronize / Destroy       psStreamSynchronize(s) / psStreamDestroy(s)
 *
 * Vulkan programs (declared where vulkan/vulkan.h is included before this header), in your own
 * VkDevice, with your vkGetInstanceProcAddr (gipa):
 *   cudaHostAlloc (ggml_vk_host_malloc)   psVkHostAlloc(inst, phys, dev, gipa, bytes, 0, &ptr)
 *   cudaFreeHost                          psVkHostFree(ptr)
 *   cudaHostRegister / cudaHostUnregister psVkHostRegister(inst, phys, dev, gipa, ptr, bytes, 0)
 *                                         / psVkHostUnregister(ptr)
 *   (the VkBuffers to copy with)          psVkHostGetChunks(ptr, chunks, capacity, &count)
 *   cudaPointerGetAttributes (host)       psVkHostGetInfo(ptr, &info)
 *
 * After psHostAlloc or psHostRegister, use plain OpenCL: clEnqueueWriteBuffer /
 * clEnqueueReadBuffer from the pointer run at pinned speed (no VRAM is spent on the host memory
 * where the driver allows it: NVIDIA, AMD).
 *
 * Every call returns psError_t (PS_SUCCESS = 0) and is thread-safe. Misuse returns a code and
 * never crashes: NULL pointers, zero sizes, unknown flags, freeing twice, freeing or
 * unregistering a pointer pinstream did not pin, overlapping registrations.
 *
 * What the caller owes (as CUDA documents for its calls):
 *  - ctx is NULL (refused) or a valid cl_context you hold a reference to during the call. Each
 *    block keeps its own reference to ctx until it is freed or unregistered.
 *  - No transfer that reads or writes a range may be in flight when you call psHostFree or
 *    psHostUnregister on it: wait for its events or clFinish its queues first.
 *  - Memory given to psHostRegister stays allocated (not freed, not unmapped) until
 *    psHostUnregister returns.
 *  - psMemcpyBatchHtoDAsync packs the sources before it returns: reuse them at once. The
 *    device copies run on the queue; its event (yours to release) says when they are done.
 *    psMemcpyBatchDtoHAsync returns at once too: leave the destinations alone until its
 *    event completes (or clFinish(queue)). Neither call waits for the queue's commands.
 *    Both need an in-order queue on the context's first GPU (else its first device).
 *  - Before exiting the program or unloading the library (dlclose, FreeLibrary) while a
 *    psMemcpyBatchDtoHAsync is in flight, wait for its returned event (clWaitForEvents, or
 *    clFinish(queue)): until it completes a pinstream thread waits on the driver and copies
 *    into the destinations, and must not outlive the library or the driver's teardown.
 *  - psVkHostFree / psVkHostUnregister: no command using the range's buffers is pending; the
 *    VkDevice outlives its ranges. The psVk calls never wait on the device.
 *  - psStreamRun / psStreamRunAsync: the job's host memory stays allocated and pinned, and
 *    untouched, until the run returns or its event completes, and no psMemcpyBatch*Async on
 *    it is in flight when the run is issued (a run waits for none); wait for the event (or
 *    psStreamSynchronize / psStreamDestroy) before exiting or unloading the library.
 *  - psStreamRun, psStreamSynchronize and psStreamDestroy are not called from a callback of
 *    one of the stream's own events (clSetEventCallback on psStreamRunAsync's event): the
 *    driver may run it on the stream's thread, which they wait for. They are refused there
 *    (PS_ERROR_INVALID_VALUE); psStreamRunAsync may be called there.
 *  - Strings from psGetLastErrorDetail are valid until the same thread's next failing call;
 *    strings from psGetErrorString are static.
 *
 * Environment: PINSTREAM_STRATEGY=auto|register|nv-host|intel-usm|alloc-host-ptr|svm|mlock|pageable
 * sets psHostAlloc's strategy when flags do not (flags win). PINSTREAM_MAX_CHUNK=SIZE (e.g.
 * 1GiB) lowers the largest registration (default: the devices' max allocation).
 */

#ifndef PINSTREAM_H
#define PINSTREAM_H

/* Generated by cbindgen from crates/pinstream-capi/src; do not edit. Refresh: PINSTREAM_BLESS=1 cargo test -p pinstream-capi --test header */

#include <stddef.h>
#include <stdint.h>
#if defined(__APPLE__)
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif


// `flags` of `psMemcpyBatchHtoDAsyncWithFlags` / `psMemcpyBatchDtoHAsyncWithFlags`: the
// caller vouches that the ranges the call writes (device ranges up, host pieces down) are
// disjoint, as `cudaMemcpyBatchAsync` assumes, and the call does not check it. Bounds are
// still checked; overlapping pieces then leave the overlap's bytes unspecified, never
// memory outside the pieces written.
#define PS_BATCH_DISJOINT 1

// Bytes of each text field of `psHostInfo`, the terminating NUL included (longer text is cut).
#define PS_HOST_INFO_TEXT 256

// `residency` of `psStreamRun`: as many blocks stay in device memory across passes as the
// budget leaves room for (the default).
#define PS_RESIDENCY_AUTO UINT64_MAX

// `residency` of `psStreamRun`: no block stays; every pass streams every block.
#define PS_RESIDENCY_OFF 0

// `psHostAlloc` flags: the strategy `auto` chooses, unless `PINSTREAM_STRATEGY` names one.
#define PS_HOST_ALLOC_DEFAULT 0

// `psHostAlloc` flags: the bits that hold a `PS_STRATEGY_*` value; every other bit must be 0.
#define PS_HOST_ALLOC_STRATEGY_MASK 255

// `psHostRegister` flags: the only value it takes (USE_HOST_PTR registration).
#define PS_HOST_REGISTER_DEFAULT 0

// `psHostAlloc` flags: mapped memory, which kernels read and write in place across the bus
// (`cudaHostAllocMapped`); `psHostGetDeviceBuffer` gives the `cl_mem` over it. The mechanism
// is chosen per driver (NVIDIA: `clCreateBufferNV` host memory; CPU devices and AMD:
// `CL_MEM_ALLOC_HOST_PTR`; Intel integrated GPUs: `CL_MEM_USE_HOST_PTR`), so it takes no
// `PS_STRATEGY_*` value, and `PINSTREAM_STRATEGY` does not apply to it.
#define PS_HOST_ALLOC_MAPPED 256

#if defined(VK_VERSION_1_0)
// `psVkHostAlloc` and `psVkHostRegister` flags: the only value they take.
#define PS_VK_HOST_DEFAULT 0
#endif

// How a range came to pinstream.
typedef enum psHostKind {
  // Allocated by `psHostAlloc` (release with `psHostFree`).
  PS_HOST_ALLOCATED = 1,
  // The caller's memory, registered by `psHostRegister` (release with `psHostUnregister`).
  PS_HOST_REGISTERED = 2,
} psHostKind;

// How host memory was pinned: `PS_STRATEGY_AUTO` in flags asks pinstream to choose; the
// others force one strategy (the names `PINSTREAM_STRATEGY` and the CLI's `--strategy` take).
typedef enum psStrategy {
  // Chosen by driver and extensions (flags only; a block reports the strategy used).
  PS_STRATEGY_AUTO = 0,
  // `register`: pinstream's pages, registered by never-mapped `CL_MEM_USE_HOST_PTR` buffers.
  PS_STRATEGY_REGISTER = 1,
  // `nv-host`: `clCreateBufferNV` host memory (`cl_nv_create_buffer`), mapped.
  PS_STRATEGY_NV_HOST = 2,
  // `intel-usm`: `clHostMemAllocINTEL` (`cl_intel_unified_shared_memory`).
  PS_STRATEGY_INTEL_USM = 3,
  // `alloc-host-ptr`: classic `CL_MEM_ALLOC_HOST_PTR` buffers, mapped (costs VRAM on NVIDIA).
  PS_STRATEGY_ALLOC_HOST_PTR = 4,
  // `svm`: coarse-grained `clSVMAlloc`, mapped (costs VRAM on NVIDIA).
  PS_STRATEGY_SVM = 5,
  // `mlock`: locked pages the driver does not know (a baseline: not pinned for DMA).
  PS_STRATEGY_MLOCK = 6,
  // `pageable`: plain memory (a baseline: not pinned).
  PS_STRATEGY_PAGEABLE = 7,
} psStrategy;

// Whether the driver pinned a range for DMA.
typedef enum psPinState {
  // Not pinned: a baseline strategy (`mlock`, `pageable`).
  PS_PIN_NOT_PINNED = 0,
  // Pinned for DMA by every GPU of the context, by a mechanism measured or documented to pin
  // on that driver (`pin_note` says which).
  PS_PIN_PINNED = 1,
  // The driver accepted the mechanism, but pinstream has no measurement or driver source
  // showing that this driver pins it: not claimed.
  PS_PIN_UNKNOWN = 2,
  // The context has CPU devices only (PoCL): host memory is their memory, nothing to pin.
  PS_PIN_NOT_NEEDED = 3,
} psPinState;

#if defined(VK_VERSION_1_0)
// How a `psVkHost*` range is pinned.
typedef enum psVkPinning {
#if defined(VK_VERSION_1_0)
  // Host pages imported with `VK_EXT_external_memory_host`: no device memory spent.
  PS_VK_PINNING_IMPORT = 1,
#endif
#if defined(VK_VERSION_1_0)
  // The driver's host-visible memory, mapped (`psVkHostAlloc` only, where the device does
  // not import: `note` says why).
  PS_VK_PINNING_HOST_VISIBLE = 2,
#endif
} psVkPinning;
#endif

// Element types of a stream's inputs and output (`psStreamSetTypes`), as the kernel declares
// its buffers: the engine checks each buffer argument's type against them.
typedef enum psDType {
  // `float` (the default).
  PS_DTYPE_F32 = 0,
  // `half`.
  PS_DTYPE_F16 = 1,
  // `double`.
  PS_DTYPE_F64 = 2,
  // `char`.
  PS_DTYPE_I8 = 3,
  // `uchar`.
  PS_DTYPE_U8 = 4,
  // `short`.
  PS_DTYPE_I16 = 5,
  // `ushort`.
  PS_DTYPE_U16 = 6,
  // `int`.
  PS_DTYPE_I32 = 7,
  // `uint`.
  PS_DTYPE_U32 = 8,
  // `long`.
  PS_DTYPE_I64 = 9,
  // `ulong`.
  PS_DTYPE_U64 = 10,
} psDType;

// A stream's C type: opaque, only ever used through its handle.
typedef struct psStream_st psStream_st;

// The result of every pinstream call: `PS_SUCCESS` (0) or one `PS_ERROR_*` code per class of
// failure. `psGetErrorString` names the class; `psGetLastErrorDetail` says what happened
// and what to do.
typedef int psError_t;

// What `psHostGetInfo` reports about one range. Plain data: the caller owns its copy.
typedef struct psHostInfo {
  // Start of the range (the pointer `psHostAlloc` returned or `psHostRegister` was given).
  void *base;
  // Length of the range in bytes.
  size_t bytes;
  // Allocated or registered.
  enum psHostKind kind;
  // The strategy that pinned it (never `PS_STRATEGY_AUTO`).
  enum psStrategy strategy;
  // 1 only when `pin_state` is `PS_PIN_PINNED`; else 0.
  int pinned;
  // Whether the driver pinned it, and on what basis (`pin_note`).
  enum psPinState pin_state;
  // Registration chunks or driver allocations underneath.
  size_t chunk_count;
  // The largest chunk in bytes.
  size_t chunk_bytes;
  // The first chunk in bytes. Chunk `k >= 1` starts at
  // `base + first_chunk_bytes + (k - 1) * chunk_bytes`, and the last ends the range. On
  // NVIDIA a transfer that crosses a chunk boundary runs at pageable speed: split
  // transfers there (one chunk, the usual case below the device's max allocation, has
  // none).
  size_t first_chunk_bytes;
  // Devices of the context the range serves.
  unsigned int device_count;
  // 1 when `vram_cost_bytes` was measured; else 0 and `vram_note` says why not.
  int vram_cost_known;
  // Device memory in use after pinning minus before, summed over the context's devices.
  int64_t vram_cost_bytes;
  // Seconds it took to allocate and pin (or register).
  double pin_seconds;
  // The strategy's name (`register`, `nv-host`, ...), NUL-terminated.
  char strategy_name[32];
  // Why this strategy (forced by flags or `PINSTREAM_STRATEGY`, or `auto`'s reasoning).
  char reason[PS_HOST_INFO_TEXT];
  // The basis of `pin_state`: the measurement or driver source behind a pin, or why none.
  char pin_note[PS_HOST_INFO_TEXT];
  // The VRAM counter used, or why the cost is unknown.
  char vram_note[PS_HOST_INFO_TEXT];
  // 1 for mapped memory (`PS_HOST_ALLOC_MAPPED`: kernels read and write it in place through
  // `psHostGetDeviceBuffer`'s buffer); else 0.
  int mapped;
  // For mapped memory, how its buffer stays in host memory (`nv-host`, `cpu-heap`,
  // `amd-alloc-host-ptr`, `intel-use-host-ptr`; `reason` says on what basis); else empty.
  char zero_copy[32];
} psHostInfo;

// A stream (`cudaStream_t`'s counterpart): made by `psStreamCreate`, given to every
// `psStream*` call, ended by `psStreamDestroy`.
typedef struct psStream_st *psStream_t;

// What a stream run did (`psStreamRun`, `psStreamGetReport`): bytes, each stage's busy time
// by the device's event clock, throughput, overlap, blocks and residency. Times are seconds,
// rates GB/s (10^9 bytes per second).
typedef struct psStreamReport {
  // Bytes uploaded (host to device), every pass and the residents counted.
  uint64_t bytes_uploaded;
  // Bytes downloaded (device to host), every pass counted.
  uint64_t bytes_downloaded;
  // Seconds the uploads were busy, summed over their commands.
  double upload_busy_s;
  // Seconds the kernels were busy.
  double kernel_busy_s;
  // Seconds the downloads were busy.
  double download_busy_s;
  // Bytes uploaded over the uploads' busy time.
  double upload_busy_gbps;
  // Bytes downloaded over the downloads' busy time.
  double download_busy_gbps;
  // From the first command's start to the last one's end, by the device clock.
  double device_wall_s;
  // On the host, from the first enqueue to the last completion.
  double host_wall_s;
  // Bytes uploaded plus downloaded over `device_wall_s`.
  double combined_gbps;
  // The busiest stage's busy time over `device_wall_s`: 1.0 means the stream ran as fast
  // as its slowest stage allows.
  double overlap;
  // Blocks streamed per pass.
  uint64_t blocks;
  // Slots in the ring.
  uint64_t slots;
  // Input bytes per block (per input).
  uint64_t block_bytes;
  // Resident arguments' bytes, uploaded once.
  uint64_t resident_bytes;
  // Blocks that stayed in device memory across the passes.
  uint64_t resident_blocks;
  // Device bytes those blocks took.
  uint64_t resident_block_bytes;
  // Device memory the ring, the residents and the resident blocks took.
  uint64_t pool_bytes;
  // Passes over the job.
  uint64_t passes;
} psStreamReport;

#if defined(VK_VERSION_1_0)
// One chunk of a range: the range's bytes `ptr + offset .. ptr + offset + size` are the
// buffer's bytes `buffer_offset .. buffer_offset + size` (`VkBufferCopy`'s terms: copy with
// `srcOffset = buffer_offset`).
typedef struct psVkChunk {
  // The buffer over the chunk (usage: transfer source and destination, storage).
  VkBuffer buffer;
  // Its memory (the imported or host-visible allocation).
  VkDeviceMemory memory;
  // Where the chunk's part of the range starts in the buffer.
  VkDeviceSize buffer_offset;
  // Where it starts in the range (bytes from the range's start).
  size_t offset;
  // Bytes of the range in this chunk.
  size_t size;
} psVkChunk;
#endif

#if defined(VK_VERSION_1_0)
// What `psVkHostGetInfo` reports about a range. Plain data: the caller owns its copy.
typedef struct psVkHostInfo {
  // Start of the range (the pointer `psVkHostAlloc` returned or `psVkHostRegister` got).
  void *base;
  // Length of the range in bytes.
  size_t bytes;
  // `PS_HOST_ALLOCATED` (`psVkHostAlloc`) or `PS_HOST_REGISTERED` (`psVkHostRegister`).
  enum psHostKind kind;
  // Imported or the driver's host-visible memory.
  enum psVkPinning pinning;
  // Chunks (buffers) over the range: `psVkHostGetChunks` lists them.
  size_t chunk_count;
  // How it was pinned, and for host-visible memory why not imported; NUL-terminated.
  char note[PS_HOST_INFO_TEXT];
} psVkHostInfo;
#endif

// The call succeeded.
#define PS_SUCCESS 0

// A null pointer, a size of zero, or flags the call does not take; for the `psVkHost*`
// calls also Vulkan objects that lack what they need (an instance below Vulkan 1.1, a
// `vkGetInstanceProcAddr` that gives no function they use: the detail names it).
#define PS_ERROR_INVALID_VALUE 1

// The `cl_context` is NULL or not a context the OpenCL library accepts.
#define PS_ERROR_INVALID_CONTEXT 2

// Host memory could not be allocated or pinned (too large for the memory available, out of
// memory, `RLIMIT_MEMLOCK`, or every strategy failed).
#define PS_ERROR_MEMORY_ALLOCATION 3

// The strategy asked for (flags or `PINSTREAM_STRATEGY`) is not offered by every device of
// the context, or cannot give one contiguous pointer of that size; or mapped memory
// (`PS_HOST_ALLOC_MAPPED`) was asked for and the driver has no zero-copy mechanism, or the
// size exceeds the device's largest buffer (the detail says which).
#define PS_ERROR_STRATEGY_UNAVAILABLE 4

// The range overlaps memory already registered or allocated by pinstream
// (`cudaErrorHostMemoryAlreadyRegistered`).
#define PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED 5

// The pointer is not the start of a range registered with `psHostRegister`, or (for
// `psHostGetInfo`) lies in no range pinstream knows (`cudaErrorHostMemoryNotRegistered`).
#define PS_ERROR_HOST_MEMORY_NOT_REGISTERED 6

// `psHostFree` of a pointer `psHostAlloc` did not return, or returned and it was freed since.
#define PS_ERROR_INVALID_HOST_POINTER 7

// The range cannot be pinned by registration: a read-only mapping, a shared mapping of a
// disk file (the NVIDIA driver accepts both without pinning), or addresses nothing maps.
#define PS_ERROR_NOT_PINNABLE 8

// An OpenCL call failed (the detail names the call and the code), or no OpenCL library
// could be loaded.
#define PS_ERROR_OPENCL 9

// This operating system cannot tell what kind of memory a range is, so no pin is promised.
#define PS_ERROR_NOT_SUPPORTED 10

// A bug inside pinstream (a Rust panic, caught at the boundary); please report the detail.
#define PS_ERROR_INTERNAL 11

// The buffer's flags forbid the access the call makes (`CL_INVALID_OPERATION`, as
// `clEnqueueWriteBuffer` / `clEnqueueReadBuffer` return for `CL_MEM_HOST_NO_ACCESS`,
// `CL_MEM_HOST_READ_ONLY` or `CL_MEM_HOST_WRITE_ONLY`), or a copy kernel may not write
// (`CL_MEM_READ_ONLY`) or read (`CL_MEM_WRITE_ONLY`) it.
#define PS_ERROR_INVALID_OPERATION 12

// `psHostGetDeviceBuffer` of memory that is not mapped: a block allocated without
// `PS_HOST_ALLOC_MAPPED`, or a `psHostRegister` range.
#define PS_ERROR_NOT_MAPPED 13

// A Vulkan call of a `psVkHost*` call failed (the detail names the call and its `VkResult`).
#define PS_ERROR_VULKAN 14

// A stream run was stopped by `psStreamCancel` (before it started, or after the blocks it
// had in flight).
#define PS_ERROR_CANCELLED 15

// The kernel given to a stream cannot run its job: its arguments do not follow the
// convention for the job (the detail lists what it takes and what the job binds), it belongs
// to another context, its argument names cannot be read, or it wrote past one of its buffers
// (the bounds guard saw it).
#define PS_ERROR_INVALID_KERNEL 16

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Allocates `bytes` of host memory pinned for every device of `ctx`, with no VRAM cost where
// the driver allows it, as one contiguous range (`cudaHostAlloc` / `cudaMallocHost`).
//
// `flags`: `PS_HOST_ALLOC_DEFAULT` (0) lets `auto` choose, unless the environment variable
// `PINSTREAM_STRATEGY` names a strategy; a `PS_STRATEGY_*` value forces one (flags win).
// `PS_HOST_ALLOC_MAPPED` (alone) makes mapped memory, which kernels read and write in place
// through the buffer `psHostGetDeviceBuffer` gives (`cudaHostAllocMapped`); it is one
// buffer, so at most the device's `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
// The contents are unspecified, as `cudaHostAlloc`'s. On failure `*ptr` is set to NULL.
//
// The block keeps its own reference to `ctx` until `psHostFree`, so the caller may release
// its context before freeing. Transfers from and to the memory are the caller's plain OpenCL
// calls (`clEnqueueWriteBuffer(q, buf, CL_FALSE, off, n, (char *)ptr + o, ...)`).
//
// Errors: `PS_ERROR_INVALID_VALUE` (ptr NULL, bytes 0, unknown flags or
// `PINSTREAM_STRATEGY`), `PS_ERROR_INVALID_CONTEXT`, `PS_ERROR_STRATEGY_UNAVAILABLE`,
// `PS_ERROR_MEMORY_ALLOCATION`, `PS_ERROR_OPENCL`, `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED`
// (the new memory lies where a `psHostRegister` range was freed without `psHostUnregister`:
// the detail names it; unregister it, and free memory only after).
//
// # Safety
// `ctx` is NULL or a valid context; `ptr` is NULL or points at a writable `void *`.
psError_t psHostAlloc(cl_context ctx, size_t bytes, unsigned int flags, void **ptr);

// Frees memory from `psHostAlloc` (`cudaFreeHost`): releases its pinning and unmaps it.
//
// The caller owes: no transfer that reads or writes the block may still be in flight (wait
// for its events or `clFinish` its queues first), as CUDA requires for `cudaFreeHost`.
//
// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_INVALID_HOST_POINTER` (not a pointer
// `psHostAlloc` returned, freed twice, or a `psHostRegister` range).
psError_t psHostFree(void *ptr);

// Pins `bytes` of memory the program already has at `ptr`, for every device of `ctx`
// (`cudaHostRegister`): `malloc`'d at any alignment, `mmap`'d, or part of a larger
// allocation. The memory's content is not changed. Underneath: one never-mapped
// `CL_MEM_USE_HOST_PTR` buffer covers the range where the devices' max allocation allows,
// else several (`psHostGetInfo` gives their layout: `first_chunk_bytes`, `chunk_bytes`). The NVIDIA driver runs a transfer that crosses
// two registrations at pageable speed: split transfers at the chunk boundaries.
// `PINSTREAM_MAX_CHUNK` (a size, e.g. `1GiB`) lowers the largest registration, here and in
// `psHostAlloc`.
//
// Ranges the NVIDIA driver would accept without pinning are refused on every driver with
// `PS_ERROR_NOT_PINNABLE`: read-only mappings and shared mappings of disk files (map the file
// `PROT_READ|PROT_WRITE` and `MAP_PRIVATE`, or `psHostAlloc` and read into it), and
// addresses nothing maps. `flags` must be `PS_HOST_REGISTER_DEFAULT` (0).
//
// Pages never written yet (fresh `malloc`/`mmap` memory) are faulted in writable before
// registration, without changing their content, so that the driver pins real pages.
//
// The caller owes: the memory stays allocated until `psHostUnregister`; no transfer may be
// in flight from or to it at `psHostUnregister`.
//
// Errors: `PS_ERROR_INVALID_VALUE` (ptr NULL, bytes 0, flags not 0),
// `PS_ERROR_INVALID_CONTEXT`, `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (overlaps a range
// pinstream pinned), `PS_ERROR_NOT_PINNABLE`, `PS_ERROR_NOT_SUPPORTED`, `PS_ERROR_OPENCL`,
// `PS_ERROR_MEMORY_ALLOCATION`.
//
// # Safety
// `ctx` is NULL or a valid context; `ptr..ptr+bytes` stays allocated until
// `psHostUnregister` (the range itself is checked: unmapped parts are refused).
psError_t psHostRegister(cl_context ctx,
                         void *ptr,
                         size_t bytes,
                         unsigned int flags);

// Unpins a range registered with `psHostRegister` (`cudaHostUnregister`); `ptr` is the
// pointer given to `psHostRegister`. The memory stays the caller's and is not touched.
//
// The caller owes: no transfer from or to the range may still be in flight.
//
// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (not a
// registered range's start, unregistered twice, or memory from `psHostAlloc`).
psError_t psHostUnregister(void *ptr);

// Describes the range that contains `ptr` (any address inside a block from `psHostAlloc` or
// a range from `psHostRegister`): strategy, whether it is pinned, the range, its chunks, and
// its VRAM cost as measured when it was pinned (or why that is unknown).
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED`
// (no range pinstream pinned contains `ptr`).
//
// # Safety
// `info` is NULL or points at a writable `psHostInfo`.
psError_t psHostGetInfo(const void *ptr, struct psHostInfo *info);

// The name and class of an error code, e.g. `"PS_ERROR_NOT_PINNABLE: the range cannot be
// pinned by registration"` (`cudaGetErrorString`). Never NULL; the string is static.
const char *psGetErrorString(psError_t error);

// What went wrong in the last call on this thread that returned an error, and what to do:
// the same message the library and the CLI give, prefixed by the call's name. "no error"
// before any failure. Never NULL; valid until this thread's next failing pinstream call.
const char *psGetLastErrorDetail(void);

// Copies `count` pieces of host memory to `dst` in few large transfers
// (`cudaMemcpyBatchAsync`, host to device): piece `i` is `sizes[i]` bytes from `srcs[i]` to
// byte `dst_offsets[i]` of `dst`, on `queue` after the commands already on it.
//
// The pieces are copied into pinstream's pinned staging before the call returns, so the
// caller may reuse or free `srcs` at once (pageable or pinned memory alike). Except when
// every piece lies in one block of mapped memory (`PS_HOST_ALLOC_MAPPED`) of the queue's
// context: then one kernel reads the pieces in place across the bus (no packing, no staging),
// and the caller leaves them unchanged until `*event` completes, and waits for it before
// `psHostFree` of the block, as for any transfer. The device
// copies run asynchronously on `queue` (which must be in order, on the context's first GPU):
// later commands on the queue see the data; `*event` (when `event` is not NULL) completes
// when every piece is in place, and the caller releases it (`clReleaseEvent`).
//
// The staging (two pinned buffers and two device buffers of about 18.4 MiB each, and the
// copy kernels) is made on the first call in a context and kept until
// `psMemcpyBatchRelease(ctx)`; it holds a reference to the context meanwhile.
//
// The call never waits for `queue` or anything on it: it returns while a kernel before it
// runs, or while `queue` waits on a user event, and `*event` completes after them. It
// blocks only to pack: the pieces go through two pinned host stages in turn (4 MiB of
// pieces per batch), and packing a stage waits for pinstream's own DMA of the stage's
// previous batch to a device staging buffer, a copy that waits for nothing on `queue`
// (each batch takes a device staging buffer whose copy kernel has ended, or a new one).
// While `queue` holds the copy kernels back, each further batch makes a device staging
// buffer of about 18.4 MiB, freed once its kernel has run.
//
// Errors: `PS_ERROR_INVALID_VALUE` (NULL arrays or pieces, count 0, a size of 0 or above
// any memory's, a piece whose addresses wrap around the address space, a piece that starts
// inside a block from `psHostAlloc` and runs past its end or runs into one from before it,
// a range past `dst`, two pieces overlapping in `dst`: the order would be undefined; `dst`
// not a buffer of `queue`'s context, such as an image),
// `PS_ERROR_INVALID_OPERATION` (`dst` made with `CL_MEM_HOST_NO_ACCESS`,
// `CL_MEM_HOST_READ_ONLY` or `CL_MEM_READ_ONLY`), `PS_ERROR_NOT_SUPPORTED` (an out-of-order
// or device-side queue, or one on another device of the context: the detail says which),
// `PS_ERROR_MEMORY_ALLOCATION`, `PS_ERROR_OPENCL`. On any error `*event` (when `event` is
// not NULL) is NULL: there is nothing to wait for or release.
//
// # Safety
// `queue` and `dst` are NULL or valid objects of one context; the arrays are NULL or hold
// `count` entries; each `srcs[i]` is NULL or readable for `sizes[i]` bytes; `event` is NULL
// or writable.
psError_t psMemcpyBatchHtoDAsync(cl_command_queue queue,
                                 cl_mem dst,
                                 const size_t *dst_offsets,
                                 const void *const *srcs,
                                 const size_t *sizes,
                                 size_t count,
                                 cl_event *event);

// `psMemcpyBatchHtoDAsync` with `flags`: 0, or `PS_BATCH_DISJOINT`, with which the
// caller vouches that no two pieces overlap in `dst` (as `cudaMemcpyBatchAsync` assumes)
// and the call skips checking it: a pass over the pieces' offsets, and buckets of them
// when they are not in order (on the project's 2-core test host ~30 µs for 4,096 pieces and
// ~1 ms for 65,536, against 0.5 ms for the H200's kernel to copy the latter). Every range is still checked against `dst` and the sources' memory, so nothing
// outside them is read or written; if vouched pieces do overlap, which piece's bytes the
// overlap holds afterwards is unspecified. Other bits are refused
// (`PS_ERROR_INVALID_VALUE`). Otherwise as `psMemcpyBatchHtoDAsync`, errors and safety
// included.
//
// # Safety
// As `psMemcpyBatchHtoDAsync`.
psError_t psMemcpyBatchHtoDAsyncWithFlags(cl_command_queue queue,
                                          cl_mem dst,
                                          const size_t *dst_offsets,
                                          const void *const *srcs,
                                          const size_t *sizes,
                                          size_t count,
                                          unsigned int flags,
                                          cl_event *event);

// Copies `count` pieces of `src` to host memory in few large transfers
// (`cudaMemcpyBatchAsync`, device to host): piece `i` is `sizes[i]` bytes from byte
// `src_offsets[i]` of `src` to `dsts[i]`, on `queue` after the commands already on it.
//
// Asynchronous, as CUDA's: the call enqueues the copies and returns; `*event` (when
// `event` is not NULL; the caller releases it) is a marker on `queue` that completes when
// every piece is in the caller's memory, and fails (a negative status) when a copy did.
// Later commands on `queue` wait for it, so `clFinish(queue)` waits for it too. Until
// then `dsts` must stay valid and be neither read nor written: a thread of pinstream's
// copies each batch out of pinned staging into them once its transfer is done.
//
// The call never waits for `queue` or anything on it (a kernel still running, a user
// event not yet set). It blocks only where `psMemcpyBatchHtoDAsync` does, to write a
// batch's segment table into a free host stage; while every stage holds a batch not yet
// copied out, it makes another (about 18.4 MiB pinned), freed once two are free again.
//
// When the call fails, nothing of it writes `dsts` after it returns (earlier batches of
// a call that failed midway may have been written: their bytes are undefined), and
// `*event` (when `event` is not NULL) is NULL.
//
// Before exiting the program or unloading the library (`dlclose`, `FreeLibrary`) with a
// download in flight, wait for the returned event (`clWaitForEvents`, or `clFinish(queue)`):
// until it completes, pinstream's thread waits on the driver and writes `dsts`, and must not
// outlive the library or the driver's teardown.
//
// When every piece lies in one block of mapped memory (`PS_HOST_ALLOC_MAPPED`) of the
// queue's context, one kernel writes them in place across the bus (no staging, no thread),
// and `*event` is that kernel's.
//
// Device ranges may overlap; host pieces must not. Errors as `psMemcpyBatchHtoDAsync`,
// with `PS_ERROR_INVALID_OPERATION` for a `src` made with `CL_MEM_HOST_NO_ACCESS`,
// `CL_MEM_HOST_WRITE_ONLY` or `CL_MEM_WRITE_ONLY`.
//
// # Safety
// `queue` and `src` are NULL or valid objects of one context; the arrays are NULL or hold
// `count` entries; each `dsts[i]` is NULL or writable for `sizes[i]` bytes until `*event`
// completes, and no two overlap; `event` is NULL or writable.
psError_t psMemcpyBatchDtoHAsync(cl_command_queue queue,
                                 void *const *dsts,
                                 cl_mem src,
                                 const size_t *src_offsets,
                                 const size_t *sizes,
                                 size_t count,
                                 cl_event *event);

// `psMemcpyBatchDtoHAsync` with `flags`: 0, or `PS_BATCH_DISJOINT`, with which the
// caller vouches that no two host pieces overlap, and the call skips checking it where it
// checks: pieces in one block of mapped memory (`PS_HOST_ALLOC_MAPPED`), written in place
// by one kernel. Every range is still checked against `src` and the block, so nothing
// outside them is read or written; if vouched pieces do overlap, which piece's bytes the
// overlap holds afterwards is unspecified. Pieces elsewhere are the caller's promise
// either way (see `psMemcpyBatchDtoHAsync`'s safety). Other bits are refused
// (`PS_ERROR_INVALID_VALUE`). Otherwise as `psMemcpyBatchDtoHAsync`, errors and safety
// included.
//
// # Safety
// As `psMemcpyBatchDtoHAsync`.
psError_t psMemcpyBatchDtoHAsyncWithFlags(cl_command_queue queue,
                                          void *const *dsts,
                                          cl_mem src,
                                          const size_t *src_offsets,
                                          const size_t *sizes,
                                          size_t count,
                                          unsigned int flags,
                                          cl_event *event);

// Frees the staging `psMemcpyBatch*Async` made for `ctx` and its reference to the
// context. It waits for pinstream's own DMA out of its host staging, never for the
// caller's queues: copy kernels still queued there keep their device staging alive
// themselves, and downloads not yet copied out keep their host stages (and the context)
// until they are, freed then by pinstream's thread. The next batched copy in `ctx` makes it again.
// `PS_SUCCESS` also when there was none.
//
// Errors: `PS_ERROR_INVALID_CONTEXT` (NULL).
psError_t psMemcpyBatchRelease(cl_context ctx);

// The `cl_mem` over the mapped memory that contains `ptr`, which kernels read and write in
// place, and the offset of `ptr` in it (`cudaHostGetDevicePointer`): any address inside a
// block from `psHostAlloc(..., PS_HOST_ALLOC_MAPPED, ...)`, its start (offset 0) or an
// interior pointer, gives the same buffer. Pass the buffer to a kernel and the offset
// beside it (`clSetKernelArg`), or make a sub-buffer at the offset where it is aligned to
// `CL_DEVICE_MEM_BASE_ADDR_ALIGN`.
//
// The buffer is retained for you: release it with `clReleaseMemObject` when done. The
// memory the kernels see stays alive while you hold it, after `psHostFree` too (the
// driver's buffer owns the memory; pages pinstream maps for `CL_MEM_USE_HOST_PTR` are freed
// by the buffer's destructor callback); the host pointer is invalid after `psHostFree`, as
// in CUDA. On failure `*buffer` is NULL and `*offset` 0.
//
// The host's writes are seen by kernels enqueued after them; a kernel's writes are seen by
// the host once its event is complete (`clWaitForEvents`, `clFinish`).
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED`
// (`ptr` lies in no block pinstream pinned), `PS_ERROR_NOT_MAPPED` (a block not allocated
// with `PS_HOST_ALLOC_MAPPED`, or a `psHostRegister` range: their buffers given to a kernel
// are copied into VRAM on discrete GPUs), `PS_ERROR_OPENCL`.
//
// # Safety
// `buffer` and `offset` are NULL or point at a writable `cl_mem` and `size_t`.
psError_t psHostGetDeviceBuffer(const void *ptr, cl_mem *buffer, size_t *offset);

// Creates a stream on the caller's context `ctx` (`cudaStreamCreate`): a ring of device
// buffers of `block_bytes` each inside `vram_budget` bytes of device memory, made when a run
// starts and released when it ends, run by a thread of the stream's own in issue order.
//
// `queue`: NULL to run on the context's first GPU (else its first device), or a queue of
// `ctx` whose device the stream runs on. Only its device is read: the stream enqueues
// nothing on it and never waits on it or finishes it; it makes queues of its own.
//
// Then describe the job (`psStreamSetKernel`, `psStreamSetInPlace` or `psStreamAddInput` +
// `psStreamSetOutput`, `psStreamAddResident`, `psStreamSetArg`, `psStreamSetTypes`) and run
// it (`psStreamRun`, `psStreamRunAsync`).
//
// The kernel convention (the CLI's `run`): the kernel takes, in order,
//  1. one `__global` pointer per input: its block (the in-place range first);
//  2. out of place, one `__global` pointer for the output block;
//  3. one `__global` or `__constant` pointer per resident argument, uploaded once;
//  4. one to three integers (`uint`, `int`, `ulong`, `long`): the block's input element
//     count, then optionally the block index, then optionally the block's element offset;
//  5. the scalars set by name with `psStreamSetArg`, typed by the kernel.
//
// It is launched with one work item per input element of the block, and once with a count
// of 0 before the stream starts, so guard with `if (i < n)`.
//
// ```c
// // in place: x = x * scale, 10 GiB through a 4 GiB budget in 256 MiB blocks
// // __kernel void scale(__global float *x, ulong n, ulong block, ulong offset, float s)
// psStream_t s;
// psStreamCreate(&s, ctx, NULL, 4ull << 30, 256 << 20);
// psStreamSetKernel(s, kernel);
// psStreamSetInPlace(s, host, 10ull << 30);      // from psHostAlloc or psHostRegister
// psStreamSetArg(s, "s", "2.0");
// psStreamReport r;
// if (psStreamRun(s, 1, PS_RESIDENCY_AUTO, &r) != PS_SUCCESS) puts(psGetLastErrorDetail());
// printf("%.1f GB/s, overlap %.2f\n", r.combined_gbps, r.overlap);
// psStreamDestroy(s);
// ```
//
// Errors: `PS_ERROR_INVALID_VALUE` (stream NULL, vram_budget or block_bytes 0, block_bytes
// above vram_budget, a queue that is not one of ctx's), `PS_ERROR_INVALID_CONTEXT`,
// `PS_ERROR_NOT_SUPPORTED` (an out-of-order or device-side queue), `PS_ERROR_OPENCL`,
// `PS_ERROR_INTERNAL` (the stream's thread could not be started, or a bug in pinstream:
// the detail says which; please report a bug with it).
//
// # Safety
// `stream` is NULL or points at a writable `psStream_t`; `ctx` is NULL or a valid context;
// `queue` is NULL or a valid command queue.
psError_t psStreamCreate(psStream_t *stream,
                         cl_context ctx,
                         cl_command_queue queue,
                         size_t vram_budget,
                         size_t block_bytes);

// Destroys a stream (`cudaStreamDestroy`): returns once the runs issued on it have ended
// (call `psStreamCancel` first to stop them early), with every device buffer, queue and
// kernel object of the stream released and its references to the context dropped (a stream
// of `psVkStreamCreate`: its own `VkDevice` destroyed, and its imports of the program's
// blocks released). The caller's context, queue and kernel stay the caller's. A call on the stream that another
// thread makes meanwhile either completes or is refused with `PS_ERROR_INVALID_VALUE` (the
// stream was destroyed), as every call on it afterwards is.
//
// Must not be called from a callback of one of the stream's own events (`clSetEventCallback`
// on `psStreamRunAsync`'s event): the driver may run it on the stream's thread, which this
// call waits for (PoCL does; NVIDIA runs callbacks on a thread of its own, where nothing is
// refused and a wait inside the driver's callback is the caller's risk). Refused on the
// stream's own thread with `PS_ERROR_INVALID_VALUE`; destroy it from another thread.
//
// Errors: `PS_ERROR_INVALID_VALUE` (NULL, not a stream, destroyed already, called from the
// stream's own thread).
psError_t psStreamDestroy(psStream_t stream);

// Runs the stream's job and returns when it has ended (the synchronous form of
// `psStreamRunAsync`): blocks uploaded, run through the kernel and downloaded, overlapped
// on three queues of the stream's own, inside its budget. After the runs issued before it.
//
// `passes` (at least 1): runs over the job in a row; in place, pass k+1 reads what pass k
// wrote. `residency`: `PS_RESIDENCY_AUTO` keeps as many blocks in device memory across the
// passes as the budget leaves room for (uploaded once, in place downloaded once),
// `PS_RESIDENCY_OFF` none, another value at most that many bytes of them.
// `report`: NULL, or filled with what the run did.
//
// The caller owes: the job's host memory stays allocated and pinned (no `psHostFree` or
// `psHostUnregister`, `psVkHostFree` or `psVkHostUnregister`), and is neither written (inputs, residents) nor read or written
// (in-place range, output) until the call returns; no `psMemcpyBatch*Async` writing the
// job's ranges, or reading the ones the run writes, is still in flight (wait for its event:
// the run does not). A range the run writes (the in-place range, the output) may share no
// byte with another range of the job: such a job is refused before anything runs. A failed or cancelled run leaves the in-place range or output part
// done.
//
// Must not be called from a callback of one of the stream's own events (`clSetEventCallback`
// on `psStreamRunAsync`'s event): the driver may run it on the stream's thread, which this
// call waits for (PoCL does; NVIDIA runs callbacks on a thread of its own, where nothing is
// refused and a wait inside the driver's callback is the caller's risk). Refused on the
// stream's own thread with `PS_ERROR_INVALID_VALUE`; `psStreamRunAsync` may be
// called there instead.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, passes 0, no kernel or no data set,
// a range the run writes that overlaps another, sizes that do not fit the budget or the
// kernel's launch, an argument the kernel lacks, called from the stream's own thread; the
// detail names it), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (a range no `psHostAlloc` or
// `psHostRegister` pinned: pin it with `psHostRegister`), `PS_ERROR_INVALID_KERNEL` (the
// kernel's arguments do not fit the job, or it wrote past a buffer), `PS_ERROR_CANCELLED`,
// `PS_ERROR_MEMORY_ALLOCATION`, `PS_ERROR_OPENCL` (a command failed: the detail names the
// block and the stage), `PS_ERROR_INTERNAL` (a bug in pinstream: please report the detail).
// On a stream of `psVkStreamCreate`: ranges from `psVkHostAlloc` or `psVkHostRegister`
// instead (`PS_ERROR_HOST_MEMORY_NOT_REGISTERED` names them), `PS_ERROR_VULKAN` for a failed
// command, and, on the first run over a block, importing it into the stream's device:
// `PS_ERROR_NOT_PINNABLE` (the driver refused it), `PS_ERROR_STRATEGY_UNAVAILABLE`,
// `PS_ERROR_MEMORY_ALLOCATION`.
//
// # Safety
// `report` is NULL or points at a writable `psStreamReport`; the job's ranges are as the
// caller owes above.
psError_t psStreamRun(psStream_t stream,
                      unsigned int passes,
                      uint64_t residency,
                      struct psStreamReport *report);

// Issues a run of the stream's job and returns at once (`cudaLaunchKernel` on a stream,
// with `cudaEventRecord`): `*event` is a user event of the stream's context that becomes
// `CL_COMPLETE` when the run ended well, or a negative status (minus the `psError_t` code)
// when it failed or was cancelled; `psStreamSynchronize` then returns that code and
// `psGetLastErrorDetail` says why. Wait with `clWaitForEvents`, make your own commands wait
// for it (`clEnqueue...(..., 1, event, ...)`), and release it with `clReleaseEvent`.
// Runs issued on one stream run one after another, in issue order. `passes` and
// `residency` are `psStreamRun`'s. On failure `*event` is NULL and nothing was issued.
//
// The caller owes, as `cudaMemcpyAsync` asks: the job's host memory stays allocated and
// pinned, and is neither written (inputs, residents) nor read or written (in-place range,
// output) until the event completes, and no `psMemcpyBatch*Async` writing the job's ranges,
// or reading the ones the run writes, is still in flight when it is issued (wait for its
// event: the run does not). Changes to the stream's job after this call concern later runs
// only. Before exiting the program or unloading the library, wait for the
// event (or call `psStreamSynchronize` or `psStreamDestroy`).
//
// It may be called from a callback of one of the stream's own events (it waits for nothing),
// unlike `psStreamRun`, `psStreamSynchronize` and `psStreamDestroy`.
//
// Errors (of the issue; the run's own errors come through the event): those of
// `psStreamRun` found before the run starts (not a live stream, passes 0, no kernel, a
// range not pinned, a range the run writes that overlaps another),
// `PS_ERROR_INVALID_VALUE` for a stream of `psVkStreamCreate` (use `psVkStreamRunAsync`),
// `PS_ERROR_OPENCL` (the event could not be made), `PS_ERROR_INTERNAL` (a bug in pinstream: please report the
// detail).
//
// # Safety
// `event` is NULL or points at a writable `cl_event`.
psError_t psStreamRunAsync(psStream_t stream,
                           unsigned int passes,
                           uint64_t residency,
                           cl_event *event);

// Waits until every run issued on the stream has ended (`cudaStreamSynchronize`), and
// returns the first failure of an asynchronous run since the last call (its code, and its
// detail in `psGetLastErrorDetail`), or `PS_SUCCESS`. Waits on the stream's own work only.
//
// Must not be called from a callback of one of the stream's own events (`clSetEventCallback`
// on `psStreamRunAsync`'s event): the driver may run it on the stream's thread, which this
// call waits for (PoCL does; NVIDIA runs callbacks on a thread of its own, where nothing is
// refused and a wait inside the driver's callback is the caller's risk). Refused on the
// stream's own thread with `PS_ERROR_INVALID_VALUE`; wait from another thread.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, called from the stream's own
// thread), or a run's code.
psError_t psStreamSynchronize(psStream_t stream);

// Stops every run issued on the stream and not ended: a running one after the blocks it
// has in flight, the others before they start; each ends with `PS_ERROR_CANCELLED` (its
// event's status `-PS_ERROR_CANCELLED`). Returns at once; `psStreamSynchronize` waits for
// them. Every device buffer of a cancelled run is released; the stream and the context stay
// usable. In-place data and outputs are then part done.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream).
psError_t psStreamCancel(psStream_t stream);

// The report of the stream's last run that ended well (after `psStreamRunAsync`, once its
// event completed; after `psVkStreamRunAsync`, once `psStreamSynchronize` returned).
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, not a live stream, no run has ended
// well yet).
//
// # Safety
// `report` is NULL or points at a writable `psStreamReport`.
psError_t psStreamGetReport(psStream_t stream, struct psStreamReport *report);

// Sets the kernel the stream runs: the caller's `kernel`, of the stream's context, following
// the convention `psStreamCreate` describes. The stream makes its own kernel object of the
// same function (`clCreateKernel` on the kernel's program), so the argument values set on
// `kernel` are never changed, and the caller may release `kernel` after this call. Where the
// driver keeps no argument names, the program's source is built again with
// `-cl-kernel-arg-info`. Whether its arguments fit the job is checked when a run starts.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, a stream of `psVkStreamCreate`: use
// `psVkStreamSetKernel`), `PS_ERROR_INVALID_KERNEL` (NULL or not a kernel, of another
// context, no argument names to be had).
//
// # Safety
// `kernel` is NULL or a valid kernel.
psError_t psStreamSetKernel(psStream_t stream, cl_kernel kernel);

// Sets the element types (`psDType` values): `input` of every input and the in-place
// range, `output` of the output (ignored in place). Both `PS_DTYPE_F32` until set. The
// kernel's buffer arguments must be pointers to them, and the block size a multiple of the
// input element's size.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, not a `psDType` value).
psError_t psStreamSetTypes(psStream_t stream, unsigned int input, unsigned int output);

// Makes the job in place (`cudaMemcpyAsync` both ways through one kernel): `bytes` at
// `ptr` are uploaded block by block, run through the kernel and written back. The range must
// lie inside memory from `psHostAlloc` or `psHostRegister` (a stream of `psVkStreamCreate`:
// `psVkHostAlloc` or `psVkHostRegister`), and share no byte with a resident (both checked
// when a run is issued). Clears the inputs and the output.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around).
psError_t psStreamSetInPlace(psStream_t stream, void *ptr, size_t bytes);

// Adds a streamed input of `bytes` at `ptr` (read only), bound in the order added; every
// input has the same size. For an out-of-place job, with `psStreamSetOutput`. Clears an
// in-place range.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around).
psError_t psStreamAddInput(psStream_t stream, const void *ptr, size_t bytes);

// Sets the output of an out-of-place job: `bytes` at `ptr`, written block by block.
// `inputs_per_output` (at least 1): input elements per output element (k to 1, e.g. 4 for
// a sum of every 4 values); the output then holds ceil(input elements / k) elements of the
// output type. The kernel is still launched with one work item per input element. The
// output may share no byte with an input or a resident (checked when a run is issued).
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around,
// inputs_per_output 0).
psError_t psStreamSetOutput(psStream_t stream, void *ptr, size_t bytes, size_t inputs_per_output);

// Adds a resident argument: `bytes` at `ptr` uploaded once per run and kept in device
// memory for every block (inside the budget), bound after the output in the order added
// (the `x` of `y = W·x` while `W` streams).
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around).
psError_t psStreamAddResident(psStream_t stream, const void *ptr, size_t bytes);

// Sets the kernel's scalar argument `name` to `value` (text, typed by the kernel: `"2.5"`,
// `"-3"`, `"0x10"`), as the CLI's `--arg NAME=VALUE`; setting a name again replaces it.
// An integer set by name is a scalar, not a count.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, NULL, an empty name or one with `=`,
// not UTF-8).
//
// # Safety
// `name` and `value` are NULL or NUL-terminated strings.
psError_t psStreamSetArg(psStream_t stream, const char *name, const char *value);

// Forgets the job's data, residents, scalars and types (the kernel stays), to describe
// another job on the same stream.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream).
psError_t psStreamResetJob(psStream_t stream);

#if defined(VK_VERSION_1_0)
// Creates a stream for a Vulkan program (`cudaStreamCreate`): `psStreamCreate`'s ring of
// device buffers of `block_bytes` inside `vram_budget` bytes, on a `VkDevice` of the
// stream's own, opened by pinstream's own Vulkan loader on the program's `physical` device
// (the device with its `deviceUUID`), with queues of its own. The program's `VkDevice` and
// queues are never used: the stream submits nothing to them and waits for none of them.
//
// Then describe the job with the `psStream*` calls, the kernel with `psVkStreamSetKernel`
// (WGSL), the data in memory from `psVkHostAlloc` or `psVkHostRegister` (each block is
// imported into the stream's device on the first run over it, and released when the block
// is freed or the stream destroyed), and run it with `psStreamRun` or `psVkStreamRunAsync`.
//
// The kernel convention (the CLI's `run --api vulkan`): its buffers are `var<storage>`
// arrays at `@group(0) @binding(0..n)`, in `psStreamCreate`'s order (one per input, the
// in-place range first and `read_write`, then the output, then the residents); its values
// are the members of one `var<immediate>` struct (push constants), in order: the block's
// input element count, then optionally the block index, then optionally the block's element
// offset (`u32`, or `vec2<u32>` for a 64-bit count, low word first), then the scalars set by
// name with `psStreamSetArg` (an integer member set by name ends the counts: the members
// before it are the counts). Its `@workgroup_size(N)` is the group size it runs with; one
// invocation per input element (guard with `if (i < n)`), launched once with a count of 0
// before the stream starts; more groups than `maxComputeWorkGroupCount[0]` come as a second
// grid dimension (the group index is `wg.y * num_workgroups.x + wg.x`).
//
// ```wgsl
// struct Args { n: u32, block: u32, offset: vec2<u32>, s: f32 }
// @group(0) @binding(0) var<storage, read_write> x: array<f32>;
// var<immediate> a: Args;
// @compute @workgroup_size(64)
// fn scale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) g: vec3<u32>,
//          @builtin(local_invocation_index) l: u32) {
//     let i = (wg.y * g.x + wg.x) * 64u + l;
//     if (i < a.n) { x[i] = x[i] * a.s; }
// }
// ```
//
// ```c
// // in place: x = x * s, 10 GiB through a 4 GiB budget in 256 MiB blocks
// psStream_t s;
// psVkStreamCreate(&s, instance, physical, vkGetInstanceProcAddr, 4ull << 30, 256 << 20);
// psVkStreamSetKernel(s, wgsl_source, "scale");
// psStreamSetInPlace(s, host, 10ull << 30);       // from psVkHostAlloc or psVkHostRegister
// psStreamSetArg(s, "s", "2.0");
// if (psStreamRun(s, 1, PS_RESIDENCY_AUTO, NULL) != PS_SUCCESS) puts(psGetLastErrorDetail());
// psStreamDestroy(s);
// ```
//
// The handles are the program's, as `psVkHostAlloc` takes them (an instance of Vulkan 1.1 or
// later). The stream's device is the one pinstream's own loader lists with the same
// `deviceUUID`: `VK_ICD_FILENAMES` or `VK_DRIVER_FILES` set for the process apply to both.
//
// The stream's device needs Vulkan 1.2 (timeline semaphores) and
// `VK_EXT_external_memory_host` from the GPU's driver (NVIDIA's, AMD's, Intel's and lavapipe
// offer both); `psVkHostAlloc` memory must be imported memory (the program's `VkDevice`
// created with that extension), not the host-visible fallback.
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, vram_budget or block_bytes 0,
// block_bytes above vram_budget, an instance below Vulkan 1.1, no device of pinstream's
// loader with the program's device's UUID: the detail lists those it found),
// `PS_ERROR_STRATEGY_UNAVAILABLE` (the driver cannot import host memory), `PS_ERROR_VULKAN`
// (the loader or the device could not be opened, a device below Vulkan 1.2: the detail says
// which), `PS_ERROR_INTERNAL`.
//
// # Safety
// `stream` is NULL or points at a writable `psStream_t`; the handles are NULL or live
// handles of the program, `physical` of `instance`.
psError_t psVkStreamCreate(psStream_t *stream,
                           VkInstance instance,
                           VkPhysicalDevice physical,
                           PFN_vkGetInstanceProcAddr get_instance_proc_addr,
                           size_t vram_budget,
                           size_t block_bytes);
#endif

#if defined(VK_VERSION_1_0)
// Sets the kernel a stream of `psVkStreamCreate` runs: entry point `entry` of the WGSL
// `source` (`@compute @workgroup_size(N) fn entry(...)`), compiled to SPIR-V on the stream's
// device, following the convention `psVkStreamCreate` describes. Whether its parameters fit
// the job is checked when a run starts. The strings are copied: the caller may free them.
//
// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, a stream of `psStreamCreate`, a NULL
// string or one not UTF-8), `PS_ERROR_INVALID_KERNEL` (the source does not compile: the
// detail gives the compiler's message with its line; no entry point `entry`: the detail
// lists those there are).
//
// # Safety
// `source` and `entry` are NULL or NUL-terminated strings.
psError_t psVkStreamSetKernel(psStream_t stream, const char *source, const char *entry);
#endif

#if defined(VK_VERSION_1_0)
// Issues a run of a `psVkStreamCreate` stream's job and returns at once (`cudaLaunchKernel`
// on a stream): `psStreamSynchronize` waits for it and returns its failure, if any
// (`psGetLastErrorDetail` says why). Runs issued on one stream run one after another, in
// issue order. `passes` and `residency` are `psStreamRun`'s; the caller owes what
// `psStreamRunAsync` lists, until `psStreamSynchronize` returns. Before exiting the program
// or unloading the library, call `psStreamSynchronize` or `psStreamDestroy`.
//
// Errors (of the issue; the run's own come from `psStreamSynchronize`): those of
// `psStreamRun` found before the run starts (not a live stream, a stream of
// `psStreamCreate`, passes 0, no kernel, a range `psVkHostAlloc` or `psVkHostRegister` did
// not pin, a range the run writes that overlaps another), `PS_ERROR_INTERNAL`.
psError_t psVkStreamRunAsync(psStream_t stream, unsigned int passes, uint64_t residency);
#endif

// The library's version, e.g. `"0.1.0"` (semantic versioning: a program built against
// MAJOR.MINOR runs with any later MINOR of the same MAJOR; `pkg-config --modversion pinstream`
// and CMake's `pinstream_VERSION` give the installed one). Never NULL; the string is static.
const char *psGetVersion(void);

#if defined(VK_VERSION_1_0)
// Allocates `bytes` of host memory pinned for the program's `device`, as one contiguous
// range, and returns it in `*ptr` (`cudaHostAlloc`; ggml's `ggml_vk_host_malloc`, at any
// size): pinstream's page-aligned memory imported with `VK_EXT_external_memory_host` in
// chunks of at most `maxMemoryAllocationSize` (`PINSTREAM_MAX_CHUNK` lowers it), no device
// memory spent. Where the device does not import (the extension not offered, or not enabled
// on `device`), the driver's host-visible memory instead, one allocation, so at most
// `maxMemoryAllocationSize` bytes; `psVkHostGetInfo` says which and why. `psVkHostGetChunks`
// gives the buffers to copy with. On failure `*ptr` is NULL.
//
// The handles are the program's: `vkGetInstanceProcAddr` is its loader's (or the one it got
// from its loader), `instance` made `device` from `physical`, and the instance's API
// version is 1.1 or later (checked: an instance created below 1.1 is refused, as is a
// `vkGetInstanceProcAddr` that gives no core function the calls need, before any is called).
// `flags` must be `PS_VK_HOST_DEFAULT` (0).
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, bytes 0, flags not 0, an instance or
// device below Vulkan 1.1, a function the calls need missing: the detail names what is
// needed), `PS_ERROR_STRATEGY_UNAVAILABLE` (no import, and more than one host-visible
// allocation), `PS_ERROR_MEMORY_ALLOCATION` (more than this process may still take, as
// sizes near `SIZE_MAX`, or out of memory), `PS_ERROR_VULKAN`,
// `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (the new memory lies where a `psVkHostRegister`
// range was freed without `psVkHostUnregister`: the detail names it; unregister it, and free
// memory only after).
//
// # Safety
// The handles are NULL or live handles of the program; `ptr` is NULL or points at a
// writable `void *`. `device` outlives the block (free it before `vkDestroyDevice`).
psError_t psVkHostAlloc(VkInstance instance,
                        VkPhysicalDevice physical,
                        VkDevice device,
                        PFN_vkGetInstanceProcAddr get_instance_proc_addr,
                        size_t bytes,
                        unsigned int flags,
                        void **ptr);
#endif

#if defined(VK_VERSION_1_0)
// Imports the caller's `bytes` at `ptr` into the program's `device`, in chunks of at most
// `maxMemoryAllocationSize`, with `VK_EXT_external_memory_host` (`cudaHostRegister`), which
// `device` must have been created with. Any alignment: the import covers the whole pages
// (of `minImportedHostPointerAlignment`) the range touches, and `psVkHostGetChunks` gives
// each chunk's buffer with the offset of the range's bytes in it. The range is checked
// first as `psHostRegister` checks it: addresses nothing maps, read-only mappings and shared
// mappings of disk files are refused with `PS_ERROR_NOT_PINNABLE`. A driver that refuses the
// memory (NVIDIA refuses file-backed mappings) is an error, never a pin claimed. The handles
// are checked as `psVkHostAlloc` checks them.
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, bytes 0, flags not 0, a range that
// wraps, an instance or device below Vulkan 1.1, a function the calls need missing),
// `PS_ERROR_STRATEGY_UNAVAILABLE` (the device does not import: the detail says whether the
// driver lacks the extension or `device` was created without it),
// `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (overlaps a `psVkHost*` range),
// `PS_ERROR_NOT_PINNABLE` (memory registration does not pin, or the driver refused the
// import), `PS_ERROR_NOT_SUPPORTED` (this operating system cannot tell what the range is),
// `PS_ERROR_MEMORY_ALLOCATION` (its pages not in memory exceed what this process may still
// take, or out of memory), `PS_ERROR_VULKAN`.
//
// # Safety
// The handles are NULL or live handles of the program; `ptr..ptr+bytes` stays allocated
// until `psVkHostUnregister` (the range itself is checked: unmapped parts are refused), and
// `device` outlives the registration. Where the range does not start and end on the driver's
// import alignment (`minImportedHostPointerAlignment`), the rest of the first and last of
// those pages is imported too: it is checked at the call, and must stay mapped until
// `psVkHostUnregister` as well (do not unmap a neighbour sharing those pages).
psError_t psVkHostRegister(VkInstance instance,
                           VkPhysicalDevice physical,
                           VkDevice device,
                           PFN_vkGetInstanceProcAddr get_instance_proc_addr,
                           void *ptr,
                           size_t bytes,
                           unsigned int flags);
#endif

#if defined(VK_VERSION_1_0)
// Frees memory from `psVkHostAlloc`: destroys its buffers, frees their memory and unmaps it.
// Never waits on the device: the caller owes that no command using the buffers is pending
// (wait for its fence, or `vkQueueWaitIdle`, first).
//
// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_INVALID_HOST_POINTER` (not a pointer
// `psVkHostAlloc` returned, freed twice, or a `psVkHostRegister` range).
psError_t psVkHostFree(void *ptr);
#endif

#if defined(VK_VERSION_1_0)
// Releases a `psVkHostRegister` range: destroys its buffers and frees their imports; the
// memory stays the caller's, untouched. Never waits on the device: the caller owes that no
// command using the buffers is pending.
//
// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (not a
// registered range's start, unregistered twice, or memory from `psVkHostAlloc`).
psError_t psVkHostUnregister(void *ptr);
#endif

#if defined(VK_VERSION_1_0)
// The chunks of the range holding `ptr`, in order, as Vulkan's enumerations give lists:
// `*count` is set to their number; with `chunks` NULL nothing else is written, else the
// chunks are written when `capacity` holds them all (else `PS_ERROR_INVALID_VALUE`, with
// `*count` set: call again with that many). Copy the range's bytes `offset .. offset+size`
// as the buffer's `buffer_offset .. buffer_offset+size` (`vkCmdCopyBuffer`).
//
// Errors: `PS_ERROR_INVALID_VALUE` (ptr or count NULL, capacity too small),
// `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (no `psVkHost*` range holds `ptr`).
//
// # Safety
// `count` is NULL or writable; `chunks` is NULL or holds `capacity` writable entries.
psError_t psVkHostGetChunks(const void *ptr,
                            struct psVkChunk *chunks,
                            size_t capacity,
                            size_t *count);
#endif

#if defined(VK_VERSION_1_0)
// Describes the `psVkHost*` range holding `ptr` (any address in it): its start and size,
// how it came, how it is pinned and why, and its number of chunks.
//
// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED`.
//
// # Safety
// `info` is NULL or points at a writable `psVkHostInfo`.
psError_t psVkHostGetInfo(const void *ptr, struct psVkHostInfo *info);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PINSTREAM_H */
