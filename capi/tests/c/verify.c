/*
 * The success rule of uploads (issue 33, docs/protocol.md "What proves a PUT"):
 * a PUT no server checksum proved succeeds unverified (hipObjGetLastOpVerified
 * says 0; a batch PUT's completion lacks HIPOBJ_COMPLETION_VERIFIED), and with
 * HIPOBJ_CONFIG_VERIFY it fails with hipObjIntegrityError; a proven PUT is
 * verified either way.
 *
 * usage: verify <endpoint> <access key> <secret key> <bucket> <proven|unproven>
 * (whether the endpoint's PUT answers echo our CRC64NVME). Prints "verify ok".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { SIZE = 200000 };

/* The last-error message of the latest failed hipObjPut. */
static char put_error[1024];

/* One PUT of buf as `key`, then one batch PUT of it as `key`-batch; returns the
 * synchronous call's result and writes the proof of both. */
static hipObjOpError_t put_both(unsigned char* buf, const char* bucket, const char* key,
                                int* sync_verified, int* batch_verified) {
  hipObjHandle_t h = NULL;
  OK(hipObjOpen(bucket, key, &h));
  hipObjError_t e = hipObjPut(h, buf, SIZE, 0);
  if (e.opError != hipObjSuccess) {
    snprintf(put_error, sizeof put_error, "%s", hipObjGetLastErrorMessage());
  }
  *sync_verified = -1;
  OK(hipObjGetLastOpVerified(sync_verified));
  OK(hipObjClose(h));

  char batch_key[256];
  snprintf(batch_key, sizeof batch_key, "%s-batch", key);
  OK(hipObjOpen(bucket, batch_key, &h));
  hipObjQueue_t q = NULL;
  OK(hipObjQueueCreate(4, &q));
  hipObjOp_t op = {.kind = HIPOBJ_OP_PUT, .handle = h, .buf = buf, .size = SIZE,
                   .userData = 7};
  size_t n = 0;
  OK(hipObjQueueSubmit(q, &op, 1, &n));
  EXPECT(n == 1);
  hipObjCompletion_t c;
  n = 0;
  OK(hipObjQueueReap(q, &c, 1, 60000, &n));
  EXPECT(n == 1 && c.userData == 7);
  /* The batch reports the proof; it never fails an unproven success itself. */
  EXPECT(c.opError == hipObjSuccess);
  *batch_verified = (c.flags & HIPOBJ_COMPLETION_VERIFIED) != 0;
  OK(hipObjQueueDestroy(q));
  OK(hipObjClose(h));
  return e.opError;
}

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const char *ep = argv[1], *ak = argv[2], *sk = argv[3], *bucket = argv[4];
  int proven = strcmp(argv[5], "proven") == 0;
  EXPECT(proven || strcmp(argv[5], "unproven") == 0);
  unsigned char* buf = aligned_alloc(4096, 256 * 1024);
  EXPECT(buf != NULL);
  for (unsigned long long i = 0; i < SIZE; i++) buf[i] = pattern(i);

  int sync_verified = -1, batch_verified = -1;
  /* Default: an unproven PUT succeeds, and says so. */
  hipObjConfig_t cfg = {.endpoint = ep, .accessKey = ak, .secretKey = sk,
                        .region = "us-east-1", .gpuDevice = -1,
                        .fabric = HIPOBJ_FABRIC_HTTP};
  OK(hipObjInit(&cfg));
  OK(hipObjBufRegister(buf, 256 * 1024));
  EXPECT(put_both(buf, bucket, "default", &sync_verified, &batch_verified) == hipObjSuccess);
  printf("default: verified %d, batch verified %d\n", sync_verified, batch_verified);
  EXPECT(sync_verified == proven && batch_verified == proven);
  OK(hipObjBufDeregister(buf));
  OK(hipObjShutdown());

  /* HIPOBJ_CONFIG_VERIFY: an unproven PUT is an integrity error. */
  cfg.flags = HIPOBJ_CONFIG_VERIFY;
  OK(hipObjInit(&cfg));
  OK(hipObjBufRegister(buf, 256 * 1024));
  hipObjOpError_t e = put_both(buf, bucket, "strict", &sync_verified, &batch_verified);
  printf("verify: %s, verified %d: %s\n", hipObjGetErrorString(e), sync_verified,
         e == hipObjSuccess ? "" : put_error);
  if (proven) {
    EXPECT(e == hipObjSuccess && sync_verified == 1);
  } else {
    EXPECT(e == hipObjIntegrityError && sync_verified == 0);
    EXPECT(strstr(put_error, "unverified") != NULL);
  }
  OK(hipObjBufDeregister(buf));
  OK(hipObjShutdown());

  int v = 0;
  CHECK(hipObjGetLastOpVerified(NULL), hipObjInvalidValue);
  OK(hipObjGetLastOpVerified(&v));
  free(buf);
  printf("verify ok\n");
  return 0;
}
