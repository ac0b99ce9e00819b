/* Unit tests for the LMTP front's backend dialogue (lmtp-proxy-client.h)
 * and the DATA encoder it sends the message with (lmtp-data.h): what goes
 * to the backend, how each reply is read, and that encoding is the exact
 * inverse of the server's DATA decoding. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "protocols/lmtp/lmtp-data.h"
#include "protocols/lmtp/lmtp-proxy-client.h"

#include <stdlib.h>
#include <string.h>

static struct lmtp_proxy_client *client(bool with_address)
{
    struct lmtp_proxy_client_params p = {
        .helo = "proxy.example",
        .sender = "s@example.net",
        .body_8bit = true,
    };
    mail_forward_init(&p.client);
    if (with_address) {
        strcpy(p.client.ip, "2001:db8::7");
        p.client.port = 4711;
        strcpy(p.client.session, "a+b=c");
        p.client.ttl = 5;
    }
    return lmtp_proxy_client_new(&p);
}

static enum lmtp_proxy_client_event feed(struct lmtp_proxy_client *c, const char *line,
                                         struct buf *out, struct lmtp_proxy_client_result *r)
{
    struct lmtp_proxy_client_result local;
    if (r == NULL)
        r = &local;
    lmtp_proxy_client_line(c, line, strlen(line), out, r);
    return r->event;
}

static void test_full_transaction_with_xclient(void **state)
{
    (void)state;
    struct lmtp_proxy_client *c = client(true);
    struct buf out = {0};
    struct lmtp_proxy_client_result r;
    assert_int_equal(feed(c, "220 b1 Petrel LMTP ready\r", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    assert_string_equal(buf_cstr(&out), "LHLO proxy.example\r\n");
    buf_reset(&out);
    assert_int_equal(feed(c, "250-b1", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    assert_int_equal(feed(c, "250-XCLIENT ADDR PORT SESSION TTL", &out, NULL),
                     LMTP_PROXY_CLIENT_CONTINUE);
    assert_int_equal(out.len, 0);
    assert_int_equal(feed(c, "250 PIPELINING", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    /* xtext: "+" and "=" encoded; IPv6 with Postfix's prefix. */
    assert_string_equal(buf_cstr(&out),
                        "XCLIENT ADDR=IPV6:2001:db8::7 PORT=4711 SESSION=a+2Bb+3Dc TTL=5\r\n");
    buf_reset(&out);
    assert_int_equal(feed(c, "220 b1 Petrel LMTP ready", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    assert_string_equal(buf_cstr(&out), "LHLO proxy.example\r\n");
    buf_reset(&out);
    assert_int_equal(feed(c, "250 b1", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    assert_string_equal(buf_cstr(&out), "MAIL FROM:<s@example.net> BODY=8BITMIME\r\n");
    buf_reset(&out);
    assert_int_equal(feed(c, "250 2.1.0 Sender OK", &out, NULL), LMTP_PROXY_CLIENT_READY);
    assert_false(lmtp_proxy_client_data(c, &out)); /* no recipient yet */
    assert_true(lmtp_proxy_client_rcpt(c, "a@example.com", &out));
    assert_false(lmtp_proxy_client_rcpt(c, "b@example.com", &out)); /* one in flight */
    assert_string_equal(buf_cstr(&out), "RCPT TO:<a@example.com>\r\n");
    buf_reset(&out);
    assert_int_equal(feed(c, "250 2.1.5 <a@example.com> Recipient OK", &out, &r),
                     LMTP_PROXY_CLIENT_RCPT);
    assert_int_equal(r.code, 250);
    assert_string_equal(r.text, "2.1.5 <a@example.com> Recipient OK");
    assert_true(lmtp_proxy_client_rcpt(c, "x@example.com", &out));
    assert_int_equal(feed(c, "550 5.1.1 <x@example.com> User doesn't exist here", &out, &r),
                     LMTP_PROXY_CLIENT_RCPT);
    assert_int_equal(r.code, 550);
    assert_true(lmtp_proxy_client_rcpt(c, "b@example.com", &out));
    assert_int_equal(feed(c, "250 2.1.5 ok", &out, NULL), LMTP_PROXY_CLIENT_RCPT);
    assert_int_equal(lmtp_proxy_client_accepted(c), 2);
    buf_reset(&out);
    assert_true(lmtp_proxy_client_data(c, &out));
    assert_string_equal(buf_cstr(&out), "DATA\r\n");
    assert_int_equal(feed(c, "354 go ahead", &out, NULL), LMTP_PROXY_CLIENT_DATA_GO);
    /* A reply while the message goes out is a protocol error... */
    lmtp_proxy_client_data_sent(c);
    assert_int_equal(feed(c, "250 2.0.0 <a@example.com> Saved", &out, &r),
                     LMTP_PROXY_CLIENT_RESULT);
    assert_false(r.done);
    assert_int_equal(feed(c, "452 4.2.2 <b@example.com> Over quota", &out, &r),
                     LMTP_PROXY_CLIENT_RESULT);
    assert_true(r.done);
    assert_int_equal(r.code, 452);
    /* Nothing more is due. */
    assert_int_equal(feed(c, "250 extra", &out, NULL), LMTP_PROXY_CLIENT_PROTOCOL);
    buf_free(&out);
    lmtp_proxy_client_free(c);
}

static void test_no_xclient_without_an_offer_or_an_address(void **state)
{
    (void)state;
    struct buf out = {0};
    struct lmtp_proxy_client *c = client(true);
    feed(c, "220 ready", &out, NULL);
    buf_reset(&out);
    feed(c, "250 b1", &out, NULL); /* no XCLIENT offered */
    assert_string_equal(buf_cstr(&out), "MAIL FROM:<s@example.net> BODY=8BITMIME\r\n");
    lmtp_proxy_client_free(c);
    buf_reset(&out);
    c = client(false);
    feed(c, "220 ready", &out, NULL);
    buf_reset(&out);
    feed(c, "250-b1", &out, NULL);
    feed(c, "250 XCLIENT ADDR", &out, NULL); /* offered, nothing to say */
    assert_string_equal(buf_cstr(&out), "MAIL FROM:<s@example.net> BODY=8BITMIME\r\n");
    lmtp_proxy_client_free(c);
    buf_free(&out);
}

static void test_starttls_first(void **state)
{
    (void)state;
    struct buf out = {0};
    struct lmtp_proxy_client_result r;
    struct lmtp_proxy_client_params p = {.helo = "proxy.example", .sender = "", .starttls = true};
    mail_forward_init(&p.client);
    strcpy(p.client.ip, "192.0.2.1");
    struct lmtp_proxy_client *c = lmtp_proxy_client_new(&p);
    feed(c, "220 ready", &out, NULL);
    buf_reset(&out);
    feed(c, "250-b1", &out, NULL);
    feed(c, "250-XCLIENT ADDR", &out, NULL);
    assert_int_equal(feed(c, "250 STARTTLS", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    assert_string_equal(buf_cstr(&out), "STARTTLS\r\n"); /* before XCLIENT */
    buf_reset(&out);
    assert_int_equal(feed(c, "220 2.0.0 go", &out, NULL), LMTP_PROXY_CLIENT_STARTTLS);
    assert_int_equal(out.len, 0);
    /* Nothing may come until TLS is up. */
    lmtp_proxy_client_tls_started(c, &out);
    assert_string_equal(buf_cstr(&out), "LHLO proxy.example\r\n");
    buf_reset(&out);
    feed(c, "250-b1", &out, NULL);
    feed(c, "250 XCLIENT ADDR", &out, NULL);
    assert_string_equal(buf_cstr(&out), "XCLIENT ADDR=192.0.2.1\r\n");
    buf_reset(&out);
    feed(c, "220 again", &out, NULL);
    feed(c, "250 b1", &out, NULL);
    assert_string_equal(buf_cstr(&out), "LHLO proxy.example\r\nMAIL FROM:<>\r\n");
    assert_int_equal(feed(c, "250 ok", &out, NULL), LMTP_PROXY_CLIENT_READY);
    lmtp_proxy_client_free(c);
    /* A backend without STARTTLS: nothing goes in clear text. */
    c = lmtp_proxy_client_new(&p);
    feed(c, "220 ready", &out, NULL);
    buf_reset(&out);
    assert_int_equal(feed(c, "250 b1", &out, &r), LMTP_PROXY_CLIENT_SETUP_FAILED);
    assert_int_equal(out.len, 0);
    lmtp_proxy_client_free(c);
    buf_free(&out);
}

static void test_setup_failures(void **state)
{
    (void)state;
    struct buf out = {0};
    struct lmtp_proxy_client_result r;
    struct lmtp_proxy_client *c = client(false);
    assert_int_equal(feed(c, "421 4.3.2 busy", &out, &r), LMTP_PROXY_CLIENT_SETUP_FAILED);
    assert_int_equal(r.code, 421);
    assert_false(r.mail_stage);
    lmtp_proxy_client_free(c);

    c = client(true);
    feed(c, "220 ready", &out, NULL);
    feed(c, "250 XCLIENT ADDR PORT", &out, NULL);
    assert_int_equal(feed(c, "550 5.7.0 not trusted", &out, &r), LMTP_PROXY_CLIENT_SETUP_FAILED);
    lmtp_proxy_client_free(c);

    c = client(false);
    feed(c, "220 ready", &out, NULL);
    feed(c, "250 b1", &out, NULL);
    assert_int_equal(feed(c, "552 5.3.4 too big", &out, &r), LMTP_PROXY_CLIENT_SETUP_FAILED);
    assert_true(r.mail_stage);
    assert_int_equal(r.code, 552);
    assert_string_equal(r.text, "5.3.4 too big");
    lmtp_proxy_client_free(c);

    c = client(false);
    feed(c, "220 ready", &out, NULL);
    feed(c, "250 b1", &out, NULL);
    feed(c, "250 ok", &out, NULL);
    lmtp_proxy_client_rcpt(c, "a@x", &out);
    feed(c, "250 ok", &out, NULL);
    lmtp_proxy_client_data(c, &out);
    assert_int_equal(feed(c, "554 5.5.1 no", &out, &r), LMTP_PROXY_CLIENT_DATA_REFUSED);
    lmtp_proxy_client_free(c);
    buf_free(&out);
}

static void test_broken_replies(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "22",                          /* too short */
        "220x ready",                  /* no separator */
        "620 ready",                   /* no such class */
        "2a0 ready",  "220 rea\x01dy", /* a control byte */
    };
    struct buf out = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct lmtp_proxy_client *c = client(false);
        assert_int_equal(feed(c, bad[i], &out, NULL), LMTP_PROXY_CLIENT_PROTOCOL);
        lmtp_proxy_client_free(c);
    }
    /* A NUL inside a line. */
    struct lmtp_proxy_client *c = client(false);
    struct lmtp_proxy_client_result r;
    lmtp_proxy_client_line(c, "220 a\0b", 7, &out, &r);
    assert_int_equal(r.event, LMTP_PROXY_CLIENT_PROTOCOL);
    lmtp_proxy_client_free(c);
    /* The code changes inside a multi-line reply. */
    c = client(false);
    feed(c, "220 ready", &out, NULL);
    feed(c, "250-b1", &out, NULL);
    assert_int_equal(feed(c, "251 b1", &out, NULL), LMTP_PROXY_CLIENT_PROTOCOL);
    lmtp_proxy_client_free(c);
    /* Endless continuation lines. */
    c = client(false);
    feed(c, "220 ready", &out, NULL);
    enum lmtp_proxy_client_event e = LMTP_PROXY_CLIENT_CONTINUE;
    for (int i = 0; i < 100 && e == LMTP_PROXY_CLIENT_CONTINUE; i++)
        e = feed(c, "250-more", &out, NULL);
    assert_int_equal(e, LMTP_PROXY_CLIENT_PROTOCOL);
    lmtp_proxy_client_free(c);
    /* A line over the limit. */
    c = client(false);
    char *longline = malloc(LMTP_PROXY_CLIENT_LINE_MAX + 10);
    memset(longline, 'a', LMTP_PROXY_CLIENT_LINE_MAX + 9);
    memcpy(longline, "220 ", 4);
    longline[LMTP_PROXY_CLIENT_LINE_MAX + 9] = '\0';
    assert_int_equal(feed(c, longline, &out, NULL), LMTP_PROXY_CLIENT_PROTOCOL);
    free(longline);
    lmtp_proxy_client_free(c);
    /* A reply when none is due (after READY). */
    c = client(false);
    feed(c, "220 ready", &out, NULL);
    feed(c, "250 b1", &out, NULL);
    feed(c, "250 ok", &out, NULL);
    assert_int_equal(feed(c, "250 unsolicited", &out, NULL), LMTP_PROXY_CLIENT_PROTOCOL);
    lmtp_proxy_client_free(c);
    /* After QUIT everything is ignored. */
    c = client(false);
    lmtp_proxy_client_quit(c, &out);
    assert_int_equal(feed(c, "garbage", &out, NULL), LMTP_PROXY_CLIENT_CONTINUE);
    lmtp_proxy_client_free(c);
    buf_free(&out);
}

/* encode then decode gives the message back; every piece size. */
static void roundtrip(const char *msg, size_t len, size_t piece, const char *expect_wire)
{
    struct lmtp_data_encoder e;
    lmtp_data_encoder_init(&e);
    struct buf wire = {0};
    for (size_t i = 0; i < len; i += piece)
        lmtp_data_encode(&e, msg + i, len - i < piece ? len - i : piece, &wire);
    lmtp_data_encode_end(&e, &wire);
    if (expect_wire != NULL)
        assert_string_equal(buf_cstr(&wire), expect_wire);
    struct buf back = {0};
    struct lmtp_data d;
    lmtp_data_init(&d, &back, 1 << 20);
    size_t used = 0;
    assert_true(lmtp_data_feed(&d, wire.data, wire.len, &used));
    assert_int_equal(used, wire.len);
    assert_int_equal(back.len, len);
    assert_memory_equal(back.data, msg, len);
    buf_free(&wire);
    buf_free(&back);
}

static void test_data_encoding_is_the_inverse_of_decoding(void **state)
{
    (void)state;
    roundtrip("", 0, 1, ".\r\n");
    roundtrip("a\r\n.\r\n..b\r\n", 11, 64, "a\r\n..\r\n...b\r\n.\r\n");
    /* A bare LF or CR does not start a line: no dot added there. */
    roundtrip("x\n.y\r.z\r\n.\r\r\n", 13, 64, "x\n.y\r.z\r\n..\r\r\n.\r\n");
    const char *tricky = ".\r\n\r\n.\r\n..\r\r\n.\n\r.\r\n";
    for (size_t piece = 1; piece < 8; piece++)
        roundtrip(tricky, strlen(tricky), piece, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_transaction_with_xclient),
        cmocka_unit_test(test_no_xclient_without_an_offer_or_an_address),
        cmocka_unit_test(test_starttls_first),
        cmocka_unit_test(test_setup_failures),
        cmocka_unit_test(test_broken_replies),
        cmocka_unit_test(test_data_encoding_is_the_inverse_of_decoding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
