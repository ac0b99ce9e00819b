/* SORT and UID SORT (RFC 5256 3, SORT=DISPLAY of RFC 5957, ESORT of RFC
 * 5267 3: RETURN (MIN MAX ALL COUNT SAVE) answered with ESEARCH), THREAD
 * and UID THREAD (RFC 5256: ORDEREDSUBJECT, REFERENCES). The search
 * criteria are SEARCH's (imap-search.h); the per-message facts come from
 * the top-level header the way SEARCH reads it, decoded (RFC 2047) and
 * casemapped (i;ascii-casemap) for comparison. */
#include "protocols/imap/imap-private.h"

#include "core/xalloc.h"
#include "protocols/imap/imap-search.h"
#include "protocols/imap/imap-sort.h"
#include "protocols/imap/imap-thread.h"
#include "storage/message/message-date.h"
#include "storage/message/message-decode.h"
#include "storage/message/message-parser.h"

#include <stdlib.h>
#include <string.h>

enum hdr {
    HDR_SUBJECT,
    HDR_FROM,
    HDR_TO,
    HDR_CC,
    HDR_DATE,
    HDR_MESSAGE_ID,
    HDR_REFERENCES,
    HDR_IN_REPLY_TO,
    HDR_COUNT,
};

static const char *const hdr_names[HDR_COUNT] = {
    "Subject", "From", "To", "Cc", "Date", "Message-ID", "References", "In-Reply-To",
};

/* The first occurrence of each header field, unfolded; NULL when absent
 * (or when the message went away meanwhile). */
struct header_values {
    char *v[HDR_COUNT];
};

static bool header_values_read(struct imap_session *s, uint32_t uid, struct header_values *hv)
{
    memset(hv, 0, sizeof(*hv));
    struct petrel_error err;
    struct mailbox_message_data *data = mailbox_message_open(s->box, uid, &err);
    if (data == NULL)
        return false;
    struct message_range hdr = message_header_block(data->data, data->size);
    size_t pos = hdr.start;
    struct message_header_field f;
    while (message_header_next(data->data, &hdr, &pos, &f)) {
        if (!f.has_colon)
            continue;
        for (size_t i = 0; i < HDR_COUNT; i++) {
            if (hv->v[i] == NULL && message_header_is(data->data, &f, hdr_names[i])) {
                struct buf v = {0};
                message_header_unfold(&v, data->data + f.value_start, f.value_len);
                hv->v[i] = xstrdup(buf_cstr(&v));
                buf_free(&v);
                break;
            }
        }
    }
    mailbox_message_release(data);
    return true;
}

static void header_values_free(struct header_values *hv)
{
    for (size_t i = 0; i < HDR_COUNT; i++)
        free(hv->v[i]);
}

/* RFC 5256 2.2: the Date: header in UTC, INTERNALDATE when it is unusable. */
static int64_t sent_date(const struct header_values *hv, int64_t internal_date)
{
    int64_t epoch = 0;
    int zone = 0;
    const char *d = hv->v[HDR_DATE];
    if (d != NULL && message_date_parse(d, strlen(d), &epoch, &zone))
        return epoch;
    return internal_date;
}

static char *decoded(const char *value)
{
    struct buf out = {0};
    if (value != NULL)
        message_header_decode(value, strlen(value), &out);
    char *text = buf_steal(&out);
    return text != NULL ? text : xstrdup("");
}

static char *casemapped(struct buf *b)
{
    imap_casemap(b->data, b->len);
    char *s = xstrdup(buf_cstr(b));
    buf_free(b);
    return s;
}

static void address_facts(const char *value, char **mailbox, char **display)
{
    struct buf m = {0}, d = {0};
    if (value != NULL)
        imap_sort_first_address(value, strlen(value), &m, &d);
    *mailbox = casemapped(&m);
    *display = casemapped(&d);
}

/* The search program of SORT/THREAD: [RETURN (...)] CHARSET cs criteria,
 * parsed by SEARCH's parser. False with the tagged reply sent. */
