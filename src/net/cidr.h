/* IPv4/IPv6 network lists ("10.0.0.0/8", "::1/128", a bare address = host
 * route). IPv4-mapped IPv6 peers (::ffff:a.b.c.d) match IPv4 entries. */
#ifndef PETREL_NET_CIDR_H
#define PETREL_NET_CIDR_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct cidr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    unsigned prefix;
};

struct cidr_list {
    struct cidr *items;
    size_t count;
};

/* Parses one CIDR; host bits beyond the prefix must be zero. */
bool cidr_parse(const char *text, struct cidr *out, struct petrel_error *err);
/* Parses a NULL-terminated list; on error names the bad entry. Frees nothing on failure
 * (out left empty). */
bool cidr_list_parse(const char *const *texts, struct cidr_list *out, struct petrel_error *err);
void cidr_list_free(struct cidr_list *list);
bool cidr_match(const struct cidr *net, const struct sockaddr *sa);
/* True when any entry matches; an empty list matches nothing. */
bool cidr_list_match(const struct cidr_list *list, const struct sockaddr *sa);
/* Formats a network back to text ("10.0.0.0/8"). */
void cidr_format(const struct cidr *net, char *dst, size_t size);

#endif
