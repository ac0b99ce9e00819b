/* Consistent hashing (ring-hash.h): MD5 points, one sorted array per tag,
 * binary-search lookups.
 *
 * Ties: two members may own the same 32-bit point value (different ips whose
 * MD5 prefixes collide). Points are sorted by (value, member order), member
 * order being (address family, address bytes, port), so the lower-bound
 * search lands on the smaller (ip, port) — on every director alike,
 * whatever order the backends were added in. */
#include "services/director/ring-hash.h"

#include "core/bsearch-insert.h"
#include "core/xalloc.h"

#include <arpa/inet.h>
#include <openssl/evp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct point {
    uint32_t value;
    uint32_t member; /* index into the tag's owners, in member order */
};

struct tag_ring {
    char *tag;
    struct point *points;
    size_t count;
    void **owners; /* by member index */
    size_t owner_count;
};

struct ring_hash {
    struct tag_ring *tags; /* sorted by tag (strcmp) */
    size_t tag_count;
};

/* ---------- hashing ---------- */

static uint32_t be32(const unsigned char *d)
{
    return ((uint32_t)d[0] << 24) | ((uint32_t)d[1] << 16) | ((uint32_t)d[2] << 8) | d[3];
}

struct ring_hasher {
    EVP_MD *md5;
    EVP_MD_CTX *ctx;
};

struct ring_hasher *ring_hasher_new(void)
{
    struct ring_hasher *h = xcalloc(1, sizeof(*h));
    h->md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    h->ctx = EVP_MD_CTX_new();
    if (h->md5 == NULL || h->ctx == NULL)
        petrel_fatal("MD5 is not available");
    return h;
}

void ring_hasher_free(struct ring_hasher *h)
{
    if (h == NULL)
        return;
    EVP_MD_CTX_free(h->ctx);
    EVP_MD_free(h->md5);
    free(h);
}

