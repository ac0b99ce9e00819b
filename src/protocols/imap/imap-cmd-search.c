/* SEARCH and UID SEARCH (RFC 3501 6.4.4) with ESEARCH results (RFC 4731)
 * and CONDSTORE's MODSEQ key. Messages are read only when the program
 * needs headers or bodies. Text keys match on what the message means:
 * header values unfolded with encoded words decoded, text parts with their
 * transfer encoding undone and Latin-1 converted to UTF-8 (RFC 3501: MUST
 * for non-ASCII charsets); case-insensitively for ASCII letters. */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-envelope.h"
#include "protocols/imap/imap-message.h"
#include "protocols/imap/imap-search.h"
#include "storage/message/message-date.h"
#include "storage/message/message-decode.h"
#include "storage/message/message-parser.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct search_ctx {
    struct imap_session *s;
    uint32_t seq;
    const struct mailbox_view_entry *e;
    unsigned needs;
    struct imap_message msg; /* read when a key needs it */
};

/* ASCII case-insensitive substring search over bytes that may hold NULs. */
static bool contains_ci(const char *hay, size_t hay_len, const char *needle, size_t needle_len)
{
    if (needle_len == 0)
        return true;
    for (size_t i = 0; i + needle_len <= hay_len; i++) {
        size_t k = 0;
        while (k < needle_len &&
               tolower((unsigned char)hay[i + k]) == tolower((unsigned char)needle[k]))
            k++;
        if (k == needle_len)
            return true;
    }
    return false;
}

static bool load(struct search_ctx *c)
{
    return imap_message_parse(&c->msg, c->s->box, c->e->uid, NULL);
}

/* The message's next top-level header field from *pos on (0: the first);
 * false after the last one or when the message cannot be read. */
static bool next_header(struct search_ctx *c, size_t *pos, struct message_header_field *f)
{
    if (!load(c))
        return false;
    const struct message_range *hdr = &c->msg.parsed.parts[0].header;
    if (*pos < hdr->start)
        *pos = hdr->start;
    return message_header_next(c->msg.data->data, hdr, pos, f);
}

/* Any field `name` of the top-level header whose unfolded value holds
 * `needle`; an empty needle matches when the field exists. With
 * `as_addresses` (FROM, TO, CC, BCC) the value is compared as its
 * addresses written out anew ("name <local@domain>", RFC 5322 comments
 * inside addresses and quoting gone: imap_envelope_address_text), so
 * `FROM user@domain.org` finds `<user (comment)@ (comment) domain.org>`;
 * HEADER compares the value itself. Both as Dovecot does. */
static bool header_has(struct search_ctx *c, const char *name, bool as_addresses,
                       const char *needle, size_t needle_len)
{
    size_t pos = 0;
    struct message_header_field f;
    bool found = false;
    while (!found && next_header(c, &pos, &f)) {
        if (!f.has_colon || !message_header_is(c->msg.data->data, &f, name))
            continue;
        struct buf v = {0}, decoded = {0};
        message_header_unfold(&v, c->msg.data->data + f.value_start, f.value_len);
        if (as_addresses) {
            struct buf text = {0};
            imap_envelope_address_text(&text, v.data != NULL ? v.data : "", v.len);
            buf_reset(&decoded);
            message_header_decode(text.data != NULL ? text.data : "", text.len, &decoded);
            buf_free(&text);
        } else {
            message_header_decode(v.data != NULL ? v.data : "", v.len, &decoded);
        }
        found =
            contains_ci(decoded.data != NULL ? decoded.data : "", decoded.len, needle, needle_len);
        buf_free(&v);
        buf_free(&decoded);
    }
    return found;
}

static bool latin1_charset(const struct message_part *p)
{
    const char *cs = message_param_find(p->params, p->param_count, "charset");
    return cs != NULL && (strcasecmp(cs, "iso-8859-1") == 0 || strcasecmp(cs, "iso-8859-15") == 0 ||
                          strcasecmp(cs, "windows-1252") == 0);
}

/* Any text part (or the message itself when it has no MIME structure)
 * holding `needle` once decoded. */
