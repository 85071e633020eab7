/*
 * cuObject from C: a DC token provider (hipObjConfig_t.dcTokenProvider +
 * dcTokenContext) minting descriptors as cuMemObjGetRDMAToken would, with
 * hipObjConfig_t.dialect = HIPOBJ_DIALECT_CUOBJECT (or AUTO: negotiation ends
 * at cuObject when the endpoint refuses the RC dialects).
 *
 * usage: cuobject <endpoint> <access key> <secret key> <bucket> <dialect> <mode>
 * mode "mint": the provider mints a valid descriptor for exactly the range asked;
 * mode "refuse": it returns non-zero. The endpoint (our gateway without an RDMA
 * target) cannot serve DC, so every op must complete over http, byte-exact, and
 * the provider must have been asked exactly for each op's buffer range and
 * direction, on a thread other than the caller's.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define SIZE (256 * 1024)
#define MAX_CALLS 64

struct call {
  uint64_t addr, size;
  int op;
  pthread_t thread;
};

struct provider {
  pthread_mutex_t lock;
  int refuse;
  size_t n;
  struct call calls[MAX_CALLS];
};

static int mint(void* ctx, uint64_t addr, uint64_t size, int op, char* out, size_t outSize) {
  struct provider* p = ctx;
  pthread_mutex_lock(&p->lock);
  if (p->n < MAX_CALLS) p->calls[p->n] = (struct call){addr, size, op, pthread_self()};
  p->n++;
  pthread_mutex_unlock(&p->lock);
  if (p->refuse) return 1;
  /* remote addr : size : rkey : reserved : DCT number : DC key kind : RoCE GID (10.0.0.5) */
  int n = snprintf(out, outSize, "%016llx:%08x:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005",
                   (unsigned long long)addr, (unsigned)size);
  return n > 0 && (size_t)n < outSize ? 0 : 1;
}

/* Fails unless the provider was asked for [addr, addr+size) in direction op,
 * on a thread other than the caller's. */
static void expect_call(struct provider* p, const void* addr, uint64_t size, int op) {
  pthread_mutex_lock(&p->lock);
  int found = 0;
  for (size_t i = 0; i < p->n && i < MAX_CALLS; i++) {
    struct call* c = &p->calls[i];
    if (c->addr == (uint64_t)(uintptr_t)addr && c->size == size && c->op == op) {
      EXPECT(!pthread_equal(c->thread, pthread_self()));
      found = 1;
    }
  }
  pthread_mutex_unlock(&p->lock);
  if (!found) {
    fprintf(stderr, "provider never asked for %p+%llu op %d (%zu calls)\n", addr,
            (unsigned long long)size, op, p->n);
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc != 7) return 2;
  uint32_t dialect = (uint32_t)strtoul(argv[5], NULL, 10);
  int refuse = strcmp(argv[6], "refuse") == 0;
  static struct provider prov = {.lock = PTHREAD_MUTEX_INITIALIZER};
  prov.refuse = refuse;

  unsigned char* buf = aligned_alloc(4096, 2 * SIZE);
  EXPECT(buf != NULL);
  for (size_t i = 0; i < SIZE; i++) buf[i] = pattern(i);
  memset(buf + SIZE, 0, SIZE);

  hipObjConfig_t config = {.endpoint = argv[1], .accessKey = argv[2], .secretKey = argv[3],
                           .gpuDevice = -1, .dialect = dialect,
                           .dcTokenProvider = mint, .dcTokenContext = &prov};
  OK(hipObjInit(&config));
  OK(hipObjBufRegister(buf, 2 * SIZE));
  hipObjHandle_t h = NULL;
  OK(hipObjOpen(argv[4], "cuobject/o.bin", &h));

  OK(hipObjPut(h, buf, SIZE, 0));
  expect_last_path("http", __LINE__);
  OK(hipObjGet(h, buf + SIZE, SIZE, 0));
  expect_last_path("http", __LINE__);
  EXPECT(memcmp(buf, buf + SIZE, SIZE) == 0);
  memset(buf + SIZE, 0, SIZE);
  OK(hipObjGet(h, buf + SIZE + 100, 5000, 4321));
  expect_last_path("http", __LINE__);
  EXPECT(memcmp(buf + 4321, buf + SIZE + 100, 5000) == 0);

  expect_call(&prov, buf, SIZE, HIPOBJ_RDMA_OP_PUT);
  expect_call(&prov, buf + SIZE, SIZE, HIPOBJ_RDMA_OP_GET);
  expect_call(&prov, buf + SIZE + 100, 5000, HIPOBJ_RDMA_OP_GET);
  expect_stats("http", 3, 2ull * SIZE + 5000, 0);
  printf("provider calls %zu (%s)\n", prov.n, refuse ? "refused" : "minted");

  OK(hipObjClose(h));
  OK(hipObjBufDeregister(buf));
  OK(hipObjShutdown());
  free(buf);
  printf("cuobject ok\n");
  return 0;
}
