/* libFuzzer target: the forwarded-client parsers of protocols/common/
 * mail-forward.h (IMAP ID fields, XCLIENT attributes), which read what a
 * login proxy sends. Input: the first byte picks the field name for the ID
 * parser, the rest is the value and, whole, the XCLIENT argument text.
 * Whatever is accepted is canonical: an address that inet_pton takes, a
 * port 1..65535, a session id of the allowed characters. */
#include "protocols/common/mail-forward.h"

#include <arpa/inet.h>
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct mail_forward *f)
{
    unsigned char bin[16];
    assert(f->ip[0] == '\0' || inet_pton(AF_INET, f->ip, bin) == 1 ||
           inet_pton(AF_INET6, f->ip, bin) == 1);
    assert(f->port <= 65535);
    assert(f->ttl >= -1 && f->ttl <= 100);
    size_t n = strlen(f->session);
    assert(n <= MAIL_FORWARD_SESSION_MAX);
    assert(strspn(f->session, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                              "+/=_-") == n);
    char peer[80];
    mail_forward_format_peer(f, peer, sizeof(peer));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"x-originating-ip", "x-originating-port", "x-session-id",
                                        "x-proxy-ttl", "name"};
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    struct mail_forward f;
    mail_forward_init(&f);
    const char *why = NULL;
    if (size > 0) {
        bool ok = mail_forward_id_field(&f, names[data[0] % 5], text + 1, &why);
        assert(ok || why != NULL);
    }
    check(&f);
    mail_forward_init(&f);
    why = NULL;
    bool ok = mail_forward_xclient(&f, MAIL_FORWARD_XTEXT, (const char *)data, size, &why);
    assert(ok || why != NULL);
    check(&f);
    mail_forward_init(&f);
    why = NULL;
    ok = mail_forward_xclient(&f, MAIL_FORWARD_RAW, (const char *)data, size, &why);
    assert(ok || why != NULL);
    check(&f);
    free(text);
    return 0;
}
