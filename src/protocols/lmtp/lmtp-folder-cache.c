/* Open folders of one delivery thread (see lmtp-folder-cache.h). */
#include "protocols/lmtp/lmtp-folder-cache.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kept_folder {
    struct mailbox *box;
    struct mail_user *user;
    size_t bytes;    /* mailbox_memory_bytes when handed back */
    int64_t used_ms; /* monotonic clock when handed back */
};

/* Most recently used first; a handful of entries, so a linear search. */
struct lmtp_folder_cache {
    struct kept_folder *entries;
    size_t count;
    size_t max_folders;
    size_t bytes;
    size_t max_bytes;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct lmtp_folder_cache *lmtp_folder_cache_new(size_t max_folders, size_t max_bytes)
{
    struct lmtp_folder_cache *cache = xcalloc(1, sizeof(*cache));
    cache->max_folders = max_bytes > 0 ? max_folders : 0;
    cache->max_bytes = max_bytes;
    if (cache->max_folders > 0)
        cache->entries = xcalloc(cache->max_folders, sizeof(*cache->entries));
    return cache;
}

static void entry_close(struct kept_folder *e)
{
    mailbox_close(e->box);
    memset(e, 0, sizeof(*e));
}

/* Takes entry i out of the list (the caller owns its contents then). */
static struct kept_folder take(struct lmtp_folder_cache *cache, size_t i)
{
    struct kept_folder e = cache->entries[i];
    memmove(&cache->entries[i], &cache->entries[i + 1],
            (cache->count - i - 1) * sizeof(cache->entries[0]));
    cache->count--;
    cache->bytes -= e.bytes;
    return e;
}

void lmtp_folder_cache_free(struct lmtp_folder_cache *cache)
{
    if (cache == NULL)
        return;
    lmtp_folder_cache_expire(cache, 0);
    free(cache->entries);
    free(cache);
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
    return mailbox_open_for(user, ns, name, MAILBOX_OPEN_POST, err);
}

void lmtp_folder_cache_put(struct lmtp_folder_cache *cache, struct mailbox *box, bool healthy)
{
    if (box == NULL)
        return;
    size_t bytes = healthy ? mailbox_memory_bytes(box) : 0;
    if (!healthy || cache->max_folders == 0 || bytes > cache->max_bytes) {
        mailbox_close(box);
        return;
    }
    /* Least recently used out first, until the newcomer fits. */
    while (cache->count > 0 &&
           (cache->count == cache->max_folders || cache->bytes + bytes > cache->max_bytes)) {
        struct kept_folder old = take(cache, cache->count - 1);
        entry_close(&old);
    }
    memmove(&cache->entries[1], &cache->entries[0], cache->count * sizeof(cache->entries[0]));
    cache->entries[0] = (struct kept_folder){
        .box = box, .user = mailbox_user(box), .bytes = bytes, .used_ms = now_ms()};
    cache->count++;
    cache->bytes += bytes;
}

size_t lmtp_folder_cache_expire(struct lmtp_folder_cache *cache, int64_t idle_ms)
{
    int64_t now = now_ms();
    size_t closed = 0;
    /* Oldest last: stop at the first one still in use. */
    while (cache->count > 0 &&
           (idle_ms <= 0 || now - cache->entries[cache->count - 1].used_ms >= idle_ms)) {
        struct kept_folder old = take(cache, cache->count - 1);
        entry_close(&old);
        closed++;
    }
    return closed;
}

size_t lmtp_folder_cache_count(const struct lmtp_folder_cache *cache)
{
    return cache->count;
}

size_t lmtp_folder_cache_bytes(const struct lmtp_folder_cache *cache)
{
    return cache->bytes;
}
