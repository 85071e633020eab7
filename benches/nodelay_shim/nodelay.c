/*
 * nodelay.c - LD_PRELOAD shim that sets TCP_NODELAY on every accepted socket.
 *
 * Why: s3s-fs 0.14.1 never sets TCP_NODELAY. A small GET response whose head
 * and body leave in two writes then waits for the client's delayed ACK
 * (~40 ms on Linux), so every 4-64 KiB range-get measures ~42 ms whatever the
 * client does (shared/design.md section 10). Forcing TCP_NODELAY on the
 * server's accepted sockets removes that artefact so the side-by-side
 * benchmark compares clients, not Nagle's algorithm.
 *
 * Build: cc -O2 -fPIC -shared -o libnodelay.so nodelay.c -ldl
 * Use:   LD_PRELOAD=/path/libnodelay.so s3s-fs ...
 * Set NODELAY_SHIM_VERBOSE=1 to log the first socket it changed to stderr
 * (the benchmark script checks for that line to prove the shim is active).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

static int logged;

/* Set TCP_NODELAY on fd; errors (e.g. a Unix socket) are ignored and errno is
 * preserved so the caller sees exactly what the real accept returned. */
static void set_nodelay(int fd)
{
    int saved = errno;
    int one = 1;
    int rc = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (rc == 0 && !logged) {
        const char *v = getenv("NODELAY_SHIM_VERBOSE");
        if (v != NULL && v[0] == '1') {
            logged = 1;
            fprintf(stderr, "nodelay-shim: TCP_NODELAY set on accepted fd %d\n", fd);
        }
    }
    errno = saved;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    static accept_fn real;
    if (real == NULL) {
        real = (accept_fn)dlsym(RTLD_NEXT, "accept");
        if (real == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    int s = real(fd, addr, len);
    if (s >= 0)
        set_nodelay(s);
    return s;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    static accept4_fn real;
    if (real == NULL) {
        real = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
        if (real == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    int s = real(fd, addr, len, flags);
    if (s >= 0)
        set_nodelay(s);
    return s;
}
