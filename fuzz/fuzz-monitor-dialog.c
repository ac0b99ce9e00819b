/* libFuzzer target: the health monitor's probe conversations
 * (services/monitor/monitor-dialog.h) against whatever a backend answers.
 * Input: byte 0 picks the protocol (IMAP, POP3, LMTP) and whether the probe
 * has credentials and how it ends (closed or timed out); the rest is the
 * server's byte stream, cut into lines the way monitor-probe.c reads it (at
 * LF, a CR before it dropped). Checks:
 *   - every line the monitor sends is CRLF-terminated with no other CR or
 *     LF, and is one of the commands of the script (the LOGIN line quotes
 *     both credentials exactly);
 *   - once FINISH is returned no more lines are fed; a verdict exists then,
 *     and after the closing event in every case; a decided verdict never
 *     changes;
 *   - the detail is printable text. */
#include "core/buf.h"
#include "services/monitor/monitor-dialog.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define USER "pro\"be\\u"
#define PASSWORD "p\"w \\d"
#define LOGIN_LINE "m1 LOGIN \"pro\\\"be\\\\u\" \"p\\\"w \\\\d\"\r\n"

static bool allowed_line(enum monitor_protocol proto, const char *s, size_t len)
{
    static const char *const imap[] = {LOGIN_LINE, "m2 LOGOUT\r\n", NULL};
    static const char *const pop3[] = {"USER " USER "\r\n", "PASS " PASSWORD "\r\n", "QUIT\r\n",
                                       NULL};
    static const char *const lmtp[] = {"LHLO petrel-monitor\r\n", "QUIT\r\n", NULL};
    const char *const *set = proto == MONITOR_PROTO_IMAP   ? imap
                             : proto == MONITOR_PROTO_POP3 ? pop3
                                                           : lmtp;
    for (size_t i = 0; set[i] != NULL; i++) {
        if (strlen(set[i]) == len && memcmp(set[i], s, len) == 0)
            return true;
    }
    return false;
}

static void check_output(enum monitor_protocol proto, const struct buf *out)
{
    size_t start = 0;
    for (size_t i = 0; i < out->len; i++) {
        if (out->data[i] != '\n')
            continue;
        assert(i > start && out->data[i - 1] == '\r');
        for (size_t k = start; k + 1 < i; k++)
            assert(out->data[k] != '\r' && out->data[k] != '\n');
        assert(allowed_line(proto, out->data + start, i + 1 - start));
        start = i + 1;
    }
    assert(start == out->len); /* nothing half-written */
}

static void check_detail(const struct monitor_dialog *d)
{
    size_t n = strnlen(d->detail, sizeof(d->detail));
    assert(n < sizeof(d->detail));
    for (size_t i = 0; i < n; i++)
        assert((unsigned char)d->detail[i] >= 0x20 && (unsigned char)d->detail[i] < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    enum monitor_protocol proto = (enum monitor_protocol)(data[0] % MONITOR_PROTO_COUNT);
    bool creds = (data[0] & 0x10) != 0;
    bool timeout = (data[0] & 0x20) != 0;
    struct monitor_dialog d;
    monitor_dialog_init(&d, proto, creds ? USER : NULL, creds ? PASSWORD : NULL);
    struct buf out = {0};
    const char *p = (const char *)data + 1;
    const char *end = (const char *)data + size;
    bool finished = false;
    bool was_decided = false;
    enum monitor_result first = MONITOR_RESULT_OK;
    while (p < end && !finished) {
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        if (lf == NULL)
            break; /* an unfinished line is never handed over */
        size_t len = (size_t)(lf - p);
        if (len > 0 && p[len - 1] == '\r')
            len--;
        buf_reset(&out);
        enum monitor_dialog_action a = monitor_dialog_line(&d, p, len, &out);
        check_output(proto, &out);
        check_detail(&d);
        if (was_decided)
            assert(d.decided && d.verdict == first);
        if (d.decided && !was_decided) {
            was_decided = true;
            first = d.verdict;
        }
        if (a == MONITOR_DIALOG_FINISH) {
            assert(d.decided);
            assert(out.len == 0);
            finished = true;
        }
        p = lf + 1;
    }
    if (!finished) {
        enum monitor_result r = timeout ? monitor_dialog_timed_out(&d) : monitor_dialog_closed(&d);
        assert(d.decided && r == d.verdict);
        if (was_decided)
            assert(r == first);
        else
            assert(r == (timeout ? MONITOR_RESULT_TIMEOUT : MONITOR_RESULT_CLOSED));
    }
    assert((unsigned)d.verdict < MONITOR_RESULT_COUNT);
    check_detail(&d);
    buf_free(&out);
    return 0;
}
