/* Commands on messages of the selected folder: FETCH, STORE, COPY, MOVE,
 * EXPUNGE by UID, the UID prefix; and APPEND (authenticated state). Parsed
 * MIME results (ENVELOPE, BODYSTRUCTURE) are kept in the folder's cache so
 * a second FETCH reads no message file. */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-bodystructure.h"
#include "protocols/imap/imap-catenate.h"
#include "protocols/imap/imap-date.h"
#include "protocols/imap/imap-envelope.h"
#include "protocols/imap/imap-fetch-items.h"
#include "protocols/imap/imap-literal-spool.h"
#include "protocols/imap/imap-message.h"
#include "storage/acl/acl-rights.h"
#include "protocols/imap/imap-quote.h"
#include "protocols/imap/imap-section.h"
#include "protocols/imap/imap-seqset.h"
#include "storage/message/message-parser.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#define IMAP_MAX_APPEND_KEYWORDS 32
/* Smaller bodies are read and leave with the rest of the reply in one
 * send; sendfile would add a system call and a TCP segment to each. */
#define FETCH_SENDFILE_MIN (64u * 1024)
/* Bytes of a streamed literal read from the file per step. */
#define FETCH_STREAM_STEP (64u * 1024)
/* FETCH lines gathered before they are handed to the connection. */
#define FETCH_BATCH (256u * 1024)
/* Folder cache field: "0" when the message file holds no NUL byte (its
 * bytes may go out by sendfile as they are), "1" when it does. */
#define FETCH_CACHE_NUL "imap.nul"

/* ---------- message sets ---------- */

/* The UIDs a set names, in ascending order: sequence numbers (or UIDs when
 * `uid_mode`) resolved against the view. Unknown UIDs are left out (RFC
 * 3501: UID sets may name messages that do not exist). False with a BAD
 * sent for a syntax error or a sequence number past the end. */
static bool resolve_set(struct imap_session *s, const struct imap_arg *arg, bool uid_mode,
                        uint32_t **uids, size_t *count)
{
    *uids = NULL;
    *count = 0;
    if (arg->type != IMAP_ARG_ATOM) {
        imap_reply_bad(s, "Expected a message set.");
        return false;
    }
    size_t n = mailbox_view_count(s->view);
    const struct mailbox_view_entry *last = n > 0 ? mailbox_view_at(s->view, (uint32_t)n) : NULL;
    uint32_t max = uid_mode ? (last != NULL ? last->uid : 0) : (uint32_t)n;
    struct imap_seqset set = {0};
    struct petrel_error err;
    if (!imap_seqset_parse(arg->str, arg->len, max, IMAP_SEQSET_ALLOW_SEARCHRES, &set, &err)) {
        imap_seqset_free(&set);
        imap_reply_bad(s, "Invalid message set: %s", err.message);
        return false;
    }
    if (!uid_mode && set.count > 0 && set.ranges[set.count - 1].hi > n) {
        imap_seqset_free(&set);
        imap_reply_bad(s, "Message sequence number out of range.");
        return false;
    }
    size_t cap = 0;
    uint32_t *out = NULL;
    if (set.searchres) {
        /* "$" (RFC 5182): the saved UIDs still in the view, either form. */
        for (uint32_t seq = 1; seq <= n; seq++) {
            uint32_t uid = mailbox_view_at(s->view, seq)->uid;
            if (imap_searchres_contains(s, uid)) {
                out = xgrow(out, &cap, *count + 1, sizeof(uint32_t));
                out[(*count)++] = uid;
            }
        }
    } else if (uid_mode) {
        /* Walk the view rather than the set: a set like 1:4294967295 is cheap. */
        for (uint32_t seq = 1; seq <= n; seq++) {
            uint32_t uid = mailbox_view_at(s->view, seq)->uid;
            if (imap_seqset_contains(&set, uid)) {
                out = xgrow(out, &cap, *count + 1, sizeof(uint32_t));
                out[(*count)++] = uid;
            }
        }
    } else {
        struct imap_seqset_iter it = {0};
        uint32_t seq;
        while (imap_seqset_iter_next(&set, &it, &seq)) {
            out = xgrow(out, &cap, *count + 1, sizeof(uint32_t));
            out[(*count)++] = mailbox_view_at(s->view, seq)->uid;
        }
    }
    imap_seqset_free(&set);
    *uids = out;
    return true;
}

/* ---------- flags ---------- */

static bool keyword_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || strchr("(){%*\"\\]", c) != NULL)
            return false;
    }
    return true;
}

/* A flag list (or one flag) into system bits and keyword names (borrowed
 * from the command). False with a BAD sent. */
static bool parse_flags(struct imap_session *s, const struct imap_arg *arg, uint32_t *flags,
                        const char **keywords, size_t *kw_count)
{
    const struct imap_arg *items = arg->type == IMAP_ARG_LIST ? arg->list : arg;
    size_t n = arg->type == IMAP_ARG_LIST ? arg->count : 1;
    *flags = 0;
    *kw_count = 0;
    for (size_t i = 0; i < n; i++) {
        const struct imap_arg *f = &items[i];
        /* NIL is an atom too (RFC 3501 flag-keyword), so a keyword. */
        if (f->type != IMAP_ARG_ATOM && f->type != IMAP_ARG_NIL) {
            imap_reply_bad(s, "Flags must be atoms.");
            return false;
        }
        uint32_t bit = mail_flag_by_name(f->str);
        if (bit != 0) {
            *flags |= bit;
            continue;
        }
        if (f->str[0] == '\\') {
            if (strcasecmp(f->str, "\\Recent") == 0) {
                imap_reply_bad(s, "\\Recent cannot be set.");
                return false;
            }
            imap_reply_bad(s, "Unknown system flag %s.", f->str);
            return false;
        }
        if (!keyword_name_ok(f->str, f->len)) {
            imap_reply_bad(s, "Invalid keyword.");
            return false;
        }
        if (*kw_count >= IMAP_MAX_APPEND_KEYWORDS) {
            imap_reply_no(s, "[LIMIT] Too many keywords.");
            return false;
        }
        /* Whatever its spelling, NIL is the keyword "NIL" (as Dovecot). */
        keywords[(*kw_count)++] = f->type == IMAP_ARG_NIL ? "NIL" : f->str;
    }
    keywords[*kw_count] = NULL;
    return true;
}

/* ---------- FETCH ---------- */

/* RFC 3501 forbids NUL in a literal that is not a literal8: BODY[] and the
 * other non-binary items carry 0x80 in its place, as Dovecot does (one
 * byte for one, so RFC822.SIZE and the announced length still hold).
 * BINARY[] carries the bytes as they are. True when a byte was replaced. */