static bool body_has(struct search_ctx *c, const char *needle, size_t len)
{
    if (!load(c))
        return false;
    for (size_t i = 0; i < c->msg.parsed.part_count; i++) {
        const struct message_part *p = &c->msg.parsed.parts[i];
        if (p->kind != MESSAGE_PART_LEAF ||
            !(message_part_is(p, "text", NULL) || message_part_is(p, "message", NULL)))
            continue;
        struct buf body = {0};
        if (!message_part_decode(&c->msg.parsed, i, &body))
            buf_append(&body, c->msg.data->data + p->body.start, p->body.len);
        if (latin1_charset(p)) {
            struct buf utf8 = {0};
            for (size_t k = 0; k < body.len; k++)
                utf8_encode((unsigned char)body.data[k], &utf8);
            buf_free(&body);
            body = utf8;
        }
        bool found = contains_ci(body.data != NULL ? body.data : "", body.len, needle, len);
        buf_free(&body);
        if (found)
            return true;
    }
    return false;
}

/* TEXT: every header field (decoded) or the body. */
static bool text_has(struct search_ctx *c, const char *needle, size_t len)
{
    size_t pos = 0;
    struct message_header_field f;
    while (next_header(c, &pos, &f)) {
        struct buf v = {0}, decoded = {0};
        message_header_unfold(&v, c->msg.data->data + f.start, f.len);
        message_header_decode(v.data != NULL ? v.data : "", v.len, &decoded);
        bool found =
            contains_ci(decoded.data != NULL ? decoded.data : "", decoded.len, needle, len);
        buf_free(&v);
        buf_free(&decoded);
        if (found)
            return true;
    }
    return body_has(c, needle, len);
}

/* The Date: header as a day number; false when absent or unparsable. */
static bool sent_day(struct search_ctx *c, int32_t *day)
{
    size_t pos = 0;
    struct message_header_field f;
    while (next_header(c, &pos, &f)) {
        if (!f.has_colon || !message_header_is(c->msg.data->data, &f, "Date"))
            continue;
        struct buf v = {0};
        message_header_unfold(&v, c->msg.data->data + f.value_start, f.value_len);
        int64_t epoch = 0;
        int zone = 0;
        bool ok = message_date_parse(v.data != NULL ? v.data : "", v.len, &epoch, &zone);
        buf_free(&v);
        if (!ok)
            return false;
        /* RFC 3501: the date in the message's own zone, time ignored. */
        int64_t local = epoch + (int64_t)zone * 60;
        *day = (int32_t)(local >= 0 ? local / 86400 : (local - 86399) / 86400);
        return true;
    }
    return false;
}

static int32_t internal_day(const struct mailbox_view_entry *e)
{
    int64_t t = e->internal_date;
    return (int32_t)(t >= 0 ? t / 86400 : (t - 86399) / 86400);
}

static bool has_keyword(struct search_ctx *c, const char *name)
{
    for (unsigned k = 0; k < 32; k++) {
        const char *kw = mailbox_view_keyword_name(c->s->view, k);
        if (kw != NULL && strcasecmp(kw, name) == 0)
            return (c->e->keywords & (1u << k)) != 0;
    }
    return false;
}

