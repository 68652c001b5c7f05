/* Linked into every C test program built with AddressSanitizer (tests/c_suite.rs), never into
 * the library: dlclose keeps third-party drivers loaded, and closes everything else as usual.
 *
 * Drivers keep one-time state for the life of the process (lavapipe allocates 128 bytes under
 * a pthread_once while listing physical devices, and never frees them). While the driver is
 * loaded, LeakSanitizer finds that state through the driver's globals, or names the driver's
 * module for a suppression. But the Vulkan loader unloads the driver in vkDestroyInstance, and
 * a program that loads the loader itself (volk's way, as examples/c/vk_stream.c does) unloads
 * the loader too. At exit the driver's globals are gone and its frames show as
 * "<unknown module>", which no suppression rule of this libasan can name
 * (google/sanitizers#89), so the state was reported as a leak on a fresh machine.
 *
 * Kept loaded, the driver's memory stays reachable, and the suppressions in
 * lsan-third-party.supp still name their modules at exit. Only the drivers are kept: the
 * loaders, libpinstream and the program's own libraries are closed as they would be, so an
 * unload bug of pinstream's (a function pointer kept past its library's dlclose) still
 * faults under ASan, and memory that libpinstream or the program leaks is reported as before
 * (c_suite.rs's a_leak_outside_the_third_party_libraries_is_still_reported).
 *
 * A program of yours run under ASan meets the same report from lavapipe: keep the driver
 * loaded the same way, or run it with the driver in LD_PRELOAD after libasan (docs/c.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

int dlclose(void *handle);

/* The third-party drivers the suites load: Mesa's Vulkan drivers (lavapipe), PoCL and its
 * LLVM, NVIDIA's OpenCL, Vulkan and CUDA libraries. */
static int third_party_driver(const char *path) {
  static const char *const names[] = {"libvulkan_", "libpocl", "libLLVM", "nvidia", "libcuda"};
  const char *base = path ? strrchr(path, '/') : NULL;
  base = base ? base + 1 : path;
  if (!base)
    return 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strstr(base, names[i]))
      return 1;
  return 0;
}

int dlclose(void *handle) {
  struct link_map *map = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && third_party_driver(map->l_name))
    return 0;
  int (*real)(void *) = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
  return real ? real(handle) : -1;
}