static bool replace_nul(char *data, size_t len)
{
    bool any = false;
    char *p = data, *end = data + len;
    while (p < end && (p = memchr(p, '\0', (size_t)(end - p))) != NULL) {
        *p++ = (char)0x80;
        any = true;
    }
    return any;
}

/* A literal sent from the message file a step at a time as the output
 * drains (BODY[] of a large message): never held whole in memory. */
struct fetch_stream {
    int fd;
    uint32_t uid;
    uint64_t pos;  /* next file offset to send */
    uint64_t left; /* bytes of the literal still to send */
    bool whole;    /* the whole file: whether it holds a NUL is learnt */
    bool saw_nul;
};

/* A FETCH in progress: produced message by message, stopping while the
 * client has not taken what was sent (s->fetch while it waits). */
struct imap_fetch_state {
    uint32_t *uids;
    size_t count;
    size_t next; /* index into uids of the next message */
    uint32_t seq;
    struct imap_fetch_items items;
    bool uid_mode;
    bool seen_changed;
    bool some_gone;
    bool unknown_cte;
    struct buf out; /* FETCH lines not handed on yet */
    bool streaming; /* `stream` is open: the current message's last item */
    struct fetch_stream stream;
    char *chunk; /* FETCH_STREAM_STEP bytes, while streaming */
    /* Something went to the session's output since imap_session_output_full()
     * was last asked (lines collect in `out` meanwhile, which it does not
     * count): the loop asks again only then, not once per message. */
    bool output_moved;
};

/* A structure item from the cache, or rendered from the message and cached. */
static bool fetch_structure(struct imap_session *s, uint32_t uid, struct imap_message *fm,
                            const char *field, struct buf *out)
{
    size_t len = 0;
    const void *cached = mailbox_cache_lookup(s->box, uid, field, &len);
    if (cached != NULL) {
        buf_append(out, cached, len);
        return true;
    }
    if (!imap_message_parse(fm, s->box, uid, s->io.id))
        return false;
    struct buf value = {0};
    if (strcmp(field, "imap.envelope") == 0)
        imap_envelope_append(&value, fm->parsed.data, &fm->parsed.parts[0].header);
    else
        imap_bodystructure_append(&value, &fm->parsed, 0, strcmp(field, "imap.bodystructure") == 0);
    struct petrel_error err;
    if (value.len > 0 && !mailbox_cache_queue(s->box, uid, field, value.data, value.len, &err))
        log_debug(IMAP_COMPONENT, "cache store failed", "uid=%u error=\"%s\"", uid, err.message);
    buf_append(out, value.data, value.len);
    buf_free(&value);
    return true;
}

static void section_from_body(const struct imap_fetch_body *b, struct imap_section *sec)
{
    memset(sec, 0, sizeof(*sec));
    size_t parts = b->part_count < IMAP_SECTION_MAX_PARTS ? b->part_count : IMAP_SECTION_MAX_PARTS;
    sec->number_count = parts;
    for (size_t i = 0; i < parts; i++)
        sec->numbers[i] = b->parts[i];
    sec->text = b->text;
    sec->field_count =
        b->field_count < IMAP_SECTION_MAX_FIELDS ? b->field_count : IMAP_SECTION_MAX_FIELDS;
    for (size_t i = 0; i < sec->field_count; i++) {
        sec->fields[i].name = b->fields[i];
        sec->fields[i].len = strlen(b->fields[i]);
    }
}

/* The message's own header block, from the cache or (cached then) from
 * the file: clients fetch HEADER.FIELDS of whole folders, and the header
 * is a small part of most messages. The bytes stay valid until the next
 * cache call on the folder or the release of `fm`. */
static bool fetch_header_block(struct imap_session *s, uint32_t uid, struct imap_message *fm,
                               const char **block, size_t *len)
{
    const void *cached = mailbox_cache_lookup(s->box, uid, "imap.hdr", len);
    if (cached != NULL) {
        *block = cached;
        return true;
    }
    /* The header block alone needs no MIME parse: a multipart's whole
     * tree would be walked only to find where the first blank line is. */
    if (!fm->have_parsed && !imap_message_open(fm, s->box, uid, s->io.id))
        return false;
    struct message_range h = fm->have_parsed ? fm->parsed.parts[0].header
                                             : message_header_block(fm->data->data, fm->data->size);
    *block = fm->data->data + h.start;
    *len = h.len;
    struct petrel_error err;
    if (h.len > 0 && !mailbox_cache_queue(s->box, uid, "imap.hdr", *block, *len, &err))
        log_debug(IMAP_COMPONENT, "cache store failed", "uid=%u error=\"%s\"", uid, err.message);
    return true;
}

static bool header_only(const struct imap_fetch_body *b)
{
    return b->kind == IMAP_FETCH_BODY_SECTION && b->part_count == 0 &&
           (b->text == IMAP_SECTION_HEADER || b->text == IMAP_SECTION_HEADER_FIELDS ||
            b->text == IMAP_SECTION_HEADER_FIELDS_NOT);
}

/* " {n}\r\n" for a literal of n bytes into `dst`; returns its length. */
#define LITERAL_PREFIX_MAX (UINT_DIGITS_MAX + 5)
static size_t literal_prefix(char dst[LITERAL_PREFIX_MAX], size_t n)
{
    size_t len = 0;
    dst[len++] = ' ';
    dst[len++] = '{';
    len += uint_to_digits(dst + len, n);
    dst[len++] = '}';
    dst[len++] = '\r';
    dst[len++] = '\n';
    return len; /* a length, not a C string */
}

/* HEADER / HEADER.FIELDS[.NOT] of the message, answered from its header
 * block alone, straight into `out`: the literal's length is put in front
 * once the bytes are there (this runs for every message of a folder a
 * client lists, so nothing is parsed or copied twice). */
static bool fetch_header_item(struct imap_session *s, uint32_t uid, struct imap_message *fm,
                              const struct imap_fetch_body *b, struct buf *out)
{
    const char *block = NULL;
    size_t block_len = 0;
    if (!fetch_header_block(s, uid, fm, &block, &block_len))
        return false;
    imap_fetch_body_name(b, out);
    struct imap_section sec;
    section_from_body(b, &sec);
    size_t at = out->len;
    imap_section_fetch_header(block_len > 0 ? block : "", block_len, &sec, b->partial,
                              b->partial_start, b->partial_count, out);
    replace_nul(out->data + at, out->len - at);
    char prefix[LITERAL_PREFIX_MAX];
    buf_insert(out, at, prefix, literal_prefix(prefix, out->len - at));
    return true;
}

