/* libFuzzer target: the LMTP command parser (protocols/lmtp/lmtp-parser.h),
 * the recipient splitting on top of it (lmtp-recipient.h) and the DATA
 * stream decoder (lmtp-data.h), driven as a server drives them.
 * Input layout:
 *   byte 0     seed for the split points of the DATA stream
 *   byte 1     bits 0-1 pick the message size limit, bits 2-3 the
 *              recipient delimiter set, bits 4-5 the username format
 *   byte 2..   what a client sent: command lines ending in LF (a CR before
 *              it is dropped, as the server does); after a DATA command
 *              the bytes up to the end marker are message data.
 * Checks:
 *   - every slice a parsed command returns lies inside its line, within
 *     the documented limits; parameters are well-formed;
 *   - a path written out with lmtp_path_format() parses back to the same
 *     local part and domain (and needs no quoting exactly when it is a
 *     dot-string);
 *   - the DATA decoder gives the same message, end position, size and
 *     too_big verdict fed at once, byte by byte and in random pieces (each
 *     in an exact-size allocation), and the same as a plain reference
 *     implementation of RFC 5321 4.5.2 over the whole input;
 *   - the same decoded through the DATA spool (lmtp-spool.h, with a tiny
 *     threshold so it goes to an unnamed file in /tmp): the file plus what
 *     is left in memory is the same message, and memory never holds more
 *     than the threshold (before a file) or one write's worth (after). */
#include "core/buf.h"
#include "protocols/lmtp/lmtp-data.h"
#include "protocols/lmtp/lmtp-parser.h"
#include "protocols/lmtp/lmtp-recipient.h"
#include "protocols/lmtp/lmtp-spool.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void check_slice(const struct lmtp_slice *sl, const char *line, size_t len)
{
    assert(sl->ptr >= line && sl->ptr <= line + len);
    assert(sl->len <= (size_t)(line + len - sl->ptr));
}

static void check_roundtrip(const struct lmtp_path *path, bool is_mail)
{
    struct buf text = {0};
    buf_append_str(&text, is_mail ? "MAIL FROM:<" : "RCPT TO:<");
    lmtp_path_format(path, &text);
    buf_append_char(&text, '>');
    struct lmtp_command again;
    struct lmtp_reply_error e;
    char *copy = malloc(text.len + 1);
    memcpy(copy, text.data, text.len + 1);
    bool ok = lmtp_parse_command(copy, text.len, &again, &e);
    assert(ok);
    (void)ok;
    assert(again.path.null == path->null);
    assert(again.path.local.len == path->local.len);
    assert(memcmp(again.path.local.ptr, path->local.ptr, path->local.len) == 0);
    assert(again.path.domain.len == path->domain.len);
    assert(memcmp(again.path.domain.ptr, path->domain.ptr, path->domain.len) == 0);
    assert(again.path.quoted == !lmtp_is_dot_string(path->local.ptr, path->local.len) ||
           path->null);
    free(copy);
    buf_free(&text);
}

static void check_command(char *line, size_t len, uint8_t sel)
{
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    if (!lmtp_parse_command(line, len, &cmd, &e)) {
        assert(e.code >= 500 && e.code < 600 && e.enhanced != NULL && e.text != NULL);
        assert(e.enhanced[0] == '5' && e.text[0] != '\0');
        return;
    }
    assert(cmd.verb != LMTP_VERB_UNKNOWN);
    check_slice(&cmd.verb_text, line, len);
    check_slice(&cmd.arg, line, len);
    if (cmd.verb != LMTP_VERB_MAIL && cmd.verb != LMTP_VERB_RCPT)
        return;
    check_slice(&cmd.path.local, line, len);
    check_slice(&cmd.path.domain, line, len);
    assert(cmd.path.local.len <= LMTP_MAX_LOCAL_PART);
    assert(cmd.path.domain.len <= LMTP_MAX_DOMAIN);
    assert(cmd.param_count <= LMTP_MAX_PARAMS);
    assert(!cmd.path.null || cmd.verb == LMTP_VERB_MAIL);
    assert(cmd.verb == LMTP_VERB_RCPT || cmd.path.null || cmd.path.domain.len > 0);
    for (size_t i = 0; i < cmd.param_count; i++) {
        const struct lmtp_param *p = &cmd.params[i];
        check_slice(&p->keyword, line, len);
        check_slice(&p->value, line, len);
        assert(p->keyword.len > 0 && p->keyword.len <= LMTP_MAX_PARAM_KEYWORD);
        assert(!p->has_value || p->value.len > 0);
        assert(memchr(p->value.ptr, ' ', p->value.len) == NULL);
    }
    struct lmtp_mail_params mp;
    if (lmtp_mail_params_parse(&cmd, &mp, &e))
        assert(mp.body == LMTP_BODY_7BIT || mp.body == LMTP_BODY_8BITMIME);
    check_roundtrip(&cmd.path, cmd.verb == LMTP_VERB_MAIL);
    if (cmd.verb == LMTP_VERB_RCPT) {
        static const char *const delims[] = {"+", "+-", "", "-_."};
        static const char *const formats[] = {"%u", "%n", "%n@%d", "x%%%u"};
        struct lmtp_recipient_name name;
        lmtp_recipient_name_make(&cmd.path, delims[(sel >> 2) & 3], formats[(sel >> 4) & 3], &name);
        struct buf text = {0};
        lmtp_path_format(&cmd.path, &text);
        assert(strcmp(text.data, name.address) == 0);
        assert(name.detail == NULL || name.detail[0] != '\0');
        buf_free(&text);
        lmtp_recipient_name_free(&name);
    }
}

