/*
 * The hipObject Quick Start, with host memory and a handle from hipObjOpen:
 * init with endpoint and keys, register a buffer, open, put, get, verify,
 * close, deregister, shutdown.
 *
 * usage: quickstart <endpoint> <access key> <secret key> <bucket> [path [dialect [fabric]]]
 * With [path] ("http", "rdma-soft", "rdma-verbs"), every operation must have
 * moved its bytes over that path (hipObjGetLastOpInfo, hipObjGetStats); "-"
 * checks nothing. [dialect] is a HIPOBJ_DIALECT_* number for
 * hipObjConfig_t.dialect (default 0); [fabric] ("auto", "http", "soft",
 * "verbs") sets hipObjConfig_t.fabric (default auto).
 */
#include <stdint.h>
#include <string.h>

#include "check.h"

#define SIZE (1024 * 1024)

int main(int argc, char** argv) {
  if (argc < 5 || argc > 8) {
    fprintf(stderr, "usage: %s endpoint access secret bucket [path [dialect [fabric]]]\n", argv[0]);
    return 2;
  }
  const char* want = argc >= 6 && strcmp(argv[5], "-") != 0 ? argv[5] : NULL;
  uint32_t dialect = argc >= 7 ? (uint32_t)strtoul(argv[6], NULL, 10) : HIPOBJ_DIALECT_AUTO;
  uint32_t fabric = fabric_arg(argc == 8 ? argv[7] : NULL);
  printf("%s\n", hipObjGetVersionString());

  /* One registration holding the source (first half) and destination (second). */
  unsigned char* buf = aligned_alloc(4096, 2 * SIZE);
  EXPECT(buf != NULL);
  for (size_t i = 0; i < SIZE; i++) buf[i] = pattern(i);
  memset(buf + SIZE, 0, SIZE);

  hipObjConfig_t config = {
      .endpoint = argv[1],
      .region = "us-east-1",
      .accessKey = argv[2],
      .secretKey = argv[3],
      .gpuDevice = -1,
      .dialect = dialect,
      .fabric = fabric,
  };
  OK(hipObjInit(&config));
  OK(hipObjBufRegister(buf, 2 * SIZE));

  hipObjHandle_t handle = NULL;
  OK(hipObjOpen(argv[4], "quickstart/model.bin", &handle));
  EXPECT(handle != NULL);

  OK(hipObjPut(handle, buf, SIZE, 0));
  expect_last_path(want, __LINE__);
  OK(hipObjGet(handle, buf + SIZE, SIZE, 0));
  expect_last_path(want, __LINE__);
  EXPECT(memcmp(buf, buf + SIZE, SIZE) == 0);

  /* buf may point anywhere inside the registration; offset is the object's. */
  memset(buf + SIZE, 0, SIZE);
  OK(hipObjGet(handle, buf + SIZE + 12345, 5000, 777777));
  expect_last_path(want, __LINE__);
  for (size_t i = 0; i < 5000; i++) EXPECT(buf[SIZE + 12345 + i] == pattern(777777 + i));
  EXPECT(buf[SIZE + 12344] == 0 && buf[SIZE + 12345 + 5000] == 0);

  /* A second object from the middle of the source half. */
  hipObjHandle_t tail = NULL;
  OK(hipObjOpen(argv[4], "quickstart/tail.bin", &tail));
  OK(hipObjPut(tail, buf + 1000, 3000, 0));
  memset(buf + SIZE, 0, 3000);
  OK(hipObjGet(tail, buf + SIZE, 3000, 0));
  expect_last_path(want, __LINE__);
  EXPECT(memcmp(buf + 1000, buf + SIZE, 3000) == 0);
  OK(hipObjClose(tail));

  /* Five operations, every one over the expected path, none failed. */
  expect_stats(want, 5, 2ull * SIZE + 5000 + 2 * 3000, 0);

  OK(hipObjClose(handle));
  OK(hipObjBufDeregister(buf));
  OK(hipObjShutdown());

  /* After shutdown everything reports it. */
  CHECK(hipObjBufRegister(buf, SIZE), hipObjNotInitialized);
  CHECK(hipObjShutdown(), hipObjNotInitialized);
  /* And a second session works. */
  OK(hipObjInit(&config));
  OK(hipObjShutdown());

  free(buf);
  printf("quickstart ok\n");
  return 0;
}
