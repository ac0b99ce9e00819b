/* The IMAP backend dialogue of a login proxy (see imap-proxy-login.h). */
#include "protocols/imap/imap-proxy-login.h"

#include "core/xalloc.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum state { WAIT_GREETING, WAIT_LOGIN, FINISHED };

struct imap_proxy_login {
    enum state state;
    struct mail_proxy_login_state st;
};

struct imap_proxy_login *imap_proxy_login_new(const struct mail_proxy_login_params *params)
{
    struct imap_proxy_login *pl = xcalloc(1, sizeof(*pl));
    mail_proxy_login_state_init(&pl->st, params);
    return pl;
}

void imap_proxy_login_free(struct imap_proxy_login *pl)
{
    if (pl == NULL)
        return;
    mail_proxy_login_state_free(&pl->st);
    free(pl);
}

/* The ID values are checked forms (an IP, digits, an atom): a quoted
 * string needs no escapes. */
static void id_pair(struct buf *out, bool *first, const char *name, const char *value)
{
    buf_append_str(out, *first ? "(\"" : " \"");
    buf_append_str(out, name);
    buf_append_str(out, "\" \"");
    buf_append_str(out, value);
    buf_append_char(out, '"');
    *first = false;
}

static void send_login(struct imap_proxy_login *pl, struct buf *out)
{
    const struct mail_forward *f = &pl->st.client;
    bool first = true;
    buf_append_str(out, "P1 ID ");
    if (f->ip[0] != '\0')
        id_pair(out, &first, "x-originating-ip", f->ip);
    if (f->port != 0) {
        char port[12];
        snprintf(port, sizeof(port), "%u", f->port);
        id_pair(out, &first, "x-originating-port", port);
    }
    if (f->session[0] != '\0')
        id_pair(out, &first, "x-session-id", f->session);
    if (f->ttl >= 0) {
        char ttl[12];
        snprintf(ttl, sizeof(ttl), "%d", f->ttl);
        id_pair(out, &first, "x-proxy-ttl", ttl);
    }
    buf_append_str(out, first ? "NIL\r\n" : ")\r\n");
    buf_append_str(out, "P2 AUTHENTICATE PLAIN ");
    mail_proxy_login_plain(out, pl->st.user, pl->st.password);
    buf_append_str(out, "\r\n");
}

static bool starts(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

/* "<prefix>" alone or followed by a space: the rest after the space. */
static const char *after(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncasecmp(s, prefix, n) != 0)
        return NULL;
    if (s[n] == '\0')
        return s + n;
    return s[n] == ' ' ? s + n + 1 : NULL;
}

/* NO codes after which another attempt (or another backend) may work
 * (RFC 5530: the server, not the credentials). */
static bool temporary_no(const char *text)
{
    return starts(text, "[UNAVAILABLE]") || starts(text, "[SERVERBUG]") || starts(text, "[INUSE]");
}

static void finish(struct imap_proxy_login *pl, struct mail_proxy_login_result *result,
                   enum mail_proxy_login_step step, const char *text)
{
    pl->state = FINISHED;
    result->step = step;
    result->text = text;
}

void imap_proxy_login_line(struct imap_proxy_login *pl, const char *line, size_t len,
                           struct buf *out, struct mail_proxy_login_result *result)
{
    if (!mail_proxy_login_take(pl->state == FINISHED, line, len, pl->st.text, result)) {
        pl->state = FINISHED;
        return;
    }
    const char *rest;
    if (pl->state == WAIT_GREETING) {
        if (after(pl->st.text, "* OK") != NULL) {
            send_login(pl, out);
            pl->state = WAIT_LOGIN;
        } else if ((rest = after(pl->st.text, "* BYE")) != NULL) {
            finish(pl, result, MAIL_PROXY_LOGIN_TEMPFAIL, rest);
        } else if (after(pl->st.text, "* PREAUTH") != NULL) {
            finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "the backend greeted with PREAUTH");
        } else {
            finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "not an IMAP greeting");
        }
        return;
    }
    if (starts(pl->st.text, "* ") || starts(pl->st.text, "P1 "))
        return; /* untagged, or the answer to ID */
    if ((rest = after(pl->st.text, "P2 OK")) != NULL)
        finish(pl, result, MAIL_PROXY_LOGIN_OK, rest);
    else if ((rest = after(pl->st.text, "P2 NO")) != NULL)
        finish(pl, result,
               temporary_no(rest) ? MAIL_PROXY_LOGIN_TEMPFAIL : MAIL_PROXY_LOGIN_REJECTED, rest);
    else if (pl->st.text[0] == '+')
        finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "the backend asked for more SASL data");
    else
        finish(pl, result, MAIL_PROXY_LOGIN_PROTOCOL, "an unexpected answer to the login");
}