struct data_result {
    struct buf out;
    size_t end; /* bytes consumed through the end marker, or SIZE_MAX */
    uint64_t size;
    bool too_big;
};

/* Feeds `in` in pieces (rng NULL: `step` bytes at a time, 0 = at once). */
static void run_data(const char *in, size_t len, uint64_t max, uint32_t *rng, size_t step,
                     struct data_result *r)
{
    memset(r, 0, sizeof(*r));
    r->end = SIZE_MAX;
    struct lmtp_data d;
    lmtp_data_init(&d, &r->out, max);
    size_t pos = 0;
    while (pos < len) {
        size_t piece = len - pos;
        if (rng != NULL) {
            uint32_t x = rng_next(rng);
            piece = (x & 3) == 0 ? 1 : (x >> 2) % 700 + 1;
        } else if (step > 0) {
            piece = step;
        }
        if (piece > len - pos)
            piece = len - pos;
        char *copy = malloc(piece);
        memcpy(copy, in + pos, piece);
        size_t used = SIZE_MAX;
        bool done = lmtp_data_feed(&d, copy, piece, &used);
        free(copy);
        assert(used <= piece);
        pos += used;
        if (done) {
            r->end = pos;
            break;
        }
        assert(used == piece);
    }
    r->size = d.size;
    r->too_big = d.too_big;
    assert(d.too_big == (d.size > max));
    assert(d.too_big || r->out.len == d.size);
}

/* As run_data (random pieces), through a spool with a threshold of
 * `threshold` bytes: the message read back from the file and memory. */
static void run_spooled(const char *in, size_t len, uint64_t max, uint32_t seed, size_t threshold,
                        struct data_result *r)
{
    memset(r, 0, sizeof(*r));
    r->end = SIZE_MAX;
    struct lmtp_spool sp;
    lmtp_spool_init(&sp);
    sp.threshold = threshold;
    sp.write_min = threshold / 2 + 1;
    struct lmtp_data d;
    lmtp_data_init(&d, &sp.mem, max);
    size_t pos = 0;
    bool done = false;
    while (pos < len && !done) {
        uint32_t x = rng_next(&seed);
        size_t piece = (x & 3) == 0 ? 1 : (x >> 2) % 700 + 1;
        if (piece > len - pos)
            piece = len - pos;
        size_t used = SIZE_MAX;
        done = lmtp_data_feed(&d, in + pos, piece, &used);
        assert(used <= piece);
        pos += used;
        lmtp_spool_settle(&sp, "/tmp", done);
        assert(sp.failed || (sp.fd < 0 ? sp.mem.len <= threshold : sp.mem.len < sp.write_min));
        if (done)
            r->end = pos;
    }
    lmtp_spool_settle(&sp, "/tmp", true);
    assert(!sp.failed);
    assert(sp.fd < 0 || sp.mem.len == 0);
    if (sp.fd >= 0) {
        buf_reserve(&r->out, (size_t)sp.filed);
        ssize_t n = pread(sp.fd, r->out.data, (size_t)sp.filed, 0);
        assert(n >= 0 && (uint64_t)n == sp.filed);
        r->out.len = (size_t)n;
    } else {
        buf_append(&r->out, sp.mem.data, sp.mem.len);
    }
    r->size = d.size;
    r->too_big = d.too_big;
    lmtp_spool_free(&sp);
}

