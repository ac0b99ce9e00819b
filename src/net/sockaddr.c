#include "net/sockaddr.h"

#include "net/endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

bool net_addr_parse(const char *text, struct net_addr *out, struct petrel_error *err)
{
    struct net_endpoint ep;
    return net_endpoint_parse(text, NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK, 0, &ep, err) &&
           net_endpoint_resolve(&ep, out, err);
}

void net_addr_format_ip(const struct sockaddr *sa, char *dst, size_t size)
{
    if (sa == NULL) {
        snprintf(dst, size, "?");
        return;
    }
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, dst, (socklen_t)size);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, dst, (socklen_t)size);
    else
        snprintf(dst, size, "unix");
}

void net_addr_format(const struct sockaddr *sa, char *dst, size_t size)
{
    char ip[INET6_ADDRSTRLEN];
    if (sa == NULL) {
        snprintf(dst, size, "?");
    } else if (sa->sa_family == AF_INET) {
        net_addr_format_ip(sa, ip, sizeof(ip));
        snprintf(dst, size, "%s:%u", ip, ntohs(((const struct sockaddr_in *)sa)->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        net_addr_format_ip(sa, ip, sizeof(ip));
        snprintf(dst, size, "[%s]:%u", ip, ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
    } else if (sa->sa_family == AF_UNIX) {
        snprintf(dst, size, "unix:%s", ((const struct sockaddr_un *)sa)->sun_path);
    } else {
        snprintf(dst, size, "?");
    }
}

int net_listen(const char *text, bool reuse_port, struct petrel_error *err)
{
    struct net_addr addr;
    if (!net_addr_parse(text, &addr, err))
        return -1;
    int family = addr.ss.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s: socket: %s", text,
                                strerror(errno)),
               -1;
    int one = 1;
    if (family == AF_UNIX) {
        const char *path = ((struct sockaddr_un *)&addr.ss)->sun_path;
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
            unlink(path);
    } else {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (reuse_port)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        if (family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (bind(fd, (struct sockaddr *)&addr.ss, addr.len) < 0) {
        int e = errno;
        close(fd);
        petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s: %s%s", text, strerror(e),
                         e == EADDRINUSE ? " (is another process using this port?)" : "");
        return -1;
    }
    if (listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s: %s", text, strerror(e));
        return -1;
    }
    return fd;
}

void net_bound_address(int fd, char *dst, size_t size)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        snprintf(dst, size, "?");
        return;
    }
    net_addr_format((struct sockaddr *)&ss, dst, size);
}
