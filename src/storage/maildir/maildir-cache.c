/* mail-storage.h over Maildir++: cached per-message data by field name
 * (mailbox_cache_lookup / _store / _queue) over the fileindex cache.
 *
 * The fileindex cache already answers only for its index identity: a new
 * index, or a rebuild that changes UIDVALIDITY, moves cache_reset_id and
 * every older value reads as absent; UIDs are never reused within it. One
 * hole remains: a rebuild takes UIDs from dovecot-uidlist for files the
 * index did not know, and a damaged or foreign uidlist could hand a new
 * file the UID of an expunged message whose values are still in the cache.
 * So each value is stored behind a tag of the message's base name (which
 * names one message for good) and a lookup checks it against the index. */
#include "storage/maildir/maildir-private.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

#define TAG_BYTES 8

/* FNV-1a, 64 bits: a tag, not a defence against a chosen collision (the
 * base name is made by the delivering program, never by a client). */
static uint64_t base_tag(const char *base)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)base; *p != '\0'; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void put_tag(uint8_t out[TAG_BYTES], uint64_t tag)
{
    for (int i = 0; i < TAG_BYTES; i++)
        out[i] = (uint8_t)(tag >> (8 * i));
}

const void *maildir_cache_lookup(struct mailbox *box, uint32_t uid, const char *field, size_t *len)
{
    if (len != NULL)
        *len = 0;
    const struct fileindex_record *r = fileindex_lookup_uid(box->index, uid);
    if (r == NULL)
        return NULL;
    uint8_t want[TAG_BYTES];
    put_tag(want, base_tag(r->filename));
    size_t stored = 0;
    const uint8_t *v = fileindex_cache_get(box->index, uid, field, &stored);
    if (v == NULL || stored < TAG_BYTES || memcmp(v, want, TAG_BYTES) != 0)
        return NULL;
    if (len != NULL)
        *len = stored - TAG_BYTES;
    return v + TAG_BYTES;
}

/* The value behind its tag, for fileindex_cache_add or _queue. */
bool maildir_cache_store(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                         size_t len, bool queue, struct petrel_error *err)
{
    const struct fileindex_record *r = fileindex_lookup_uid(box->index, uid);
    if (r == NULL)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "message UID %u expunged", uid);
    if (len > SIZE_MAX - TAG_BYTES || (data == NULL && len > 0))
        return petrel_error_set(err, PETREL_ERR_INVALID, "bad cache value");
    uint8_t *value = xmalloc(len + TAG_BYTES);
    put_tag(value, base_tag(r->filename));
    if (len > 0)
        memcpy(value + TAG_BYTES, data, len);
    bool ok = queue ? fileindex_cache_queue(box->index, uid, field, value, len + TAG_BYTES, err)
                    : fileindex_cache_add(box->index, uid, field, value, len + TAG_BYTES, err);
    free(value);
    return ok;
}

bool maildir_cache_flush(struct mailbox *box, struct petrel_error *err)
{
    return fileindex_cache_flush(box->index, err);
}
