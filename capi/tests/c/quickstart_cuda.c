/*
 * The hipObject Quick Start with CUDA device memory (cuMemAlloc in the primary context, which is
 * what cudaMalloc allocates): init with gpuDevice = 0, register the VRAM buffer (host-staged),
 * put from VRAM, get into VRAM, copy back to the host and verify.
 *
 * Builds without CUDA headers or libraries: the driver API is loaded with dlopen and the few
 * prototypes are declared here. Exits 77 with "skip:" when there is no CUDA device.
 *
 * usage: quickstart_cuda <endpoint> <access key> <secret key> <bucket>
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define SIZE (4 * 1024 * 1024)

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
  CUresult (*init)(unsigned);
  CUresult (*count)(int*);
  CUresult (*get)(CUdevice*, int);
  CUresult (*retain)(CUcontext*, CUdevice);
  CUresult (*release)(CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*alloc)(CUdeviceptr*, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void*, size_t);
  CUresult (*dtoh)(void*, CUdeviceptr, size_t);
  CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
} cu;

#define CU(call)                                                               \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != 0) {                                                             \
      fprintf(stderr, "%s:%d: %s -> CUresult %d\n", __FILE__, __LINE__,        \
              #call, r_);                                                      \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static void* sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == NULL) {
    fprintf(stderr, "libcuda.so.1 lacks %s\n", name);
    exit(1);
  }
  return p;
}

#define LOAD(field, name) *(void**)(&cu.field) = sym(lib, name)

static void skip(const char* why) {
  printf("skip: %s\n", why);
  exit(77);
}

/* Copies `n` bytes of VRAM at `d` to a fresh host buffer. */
static unsigned char* read_back(CUdeviceptr d, size_t n) {
  unsigned char* h = malloc(n);
  EXPECT(h != NULL);
  CU(cu.dtoh(h, d, n));
  return h;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s endpoint access secret bucket\n", argv[0]);
    return 2;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) skip("libcuda.so.1 not loadable (no NVIDIA driver)");
  LOAD(init, "cuInit");
  LOAD(count, "cuDeviceGetCount");
  LOAD(get, "cuDeviceGet");
  LOAD(retain, "cuDevicePrimaryCtxRetain");
  LOAD(release, "cuDevicePrimaryCtxRelease_v2");
  LOAD(set_current, "cuCtxSetCurrent");
  LOAD(alloc, "cuMemAlloc_v2");
  LOAD(free, "cuMemFree_v2");
  LOAD(htod, "cuMemcpyHtoD_v2");
  LOAD(dtoh, "cuMemcpyDtoH_v2");
  LOAD(memset8, "cuMemsetD8_v2");
  int n = 0;
  if (cu.init(0) != 0 || cu.count(&n) != 0 || n == 0) skip("no CUDA device");

  CUdevice dev;
  CUcontext ctx;
  CU(cu.get(&dev, 0));
  CU(cu.retain(&ctx, dev));
  CU(cu.set_current(ctx));
  printf("%s\n", hipObjGetVersionString());

  /* One VRAM registration: source in the first half, destination in the second. */
  CUdeviceptr d = 0;
  CU(cu.alloc(&d, 2 * SIZE));
  unsigned char* src = malloc(SIZE);
  EXPECT(src != NULL);
  for (size_t i = 0; i < SIZE; i++) src[i] = pattern(i);
  CU(cu.htod(d, src, SIZE));
  CU(cu.memset8(d + SIZE, 0, SIZE));

  hipObjConfig_t config = {
      .endpoint = argv[1],
      .region = "us-east-1",
      .accessKey = argv[2],
      .secretKey = argv[3],
      .gpuDevice = 0,
  };
  OK(hipObjInit(&config));
  void* vram = (void*)(uintptr_t)d;
  OK(hipObjBufRegister(vram, 2 * SIZE));
  /* A host buffer beside it, to check the PUT independently of the VRAM GET path. */
  unsigned char* host = aligned_alloc(4096, SIZE);
  EXPECT(host != NULL);
  memset(host, 0, SIZE);
  OK(hipObjBufRegister(host, SIZE));

  hipObjHandle_t handle = NULL;
  OK(hipObjOpen(argv[4], "quickstart-cuda/model.bin", &handle));

  /* The Quick Start: PUT from VRAM, GET into VRAM. */
  OK(hipObjPut(handle, vram, SIZE, 0));
  OK(hipObjGet(handle, host, SIZE, 0));
  EXPECT(memcmp(host, src, SIZE) == 0);
  OK(hipObjGet(handle, (unsigned char*)vram + SIZE, SIZE, 0));
  unsigned char* back = read_back(d + SIZE, SIZE);
  EXPECT(memcmp(back, src, SIZE) == 0);
  free(back);

  /* Interior pointer into VRAM, object offset: only those bytes change. */
  CU(cu.memset8(d + SIZE, 0, SIZE));
  OK(hipObjGet(handle, (unsigned char*)vram + SIZE + 12345, 5000, 777777));
  back = read_back(d + SIZE, SIZE);
  for (size_t i = 0; i < 5000; i++) EXPECT(back[12345 + i] == pattern(777777 + i));
  for (size_t i = 0; i < SIZE; i++)
    if (i < 12345 || i >= 12345 + 5000) EXPECT(back[i] == 0);
  free(back);

  /* PUT from the middle of VRAM; read it back through host memory. */
  hipObjHandle_t tail = NULL;
  OK(hipObjOpen(argv[4], "quickstart-cuda/tail.bin", &tail));
  OK(hipObjPut(tail, (unsigned char*)vram + 1000, 3000, 0));
  memset(host, 0, SIZE);
  OK(hipObjGet(tail, host, 3000, 0));
  EXPECT(memcmp(host, src + 1000, 3000) == 0);
  OK(hipObjClose(tail));

  /* Registration rules hold for VRAM too. */
  CHECK(hipObjBufRegister((unsigned char*)vram + 4096, 4096), hipObjBufAlreadyRegistered);
  CHECK(hipObjGet(handle, (unsigned char*)vram + 2 * SIZE - 10, 11, 0), hipObjSizeTooLarge);

  /* Batch entries on VRAM: each completion means "the bytes are in VRAM" (the engine stages). */
  CU(cu.memset8(d + SIZE, 0, SIZE));
  hipObjQueue_t q;
  OK(hipObjQueueCreate(8, &q));
  hipObjOp_t ops[4];
  memset(ops, 0, sizeof ops);
  for (int i = 0; i < 4; i++) {
    ops[i].kind = HIPOBJ_OP_RANGE_GET;
    ops[i].handle = handle;
    ops[i].buf = (unsigned char*)vram + SIZE + (size_t)i * 65536;
    ops[i].size = 65536;
    ops[i].offset = (uint64_t)(3 - i) * 65536 + 11;
    ops[i].userData = 100 + (uint64_t)i;
  }
  size_t sub = 0, got = 0;
  OK(hipObjQueueSubmit(q, ops, 4, &sub));
  EXPECT(sub == 4);
  for (int reaped = 0; reaped < 4;) {
    hipObjCompletion_t c;
    OK(hipObjQueueReap(q, &c, 1, 5000, &got));
    EXPECT(got == 1);
    if (got != 1) break;
    EXPECT(c.userData >= 100 && c.userData < 104 && c.opError == hipObjSuccess);
    reaped++;
  }
  back = read_back(d + SIZE, 4 * 65536);
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 65536; j++)
      EXPECT(back[i * 65536 + j] == pattern((3 - i) * 65536 + 11 + j));
  free(back);
  OK(hipObjQueueDestroy(q));

  OK(hipObjClose(handle));
  OK(hipObjBufDeregister(vram));
  OK(hipObjBufDeregister(host));
  OK(hipObjShutdown());

  CU(cu.free(d));
  CU(cu.release(dev));
  free(src);
  free(host);
  printf("quickstart_cuda ok\n");
  return 0;
}
