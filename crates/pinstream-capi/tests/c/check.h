/* The C test programs' check: counts passes and failures, and names each failure with its
 * file, line, condition and a message; the program ends with "N passed, N failed". */
#ifndef PINSTREAM_TEST_CHECK_H
#define PINSTREAM_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (cond) {                                                          \
      passed++;                                                          \
    } else {                                                             \
      failed++;                                                          \
      fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
    }                                                                    \
  } while (0)

#endif