static bool eval(struct search_ctx *c, const struct imap_search_node *n)
{
    uint32_t fl = c->e->flags;
    int32_t day = 0;
    switch (n->key) {
    case IMAP_SEARCH_ALL:
        return true;
    case IMAP_SEARCH_ANSWERED:
        return fl & MAIL_FLAG_ANSWERED;
    case IMAP_SEARCH_DELETED:
        return fl & MAIL_FLAG_DELETED;
    case IMAP_SEARCH_DRAFT:
        return fl & MAIL_FLAG_DRAFT;
    case IMAP_SEARCH_FLAGGED:
        return fl & MAIL_FLAG_FLAGGED;
    case IMAP_SEARCH_SEEN:
        return fl & MAIL_FLAG_SEEN;
    case IMAP_SEARCH_UNANSWERED:
        return !(fl & MAIL_FLAG_ANSWERED);
    case IMAP_SEARCH_UNDELETED:
        return !(fl & MAIL_FLAG_DELETED);
    case IMAP_SEARCH_UNDRAFT:
        return !(fl & MAIL_FLAG_DRAFT);
    case IMAP_SEARCH_UNFLAGGED:
        return !(fl & MAIL_FLAG_FLAGGED);
    case IMAP_SEARCH_UNSEEN:
        return !(fl & MAIL_FLAG_SEEN);
    case IMAP_SEARCH_NEW:
        return imap_recent_has(c->s, c->e->uid) && !(fl & MAIL_FLAG_SEEN);
    case IMAP_SEARCH_RECENT:
        return imap_recent_has(c->s, c->e->uid);
    case IMAP_SEARCH_OLD:
        return !imap_recent_has(c->s, c->e->uid);
    case IMAP_SEARCH_KEYWORD:
        return has_keyword(c, n->str);
    case IMAP_SEARCH_UNKEYWORD:
        return !has_keyword(c, n->str);
    case IMAP_SEARCH_BCC:
        return header_has(c, "Bcc", true, n->str, n->str_len);
    case IMAP_SEARCH_CC:
        return header_has(c, "Cc", true, n->str, n->str_len);
    case IMAP_SEARCH_FROM:
        return header_has(c, "From", true, n->str, n->str_len);
    case IMAP_SEARCH_TO:
        return header_has(c, "To", true, n->str, n->str_len);
    case IMAP_SEARCH_SUBJECT:
        return header_has(c, "Subject", false, n->str, n->str_len);
    case IMAP_SEARCH_HEADER:
        return header_has(c, n->header_name, false, n->str, n->str_len);
    case IMAP_SEARCH_BODY:
        return body_has(c, n->str, n->str_len);
    case IMAP_SEARCH_TEXT:
        return text_has(c, n->str, n->str_len);
    case IMAP_SEARCH_BEFORE:
        return internal_day(c->e) < n->day;
    case IMAP_SEARCH_ON:
        return internal_day(c->e) == n->day;
    case IMAP_SEARCH_SINCE:
        return internal_day(c->e) >= n->day;
    case IMAP_SEARCH_SENTBEFORE:
        return sent_day(c, &day) && day < n->day;
    case IMAP_SEARCH_SENTON:
        return sent_day(c, &day) && day == n->day;
    case IMAP_SEARCH_SENTSINCE:
        return sent_day(c, &day) && day >= n->day;
    case IMAP_SEARCH_LARGER:
        return c->e->vsize > n->number;
    case IMAP_SEARCH_SMALLER:
        return c->e->vsize < n->number;
    case IMAP_SEARCH_SEQSET:
    case IMAP_SEARCH_UID:
        if (n->set.searchres) /* "$" holds UIDs whichever form named it */
            return imap_searchres_contains(c->s, c->e->uid);
        return imap_seqset_contains(&n->set, n->key == IMAP_SEARCH_UID ? c->e->uid : c->seq);
    case IMAP_SEARCH_MODSEQ:
        return c->e->modseq >= n->number;
    case IMAP_SEARCH_NOT:
        return n->child_count == 1 && !eval(c, &n->children[0]);
    case IMAP_SEARCH_OR:
        return n->child_count == 2 && (eval(c, &n->children[0]) || eval(c, &n->children[1]));
    case IMAP_SEARCH_AND:
        for (size_t i = 0; i < n->child_count; i++) {
            if (!eval(c, &n->children[i]))
                return false;
        }
        return true;
    }
    return false;
}

uint32_t *imap_search_run(struct imap_session *s, const struct imap_search_program *prog,
                          size_t *count)
{
    size_t n = mailbox_view_count(s->view);
    struct search_ctx c = {.s = s, .needs = imap_search_needs(prog)};
    if (c.needs & IMAP_SEARCH_NEEDS_MODSEQ)
        imap_condstore_enable(s);
    uint32_t *hits = NULL;
    size_t cap = 0;
    *count = 0;
    for (uint32_t seq = 1; seq <= n; seq++) {
        c.seq = seq;
        c.e = mailbox_view_at(s->view, seq);
        bool match = eval(&c, &prog->root);
        imap_message_release(&c.msg);
        if (match) {
            hits = xgrow(hits, &cap, *count + 1, sizeof(uint32_t));
            hits[(*count)++] = seq;
        }
    }
    return hits;
}

