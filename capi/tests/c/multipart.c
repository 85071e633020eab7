/*
 * A multipart upload through the batch queue: CREATE_MULTIPART (its id comes
 * back in the completion's aux), three UPLOAD_PARTs submitted together (5 MiB,
 * 5 MiB and a short last part, out of order in the ring), COMPLETE_MULTIPART,
 * then a GET and a RANGE_GET of the stored object, every byte checked. Then
 * what must fail, and how: an aborted upload takes no part and cannot be
 * completed, an id never issued and part numbers outside 1..10000 are refused.
 *
 * usage: multipart <endpoint> <access key> <secret key> <bucket> [path [fabric]]
 * With [path] ("http", "rdma-soft", "rdma-verbs"), every part and every read
 * must have moved its bytes over that path; "-" checks nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define PART (5u * 1024 * 1024)
#define LAST 1234567u
#define OBJ (2u * PART + LAST)

/* Submits one entry and reaps its completion. */
static hipObjCompletion_t one(hipObjQueue_t q, hipObjOp_t op) {
  size_t sub = 0, n = 0;
  OK(hipObjQueueSubmit(q, &op, 1, &sub));
  EXPECT(sub == 1);
  hipObjCompletion_t c;
  OK(hipObjQueueReap(q, &c, 1, -1, &n));
  EXPECT(n == 1 && c.userData == op.userData);
  return c;
}

static void expect_ok(const hipObjCompletion_t* c, const char* what) {
  if (c->opError != hipObjSuccess) {
    fprintf(stderr, "%s: %s errno %d class %u\n", what, hipObjGetErrorString(c->opError),
            c->errnum, c->errorClass);
    exit(1);
  }
}

