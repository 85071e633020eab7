/* Assertion helpers shared by the C test programs. */
#ifndef HIPOBJ_TEST_CHECK_H
#define HIPOBJ_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hipobj.h"

/* Fails the program unless `call` returns opError `expected`. */
#define CHECK(call, expected)                                                  \
  do {                                                                         \
    hipObjError_t e_ = (call);                                                 \
    if (e_.opError != (expected)) {                                            \
      fprintf(stderr, "%s:%d: %s -> %d (%s), expected %d\n  detail: %s\n",     \
              __FILE__, __LINE__, #call, (int)e_.opError,                      \
              hipObjGetErrorString(e_.opError), (int)(expected),               \
              hipObjGetLastErrorMessage());                                    \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define OK(call) CHECK(call, hipObjSuccess)

/* Fails the program unless `cond` holds. */
#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);      \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Deterministic byte of a test object at position i. */
static inline unsigned char pattern(unsigned long long i) {
  unsigned long long x = i * 0x9E3779B97F4A7C15ULL;
  return (unsigned char)(x >> 56) ^ (unsigned char)i;
}

/* HIPOBJ_FABRIC_* for "auto", "http", "soft", "verbs" (a program argument);
 * NULL is AUTO; anything else ends the program. */
static inline uint32_t fabric_arg(const char* name) {
  if (name == NULL || strcmp(name, "auto") == 0) return HIPOBJ_FABRIC_AUTO;
  if (strcmp(name, "http") == 0) return HIPOBJ_FABRIC_HTTP;
  if (strcmp(name, "soft") == 0) return HIPOBJ_FABRIC_SOFT;
  if (strcmp(name, "verbs") == 0) return HIPOBJ_FABRIC_VERBS;
  fprintf(stderr, "unknown fabric %s (auto, http, soft, verbs)\n", name);
  exit(2);
}

/* Fails unless the calling thread's latest hipObjGet/hipObjPut went over the
 * path named `want` ("http", "rdma-soft", "rdma-verbs"); NULL checks nothing. */
static inline void expect_last_path(const char* want, int line) {
  if (want == NULL) return;
  uint32_t path = 99, dialect = 99;
  OK(hipObjGetLastOpInfo(&path, &dialect));
  if (strcmp(hipObjPathName(path), want) != 0) {
    fprintf(stderr, "line %d: op went over %s (dialect %s), expected %s\n", line,
            hipObjPathName(path), hipObjDialectName(dialect), want);
    exit(1);
  }
}

/* Fails unless exactly `ok_ops` operations succeeded since hipObjInit, all of
 * them over the path named `want` and together moving `ok_bytes` bytes, and
 * `failed` failed; prints "paths: ..." and "dialects: ..." lines. */
static inline void expect_stats(const char* want, uint64_t ok_ops, uint64_t ok_bytes,
                                uint64_t failed) {
  hipObjStats_t st;
  memset(&st, 0xEE, sizeof st);
  OK(hipObjGetStats(&st));
  printf("paths:");
  for (uint32_t p = 0; p < HIPOBJ_STATS_PATHS; p++)
    printf(" %s=%llu/%lluB", hipObjPathName(p), (unsigned long long)st.opsByPath[p],
           (unsigned long long)st.bytesByPath[p]);
  printf("\ndialects:");
  for (uint32_t d = 0; d < HIPOBJ_STATS_DIALECTS; d++)
    if (st.opsByDialect[d]) printf(" %s=%llu", hipObjDialectName(d),
                                   (unsigned long long)st.opsByDialect[d]);
  printf("\nops %llu failed %llu\n", (unsigned long long)st.ops,
         (unsigned long long)st.failedOps);
  EXPECT(st.failedOps == failed && st.ops == ok_ops + failed);
  if (want == NULL) return;
  int found = 0;
  for (uint32_t p = 0; p < HIPOBJ_STATS_PATHS; p++) {
    if (strcmp(hipObjPathName(p), want) == 0) {
      found = 1;
      EXPECT(st.opsByPath[p] == ok_ops && st.bytesByPath[p] == ok_bytes);
    } else {
      EXPECT(st.opsByPath[p] == 0 && st.bytesByPath[p] == 0);
    }
  }
  EXPECT(found);
}

#endif
