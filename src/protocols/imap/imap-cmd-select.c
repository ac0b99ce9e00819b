/* The selected state: SELECT, EXAMINE, CLOSE, UNSELECT, CHECK, EXPUNGE,
 * IDLE, and the untagged updates that keep a session's view of the folder
 * in step with other sessions and processes. */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-qresync.h"
#include "storage/acl/acl-rights.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------- \Recent ---------- */

bool imap_recent_has(const struct imap_session *s, uint32_t uid)
{
    for (size_t i = s->recent_count; i > 0; i--) { /* newest ranges last */
        if (uid >= s->recent[i - 1].lo && uid < s->recent[i - 1].hi)
            return true;
    }
    return false;
}

/* Takes the folder's newly arrived messages as recent: a read-write
 * session claims them (no other session will see them as recent), a
 * read-only one sees whatever nobody has claimed yet. */
static void recent_take(struct imap_session *s)
{
    if (s->readonly) {
        uint32_t mark = mailbox_recent_peek(s->box);
        s->recent = xgrow(s->recent, &s->recent_cap, 1, sizeof(*s->recent));
        s->recent[0] = (struct imap_recent_range){mark, UINT32_MAX};
        s->recent_count = 1;
        return;
    }
    uint32_t first, until;
    struct petrel_error err;
    if (!mailbox_recent_claim(s->box, &first, &until, &err)) {
        log_warn(IMAP_COMPONENT, "recent claim failed", "session=%s error=\"%s\"", s->io.id,
                 err.message);
        return;
    }
    if (until <= first)
        return;
    /* The ranges stay ascending and apart. A mark that went back (its file
     * damaged, emptied or replaced: every message recent once more) gives a
     * range over UIDs this session already holds; merged, so no UID counts
     * twice in RECENT (which would exceed EXISTS). */
    while (s->recent_count > 0 && s->recent[s->recent_count - 1].hi >= first) {
        const struct imap_recent_range *last = &s->recent[s->recent_count - 1];
        if (last->lo < first)
            first = last->lo;
        if (last->hi > until)
            until = last->hi;
        s->recent_count--;
    }
    s->recent = xgrow(s->recent, &s->recent_cap, s->recent_count + 1, sizeof(*s->recent));
    s->recent[s->recent_count++] = (struct imap_recent_range){first, until};
}

/* Sequence position of the first view entry with a UID >= `uid`. */
static size_t view_lower_bound(const struct mailbox_view *view, uint32_t uid)
{
    size_t lo = 0, hi = mailbox_view_count(view);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mailbox_view_at(view, (uint32_t)(mid + 1))->uid < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Messages of the view recent for this session (UIDs are below
 * UINT32_MAX, so the open-ended read-only range misses none). */
static uint32_t recent_in_view(const struct imap_session *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->recent_count; i++)
        n +=
            view_lower_bound(s->view, s->recent[i].hi) - view_lower_bound(s->view, s->recent[i].lo);
    return (uint32_t)n;
}

/* ---------- QRESYNC ---------- */

void imap_send_vanished_earlier(struct imap_session *s, const struct imap_seqset *known)
{
    struct mailbox_view_status st;
    mailbox_view_get_status(s->view, &st);
    if (st.uid_next <= 1)
        return;
    struct imap_seqset all = {0};
    if (known == NULL) {
        imap_seqset_add(&all, 1, st.uid_next - 1);
        known = &all;
    }
    struct imap_seqset gone = {0};
    for (size_t r = 0; r < known->count; r++) {
        uint32_t lo = known->ranges[r].lo;
        uint32_t hi = known->ranges[r].hi < st.uid_next ? known->ranges[r].hi : st.uid_next - 1;
        if (lo > hi)
            continue;
        /* The view's UIDs in lo..hi, walked from the first; the gaps are gone. */
        size_t pos = view_lower_bound(s->view, lo);
        size_t n = mailbox_view_count(s->view);
        uint32_t expect = lo;
        for (; pos < n && expect <= hi; pos++) {
            uint32_t uid = mailbox_view_at(s->view, (uint32_t)(pos + 1))->uid;
            if (uid > hi)
                break;
            if (uid > expect)
                imap_seqset_add(&gone, expect, uid - 1);
            expect = uid + 1;
            if (expect == 0) /* uid was the largest there is */
                break;
        }
        if (expect != 0 && expect <= hi)
            imap_seqset_add(&gone, expect, hi);
    }
    if (gone.count > 0) {
        struct buf line = {0};
        buf_append_str(&line, "* VANISHED (EARLIER) ");
        imap_seqset_format(&gone, &line);
        buf_append_str(&line, "\r\n");
        imap_send_raw(s, line.data, line.len);
        buf_free(&line);
    }
    imap_seqset_free(&gone);
    imap_seqset_free(&all);
}

