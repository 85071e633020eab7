/*
 * The batch extension: 1,000 range-gets through one queue, every byte checked,
 * plus a whole-object GET, a PUT, an UPLOAD_PART of an upload never created
 * (completes hipObjInvalidValue, EBADF) and an entry naming unregistered memory.
 *
 * usage: batch <endpoint> <access key> <secret key> <bucket> [path [fabric]]
 * With [path] ("http", "rdma-soft", "rdma-verbs"), every successful completion
 * must name that path, and hipObjGetStats must agree; "-" checks nothing.
 * [fabric] ("auto", "http", "soft", "verbs") sets hipObjConfig_t.fabric.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define OBJ (512 * 1024)
#define OPS 1000
#define SLOT 4096
#define DEPTH 64
#define EXTRA 4

static uint64_t lcg = 0x2545F4914F6CDD1DULL;
static uint64_t next_rand(void) {
  lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  return lcg >> 33;
}

/* The completion's path field names `want` (NULL: anything), and the older
 * HTTP / RDMA bits agree with it. */
static int completion_path_is(const hipObjCompletion_t* c, const char* want) {
  uint32_t path = (c->flags & HIPOBJ_COMPLETION_PATH_MASK) >> HIPOBJ_COMPLETION_PATH_SHIFT;
  int http = (c->flags & HIPOBJ_COMPLETION_HTTP) != 0;
  int rdma = (c->flags & HIPOBJ_COMPLETION_RDMA) != 0;
  if (http != (path == HIPOBJ_PATH_HTTP)) return 0;
  if (rdma != (path == HIPOBJ_PATH_RDMA_SOFT || path == HIPOBJ_PATH_RDMA_VERBS)) return 0;
  if (want != NULL && strcmp(hipObjPathName(path), want) != 0) {
    fprintf(stderr, "completion %llu went over %s, expected %s\n",
            (unsigned long long)c->userData, hipObjPathName(path), want);
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 5 || argc > 7) return 2;
  const char* want = argc >= 6 && strcmp(argv[5], "-") != 0 ? argv[5] : NULL;
  uint64_t ok_bytes = 0;
  hipObjConfig_t config = {.endpoint = argv[1], .accessKey = argv[2],
                           .secretKey = argv[3], .gpuDevice = -1,
                           .fabric = fabric_arg(argc == 7 ? argv[6] : NULL)};
  OK(hipObjInit(&config));

  /* [0, OBJ): the object's bytes; then OPS slots of SLOT bytes; then a GET slot. */
  size_t total = OBJ + (size_t)OPS * SLOT + OBJ;
  unsigned char* mem = aligned_alloc(4096, total);
  EXPECT(mem != NULL);
  memset(mem, 0, total);
  for (size_t i = 0; i < OBJ; i++) mem[i] = pattern(i);
  OK(hipObjBufRegister(mem, total));

  hipObjHandle_t h = NULL;
  OK(hipObjOpen(argv[4], "batch/object.bin", &h));
  hipObjQueue_t q = NULL;
  OK(hipObjQueueCreate(DEPTH, &q));

  /* PUT through the queue first, and wait for it. */
  hipObjOp_t put = {.kind = HIPOBJ_OP_PUT, .handle = h, .buf = mem, .size = OBJ,
                    .userData = 900000};
  size_t sub = 0, n = 0;
  OK(hipObjQueueSubmit(q, &put, 1, &sub));
  EXPECT(sub == 1);
  hipObjCompletion_t c[DEPTH];
  OK(hipObjQueueReap(q, c, DEPTH, 30000, &n));
  EXPECT(n == 1 && c[0].userData == 900000);
  if (c[0].opError != hipObjSuccess) {
    fprintf(stderr, "PUT failed: %s errno %d class %u\n",
            hipObjGetErrorString(c[0].opError), c[0].errnum, c[0].errorClass);
    return 1;
  }
  EXPECT(c[0].bytes == OBJ);
  EXPECT(completion_path_is(&c[0], want));
  ok_bytes += OBJ;

  /* OPS range-gets of 1..SLOT bytes at random object offsets, each into its slot. */
  static hipObjOp_t ops[OPS + EXTRA];
  static uint64_t want_off[OPS], want_len[OPS];
  static int seen[OPS + EXTRA];
  for (int i = 0; i < OPS; i++) {
    uint64_t len = 1 + next_rand() % SLOT;
    uint64_t off = next_rand() % (OBJ - len + 1);
    want_off[i] = off;
    want_len[i] = len;
    ops[i] = (hipObjOp_t){.kind = HIPOBJ_OP_RANGE_GET, .handle = h,
                          .buf = mem + OBJ + (size_t)i * SLOT, .size = len,
                          .offset = off, .userData = (uint64_t)i};
  }
  unsigned char* whole = mem + OBJ + (size_t)OPS * SLOT;
  ops[OPS] = (hipObjOp_t){.kind = HIPOBJ_OP_GET, .handle = h, .buf = whole,
                          .size = OBJ, .userData = OPS};
  ops[OPS + 1] = (hipObjOp_t){.kind = HIPOBJ_OP_UPLOAD_PART, .handle = h,
                              .buf = mem, .size = 4096, .uploadId = 4242,
                              .partNumber = 1, .userData = OPS + 1};
  unsigned char outside[64];
  ops[OPS + 2] = (hipObjOp_t){.kind = HIPOBJ_OP_RANGE_GET, .handle = h,
                              .buf = outside, .size = sizeof outside,
                              .userData = OPS + 2};
  ops[OPS + 3] = (hipObjOp_t){.kind = HIPOBJ_OP_RANGE_GET, .handle = h,
                              .buf = mem + OBJ, .size = SLOT, .offset = OBJ,
                              .userData = OPS + 3, .flags = HIPOBJ_OPF_NO_RETRY};
  /* The last one reads past the object's end into slot 0's bytes: submit it
   * only after slot 0's range-get completed (it is checked separately below). */
  const size_t first_batch = OPS + 3;

  size_t next = 0, done = 0, partial_submits = 0;
  while (done < first_batch) {
    if (next < first_batch) {
      OK(hipObjQueueSubmit(q, ops + next, first_batch - next, &sub));
      if (sub < first_batch - next) partial_submits++;
      next += sub;
    }
    OK(hipObjQueueReap(q, c, DEPTH, 30000, &n));
    EXPECT(n > 0);
    for (size_t k = 0; k < n; k++) {
      uint64_t u = c[k].userData;
      EXPECT(u < first_batch && !seen[u]);
      seen[u] = 1;
      done++;
      if (u < OPS) {
        if (c[k].opError != hipObjSuccess) {
          fprintf(stderr, "op %llu: %s errno %d class %u\n", (unsigned long long)u,
                  hipObjGetErrorString(c[k].opError), c[k].errnum, c[k].errorClass);
          return 1;
        }
        EXPECT(c[k].bytes == want_len[u]);
        EXPECT(completion_path_is(&c[k], want));
        ok_bytes += want_len[u];
      } else if (u == OPS) {
        EXPECT(c[k].opError == hipObjSuccess && c[k].bytes == OBJ);
        EXPECT(completion_path_is(&c[k], want));
        ok_bytes += OBJ;
      } else if (u == OPS + 1) {
        /* A part of an upload never created: the engine knows no such id. */
        EXPECT(c[k].opError == hipObjInvalidValue && c[k].errnum == EBADF);
        EXPECT(c[k].errorClass == HIPOBJ_ERRCLASS_LOCAL);
      } else if (u == OPS + 2) {
        EXPECT(c[k].opError == hipObjBufNotRegistered && c[k].errnum == EFAULT);
        EXPECT(c[k].errorClass == HIPOBJ_ERRCLASS_LOCAL);
      }
    }
  }
  EXPECT(partial_submits > 0); /* 1,003 entries cannot fit a 64-deep ring at once */

  /* Every byte of every range. */
  for (int i = 0; i < OPS; i++) {
    const unsigned char* s = mem + OBJ + (size_t)i * SLOT;
    for (uint64_t j = 0; j < want_len[i]; j++) {
      if (s[j] != pattern(want_off[i] + j)) {
        fprintf(stderr, "op %d byte %llu wrong\n", i, (unsigned long long)j);
        return 1;
      }
    }
    for (uint64_t j = want_len[i]; j < SLOT; j++) EXPECT(s[j] == 0);
  }
  EXPECT(memcmp(whole, mem, OBJ) == 0);

  /* A range past the object's end fails (S3 416) without writing bytes. */
  memset(mem + OBJ, 0xAB, SLOT);
  OK(hipObjQueueSubmit(q, ops + OPS + 3, 1, &sub));
  EXPECT(sub == 1);
  OK(hipObjQueueReap(q, c, DEPTH, 30000, &n));
  EXPECT(n == 1 && c[0].userData == OPS + 3);
  EXPECT(c[0].opError == hipObjS3Error);
  EXPECT(c[0].errorClass == HIPOBJ_ERRCLASS_CLIENT);
  EXPECT(mem[OBJ] == 0xAB);

  /* Nothing left: a zero-timeout reap returns 0 completions, successfully. */
  OK(hipObjQueueReap(q, c, DEPTH, 0, &n));
  EXPECT(n == 0);

  /* 1,002 successes over the expected path; UPLOAD_PART, unregistered, 416 failed. */
  expect_stats(want, OPS + 2, ok_bytes, 3);

  OK(hipObjQueueDestroy(q));
  CHECK(hipObjQueueReap(q, c, DEPTH, 0, &n), hipObjInvalidValue);
  OK(hipObjClose(h));
  OK(hipObjBufDeregister(mem));
  OK(hipObjShutdown());
  free(mem);
  printf("batch ok %d range-gets, %zu partial submits\n", OPS, partial_submits);
  return 0;
}
