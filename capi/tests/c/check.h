/* Assertion helpers shared by the C test programs. */
#ifndef HIPOBJ_TEST_CHECK_H
#define HIPOBJ_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