/* SELECT ... (QRESYNC (...)): after the usual responses, what the client
 * missed since its mod-sequence, if its UIDVALIDITY is still the folder's
 * (RFC 7162 3.2.5). */
static void qresync_catch_up(struct imap_session *s, const struct imap_qresync_param *q)
{
    struct mailbox_view_status st;
    mailbox_view_get_status(s->view, &st);
    if (q->uid_validity != st.uid_validity)
        return; /* the client must start over: nothing it knows holds */
    imap_send_vanished_earlier(s, q->known_given ? &q->known : NULL);
    struct buf out = {0};
    size_t n = mailbox_view_count(s->view);
    for (uint32_t seq = 1; seq <= n; seq++) {
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, seq);
        if (e->modseq <= q->modseq)
            continue;
        /* RFC 7162 3.2.5: with known-uids, flag changes are reported only
         * for the messages the client named (Dovecot does so too). */
        if (q->known_given && !imap_seqset_contains(&q->known, e->uid))
            continue;
        buf_printf(&out, "* %u FETCH (UID %u FLAGS ", seq, e->uid);
        imap_append_flags(&out, s, e->uid, e->flags, e->keywords);
        buf_printf(&out, " MODSEQ (%llu))\r\n", (unsigned long long)e->modseq);
        if (out.len >= 64 * 1024) {
            imap_send_raw(s, out.data, out.len);
            buf_reset(&out);
        }
    }
    if (out.len > 0)
        imap_send_raw(s, out.data, out.len);
    buf_free(&out);
}

void imap_append_flags(struct buf *out, const struct imap_session *s, uint32_t uid,
                       uint32_t flags, uint32_t keywords)
{
    bool first = true;
    buf_append_char(out, '(');
    if (s->recent_count > 0 && imap_recent_has(s, uid)) {
        buf_append_str(out, "\\Recent");
        first = false;
    }
    for (size_t i = 0; i < MAIL_FLAG_NAME_COUNT; i++) {
        if (flags & mail_flag_names[i].bit) {
            if (!first)
                buf_append_char(out, ' ');
            buf_append(out, mail_flag_names[i].name, mail_flag_names[i].len);
            first = false;
        }
    }
    /* Only the set bits: most messages have no keyword at all. */
    while (keywords != 0) {
        unsigned k = (unsigned)__builtin_ctz(keywords);
        keywords &= keywords - 1;
        const char *name = s->view != NULL ? mailbox_view_keyword_name(s->view, k) : NULL;
        if (name != NULL) {
            if (!first)
                buf_append_char(out, ' ');
            buf_append_str(out, name);
            first = false;
        }
    }
    buf_append_char(out, ')');
}

