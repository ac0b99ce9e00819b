/* The parser's literal sink for APPEND (see imap-literal-spool.h). */
#include "protocols/imap/imap-literal-spool.h"

#include "core/xalloc.h"
#include "protocols/imap/imap-private.h"

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

/* The most of a storage error's text a refusal carries: the line stays
 * short whatever the storage says. */
#define LITERAL_REFUSAL_MESSAGE_MAX 144

/* A message literal the storage already knows it cannot save (over the
 * quota, or over quota_mail_size) is refused before the client sends it,
 * as Dovecot's quota plugin does at save begin (quota_test_alloc): the
 * bytes could only be spooled to be thrown away. The storage decides
 * (mail_save_test), with the size of this message plus the earlier ones
 * of a MULTIAPPEND, which is all or nothing. A name that does not resolve
 * is left to the command to answer. */
static const char *spool_refuse(void *ctx, const char *command, size_t arg_index, uint64_t size,
                                bool non_sync)
{
    (void)non_sync;
    struct imap_session *s = ctx;
    if (strcmp(command, "APPEND") != 0 || arg_index == 0 || s->user == NULL ||
        !mail_save_test_wanted(s->user))
        return NULL;
    const char *wire = NULL;
    size_t len = 0;
    if (!imap_parser_first_arg(s->parser, &wire, &len))
        return NULL;
    char *copy = xstrndup(wire, len);
    const struct namespace_config *ns = NULL;
    char *name = NULL;
    bool resolved = imap_folder_from_wire(s, copy, len, &ns, &name);
    free(copy);
    if (!resolved)
        return NULL;
    uint64_t earlier = imap_parser_later_literal_bytes(s->parser);
    struct petrel_error err;
    petrel_error_clear(&err);
    bool fits = mail_save_test(s->user, ns, name, earlier + size, size, &err);
    /* A folder that is not there is what the APPEND would answer first
     * (Dovecot opens it before the literal too); asked only on a refusal
     * and only in the user's own namespace, where it reveals nothing. */
    bool missing =
        !fits && ns->type == NAMESPACE_PERSONAL && !mail_folder_exists(s->user, ns, name);
    free(name);
    if (!missing && (fits || (err.code != PETREL_ERR_OVER_QUOTA && err.code != PETREL_ERR_LIMIT)))
        return NULL;
    /* Valid until the next refusal (imap_parser_sink); a text per session
     * only once one was needed. */
    free(s->literal_refusal);
    if (missing)
        s->literal_refusal = xasprintf("[TRYCREATE] Mailbox does not exist.");
    else /* the reply the save would have got (imap_reply_storage_error) */
        s->literal_refusal =
            xasprintf("%s %.*s", err.code == PETREL_ERR_OVER_QUOTA ? "[OVERQUOTA]" : "[LIMIT]",
                      LITERAL_REFUSAL_MESSAGE_MAX, err.message);
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