static bool parse_criteria(struct imap_session *s, const struct imap_arg *ret,
                           const struct imap_arg *charset, const struct imap_arg *criteria,
                           size_t ncriteria, struct imap_search_program *prog)
{
    static const struct imap_arg charset_word = {.type = IMAP_ARG_ATOM, .str = "CHARSET", .len = 7};
    static const struct imap_arg return_word = {.type = IMAP_ARG_ATOM, .str = "RETURN", .len = 6};
    size_t n = 0;
    struct imap_arg *args = xcalloc(ncriteria + 4, sizeof(*args));
    if (ret != NULL) {
        args[n++] = return_word;
        args[n++] = *ret;
    }
    args[n++] = charset_word;
    args[n++] = *charset;
    for (size_t i = 0; i < ncriteria; i++)
        args[n++] = criteria[i];
    bool ok = imap_search_parse_selected(s, args, n, prog);
    free(args);
    return ok;
}

bool imap_sort_facts_read(struct imap_session *s, uint32_t uid, bool header,
                          struct imap_sort_facts *f)
{
    uint32_t seq = mailbox_view_seq(s->view, uid);
    const struct mailbox_view_entry *e = seq != 0 ? mailbox_view_at(s->view, seq) : NULL;
    memset(f, 0, sizeof(*f));
    f->seq = uid;
    f->number = uid;
    f->arrival = e != NULL ? e->internal_date : 0;
    f->size = e != NULL ? e->vsize : 0;
    struct header_values hv = {0};
    bool ok = e != NULL && (!header || header_values_read(s, uid, &hv));
    f->date = sent_date(&hv, f->arrival);
    char *subject = decoded(hv.v[HDR_SUBJECT]);
    struct buf base = {0};
    imap_base_subject(subject, strlen(subject), &base);
    free(subject);
    f->subject = casemapped(&base);
    address_facts(hv.v[HDR_FROM], &f->from, &f->display_from);
    address_facts(hv.v[HDR_TO], &f->to, &f->display_to);
    char *unused = NULL;
    address_facts(hv.v[HDR_CC], &f->cc, &unused);
    free(unused);
    header_values_free(&hv);
    return ok;
}

/* The MODSEQ of an ESORT answer (RFC 7162 3.1.5 with RFC 4731): with
 * only MIN and/or MAX that of the message(s) returned (first and last in
 * sort order), otherwise the highest of all matches. */
static uint64_t esort_modseq(struct imap_session *s, const struct imap_sort_facts *facts,
                             size_t count, unsigned r)
{
    bool all = (r & (IMAP_SEARCH_RETURN_ALL | IMAP_SEARCH_RETURN_COUNT)) != 0;
    uint64_t m = 0;
    for (size_t k = 0; k < count; k++) {
        bool returned = all || ((r & IMAP_SEARCH_RETURN_MIN) && k == 0) ||
                        ((r & IMAP_SEARCH_RETURN_MAX) && k == count - 1);
        uint64_t v = mailbox_view_at(s->view, facts[k].seq)->modseq;
        if (returned && v > m)
            m = v;
    }
    return m;
}

