/* Names of the backend-login steps (mail-proxy-login.h). */
#include "protocols/common/mail-proxy-login.h"

#include "core/base64.h"
#include "core/xalloc.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

void mail_proxy_login_state_init(struct mail_proxy_login_state *st,
                                 const struct mail_proxy_login_params *params)
{
    st->user = xstrdup(params->user);
    st->password = xstrdup(params->password);
    st->client = params->client;
    st->text[0] = '\0';
}

void mail_proxy_login_state_free(struct mail_proxy_login_state *st)
{
    OPENSSL_cleanse(st->password, strlen(st->password));
    free(st->password);
    free(st->user);
}

bool mail_proxy_login_take(bool finished, const char *line, size_t len, char *text,
                           struct mail_proxy_login_result *result)
{
    result->step = MAIL_PROXY_LOGIN_CONTINUE;
    result->text = NULL;
    if (!finished && len <= MAIL_PROXY_LOGIN_LINE_MAX && memchr(line, '\0', len) == NULL) {
        memcpy(text, line, len);
        text[len] = '\0';
        return true;
    }
    result->step = MAIL_PROXY_LOGIN_PROTOCOL;
    result->text = finished                          ? "a line after the login was decided"
                   : len > MAIL_PROXY_LOGIN_LINE_MAX ? "a backend line over 8 KiB"
                                                     : "a NUL byte from the backend";
    return false;
}

void mail_proxy_login_plain(struct buf *out, const char *user, const char *password)
{
    struct buf plain = {0};
    buf_append_char(&plain, '\0');
    buf_append_str(&plain, user);
    buf_append_char(&plain, '\0');
    buf_append_str(&plain, password);
    base64_encode_append(out, plain.data, plain.len);
    OPENSSL_cleanse(plain.data, plain.len);
    buf_free(&plain);
}

const char *mail_proxy_login_step_name(enum mail_proxy_login_step step)
{
    switch (step) {
    case MAIL_PROXY_LOGIN_CONTINUE:
        return "continue";
    case MAIL_PROXY_LOGIN_OK:
        return "ok";
    case MAIL_PROXY_LOGIN_REJECTED:
        return "rejected";
    case MAIL_PROXY_LOGIN_TEMPFAIL:
        return "tempfail";
    case MAIL_PROXY_LOGIN_PROTOCOL:
        return "protocol";
    }
    return "unknown";
}
