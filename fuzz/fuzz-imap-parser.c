/* libFuzzer target: the streaming IMAP command parser
 * (protocols/imap/imap-parser.h) and the grammar parsers the server runs on
 * its arguments (imap-seqset.h, imap-fetch-items.h, imap-search.h).
 * Input layout:
 *   byte 0     seed for the split points of the streamed feed
 *   byte 1     limits: bits 0-1 pick max_line, bit 2 LITERAL- (4096),
 *              bits 3-4 max_literal, bits 5-6 max_args / max_depth
 *   byte 2..   the bytes a client sent (any number of commands)
 * Steps:
 *   1. The whole input fed at once (events handled as a server would:
 *      continuations acknowledged, the rest fed again); a transcript of every
 *      event, command and argument tree is kept.
 *   2. The same bytes fed in pseudo-random pieces, each in its own exact-size
 *      allocation so ASan sees any over-read, and (for shorter inputs) byte by
 *      byte: the transcripts must be identical.
 *   3. The same bytes fed in pieces with a literal sink (imap_literal_sink)
 *      that spools every literal over 2 bytes at an odd argument place:
 *      the transcript (spooled bytes read back) must be identical, every
 *      spool gets exactly its literal's bytes and is closed exactly once;
 *      and once more with a small in-memory limit for what the sink
 *      declines (any result, but spools balanced); and with a sink whose
 *      refuse() turns down some literals (as the quota's test allocation
 *      does) after reading the command's first argument and its later
 *      literal bytes: fed whole and in pieces, the transcripts must be
 *      identical (a refused {n+} is skipped, whatever the split), spools
 *      balanced.
 *   4. Every command's arguments go through the sequence-set, FETCH, SEARCH
 *      (with RETURN options, RFC 5267's PARTIAL/UPDATE/CONTEXT among them),
 *      QRESYNC-parameter, IMAP URL and date parsers; whatever they accept must satisfy their invariants
 *      (sorted merged ranges that format and parse back to the same set,
 *      date-times that format and parse back to the same instant), and every
 *      string argument written with imap_quote_astring() must parse back to
 *      the same bytes. */
#include "core/buf.h"
#include "core/error.h"
#include "protocols/imap/imap-date.h"
#include "protocols/imap/imap-fetch-items.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-qresync.h"
#include "protocols/imap/imap-quote.h"
#include "protocols/imap/imap-search.h"
#include "protocols/imap/imap-seqset.h"
#include "protocols/imap/imap-url.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t rng_next(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static void check_seqset_text(const char *text, size_t len)
{
    struct imap_seqset set = {0};
    struct petrel_error err;
    static const uint32_t maxes[] = {0, 1, 7, UINT32_MAX};
    for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
        if (!imap_seqset_parse(text, len, maxes[m], IMAP_SEQSET_ALLOW_SEARCHRES, &set, &err)) {
            assert(set.count == 0);
            continue;
        }
        for (size_t i = 0; i < set.count; i++) {
            assert(set.ranges[i].lo >= 1 && set.ranges[i].lo <= set.ranges[i].hi);
            if (i > 0)
                assert((uint64_t)set.ranges[i - 1].hi + 1 < set.ranges[i].lo);
            assert(imap_seqset_contains(&set, set.ranges[i].lo));
            assert(imap_seqset_contains(&set, set.ranges[i].hi));
            if (set.ranges[i].lo > 1)
                assert(!imap_seqset_contains(&set, set.ranges[i].lo - 1));
        }
        if (set.count == 0)
            continue;
        struct buf out = {0};
        imap_seqset_format(&set, &out);
        struct imap_seqset again = {0};
        bool ok = imap_seqset_parse(out.data, out.len, maxes[m], 0, &again, &err);
        assert(ok);
        (void)ok;
        assert(again.count == set.count);
        assert(memcmp(again.ranges, set.ranges, set.count * sizeof(*set.ranges)) == 0);
        /* Iteration visits the first numbers in order. */
        struct imap_seqset_iter it = {0, 0};
        uint32_t prev = 0;
        uint32_t v = 0;
        for (int k = 0; k < 64 && imap_seqset_iter_next(&set, &it, &v); k++) {
            assert(v > prev && imap_seqset_contains(&set, v));
            prev = v;
        }
        imap_seqset_free(&again);
        buf_free(&out);
    }
    imap_seqset_free(&set);
}