static bool whole_message(const struct imap_fetch_body *b)
{
    return b->kind == IMAP_FETCH_BODY_SECTION && b->part_count == 0 && b->text == IMAP_SECTION_BODY;
}

/* BODY[]<partial> of a message stored with CRLF line endings (as every
 * message received over IMAP or LMTP from a conforming client is): the
 * stored bytes are the answer, so nothing is parsed or converted. False
 * (nothing written) when the message needs its line endings converted. */
static bool fetch_whole_stored(struct imap_session *s, uint32_t uid, struct imap_message *fm,
                               const struct imap_fetch_body *b, struct buf *out, bool *handled)
{
    *handled = false;
    if (!imap_message_open(fm, s->box, uid, s->io.id))
        return false;
    if (fm->data->eol != MAILBOX_EOL_CRLF)
        return true;
    size_t from = 0, len = fm->data->size;
    if (b->partial) {
        from = b->partial_start < len ? (size_t)b->partial_start : len;
        len -= from;
        if (b->partial_count < len)
            len = (size_t)b->partial_count;
    }
    imap_fetch_body_name(b, out);
    buf_printf(out, " {%zu}\r\n", len);
    size_t at = out->len;
    buf_append(out, fm->data->data + from, len);
    replace_nul(out->data + at, len);
    *handled = true;
    return true;
}

/* BODY[]<partial> as the last item of a large message stored with CRLF
 * line ends: the stored bytes are the answer, and they never pass through
 * memory whole. The FETCH line so far leaves now; on a plain connection
 * with nothing queued, and a file known to hold no NUL, the bytes follow
 * straight from the page cache (sendfile) and the caller's ")\r\n" after
 * them; otherwise (TLS, output queued, NUL or not known yet) `st` streams
 * them from the file a step at a time as the output drains, and writes
 * the ")\r\n" itself. False when the message is gone; *handled false
 * (nothing written) when the stored bytes are not the answer as they are. */
static bool fetch_whole_file(struct imap_session *s, struct imap_fetch_state *st, uint32_t uid,
                             struct imap_message *fm, const struct imap_fetch_body *b,
                             struct buf *out, bool *handled)
{
    *handled = false;
    uint64_t size = 0, vsize = 0, file_size = 0;
    struct petrel_error err;
    if (!mailbox_message_sizes(s->box, uid, &size, &vsize, &err) || size != vsize ||
        size < FETCH_SENDFILE_MIN)
        return true; /* the reading path converts, or finds it gone */
    int fd = mailbox_message_open_file(s->box, uid, &file_size, &err);
    if (fd < 0) {
        imap_message_gone(fm, uid, s->io.id, &err);
        return false;
    }
    if (file_size != size) {
        close(fd); /* changed behind the index's back: measured again by reading */
        return true;
    }
    uint64_t from = 0, len = size;
    if (b->partial) {
        from = b->partial_start < len ? b->partial_start : len;
        len -= from;
        if (b->partial_count < len)
            len = b->partial_count;
    }
    size_t nul_len = 0;
    const char *nul = mailbox_cache_lookup(s->box, uid, FETCH_CACHE_NUL, &nul_len);
    bool nul_free = nul != NULL && nul_len == 1 && nul[0] == '0';
    imap_fetch_body_name(b, out);
    char prefix[LITERAL_PREFIX_MAX];
    buf_append(out, prefix, literal_prefix(prefix, (size_t)len));
    imap_send_raw(s, out->data, out->len);
    buf_reset(out);
    st->output_moved = true;
    *handled = true;
    if (nul_free && mail_session_io_file_ready(&s->io)) {
        mail_session_io_write_file(&s->io, fd, (off_t)from, (size_t)len);
        return true;
    }
    st->stream = (struct fetch_stream){
        .fd = fd, .uid = uid, .pos = from, .left = len, .whole = from == 0 && len == size};
    st->streaming = true;
    return true;
}

enum stream_result { STREAM_DONE, STREAM_WAIT, STREAM_FAILED };

static void stream_close(struct imap_fetch_state *st)
{
    if (st->streaming)
        close(st->stream.fd);
    st->streaming = false;
    free(st->chunk);
    st->chunk = NULL;
}

/* Sends the streamed literal on until it is complete (then the closing
 * ")\r\n" is queued in st->out) or the output is full. FAILED when the file
 * ended early: the client was promised the bytes, so the connection must
 * end. */
static enum stream_result stream_pump(struct imap_session *s, struct imap_fetch_state *st)
{
    struct fetch_stream *fs = &st->stream;
    while (fs->left > 0) {
        if (imap_session_output_full(s))
            return STREAM_WAIT;
        if (st->chunk == NULL)
            st->chunk = xmalloc(FETCH_STREAM_STEP);
        size_t want = fs->left < FETCH_STREAM_STEP ? (size_t)fs->left : FETCH_STREAM_STEP;
        ssize_t n;
        do
            n = pread(fs->fd, st->chunk, want, (off_t)fs->pos);
        while (n < 0 && errno == EINTR);
        if (n <= 0) {
            log_warn(IMAP_COMPONENT, "message file ended early; closing",
                     "session=%s uid=%u error=\"%s\"", s->io.id, fs->uid,
                     n < 0 ? strerror(errno) : "short file");
            stream_close(st);
            return STREAM_FAILED;
        }
        if (replace_nul(st->chunk, (size_t)n))
            fs->saw_nul = true;
        imap_send_raw(s, st->chunk, (size_t)n);
        fs->pos += (uint64_t)n;
        fs->left -= (uint64_t)n;
    }
    if (fs->whole) {
        struct petrel_error err;
        if (!mailbox_cache_queue(s->box, fs->uid, FETCH_CACHE_NUL, fs->saw_nul ? "1" : "0", 1,
                                 &err))
            log_debug(IMAP_COMPONENT, "cache store failed", "uid=%u error=\"%s\"", fs->uid,
                      err.message);
    }
    stream_close(st);
    buf_append_str(&st->out, ")\r\n");
    return STREAM_DONE;
}

