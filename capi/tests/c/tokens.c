/*
 * The pure token helpers (no hipObjInit needed): x-amz-rdma-reply parsing and
 * the client NIC address of a token, on the protocol's worked example.
 */
#include <string.h>

#include "check.h"

/* RC, qpn 0x123, GID ::ffff:10.0.0.5, rkey 0xabcdef, addr 0x7f0000001000,
 * length 4096, port 1, lid 0. */
static const char* EXAMPLE =
    "012301000000000000000000000000ffff0a000005efcdab0000100000007f0000"
    "0010000000000000010000";

static int reply(const char* s, size_t len, hipObjOpError_t want) {
  int code = -12345;
  CHECK(hipObjParseRdmaReply(s, len, &code), want);
  return code;
}

int main(void) {
  EXPECT(strlen(EXAMPLE) == 88);
  EXPECT(reply("200", 3, hipObjSuccess) == 200);
  EXPECT(reply("206\r\n", 5, hipObjSuccess) == 206);
  EXPECT(reply("204", 4, hipObjSuccess) == 204); /* length counts the NUL */
  EXPECT(reply("501", 3, hipObjSuccess) == HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED);
  EXPECT(reply("ok", 2, hipObjSuccess) == 200);
  EXPECT(reply("err: boom", 9, hipObjRdmaError) == -1);
  EXPECT(reply("403", 3, hipObjRdmaError) == 403);
  char with_token[100];
  snprintf(with_token, sizeof with_token, "200:%s", EXAMPLE);
  EXPECT(reply(with_token, strlen(with_token), hipObjSuccess) == 200);
  EXPECT(reply("2x0", 3, hipObjInvalidValue) == -12345);
  EXPECT(reply("200:abc", 7, hipObjInvalidValue) == -12345);
  EXPECT(reply("", 0, hipObjInvalidValue) == -12345);
  static char big[600];
  memset(big, '2', sizeof big);
  EXPECT(reply(big, sizeof big, hipObjInvalidValue) == -12345);
  int code;
  CHECK(hipObjParseRdmaReply(NULL, 3, &code), hipObjInvalidValue);
  CHECK(hipObjParseRdmaReply("200", 3, NULL), hipObjInvalidValue);

  char ip[16];
  OK(hipObjTokenClientNic(EXAMPLE, ip, sizeof ip));
  EXPECT(strcmp(ip, "10.0.0.5") == 0);
  char suffixed[160];
  snprintf(suffixed, sizeof suffixed, "%s:00007f0000001000:0000000000001000", EXAMPLE);
  OK(hipObjTokenClientNic(suffixed, ip, sizeof ip));
  EXPECT(strcmp(ip, "10.0.0.5") == 0);
  /* Not IPv4-mapped: empty string. */
  char linklocal[89];
  memcpy(linklocal, EXAMPLE, 89);
  memcpy(linklocal + 10 + 20, "0000", 4); /* GID bytes 10-11 */
  OK(hipObjTokenClientNic(linklocal, ip, sizeof ip));
  EXPECT(strcmp(ip, "") == 0);
  char small[8];
  CHECK(hipObjTokenClientNic(EXAMPLE, small, sizeof small), hipObjInvalidValue);
  CHECK(hipObjTokenClientNic("xyz", ip, sizeof ip), hipObjInvalidValue);
  CHECK(hipObjTokenClientNic(NULL, ip, sizeof ip), hipObjInvalidValue);
  CHECK(hipObjTokenClientNic(EXAMPLE, NULL, 16), hipObjInvalidValue);

  printf("tokens ok\n");
  return 0;
}