bool imap_search_match(struct imap_session *s, const struct imap_search_program *prog, uint32_t seq,
                       bool *unreadable)
{
    struct search_ctx c = {.s = s, .needs = imap_search_needs(prog)};
    c.seq = seq;
    c.e = mailbox_view_at(s->view, seq);
    if (c.e == NULL)
        return false;
    bool match = eval(&c, &prog->root);
    *unreadable = c.msg.gone;
    imap_message_release(&c.msg);
    return match;
}

/* PARTIAL lo:hi (RFC 5267 4.4): the part of the result (ascending) at
 * those positions, "NIL" when none; the range is echoed. */
static void append_partial(struct buf *out, const struct imap_search_program *prog,
                           const uint32_t *hits, size_t count)
{
    buf_printf(out, " PARTIAL (%u:%u ", prog->partial_lo, prog->partial_hi);
    if (prog->partial_lo > count) {
        buf_append_str(out, "NIL");
    } else {
        size_t end = prog->partial_hi < count ? prog->partial_hi : count;
        struct imap_seqset set = {0};
        for (size_t i = prog->partial_lo - 1; i < end; i++)
            imap_seqset_add(&set, hits[i], hits[i]);
        imap_seqset_format(&set, out);
        imap_seqset_free(&set);
    }
    buf_append_char(out, ')');
}

bool imap_search_parse_selected(struct imap_session *s, const struct imap_arg *args, size_t argc,
                                struct imap_search_program *prog)
{
    size_t n = mailbox_view_count(s->view);
    const struct mailbox_view_entry *last = n > 0 ? mailbox_view_at(s->view, (uint32_t)n) : NULL;
    struct petrel_error err;
    if (imap_search_parse(args, argc, (uint32_t)n, last != NULL ? last->uid : 0, prog, &err))
        return true;
    /* RFC 5182 2.1: a SAVE answered NO empties $, one answered BAD leaves
     * it as it was (Dovecot does the same). */
    if (err.code == PETREL_ERR_UNSUPPORTED && imap_searchres_requested(args, argc))
        imap_searchres_clear(s);
    if (err.code == PETREL_ERR_UNSUPPORTED)
        imap_reply_no(s, "[BADCHARSET (US-ASCII UTF-8)] %s", err.message);
    else
        imap_reply_bad(s, "%s", err.message);
    return false;
}