/* One body item: name, then the bytes as a literal (NIL for no such part). */
static bool fetch_body_item(struct imap_session *s, struct imap_fetch_state *st, uint32_t uid,
                            struct imap_message *fm, const struct imap_fetch_body *b, bool last,
                            struct buf *out, bool *unknown_cte)
{
    if (header_only(b) && !fm->have_parsed)
        return fetch_header_item(s, uid, fm, b, out);
    if (whole_message(b) && !fm->have_parsed) {
        bool handled;
        if (last && fm->data == NULL && !s->io.closing) {
            if (!fetch_whole_file(s, st, uid, fm, b, out, &handled))
                return false;
            if (handled)
                return true;
        }
        if (!fetch_whole_stored(s, uid, fm, b, out, &handled))
            return false;
        if (handled)
            return true;
    }
    if (!imap_message_parse(fm, s->box, uid, s->io.id))
        return false;
    imap_fetch_body_name(b, out);
    struct buf bytes = {0};
    struct petrel_error err;
    bool ok;
    if (b->kind == IMAP_FETCH_BINARY_SIZE) {
        uint64_t size = 0;
        ok = imap_section_binary_size(&fm->parsed, b->parts, b->part_count, &size, &err);
        if (ok)
            buf_printf(out, " %llu", (unsigned long long)size);
    } else {
        if (b->kind == IMAP_FETCH_BINARY_SECTION)
            ok = imap_section_binary(&fm->parsed, b->parts, b->part_count, b->partial,
                                     b->partial_start, b->partial_count, &bytes, &err);
        else {
            struct imap_section sec;
            section_from_body(b, &sec);
            ok = imap_section_fetch(&fm->parsed, &sec, b->partial, b->partial_start,
                                    b->partial_count, &bytes, &err);
        }
        if (ok) {
            bool binary = b->kind == IMAP_FETCH_BINARY_SECTION;
            if (!binary)
                replace_nul(bytes.data, bytes.len);
            buf_printf(out, " %s{%zu}\r\n", binary ? "~" : "", bytes.len);
            buf_append(out, bytes.data, bytes.len);
        }
    }
    if (!ok) {
        if (err.code == PETREL_ERR_UNSUPPORTED)
            *unknown_cte = true;
        buf_append_str(out, b->kind == IMAP_FETCH_BINARY_SIZE ? " 0" : " NIL");
    }
    buf_free(&bytes);
    return true;
}

/* The items of a message another session expunged since our view, as
 * Dovecot answers them: what the view knows (UID, FLAGS, dates, size,
 * MODSEQ) as usual, every item that needs the message's bytes as NIL
 * (BINARY.SIZE as 0). RFC 2180 4.1.3 with an OK [EXPUNGEISSUED]: clients
 * keep their session instead of taking a failed FETCH. */
static void fetch_contents_gone(const struct imap_fetch_items *items, const char *sep,
                                struct buf *out)
{
    static const struct {
        unsigned attr;
        const char *name;
    } whole[] = {{IMAP_FETCH_ENVELOPE, "ENVELOPE"},   {IMAP_FETCH_BODYSTRUCTURE, "BODYSTRUCTURE"},
                 {IMAP_FETCH_BODY, "BODY"},           {IMAP_FETCH_RFC822, "RFC822"},
                 {IMAP_FETCH_RFC822_HEADER, "RFC822.HEADER"},
                 {IMAP_FETCH_RFC822_TEXT, "RFC822.TEXT"}};
    for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++) {
        if ((items->attrs & whole[i].attr) == 0)
            continue;
        buf_printf(out, "%s%s NIL", sep, whole[i].name);
        sep = " ";
    }
    for (size_t i = 0; i < items->body_count; i++) {
        const struct imap_fetch_body *b = &items->bodies[i];
        buf_append_str(out, sep);
        imap_fetch_body_name(b, out);
        buf_append_str(out, b->kind == IMAP_FETCH_BINARY_SIZE ? " 0" : " NIL");
        sep = " ";
    }
}

static void fetch_one(struct imap_session *s, struct imap_fetch_state *st, uint32_t seq,
                      bool gone)
{
    const struct imap_fetch_items *items = &st->items;
    bool uid_mode = st->uid_mode, flags_too = st->seen_changed;
    struct buf *out = &st->out;
    bool *some_gone = &st->some_gone, *unknown_cte = &st->unknown_cte;
    const struct mailbox_view_entry *e = mailbox_view_at(s->view, seq);
    struct imap_message fm;
    memset(&fm, 0, sizeof(fm));
    size_t start = out->len;
    /* The lines of a big FETCH are mostly these first items: appended
     * directly, not through printf. */
    buf_append_str(out, "* ");
    buf_append_uint(out, seq);
    buf_append_str(out, " FETCH (");
    const char *sep = "";
    unsigned a = items->attrs;
    /* RFC 7162 3.2.4: a FETCH that set \Seen carries the UID once QRESYNC
     * is on, and the mod-sequence once CONDSTORE is. */
    if (uid_mode || (a & IMAP_FETCH_UID) || (flags_too && s->qresync)) {
        buf_append_str(out, "UID ");
        buf_append_uint(out, e->uid);
        sep = " ";
    }
    if ((a & IMAP_FETCH_FLAGS) || flags_too) {
        buf_append_str(out, sep);
        buf_append_str(out, "FLAGS ");
        imap_append_flags(out, s, e->uid, e->flags, e->keywords);
        sep = " ";
    }
    if (a & IMAP_FETCH_INTERNALDATE) {
        buf_printf(out, "%sINTERNALDATE ", sep);
        imap_quote_datetime(out, e->internal_date, 0);
        sep = " ";
    }
    if (a & IMAP_FETCH_RFC822_SIZE) {
        buf_printf(out, "%sRFC822.SIZE %llu", sep, (unsigned long long)e->vsize);
        sep = " ";
    }
    if ((a & IMAP_FETCH_MODSEQ) || items->changedsince || (flags_too && s->condstore)) {
        buf_printf(out, "%sMODSEQ (%llu)", sep, (unsigned long long)e->modseq);
        sep = " ";
    }
    if (gone) {
        fetch_contents_gone(items, sep, out);
        buf_append_str(out, ")\r\n");
        return;
    }
    bool ok = true;
    if (ok && (a & IMAP_FETCH_ENVELOPE)) {
        buf_printf(out, "%sENVELOPE ", sep);
        ok = fetch_structure(s, e->uid, &fm, "imap.envelope", out);
        sep = " ";
    }
    if (ok && (a & IMAP_FETCH_BODYSTRUCTURE)) {
        buf_printf(out, "%sBODYSTRUCTURE ", sep);
        ok = fetch_structure(s, e->uid, &fm, "imap.bodystructure", out);
        sep = " ";
    }
    if (ok && (a & IMAP_FETCH_BODY)) {
        buf_printf(out, "%sBODY ", sep);
        ok = fetch_structure(s, e->uid, &fm, "imap.body", out);
        sep = " ";
    }
    static const struct {
        unsigned attr;
        const char *name;
        enum imap_section_text text;
    } rfc822[] = {{IMAP_FETCH_RFC822, "RFC822", IMAP_SECTION_BODY},
                  {IMAP_FETCH_RFC822_HEADER, "RFC822.HEADER", IMAP_SECTION_HEADER},
                  {IMAP_FETCH_RFC822_TEXT, "RFC822.TEXT", IMAP_SECTION_TEXT}};
    for (size_t i = 0; ok && i < sizeof(rfc822) / sizeof(rfc822[0]); i++) {
        if ((a & rfc822[i].attr) == 0)
            continue;
        ok = imap_message_parse(&fm, s->box, e->uid, s->io.id);
        if (!ok)
            break;
        struct imap_section sec;
        memset(&sec, 0, sizeof(sec));
        sec.text = rfc822[i].text;
        struct buf bytes = {0};
        struct petrel_error err;
        if (imap_section_fetch(&fm.parsed, &sec, false, 0, 0, &bytes, &err)) {
            replace_nul(bytes.data, bytes.len);
            buf_printf(out, "%s%s {%zu}\r\n", sep, rfc822[i].name, bytes.len);
        } else
            buf_printf(out, "%s%s {0}\r\n", sep, rfc822[i].name);
        buf_append(out, bytes.data, bytes.len);
        buf_free(&bytes);
        sep = " ";
    }
    for (size_t i = 0; ok && i < items->body_count; i++) {
        buf_append_str(out, sep);
        ok = fetch_body_item(s, st, e->uid, &fm, &items->bodies[i], i + 1 == items->body_count, out,
                             unknown_cte);
        sep = " ";
    }
    imap_message_release(&fm);
    if (st->streaming)
        return; /* the stream ends the line */
    if (!ok) {
        /* Expunged by another session since our view: answered again
         * without its contents. */
        out->len = start;
        *some_gone = true;
        fetch_one(s, st, seq, true);
        return;
    }
    buf_append_str(out, ")\r\n");
}

