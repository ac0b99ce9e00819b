/* The parser's literal sink for APPEND (see imap-literal-spool.h). */
#include "protocols/imap/imap-literal-spool.h"

#include "core/xalloc.h"
#include "protocols/imap/imap-private.h"
#include "storage/quota/quota-module.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *spool_open(void *ctx, const char *command, size_t arg_index, uint64_t size,
                        bool literal8)
{
    struct imap_session *s = ctx;
    (void)size;
    /* The message literals of APPEND (and MULTIAPPEND): not its mailbox
     * name, the first argument. */
    if (strcmp(command, "APPEND") != 0 || arg_index == 0 || s->user == NULL)
        return NULL;
    struct imap_literal_spool *sp = xcalloc(1, sizeof(*sp));
    sp->literal8 = literal8;
    /* A spool that cannot be made still takes the bytes (the client sends
     * them after the "+ OK" anyway) and the APPEND answers NO. */
    sp->fd = mail_user_spool_open(s->user, &sp->err);
    sp->failed = sp->fd < 0;
    return sp;
}

/* A message literal over quota_mail_size is refused before the client
 * sends it (as Dovecot's quota plugin does at save begin): the bytes could
 * only be spooled to be thrown away. */
static const char *spool_refuse(void *ctx, const char *command, size_t arg_index, uint64_t size)
{
    struct imap_session *s = ctx;
    if (strcmp(command, "APPEND") != 0 || arg_index == 0 || s->user == NULL)
        return NULL;
    char text[sizeof(s->literal_refusal) - 16];
    if (!quota_user_too_large(s->user, size, text, sizeof(text)))
        return NULL;
    snprintf(s->literal_refusal, sizeof(s->literal_refusal), "[OVERQUOTA] %s", text);
    return s->literal_refusal;
}

static void spool_write(void *ctx, void *spool, const void *data, size_t len)
{
    (void)ctx;
    struct imap_literal_spool *sp = spool;
    sp->written += len;
    if (!sp->literal8 && !sp->has_nul && memchr(data, '\0', len) != NULL)
        sp->has_nul = true;
    const char *p = data;
    while (!sp->failed && len > 0) {
        ssize_t w = write(sp->fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            /* With its errno, so a full disk answers [OVERQUOTA] (RFC 5530)
             * as an APPEND saved from memory does, not [SERVERBUG]. */
            int e = w < 0 ? errno : ENOSPC;
            petrel_error_set_errno(&sp->err, e, "cannot spool the message: %s", strerror(e));
            sp->failed = true;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
}

static void spool_close(void *ctx, void *spool)
{
    (void)ctx;
    struct imap_literal_spool *sp = spool;
    if (sp->fd >= 0)
        close(sp->fd);
    free(sp);
}

void imap_literal_spool_attach(struct imap_session *s)
{
    const struct imap_literal_sink sink = {
        .threshold = IMAP_SPOOL_THRESHOLD,
        .max_memory = IMAP_MEMORY_LITERAL_MAX,
        .open = spool_open,
        .write = spool_write,
        .close = spool_close,
        .refuse = spool_refuse,
        .ctx = s,
    };
    imap_parser_set_sink(s->parser, &sink);
}