static void do_sort(struct imap_session *s, const struct imap_arg *args, size_t argc, bool uid_mode)
{
    size_t i = 0;
    const struct imap_arg *ret = NULL;
    if (argc > 0 && imap_arg_atom_equals(&args[0], "RETURN")) {
        if (argc < 2 || args[1].type != IMAP_ARG_LIST) {
            imap_reply_bad(s, "RETURN needs an option list.");
            return;
        }
        ret = &args[1];
        i = 2;
    }
    if (argc < i + 3) {
        imap_reply_bad(s, "SORT needs sort criteria, a charset and search criteria.");
        return;
    }
    struct imap_sort_program sort;
    struct petrel_error err;
    if (!imap_sort_parse(&args[i], &sort, &err)) {
        imap_reply_bad(s, "%s", err.message);
        return;
    }
    struct imap_search_program prog;
    if (!parse_criteria(s, ret, &args[i + 1], &args[i + 2], argc - i - 2, &prog))
        return;
    if ((prog.return_options & IMAP_SEARCH_RETURN_UPDATE) && imap_context_tag_in_use(s, s->tag)) {
        imap_search_program_free(&prog);
        imap_reply_bad(s, "Tag reuse: a context with this tag is live.");
        return;
    }
    size_t count = 0;
    uint32_t *seqs = imap_search_run(s, &prog, &count);
    bool header = imap_sort_needs_header(&sort);
    struct imap_sort_facts *facts = xcalloc(count + 1, sizeof(*facts));
    for (size_t k = 0; k < count; k++) {
        /* the UID orders as the sequence number does */
        (void)imap_sort_facts_read(s, mailbox_view_at(s->view, seqs[k])->uid, header, &facts[k]);
        facts[k].seq = seqs[k];
    }
    imap_sort_facts(&sort, facts, count);
    uint32_t *uids = xcalloc(count + 1, sizeof(*uids));
    uint32_t *numbers = xcalloc(count + 1, sizeof(*numbers));
    for (size_t k = 0; k < count; k++) {
        uids[k] = facts[k].number;
        numbers[k] = uid_mode ? facts[k].number : facts[k].seq;
    }
    if (prog.return_options & IMAP_SEARCH_RETURN_UPDATE) /* before SAVE changes "$" */
        imap_context_pin(s, &prog);
    if (prog.return_options & IMAP_SEARCH_RETURN_SAVE)
        imap_searchres_save(s, prog.return_options, uids, count);
    unsigned r = prog.return_options;
    struct buf out = {0};
    if (prog.has_return && (r & IMAP_SEARCH_RETURN_SAVE) && !(r & IMAP_SEARCH_RETURN_DATA) &&
        !(r & (IMAP_SEARCH_RETURN_UPDATE | IMAP_SEARCH_RETURN_CONTEXT))) {
        /* RFC 5182 2.1: SAVE alone asks for no ESEARCH response. */
    } else if (prog.has_return) {
        /* RFC 5267 3: MIN and MAX are the first and last in sort order;
         * PARTIAL's window is one of the sort order too (4.4). */
        buf_printf(&out, "* ESEARCH (TAG \"%s\")%s", s->tag, uid_mode ? " UID" : "");
        if ((r & IMAP_SEARCH_RETURN_MIN) && count > 0)
            buf_printf(&out, " MIN %u", numbers[0]);
        if ((r & IMAP_SEARCH_RETURN_MAX) && count > 0)
            buf_printf(&out, " MAX %u", numbers[count - 1]);
        if ((r & IMAP_SEARCH_RETURN_ALL) && count > 0) {
            buf_append_str(&out, " ALL ");
            imap_append_ordered_set(&out, numbers, count);
        }
        if (r & IMAP_SEARCH_RETURN_PARTIAL) {
            buf_printf(&out, " PARTIAL (%u:%u ", prog.partial_lo, prog.partial_hi);
            if (prog.partial_lo > count) {
                buf_append_str(&out, "NIL");
            } else {
                size_t end = prog.partial_hi < count ? prog.partial_hi : count;
                imap_append_ordered_set(&out, numbers + prog.partial_lo - 1,
                                        end - prog.partial_lo + 1);
            }
            buf_append_char(&out, ')');
        }
        if (r & IMAP_SEARCH_RETURN_COUNT)
            buf_printf(&out, " COUNT %zu", count);
        /* RFC 7162 3.1.5: a MODSEQ criterion adds MODSEQ here too, chosen
         * as SEARCH's ESEARCH chooses it. */
        if ((imap_search_needs(&prog) & IMAP_SEARCH_NEEDS_MODSEQ) && count > 0)
            buf_printf(&out, " MODSEQ %llu", (unsigned long long)esort_modseq(s, facts, count, r));
    } else if (!prog.has_return) {
        buf_append_str(&out, "* SORT");
        uint64_t max_modseq = 0;
        for (size_t k = 0; k < count; k++) {
            buf_printf(&out, " %u", numbers[k]);
            uint64_t m = mailbox_view_at(s->view, facts[k].seq)->modseq;
            if (m > max_modseq)
                max_modseq = m;
        }
        /* RFC 7162 3.1.5: a MODSEQ criterion adds the highest mod-sequence. */
        if ((imap_search_needs(&prog) & IMAP_SEARCH_NEEDS_MODSEQ) && count > 0)
            buf_printf(&out, " (MODSEQ %llu)", (unsigned long long)max_modseq);
    }
    if (r & IMAP_SEARCH_RETURN_UPDATE) /* takes prog; a refusal goes before the ESEARCH */
        imap_context_start(s, uid_mode, &prog, &sort, uids, count);
    if (out.len > 0) {
        buf_append_str(&out, "\r\n");
        imap_send_raw(s, out.data, out.len);
    }
    buf_free(&out);
    for (size_t k = 0; k < count; k++)
        imap_sort_facts_free(&facts[k]);
    free(facts);
    free(uids);
    free(numbers);
    free(seqs);
    imap_search_program_free(&prog);
    imap_reply_ok(s, "SORT completed.");
}