static void do_fetch(struct imap_session *s, const struct imap_command *cmd,
                     const struct imap_arg *args, size_t argc, bool uid_mode)
{
    if (argc < 2 || argc > 3 || (argc == 3 && args[2].type != IMAP_ARG_LIST)) {
        imap_reply_bad(s, "FETCH needs a message set and data items.");
        return;
    }
    (void)cmd;
    uint32_t *uids = NULL;
    size_t count = 0;
    if (!resolve_set(s, &args[0], uid_mode, &uids, &count))
        return;
    struct imap_fetch_items items;
    struct petrel_error err;
    if (!imap_fetch_items_parse(&args[1], argc == 3 ? &args[2] : NULL, &items, &err)) {
        free(uids);
        imap_reply_bad(s, "%s", err.message);
        return;
    }
    if (items.vanished && (!uid_mode || !s->qresync)) {
        /* RFC 7162 3.2.6: UID FETCH only, once QRESYNC is enabled. */
        imap_fetch_items_free(&items);
        free(uids);
        imap_reply_bad(s, "VANISHED needs UID FETCH and ENABLE QRESYNC.");
        return;
    }
    if (items.changedsince || (items.attrs & IMAP_FETCH_MODSEQ))
        imap_condstore_enable(s);
    if (items.vanished) {
        struct mailbox_view_status vst;
        mailbox_view_get_status(s->view, &vst);
        struct imap_seqset asked = {0};
        if (imap_seqset_parse(args[0].str, args[0].len, vst.uid_next > 1 ? vst.uid_next - 1 : 0, 0,
                              &asked, &err))
            imap_send_vanished_earlier(s, &asked);
        imap_seqset_free(&asked);
    }
    /* Non-PEEK body items set \Seen first, so the FLAGS sent are current. */
    bool seen_changed = false;
    /* Without the ACL's s right the flag is not kept (RFC 4314 4: no
     * error; the FETCH goes on as a PEEK would). */
    if (imap_fetch_items_set_seen(&items) && !s->readonly && count > 0 &&
        (mailbox_my_rights(s->box) & ACL_WRITE_SEEN) != 0) {
        struct mailbox_flags_update upd = {MAILBOX_FLAGS_ADD, MAIL_FLAG_SEEN, NULL, 0};
        struct mailbox_flags_result *res = NULL;
        size_t res_count = 0;
        if (mailbox_update_flags(s->box, uids, count, &upd, &res, &res_count, NULL, NULL, &err)) {
            /* The view adopts keyword names others created meanwhile:
             * announce them before a FETCH shows them. */
            if (mailbox_view_note_flags(s->view, res, res_count))
                imap_selected_send_flags(s);
            seen_changed = true;
            imap_context_note_flags(s, res, res_count);
        }
        free(res);
    }
    struct imap_fetch_state *st = xcalloc(1, sizeof(*st));
    st->uids = uids;
    st->count = count;
    st->items = items;
    st->uid_mode = uid_mode;
    st->seen_changed = seen_changed;
    s->fetch = st;
    imap_fetch_continue(s);
}

static void fetch_state_free(struct imap_fetch_state *st)
{
    stream_close(st);
    buf_free(&st->out);
    imap_fetch_items_free(&st->items);
    free(st->uids);
    free(st);
}

bool imap_fetch_abort(struct imap_session *s)
{
    struct imap_fetch_state *st = s->fetch;
    if (st == NULL)
        return false;
    bool in_literal = st->streaming;
    s->fetch = NULL;
    fetch_state_free(st);
    return in_literal;
}

static void fetch_flush(struct imap_session *s, struct imap_fetch_state *st)
{
    if (st->out.len > 0) {
        imap_send_raw(s, st->out.data, st->out.len);
        st->output_moved = true;
    }
    if (st->out.cap > FETCH_BATCH * 2)
        buf_free(&st->out);
    else
        buf_reset(&st->out);
}

/* Waits for the client to read: the session stays busy (no next command)
 * and imap-session.c calls imap_fetch_continue() once the output drained. */
static void fetch_wait(struct imap_session *s, struct imap_fetch_state *st)
{
    fetch_flush(s, st);
    s->busy = true;
    imap_session_wait_output(s);
}

