/* The backend LMTP dialogue of the login proxy (see lmtp-proxy-client.h). */
#include "protocols/lmtp/lmtp-proxy-client.h"

#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum state {
    ST_GREETING,
    ST_LHLO,
    ST_STARTTLS,
    ST_TLS, /* waiting for the caller's TLS */
    ST_XCLIENT,
    ST_LHLO_AGAIN,
    ST_MAIL,
    ST_READY,
    ST_RCPT,
    ST_DATA,
    ST_SENDING,
    ST_RESULTS,
    ST_END, /* after a final event: nothing more is due */
    ST_QUIT,
};

struct lmtp_proxy_client {
    enum state state;
    char *helo;
    char *sender;
    bool body_8bit;
    bool smtputf8;
    bool want_tls;
    bool tls;        /* STARTTLS done */
    bool offers_tls; /* LHLO: the backend offers STARTTLS */
    struct mail_forward client;
    /* the reply being read */
    int code;        /* of its first line; 0 when no line came yet */
    size_t lines;    /* lines read of it */
    bool xclient;    /* LHLO: the backend offers XCLIENT */
    size_t accepted; /* recipients the backend took */
    size_t results;  /* results still due after the message */
    char text[LMTP_PROXY_CLIENT_LINE_MAX + 1];
};

struct lmtp_proxy_client *lmtp_proxy_client_new(const struct lmtp_proxy_client_params *params)
{
    struct lmtp_proxy_client *c = xcalloc(1, sizeof(*c));
    c->state = ST_GREETING;
    c->helo = xstrdup(params->helo);
    c->sender = xstrdup(params->sender);
    c->body_8bit = params->body_8bit;
    c->smtputf8 = params->smtputf8;
    c->want_tls = params->starttls;
    c->client = params->client;
    return c;
}

void lmtp_proxy_client_free(struct lmtp_proxy_client *c)
{
    if (c == NULL)
        return;
    free(c->helo);
    free(c->sender);
    free(c);
}

/* RFC 3461 xtext: "+" and "=" and anything outside 33..126 as "+XX". */
static void put_xtext(struct buf *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p < 33 || *p > 126 || *p == '+' || *p == '=')
            buf_printf(out, "+%02X", *p);
        else
            buf_append_char(out, (char)*p);
    }
}

static bool send_xclient(const struct lmtp_proxy_client *c, struct buf *out)
{
    const struct mail_forward *f = &c->client;
    if (f->ip[0] == '\0' && f->session[0] == '\0')
        return false;
    buf_append_str(out, "XCLIENT");
    if (f->ip[0] != '\0') {
        buf_append_str(out, " ADDR=");
        if (strchr(f->ip, ':') != NULL)
            buf_append_str(out, "IPV6:"); /* Postfix's form of an IPv6 address */
        put_xtext(out, f->ip);
        if (f->port != 0)
            buf_printf(out, " PORT=%u", f->port);
    }
    if (f->session[0] != '\0') {
        buf_append_str(out, " SESSION=");
        put_xtext(out, f->session);
    }
    if (f->ttl >= 0)
        buf_printf(out, " TTL=%d", f->ttl);
    buf_append_str(out, "\r\n");
    return true;
}

static void send_mail(const struct lmtp_proxy_client *c, struct buf *out)
{
    buf_printf(out, "MAIL FROM:<%s>%s%s\r\n", c->sender, c->body_8bit ? " BODY=8BITMIME" : "",
               c->smtputf8 ? " SMTPUTF8" : "");
}

static void fail(struct lmtp_proxy_client *c, struct lmtp_proxy_client_result *r, const char *why)
{
    c->state = ST_END;
    r->event = LMTP_PROXY_CLIENT_PROTOCOL;
    r->code = 0;
    snprintf(c->text, sizeof(c->text), "%s", why);
    r->text = c->text;
}

/* Whether the text of an LHLO line names the extension `name`. */
static bool offers(const char *text, const char *name)
{
    size_t n = strlen(name);
    return strncasecmp(text, name, n) == 0 && (text[n] == '\0' || text[n] == ' ');
}

static void send_lhlo(struct lmtp_proxy_client *c, struct buf *out, enum state next)
{
    buf_printf(out, "LHLO %s\r\n", c->helo);
    c->xclient = false;
    c->offers_tls = false;
    c->state = next;
}