/* What the server sends back must parse to the same bytes, but for a NUL,
 * which goes out as 0x80 (RFC 3501 allows none in a literal). */
static void check_quote(const struct imap_arg *a)
{
    if (a->len > 2048)
        return;
    struct buf line = {0};
    buf_append_str(&line, "t X ");
    imap_quote_astring(&line, a->str, a->len, (a->len & 1) != 0 ? IMAP_QUOTE_UTF8 : 0);
    buf_append_str(&line, "\r\n");
    struct imap_parser *p = imap_parser_new(NULL);
    size_t used = 0;
    enum imap_parse_result r = imap_parser_parse_all(p, line.data, line.len, &used);
    assert(r == IMAP_PARSE_COMMAND && used == line.len);
    const struct imap_command *c = imap_parser_command(p);
    assert(c->arg_count == 1 && c->args[0].len == a->len);
    for (size_t i = 0; i < a->len; i++)
        assert(c->args[0].str[i] == (a->str[i] == '\0' ? (char)0x80 : a->str[i]));
    (void)r;
    (void)c;
    imap_parser_free(p);
    buf_free(&line);
}

static void check_dates(const struct imap_arg *a)
{
    int32_t day = 0;
    (void)imap_date_parse(a->str, a->len, &day);
    int64_t t = 0;
    int tz = 0;
    if (imap_datetime_parse(a->str, a->len, &t, &tz)) {
        struct buf out = {0};
        imap_datetime_format(&out, t, tz);
        int64_t t2 = 0;
        int tz2 = 0;
        bool ok = imap_datetime_parse(out.data, out.len, &t2, &tz2);
        assert(ok && t2 == t && tz2 == tz);
        (void)ok;
        buf_free(&out);
    }
}