void imap_fetch_continue(struct imap_session *s)
{
    struct imap_fetch_state *st = s->fetch;
    st->output_moved = true; /* the output may have drained since the last call */
    for (;;) {
        if (st->streaming) {
            st->output_moved = true;
            enum stream_result r = stream_pump(s, st);
            if (r == STREAM_WAIT) {
                fetch_wait(s, st);
                return;
            }
            if (r == STREAM_FAILED) {
                imap_fetch_abort(s);
                s->state = IMAP_STATE_LOGOUT;
                imap_session_close_after_output(s);
                return;
            }
        }
        if (st->next >= st->count || s->io.closing)
            break;
        if (st->out.len >= FETCH_BATCH)
            fetch_flush(s, st);
        if (st->output_moved) {
            if (imap_session_output_full(s)) {
                fetch_wait(s, st);
                return;
            }
            st->output_moved = false;
        }
        uint32_t uid = st->uids[st->next++];
        st->seq = mailbox_view_seq_hint(s->view, uid, st->seq + 1);
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, st->seq);
        if (e == NULL)
            continue;
        if (st->items.changedsince && e->modseq <= st->items.changedsince_modseq)
            continue;
        fetch_one(s, st, st->seq, false);
    }
    fetch_flush(s, st);
    /* What the loop cached, under one lock and in one write. */
    struct petrel_error err;
    if (!mailbox_cache_flush(s->box, &err))
        log_debug(IMAP_COMPONENT, "cache store failed", "session=%s error=\"%s\"", s->io.id,
                  err.message);
    bool unknown_cte = st->unknown_cte, some_gone = st->some_gone;
    s->fetch = NULL;
    fetch_state_free(st);
    if (unknown_cte)
        imap_reply_no(s, "[UNKNOWN-CTE] A part has an unknown Content-Transfer-Encoding.");
    else if (some_gone)
        imap_reply_ok(s, "[EXPUNGEISSUED] Some messages were already expunged.");
    else
        imap_reply_ok(s, "FETCH completed.");
}

/* ---------- STORE ---------- */

static void do_store(struct imap_session *s, const struct imap_arg *args, size_t argc,
                     bool uid_mode)
{
    size_t i = 1;
    uint64_t unchanged_since = 0;
    if (argc >= 2 && args[1].type == IMAP_ARG_LIST) {
        const struct imap_arg *m = &args[1];
        if (m->count != 2 || !imap_arg_atom_equals(&m->list[0], "UNCHANGEDSINCE") ||
            m->list[1].type != IMAP_ARG_ATOM) {
            imap_reply_bad(s, "Unknown STORE modifier.");
            return;
        }
        char *end = NULL;
        unchanged_since = strtoull(m->list[1].str, &end, 10);
        if (*end != '\0') {
            imap_reply_bad(s, "Bad UNCHANGEDSINCE value.");
            return;
        }
        imap_condstore_enable(s);
        i = 2;
    }
    if (argc != i + 2 || args[i].type != IMAP_ARG_ATOM) {
        imap_reply_bad(s, "STORE needs a message set, an item and flags.");
        return;
    }
    if (imap_selected_readonly_refused(s))
        return;
    const char *item = args[i].str;
    enum mailbox_flags_mode mode;
    if (item[0] == '+')
        mode = MAILBOX_FLAGS_ADD;
    else if (item[0] == '-')
        mode = MAILBOX_FLAGS_REMOVE;
    else
        mode = MAILBOX_FLAGS_REPLACE;
    const char *base = item[0] == '+' || item[0] == '-' ? item + 1 : item;
    bool silent;
    if (strcasecmp(base, "FLAGS") == 0)
        silent = false;
    else if (strcasecmp(base, "FLAGS.SILENT") == 0)
        silent = true;
    else {
        imap_reply_bad(s, "Unknown STORE item.");
        return;
    }
    uint32_t flags;
    const char *keywords[IMAP_MAX_APPEND_KEYWORDS + 1];
    size_t kw_count;
    if (!parse_flags(s, &args[i + 1], &flags, keywords, &kw_count))
        return;
    uint32_t *uids = NULL;
    size_t count = 0;
    if (!resolve_set(s, &args[0], uid_mode, &uids, &count))
        return;
    struct mailbox_flags_update upd = {mode, flags, kw_count > 0 ? keywords : NULL,
                                       unchanged_since};
    struct mailbox_flags_result *res = NULL;
    size_t res_count = 0;
    uint32_t *failed = NULL;
    size_t failed_count = 0;
    struct petrel_error err;
    if (count > 0 && !mailbox_update_flags(s->box, uids, count, &upd, &res, &res_count, &failed,
                                           &failed_count, &err)) {
        free(uids);
        imap_reply_storage_error(s, &err);
        return;
    }
    /* New keywords: FLAGS first. Not a sync, which could send other
     * sessions' EXPUNGEs in the middle of a STORE (RFC 3501 7.4.1). */
    if (mailbox_view_note_flags(s->view, res, res_count))
        imap_selected_send_flags(s);
    struct buf out = {0};
    imap_context_note_flags(s, res, res_count);
    for (size_t k = 0; k < res_count; k++) {
        uint32_t seq = mailbox_view_seq(s->view, res[k].uid);
        if (seq == 0 || (silent && unchanged_since == 0))
            continue;
        buf_printf(&out, "* %u FETCH (", seq);
        /* RFC 7162 3.2.4: with QRESYNC every FETCH a flag change causes
         * carries the UID (as Dovecot sends it). */
        if (uid_mode || s->qresync)
            buf_printf(&out, "UID %u ", res[k].uid);
        buf_append_str(&out, "FLAGS ");
        imap_append_flags(&out, s, res[k].uid, res[k].flags, res[k].keywords);
        if (s->condstore)
            buf_printf(&out, " MODSEQ (%llu)", (unsigned long long)res[k].modseq);
        buf_append_str(&out, ")\r\n");
    }
    if (out.len > 0)
        imap_send_raw(s, out.data, out.len);
    buf_free(&out);
    if (failed_count > 0) {
        struct imap_seqset set = {0};
        for (size_t k = 0; k < failed_count; k++)
            imap_seqset_add(&set, uid_mode ? failed[k] : mailbox_view_seq(s->view, failed[k]),
                            uid_mode ? failed[k] : mailbox_view_seq(s->view, failed[k]));
        struct buf list = {0};
        imap_seqset_format(&set, &list);
        buf_append_char(&list, '\0');
        imap_reply_ok(s, "[MODIFIED %s] Conditional STORE failed for some messages.", list.data);
        buf_free(&list);
        imap_seqset_free(&set);
    } else {
        imap_reply_ok(s, "STORE completed.");
    }
    free(res);
    free(failed);
    free(uids);
}

/* ---------- COPY / MOVE ---------- */

/* Opens the folder COPY, MOVE or APPEND saves into; NULL with the NO sent,
 * "[TRYCREATE] <what> does not exist." when it does not (RFC 3501 6.3.11,
 * 6.4.7). */
static struct mailbox *open_target(struct imap_session *s, const struct namespace_config *ns,
                                   const char *name, const char *what)
{
    struct petrel_error err;
    struct mailbox *box = mailbox_open_for(s->user, ns, name, MAILBOX_OPEN_SAVE, &err);
    if (box == NULL) {
        if (err.code == PETREL_ERR_NOT_FOUND)
            imap_reply_no(s, "[TRYCREATE] %s does not exist.", what);
        else
            imap_reply_storage_error(s, &err);
    }
    return box;
}

