/* Leaks 77 bytes on purpose, after loading pinstream (a failed psHostAlloc sets its error
 * detail) and the OpenCL loader: tests/c_suite.rs checks that LeakSanitizer still reports it
 * under the third-party suppressions (lsan-third-party.supp). */
#include <pinstream.h>
#include <stdio.h>
#include <stdlib.h>

/* The only pointer to the block dies with this frame. */
__attribute__((noinline)) static void leak(char code) {
  char *volatile lost = malloc(77);
  lost[0] = code;
  printf("leaked 77 bytes (%d)\n", lost[0]);
}

int main(void) {
  void *p = NULL;
  psError_t e = psHostAlloc(NULL, 4096, 0, &p);
  printf("psHostAlloc(NULL context): %s\n", psGetLastErrorDetail());
  leak((char)e);
  return 0;
}