static void do_search(struct imap_session *s, const struct imap_arg *args, size_t argc,
                      bool uid_mode)
{
    struct imap_search_program prog;
    if (!imap_search_parse_selected(s, args, argc, &prog))
        return;
    size_t n = mailbox_view_count(s->view);
    if ((prog.return_options & IMAP_SEARCH_RETURN_UPDATE) && imap_context_tag_in_use(s, s->tag)) {
        /* RFC 5267 4.3: updates are told apart by tag alone */
        imap_search_program_free(&prog);
        imap_reply_bad(s, "Tag reuse: a context with this tag is live.");
        return;
    }
    struct search_ctx c = {.s = s, .needs = imap_search_needs(&prog)};
    if (c.needs & IMAP_SEARCH_NEEDS_MODSEQ)
        imap_condstore_enable(s);
    bool keep_uids = prog.return_options & (IMAP_SEARCH_RETURN_SAVE | IMAP_SEARCH_RETURN_UPDATE);
    uint32_t *hits = NULL;
    uint64_t *hit_modseqs = NULL;
    uint32_t *saved = NULL; /* RETURN (SAVE) or (UPDATE): the hits' UIDs */
    size_t saved_cap = 0;
    size_t hit_count = 0, cap = 0, modseq_cap = 0;
    uint64_t max_modseq = 0;
    bool modseq_used = c.needs & IMAP_SEARCH_NEEDS_MODSEQ;
    for (uint32_t seq = 1; seq <= n; seq++) {
        c.seq = seq;
        c.e = mailbox_view_at(s->view, seq);
        bool match = eval(&c, &prog.root);
        imap_message_release(&c.msg);
        if (!match)
            continue;
        hits = xgrow(hits, &cap, hit_count + 1, sizeof(uint32_t));
        hit_modseqs = xgrow(hit_modseqs, &modseq_cap, hit_count + 1, sizeof(uint64_t));
        hit_modseqs[hit_count] = c.e->modseq;
        hits[hit_count++] = uid_mode ? c.e->uid : seq;
        if (keep_uids) {
            saved = xgrow(saved, &saved_cap, hit_count, sizeof(uint32_t));
            saved[hit_count - 1] = c.e->uid;
        }
        if (c.e->modseq > max_modseq)
            max_modseq = c.e->modseq;
    }
    if (prog.return_options & IMAP_SEARCH_RETURN_UPDATE) /* before SAVE changes "$" */
        imap_context_pin(s, &prog);
    struct buf out = {0};
    if (prog.return_options & IMAP_SEARCH_RETURN_SAVE)
        imap_searchres_save(s, prog.return_options, saved, hit_count);
    unsigned options = prog.return_options;
    if (options == IMAP_SEARCH_RETURN_SAVE) {
        /* RFC 5182 2.1: SAVE alone asks for no ESEARCH response. */
    } else if (prog.has_return) {
        unsigned r = prog.return_options != 0 ? prog.return_options : IMAP_SEARCH_RETURN_ALL;
        buf_printf(&out, "* ESEARCH (TAG \"%s\")%s", s->tag, uid_mode ? " UID" : "");
        if ((r & IMAP_SEARCH_RETURN_MIN) && hit_count > 0)
            buf_printf(&out, " MIN %u", hits[0]);
        if ((r & IMAP_SEARCH_RETURN_MAX) && hit_count > 0)
            buf_printf(&out, " MAX %u", hits[hit_count - 1]);
        if ((r & IMAP_SEARCH_RETURN_ALL) && hit_count > 0) {
            struct imap_seqset set = {0};
            for (size_t i = 0; i < hit_count; i++)
                imap_seqset_add(&set, hits[i], hits[i]);
            buf_append_str(&out, " ALL ");
            imap_seqset_format(&set, &out);
            imap_seqset_free(&set);
        }
        if (r & IMAP_SEARCH_RETURN_PARTIAL)
            append_partial(&out, &prog, hits, hit_count);
        if (r & IMAP_SEARCH_RETURN_COUNT)
            buf_printf(&out, " COUNT %zu", hit_count);
        if (modseq_used && hit_count > 0 && (r & IMAP_SEARCH_RETURN_DATA)) {
            /* RFC 7162 3.1.5 with RFC 4731: with only MIN and/or MAX the
             * mod-sequence is that of the message(s) returned, otherwise
             * the highest of all matches. */
            uint64_t modseq = max_modseq;
            if (!(r & (IMAP_SEARCH_RETURN_ALL | IMAP_SEARCH_RETURN_COUNT |
                       IMAP_SEARCH_RETURN_PARTIAL))) {
                modseq = 0;
                if ((r & IMAP_SEARCH_RETURN_MIN) && hit_modseqs[0] > modseq)
                    modseq = hit_modseqs[0];
                if ((r & IMAP_SEARCH_RETURN_MAX) && hit_modseqs[hit_count - 1] > modseq)
                    modseq = hit_modseqs[hit_count - 1];
            }
            buf_printf(&out, " MODSEQ %llu", (unsigned long long)modseq);
        }
    } else {
        buf_append_str(&out, "* SEARCH");
        for (size_t i = 0; i < hit_count; i++)
            buf_printf(&out, " %u", hits[i]);
        if (modseq_used && hit_count > 0)
            buf_printf(&out, " (MODSEQ %llu)", (unsigned long long)max_modseq);
    }
    if (options & IMAP_SEARCH_RETURN_UPDATE) /* takes prog; a refusal goes before the ESEARCH */
        imap_context_start(s, uid_mode, &prog, NULL, saved, hit_count);
    free(saved);
    if (out.len > 0) {
        buf_append_str(&out, "\r\n");
        imap_send_raw(s, out.data, out.len);
    }
    buf_free(&out);
    free(hits);
    free(hit_modseqs);
    imap_search_program_free(&prog);
    imap_reply_ok(s, "SEARCH completed.");
}

static void cmd_search(struct imap_session *s, const struct imap_command *cmd)
{
    do_search(s, cmd->args, cmd->arg_count, false);
}

void imap_uid_search(struct imap_session *s, const struct imap_arg *args, size_t argc)
{
    do_search(s, args, argc, true);
}

const struct imap_command_def imap_commands_search[] = {
    {"SEARCH", IMAP_IN(IMAP_STATE_SELECTED), cmd_search},
    {NULL, 0, NULL},
};
