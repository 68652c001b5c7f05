/* Linked into every C test program built with AddressSanitizer (tests/c_suite.rs), never into
 * the library: dlclose keeps the library loaded.
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
 * lsan-third-party.supp still name their modules at exit. Memory that libpinstream or the
 * program itself leaks is reported as before (c_suite.rs's
 * a_leak_outside_the_third_party_libraries_is_still_reported). */
int dlclose(void *handle);

int dlclose(void *handle) {
  (void)handle;
  return 0;
}