static void expect_path(const hipObjCompletion_t* c, const char* want, const char* what) {
  uint32_t path = (c->flags & HIPOBJ_COMPLETION_PATH_MASK) >> HIPOBJ_COMPLETION_PATH_SHIFT;
  if (want != NULL && strcmp(hipObjPathName(path), want) != 0) {
    fprintf(stderr, "%s went over %s, expected %s\n", what, hipObjPathName(path), want);
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc < 5 || argc > 7) {
    fprintf(stderr, "usage: %s endpoint access secret bucket [path [fabric]]\n", argv[0]);
    return 2;
  }
  const char* want = argc >= 6 && strcmp(argv[5], "-") != 0 ? argv[5] : NULL;
  hipObjConfig_t config = {.endpoint = argv[1], .region = "us-east-1",
                           .accessKey = argv[2], .secretKey = argv[3], .gpuDevice = -1,
                           .fabric = fabric_arg(argc == 7 ? argv[6] : NULL)};
  OK(hipObjInit(&config));

  /* [0, OBJ): the object's bytes; [OBJ, 2 OBJ): where it is read back. */
  unsigned char* mem = aligned_alloc(4096, 2 * (size_t)OBJ);
  EXPECT(mem != NULL);
  for (size_t i = 0; i < OBJ; i++) mem[i] = pattern(i);
  memset(mem + OBJ, 0, OBJ);
  OK(hipObjBufRegister(mem, 2 * (size_t)OBJ));
  hipObjHandle_t h = NULL;
  OK(hipObjOpen(argv[4], "multipart/large.bin", &h));
  hipObjQueue_t q = NULL;
  OK(hipObjQueueCreate(8, &q));

  /* Create: the upload's id is the completion's aux. */
  hipObjCompletion_t c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_CREATE_MULTIPART, .handle = h,
                                             .userData = 1});
  expect_ok(&c, "CREATE_MULTIPART");
  uint64_t upload = c.aux;

  /* Three parts in one submission, the last first. */
  hipObjOp_t parts[3];
  for (uint32_t p = 0; p < 3; p++) {
    uint32_t len = p < 2 ? PART : LAST;
    parts[2 - p] = (hipObjOp_t){.kind = HIPOBJ_OP_UPLOAD_PART, .handle = h,
                                .buf = mem + (size_t)p * PART, .size = len,
                                .uploadId = upload, .partNumber = p + 1,
                                .userData = 10 + p};
  }
  size_t sub = 0, n = 0, seen = 0;
  OK(hipObjQueueSubmit(q, parts, 3, &sub));
  EXPECT(sub == 3);
  while (seen < 3) {
    hipObjCompletion_t got[3];
    OK(hipObjQueueReap(q, got, 3, -1, &n));
    for (size_t k = 0; k < n; k++) {
      uint64_t p = got[k].userData - 10;
      EXPECT(p < 3);
      expect_ok(&got[k], "UPLOAD_PART");
      EXPECT(got[k].bytes == (p < 2 ? PART : LAST));
      expect_path(&got[k], want, "UPLOAD_PART");
    }
    seen += n;
  }

  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_COMPLETE_MULTIPART, .handle = h,
                          .uploadId = upload, .partNumber = 3, .userData = 2});
  expect_ok(&c, "COMPLETE_MULTIPART");
  /* The upload is finished: its id names nothing now. */
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_COMPLETE_MULTIPART, .handle = h,
                          .uploadId = upload, .partNumber = 3, .userData = 3});
  EXPECT(c.opError == hipObjInvalidValue && c.errnum == EBADF &&
         c.errorClass == HIPOBJ_ERRCLASS_LOCAL);

  /* Read it back: the whole object, and a range across the second part boundary. */
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_GET, .handle = h, .buf = mem + OBJ, .size = OBJ,
                          .userData = 4});
  expect_ok(&c, "GET");
  EXPECT(c.bytes == OBJ);
  expect_path(&c, want, "GET");
  EXPECT(memcmp(mem, mem + OBJ, OBJ) == 0);
  memset(mem + OBJ, 0, OBJ);
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_RANGE_GET, .handle = h, .buf = mem + OBJ,
                          .size = 4096, .offset = 2 * PART - 1000, .userData = 5});
  expect_ok(&c, "RANGE_GET");
  EXPECT(c.bytes == 4096);
  EXPECT(c.aux == 0 || c.aux == OBJ);
  expect_path(&c, want, "RANGE_GET");
  EXPECT(memcmp(mem + 2 * PART - 1000, mem + OBJ, 4096) == 0);

  /* Abort: the upload takes no more parts and cannot be completed. */
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_CREATE_MULTIPART, .handle = h, .userData = 6});
  expect_ok(&c, "CREATE_MULTIPART");
  uint64_t doomed = c.aux;
  EXPECT(doomed != upload);
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_UPLOAD_PART, .handle = h, .buf = mem,
                          .size = 4096, .uploadId = doomed, .partNumber = 1, .userData = 7});
  expect_ok(&c, "UPLOAD_PART");
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_ABORT_MULTIPART, .handle = h,
                          .uploadId = doomed, .userData = 8});
  expect_ok(&c, "ABORT_MULTIPART");
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_UPLOAD_PART, .handle = h, .buf = mem,
                          .size = 4096, .uploadId = doomed, .partNumber = 2, .userData = 9});
  EXPECT(c.opError == hipObjInvalidValue && c.errnum == EBADF &&
         c.errorClass == HIPOBJ_ERRCLASS_LOCAL);

  /* Refused before the engine: part numbers outside 1..10000, an id that is no
   * id, an offset (a part's place is its number). */
  hipObjOp_t bad = {.kind = HIPOBJ_OP_UPLOAD_PART, .handle = h, .buf = mem, .size = 4096,
                    .uploadId = upload, .partNumber = 0, .userData = 20};
  c = one(q, bad);
  EXPECT(c.opError == hipObjInvalidValue && c.errorClass == HIPOBJ_ERRCLASS_INVALID);
  bad.partNumber = 10001;
  c = one(q, bad);
  EXPECT(c.opError == hipObjInvalidValue && c.errorClass == HIPOBJ_ERRCLASS_INVALID);
  bad.partNumber = 1;
  bad.uploadId = 1ull << 40;
  c = one(q, bad);
  EXPECT(c.opError == hipObjInvalidValue && c.errorClass == HIPOBJ_ERRCLASS_INVALID);
  bad.uploadId = upload;
  bad.offset = 4096;
  c = one(q, bad);
  EXPECT(c.opError == hipObjInvalidValue && c.errorClass == HIPOBJ_ERRCLASS_INVALID);

  /* The stored object is still the completed one. */
  memset(mem + OBJ, 0, OBJ);
  c = one(q, (hipObjOp_t){.kind = HIPOBJ_OP_GET, .handle = h, .buf = mem + OBJ, .size = OBJ,
                          .userData = 30});
  expect_ok(&c, "GET");
  EXPECT(c.bytes == OBJ && memcmp(mem, mem + OBJ, OBJ) == 0);

  OK(hipObjQueueDestroy(q));
  OK(hipObjClose(h));
  OK(hipObjBufDeregister(mem));
  OK(hipObjShutdown());
  free(mem);
  printf("multipart ok: 3 parts, %u bytes\n", OBJ);
  return 0;
}