static void do_copy(struct imap_session *s, const struct imap_arg *args, size_t argc, bool uid_mode,
                    bool move)
{
    if (argc != 2 || args[1].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "%s needs a message set and a mailbox.", move ? "MOVE" : "COPY");
        return;
    }
    if (move && imap_selected_readonly_refused(s))
        return;
    uint32_t *uids = NULL;
    size_t count = 0;
    if (!resolve_set(s, &args[0], uid_mode, &uids, &count))
        return;
    const struct namespace_config *ns;
    char *name;
    if (!imap_resolve_folder(s, &args[1], &ns, &name)) {
        free(uids);
        return;
    }
    struct mailbox *dst = open_target(s, ns, name, "Destination mailbox");
    free(name);
    if (dst == NULL) {
        free(uids);
        return;
    }
    struct petrel_error err;
    uint32_t *new_uids = NULL;
    bool ok = count == 0 || (move ? mailbox_move(s->box, uids, count, dst, &new_uids, &err)
                                  : mailbox_copy(s->box, uids, count, dst, true, &new_uids, &err));
    struct mailbox_info info;
    bool have_info = ok && mailbox_get_info(dst, false, &info, &err);
    mailbox_close(dst);
    if (!ok || !have_info) {
        free(uids);
        free(new_uids);
        imap_reply_storage_error(s, &err);
        return;
    }
    struct buf src_set = {0}, dst_set = {0};
    for (size_t i = 0; i < count; i++) {
        if (new_uids == NULL || new_uids[i] == 0)
            continue;
        buf_printf(&src_set, "%s%u", src_set.len > 0 ? "," : "", uids[i]);
        buf_printf(&dst_set, "%s%u", dst_set.len > 0 ? "," : "", new_uids[i]);
    }
    buf_append_char(&src_set, '\0');
    buf_append_char(&dst_set, '\0');
    bool any = src_set.len > 1;
    if (move) {
        /* RFC 6851: COPYUID goes untagged, before the EXPUNGEs. */
        if (any)
            imap_send(s, "* OK [COPYUID %u %s %s] Moved.", info.uid_validity, src_set.data,
                      dst_set.data);
        imap_reply_ok(s, "MOVE completed.");
    } else if (any) {
        imap_reply_ok(s, "[COPYUID %u %s %s] COPY completed.", info.uid_validity, src_set.data,
                      dst_set.data);
    } else {
        imap_reply_ok(s, "COPY completed.");
    }
    buf_free(&src_set);
    buf_free(&dst_set);
    free(uids);
    free(new_uids);
}

static void do_uid_expunge(struct imap_session *s, const struct imap_arg *args, size_t argc)
{
    if (argc != 1) {
        imap_reply_bad(s, "UID EXPUNGE needs a UID set.");
        return;
    }
    if (imap_selected_readonly_refused(s))
        return;
    uint32_t *uids = NULL;
    size_t count = 0;
    if (!resolve_set(s, &args[0], true, &uids, &count))
        return;
    struct petrel_error err;
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    bool ok = count == 0 || mailbox_expunge(s->box, uids, count, &gone, &gone_count, &err);
    free(gone);
    free(uids);
    if (!ok)
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "UID EXPUNGE completed.");
}

/* ---------- commands ---------- */

static void cmd_fetch(struct imap_session *s, const struct imap_command *cmd)
{
    do_fetch(s, cmd, cmd->args, cmd->arg_count, false);
}

static void cmd_store(struct imap_session *s, const struct imap_command *cmd)
{
    do_store(s, cmd->args, cmd->arg_count, false);
}

static void cmd_copy(struct imap_session *s, const struct imap_command *cmd)
{
    do_copy(s, cmd->args, cmd->arg_count, false, false);
}

static void cmd_move(struct imap_session *s, const struct imap_command *cmd)
{
    do_copy(s, cmd->args, cmd->arg_count, false, true);
}

static void cmd_uid(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count < 1 || cmd->args[0].type != IMAP_ARG_ATOM) {
        imap_reply_bad(s, "UID needs a command.");
        return;
    }
    const struct imap_arg *rest = cmd->args + 1;
    size_t n = cmd->arg_count - 1;
    const char *sub = cmd->args[0].str;
    char name[32];
    snprintf(name, sizeof(name), "UID %s", sub);
    for (char *p = name; *p != '\0'; p++)
        *p = (char)toupper((unsigned char)*p);
    snprintf(s->command, sizeof(s->command), "%s", name);
    if (strcasecmp(sub, "FETCH") == 0)
        do_fetch(s, cmd, rest, n, true);
    else if (strcasecmp(sub, "STORE") == 0)
        do_store(s, rest, n, true);
    else if (strcasecmp(sub, "COPY") == 0)
        do_copy(s, rest, n, true, false);
    else if (strcasecmp(sub, "MOVE") == 0)
        do_copy(s, rest, n, true, true);
    else if (strcasecmp(sub, "EXPUNGE") == 0)
        do_uid_expunge(s, rest, n);
    else if (strcasecmp(sub, "SEARCH") == 0)
        imap_uid_search(s, rest, n);
    else if (strcasecmp(sub, "SORT") == 0)
        imap_uid_sort(s, rest, n);
    else if (strcasecmp(sub, "THREAD") == 0)
        imap_uid_thread(s, rest, n);
    else {
        snprintf(s->command, sizeof(s->command), "UID");
        imap_reply_bad(s, "Unknown UID command.");
    }
}

/* ---------- APPEND (RFC 3502 MULTIAPPEND, RFC 4315 APPENDUID) ---------- */

