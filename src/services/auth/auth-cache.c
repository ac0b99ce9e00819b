/* The auth result cache: a chained hash table keyed by username (SipHash
 * with a per-cache random key, because usernames come from clients and a
 * fixed hash would let them pile entries into one chain) threaded on a
 * doubly linked LRU list, most recent at the head.
 *
 * Password digests are HMAC-SHA256 under a random key made when the cache is
 * made: a memory dump of the cache yields no password and no digest that is
 * comparable across processes. One EVP_MAC_CTX is keyed once and re-armed
 * for each digest, which keeps a HIT with a password under a microsecond.
 *
 * Rules beyond the header:
 *  - ttl_ms <= 0 (or negative_ttl_ms <= 0) means such entries are not
 *    cached; a put of that kind still drops what was cached for the user;
 *  - an entry that alone exceeds max_bytes is not cached;
 *  - any lookup that finds a live entry makes it the most recently used;
 *  - *entry is set (to NULL) on every result but HIT. */
#include "services/auth/auth-cache.h"

#include "core/dlist.h"
#include "core/xalloc.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DIGEST_BYTES 32
#define HMAC_KEY_BYTES 32
#define INITIAL_BUCKETS 64

struct cache_node {
    struct cache_node *chain_next; /* same bucket */
    struct cache_node *lru_prev;   /* towards the head (more recent) */
    struct cache_node *lru_next;   /* towards the tail (less recent) */
    uint64_t hash;
    int64_t expires_ms;
    size_t bytes;                /* what this node adds to cache->bytes */
    struct userdb_entry *record; /* NULL for a negative entry */
    bool has_digest;
    unsigned char digest[DIGEST_BYTES];
    char username[]; /* the key */
};

struct auth_cache {
    struct auth_cache_config cfg;
    struct cache_node **buckets;
    size_t bucket_count; /* a power of two */
    size_t entries;
    size_t bytes;
    struct cache_node *lru_head;
    struct cache_node *lru_tail;
    uint64_t sip_k0, sip_k1;
    EVP_MAC *mac;
    EVP_MAC_CTX *mac_ctx;
};

/* --- SipHash-2-4 (Aumasson & Bernstein), keyed per cache ------------------ */

static uint64_t rotl64(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define SIP_ROUND(v0, v1, v2, v3)                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = rotl64(v1, 13);                                                                       \
        v1 ^= v0;                                                                                  \
        v0 = rotl64(v0, 32);                                                                       \
        v2 += v3;                                                                                  \
        v3 = rotl64(v3, 16);                                                                       \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = rotl64(v3, 21);                                                                       \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = rotl64(v1, 17);                                                                       \
        v1 ^= v2;                                                                                  \
        v2 = rotl64(v2, 32);                                                                       \
    } while (0)

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t siphash24(uint64_t k0, uint64_t k1, const unsigned char *in, size_t len)
{
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL;
    uint64_t v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL;
    uint64_t v3 = k1 ^ 0x7465646279746573ULL;
    size_t full = len & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = load_le64(in + i);
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++)
        last |= (uint64_t)in[full + i] << (8 * i);
    v3 ^= last;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* --- the table and the LRU list --------------------------------------------- */

static uint64_t hash_username(const struct auth_cache *c, const char *username, size_t len)
{
    return siphash24(c->sip_k0, c->sip_k1, (const unsigned char *)username, len);
}

static struct cache_node **bucket_of(struct auth_cache *c, uint64_t hash)
{
    return &c->buckets[hash & (c->bucket_count - 1)];
}

static void lru_unlink(struct auth_cache *c, struct cache_node *n)
{
    DLIST_REMOVE_AT(c->lru_head, c->lru_tail, n, lru_prev, lru_next);
}

static void lru_push_head(struct auth_cache *c, struct cache_node *n)
{
    DLIST_PUSH_AT(c->lru_head, n, lru_prev, lru_next);
    if (c->lru_tail == NULL)
        c->lru_tail = n;
}

static void lru_touch(struct auth_cache *c, struct cache_node *n)
{
    if (c->lru_head == n)
        return;
    lru_unlink(c, n);
    lru_push_head(c, n);
}

static struct cache_node *find(struct auth_cache *c, const char *username, size_t len,
                               uint64_t hash)
{
    for (struct cache_node *n = *bucket_of(c, hash); n != NULL; n = n->chain_next) {
        if (n->hash == hash && strncmp(n->username, username, len) == 0 && n->username[len] == '\0')
            return n;
    }
    return NULL;
}

