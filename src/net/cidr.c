#include "net/cidr.h"

#include "core/slice.h"
#include "core/xalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cidr_parse(const char *text, struct cidr *out, struct petrel_error *err)
{
    char addr[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(text, '/');
    size_t alen = slash != NULL ? (size_t)(slash - text) : strlen(text);
    if (alen == 0 || alen >= sizeof(addr))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid network '%s'", text);
    memcpy(addr, text, alen);
    addr[alen] = '\0';

    struct cidr c;
    memset(&c, 0, sizeof(c));
    unsigned max_prefix;
    if (inet_pton(AF_INET, addr, c.addr) == 1) {
        c.family = AF_INET;
        max_prefix = 32;
    } else if (inet_pton(AF_INET6, addr, c.addr) == 1) {
        c.family = AF_INET6;
        max_prefix = 128;
    } else {
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid network address '%s'", text);
    }
    c.prefix = max_prefix;
    if (slash != NULL) {
        uint64_t v = 0;
        if (!str_parse_u64(slash + 1, max_prefix, &v))
            return petrel_error_set(err, PETREL_ERR_INVALID, "invalid prefix length in '%s'",
                                    text);
        c.prefix = (unsigned)v;
    }
    size_t bytes = c.family == AF_INET ? 4 : 16;
    for (size_t i = 0; i < bytes; i++) {
        unsigned bit_start = (unsigned)i * 8;
        uint8_t mask;
        if (bit_start + 8 <= c.prefix)
            mask = 0xff;
        else if (bit_start >= c.prefix)
            mask = 0;
        else
            mask = (uint8_t)(0xff << (8 - (c.prefix - bit_start)));
        if ((c.addr[i] & (uint8_t)~mask) != 0)
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "'%s' has host bits set beyond the prefix", text);
    }
    *out = c;
    return true;
}

bool cidr_list_parse(const char *const *texts, struct cidr_list *out, struct petrel_error *err)
{
    out->items = NULL;
    out->count = 0;
    size_t n = 0;
    while (texts != NULL && texts[n] != NULL)
        n++;
    if (n == 0)
        return true;
    struct cidr *items = xcalloc(n, sizeof(*items));
    for (size_t i = 0; i < n; i++) {
        if (!cidr_parse(texts[i], &items[i], err)) {
            free(items);
            return false;
        }
    }
    out->items = items;
    out->count = n;
    return true;
}

void cidr_list_free(struct cidr_list *list)
{
    free(list->items);
    list->items = NULL;
    list->count = 0;
}

static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned prefix)
{
    size_t full = prefix / 8;
    if (memcmp(a, b, full) != 0)
        return false;
    unsigned rest = prefix % 8;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == (b[full] & mask);
}

bool cidr_match(const struct cidr *net, const struct sockaddr *sa)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        uint8_t a[4];
        memcpy(a, &sin->sin_addr, 4);
        if (net->family == AF_INET)
            return prefix_equal(a, net->addr, net->prefix);
        uint8_t mapped[16];
        memcpy(mapped, v4mapped, 12);
        memcpy(mapped + 12, a, 4);
        return prefix_equal(mapped, net->addr, net->prefix);
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        const uint8_t *a = sin6->sin6_addr.s6_addr;
        if (net->family == AF_INET6)
            return prefix_equal(a, net->addr, net->prefix);
        if (memcmp(a, v4mapped, 12) == 0)
            return prefix_equal(a + 12, net->addr, net->prefix);
        return false;
    }
    return false;
}

bool cidr_list_match(const struct cidr_list *list, const struct sockaddr *sa)
{
    for (size_t i = 0; i < list->count; i++) {
        if (cidr_match(&list->items[i], sa))
            return true;
    }
    return false;
}

void cidr_format(const struct cidr *net, char *dst, size_t size)
{
    char addr[INET6_ADDRSTRLEN];
    inet_ntop(net->family, net->addr, addr, sizeof(addr));
    snprintf(dst, size, "%s/%u", addr, net->prefix);
}
