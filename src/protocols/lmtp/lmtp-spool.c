/* A DATA message in memory or in an unnamed file (see lmtp-spool.h). */
#include "protocols/lmtp/lmtp-spool.h"

#include "core/fs-util.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

void lmtp_spool_init(struct lmtp_spool *sp)
{
    memset(sp, 0, sizeof(*sp));
    sp->fd = -1;
    sp->threshold = LMTP_SPOOL_THRESHOLD;
    sp->write_min = 64 * 1024;
}

static void spool_fail(struct lmtp_spool *sp, const char *dir, int e)
{
    petrel_error_set_errno(&sp->err, e, "cannot write the message to %s: %s", dir, strerror(e));
    sp->failed = true;
}

void lmtp_spool_settle(struct lmtp_spool *sp, const char *dir, bool final)
{
    if (sp->failed) {
        buf_reset(&sp->mem);
        return;
    }
    if (sp->fd < 0 && sp->mem.len <= sp->threshold)
        return;
    /* Written in pieces of at least write_min (not every decoded chunk). */
    if (!final && sp->fd >= 0 && sp->mem.len < sp->write_min)
        return;
    if (sp->fd < 0) {
        bool linkable;
        sp->fd = fs_tmpfile_open(dir, &linkable, &sp->err);
        if (sp->fd < 0) {
            sp->failed = true;
            buf_reset(&sp->mem);
            return;
        }
    }
    const char *p = sp->mem.data;
    size_t left = sp->mem.len;
    while (left > 0) {
        ssize_t w = write(sp->fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            spool_fail(sp, dir, w < 0 ? errno : ENOSPC);
            break;
        }
        p += w;
        left -= (size_t)w;
        sp->filed += (uint64_t)w;
    }
    buf_reset(&sp->mem);
}

void lmtp_spool_free(struct lmtp_spool *sp)
{
    buf_free(&sp->mem);
    if (sp->fd >= 0)
        close(sp->fd);
    sp->fd = -1;
    sp->filed = 0;
    sp->failed = false;
}
