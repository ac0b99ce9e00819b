/* The storage API's calls on one open folder that no storage module hooks
 * (mail-storage.h "one folder", "index maintenance", \Recent, usage):
 * passed to the folder's driver as they are. The hooked ones (open, save,
 * expunge, flags) are in mail-storage.c. */
#include "storage/mail-storage-private.h"

#include "storage/mailbox-pvt.h"

static const struct mail_storage_vfuncs *box_v(const struct mailbox *box)
{
    return mailbox_common(box)->user->storage->v;
}

void mailbox_close(struct mailbox *box)
{
    if (box == NULL)
        return;
    mailbox_pvt_free(mailbox_common(box)->pvt);
    mailbox_common(box)->pvt = NULL;
    box_v(box)->mailbox_close(box);
}

bool mailbox_is_read_only(const struct mailbox *box)
{
    return box_v(box)->is_read_only(box);
}

size_t mailbox_memory_bytes(const struct mailbox *box)
{
    return box_v(box)->memory_bytes(box);
}

bool mailbox_is(const struct mailbox *box, const struct namespace_config *ns, const char *name)
{
    return box_v(box)->mailbox_is(box, ns, name);
}

bool mailbox_sync(struct mailbox *box, struct petrel_error *err)
{
    return box_v(box)->mailbox_sync(box, err);
}

uint32_t mailbox_handle_uid_validity(const struct mailbox *box)
{
    return box_v(box)->handle_uid_validity(box);
}

struct pvt_unseen {
    const struct mailbox_pvt *pvt;
    uint32_t unseen;
};

static void count_unseen(const struct mailbox_message *msg, void *ctx)
{
    struct pvt_unseen *u = ctx;
    if (!mailbox_pvt_has(u->pvt, msg->uid))
        u->unseen++;
}

bool mailbox_get_info(struct mailbox *box, bool stats, struct mailbox_info *info,
                      struct petrel_error *err)
{
    if (!box_v(box)->get_info(box, stats, info, err))
        return false;
    if (!mailbox_pvt_active(box))
        return true;
    /* A reader with private \Seen: unseen counts what they have not seen. */
    struct mailbox_pvt *p = mailbox_pvt_get(box);
    if (p == NULL)
        return true;
    struct pvt_unseen u = {.pvt = p};
    bool truncated = false;
    if (!box_v(box)->foreach (box, 0, count_unseen, &u, &truncated, err))
        return false;
    info->unseen = u.unseen;
    return true;
}

bool mailbox_foreach(struct mailbox *box, size_t limit,
                     void (*fn)(const struct mailbox_message *msg, void *ctx), void *ctx,
                     bool *truncated, struct petrel_error *err)
{
    return box_v(box)->foreach (box, limit, fn, ctx, truncated, err);
}

bool mailbox_recent_claim(struct mailbox *box, uint32_t *first, uint32_t *until,
                          struct petrel_error *err)
{
    return box_v(box)->recent_claim(box, first, until, err);
}

uint32_t mailbox_recent_peek(struct mailbox *box)
{
    return box_v(box)->recent_peek(box);
}

bool mailbox_index_rebuild(struct mailbox *box, struct mailbox_rebuild_stats *stats,
                           struct petrel_error *err)
{
    return box_v(box)->index_rebuild(box, stats, err);
}

bool mailbox_index_optimize(struct mailbox *box, struct petrel_error *err)
{
    return box_v(box)->index_optimize(box, err);
}

bool mailbox_cache_purge(struct mailbox *box, uint64_t *carried, uint64_t *reclaimed,
                         struct petrel_error *err)
{
    return box_v(box)->cache_purge(box, carried, reclaimed, err);
}

bool mailbox_usage_recalc(struct mailbox *box, struct mail_folder_usage *out,
                          struct petrel_error *err)
{
    return box_v(box)->usage_recalc(box, out, err);
}

void mailbox_guid_hex(const uint8_t guid[16], char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < 16; i++) {
        out[i * 2] = hex[guid[i] >> 4];
        out[i * 2 + 1] = hex[guid[i] & 15];
    }
    out[32] = '\0';
}
