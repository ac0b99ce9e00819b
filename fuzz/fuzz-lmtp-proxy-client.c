/* libFuzzer target: the LMTP front's backend dialogue (lmtp-proxy-client.h),
 * which reads whatever a backend sends, and the DATA encoder it sends the
 * message with. Input: split at LF into backend lines; each line's length
 * parity decides whether the proxy sends a RCPT or DATA when it may.
 * Invariants: what is sent is CRLF-terminated lines with no other CR or LF;
 * once PROTOCOL was answered every further line answers PROTOCOL and sends
 * nothing; the dialogue never asks for more results than it accepted; and
 * decoding the encoded input (lmtp-data.h) gives the input back. */
#include "protocols/lmtp/lmtp-data.h"
#include "protocols/lmtp/lmtp-proxy-client.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_lines(const struct buf *out, size_t from)
{
    for (size_t i = from; i < out->len; i++) {
        char c = out->data[i];
        if (c == '\r')
            assert(i + 1 < out->len && out->data[i + 1] == '\n');
        if (c == '\n')
            assert(i > 0 && out->data[i - 1] == '\r');
    }
    assert(out->len == from || (out->len >= 2 && out->data[out->len - 1] == '\n'));
}

static void roundtrip(const uint8_t *data, size_t size)
{
    struct lmtp_data_encoder e;
    lmtp_data_encoder_init(&e);
    struct buf wire = {0};
    size_t piece = size > 0 ? (size_t)data[0] % 17 + 1 : 1;
    for (size_t i = 0; i < size; i += piece)
        lmtp_data_encode(&e, (const char *)data + i, size - i < piece ? size - i : piece, &wire);
    lmtp_data_encode_end(&e, &wire);
    struct buf back = {0};
    struct lmtp_data d;
    lmtp_data_init(&d, &back, UINT64_MAX);
    size_t used = 0;
    assert(lmtp_data_feed(&d, wire.data, wire.len, &used));
    assert(used == wire.len);
    /* The message comes back, with a CRLF added when it had no line end. */
    bool ends = size == 0 || (size >= 2 && data[size - 2] == '\r' && data[size - 1] == '\n');
    if (ends) {
        assert(back.len == size);
        assert(size == 0 || memcmp(back.data, data, size) == 0);
    } else {
        assert(back.len >= size && memcmp(back.data, data, size) == 0);
    }
    buf_free(&wire);
    buf_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    roundtrip(data, size);
    struct lmtp_proxy_client_params p = {.helo = "proxy", .sender = "s@x", .smtputf8 = true};
    mail_forward_init(&p.client);
    strcpy(p.client.ip, "192.0.2.1");
    p.client.port = 25;
    strcpy(p.client.session, "S+1");
    p.client.ttl = 5;
    struct lmtp_proxy_client *c = lmtp_proxy_client_new(&p);
    struct buf out = {0};
    bool broken = false;
    size_t results = 0;
    const char *s = (const char *)data;
    size_t left = size;
    while (left > 0) {
        const char *nl = memchr(s, '\n', left);
        size_t len = nl != NULL ? (size_t)(nl - s) : left;
        size_t before = out.len;
        struct lmtp_proxy_client_result r;
        lmtp_proxy_client_line(c, s, len, &out, &r);
        assert(r.text != NULL);
        if (broken) {
            assert(r.event == LMTP_PROXY_CLIENT_PROTOCOL);
            assert(out.len == before);
        }
        if (r.event == LMTP_PROXY_CLIENT_PROTOCOL)
            broken = true;
        if (r.event == LMTP_PROXY_CLIENT_RESULT)
            assert(++results <= lmtp_proxy_client_accepted(c));
        if (r.event == LMTP_PROXY_CLIENT_READY || r.event == LMTP_PROXY_CLIENT_RCPT) {
            if (len % 2 == 0 || !lmtp_proxy_client_data(c, &out))
                assert(lmtp_proxy_client_rcpt(c, "a@x", &out));
        }
        if (r.event == LMTP_PROXY_CLIENT_DATA_GO)
            lmtp_proxy_client_data_sent(c);
        check_lines(&out, before);
        if (nl == NULL)
            break;
        s = nl + 1;
        left -= len + 1;
    }
    buf_free(&out);
    lmtp_proxy_client_free(c);
    return 0;
}
