/* The POP3 backend dialogue of a login proxy (see pop3-proxy-login.h). */
#include "protocols/pop3/pop3-proxy-login.h"

#include "core/xalloc.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum state { WAIT_GREETING, WAIT_XCLIENT, WAIT_AUTH, FINISHED };

struct pop3_proxy_login {
    enum state state;
    struct mail_proxy_login_state st;
};

struct pop3_proxy_login *pop3_proxy_login_new(const struct mail_proxy_login_params *params)
{
    struct pop3_proxy_login *pl = xcalloc(1, sizeof(*pl));
    mail_proxy_login_state_init(&pl->st, params);
    return pl;
}

void pop3_proxy_login_free(struct pop3_proxy_login *pl)
{
    if (pl == NULL)
        return;
    mail_proxy_login_state_free(&pl->st);
    free(pl);
}

/* XCLIENT with what is known of the client; false when nothing is. */
static bool send_xclient(const struct mail_forward *f, struct buf *out)
{
    if (f->ip[0] == '\0' && f->port == 0 && f->session[0] == '\0' && f->ttl < 0)
        return false;
    buf_append_str(out, "XCLIENT");
    if (f->ip[0] != '\0')
        buf_printf(out, " ADDR=%s", f->ip);
    if (f->port != 0)
        buf_printf(out, " PORT=%u", f->port);
    if (f->session[0] != '\0')
        buf_printf(out, " SESSION=%s", f->session);
    if (f->ttl >= 0)
        buf_printf(out, " TTL=%d", f->ttl);
    buf_append_str(out, "\r\n");
    return true;
}

static void send_auth(struct pop3_proxy_login *pl, struct buf *out)
{
    buf_append_str(out, "AUTH PLAIN ");
    mail_proxy_login_plain(out, pl->st.user, pl->st.password);
    buf_append_str(out, "\r\n");
}

/* "<status>" alone or followed by a space: the rest after it. */
static const char *after(const char *s, const char *status)
{
    size_t n = strlen(status);
    if (strncmp(s, status, n) != 0)
        return NULL;
    if (s[n] == '\0')
        return s + n;
    return s[n] == ' ' ? s + n + 1 : NULL;
}

static void finish(struct pop3_proxy_login *pl, struct mail_proxy_login_result *result,
                   enum mail_proxy_login_step step, const char *text)
{
    pl->state = FINISHED;
    result->step = step;
    result->text = text;
}

void pop3_proxy_login_line(struct pop3_proxy_login *pl, const char *line, size_t len,
                           struct buf *out, struct mail_proxy_login_result *result)
{
    if (!mail_proxy_login_take(pl->state == FINISHED, line, len, pl->st.text, result)) {
        pl->state = FINISHED;
        return;
    }
    const char *rest;
    switch (pl->state) {
    case WAIT_GREETING:
        if ((rest = after(pl->st.text, "+OK")) != NULL) {
            bool offered = strncmp(rest, "[XCLIENT]", 9) == 0;
            bool sent = offered && send_xclient(&pl->st.client, out);
            send_auth(pl, out); /* pipelined behind XCLIENT, as Dovecot does */
            pl->state = sent ? WAIT_XCLIENT : WAIT_AUTH;
        } else if ((rest = after(pl->st.text, "-ERR")) != NULL) {
            finish(pl, result, MAIL_PROXY_LOGIN_TEMPFAIL, rest);
        } else {
            finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "not a POP3 greeting");
        }
        return;
    case WAIT_XCLIENT:
        if (after(pl->st.text, "+OK") != NULL)
            pl->state = WAIT_AUTH;
        else
            finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "the backend refused XCLIENT");
        return;
    case WAIT_AUTH:
        if ((rest = after(pl->st.text, "+OK")) != NULL)
            finish(pl, result, MAIL_PROXY_LOGIN_OK, rest);
        else if ((rest = after(pl->st.text, "-ERR")) != NULL)
            finish(pl, result,
                   strncmp(rest, "[SYS/TEMP]", 10) == 0 ? MAIL_PROXY_LOGIN_TEMPFAIL
                                                        : MAIL_PROXY_LOGIN_REJECTED,
                   rest);
        else if (pl->st.text[0] == '+')
            finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "the backend asked for more SASL data");
        else
            finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "an unexpected answer to AUTH");
        return;
    case FINISHED:
        return;
    }
}
