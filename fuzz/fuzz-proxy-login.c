/* libFuzzer target: the login proxy's backend dialogues (imap-proxy-login.h,
 * pop3-proxy-login.h), which read whatever a backend sends. Input: the first
 * byte picks IMAP or POP3, the rest is split at LF into backend lines.
 * Invariants: a final step comes with a text; once final, every further
 * line answers PROTOCOL and nothing more is sent; what is sent is CRLF
 * terminated lines only. */
#include "protocols/imap/imap-proxy-login.h"
#include "protocols/pop3/pop3-proxy-login.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool is_imap = (data[0] & 1) == 0;
    struct mail_proxy_login_params p = {.user = "u", .password = "p"};
    mail_forward_init(&p.client);
    strcpy(p.client.ip, "192.0.2.1");
    struct imap_proxy_login *ipl = is_imap ? imap_proxy_login_new(&p) : NULL;
    struct pop3_proxy_login *ppl = is_imap ? NULL : pop3_proxy_login_new(&p);
    struct buf out = {0};
    bool final = false;
    const char *s = (const char *)data + 1;
    size_t left = size - 1;
    while (left > 0) {
        const char *nl = memchr(s, '\n', left);
        size_t len = nl != NULL ? (size_t)(nl - s) : left;
        size_t before = out.len;
        struct mail_proxy_login_result r;
        if (is_imap)
            imap_proxy_login_line(ipl, s, len, &out, &r);
        else
            pop3_proxy_login_line(ppl, s, len, &out, &r);
        if (final) {
            assert(r.step == MAIL_PROXY_LOGIN_PROTOCOL);
            assert(out.len == before);
        }
        if (r.step != MAIL_PROXY_LOGIN_CONTINUE) {
            assert(r.text != NULL);
            final = true;
        }
        if (nl == NULL)
            break;
        s = nl + 1;
        left -= len + 1;
    }
    assert(out.len == 0 || (out.len >= 2 && memcmp(out.data + out.len - 2, "\r\n", 2) == 0));
    imap_proxy_login_free(ipl);
    pop3_proxy_login_free(ppl);
    buf_free(&out);
    return 0;
}