void imap_selected_send_flags(struct imap_session *s)
{
    struct buf line = {0};
    buf_append_str(&line, "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft");
    s->keyword_names = 0;
    for (unsigned k = 0; k < 32; k++) {
        const char *name = mailbox_view_keyword_name(s->view, k);
        if (name != NULL) {
            buf_printf(&line, " %s", name);
            s->keyword_names |= 1u << k;
        }
    }
    buf_append_str(&line, ")\r\n");
    struct mailbox_view_status st;
    mailbox_view_get_status(s->view, &st);
    if (s->readonly) {
        buf_append_str(&line, "* OK [PERMANENTFLAGS ()] Read-only mailbox.\r\n");
    } else {
        /* Only the flags the ACL lets this user keep (as Dovecot): \\Seen
         * with s, \\Deleted with t, the others and keywords with w. */
        uint32_t rights = mailbox_my_rights(s->box);
        bool w = (rights & ACL_WRITE) != 0;
        struct buf perm = {0};
        if (w)
            buf_append_str(&perm, " \\Answered \\Flagged");
        if ((rights & ACL_WRITE_DELETED) != 0)
            buf_append_str(&perm, " \\Deleted");
        if ((rights & ACL_WRITE_SEEN) != 0)
            buf_append_str(&perm, " \\Seen");
        if (w)
            buf_append_str(&perm, " \\Draft");
        for (unsigned k = 0; w && k < 32; k++) {
            const char *name = mailbox_view_keyword_name(s->view, k);
            if (name != NULL)
                buf_printf(&perm, " %s", name);
        }
        if (w && st.keywords_creatable)
            buf_append_str(&perm, " \\*");
        buf_printf(&line, "* OK [PERMANENTFLAGS (%s)] Flags permitted.\r\n",
                   perm.len > 0 ? buf_cstr(&perm) + 1 : "");
        buf_free(&perm);
    }
    imap_send_raw(s, line.data, line.len);
    buf_free(&line);
}

static void idle_changed(void *ctx);

void imap_condstore_enable(struct imap_session *s)
{
    if (s->condstore)
        return;
    s->condstore = true;
    if (s->view == NULL)
        return;
    struct mailbox_view_status st;
    mailbox_view_get_status(s->view, &st);
    imap_send(s, "* OK [HIGHESTMODSEQ %llu] Highest.", (unsigned long long)st.highest_modseq);
}

void imap_selected_close(struct imap_session *s)
{
    mailbox_watch_free(s->watch);
    s->watch = NULL;
    mailbox_view_free(s->view);
    s->view = NULL;
    mailbox_close(s->box);
    s->box = NULL;
    s->idling = false;
    s->recent_count = 0;
    s->recent_reported = 0;
    imap_searchres_clear(s);
    imap_context_free_all(s); /* RFC 5267 4.3: updates end with the selection */
    if (s->state == IMAP_STATE_SELECTED)
        s->state = IMAP_STATE_AUTHENTICATED;
}

/* A message can carry a keyword before the view knows its name (our own
 * \Seen or STORE took in another session's keyword bit while the name was
 * not read yet): its FETCH then left the keyword out, and once the name is
 * known the entry no longer differs from the index, so no change shows it.
 * Such messages get their FLAGS again, after the FLAGS announcement. */
static void send_newly_named(struct imap_session *s, const struct mailbox_view_changes *ch,
                             uint32_t newly, struct buf *out)
{
    if (newly == 0)
        return;
    size_t count = mailbox_view_count(s->view);
    bool *sent = xcalloc(count + 1, sizeof(*sent)); /* by the changes already */
    for (size_t i = 0; i < ch->changed_count; i++) {
        if (ch->changed_seqs[i] <= count)
            sent[ch->changed_seqs[i]] = true;
    }
    for (uint32_t seq = 1; seq <= count; seq++) {
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, seq);
        if (e == NULL || (e->keywords & newly) == 0 || sent[seq])
            continue;
        buf_printf(out, "* %u FETCH (UID %u FLAGS ", seq, e->uid);
        imap_append_flags(out, s, e->uid, e->flags, e->keywords);
        if (s->condstore)
            buf_printf(out, " MODSEQ (%llu)", (unsigned long long)e->modseq);
        buf_append_str(out, ")\r\n");
    }
    free(sent);
}