uint32_t ring_hasher_user(struct ring_hasher *h, const char *user, size_t len)
{
    if (EVP_DigestInit_ex2(h->ctx, h->md5, NULL) != 1)
        petrel_fatal("MD5 init failed");
    /* Lower-case in blocks, so a name of any length hashes without an
     * allocation. ASCII only, like Dovecot's %Lu. */
    char block[256];
    for (size_t off = 0; off < len;) {
        size_t n = len - off < sizeof(block) ? len - off : sizeof(block);
        for (size_t i = 0; i < n; i++) {
            char c = user[off + i];
            block[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
        }
        EVP_DigestUpdate(h->ctx, block, n);
        off += n;
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    EVP_DigestFinal_ex(h->ctx, digest, &dlen);
    uint32_t v = be32(digest);
    return v == 0 ? 1 : v;
}

uint32_t ring_hash_user(const char *user, size_t len)
{
    struct ring_hasher *h = ring_hasher_new();
    uint32_t v = ring_hasher_user(h, user, len);
    ring_hasher_free(h);
    return v;
}

uint32_t ring_hash_point(const char *ip, uint32_t i)
{
    char text[96];
    int n = snprintf(text, sizeof(text), "%s-%u", ip, (unsigned)i);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (n < 0 || (size_t)n >= sizeof(text) ||
        EVP_Digest(text, (size_t)n, digest, &dlen, EVP_md5(), NULL) != 1)
        petrel_fatal("cannot hash ring point for %s", ip);
    return be32(digest);
}

void ring_hash_points(const char *ip, uint32_t vhosts, uint32_t *points)
{
    for (uint32_t i = 0; i < vhosts; i++)
        points[i] = ring_hash_point(ip, i);
}

/* ---------- building ---------- */

/* (family, address bytes, port): IPv4 sorts before IPv6. */
struct member_key {
    unsigned char bytes[17];
    unsigned port;
};

static void member_key(const struct ring_member *m, struct member_key *k)
{
    memset(k, 0, sizeof(*k));
    if (inet_pton(AF_INET, m->ip, k->bytes + 1) == 1) {
        k->bytes[0] = 4;
    } else if (inet_pton(AF_INET6, m->ip, k->bytes + 1) == 1) {
        k->bytes[0] = 6;
    } else {
        k->bytes[0] = 0xff; /* not an address: after every real one, by text */
        snprintf((char *)k->bytes + 1, sizeof(k->bytes) - 1, "%s", m->ip);
    }
    k->port = m->port;
}

static int key_cmp(const struct member_key *a, const struct member_key *b)
{
    int c = memcmp(a->bytes, b->bytes, sizeof(a->bytes));
    if (c != 0)
        return c;
    return a->port < b->port ? -1 : a->port > b->port ? 1 : 0;
}

struct sortable {
    const struct ring_member *m;
    struct member_key key;
};

static int sortable_cmp(const void *a, const void *b)
{
    const struct sortable *x = a, *y = b;
    int c = strcmp(x->m->tag, y->m->tag);
    return c != 0 ? c : key_cmp(&x->key, &y->key);
}

static int point_cmp(const void *a, const void *b)
{
    const struct point *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return x->member < y->member ? -1 : x->member > y->member ? 1 : 0;
}

static void clear(struct ring_hash *ring)
{
    for (size_t i = 0; i < ring->tag_count; i++) {
        free(ring->tags[i].tag);
        free(ring->tags[i].points);
        free(ring->tags[i].owners);
    }
    free(ring->tags);
    ring->tags = NULL;
    ring->tag_count = 0;
}

struct ring_hash *ring_hash_new(void)
{
    return xcalloc(1, sizeof(struct ring_hash));
}

void ring_hash_free(struct ring_hash *ring)
{
    if (ring == NULL)
        return;
    clear(ring);
    free(ring);
}

/* Builds the ring of members[first..last) (one tag, in member order). */
static void build_tag(struct tag_ring *t, const struct sortable *s, size_t first, size_t last)
{
    t->tag = xstrdup(s[first].m->tag);
    t->owner_count = last - first;
    t->owners = xcalloc(t->owner_count, sizeof(void *));
    size_t total = 0;
    for (size_t i = first; i < last; i++)
        total += s[i].m->count;
    t->points = total > 0 ? xcalloc(total, sizeof(struct point)) : NULL;
    for (size_t i = first; i < last; i++) {
        const struct ring_member *m = s[i].m;
        t->owners[i - first] = m->owner;
        for (uint32_t p = 0; p < m->count; p++) {
            t->points[t->count].value = m->points[p];
            t->points[t->count].member = (uint32_t)(i - first);
            t->count++;
        }
    }
    if (t->count > 1)
        qsort(t->points, t->count, sizeof(struct point), point_cmp);
}

void ring_hash_build(struct ring_hash *ring, const struct ring_member *members, size_t count)
{
    clear(ring);
    if (count == 0)
        return;
    struct sortable *s = xcalloc(count, sizeof(*s));
    for (size_t i = 0; i < count; i++) {
        s[i].m = &members[i];
        member_key(&members[i], &s[i].key);
    }
    qsort(s, count, sizeof(*s), sortable_cmp);
    ring->tags = xcalloc(count, sizeof(struct tag_ring));
    for (size_t first = 0; first < count;) {
        size_t last = first + 1;
        while (last < count && strcmp(s[last].m->tag, s[first].m->tag) == 0)
            last++;
        build_tag(&ring->tags[ring->tag_count++], s, first, last);
        first = last;
    }
    free(s);
}

/* ---------- lookup ---------- */

static const struct tag_ring *find_tag(const struct ring_hash *ring, const char *tag)
{
    size_t lo = 0, hi = ring->tag_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ring->tags[mid].tag, tag);
        if (c == 0)
            return &ring->tags[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void *ring_hash_lookup(const struct ring_hash *ring, const char *tag, uint32_t user_hash)
{
    const struct tag_ring *t = find_tag(ring, tag);
    if (t == NULL || t->count == 0)
        return NULL;
    /* The first point with value >= user_hash. */
    size_t lo = bsearch_u32_lower(t->points, t->count, sizeof(*t->points),
                                  offsetof(struct point, value), user_hash);
    if (lo == t->count)
        lo = 0;
    return t->owners[t->points[lo].member];
}

size_t ring_hash_point_count(const struct ring_hash *ring, const char *tag)
{
    const struct tag_ring *t = find_tag(ring, tag);
    return t != NULL ? t->count : 0;
}