static void check_grammar(const struct imap_command *c)
{
    for (size_t i = 0; i < c->arg_count; i++) {
        const struct imap_arg *a = &c->args[i];
        if (a->type == IMAP_ARG_ATOM)
            check_seqset_text(a->str, a->len);
        if (a->type != IMAP_ARG_LIST) {
            check_quote(a);
            check_dates(a);
        }
    }
    struct petrel_error err;
    /* FETCH <set> <items> [modifiers], and the same after UID. */
    for (size_t first = 1; first <= 2 && first < c->arg_count; first++) {
        const struct imap_arg *mods = first + 1 < c->arg_count ? &c->args[first + 1] : NULL;
        struct imap_fetch_items items;
        if (!imap_fetch_items_parse(&c->args[first], mods, &items, &err))
            continue;
        if (items.changedsince)
            assert((items.attrs & IMAP_FETCH_MODSEQ) != 0);
        for (size_t b = 0; b < items.body_count; b++) {
            const struct imap_fetch_body *body = &items.bodies[b];
            assert(body->part_count <= IMAP_SECTION_MAX_PARTS);
            assert(body->kind != IMAP_FETCH_BINARY_SIZE || !body->partial);
            assert(!body->partial || body->partial_count > 0);
            struct buf name = {0};
            imap_fetch_body_name(body, &name);
            assert(name.len > 0);
            buf_free(&name);
        }
        (void)imap_fetch_items_set_seen(&items);
        imap_fetch_items_free(&items);
    }
    /* QRESYNC select parameters: every list, at any depth of the first
     * level, as the list after a QRESYNC atom. */
    for (size_t i = 0; i < c->arg_count; i++) {
        const struct imap_arg *a = &c->args[i];
        for (size_t k = 0; a->type == IMAP_ARG_LIST && k <= a->count; k++) {
            const struct imap_arg *l = k == 0 ? a : &a->list[k - 1];
            struct imap_qresync_param q;
            if (!imap_qresync_parse(l, &q))
                continue;
            assert(q.uid_validity > 0 && q.modseq > 0 && q.modseq <= INT64_MAX);
            assert(q.known_given || q.known.count == 0);
            for (size_t r = 0; r < q.known.count; r++) {
                assert(q.known.ranges[r].lo > 0 && q.known.ranges[r].lo <= q.known.ranges[r].hi);
                assert(r == 0 || q.known.ranges[r - 1].hi + 1 < q.known.ranges[r].lo);
            }
            imap_qresync_param_free(&q);
        }
    }
    /* IMAP URLs (CATENATE): every string argument, at the first level and
     * inside lists. */
    for (size_t i = 0; i < c->arg_count; i++) {
        const struct imap_arg *a = &c->args[i];
        size_t n = a->type == IMAP_ARG_LIST ? a->count : 1;
        for (size_t k = 0; k < n; k++) {
            const struct imap_arg *v = a->type == IMAP_ARG_LIST ? &a->list[k] : a;
            if (v->type == IMAP_ARG_LIST || v->str == NULL)
                continue;
            struct imap_url u;
            if (!imap_url_parse(v->str, v->len, &u))
                continue;
            /* An empty mailbox only for ";UID=..." (the selected one). */
            assert(u.uid > 0 && (u.mailbox[0] != '\0' ||
                                 (!u.absolute && strncasecmp(v->str, ";UID=", 5) == 0)));
            assert(strlen(u.mailbox) < sizeof(u.mailbox) && strlen(u.section) < sizeof(u.section));
            assert(!u.partial || u.partial_start <= UINT32_MAX);
        }
    }
    /* SEARCH programs: the arguments as they are, and after the first. */
    for (size_t skip = 0; skip <= 1 && skip < c->arg_count; skip++) {
        struct imap_search_program prog;
        if (imap_search_parse(&c->args[skip], c->arg_count - skip, 100, 1000, &prog, &err)) {
            assert(prog.root.key == IMAP_SEARCH_AND && prog.root.child_count > 0);
            /* RFC 5267 4.4: one PARTIAL with an ordered nz range, never with ALL */
            if (prog.return_options & IMAP_SEARCH_RETURN_PARTIAL) {
                assert(prog.has_return && prog.partial_lo >= 1);
                assert(prog.partial_lo <= prog.partial_hi);
                assert(!(prog.return_options & IMAP_SEARCH_RETURN_ALL));
            } else {
                assert(prog.partial_lo == 0 && prog.partial_hi == 0);
            }
            assert(prog.has_return || prog.return_options == 0);
            (void)imap_search_needs(&prog);
            imap_search_program_free(&prog);
        }
    }
}

/* A spool of the fuzzing sink: the bytes in memory, counted. */
struct fuzz_spool {
    struct buf data;
    uint64_t size;
};

struct fuzz_sink_state {
    size_t opened;
    size_t closed;
    struct imap_parser *parser; /* the one being fed (for refuse) */
};

/* Refuses a literal after the first argument when its size plus the
 * earlier ones is a multiple of 3; reads every byte of the first argument
 * the parser shows (ASan sees an over-read). */
static const char *sink_refuse(void *ctx, const char *command, size_t arg_index, uint64_t size,
                               bool non_sync)
{
    struct fuzz_sink_state *st = ctx;
    (void)non_sync;
    assert(command != NULL && command[0] != '\0');
    const char *first = NULL;
    size_t len = 0;
    unsigned sum = 0;
    if (imap_parser_first_arg(st->parser, &first, &len)) {
        for (size_t i = 0; i < len; i++)
            sum += (unsigned char)first[i];
    }
    uint64_t later = imap_parser_later_literal_bytes(st->parser);
    if (arg_index == 0 || (size + later + sum) % 3 != 0)
        return NULL;
    return "[OVERQUOTA] refused";
}

static void *sink_open(void *ctx, const char *command, size_t arg_index, uint64_t size,
                       bool literal8)
{
    struct fuzz_sink_state *st = ctx;
    (void)literal8;
    assert(command != NULL && command[0] != '\0');
    if ((arg_index & 1) == 0)
        return NULL;
    struct fuzz_spool *sp = calloc(1, sizeof(*sp));
    sp->size = size;
    st->opened++;
    return sp;
}