void imap_selected_sync(struct imap_session *s)
{
    if (s->view == NULL)
        return;
    /* Four stats and an index check per command, or one read of the
     * loop's inotify queue when the folder is watched. When nobody else
     * changed the folder, what is new to the view is the session's own
     * APPEND or EXPUNGE, which its handle holds already. */
    bool others = s->watch == NULL || mailbox_watch_take_changed(s->watch);
    uint32_t named_before = s->keyword_names;
    struct mailbox_view_changes ch;
    struct petrel_error err;
    if (!(others ? mailbox_view_sync(s->view, &ch, &err)
                 : mailbox_view_catch_up(s->view, &ch, &err))) {
        log_warn(IMAP_COMPONENT, "view sync failed", "session=%s error=\"%s\"", s->io.id,
                 err.message);
        return;
    }
    struct buf out = {0};
    if (ch.uidvalidity_changed) {
        mailbox_view_changes_free(&ch);
        imap_send(s, "* OK [CLOSED] The mailbox was recreated; select it again.");
        /* The watch may be what called us: it goes with the next close. */
        mailbox_view_free(s->view);
        mailbox_close(s->box);
        s->view = NULL;
        s->box = NULL;
        s->state = IMAP_STATE_AUTHENTICATED;
        imap_searchres_clear(s);
        imap_context_free_all(s);
        return;
    }
    /* RFC 5267 4.3.4: REMOVEFROM before the expunge it follows from. */
    imap_context_expunged(s, ch.expunged_uids, ch.expunged_count);
    if (s->qresync && ch.expunged_count > 0) {
        /* RFC 7162 3.2.10: VANISHED replaces EXPUNGE once QRESYNC is on. */
        struct imap_seqset gone = {0};
        for (size_t i = 0; i < ch.expunged_count; i++)
            imap_seqset_add(&gone, ch.expunged_uids[i], ch.expunged_uids[i]);
        buf_append_str(&out, "* VANISHED ");
        imap_seqset_format(&gone, &out);
        buf_append_str(&out, "\r\n");
        imap_seqset_free(&gone);
    } else {
        for (size_t i = 0; i < ch.expunged_count; i++)
            buf_printf(&out, "* %u EXPUNGE\r\n", ch.expunged_seqs[i]);
    }
    if (ch.new_count > 0)
        recent_take(s);
    if (ch.new_count > 0 || ch.expunged_count > 0)
        buf_printf(&out, "* %u EXISTS\r\n", ch.exists);
    /* The count moves only with messages coming or going (new ones are
     * claimed just above): most syncs find neither. */
    if (ch.new_count > 0 || ch.expunged_count > 0) {
        uint32_t recent = recent_in_view(s);
        if (recent != s->recent_reported) /* as Dovecot: only a change */
            buf_printf(&out, "* %u RECENT\r\n", recent);
        s->recent_reported = recent;
    }
    if (out.len > 0)
        imap_send_raw(s, out.data, out.len);
    buf_reset(&out);
    if (ch.keywords_changed)
        imap_selected_send_flags(s); /* and s->keyword_names */
    for (size_t i = 0; i < ch.changed_count; i++) {
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, ch.changed_seqs[i]);
        if (e == NULL)
            continue;
        buf_printf(&out, "* %u FETCH (UID %u FLAGS ", ch.changed_seqs[i], e->uid);
        imap_append_flags(&out, s, e->uid, e->flags, e->keywords);
        if (s->condstore)
            buf_printf(&out, " MODSEQ (%llu)", (unsigned long long)e->modseq);
        buf_append_str(&out, ")\r\n");
    }
    uint32_t newly_named = ch.keywords_changed ? s->keyword_names & ~named_before : 0;
    if (ch.keywords_changed)
        send_newly_named(s, &ch, newly_named, &out);
    if (out.len > 0)
        imap_send_raw(s, out.data, out.len);
    buf_free(&out);
    /* RFC 5267 4.3.3: ADDTO after the EXISTS that numbers the new messages. */
    imap_context_changed(s, &ch, newly_named);
    mailbox_view_changes_free(&ch);
}

