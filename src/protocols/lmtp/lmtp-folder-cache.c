/* Open folders of one delivery thread (see lmtp-folder-cache.h). */
#include "protocols/lmtp/lmtp-folder-cache.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

struct kept_folder {
    struct mailbox *box;
    struct mail_user *user;
};

/* Most recently used first; a handful of entries, so a linear search. */
struct lmtp_folder_cache {
    struct kept_folder *entries;
    size_t count;
    size_t capacity;
};

struct lmtp_folder_cache *lmtp_folder_cache_new(size_t capacity)
{
    struct lmtp_folder_cache *cache = xcalloc(1, sizeof(*cache));
    cache->capacity = capacity;
    if (capacity > 0)
        cache->entries = xcalloc(capacity, sizeof(*cache->entries));
    return cache;
}

static void entry_close(struct kept_folder *e)
{
    mailbox_close(e->box);
    memset(e, 0, sizeof(*e));
}

void lmtp_folder_cache_free(struct lmtp_folder_cache *cache)
{
    if (cache == NULL)
        return;
    for (size_t i = 0; i < cache->count; i++)
        entry_close(&cache->entries[i]);
    free(cache->entries);
    free(cache);
}

/* Takes entry i out of the list (the caller owns its contents then). */
static struct kept_folder take(struct lmtp_folder_cache *cache, size_t i)
{
    struct kept_folder e = cache->entries[i];
    memmove(&cache->entries[i], &cache->entries[i + 1],
            (cache->count - i - 1) * sizeof(cache->entries[0]));
    cache->count--;
    return e;
}

struct mailbox *lmtp_folder_cache_get(struct lmtp_folder_cache *cache, struct mail_user *user,
                                      const struct namespace_config *ns, const char *name,
                                      struct petrel_error *err)
{
    for (size_t i = 0; i < cache->count; i++) {
        struct kept_folder *e = &cache->entries[i];
        if (e->user != user || !mailbox_is(e->box, ns, name))
            continue;
        struct kept_folder found = take(cache, i);
        if (mailbox_sync(found.box, err))
            return found.box;
        /* Deleted or damaged meanwhile: open it again below. */
        entry_close(&found);
        break;
    }
    return mailbox_open(user, ns, name, err);
}

void lmtp_folder_cache_put(struct lmtp_folder_cache *cache, struct mailbox *box, bool healthy)
{
    if (box == NULL)
        return;
    if (!healthy || cache->capacity == 0) {
        mailbox_close(box);
        return;
    }
    if (cache->count == cache->capacity)
        entry_close(&cache->entries[--cache->count]);
    memmove(&cache->entries[1], &cache->entries[0], cache->count * sizeof(cache->entries[0]));
    cache->entries[0] = (struct kept_folder){.box = box, .user = mailbox_user(box)};
    cache->count++;
}
