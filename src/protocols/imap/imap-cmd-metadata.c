/* GETMETADATA and SETMETADATA (RFC 5464), over the storage's METADATA
 * dict (storage/metadata/metadata-store.h).
 *
 * The dict answers through a callback from this session's loop: at once
 * for the file and SQLite drivers, later for PostgreSQL and Redis. Until
 * then the session is busy (pipelined input waits, as during LOGIN's wait
 * for the auth service) and holds the call in s->metadata_call; a session
 * freed meanwhile detaches the call, whose answer is then dropped. */
#include "protocols/imap/imap-private.h"

#include "core/buf.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-metadata-args.h"
#include "storage/metadata/metadata-store.h"

#include <stdlib.h>
#include <string.h>

struct imap_metadata_call {
    struct imap_session *s; /* NULL once the session is gone */
    struct buf mailbox;     /* the mailbox argument as the client sent it, for the answer */
    uint64_t maxsize;
    /* GETMETADATA */
    struct metadata_reader *reader; /* until its end callback */
    struct buf out;                 /* the response not yet handed to the session */
    bool any;                       /* the untagged response has begun */
    bool sent;                      /* part of it is in the session's output */
    bool paused;                    /* waiting for the output to drain */
    uint64_t longest;               /* the biggest value left out by MAXSIZE */
};

/* Below this much a response is handed to the session's output in one
 * write (the whole of a small answer); above it, entry by entry. */
#define GETMETADATA_CHUNK (64 * 1024)

bool imap_metadata_enabled(const struct imap_session *s)
{
    return mail_storage_config(s->ctx->storage)->attribute_dict != NULL;
}

static void call_free(struct imap_metadata_call *call);

void imap_metadata_abort(struct imap_session *s)
{
    struct imap_metadata_call *call = s->metadata_call;
    if (call == NULL)
        return;
    s->metadata_call = NULL;
    if (call->reader != NULL) {
        /* a GETMETADATA: its reader can be stopped now */
        metadata_reader_abort(call->reader);
        call_free(call);
        return;
    }
    call->s = NULL;
}

bool imap_metadata_cut(struct imap_session *s)
{
    struct imap_metadata_call *call = s->metadata_call;
    if (call == NULL || call->reader == NULL || !call->sent)
        return false;
    imap_metadata_abort(s);
    return true;
}

bool imap_metadata_continue(struct imap_session *s)
{
    struct imap_metadata_call *call = s->metadata_call;
    if (call == NULL || !call->paused)
        return false;
    call->paused = false;
    /* rows, the next pause or the end (the tagged reply) come inside */
    metadata_reader_resume(call->reader);
    return true;
}

/* The session a finished call answers, or NULL (gone); frees nothing. */
static struct imap_session *call_take(struct imap_metadata_call *call)
{
    struct imap_session *s = call->s;
    if (s != NULL)
        s->metadata_call = NULL;
    return s;
}

static void call_free(struct imap_metadata_call *call)
{
    buf_free(&call->mailbox);
    buf_free(&call->out);
    free(call);
}

/* ---------- shared steps ---------- */

/* The mailbox argument: "" for the server, else a folder of a namespace
 * (replies itself and returns false when unusable). */
static bool resolve_mailbox(struct imap_session *s, const struct imap_arg *arg,
                            const struct namespace_config **ns, char **name)
{
    if (arg->len == 0) {
        *ns = NULL;
        *name = NULL;
        return true;
    }
    return imap_resolve_folder(s, arg, ns, name);
}

/* The dict and the target, or a NO sent and NULL. Whether the session may
 * do `access` (metadata_access bits) is the storage's rule
 * (metadata_access_check): a folder it may not see answers as a missing
 * one, a missing right NOPERM. */
static struct dict *begin(struct imap_session *s, const struct namespace_config *ns,
                          const char *name, unsigned access, struct metadata_target *t)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict *dict = metadata_storage_dict(s->ctx->storage, &err);
    if (dict == NULL) {
        imap_reply_no(s, "[UNAVAILABLE] Metadata storage is unavailable.");
        return NULL;
    }
    if (!metadata_target_resolve(s->user, ns, name, NULL, access, t, &err)) {
        imap_reply_storage_error(s, &err);
        return NULL;
    }
    return dict;
}