/* RFC 5321 4.5.2 on the whole input: lines end at CRLF; "." alone ends the
 * data; a leading dot is dropped. A last line without CRLF is what the
 * streaming decoder has emitted so far ("." and ".\r" not yet). */
static void reference(const char *in, size_t len, struct buf *out, size_t *end)
{
    size_t pos = 0;
    *end = SIZE_MAX;
    while (pos < len) {
        const char *crlf = NULL;
        for (size_t i = pos; i + 1 < len; i++) {
            if (in[i] == '\r' && in[i + 1] == '\n') {
                crlf = in + i;
                break;
            }
        }
        size_t line_len = crlf != NULL ? (size_t)(crlf - (in + pos)) : len - pos;
        const char *line = in + pos;
        if (crlf == NULL) {
            bool held = (line_len == 1 && line[0] == '.') ||
                        (line_len == 2 && line[0] == '.' && line[1] == '\r');
            if (!held)
                buf_append(out, line + (line[0] == '.'), line_len - (line[0] == '.'));
            return;
        }
        if (line_len == 1 && line[0] == '.') {
            *end = pos + 3;
            return;
        }
        size_t skip = line_len > 0 && line[0] == '.' ? 1 : 0;
        buf_append(out, line + skip, line_len - skip);
        buf_append(out, "\r\n", 2);
        pos += line_len + 2;
    }
}

static void check_data(const char *in, size_t len, uint64_t max, uint32_t seed, size_t *consumed)
{
    struct data_result whole, bytes, pieces;
    run_data(in, len, max, NULL, 0, &whole);
    run_data(in, len, max, NULL, 1, &bytes);
    run_data(in, len, max, &seed, 0, &pieces);
    const struct data_result *others[2] = {&bytes, &pieces};
    for (int i = 0; i < 2; i++) {
        assert(others[i]->end == whole.end && others[i]->size == whole.size);
        assert(others[i]->too_big == whole.too_big);
        if (whole.too_big)
            continue; /* what was kept of a refused message is unspecified */
        assert(others[i]->out.len == whole.out.len);
        assert(whole.out.len == 0 ||
               memcmp(others[i]->out.data, whole.out.data, whole.out.len) == 0);
    }
    struct data_result spooled;
    run_spooled(in, len, max, seed, 1 + seed % 64, &spooled);
    assert(spooled.end == whole.end && spooled.size == whole.size);
    assert(spooled.too_big == whole.too_big);
    if (!whole.too_big)
        assert(
            spooled.out.len == whole.out.len &&
            (whole.out.len == 0 || memcmp(spooled.out.data, whole.out.data, whole.out.len) == 0));
    buf_free(&spooled.out);
    struct buf ref = {0};
    size_t ref_end = SIZE_MAX;
    reference(in, len, &ref, &ref_end);
    assert(ref_end == whole.end);
    assert(ref.len == whole.size);
    if (!whole.too_big && ref.len > 0)
        assert(memcmp(ref.data, whole.out.data, ref.len) == 0);
    *consumed = whole.end == SIZE_MAX ? len : whole.end;
    buf_free(&ref);
    buf_free(&whole.out);
    buf_free(&bytes.out);
    buf_free(&pieces.out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t seed = (uint32_t)data[0] * 2654435761u + 1;
    uint8_t sel = data[1];
    static const uint64_t maxes[4] = {64u << 20, 0, 10, 300};
    uint64_t max = maxes[sel & 3];
    const char *in = (const char *)data + 2;
    size_t len = size - 2;
    size_t pos = 0;
    while (pos < len) {
        const char *lf = memchr(in + pos, '\n', len - pos);
        size_t line_len = lf != NULL ? (size_t)(lf - (in + pos)) : len - pos;
        size_t next = pos + line_len + (lf != NULL ? 1 : 0);
        /* The parser gets the line in its own exact-size allocation. */
        size_t l = line_len;
        if (l > 0 && in[pos + l - 1] == '\r')
            l--;
        char *line = malloc(l + 1);
        memcpy(line, in + pos, l);
        line[l] = '\0';
        char *probe = malloc(l + 1);
        memcpy(probe, line, l + 1);
        check_command(line, l, sel);
        struct lmtp_command cmd;
        struct lmtp_reply_error e;
        bool is_data = lmtp_parse_command(probe, l, &cmd, &e) && cmd.verb == LMTP_VERB_DATA;
        free(probe);
        free(line);
        pos = next;
        if (is_data && pos < len) {
            size_t used = 0;
            check_data(in + pos, len - pos, max, seed, &used);
            pos += used;
        }
    }
    return 0;
}