/* A complete reply (its last line in c->text) in the current state. */
static void on_reply(struct lmtp_proxy_client *c, int code, struct buf *out,
                     struct lmtp_proxy_client_result *r)
{
    r->code = code;
    r->text = c->text;
    switch (c->state) {
    case ST_GREETING:
        if (code != 220)
            goto setup_failed;
        send_lhlo(c, out, ST_LHLO);
        return;
    case ST_LHLO:
    case ST_LHLO_AGAIN:
        if (code != 250)
            goto setup_failed;
        if (c->want_tls && !c->tls) {
            if (!c->offers_tls) {
                snprintf(c->text, sizeof(c->text), "the backend does not offer STARTTLS");
                goto setup_failed;
            }
            buf_append_str(out, "STARTTLS\r\n");
            c->state = ST_STARTTLS;
            return;
        }
        if (c->state == ST_LHLO && c->xclient && send_xclient(c, out)) {
            c->state = ST_XCLIENT;
            return;
        }
        send_mail(c, out);
        c->state = ST_MAIL;
        return;
    case ST_XCLIENT:
        /* A backend that offers XCLIENT trusts us: a refusal is a fault
         * of the set-up, not a reason to hide the client's address. */
        if (code != 220)
            goto setup_failed;
        send_lhlo(c, out, ST_LHLO_AGAIN);
        return;
    case ST_STARTTLS:
        if (code != 220)
            goto setup_failed;
        c->state = ST_TLS;
        r->event = LMTP_PROXY_CLIENT_STARTTLS;
        return;
    case ST_MAIL:
        if (code / 100 != 2) {
            r->mail_stage = true;
            goto setup_failed;
        }
        c->state = ST_READY;
        r->event = LMTP_PROXY_CLIENT_READY;
        return;
    case ST_RCPT:
        if (code / 100 == 2)
            c->accepted++;
        c->state = ST_READY;
        r->event = LMTP_PROXY_CLIENT_RCPT;
        return;
    case ST_DATA:
        if (code == 354) {
            c->state = ST_SENDING;
            r->event = LMTP_PROXY_CLIENT_DATA_GO;
        } else {
            c->state = ST_END;
            r->event = LMTP_PROXY_CLIENT_DATA_REFUSED;
        }
        return;
    case ST_RESULTS:
        r->event = LMTP_PROXY_CLIENT_RESULT;
        if (--c->results == 0) {
            r->done = true;
            c->state = ST_END;
        }
        return;
    default:
        fail(c, r, "reply when none was due");
        return;
    }
setup_failed:
    c->state = ST_END;
    r->event = LMTP_PROXY_CLIENT_SETUP_FAILED;
}

void lmtp_proxy_client_line(struct lmtp_proxy_client *c, const char *line, size_t len,
                            struct buf *out, struct lmtp_proxy_client_result *r)
{
    memset(r, 0, sizeof(*r));
    r->event = LMTP_PROXY_CLIENT_CONTINUE;
    r->text = "";
    if (c->state == ST_QUIT)
        return;
    if (c->state == ST_END) {
        fail(c, r, "reply when none was due");
        return;
    }
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len > LMTP_PROXY_CLIENT_LINE_MAX) {
        fail(c, r, "reply line too long");
        return;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if ((ch < 32 && ch != '\t') || ch == 127) {
            fail(c, r, "control character in a reply");
            return;
        }
    }
    if (c->state == ST_READY || c->state == ST_SENDING || c->state == ST_TLS) {
        fail(c, r, "reply when none was due");
        return;
    }
    if (len < 3 || line[0] < '2' || line[0] > '5' || line[1] < '0' || line[1] > '9' ||
        line[2] < '0' || line[2] > '9' || (len > 3 && line[3] != ' ' && line[3] != '-')) {
        fail(c, r, "malformed reply line");
        return;
    }
    int code = (line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0');
    if (c->lines > 0 && code != c->code) {
        fail(c, r, "reply code changed inside a multi-line reply");
        return;
    }
    if (++c->lines > LMTP_PROXY_CLIENT_LINES_MAX) {
        fail(c, r, "reply with too many lines");
        return;
    }
    c->code = code;
    size_t tlen = len > 4 ? len - 4 : 0;
    memcpy(c->text, line + 4, tlen);
    c->text[tlen] = '\0';
    if (c->state == ST_LHLO || c->state == ST_LHLO_AGAIN) {
        if (offers(c->text, "XCLIENT"))
            c->xclient = true;
        if (offers(c->text, "STARTTLS"))
            c->offers_tls = true;
    }
    if (len > 3 && line[3] == '-')
        return; /* more lines of this reply follow */
    c->lines = 0;
    c->code = 0;
    on_reply(c, code, out, r);
}

void lmtp_proxy_client_tls_started(struct lmtp_proxy_client *c, struct buf *out)
{
    if (c->state != ST_TLS)
        return;
    c->tls = true;
    send_lhlo(c, out, ST_LHLO);
}

bool lmtp_proxy_client_rcpt(struct lmtp_proxy_client *c, const char *address, struct buf *out)
{
    if (c->state != ST_READY)
        return false;
    buf_printf(out, "RCPT TO:<%s>\r\n", address);
    c->state = ST_RCPT;
    return true;
}

bool lmtp_proxy_client_data(struct lmtp_proxy_client *c, struct buf *out)
{
    if (c->state != ST_READY || c->accepted == 0)
        return false;
    buf_append_str(out, "DATA\r\n");
    c->state = ST_DATA;
    return true;
}

void lmtp_proxy_client_data_sent(struct lmtp_proxy_client *c)
{
    if (c->state != ST_SENDING)
        return;
    c->results = c->accepted;
    c->state = ST_RESULTS;
}

size_t lmtp_proxy_client_accepted(const struct lmtp_proxy_client *c)
{
    return c->accepted;
}

void lmtp_proxy_client_quit(struct lmtp_proxy_client *c, struct buf *out)
{
    buf_append_str(out, "QUIT\r\n");
    c->state = ST_QUIT;
}