static void node_free(struct cache_node *n)
{
    userdb_entry_free(n->record);
    OPENSSL_cleanse(n->digest, sizeof(n->digest));
    free(n);
}

static void node_remove(struct auth_cache *c, struct cache_node *n)
{
    struct cache_node **link = bucket_of(c, n->hash);
    while (*link != n)
        link = &(*link)->chain_next;
    *link = n->chain_next;
    lru_unlink(c, n);
    c->entries--;
    c->bytes -= n->bytes;
    node_free(n);
}

static void grow_table(struct auth_cache *c)
{
    size_t new_count = c->bucket_count * 2;
    struct cache_node **fresh = xcalloc(new_count, sizeof(*fresh));
    for (size_t i = 0; i < c->bucket_count; i++) {
        struct cache_node *n = c->buckets[i];
        while (n != NULL) {
            struct cache_node *next = n->chain_next;
            struct cache_node **slot = &fresh[n->hash & (new_count - 1)];
            n->chain_next = *slot;
            *slot = n;
            n = next;
        }
    }
    free(c->buckets);
    c->buckets = fresh;
    c->bucket_count = new_count;
}

/* Links a node in as the most recent entry, then evicts from the tail until
 * the cache fits. The caller checked that the node alone fits. */
static void node_insert(struct auth_cache *c, struct cache_node *n)
{
    if (c->entries + 1 > c->bucket_count)
        grow_table(c);
    struct cache_node **slot = bucket_of(c, n->hash);
    n->chain_next = *slot;
    *slot = n;
    lru_push_head(c, n);
    c->entries++;
    c->bytes += n->bytes;
    while (c->bytes > c->cfg.max_bytes && c->lru_tail != n)
        node_remove(c, c->lru_tail);
}

/* now + ttl without overflowing on a "forever" TTL. */
static int64_t expiry(int64_t now_ms, int64_t ttl_ms)
{
    return now_ms > INT64_MAX - ttl_ms ? INT64_MAX : now_ms + ttl_ms;
}

static struct cache_node *node_new(const char *username, size_t len, uint64_t hash,
                                   int64_t expires_ms)
{
    struct cache_node *n = xcalloc(1, sizeof(*n) + len + 1);
    memcpy(n->username, username, len);
    n->hash = hash;
    n->expires_ms = expires_ms;
    n->bytes = sizeof(*n) + len + 1;
    return n;
}

/* Drops what is cached for `username` (if anything) and returns its hash. */
static uint64_t forget(struct auth_cache *c, const char *username, size_t len)
{
    uint64_t hash = hash_username(c, username, len);
    struct cache_node *old = find(c, username, len, hash);
    if (old != NULL)
        node_remove(c, old);
    return hash;
}

/* --- password digests ------------------------------------------------------ */

static void password_digest(struct auth_cache *c, const char *password,
                            unsigned char out[DIGEST_BYTES])
{
    size_t out_len = 0;
    /* A NULL key re-arms the context with the key set in auth_cache_new. */
    if (EVP_MAC_init(c->mac_ctx, NULL, 0, NULL) != 1 ||
        EVP_MAC_update(c->mac_ctx, (const unsigned char *)password, strlen(password)) != 1 ||
        EVP_MAC_final(c->mac_ctx, out, &out_len, DIGEST_BYTES) != 1 || out_len != DIGEST_BYTES)
        petrel_fatal("HMAC-SHA256 failed in the auth cache");
}

/* --- the public functions -------------------------------------------------- */

struct auth_cache *auth_cache_new(const struct auth_cache_config *cfg)
{
    struct auth_cache *c = xcalloc(1, sizeof(*c));
    c->cfg = *cfg;
    c->bucket_count = INITIAL_BUCKETS;
    c->buckets = xcalloc(c->bucket_count, sizeof(*c->buckets));

    unsigned char sip_key[16];
    unsigned char hmac_key[HMAC_KEY_BYTES];
    if (RAND_bytes(sip_key, sizeof(sip_key)) != 1 || RAND_bytes(hmac_key, sizeof(hmac_key)) != 1)
        petrel_fatal("no random bytes for the auth cache keys");
    c->sip_k0 = load_le64(sip_key);
    c->sip_k1 = load_le64(sip_key + 8);

