/* Forwarded client fields (IMAP ID, XCLIENT): checked and collected. */
#include "protocols/common/mail-forward.h"

#include "core/slice.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAIL_FORWARD_TTL_MAX 100

void mail_forward_init(struct mail_forward *f)
{
    memset(f, 0, sizeof(*f));
    f->ttl = -1;
}

/* An IPv4 or IPv6 address in its canonical text form (what logs, the
 * warden and the auth service see, whatever spelling the proxy used). */
static bool set_ip(struct mail_forward *f, const char *text, size_t len, const char **why)
{
    char tmp[64];
    if (len == 0 || len >= sizeof(tmp)) {
        *why = "bad address";
        return false;
    }
    memcpy(tmp, text, len);
    tmp[len] = '\0';
    unsigned char bin[16];
    if (inet_pton(AF_INET, tmp, bin) == 1) {
        inet_ntop(AF_INET, bin, f->ip, sizeof(f->ip));
        return true;
    }
    if (inet_pton(AF_INET6, tmp, bin) == 1) {
        inet_ntop(AF_INET6, bin, f->ip, sizeof(f->ip));
        return true;
    }
    *why = "bad address";
    return false;
}

/* A decimal number lo..hi, nothing else. */
static bool parse_uint(const char *text, size_t len, unsigned lo, unsigned hi, unsigned *out)
{
    uint64_t v = 0;
    if (len > 6 || !slice_parse_u64((struct slice){text, len}, hi, &v) || v < lo)
        return false;
    *out = (unsigned)v;
    return true;
}

static bool set_port(struct mail_forward *f, const char *text, size_t len, const char **why)
{
    if (!parse_uint(text, len, 1, 65535, &f->port)) {
        *why = "bad port";
        return false;
    }
    return true;
}

/* Session ids end up in log lines and in the Received header's `id`
 * clause, which takes an RFC 5322 atom: a bounded set of atext only. */
static bool set_session(struct mail_forward *f, const char *text, size_t len, const char **why)
{
    if (len == 0 || len > MAIL_FORWARD_SESSION_MAX) {
        *why = "bad session id";
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '+' || c == '/' || c == '=' || c == '_' || c == '-';
        if (!ok) {
            *why = "bad session id";
            return false;
        }
    }
    memcpy(f->session, text, len);
    f->session[len] = '\0';
    return true;
}

static bool set_ttl(struct mail_forward *f, const char *text, size_t len, const char **why)
{
    unsigned v;
    if (!parse_uint(text, len, 0, MAIL_FORWARD_TTL_MAX, &v)) {
        *why = "bad ttl";
        return false;
    }
    f->ttl = (int)v;
    return true;
}

bool mail_forward_id_field(struct mail_forward *f, const char *name, const char *value,
                           const char **why)
{
    if (name == NULL || value == NULL)
        return true;
    size_t len = strlen(value);
    if (strcasecmp(name, "x-originating-ip") == 0)
        return set_ip(f, value, len, why);
    if (strcasecmp(name, "x-originating-port") == 0)
        return set_port(f, value, len, why);
    if (strcasecmp(name, "x-session-id") == 0 || strcasecmp(name, "x-session-ext-id") == 0)
        return set_session(f, value, len, why);
    if (strcasecmp(name, "x-proxy-ttl") == 0)
        return set_ttl(f, value, len, why);
    return true;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1; /* RFC 3461: xtext hex digits are upper case */
}

/* RFC 3461 section 4: "+" and two upper-case hex digits stand for a byte;
 * other characters are printable ASCII except "=" and "+". */
static bool xtext_decode(const char *in, size_t len, char *out, size_t size, size_t *out_len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '+') {
            if (i + 2 >= len)
                return false;
            int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
            if (hi < 0 || lo < 0)
                return false;
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        } else if (c < 33 || c > 126 || c == '=') {
            return false;
        }
        if (n + 1 >= size)
            return false;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    *out_len = n;
    return true;
}

/* A raw value: printable ASCII without spaces, as the argument split left it. */
static bool raw_copy(const char *in, size_t len, char *out, size_t size, size_t *out_len)
{
    if (len >= size)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)in[i] < 33 || (unsigned char)in[i] > 126)
            return false;
    memcpy(out, in, len);
    out[len] = '\0';
    *out_len = len;
    return true;
}

static bool xclient_attr(struct mail_forward *f, enum mail_forward_values values, const char *name,
                         size_t nlen, const char *value, size_t vlen, const char **why)
{
    char buf[128];
    size_t len;
    bool ok = values == MAIL_FORWARD_XTEXT ? xtext_decode(value, vlen, buf, sizeof(buf), &len)
                                           : raw_copy(value, vlen, buf, sizeof(buf), &len);
    if (!ok) {
        *why = values == MAIL_FORWARD_XTEXT ? "bad xtext" : "bad value";
        return false;
    }
    /* Postfix's placeholders for what the proxy does not know. */
    if (strcmp(buf, "[UNAVAILABLE]") == 0 || strcmp(buf, "[TEMPUNAVAIL]") == 0)
        return true;
    if (nlen == 4 && strncasecmp(name, "ADDR", 4) == 0) {
        const char *ip = buf;
        if (len > 5 && strncasecmp(buf, "IPV6:", 5) == 0) {
            ip += 5;
            len -= 5;
        }
        return set_ip(f, ip, len, why);
    }
    if (nlen == 4 && strncasecmp(name, "PORT", 4) == 0)
        return set_port(f, buf, len, why);
    if (nlen == 7 && strncasecmp(name, "SESSION", 7) == 0)
        return set_session(f, buf, len, why);
    if (nlen == 3 && strncasecmp(name, "TTL", 3) == 0)
        return set_ttl(f, buf, len, why);
    return true;
}

bool mail_forward_xclient(struct mail_forward *f, enum mail_forward_values values, const char *args,
                          size_t len, const char **why)
{
    size_t i = 0;
    bool any = false;
    while (i < len) {
        while (i < len && args[i] == ' ')
            i++;
        if (i == len)
            break;
        size_t start = i;
        while (i < len && args[i] != ' ')
            i++;
        const char *attr = args + start;
        size_t alen = i - start;
        const char *eq = memchr(attr, '=', alen);
        if (eq == NULL || eq == attr) {
            *why = "attribute without a name or value";
            return false;
        }
        size_t nlen = (size_t)(eq - attr);
        if (!xclient_attr(f, values, attr, nlen, eq + 1, alen - nlen - 1, why))
            return false;
        any = true;
    }
    if (!any) {
        *why = "no attributes";
        return false;
    }
    return true;
}

void mail_forward_format_peer(const struct mail_forward *f, char *out, size_t size)
{
    if (f->port == 0)
        snprintf(out, size, "%s", f->ip);
    else if (strchr(f->ip, ':') != NULL)
        snprintf(out, size, "[%s]:%u", f->ip, f->port);
    else
        snprintf(out, size, "%s:%u", f->ip, f->port);
}