static void sink_write(void *ctx, void *spool, const void *data, size_t len)
{
    (void)ctx;
    struct fuzz_spool *sp = spool;
    assert(len > 0 && sp->data.len + len <= sp->size);
    buf_append(&sp->data, data, len);
}

static void sink_close(void *ctx, void *spool)
{
    struct fuzz_sink_state *st = ctx;
    struct fuzz_spool *sp = spool;
    st->closed++;
    assert(st->closed <= st->opened);
    buf_free(&sp->data);
    free(sp);
}

static void describe_args(struct buf *t, const struct imap_arg *args, size_t count, size_t depth,
                          const struct imap_parser_limits *lim)
{
    assert(depth <= lim->max_depth);
    for (size_t i = 0; i < count; i++) {
        const struct imap_arg *a = &args[i];
        buf_printf(t, " %d%d:", (int)a->type, (int)a->literal8);
        if (a->type == IMAP_ARG_LIST) {
            assert(a->str == NULL);
            buf_append_char(t, '(');
            describe_args(t, a->list, a->count, depth + 1, lim);
            buf_append_char(t, ')');
        } else if (a->spool != NULL) {
            /* Spooled: all of the literal went to the sink, none to memory. */
            const struct fuzz_spool *sp = a->spool;
            assert(a->type == IMAP_ARG_LITERAL && a->str == NULL);
            assert(sp->size == a->len && sp->data.len == a->len && a->len <= lim->max_literal);
            buf_printf(t, "%zu:", a->len);
            buf_append(t, sp->data.data, sp->data.len);
        } else {
            assert(a->str != NULL && a->str[a->len] == '\0');
            if (a->type == IMAP_ARG_LITERAL)
                assert(a->len <= lim->max_literal);
            else
                assert(a->len <= lim->max_line && memchr(a->str, '\n', a->len) == NULL);
            buf_printf(t, "%zu:", a->len);
            buf_append(t, a->str, a->len);
        }
    }
}

/* Feeds `len` bytes in pieces chosen by `rng` (NULL: all at once, `step`
 * bytes at a time when non-zero) and returns the transcript. */
