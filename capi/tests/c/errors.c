/*
 * Error paths: not initialized, bad arguments, unregistered buffers, sizes too
 * large, unsupported requests, S3 errors named through the last-error message.
 *
 * usage: errors <endpoint> <access key> <secret key> <bucket> [path]
 * With [path], the S3 error messages must name it (the path the endpoint's
 * successful ops took) and the dialect.
 */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void expect_detail(const char* needle) {
  const char* d = hipObjGetLastErrorMessage();
  if (d == NULL || strstr(d, needle) == NULL) {
    fprintf(stderr, "last error message %s lacks \"%s\"\n", d ? d : "(null)", needle);
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) return 2;
  const char* want = argc == 6 ? argv[5] : NULL;
  const char *ep = argv[1], *ak = argv[2], *sk = argv[3], *bucket = argv[4];
  unsigned char* buf = aligned_alloc(4096, 1 << 20);
  EXPECT(buf != NULL);
  hipObjHandle_t h = NULL;

  /* Not initialized. */
  CHECK(hipObjBufRegister(buf, 4096), hipObjNotInitialized);
  expect_detail("hipObjInit");
  CHECK(hipObjOpen(bucket, "k", &h), hipObjNotInitialized);
  CHECK(hipObjShutdown(), hipObjNotInitialized);
  CHECK(hipObjBufDeregister(buf), hipObjNotInitialized);
  hipObjQueue_t q = NULL;
  CHECK(hipObjQueueCreate(8, &q), hipObjNotInitialized);

  /* Bad configurations. */
  CHECK(hipObjInit(NULL), hipObjInvalidValue);
  hipObjConfig_t bad = {.endpoint = ep, .accessKey = ak, .secretKey = sk,
                        .gpuDevice = -1, .flags = 0x80};
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("flags");
  bad.flags = 0;
  bad.gpuDevice = -2;
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  bad.gpuDevice = -1;
  /* https: the engine speaks TLS; a CA bundle it cannot use is a bad value, named. */
  bad.endpoint = "https://127.0.0.1:1";
  setenv("AWS_CA_BUNDLE", "/nonexistent/hipobj-ca.pem", 1);
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("hipobj-ca.pem");
  unsetenv("AWS_CA_BUNDLE");
  OK(hipObjInit(&bad));
  OK(hipObjShutdown());
  /* nicHint must name an RDMA device of this host (by name or PCI address). */
  bad.endpoint = ep;
  bad.nicHint = "hipobj-no-such-nic0";
  CHECK(hipObjInit(&bad), hipObjNicNotFound);
  expect_detail("hipobj-no-such-nic0");
  bad.nicHint = "";
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  bad.nicHint = NULL;
  /* fabric must be a HIPOBJ_FABRIC_* value. */
  bad.fabric = HIPOBJ_FABRIC_VERBS + 1;
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("config.fabric");
  bad.fabric = HIPOBJ_FABRIC_HTTP;
  /* HIPOBJ_LOG must name a level. */
  setenv("HIPOBJ_LOG", "loud", 1);
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("HIPOBJ_LOG");
  unsetenv("HIPOBJ_LOG");
  OK(hipObjInit(&bad));
  OK(hipObjShutdown());
  /* Striping: a HIPOBJ_STRIPE_* policy and a chunk of at most 5 GiB (S3's largest
   * part); zero in any field is the default. */
  bad.stripePolicy = HIPOBJ_STRIPE_ALL + 1;
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("config.stripePolicy");
  bad.stripePolicy = HIPOBJ_STRIPE_ALL;
  bad.stripeChunk = (5ull << 30) + 1;
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("config.stripeChunk");
  bad.stripeChunk = 5ull << 30;
  bad.stripeThreshold = 16ull << 20;
  OK(hipObjInit(&bad));
  OK(hipObjShutdown());
  bad.stripePolicy = HIPOBJ_STRIPE_OFF;
  bad.stripeChunk = 0;
  bad.stripeThreshold = 0;
  OK(hipObjInit(&bad));
  OK(hipObjShutdown());
  bad.stripePolicy = HIPOBJ_STRIPE_DEFAULT;
  bad.fabric = HIPOBJ_FABRIC_AUTO;
  /* A node daemon socket nobody listens on: init fails, naming the socket. */
  bad.daemonSocket = "/nonexistent/hipobj-errors-test.sock";
  CHECK(hipObjInit(&bad), hipObjNetworkError);
  expect_detail("/nonexistent/hipobj-errors-test.sock");
  bad.daemonSocket = "";
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("config.daemonSocket");
  bad.daemonSocket = NULL;
  /* cuObject descriptors come from a provider: the dialect without one is refused. */
  bad.dialect = HIPOBJ_DIALECT_CUOBJECT;
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("dcTokenProvider");
  bad.dialect = HIPOBJ_DIALECT_CUOBJECT + 1;
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("config.dialect");
  bad.dialect = HIPOBJ_DIALECT_AUTO;
  bad.endpoint = "ftp://x";
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  bad.endpoint = NULL; /* and no AWS_ENDPOINT_URL in the environment */
  CHECK(hipObjInit(&bad), hipObjInvalidValue);
  expect_detail("endpoint");

  hipObjConfig_t config = {.endpoint = ep, .region = "us-east-1", .accessKey = ak,
                           .secretKey = sk, .gpuDevice = -1};
  OK(hipObjInit(&config));
  EXPECT(strcmp(hipObjGetLastErrorMessage(), "") == 0);
  CHECK(hipObjInit(&config), hipObjAlreadyInitialized);

  /* Registration. */
  CHECK(hipObjBufRegister(NULL, 4096), hipObjInvalidValue);
  CHECK(hipObjBufRegister(buf, 0), hipObjInvalidValue);
  CHECK(hipObjBufRegister(buf, (size_t)HIPOBJ_MAX_REGISTRATION + 1), hipObjSizeTooLarge);
  expect_detail("4 GiB");
  OK(hipObjBufRegister(buf, 1 << 20));
  CHECK(hipObjBufRegister(buf, 1 << 20), hipObjBufAlreadyRegistered);
  CHECK(hipObjBufRegister(buf + 4096, 4096), hipObjBufAlreadyRegistered);
  CHECK(hipObjBufDeregister(buf + 4096), hipObjBufNotRegistered);
  expect_detail("not its start");

  /* Handles. */
  CHECK(hipObjOpen(NULL, "k", &h), hipObjInvalidValue);
  CHECK(hipObjOpen(bucket, NULL, &h), hipObjInvalidValue);
  CHECK(hipObjOpen(bucket, "k", NULL), hipObjInvalidValue);
  CHECK(hipObjOpen("Bad_Bucket!", "k", &h), hipObjInvalidValue);
  CHECK(hipObjOpen(bucket, "", &h), hipObjInvalidValue);
  OK(hipObjOpen(bucket, "errors/object.bin", &h));
  for (int i = 0; i < 8192; i++) buf[i] = pattern(i);
  OK(hipObjPut(h, buf, 8192, 0));

  /* Transfers with bad arguments. */
  unsigned char stack[256];
  CHECK(hipObjGet(h, stack, sizeof stack, 0), hipObjBufNotRegistered);
  expect_detail("not inside a registered buffer");
  CHECK(hipObjGet(h, buf + (1 << 20) - 100, 101, 0), hipObjSizeTooLarge);
  CHECK(hipObjGet(h, buf, (size_t)2 << 20, 0), hipObjSizeTooLarge);
  CHECK(hipObjGet(h, buf, 0, 0), hipObjInvalidValue);
  CHECK(hipObjGet(h, buf, 10, -1), hipObjInvalidValue);
  CHECK(hipObjGet(h, NULL, 10, 0), hipObjInvalidValue);
  CHECK(hipObjGet(NULL, buf, 10, 0), hipObjInvalidValue);
  CHECK(hipObjPut(h, buf, 10, 5), hipObjOpNotSupported);
  expect_detail("multipart");

  /* S3 errors, named. */
  CHECK(hipObjGet(h, buf, 100, 8190), hipObjS3Error); /* object ends at 8192 */
  hipObjHandle_t missing = NULL;
  OK(hipObjOpen(bucket, "errors/no-such-key", &missing));
  CHECK(hipObjGet(missing, buf, 10, 0), hipObjS3Error);
  expect_detail("NoSuchKey");
  expect_detail("dialect");
  if (want != NULL) expect_detail(want);
  printf("no such key: %s\n", hipObjGetLastErrorMessage());
  hipObjHandle_t nobucket = NULL;
  OK(hipObjOpen("no-such-bucket-here", "k", &nobucket));
  CHECK(hipObjGet(nobucket, buf, 10, 0), hipObjS3Error);
  expect_detail("NoSuchBucket");
  printf("detail: %s\n", hipObjGetLastErrorMessage());

  /* Closed handles. */
  OK(hipObjClose(missing));
  CHECK(hipObjClose(missing), hipObjInvalidValue);
  CHECK(hipObjGet(missing, buf, 10, 0), hipObjInvalidValue);
  CHECK(hipObjClose((hipObjHandle_t)(uintptr_t)0xdead0000), hipObjInvalidValue);

  /* Tokens: none exported (the engine mints its own); arguments are still checked first. */
  char* tok = (char*)1;
  CHECK(hipObjGetRdmaToken(buf, 4096, HIPOBJ_RDMA_OP_GET, &tok), hipObjRdmaError);
  EXPECT(tok == NULL);
  expect_detail("no RDMA token for the caller");
  CHECK(hipObjGetRdmaToken(stack, 16, HIPOBJ_RDMA_OP_GET, &tok), hipObjBufNotRegistered);
  CHECK(hipObjGetRdmaToken(buf, (size_t)2 << 20, HIPOBJ_RDMA_OP_PUT, &tok), hipObjSizeTooLarge);
  CHECK(hipObjGetRdmaToken(buf, 16, 7, &tok), hipObjInvalidValue);
  CHECK(hipObjGetRdmaToken(buf, 16, HIPOBJ_RDMA_OP_GET, NULL), hipObjInvalidValue);
  CHECK(hipObjPutRdmaToken((char*)stack), hipObjInvalidValue);
  CHECK(hipObjPutRdmaToken(NULL), hipObjInvalidValue);

  /* Queue argument checks. */
  CHECK(hipObjQueueCreate(0, &q), hipObjInvalidValue);
  CHECK(hipObjQueueCreate(8, NULL), hipObjInvalidValue);
  OK(hipObjQueueCreate(8, &q));
  size_t n = 99;
  CHECK(hipObjQueueSubmit(q, NULL, 1, &n), hipObjInvalidValue);
  OK(hipObjQueueSubmit(q, NULL, 0, &n));
  EXPECT(n == 0);
  hipObjOp_t op = {.kind = 42, .handle = h, .buf = buf, .size = 1, .userData = 7};
  OK(hipObjQueueSubmit(q, &op, 1, &n));
  EXPECT(n == 1);
  hipObjCompletion_t c;
  OK(hipObjQueueReap(q, &c, 1, 1000, &n));
  EXPECT(n == 1 && c.userData == 7 && c.opError == hipObjInvalidValue);
  op.kind = HIPOBJ_OP_RANGE_GET;
  op.reserved = 1;
  OK(hipObjQueueSubmit(q, &op, 1, &n));
  OK(hipObjQueueReap(q, &c, 1, 1000, &n));
  EXPECT(n == 1 && c.opError == hipObjInvalidValue);
  CHECK(hipObjQueueReap(q, NULL, 1, 0, &n), hipObjInvalidValue);
  CHECK(hipObjQueueReap(NULL, &c, 1, 0, &n), hipObjInvalidValue);
  OK(hipObjQueueDestroy(q));
  CHECK(hipObjQueueDestroy(q), hipObjInvalidValue);

  /* Error strings exist for every code, and for unknown ones. */
  for (int e = hipObjSuccess; e <= hipObjIntegrityError; e++) {
    const char* s = hipObjGetErrorString((hipObjOpError_t)e);
    EXPECT(s != NULL && strlen(s) > 0);
  }
  EXPECT(strstr(hipObjGetErrorString((hipObjOpError_t)999), "unknown") != NULL);

  OK(hipObjClose(h));
  OK(hipObjShutdown());

  /* Wrong credentials: the server's SignatureDoesNotMatch is named. */
  hipObjConfig_t wrong = config;
  wrong.secretKey = "not-the-secret";
  OK(hipObjInit(&wrong));
  OK(hipObjBufRegister(buf, 4096));
  OK(hipObjOpen(bucket, "errors/object.bin", &h));
  CHECK(hipObjGet(h, buf, 100, 0), hipObjS3Error);
  expect_detail("SignatureDoesNotMatch");
  printf("wrong credentials: %s\n", hipObjGetLastErrorMessage());
  CHECK(hipObjPut(h, buf, 100, 0), hipObjS3Error);
  expect_detail("SignatureDoesNotMatch");
  wrong.secretKey = sk;
  OK(hipObjShutdown()); /* deregisters the buffer too */

  /* Unknown access key. */
  wrong.accessKey = "nobody";
  OK(hipObjInit(&wrong));
  OK(hipObjBufRegister(buf, 4096));
  OK(hipObjOpen(bucket, "errors/object.bin", &h));
  CHECK(hipObjGet(h, buf, 100, 0), hipObjS3Error);
  expect_detail("InvalidAccessKeyId");
  OK(hipObjShutdown());

  /* Nothing listens here: a network error after retries. */
  hipObjConfig_t dead = config;
  dead.endpoint = "http://127.0.0.1:9";
  OK(hipObjInit(&dead));
  OK(hipObjBufRegister(buf, 4096));
  OK(hipObjOpen(bucket, "k", &h));
  CHECK(hipObjGet(h, buf, 100, 0), hipObjNetworkError);
  OK(hipObjShutdown());

  free(buf);
  printf("errors ok\n");
  return 0;
}
