/* What the seed port and its CUDA original share: sizes, the data and the kernel's arithmetic
 * on the CPU, a multi-threaded fill and check, a clock. C99 and C++ (nvcc) alike. */
#ifndef SEED_COMMON_H
#define SEED_COMMON_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

/* What the kernel does to one word, on the CPU. */
static uint32_t seed_step_cpu(uint32_t x) { return x * 2654435761u + 12345u; }
/* The input word at index i. */
static uint32_t seed_input(size_t i) { return (uint32_t)(i * 0x9E3779B1u) ^ 0xA5A5A5A5u; }

/* "10GiB", "256MiB", "4G", "1048576": K/M/G/T are powers of 1024; exits on a bad size. */
static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end), mul = 1;
  switch (*end) {
    case 'K': case 'k': mul = 1024.0; break;
    case 'M': case 'm': mul = MIB; break;
    case 'G': case 'g': mul = GIB; break;
    case 'T': case 't': mul = GIB * 1024.0; break;
    case '\0': break;
    default: fprintf(stderr, "seed_port: bad size '%s' (e.g. 10GiB, 256MiB)\n", s); exit(2);
  }
  if (v <= 0) { fprintf(stderr, "seed_port: size '%s' must be positive\n", s); exit(2); }
  return (size_t)(v * mul);
}

/* Fills words [from, to) with the input, or counts those that are not `passes` kernel steps
 * from it. */
typedef struct {
  uint32_t *data;
  size_t from, to, bad;
  int check, passes;
} seed_span;

static void *seed_work(void *arg) {
  seed_span *s = (seed_span *)arg;
  for (size_t i = s->from; i < s->to; i++) {
    if (!s->check) { s->data[i] = seed_input(i); continue; }
    uint32_t want = seed_input(i);
    for (int k = 0; k < s->passes; k++) want = seed_step_cpu(want);
    s->bad += s->data[i] != want;
  }
  return NULL;
}

/* The fill (check = 0) or the check (check = 1, returns the mismatches) on 16 threads. */
static size_t seed_parallel(uint32_t *data, size_t words, int check, int passes) {
  enum { T = 16 };
  pthread_t t[T];
  seed_span s[T];
  size_t bad = 0;
  for (int i = 0; i < T; i++) {
    s[i].data = data;
    s[i].from = words * i / T;
    s[i].to = words * (i + 1) / T;
    s[i].bad = 0;
    s[i].check = check;
    s[i].passes = passes;
    pthread_create(&t[i], NULL, seed_work, &s[i]);
  }
  for (int i = 0; i < T; i++) { pthread_join(t[i], NULL); bad += s[i].bad; }
  return bad;
}

static double seed_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
