/* libFuzzer target: the SORT/THREAD grammar and algorithms
 * (protocols/imap/imap-sort.h, imap-thread.h).
 * Input layout: text up to the first "\n\n" is IMAP command lines ("t SORT
 * (REVERSE DATE) UTF-8 ALL", "t THREAD REFERENCES UTF-8 ..."); every
 * command's arguments go through the sort-criteria parser (each argument
 * tried as the criteria list) and SEARCH's parser from each position, as
 * SORT and THREAD use them. The rest is messages, one per line, fields
 * separated by '|': subject|Message-ID|References|In-Reply-To|From, the
 * first byte of the line giving the sent date. Checked invariants:
 *   - a parsed sort program has 1..IMAP_SORT_MAX_KEYS keys;
 *   - a base subject is no longer than its subject and has no white space
 *     at either end;
 *   - both threading algorithms print every message number exactly once,
 *     with balanced parentheses and no empty "()";
 *   - sorted facts (SUBJECT, REVERSE or not, then DATE) are strictly
 *     increasing under imap_sort_compare, and a binary search of each among
 *     the others finds its own place (how a CONTEXT=SORT context inserts a
 *     new member, imap-context.c);
 *   - imap_append_ordered_set's text expands back to the same numbers in
 *     the same order. */
#include "core/buf.h"
#include "core/error.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-search.h"
#include "protocols/imap/imap-sort.h"
#include "protocols/imap/imap-thread.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSGS 200

static void check_commands(const char *in, size_t len)
{
    struct imap_parser *p = imap_parser_new(NULL);
    size_t off = 0;
    while (off < len) {
        size_t used = 0;
        enum imap_parse_result r = imap_parser_parse_all(p, in + off, len - off, &used);
        if (used == 0)
            break;
        off += used;
        if (r != IMAP_PARSE_COMMAND)
            continue;
        const struct imap_command *cmd = imap_parser_command(p);
        for (size_t i = 0; i < cmd->arg_count; i++) {
            struct imap_sort_program sort;
            struct petrel_error err;
            if (imap_sort_parse(&cmd->args[i], &sort, &err))
                assert(sort.count >= 1 && sort.count <= IMAP_SORT_MAX_KEYS);
            struct imap_search_program prog;
            if (imap_search_parse(cmd->args + i, cmd->arg_count - i, 7, 100, &prog, &err))
                imap_search_program_free(&prog);
        }
    }
    imap_parser_free(p);
}

/* Every number 1..count once, parentheses balanced, no "()". */
static void check_threads(const struct buf *out, size_t count)
{
    unsigned char *seen = calloc(count + 1, 1);
    int depth = 0;
    const char *s = out->data != NULL ? out->data : "";
    for (size_t i = 0; i < out->len;) {
        char c = s[i];
        if (c == '(') {
            assert(i + 1 < out->len && s[i + 1] != ')');
            depth++;
            i++;
        } else if (c == ')') {
            assert(--depth >= 0);
            i++;
        } else if (c == ' ') {
            i++;
        } else {
            assert(c >= '1' && c <= '9');
            size_t n = 0;
            while (i < out->len && s[i] >= '0' && s[i] <= '9')
                n = n * 10 + (size_t)(s[i++] - '0');
            assert(n >= 1 && n <= count && !seen[n]);
            seen[n] = 1;
        }
    }
    assert(depth == 0);
    for (size_t n = 1; n <= count; n++)
        assert(seen[n]);
    free(seen);
}

static char *field(const char **p, const char *end)
{
    const char *start = *p;
    while (*p < end && **p != '|')
        (*p)++;
    size_t n = (size_t)(*p - start);
    char *s = malloc(n + 1);
    memcpy(s, start, n);
    s[n] = '\0';
    if (*p < end)
        (*p)++;
    return s;
}

static char *dup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