static void select_common(struct imap_session *s, const struct imap_command *cmd, bool readonly)
{
    if (cmd->arg_count < 1 || cmd->args[0].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "%s needs a mailbox name.", readonly ? "EXAMINE" : "SELECT");
        return;
    }
    /* RFC 4466 select-params: (CONDSTORE), (QRESYNC (...)), or both. */
    struct imap_qresync_param qr = {0};
    bool qr_given = false;
    for (size_t i = 1; i < cmd->arg_count; i++) {
        const struct imap_arg *p = &cmd->args[i];
        bool ok = p->type == IMAP_ARG_LIST && p->count > 0;
        for (size_t k = 0; ok && k < p->count; k++) {
            if (imap_arg_atom_equals(&p->list[k], "CONDSTORE")) {
                s->condstore = true;
            } else if (imap_arg_atom_equals(&p->list[k], "QRESYNC") && k + 1 < p->count &&
                       !qr_given) {
                /* RFC 7162 3.2.5: only after ENABLE QRESYNC. */
                ok = s->qresync && imap_qresync_parse(&p->list[k + 1], &qr);
                qr_given = ok;
                k++;
            } else {
                ok = false;
            }
        }
        if (!ok) {
            imap_qresync_param_free(&qr);
            imap_reply_bad(s, "Unknown or invalid SELECT parameter.");
            return;
        }
    }
    /* RFC 3501: a failed SELECT leaves no mailbox selected either. The
     * folder's handle is kept aside: selecting the same folder again (what
     * clients do to refresh) reuses it, synced as an open would, instead of
     * reading the whole index again. */
    bool was_selected = s->box != NULL;
    struct mailbox *previous = s->box;
    /* freed after the new watch holds the same directories */
    struct mailbox_watch *previous_watch = s->watch;
    s->box = NULL;
    s->watch = NULL;
    imap_selected_close(s);
    if (was_selected)
        imap_send(s, "* OK [CLOSED] Previous mailbox closed.");
    const struct namespace_config *ns;
    char *name;
    if (!imap_resolve_folder(s, &cmd->args[0], &ns, &name)) {
        mailbox_watch_free(previous_watch);
        if (previous != NULL)
            mailbox_close(previous);
        imap_qresync_param_free(&qr);
        return;
    }
    struct petrel_error err;
    struct mailbox *box = NULL;
    struct mailbox_watch *keep_watch = NULL;
    if (previous != NULL && mailbox_is(previous, ns, name)) {
        box = previous;
        /* The watch of a folder still in place stays: what it queued so
         * far is taken now, and the sync below covers it. */
        if (previous_watch != NULL && !mailbox_watch_lost(previous_watch)) {
            (void)mailbox_watch_take_changed(previous_watch);
            keep_watch = previous_watch;
            previous_watch = NULL;
        }
        if (!mailbox_sync(box, &err)) {
            mailbox_close(box);
            box = NULL;
        }
    } else {
        if (previous != NULL)
            mailbox_close(previous);
        box = mailbox_open(s->user, ns, name, &err);
    }
    struct mailbox_view *view = box != NULL ? mailbox_view_new(box, &err) : NULL;
    free(name);
    if (view == NULL) {
        mailbox_watch_free(previous_watch);
        mailbox_watch_free(keep_watch);
        if (box != NULL)
            mailbox_close(box);
        imap_qresync_param_free(&qr);
        imap_reply_storage_error(s, &err);
        return;
    }
    /* A folder the server may not write opens read-only, as for EXAMINE
     * (RFC 3501 allows SELECT to answer [READ-ONLY]). */
    readonly = readonly || mailbox_is_read_only(box);
    /* So does one whose ACL gives no right to change anything in it
     * (Dovecot's rule): the client shows it read-only. */
    if ((mailbox_my_rights(box) & (ACL_INSERT | ACL_EXPUNGE | ACL_WRITE | ACL_WRITE_DELETED |
                                   ACL_WRITE_SEEN)) == 0)
        readonly = true;
    s->box = box;
    s->view = view;
    s->readonly = readonly;
    s->state = IMAP_STATE_SELECTED;
    s->recent_count = 0;
    recent_take(s);
    s->recent_reported = recent_in_view(s);
    /* Watched from now on, so commands sync only after a change (NULL
     * without inotify: every command syncs, and IDLE polls). */
    s->watch = keep_watch != NULL ? keep_watch
                                  : mailbox_watch_new_native(s->ctx->watches, box, idle_changed, s);
    mailbox_watch_free(previous_watch);
    struct mailbox_view_status st;
    mailbox_view_get_status(view, &st);
    imap_selected_send_flags(s);
    struct buf out = {0};
    buf_printf(&out, "* %u EXISTS\r\n* %u RECENT\r\n", st.messages, s->recent_reported);
    if (st.first_unseen_seq > 0)
        buf_printf(&out, "* OK [UNSEEN %u] First unseen.\r\n", st.first_unseen_seq);
    buf_printf(&out,
               "* OK [UIDVALIDITY %u] UIDs valid.\r\n* OK [UIDNEXT %u] Predicted next UID.\r\n",
               st.uid_validity, st.uid_next);
    buf_printf(&out, "* OK [HIGHESTMODSEQ %llu] Highest.\r\n",
               (unsigned long long)st.highest_modseq);
    imap_send_raw(s, out.data, out.len);
    buf_free(&out);
    if (qr_given)
        qresync_catch_up(s, &qr);
    imap_qresync_param_free(&qr);
    imap_reply_ok(s, "[%s] %s completed.", readonly ? "READ-ONLY" : "READ-WRITE",
                  readonly ? "EXAMINE" : "SELECT");
}