static void do_thread(struct imap_session *s, const struct imap_arg *args, size_t argc,
                      bool uid_mode)
{
    if (argc < 3) {
        imap_reply_bad(s, "THREAD needs an algorithm, a charset and search criteria.");
        return;
    }
    bool references;
    if (imap_arg_atom_equals(&args[0], "REFERENCES"))
        references = true;
    else if (imap_arg_atom_equals(&args[0], "ORDEREDSUBJECT"))
        references = false;
    else {
        imap_reply_bad(s, "Unknown threading algorithm.");
        return;
    }
    struct imap_search_program prog;
    if (!parse_criteria(s, NULL, &args[1], &args[2], argc - 2, &prog))
        return;
    size_t count = 0;
    uint32_t *seqs = imap_search_run(s, &prog, &count);
    struct imap_thread_msg *msgs = xcalloc(count + 1, sizeof(*msgs));
    struct header_values *hv = xcalloc(count + 1, sizeof(*hv));
    char **subjects = xcalloc(count + 1, sizeof(*subjects));
    for (size_t k = 0; k < count; k++) {
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, seqs[k]);
        (void)header_values_read(s, e->uid, &hv[k]);
        subjects[k] = decoded(hv[k].v[HDR_SUBJECT]);
        msgs[k] = (struct imap_thread_msg){
            .number = uid_mode ? e->uid : seqs[k],
            .date = sent_date(&hv[k], e->internal_date),
            .subject = subjects[k],
            .message_id = hv[k].v[HDR_MESSAGE_ID],
            .references = hv[k].v[HDR_REFERENCES],
            .in_reply_to = hv[k].v[HDR_IN_REPLY_TO],
        };
    }
    struct buf out = {0};
    buf_append_str(&out, "* THREAD");
    size_t prefix = out.len;
    buf_append_char(&out, ' ');
    if (references)
        imap_thread_references(msgs, count, &out);
    else
        imap_thread_orderedsubject(msgs, count, &out);
    if (out.len == prefix + 1)
        out.len = prefix; /* no threads: "* THREAD" alone */
    buf_append_str(&out, "\r\n");
    imap_send_raw(s, out.data, out.len);
    buf_free(&out);
    for (size_t k = 0; k < count; k++) {
        header_values_free(&hv[k]);
        free(subjects[k]);
    }
    free(hv);
    free(subjects);
    free(msgs);
    free(seqs);
    imap_search_program_free(&prog);
    imap_reply_ok(s, "THREAD completed.");
}

static void cmd_sort(struct imap_session *s, const struct imap_command *cmd)
{
    do_sort(s, cmd->args, cmd->arg_count, false);
}

static void cmd_thread(struct imap_session *s, const struct imap_command *cmd)
{
    do_thread(s, cmd->args, cmd->arg_count, false);
}

void imap_uid_sort(struct imap_session *s, const struct imap_arg *args, size_t argc)
{
    do_sort(s, args, argc, true);
}

void imap_uid_thread(struct imap_session *s, const struct imap_arg *args, size_t argc)
{
    do_thread(s, args, argc, true);
}

const struct imap_command_def imap_commands_sort[] = {
    {"SORT", IMAP_IN(IMAP_STATE_SELECTED), cmd_sort},
    {"THREAD", IMAP_IN(IMAP_STATE_SELECTED), cmd_thread},
    {NULL, 0, NULL},
};