static void run(const char *in, size_t len, const struct imap_parser_limits *lim, uint32_t *rng,
                size_t step, bool check, const struct imap_literal_sink *sink, struct buf *t)
{
    struct imap_parser *p = imap_parser_new(lim);
    if (sink != NULL) {
        imap_parser_set_sink(p, sink);
        ((struct fuzz_sink_state *)sink->ctx)->parser = p;
    }
    size_t pos = 0;
    bool fatal = false;
    while (pos < len && !fatal) {
        size_t piece = len - pos;
        if (rng != NULL) {
            uint32_t x = rng_next(rng);
            piece = (x & 3) == 0 ? 1 : (x >> 2) % ((x & 3) == 1 ? 16 : 512);
            if (piece == 0)
                piece = 1;
        } else if (step > 0) {
            piece = step;
        }
        if (piece > len - pos)
            piece = len - pos;
        char *copy = malloc(piece);
        memcpy(copy, in + pos, piece);
        size_t off = 0;
        while (off < piece) {
            size_t used = SIZE_MAX;
            enum imap_parse_result r = imap_parser_feed(p, copy + off, piece - off, &used);
            assert(used <= piece - off);
            off += used;
            if (r == IMAP_PARSE_NEED_MORE) {
                assert(off == piece);
                assert(imap_parser_command(p) == NULL && imap_parser_error(p) == NULL);
                break;
            }
            if (r == IMAP_PARSE_LITERAL_CONTINUATION) {
                buf_append_char(t, '+');
                continue;
            }
            if (r == IMAP_PARSE_COMMAND) {
                const struct imap_command *c = imap_parser_command(p);
                assert(c != NULL && c->tag[0] != '\0' && c->name[0] != '\0');
                buf_printf(t, "C%s %s", c->tag, c->name);
                describe_args(t, c->args, c->arg_count, 0, lim);
                buf_append_char(t, '\n');
                if (check)
                    check_grammar(c);
                continue;
            }
            const struct imap_parse_error *e = imap_parser_error(p);
            assert(r == IMAP_PARSE_ERROR && e != NULL && e->message[0] != '\0');
            buf_printf(t, "E%d%d%s %s\n", (int)e->fatal, (int)e->code,
                       e->tag != NULL ? e->tag : "*", e->message);
            if (e->fatal) {
                size_t again = SIZE_MAX;
                assert(imap_parser_feed(p, "a\r\n", 3, &again) == IMAP_PARSE_ERROR && again == 0);
                fatal = true;
                break;
            }
        }
        free(copy);
        pos += piece;
    }
    if (!fatal) {
        buf_printf(t, "end %d", (int)imap_parser_in_command(p));
        (void)imap_parser_literal_remaining(p);
    }
    imap_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t seed = (uint32_t)data[0] * 2654435761u + 1;
    uint8_t sel = data[1];
    const char *in = (const char *)data + 2;
    size_t len = size - 2;

    struct imap_parser_limits lim;
    imap_parser_limits_default(&lim);
    static const size_t lines[4] = {64 * 1024, 16, 64, 1024};
    static const uint64_t literals[4] = {64ull * 1024 * 1024, 0, 10, 4096};
    lim.max_line = lines[sel & 3];
    lim.max_literal = literals[(sel >> 3) & 3];
    lim.non_sync_max = (sel & 4) != 0 ? IMAP_LITERAL_MINUS_MAX : lim.max_literal;
    lim.max_args = (sel >> 5) == 0 ? 4096 : (size_t)(sel >> 5) * 3;
    lim.max_depth = (sel >> 5) == 0 ? 32 : (size_t)(sel >> 5);

    struct buf whole = {0};
    run(in, len, &lim, NULL, 0, true, NULL, &whole);
    struct buf pieces = {0};
    uint32_t seed2 = seed;
    run(in, len, &lim, &seed, 0, false, NULL, &pieces);
    assert(whole.len == pieces.len && memcmp(whole.data, pieces.data, whole.len) == 0);

    struct fuzz_sink_state st = {0};
    struct imap_literal_sink sink = {
        .threshold = 2,
        .max_memory = UINT64_MAX,
        .open = sink_open,
        .write = sink_write,
        .close = sink_close,
        .ctx = &st,
    };
    struct buf spooled = {0};
    run(in, len, &lim, &seed2, 0, false, &sink, &spooled);
    assert(st.opened == st.closed);
    assert(whole.len == spooled.len && memcmp(whole.data, spooled.data, whole.len) == 0);
    buf_free(&spooled);
    /* What the sink declines is refused over a small memory limit. */
    sink.max_memory = 5;
    run(in, len, &lim, NULL, 0, false, &sink, &spooled);
    assert(st.opened == st.closed);
    buf_free(&spooled);
    /* Some literals refused before they are accepted: split-independent. */
    sink.max_memory = UINT64_MAX;
    sink.refuse = sink_refuse;
    struct buf refused_whole = {0};
    struct buf refused_pieces = {0};
    run(in, len, &lim, NULL, 0, false, &sink, &refused_whole);
    uint32_t seed3 = seed2 ^ 0x9e3779b9u;
    run(in, len, &lim, &seed3, 0, false, &sink, &refused_pieces);
    assert(st.opened == st.closed);
    assert(refused_whole.len == refused_pieces.len &&
           memcmp(refused_whole.data, refused_pieces.data, refused_whole.len) == 0);
    buf_free(&refused_whole);
    buf_free(&refused_pieces);

    if (len <= 4096) {
        struct buf bytes = {0};
        run(in, len, &lim, NULL, 1, false, NULL, &bytes);
        assert(whole.len == bytes.len && memcmp(whole.data, bytes.data, whole.len) == 0);
        buf_free(&bytes);
    }
    buf_free(&whole);
    buf_free(&pieces);
    return 0;
}