static struct imap_metadata_call *call_new(struct imap_session *s, const struct imap_arg *mailbox,
                                           uint64_t maxsize)
{
    struct imap_metadata_call *call = xcalloc(1, sizeof(*call));
    call->s = s;
    call->maxsize = maxsize;
    imap_append_string(&call->mailbox, mailbox->str, mailbox->len);
    s->metadata_call = call;
    return call;
}

/* A synchronous driver has answered (and replied) inside the call; an
 * asynchronous one answers later: the session waits for it, taking no
 * further command meanwhile. */
static void wait_if_pending(struct imap_session *s)
{
    if (s->metadata_call != NULL)
        s->busy = true;
}

/* An entry's value as RFC 5464's value (nstring / literal8): a literal8
 * for a value with NUL bytes, which no other string form may carry. */
static void append_value(struct buf *out, const char *value, size_t len)
{
    if (memchr(value, '\0', len) != NULL) {
        buf_printf(out, "~{%zu}\r\n", len);
        buf_append(out, value, len);
    } else {
        imap_append_string(out, value, len);
    }
}

/* ---------- GETMETADATA ---------- */

static void getmetadata_flush(struct imap_session *s, struct imap_metadata_call *call)
{
    if (call->out.len > 0) {
        imap_send_raw(s, call->out.data, call->out.len);
        call->sent = true;
    }
    if (call->out.cap > 2 * GETMETADATA_CHUNK)
        buf_free(&call->out); /* a large value's room is not kept */
    else
        buf_reset(&call->out);
}

static enum metadata_row_action getmetadata_row(const struct metadata_entry *e, const char *value,
                                                size_t len, void *ctx)
{
    struct imap_metadata_call *call = ctx;
    struct imap_session *s = call->s;
    if ((uint64_t)len > call->maxsize) {
        if ((uint64_t)len > call->longest)
            call->longest = len;
        return METADATA_ROW_MORE;
    }
    struct buf *out = &call->out;
    buf_append_str(out, call->any ? " " : "* METADATA ");
    if (!call->any) {
        buf_append(out, call->mailbox.data, call->mailbox.len);
        buf_append_str(out, " (");
    }
    call->any = true;
    metadata_entry_format(e, out);
    buf_append_char(out, ' ');
    append_value(out, value, len);
    if (out->len < GETMETADATA_CHUNK)
        return METADATA_ROW_MORE;
    getmetadata_flush(s, call);
    if (!imap_session_output_full(s))
        return METADATA_ROW_MORE;
    /* The client is not reading: no next row until it does
     * (session_drained calls imap_metadata_continue). */
    call->paused = true;
    s->busy = true;
    imap_session_wait_output(s);
    return METADATA_ROW_PAUSE;
}

static void getmetadata_end(bool ok, const char *error, void *ctx)
{
    (void)error;
    struct imap_metadata_call *call = ctx;
    call->reader = NULL; /* gone after this callback */
    struct imap_session *s = call_take(call);
    if (s == NULL) {
        call_free(call);
        return;
    }
    if (!ok && !call->sent) {
        /* nothing of the response went out: it is dropped whole */
        call_free(call);
        imap_reply_no(s, "[UNAVAILABLE] Metadata storage failed.");
        return;
    }
    /* After a failure past the first piece, the response already sent is
     * closed at an entry's end and the command fails. */
    if (call->any) {
        buf_append_str(&call->out, ")\r\n");
        getmetadata_flush(s, call);
    }
    uint64_t longest = call->longest;
    call_free(call);
    if (!ok)
        imap_reply_no(s, "[UNAVAILABLE] Metadata storage failed.");
    else if (longest > 0)
        imap_reply_ok(s, "[METADATA LONGENTRIES %llu] GETMETADATA complete",
                      (unsigned long long)longest);
    else
        imap_reply_ok(s, "GETMETADATA complete");
}

