/*
 * Host memory through a node daemon: hipObjBufAlloc gives memory the daemon
 * can reach (a memory file both processes map), put and get move bytes
 * through it, and hipObjBufRegister of malloc'ed memory is refused while
 * attached (the daemon cannot reach it) but works in process.
 *
 * usage: daemon <endpoint> <access key> <secret key> <bucket> <socket|->
 * "-" runs the library in process (config.daemonSocket NULL).
 */
#include <stdint.h>
#include <string.h>

#include "check.h"

#define SIZE (1024 * 1024)

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s endpoint access secret bucket socket|-\n", argv[0]);
    return 2;
  }
  int attached = strcmp(argv[5], "-") != 0;
  hipObjConfig_t config = {
      .endpoint = argv[1],
      .region = "us-east-1",
      .accessKey = argv[2],
      .secretKey = argv[3],
      .gpuDevice = -1,
      .daemonSocket = attached ? argv[5] : NULL,
  };
  OK(hipObjInit(&config));

  /* Bad input first. */
  void* none = NULL;
  CHECK(hipObjBufAlloc(0, &none), hipObjInvalidValue);
  CHECK(hipObjBufAlloc(SIZE, NULL), hipObjInvalidValue);

  unsigned char* buf = NULL;
  OK(hipObjBufAlloc(2 * SIZE, (void**)&buf));
  EXPECT(buf != NULL);
  for (size_t i = 0; i < 2 * SIZE; i++) EXPECT(buf[i] == 0);
  for (size_t i = 0; i < SIZE; i++) buf[i] = pattern(i);
  /* The allocation is registered: registering it again overlaps. */
  CHECK(hipObjBufRegister(buf, SIZE), hipObjBufAlreadyRegistered);

  hipObjHandle_t h;
  OK(hipObjOpen(argv[4], "daemon-c.bin", &h));
  OK(hipObjPut(h, buf, SIZE, 0));
  OK(hipObjGet(h, buf + SIZE, SIZE, 0));
  EXPECT(memcmp(buf, buf + SIZE, SIZE) == 0);
  /* A range lands at its own place. */
  memset(buf + SIZE, 0, SIZE);
  OK(hipObjGet(h, buf + SIZE + 100, 4096, 5000));
  EXPECT(memcmp(buf + SIZE + 100, buf + 5000, 4096) == 0);
  EXPECT(buf[SIZE + 99] == 0 && buf[SIZE + 100 + 4096] == 0);
  OK(hipObjClose(h));

  /* malloc'ed memory: refused through a daemon, registered in process. */
  unsigned char* plain = malloc(SIZE);
  EXPECT(plain != NULL);
  if (attached) {
    CHECK(hipObjBufRegister(plain, SIZE), hipObjOpNotSupported);
    EXPECT(strstr(hipObjGetLastErrorMessage(), "hipObjBufAlloc") != NULL);
  } else {
    OK(hipObjBufRegister(plain, SIZE));
    OK(hipObjBufDeregister(plain));
  }
  free(plain);

  OK(hipObjBufDeregister(buf));
  CHECK(hipObjBufDeregister(buf), hipObjBufNotRegistered);
  OK(hipObjShutdown());
  printf("daemon ok (%s)\n", attached ? "attached" : "in process");
  return 0;
}
