/*
 * libbindaddr: turn a wildcard bind() on chosen ports into a bind to one address.
 *
 * Why: TensorFlow's gRPC server (every MultiWorkerMirroredStrategy worker) is
 * unauthenticated and listens on 0.0.0.0 / [::] whatever address the cluster
 * spec gives it; its C++ code hard-codes the wildcard and no option changes it.
 * Loaded with LD_PRELOAD (workloads/netbind/__init__.py re-executes the worker
 * with it), this bind() keeps the worker on the node's own cluster address.
 *
 * Configuration, read at every call (the cost is nothing next to a bind):
 *   WORKLOADS_BIND_ADDRESS  an IPv4 or IPv6 literal: the address to bind instead
 *   WORKLOADS_BIND_PORTS    LOW-HIGH (inclusive): only binds to these ports move;
 *                           ephemeral and other ports are left as they are
 * An IPv4 address on a dual-stack IPv6 socket becomes ::ffff:a.b.c.d; an IPv6
 * address asked of an IPv4 socket fails with EADDRNOTAVAIL (gRPC then keeps
 * its IPv6 socket), so nothing ever listens on the wildcard on those ports.
 *
 * bind() is reached through syscall(), not dlsym(RTLD_NEXT): no libdl and no
 * symbol newer than glibc 2.2.5, so a library built on the host also loads in
 * the containers (older glibc) that Apptainer runs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int real_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    return (int)syscall(SYS_bind, fd, addr, len);
}

/* 1 if port is inside WORKLOADS_BIND_PORTS ("LOW-HIGH"), 0 otherwise or if unset. */
static int port_chosen(unsigned int port)
{
    const char *range = getenv("WORKLOADS_BIND_PORTS");
    char *end = NULL;
    unsigned long low, high;

    if (range == NULL || *range == '\0' || port == 0)
        return 0;
    low = strtoul(range, &end, 10);
    if (end == NULL || *end != '-')
        return 0;
    high = strtoul(end + 1, &end, 10);
    if (*end != '\0')
        return 0;
    return port >= low && port <= high;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    const char *wanted = getenv("WORKLOADS_BIND_ADDRESS");
    struct in_addr v4;
    struct in6_addr v6;
    int is_v4, is_v6;

    if (wanted == NULL || *wanted == '\0' || addr == NULL)
        return real_bind(fd, addr, len);
    is_v4 = inet_pton(AF_INET, wanted, &v4) == 1;
    is_v6 = !is_v4 && inet_pton(AF_INET6, wanted, &v6) == 1;
    if (!is_v4 && !is_v6)
        return real_bind(fd, addr, len);

    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in moved;
        memcpy(&moved, addr, sizeof(moved));
        if (moved.sin_addr.s_addr != htonl(INADDR_ANY) || !port_chosen(ntohs(moved.sin_port)))
            return real_bind(fd, addr, len);
        if (!is_v4) {
            errno = EADDRNOTAVAIL;
            return -1;
        }
        moved.sin_addr = v4;
        return real_bind(fd, (const struct sockaddr *)&moved, sizeof(moved));
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 moved;
        memcpy(&moved, addr, sizeof(moved));
        if (!IN6_IS_ADDR_UNSPECIFIED(&moved.sin6_addr) || !port_chosen(ntohs(moved.sin6_port)))
            return real_bind(fd, addr, len);
        if (is_v6) {
            moved.sin6_addr = v6;
        } else {
            memset(&moved.sin6_addr, 0, sizeof(moved.sin6_addr));
            moved.sin6_addr.s6_addr[10] = 0xff;
            moved.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&moved.sin6_addr.s6_addr[12], &v4, sizeof(v4));
        }
        return real_bind(fd, (const struct sockaddr *)&moved, sizeof(moved));
    }
    return real_bind(fd, addr, len);
}