    char digest_name[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
        OSSL_PARAM_construct_end(),
    };
    c->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    c->mac_ctx = c->mac != NULL ? EVP_MAC_CTX_new(c->mac) : NULL;
    if (c->mac_ctx == NULL || EVP_MAC_init(c->mac_ctx, hmac_key, sizeof(hmac_key), params) != 1)
        petrel_fatal("cannot set up HMAC-SHA256 for the auth cache");
    OPENSSL_cleanse(hmac_key, sizeof(hmac_key));
    OPENSSL_cleanse(sip_key, sizeof(sip_key));
    return c;
}

void auth_cache_free(struct auth_cache *c)
{
    if (c == NULL)
        return;
    auth_cache_clear(c);
    free(c->buckets);
    EVP_MAC_CTX_free(c->mac_ctx);
    EVP_MAC_free(c->mac);
    OPENSSL_cleanse(c, sizeof(*c));
    free(c);
}

enum auth_cache_result auth_cache_lookup(struct auth_cache *c, const char *username,
                                         const char *password, int64_t now_ms,
                                         const struct userdb_entry **entry)
{
    if (entry != NULL)
        *entry = NULL;
    if (c->entries == 0)
        return AUTH_CACHE_MISS;
    size_t len = strlen(username);
    struct cache_node *n = find(c, username, len, hash_username(c, username, len));
    if (n == NULL)
        return AUTH_CACHE_MISS;
    if (now_ms >= n->expires_ms) {
        node_remove(c, n);
        return AUTH_CACHE_EXPIRED;
    }
    lru_touch(c, n);
    if (n->record == NULL)
        return AUTH_CACHE_HIT_NEGATIVE;
    if (password != NULL) {
        if (!n->has_digest)
            return AUTH_CACHE_PWD_MISMATCH;
        unsigned char digest[DIGEST_BYTES];
        password_digest(c, password, digest);
        bool same = CRYPTO_memcmp(digest, n->digest, DIGEST_BYTES) == 0;
        OPENSSL_cleanse(digest, sizeof(digest));
        if (!same)
            return AUTH_CACHE_PWD_MISMATCH;
    }
    if (entry != NULL)
        *entry = n->record;
    return AUTH_CACHE_HIT;
}

void auth_cache_put(struct auth_cache *c, const struct userdb_entry *entry,
                    const char *verified_password, int64_t now_ms)
{
    if (c->cfg.max_bytes == 0)
        return;
    size_t len = strlen(entry->username);
    uint64_t hash = forget(c, entry->username, len);
    if (c->cfg.ttl_ms <= 0)
        return;

    struct userdb_entry *record = userdb_entry_clone(entry);
    if (record->password != NULL) {
        /* The stored hash stays with the passdb: the cache keeps only its
         * own keyed digest of a password that verified. */
        OPENSSL_cleanse(record->password, strlen(record->password));
        free(record->password);
        record->password = NULL;
    }
    struct cache_node *n = node_new(entry->username, len, hash, expiry(now_ms, c->cfg.ttl_ms));
    n->record = record;
    n->bytes += userdb_entry_bytes(record);
    if (verified_password != NULL) {
        password_digest(c, verified_password, n->digest);
        n->has_digest = true;
    }
    if (n->bytes > c->cfg.max_bytes) {
        node_free(n);
        return;
    }
    node_insert(c, n);
}

void auth_cache_put_negative(struct auth_cache *c, const char *username, int64_t now_ms)
{
    if (c->cfg.max_bytes == 0)
        return;
    size_t len = strlen(username);
    uint64_t hash = forget(c, username, len);
    if (c->cfg.negative_ttl_ms <= 0)
        return;
    struct cache_node *n = node_new(username, len, hash, expiry(now_ms, c->cfg.negative_ttl_ms));
    if (n->bytes > c->cfg.max_bytes) {
        node_free(n);
        return;
    }
    node_insert(c, n);
}

void auth_cache_remove(struct auth_cache *c, const char *username)
{
    if (c->entries == 0)
        return;
    forget(c, username, strlen(username));
}

void auth_cache_clear(struct auth_cache *c)
{
    while (c->lru_tail != NULL)
        node_remove(c, c->lru_tail);
}

size_t auth_cache_entries(const struct auth_cache *c)
{
    return c->entries;
}

size_t auth_cache_bytes(const struct auth_cache *c)
{
    return c->bytes;
}

size_t auth_cache_max_bytes(const struct auth_cache *c)
{
    return c->cfg.max_bytes;
}