static void cmd_getmetadata(struct imap_session *s, const struct imap_command *cmd)
{
    if (!imap_metadata_enabled(s)) {
        imap_reply_bad(s, "METADATA is not enabled.");
        return;
    }
    struct imap_getmetadata_args a;
    const char *why = NULL;
    if (!imap_getmetadata_parse(cmd->args, cmd->arg_count, &a, &why)) {
        imap_reply_bad(s, "%s", why);
        return;
    }
    const struct namespace_config *ns = NULL;
    char *name = NULL;
    if (!resolve_mailbox(s, a.mailbox, &ns, &name)) {
        imap_getmetadata_args_free(&a);
        return;
    }
    unsigned access = 0;
    for (size_t i = 0; i < a.count; i++)
        access |= metadata_access_for(a.entries[i].scope, false);
    struct metadata_target t;
    struct dict *dict = begin(s, ns, name, access, &t);
    if (dict == NULL)
        goto out;
    struct imap_metadata_call *call = call_new(s, a.mailbox, a.maxsize);
    struct metadata_reader *r = metadata_read_start(dict, &t, a.entries, a.count, a.depth,
                                                    getmetadata_row, getmetadata_end, call);
    if (r != NULL) {
        /* paused, or waiting for an asynchronous dict */
        call->reader = r;
        s->busy = true;
    }
out:
    free(name);
    imap_getmetadata_args_free(&a);
}

/* ---------- SETMETADATA ---------- */

static void setmetadata_done(enum metadata_write_status status, const char *error, void *ctx)
{
    (void)error;
    struct imap_metadata_call *call = ctx;
    struct imap_session *s = call_take(call);
    call_free(call);
    if (s == NULL)
        return;
    if (status == METADATA_WRITE_OK)
        imap_reply_ok(s, "SETMETADATA complete");
    else if (status == METADATA_WRITE_TOOMANY)
        imap_reply_no(s, "[METADATA TOOMANY] Too many annotations");
    else if (status == METADATA_WRITE_READONLY)
        imap_reply_no(s, "[NOPERM] /shared/admin is set by the server's configuration.");
    else
        imap_reply_no(s, "[UNAVAILABLE] Metadata storage failed.");
}

static void cmd_setmetadata(struct imap_session *s, const struct imap_command *cmd)
{
    if (!imap_metadata_enabled(s)) {
        imap_reply_bad(s, "METADATA is not enabled.");
        return;
    }
    struct imap_setmetadata_args a;
    const char *why = NULL;
    if (!imap_setmetadata_parse(cmd->args, cmd->arg_count, &a, &why)) {
        imap_reply_bad(s, "%s", why);
        return;
    }
    const struct mail_config *cfg = mail_storage_config(s->ctx->storage);
    const struct namespace_config *ns = NULL;
    char *name = NULL;
    struct metadata_change *changes = NULL;
    if (!resolve_mailbox(s, a.mailbox, &ns, &name))
        goto out;
    uint64_t max_value = metadata_max_value(s->ctx->storage);
    for (size_t i = 0; i < a.count; i++) {
        const struct imap_metadata_set *e = &a.sets[i];
        if (e->entry.scope == METADATA_PRIVATE && !cfg->metadata_private) {
            imap_reply_no(s, "[METADATA NOPRIVATE] Private annotations are not supported");
            goto out;
        }
        if (metadata_entry_internal(&e->entry)) {
            imap_reply_no(s, "[NOPERM] Permission denied.");
            goto out;
        }
        if (e->value != NULL && (e->too_big_for_memory || (uint64_t)e->len > max_value)) {
            imap_reply_no(s, "[METADATA MAXSIZE %llu] Annotation too large",
                          (unsigned long long)max_value);
            goto out;
        }
    }
    unsigned access = 0;
    for (size_t i = 0; i < a.count; i++)
        access |= metadata_access_for(a.sets[i].entry.scope, true);
    struct metadata_target t;
    struct dict *dict = begin(s, ns, name, access, &t);
    if (dict == NULL)
        goto out;
    changes = xcalloc(a.count, sizeof(*changes));
    for (size_t i = 0; i < a.count; i++) {
        changes[i].entry = a.sets[i].entry;
        changes[i].value = a.sets[i].value;
        changes[i].len = a.sets[i].len;
    }
    struct imap_metadata_call *call = call_new(s, a.mailbox, UINT64_MAX);
    metadata_write(dict, &t, changes, a.count, metadata_max_entries(s->ctx->storage),
                   setmetadata_done, call);
    wait_if_pending(s);
out:
    free(changes);
    free(name);
    imap_setmetadata_args_free(&a);
}

const struct imap_command_def imap_commands_metadata[] = {
    {"GETMETADATA", IMAP_AUTHED, cmd_getmetadata},
    {"SETMETADATA", IMAP_AUTHED, cmd_setmetadata},
    {NULL, 0, NULL},
};