static void cmd_select(struct imap_session *s, const struct imap_command *cmd)
{
    select_common(s, cmd, false);
}

static void cmd_examine(struct imap_session *s, const struct imap_command *cmd)
{
    select_common(s, cmd, true);
}

/* Expunges \Deleted messages (all, or those in `uids`) without sending
 * anything: the next sync reports them. */
static bool expunge_deleted(struct imap_session *s, const uint32_t *uids, size_t uid_count,
                            struct petrel_error *err)
{
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    bool ok = mailbox_expunge(s->box, uids, uid_count, &gone, &gone_count, err);
    free(gone);
    return ok;
}

static void cmd_close(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    struct petrel_error err;
    /* CLOSE expunges silently; a failure still closes (RFC 3501 6.4.2). */
    if (!s->readonly && !expunge_deleted(s, NULL, 0, &err))
        log_warn(IMAP_COMPONENT, "CLOSE expunge failed", "session=%s error=\"%s\"", s->io.id,
                 err.message);
    imap_selected_close(s);
    imap_reply_ok(s, "CLOSE completed.");
}

static void cmd_unselect(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    imap_selected_close(s);
    imap_reply_ok(s, "UNSELECT completed.");
}

static void cmd_check(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    imap_reply_ok(s, "CHECK completed.");
}

bool imap_selected_readonly_refused(struct imap_session *s)
{
    if (!s->readonly)
        return false;
    imap_reply_no(s, "[READ-ONLY] Mailbox is read-only.");
    return true;
}

static void cmd_expunge(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    if (imap_selected_readonly_refused(s))
        return;
    struct petrel_error err;
    if (!expunge_deleted(s, NULL, 0, &err))
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "EXPUNGE completed.");
}

/* ---------- IDLE (RFC 2177) ---------- */

static void idle_changed(void *ctx)
{
    struct imap_session *s = ctx;
    if (s->idling)
        imap_selected_sync(s);
}

static void cmd_idle(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    if (s->box != NULL && s->watch == NULL) {
        struct petrel_error err;
        s->watch = mailbox_watch_new(s->ctx->watches, s->box, idle_changed, s, &err);
        if (s->watch == NULL)
            log_warn(IMAP_COMPONENT, "no change watch for IDLE", "session=%s error=\"%s\"",
                     s->io.id, err.message);
    }
    s->idling = true;
    s->busy = true; /* the tagged reply comes with DONE */
    imap_send(s, "+ idling");
    if (s->view != NULL)
        imap_selected_sync(s);
    /* Lines now go to imap_idle_line(). */
    s->busy = false;
}

void imap_idle_line(struct imap_session *s, const char *line, size_t len)
{
    s->idling = false;
    if (len == 4 && strncasecmp(line, "DONE", 4) == 0)
        imap_reply_ok(s, "IDLE terminated.");
    else
        imap_reply_bad(s, "Expected DONE.");
}

const struct imap_command_def imap_commands_select[] = {
    {"SELECT", IMAP_AUTHED, cmd_select},
    {"EXAMINE", IMAP_AUTHED, cmd_examine},
    {"CLOSE", IMAP_IN(IMAP_STATE_SELECTED), cmd_close},
    {"UNSELECT", IMAP_IN(IMAP_STATE_SELECTED), cmd_unselect},
    {"CHECK", IMAP_IN(IMAP_STATE_SELECTED), cmd_check},
    {"EXPUNGE", IMAP_IN(IMAP_STATE_SELECTED), cmd_expunge},
    {"IDLE", IMAP_AUTHED, cmd_idle},
    {NULL, 0, NULL},
};