static void check_sort_order(const struct imap_thread_msg *msgs, size_t count)
{
    struct imap_sort_program prog = {
        .keys = {{IMAP_SORT_SUBJECT, count % 2 == 1}, {IMAP_SORT_DATE, false}}, .count = 2};
    struct imap_sort_facts *f = calloc(count + 1, sizeof(*f));
    for (size_t i = 0; i < count; i++) {
        f[i].seq = f[i].number = (uint32_t)i + 1;
        f[i].date = msgs[i].date;
        f[i].subject = dup(msgs[i].subject);
        f[i].from = dup("");
        f[i].to = dup("");
        f[i].cc = dup("");
        f[i].display_from = dup("");
        f[i].display_to = dup("");
    }
    imap_sort_facts(&prog, f, count);
    for (size_t i = 1; i < count; i++)
        assert(imap_sort_compare(&prog, &f[i - 1], &f[i]) < 0);
    for (size_t i = 0; i < count; i++) {
        size_t lo = 0, hi = count - 1; /* the others: j < i as is, j >= i is j + 1 */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (imap_sort_compare(&prog, &f[mid < i ? mid : mid + 1], &f[i]) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        assert(lo == i);
    }
    uint32_t *nums = calloc(count + 1, sizeof(*nums));
    for (size_t i = 0; i < count; i++)
        nums[i] = f[i].number;
    struct buf out = {0};
    imap_append_ordered_set(&out, nums, count);
    size_t k = 0;
    const char *q = out.data != NULL ? out.data : "";
    while (*q != '\0') {
        char *e;
        unsigned long a = strtoul(q, &e, 10), b = a;
        if (*e == ':')
            b = strtoul(e + 1, &e, 10);
        assert(a <= b);
        for (unsigned long v = a; v <= b; v++)
            assert(k < count && nums[k++] == v);
        q = *e == ',' ? e + 1 : e;
    }
    assert(k == count);
    buf_free(&out);
    free(nums);
    for (size_t i = 0; i < count; i++)
        imap_sort_facts_free(&f[i]);
    free(f);
}

static void check_messages(const char *in, size_t len)
{
    struct imap_thread_msg msgs[MAX_MSGS];
    char *strings[MAX_MSGS][5];
    size_t count = 0;
    const char *p = in, *end = in + len;
    while (p < end && count < MAX_MSGS) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        int64_t date = p < eol ? (unsigned char)*p++ % 8 : 0;
        for (size_t f = 0; f < 5; f++)
            strings[count][f] = field(&p, eol);
        msgs[count] = (struct imap_thread_msg){
            .number = (uint32_t)count + 1,
            .date = date,
            .subject = strings[count][0],
            .message_id = strings[count][1][0] != '\0' ? strings[count][1] : NULL,
            .references = strings[count][2][0] != '\0' ? strings[count][2] : NULL,
            .in_reply_to = strings[count][3][0] != '\0' ? strings[count][3] : NULL,
        };
        const char *subj = strings[count][0];
        struct buf base = {0};
        imap_base_subject(subj, strlen(subj), &base);
        assert(base.len <= strlen(subj));
        if (base.len > 0)
            assert(base.data[0] != ' ' && base.data[base.len - 1] != ' ' && base.data[0] != '\t' &&
                   base.data[base.len - 1] != '\t');
        buf_free(&base);
        struct buf mbox = {0}, display = {0};
        imap_sort_first_address(strings[count][4], strlen(strings[count][4]), &mbox, &display);
        buf_free(&mbox);
        buf_free(&display);
        count++;
        p = eol < end ? eol + 1 : end;
    }
    check_sort_order(msgs, count);
    struct buf out = {0};
    imap_thread_references(msgs, count, &out);
    check_threads(&out, count);
    buf_reset(&out);
    imap_thread_orderedsubject(msgs, count, &out);
    check_threads(&out, count);
    buf_free(&out);
    for (size_t i = 0; i < count; i++) {
        for (size_t f = 0; f < 5; f++)
            free(strings[i][f]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    size_t split = size;
    for (size_t i = 0; i + 1 < size; i++) {
        if (in[i] == '\n' && in[i + 1] == '\n') {
            split = i;
            break;
        }
    }
    check_commands(in, split);
    if (split + 2 <= size)
        check_messages(in + split + 2, size - split - 2);
    return 0;
}