static void cmd_append(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count < 2 || cmd->args[0].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "APPEND needs a mailbox and a message.");
        return;
    }
    const struct namespace_config *ns;
    char *name;
    if (!imap_resolve_folder(s, &cmd->args[0], &ns, &name))
        return;
    /* Appending to the selected folder goes through its open handle: a
     * second open would read the index and replay its log again. */
    bool selected = s->box != NULL && mailbox_is(s->box, ns, name);
    struct mailbox *box = selected ? s->box : open_target(s, ns, name, "Mailbox");
    free(name);
    if (box == NULL)
        return;
    struct petrel_error err;
    /* MULTIAPPEND (RFC 3502) is all or nothing: what went in before a
     * failure is taken out again. */
    uint32_t *added = NULL;
    size_t added_count = 0, added_cap = 0;
    size_t i = 1;
    const char *bad = NULL; /* a syntax problem: BAD */
    const char *no = NULL;  /* a refused message: NO */
    const char *badurl = NULL; /* CATENATE: a URL that cannot be fetched */
    bool ok = true;
    while (ok && bad == NULL && no == NULL && i < cmd->arg_count) {
        uint32_t flags = 0;
        const char *keywords[IMAP_MAX_APPEND_KEYWORDS + 1] = {NULL};
        size_t kw_count = 0;
        int64_t date = 0;
        if (cmd->args[i].type == IMAP_ARG_LIST) {
            if (!parse_flags(s, &cmd->args[i], &flags, keywords, &kw_count)) {
                no = ""; /* parse_flags has replied */
                break;
            }
            i++;
        }
        if (i < cmd->arg_count && cmd->args[i].type == IMAP_ARG_QUOTED) {
            int tz = 0;
            if (!imap_datetime_parse(cmd->args[i].str, cmd->args[i].len, &date, &tz)) {
                bad = "Invalid date-time.";
                break;
            }
            i++;
        }
        const struct imap_arg *msg = NULL;
        if (i + 1 < cmd->arg_count && imap_arg_atom_equals(&cmd->args[i], "CATENATE")) {
            /* RFC 4469: the message built from text and URL parts. */
            int fd = -1;
            uint64_t len = 0;
            const char *text = NULL, *url = NULL;
            enum imap_catenate_result r =
                imap_catenate_build(s, &cmd->args[i + 1], &fd, &len, &text, &url);
            i += 2;
            if (r == IMAP_CATENATE_OK && len == 0) {
                close(fd);
                no = "Empty messages cannot be appended.";
                break;
            }
            if (r == IMAP_CATENATE_OK) {
                uint32_t uid = 0;
                const char *const *kw = kw_count > 0 ? keywords : NULL;
                ok = mailbox_append_file(box, NULL, 0, fd, 0, len, flags, kw, date, &uid, &err);
                close(fd);
                if (ok) {
                    added = xgrow(added, &added_cap, added_count + 1, sizeof(uint32_t));
                    added[added_count++] = uid;
                }
                continue;
            }
            if (r == IMAP_CATENATE_BADURL) {
                badurl = url != NULL ? url : "";
                no = "";
            } else if (r == IMAP_CATENATE_REPLIED) {
                no = ""; /* replied already */
            } else if (r == IMAP_CATENATE_BAD) {
                bad = text;
            } else {
                no = text;
            }
            break;
        }
        if (i + 1 < cmd->arg_count && imap_arg_atom_equals(&cmd->args[i], "UTF8")) {
            /* RFC 6855 4: UTF8 (~{n}...), a message with UTF-8 headers,
             * once the client has enabled UTF8=ACCEPT. */
            const struct imap_arg *list = &cmd->args[i + 1];
            if (!s->utf8_accept || list->type != IMAP_ARG_LIST || list->count != 1 ||
                list->list[0].type != IMAP_ARG_LITERAL || !list->list[0].literal8) {
                bad = s->utf8_accept ? "UTF8 takes one literal8 in parentheses."
                                     : "APPEND UTF8 needs ENABLE UTF8=ACCEPT first.";
                break;
            }
            msg = &list->list[0];
            i += 2;
        } else {
            if (i >= cmd->arg_count || cmd->args[i].type != IMAP_ARG_LITERAL) {
                bad = "APPEND needs the message as a literal.";
                break;
            }
            msg = &cmd->args[i++];
        }
        const struct imap_literal_spool *spool = msg->spool;
        if (spool != NULL && spool->failed) {
            ok = false;
            err = spool->err;
            break;
        }
        if (!msg->literal8 &&
            (spool != NULL ? spool->has_nul : memchr(msg->str, '\0', msg->len) != NULL)) {
            /* RFC 3516: NUL bytes travel only in a literal8 (~{n}). */
            no = "NUL bytes in a message need APPEND with a literal8 (~{n}).";
            break;
        }
        if (msg->len == 0) {
            no = "Empty messages cannot be appended.";
            break;
        }
        uint32_t uid = 0;
        const char *const *kw = kw_count > 0 ? keywords : NULL;
        /* A spooled literal is saved from its file (linked when it can be). */
        ok = spool != NULL ? mailbox_append_file(box, NULL, 0, spool->fd, 0, msg->len, flags, kw,
                                                 date, &uid, &err)
                           : mailbox_append(box, msg->str, msg->len, flags, kw, date, &uid, &err);
        if (ok) {
            added = xgrow(added, &added_cap, added_count + 1, sizeof(uint32_t));
            added[added_count++] = uid;
        }
    }
    bool failed = !ok || bad != NULL || no != NULL;
    /* The UIDVALIDITY the new UIDs were given under, as committed. */
    uint32_t uid_validity = mailbox_handle_uid_validity(box);
    struct petrel_error rb;
    if (failed && !mailbox_append_undo(box, added, added_count, &rb))
        log_error(IMAP_COMPONENT, "APPEND rollback failed", "session=%s error=\"%s\"", s->io.id,
                  rb.message);
    if (!selected)
        mailbox_close(box);
    if (bad != NULL)
        imap_reply_bad(s, "%s", bad);
    else if (badurl != NULL) {
        /* RFC 4469 6: the URL as text; ']', CR, LF and NUL cannot be in it. */
        char shown[256];
        size_t n = 0;
        for (const char *c = badurl; *c != '\0' && n + 1 < sizeof(shown); c++)
            shown[n++] = *c == ']' || *c == '\r' || *c == '\n' ? '?' : *c;
        shown[n] = '\0';
        imap_reply_no(s, "[BADURL %s] The URL cannot be fetched.", n > 0 ? shown : "?");
    } else if (no != NULL) {
        if (*no != '\0')
            imap_reply_no(s, "%s", no);
    } else if (!ok) {
        imap_reply_storage_error(s, &err);
    } else {
        struct buf list = {0};
        for (size_t k = 0; k < added_count; k++)
            buf_printf(&list, "%s%u", k > 0 ? "," : "", added[k]);
        buf_append_char(&list, '\0');
        imap_reply_ok(s, "[APPENDUID %u %s] APPEND completed.", uid_validity, list.data);
        buf_free(&list);
    }
    free(added);
}

const struct imap_command_def imap_commands_message[] = {
    {"FETCH", IMAP_IN(IMAP_STATE_SELECTED), cmd_fetch},
    {"STORE", IMAP_IN(IMAP_STATE_SELECTED), cmd_store},
    {"COPY", IMAP_IN(IMAP_STATE_SELECTED), cmd_copy},
    {"MOVE", IMAP_IN(IMAP_STATE_SELECTED), cmd_move},
    {"UID", IMAP_IN(IMAP_STATE_SELECTED), cmd_uid},
    {"APPEND", IMAP_AUTHED, cmd_append},
    {NULL, 0, NULL},
};
