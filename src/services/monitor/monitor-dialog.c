/* Probe conversations (monitor-dialog.h): one step function per protocol. */
#include "services/monitor/monitor-dialog.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define IMAP_LOGIN_TAG "m1"
#define IMAP_LOGOUT_TAG "m2"
#define LHLO_NAME "petrel-monitor"

enum step {
    STEP_GREETING,
    STEP_LOGIN, /* IMAP LOGIN sent */
    STEP_USER,  /* POP3 USER sent */
    STEP_PASS,  /* POP3 PASS sent */
    STEP_LHLO,  /* LMTP LHLO sent */
    STEP_BYE,   /* LOGOUT / QUIT sent; the verdict is decided */
};

void monitor_dialog_init(struct monitor_dialog *d, enum monitor_protocol proto, const char *user,
                         const char *password)
{
    memset(d, 0, sizeof(*d));
    d->proto = proto;
    if (proto != MONITOR_PROTO_LMTP && user != NULL) {
        d->user = user;
        d->password = password != NULL ? password : "";
    }
    d->step = STEP_GREETING;
}

/* ---------- helpers ---------- */

/* `line` starts with `word` (case-insensitive) followed by a space or its end. */
static bool starts_word(const char *line, size_t len, const char *word)
{
    size_t n = strlen(word);
    if (len < n || strncasecmp(line, word, n) != 0)
        return false;
    return len == n || line[n] == ' ';
}

static void set_detail(struct monitor_dialog *d, const char *what, const char *line, size_t len)
{
    char excerpt[128];
    size_t n = len < sizeof(excerpt) - 1 ? len : sizeof(excerpt) - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)line[i];
        excerpt[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    excerpt[n] = '\0';
    snprintf(d->detail, sizeof(d->detail), "%s: %s%s", what, excerpt, len > n ? "..." : "");
}

static void decide(struct monitor_dialog *d, enum monitor_result r)
{
    if (!d->decided) {
        d->decided = true;
        d->verdict = r;
    }
}

static enum monitor_dialog_action fail(struct monitor_dialog *d, enum monitor_result r,
                                       const char *what, const char *line, size_t len)
{
    set_detail(d, what, line, len);
    decide(d, r);
    return MONITOR_DIALOG_FINISH;
}

static void append_quoted(struct buf *out, const char *s)
{
    buf_append_char(out, '"');
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            buf_append_char(out, '\\');
        buf_append_char(out, *s);
    }
    buf_append_char(out, '"');
}

/* Goes to the goodbye step with `r` as the verdict. */
static enum monitor_dialog_action goodbye(struct monitor_dialog *d, enum monitor_result r,
                                          struct buf *out)
{
    decide(d, r);
    d->step = STEP_BYE;
    if (d->proto == MONITOR_PROTO_IMAP)
        buf_append_str(out, IMAP_LOGOUT_TAG " LOGOUT\r\n");
    else
        buf_append_str(out, "QUIT\r\n");
    return MONITOR_DIALOG_READ;
}

/* ---------- IMAP ---------- */

static enum monitor_dialog_action imap_line(struct monitor_dialog *d, const char *line, size_t len,
                                            struct buf *out)
{
    switch (d->step) {
    case STEP_GREETING:
        if (starts_word(line, len, "* PREAUTH"))
            return goodbye(d, MONITOR_RESULT_OK, out);
        if (!starts_word(line, len, "* OK"))
            return fail(d, MONITOR_RESULT_BAD_GREETING, "greeting", line, len);
        if (d->user == NULL)
            return goodbye(d, MONITOR_RESULT_OK, out);
        buf_append_str(out, IMAP_LOGIN_TAG " LOGIN ");
        append_quoted(out, d->user);
        buf_append_char(out, ' ');
        append_quoted(out, d->password);
        buf_append_str(out, "\r\n");
        d->step = STEP_LOGIN;
        return MONITOR_DIALOG_READ;
    case STEP_LOGIN:
        if (len >= 2 && line[0] == '*' && line[1] == ' ')
            return MONITOR_DIALOG_READ; /* untagged: CAPABILITY and the like */
        if (starts_word(line, len, IMAP_LOGIN_TAG " OK"))
            return goodbye(d, MONITOR_RESULT_OK, out);
        set_detail(d, "LOGIN", line, len);
        if (starts_word(line, len, IMAP_LOGIN_TAG " NO"))
            return goodbye(d, MONITOR_RESULT_REJECTED, out);
        if (starts_word(line, len, IMAP_LOGIN_TAG " BAD"))
            return goodbye(d, MONITOR_RESULT_PROTOCOL_ERROR, out);
        return fail(d, MONITOR_RESULT_PROTOCOL_ERROR, "LOGIN", line, len);
    default: /* STEP_BYE */
        if (starts_word(line, len, IMAP_LOGOUT_TAG))
            return MONITOR_DIALOG_FINISH; /* the tagged LOGOUT reply */
        return MONITOR_DIALOG_READ;       /* `* BYE` */
    }
}

/* ---------- POP3 ---------- */

static enum monitor_dialog_action pop3_line(struct monitor_dialog *d, const char *line, size_t len,
                                            struct buf *out)
{
    bool ok = starts_word(line, len, "+OK");
    bool err = starts_word(line, len, "-ERR");
    switch (d->step) {
    case STEP_GREETING:
        if (!ok)
            return fail(d, MONITOR_RESULT_BAD_GREETING, "greeting", line, len);
        if (d->user == NULL)
            return goodbye(d, MONITOR_RESULT_OK, out);
        buf_printf(out, "USER %s\r\n", d->user);
        d->step = STEP_USER;
        return MONITOR_DIALOG_READ;
    case STEP_USER:
    case STEP_PASS:
        if (ok && d->step == STEP_USER) {
            buf_printf(out, "PASS %s\r\n", d->password);
            d->step = STEP_PASS;
            return MONITOR_DIALOG_READ;
        }
        if (ok)
            return goodbye(d, MONITOR_RESULT_OK, out);
        if (err) {
            set_detail(d, d->step == STEP_USER ? "USER" : "PASS", line, len);
            return goodbye(d, MONITOR_RESULT_REJECTED, out);
        }
        return fail(d, MONITOR_RESULT_PROTOCOL_ERROR, d->step == STEP_USER ? "USER" : "PASS", line,
                    len);
    default: /* STEP_BYE: the QUIT reply */
        return MONITOR_DIALOG_FINISH;
    }
}

/* ---------- LMTP ---------- */

/* An SMTP reply line: three digits, then '-' (more lines follow), ' ' or
 * the end. Returns the code, or -1 when the line is not one. */
static int reply_code(const char *line, size_t len, bool *more)
{
    if (len < 3 || !isdigit((unsigned char)line[0]) || !isdigit((unsigned char)line[1]) ||
        !isdigit((unsigned char)line[2]))
        return -1;
    if (len > 3 && line[3] != '-' && line[3] != ' ')
        return -1;
    *more = len > 3 && line[3] == '-';
    return (line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0');
}

static enum monitor_dialog_action lmtp_line(struct monitor_dialog *d, const char *line, size_t len,
                                            struct buf *out)
{
    bool more = false;
    int code = reply_code(line, len, &more);
    switch (d->step) {
    case STEP_GREETING:
        if (code != 220)
            return fail(d, MONITOR_RESULT_BAD_GREETING, "greeting", line, len);
        if (more)
            return MONITOR_DIALOG_READ;
        buf_append_str(out, "LHLO " LHLO_NAME "\r\n");
        d->step = STEP_LHLO;
        return MONITOR_DIALOG_READ;
    case STEP_LHLO:
        if (code < 0)
            return fail(d, MONITOR_RESULT_PROTOCOL_ERROR, "LHLO", line, len);
        if (code == 250 && more)
            return MONITOR_DIALOG_READ;
        if (code == 250)
            return goodbye(d, MONITOR_RESULT_OK, out);
        set_detail(d, "LHLO", line, len);
        return goodbye(d, MONITOR_RESULT_REJECTED, out);
    default: /* STEP_BYE: read up to the last line of the QUIT reply */
        return code >= 0 && more ? MONITOR_DIALOG_READ : MONITOR_DIALOG_FINISH;
    }
}

/* ---------- API ---------- */

enum monitor_dialog_action monitor_dialog_line(struct monitor_dialog *d, const char *line,
                                               size_t len, struct buf *out)
{
    switch (d->proto) {
    case MONITOR_PROTO_IMAP:
        return imap_line(d, line, len, out);
    case MONITOR_PROTO_POP3:
        return pop3_line(d, line, len, out);
    case MONITOR_PROTO_LMTP:
        return lmtp_line(d, line, len, out);
    }
    return fail(d, MONITOR_RESULT_PROTOCOL_ERROR, "probe", "", 0);
}

enum monitor_result monitor_dialog_closed(struct monitor_dialog *d)
{
    if (!d->decided)
        snprintf(d->detail, sizeof(d->detail), "connection closed by the server");
    decide(d, MONITOR_RESULT_CLOSED);
    return d->verdict;
}

enum monitor_result monitor_dialog_timed_out(struct monitor_dialog *d)
{
    if (!d->decided)
        snprintf(d->detail, sizeof(d->detail), "no answer in time");
    decide(d, MONITOR_RESULT_TIMEOUT);
    return d->verdict;
}

const char *monitor_protocol_name(enum monitor_protocol p)
{
    switch (p) {
    case MONITOR_PROTO_IMAP:
        return "imap";
    case MONITOR_PROTO_POP3:
        return "pop3";
    case MONITOR_PROTO_LMTP:
        return "lmtp";
    }
    return "imap";
}

const char *monitor_result_name(enum monitor_result r)
{
    static const char *const names[MONITOR_RESULT_COUNT] = {
        "ok",           "connect_error", "timeout",        "tls_error",
        "bad_greeting", "rejected",      "protocol_error", "closed"};
    return (unsigned)r < MONITOR_RESULT_COUNT ? names[r] : "protocol_error";
}
