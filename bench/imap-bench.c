/* Load generator for the IMAP server (bench/imap.sh). One process drives
 * every connection with non-blocking sockets and poll(2); each connection
 * has at most one command in flight and waits for its tagged reply, as a
 * mail client does.
 *
 *   imap-bench setup ADDR USERS_FILE MESSAGES mixed|small
 *       Logs in as every user of USERS_FILE (32 at a time) and APPENDs
 *       MESSAGES generated messages to its INBOX (MULTIAPPEND, LITERAL+,
 *       10 per command), then logs out. Message i of user u is always the
 *       same bytes, so `load` knows every size without asking.
 *   imap-bench load ADDR USERS_FILE MESSAGES SECONDS [CLIENTS]
 *       CLIENTS (default: every user in the file) connections, one per user:
 *       LOGIN, SELECT INBOX, then, once all are ready, a fixed-weight mix of
 *       commands for SECONDS (see `mix` below). Prints commands/s and
 *       per-command p50/p99. IMAP_BENCH_COMMANDS=N: each connection runs
 *       exactly N commands instead (SECONDS becomes a limit); with one
 *       connection the session is then the same bytes on every run, which
 *       bench/imap-cpu.sh counts instructions on. IMAP_BENCH_HOOK_START and
 *       IMAP_BENCH_HOOK_STOP: shell commands run just before the first and
 *       just after the last measured command.
 *   imap-bench logins ADDR USERS_FILE SECONDS [CONCURRENCY]
 *       CONCURRENCY (default 64) connections at a time, each a whole login
 *       cycle: connect, greeting, LOGIN, LOGOUT, the server's close; a
 *       finished one is replaced by the next user's. Prints the cycles
 *       finished within SECONDS per second, the LOGIN p50/p99 and the
 *       generator's own CPU per login (the login rate of a login proxy,
 *       bench/login_proxy_bench.py).
 *   imap-bench idle ADDR USERS_FILE SESSIONS PID
 *       Opens SESSIONS connections (user i % users), then in phases: all
 *       greeted, all LOGIN, all SELECT INBOX, and reads VmRSS/RssAnon of
 *       process PID from /proc after each phase; then NOOP on every session
 *       (all must still answer) and LOGOUT. Prints KiB per session.
 *       IMAP_BENCH_HOLD=SECONDS keeps the sessions open that long after the
 *       SELECT phase (for measurements from outside).
 *
 * USERS_FILE holds "user<TAB>password" lines. Any tagged NO or BAD, an
 * unexpected BYE, a closed connection or a response that does not match
 * what was asked (wrong number of FETCH lines, wrong literal size) is an
 * error: it is printed with the exchange that caused it and the program
 * exits 1. */
#include "bench-users.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------- utilities ---------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* User plus system CPU time this process used so far. */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint32_t rnd(uint64_t *state, uint32_t n) /* 0 .. n-1 */
{
    return n == 0 ? 0 : (uint32_t)(splitmix(state) % n);
}

static uint32_t rnd_between(uint64_t *state, uint32_t lo, uint32_t hi) /* lo .. hi */
{
    return lo + rnd(state, hi - lo + 1);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* VmRSS and RssAnon of a process, KiB; false when it is gone. */
static bool read_rss(long pid, long *rss_kib, long *anon_kib)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    *rss_kib = *anon_kib = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_kib = atol(line + 6);
        else if (strncmp(line, "RssAnon:", 8) == 0)
            *anon_kib = atol(line + 8);
    }
    fclose(f);
    return *rss_kib >= 0;
}

static void raise_fd_limit(size_t need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        fprintf(stderr, "imap-bench: fd limit %llu is below the %zu needed (ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, need);
        exit(2);
    }
}

/* ---------- generated messages ---------- */

static const char *const words[] = {
    "the",      "report",   "meeting",  "project", "update",   "please",   "review",  "attached",
    "thanks",   "schedule", "budget",   "team",    "next",     "week",     "draft",   "final",
    "customer", "release",  "server",   "mail",    "question", "answer",   "about",   "with",
    "from",     "have",     "will",     "could",   "would",    "should",   "Monday",  "Friday",
    "quarter",  "numbers",  "figures",  "agenda",  "minutes",  "follow",   "up",      "regards",
    "deadline", "proposal", "contract", "invoice", "payment",  "shipping", "order",   "status",
    "issue",    "fixed",    "deployed", "tested",  "office",   "travel",   "holiday", "lunch",
};
#define WORD_COUNT (sizeof(words) / sizeof(words[0]))

static const char *const names[] = {
    "Alice Martin", "Bob Smith",     "Carol Jones", "Dave Brown",   "Eve Davis",
    "Frank Miller", "Grace Wilson",  "Heidi Moore", "Ivan Taylor",  "Judy Anderson",
    "Mallory King", "Niaj Thompson", "Olivia Lee",  "Peggy Garcia", "Rupert Clark",
};
#define NAME_COUNT (sizeof(names) / sizeof(names[0]))

#define MSG_EPOCH 1793527200 /* 2026-10-31 08:00 UTC */

static void text_lines(struct buf *out, uint64_t *st, size_t bytes)
{
    size_t start = out->len, line = 0;
    while (out->len - start < bytes) {
        const char *w = words[rnd(st, WORD_COUNT)];
        size_t wl = strlen(w);
        if (line > 0 && line + 1 + wl > 72) {
            buf_append_str(out, "\r\n");
            line = 0;
            if (rnd(st, 8) == 0)
                buf_append_str(out, "\r\n"); /* paragraph */
        }
        if (line > 0) {
            buf_append_char(out, ' ');
            line++;
        }
        buf_append_str(out, w);
        line += wl;
    }
    buf_append_str(out, "\r\n");
}

static void base64_lines(struct buf *out, uint64_t *st, size_t raw_bytes)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t chars = (raw_bytes + 2) / 3 * 4;
    char line[80];
    while (chars > 0) {
        size_t n = chars < 76 ? chars : 76;
        for (size_t i = 0; i < n; i++)
            line[i] = alphabet[splitmix(st) & 63];
        buf_append(out, line, n);
        buf_append_str(out, "\r\n");
        chars -= n;
    }
}

static void rfc5322_date(time_t t, char *dst, size_t size)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(dst, size, "%a, %d %b %Y %H:%M:%S +0000", &tm);
}

static void imap_date(time_t t, char *dst, size_t size)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(dst, size, "%d-%b-%Y %H:%M:%S +0000", &tm);
}

enum msg_sizes { SIZES_MIXED, SIZES_SMALL };

/* Message `index` of user `user_index`: headers like a delivered message,
 * then one of: plain text (55 %, 0.3-4 KB), text + HTML alternative (30 %,
 * ~3-15 KB), text + a base64 attachment (12 %, 20-165 KB) or a large
 * attachment (3 %, 200-820 KB). SIZES_SMALL: plain text only. */
static time_t gen_message(size_t user_index, uint32_t index, const char *user, enum msg_sizes sizes,
                          struct buf *out)
{
    uint64_t st = ((uint64_t)user_index + 1) * 1000003ULL + index;
    splitmix(&st);
    time_t when = MSG_EPOCH + (time_t)index * 1800 + rnd(&st, 1800);
    char date[64];
    rfc5322_date(when, date, sizeof(date));
    const char *from = names[rnd(&st, NAME_COUNT)];
    char addr[64];
    size_t k = 0;
    for (const char *p = from; *p != '\0' && k + 1 < sizeof(addr); p++)
        addr[k++] = *p == ' ' ? '.' : (char)(*p | 0x20);
    addr[k] = '\0';
    uint64_t id = splitmix(&st);
    buf_reset(out);
    buf_printf(out,
               "Return-Path: <%s@example.org>\r\n"
               "Received: from mail%u.example.org (mail%u.example.org [192.0.2.%u])\r\n"
               "\tby mx.example.net (Petrel) with ESMTPS id %016llx\r\n"
               "\tfor <%s@example.net>; %s\r\n"
               "Message-ID: <%016llx.%u@example.org>\r\n"
               "Date: %s\r\n"
               "From: \"%s\" <%s@example.org>\r\n"
               "To: %s@example.net\r\n",
               addr, index % 7, index % 7, 10 + index % 7, (unsigned long long)id, user, date,
               (unsigned long long)id, index, date, from, addr, user);
    buf_printf(out, "Subject: %s%s %s %s #%u\r\nMIME-Version: 1.0\r\n",
               rnd(&st, 3) == 0 ? "Re: " : "", words[rnd(&st, WORD_COUNT)],
               words[rnd(&st, WORD_COUNT)], words[rnd(&st, WORD_COUNT)], index);
    uint32_t r = sizes == SIZES_SMALL ? 0 : rnd(&st, 100);
    if (r < 55) {
        buf_append_str(out, "Content-Type: text/plain; charset=utf-8\r\n"
                            "Content-Transfer-Encoding: 7bit\r\n\r\n");
        text_lines(out, &st, rnd_between(&st, 300, sizes == SIZES_SMALL ? 3000 : 4000));
        return when;
    }
    char boundary[48];
    snprintf(boundary, sizeof(boundary), "=_petrel_%016llx", (unsigned long long)splitmix(&st));
    bool alternative = r < 85;
    buf_printf(out,
               "Content-Type: multipart/%s; boundary=\"%s\"\r\n\r\n"
               "This is a multi-part message in MIME format.\r\n\r\n"
               "--%s\r\nContent-Type: text/plain; charset=utf-8\r\n"
               "Content-Transfer-Encoding: 7bit\r\n\r\n",
               alternative ? "alternative" : "mixed", boundary, boundary);
    size_t text = rnd_between(&st, 1000, 6000);
    text_lines(out, &st, text);
    if (alternative) {
        buf_printf(out,
                   "\r\n--%s\r\nContent-Type: text/html; charset=utf-8\r\n"
                   "Content-Transfer-Encoding: 7bit\r\n\r\n<html><body><p>\r\n",
                   boundary);
        text_lines(out, &st, text + text / 2);
        buf_append_str(out, "</p></body></html>\r\n");
    } else {
        size_t raw = r < 97 ? rnd_between(&st, 15000, 120000) : rnd_between(&st, 150000, 600000);
        buf_printf(out,
                   "\r\n--%s\r\nContent-Type: application/pdf; name=\"doc%u.pdf\"\r\n"
                   "Content-Disposition: attachment; filename=\"doc%u.pdf\"\r\n"
                   "Content-Transfer-Encoding: base64\r\n\r\n",
                   boundary, index, index);
        base64_lines(out, &st, raw);
    }
    buf_printf(out, "\r\n--%s--\r\n", boundary);
    return when;
}

/* ---------- commands and statistics ---------- */

enum kind {
    K_LOGIN,
    K_SELECT,
    K_FETCH_FLAGS,
    K_FETCH_HDR,
    K_FETCH_BODY,
    K_STORE_SEEN,
    K_STORE_UNSEEN,
    K_APPEND,
    K_STORE_DELETED,
    K_EXPUNGE,
    K_NOOP,
    K_IDLE,
    K_LOGOUT,
    K_COUNT
};

static const char *const kind_names[K_COUNT] = {
    "LOGIN",
    "SELECT INBOX",
    "UID FETCH 1:* (FLAGS)",
    "FETCH 20 x HEADER.FIELDS",
    "UID FETCH BODY.PEEK[]",
    "UID STORE +FLAGS \\Seen",
    "UID STORE -FLAGS \\Seen",
    "APPEND (LITERAL+)",
    "UID STORE +\\Deleted",
    "EXPUNGE",
    "NOOP",
    "IDLE + DONE",
    "LOGOUT",
};

struct kind_stats {
    float *lat; /* seconds */
    size_t n, cap;
    unsigned long no, bad, check;
};

static struct kind_stats stats[K_COUNT];
static bool measuring; /* record latencies (load: only inside the window) */
static unsigned long errors_total;
static unsigned long errors_printed;

static void stat_add(enum kind k, double secs)
{
    struct kind_stats *s = &stats[k];
    s->lat = xgrow(s->lat, &s->cap, s->n + 1, sizeof(float));
    s->lat[s->n++] = (float)secs;
}

/* ---------- connections ---------- */

#define RECENT_LINES 4
#define RECENT_LEN 200

enum conn_state { CS_NONE, CS_CONNECTING, CS_GREETING, CS_READY, CS_WAITING, CS_CLOSED };

struct conn {
    int fd;
    size_t index;      /* connection number */
    size_t user_index; /* into the users file */
    enum conn_state state;
    char *in;
    size_t in_len, in_cap;
    struct buf out;
    size_t out_off;
    uint64_t literal_left; /* bytes of a server literal still to skip */
    bool continuation;     /* the next line continues a line cut by a literal */
    /* the command in flight */
    enum kind kind;
    char tag[16];
    unsigned tag_seq;
    double sent_at;
    bool idle_plus_seen;
    char cmd_text[RECENT_LEN];
    char recent[RECENT_LINES][RECENT_LEN];
    unsigned recent_n;
    /* what the responses said */
    uint32_t exists;
    uint32_t fetch_lines;
    uint32_t expunge_lines;
    int64_t body_literal;
    uint32_t append_uid;
    bool bye;
    /* what the command expects */
    uint32_t expect_fetch;
    int64_t expect_literal;
    uint32_t expect_expunge;
    /* mode state */
    uint64_t rng;
    unsigned step;
    uint32_t sent_messages; /* setup */
    uint32_t pending[64];   /* load: own appended UIDs not expunged yet */
    size_t pending_n;
    bool force_expunge;
    unsigned long commands; /* load: mix commands answered inside the window */
    bool retired;           /* logins: closed after the window, not replaced */
};

static const char *server_addr;
static struct net_addr server_na;
static struct bench_credential *users;
static size_t user_count;

static void conn_error(struct conn *c, const char *what, const char *line, size_t len)
{
    errors_total++;
    if (errors_printed++ >= 20)
        return;
    fprintf(stderr, "imap-bench: ERROR conn %zu (user %s) %s\n  C: %s\n", c->index,
            users[c->user_index].user, what, c->cmd_text[0] != '\0' ? c->cmd_text : "(none)");
    for (unsigned i = 0; i < c->recent_n && i < RECENT_LINES; i++) {
        unsigned slot =
            (c->recent_n - (c->recent_n < RECENT_LINES ? c->recent_n : RECENT_LINES) + i) %
            RECENT_LINES;
        fprintf(stderr, "  S: %s\n", c->recent[slot]);
    }
    if (line != NULL)
        fprintf(stderr, "  S: %.*s\n", (int)(len < 400 ? len : 400), line);
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = CS_CLOSED;
}

static void conn_start(struct conn *c)
{
    c->fd = socket(server_na.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0) {
        fprintf(stderr, "imap-bench: socket: %s\n", strerror(errno));
        exit(2);
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->state = CS_CONNECTING;
    if (connect(c->fd, (struct sockaddr *)&server_na.ss, server_na.len) != 0 &&
        errno != EINPROGRESS) {
        fprintf(stderr, "imap-bench: cannot connect to %s: %s\n", server_addr, strerror(errno));
        exit(2);
    }
}

/* The command queued from c->out.data[start] is in flight: reset what its
 * responses will be compared with. */
static void begin_cmd(struct conn *c, enum kind k, size_t start)
{
    size_t first = strcspn(c->out.data + start, "\r\n");
    snprintf(c->cmd_text, sizeof(c->cmd_text), "%.*s", (int)first, c->out.data + start);
    c->kind = k;
    c->state = CS_WAITING;
    c->sent_at = now_s();
    c->recent_n = 0;
    c->fetch_lines = c->expunge_lines = 0;
    c->body_literal = -1;
    c->append_uid = 0;
    c->idle_plus_seen = false;
    c->expect_fetch = UINT32_MAX;
    c->expect_literal = -1;
    c->expect_expunge = UINT32_MAX;
}

/* Queues a command: `fmt` is everything after the tag (CRLF added). */
static void send_cmd(struct conn *c, enum kind k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void send_cmd(struct conn *c, enum kind k, const char *fmt, ...)
{
    snprintf(c->tag, sizeof(c->tag), "c%u", ++c->tag_seq);
    size_t start = c->out.len;
    buf_printf(&c->out, "%s ", c->tag);
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(&c->out, fmt, ap);
    va_end(ap);
    buf_append_str(&c->out, "\r\n");
    begin_cmd(c, k, start);
}

static bool flush_out(struct conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t w = write(c->fd, c->out.data + c->out_off, c->out.len - c->out_off);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return true;
            conn_error(c, "write failed", strerror(errno), strlen(strerror(errno)));
            conn_close(c);
            return false;
        }
        c->out_off += (size_t)w;
    }
    buf_reset(&c->out);
    c->out_off = 0;
    return true;
}

/* Mode callbacks. */
struct mode {
    void (*ready)(struct conn *c); /* greeted, nothing in flight: send something (or not) */
    void (*done)(struct conn *c, bool ok, const char *line, size_t len); /* tagged reply */
};
static const struct mode *mode;

static void remember(struct conn *c, const char *line, size_t len)
{
    char *slot = c->recent[c->recent_n++ % RECENT_LINES];
    size_t n = len < RECENT_LEN - 1 ? len : RECENT_LEN - 1;
    memcpy(slot, line, n);
    slot[n] = '\0';
}

static bool starts_with(const char *line, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && strncasecmp(line, prefix, n) == 0;
}

static void handle_line(struct conn *c, const char *line, size_t len, int64_t literal)
{
    if (c->state == CS_GREETING) {
        if (starts_with(line, len, "* OK")) {
            c->state = CS_READY;
        } else {
            conn_error(c, "bad greeting", line, len);
            conn_close(c);
        }
        return;
    }
    if (starts_with(line, len, "+")) {
        if (c->state == CS_WAITING && c->kind == K_IDLE && !c->idle_plus_seen) {
            c->idle_plus_seen = true;
            buf_append_str(&c->out, "DONE\r\n");
            return;
        }
        conn_error(c, "unexpected continuation request", line, len);
        return;
    }
    if (starts_with(line, len, "* ")) {
        remember(c, line, len);
        const char *p = line + 2;
        if (starts_with(p, len - 2, "BYE")) {
            c->bye = true;
            if (c->kind != K_LOGOUT)
                conn_error(c, "unexpected BYE", line, len);
            return;
        }
        char *end;
        unsigned long n = strtoul(p, &end, 10);
        if (end == p || *end != ' ')
            return;
        size_t rest = len - (size_t)(end + 1 - line);
        if (starts_with(end + 1, rest, "EXISTS")) {
            c->exists = (uint32_t)n;
        } else if (starts_with(end + 1, rest, "EXPUNGE")) {
            c->exists--;
            c->expunge_lines++;
        } else if (starts_with(end + 1, rest, "FETCH")) {
            c->fetch_lines++;
            if (literal >= 0 && memmem(line, len, "BODY[]", 6) != NULL)
                c->body_literal = literal;
        }
        return;
    }
    size_t tl = strlen(c->tag);
    if (c->state == CS_WAITING && len > tl && strncmp(line, c->tag, tl) == 0 && line[tl] == ' ') {
        const char *status = line + tl + 1;
        size_t sl = len - tl - 1;
        bool ok = starts_with(status, sl, "OK");
        double lat = now_s() - c->sent_at;
        if (!ok) {
            if (starts_with(status, sl, "NO"))
                stats[c->kind].no++;
            else
                stats[c->kind].bad++;
            conn_error(c, "command failed", line, len);
        } else {
            const char *why = NULL;
            if (c->expect_fetch != UINT32_MAX && c->fetch_lines != c->expect_fetch)
                why = "wrong number of FETCH responses";
            else if (c->expect_literal >= 0 && c->body_literal != c->expect_literal)
                why = "BODY[] literal has the wrong size";
            else if (c->expect_expunge != UINT32_MAX && c->expunge_lines != c->expect_expunge)
                why = "wrong number of EXPUNGE responses";
            if (why != NULL) {
                char detail[160];
                snprintf(detail, sizeof(detail),
                         "%s (FETCH lines %u, expected %d; BODY[] literal %lld, expected %lld; "
                         "EXPUNGE lines %u)",
                         why, c->fetch_lines, (int)c->expect_fetch, (long long)c->body_literal,
                         (long long)c->expect_literal, c->expunge_lines);
                stats[c->kind].check++;
                conn_error(c, detail, line, len);
                ok = false;
            }
        }
        if (measuring)
            stat_add(c->kind, lat);
        if (c->kind == K_APPEND) {
            const char *a = memmem(line, len, "[APPENDUID ", 11);
            unsigned long v = 0, uid = 0;
            if (a != NULL && sscanf(a + 11, "%lu %lu", &v, &uid) == 2)
                c->append_uid = (uint32_t)uid;
        }
        c->state = CS_READY;
        mode->done(c, ok, line, len);
        return;
    }
    conn_error(c, "unexpected line", line, len);
}

/* Splits what arrived into lines, skipping the bytes of literals. */
static void process_input(struct conn *c)
{
    size_t pos = 0;
    while (c->state != CS_CLOSED) {
        if (c->literal_left > 0) {
            size_t take = c->in_len - pos;
            if (take > c->literal_left)
                take = (size_t)c->literal_left;
            pos += take;
            c->literal_left -= take;
            if (c->literal_left > 0)
                break;
            continue;
        }
        char *lf = memchr(c->in + pos, '\n', c->in_len - pos);
        if (lf == NULL)
            break;
        char *line = c->in + pos;
        size_t len = (size_t)(lf - line);
        pos += len + 1;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        bool cont = c->continuation;
        c->continuation = false;
        int64_t literal = -1;
        if (len > 2 && line[len - 1] == '}') {
            size_t i = len - 2;
            while (i > 0 && line[i] >= '0' && line[i] <= '9')
                i--;
            if (line[i] == '{' && i + 1 < len - 1) {
                literal = strtoll(line + i + 1, NULL, 10);
                c->literal_left = (uint64_t)literal;
                c->continuation = true;
            }
        }
        if (!cont)
            handle_line(c, line, len, literal);
    }
    if (c->state == CS_CLOSED)
        return;
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
}

static void conn_readable(struct conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            c->in_cap = c->in_cap * 2 + 65536;
            c->in = xrealloc(c->in, c->in_cap);
        }
        ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (r <= 0) {
            if (!(c->kind == K_LOGOUT && c->bye))
                conn_error(c, r == 0 ? "connection closed by the server" : "read failed", NULL, 0);
            conn_close(c);
            return;
        }
        c->in_len += (size_t)r;
        process_input(c);
        if (c->state == CS_CLOSED)
            return;
        if ((size_t)r < 65536)
            return;
    }
}

static struct conn *conns;
static size_t conn_count;
static struct pollfd *pfds;
static size_t *pfd_conn;

/* One round: lets idle connections send, polls, reads and writes. */
static void run_once(int timeout_ms)
{
    for (size_t i = 0; i < conn_count; i++) {
        if (conns[i].state == CS_READY)
            mode->ready(&conns[i]);
    }
    size_t n = 0;
    for (size_t i = 0; i < conn_count; i++) {
        struct conn *c = &conns[i];
        if (c->fd < 0)
            continue;
        if (c->out.len > c->out_off && c->state != CS_CONNECTING)
            flush_out(c);
        if (c->fd < 0)
            continue;
        pfds[n].fd = c->fd;
        pfds[n].events =
            (short)(c->state == CS_CONNECTING || c->out.len > c->out_off ? POLLOUT : POLLIN);
        if (c->state != CS_CONNECTING)
            pfds[n].events |= POLLIN;
        pfds[n].revents = 0;
        pfd_conn[n] = i;
        n++;
    }
    if (n == 0)
        return;
    int r = poll(pfds, (nfds_t)n, timeout_ms);
    if (r < 0) {
        if (errno == EINTR)
            return;
        perror("poll");
        exit(2);
    }
    for (size_t k = 0; k < n && r > 0; k++) {
        if (pfds[k].revents == 0)
            continue;
        struct conn *c = &conns[pfd_conn[k]];
        if (c->state == CS_CONNECTING) {
            int e = 0;
            socklen_t el = sizeof(e);
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el);
            if (e != 0) {
                conn_error(c, "connect failed", strerror(e), strlen(strerror(e)));
                conn_close(c);
                continue;
            }
            c->state = CS_GREETING;
            continue;
        }
        if (pfds[k].revents & POLLOUT)
            flush_out(c);
        if (c->fd >= 0 && (pfds[k].revents & (POLLIN | POLLHUP | POLLERR)))
            conn_readable(c);
    }
}

static void conns_alloc(size_t n)
{
    conn_count = n;
    conns = xcalloc(n, sizeof(*conns));
    pfds = xcalloc(n, sizeof(*pfds));
    pfd_conn = xcalloc(n, sizeof(*pfd_conn));
    for (size_t i = 0; i < n; i++) {
        conns[i].fd = -1;
        conns[i].index = i;
        conns[i].user_index = i % user_count;
        conns[i].rng = 0x1234567ULL + i * 7919;
    }
}

static size_t count_state(enum conn_state st)
{
    size_t n = 0;
    for (size_t i = 0; i < conn_count; i++)
        n += conns[i].state == st;
    return n;
}

/* Gives the closed slot `c` to user `user_index`, as a new connection. */
static void conn_restart(struct conn *c, size_t user_index)
{
    free(c->in);
    buf_free(&c->out);
    size_t idx = c->index;
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->index = idx;
    c->user_index = user_index;
    conn_start(c);
}

static void send_login(struct conn *c)
{
    const struct bench_credential *u = &users[c->user_index];
    send_cmd(c, K_LOGIN, "LOGIN %s %s", u->user, u->password);
}

/* ---------- setup ---------- */

#define SETUP_PARALLEL 32
#define SETUP_BATCH 10

static uint32_t setup_messages;
static enum msg_sizes setup_sizes;
static size_t setup_next_user;
static struct buf msg_buf;

static void setup_ready(struct conn *c)
{
    if (c->step == 0) {
        c->step = 1;
        send_login(c);
        return;
    }
    if (c->step == 1) {
        if (c->sent_messages >= setup_messages) {
            c->step = 2;
            send_cmd(c, K_LOGOUT, "LOGOUT");
            return;
        }
        const char *user = users[c->user_index].user;
        snprintf(c->tag, sizeof(c->tag), "c%u", ++c->tag_seq);
        size_t start = c->out.len;
        buf_printf(&c->out, "%s APPEND INBOX", c->tag);
        for (unsigned b = 0; b < SETUP_BATCH && c->sent_messages < setup_messages; b++) {
            uint32_t i = c->sent_messages++;
            time_t when = gen_message(c->user_index, i, user, setup_sizes, &msg_buf);
            char idate[48];
            imap_date(when, idate, sizeof(idate));
            /* 80 % read, some answered or flagged, like a real INBOX */
            uint32_t f = (uint32_t)((c->user_index * 31 + i * 17) % 100);
            const char *flags = f < 20   ? "()"
                                : f < 30 ? "(\\Seen \\Answered)"
                                : f < 35 ? "(\\Seen \\Flagged)"
                                         : "(\\Seen)";
            buf_printf(&c->out, " %s \"%s\" {%zu+}\r\n", flags, idate, msg_buf.len);
            buf_append(&c->out, msg_buf.data, msg_buf.len);
        }
        buf_append_str(&c->out, "\r\n");
        begin_cmd(c, K_APPEND, start);
    }
}

static void setup_done(struct conn *c, bool ok, const char *line, size_t len)
{
    (void)line;
    (void)len;
    if (!ok) {
        conn_close(c);
        return;
    }
    if (c->kind == K_LOGOUT) {
        c->step = 3; /* the driver loop gives the slot to the next user */
        conn_close(c);
    }
}

static const struct mode setup_mode = {setup_ready, setup_done};

static int run_setup(uint32_t messages, enum msg_sizes sizes)
{
    setup_messages = messages;
    setup_sizes = sizes;
    size_t parallel = user_count < SETUP_PARALLEL ? user_count : SETUP_PARALLEL;
    conns_alloc(parallel);
    mode = &setup_mode;
    measuring = false;
    double start = now_s();
    for (size_t i = 0; i < parallel; i++) {
        conns[i].user_index = i;
        conn_start(&conns[i]);
    }
    setup_next_user = parallel;
    while (count_state(CS_CLOSED) < conn_count || setup_next_user < user_count) {
        run_once(1000);
        for (size_t i = 0; i < conn_count && setup_next_user < user_count; i++) {
            struct conn *c = &conns[i];
            if (c->state != CS_CLOSED)
                continue;
            if (c->step != 3) {
                setup_next_user = user_count; /* failed: stop handing out users */
                break;
            }
            conn_restart(c, setup_next_user++);
        }
    }
    printf("setup: users=%zu messages_per_user=%u sizes=%s seconds=%.1f errors=%lu\n", user_count,
           messages, sizes == SIZES_SMALL ? "small" : "mixed", now_s() - start, errors_total);
    return errors_total == 0 ? 0 : 1;
}

/* ---------- load ---------- */

static uint32_t load_messages; /* pre-filled messages: UIDs 1..load_messages */
static size_t *msg_sizes;      /* [conn][message] sizes, for BODY[] checks */
static bool load_started, load_stopping;
static double load_start, load_end;
static unsigned long load_commands;
static unsigned long load_fixed; /* IMAP_BENCH_COMMANDS: commands per connection, 0: timed */

/* IMAP_BENCH_HOOK_START / _STOP: a shell command run when every connection
 * is logged in and selected, and when the last command of the window was
 * answered (bench/imap-cpu.sh zeroes and dumps callgrind's counters there). */
static void run_hook(const char *name)
{
    const char *cmd = getenv(name);
    if (cmd == NULL || *cmd == '\0')
        return;
    fflush(stdout);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "imap-bench: %s (%s) exited %d\n", name, cmd, rc);
}

/* Fixed-count mode: every connection answered its commands and has
 * nothing in flight (closed ones count as finished: they are errors). */
static bool load_all_finished(void)
{
    for (size_t i = 0; i < conn_count; i++) {
        const struct conn *c = &conns[i];
        if (c->state == CS_CLOSED)
            continue;
        if (c->state != CS_READY || c->commands < load_fixed || c->force_expunge)
            return false;
    }
    return true;
}

/* The mix: weights per 100 commands. IMAP_BENCH_MIX="name=weight,..."
 * replaces it (names below), e.g. "noop=1" to measure one command alone. */
static struct {
    enum kind kind;
    unsigned weight;
} mix[] = {
    {K_NOOP, 16},       {K_FETCH_HDR, 14},    {K_FETCH_BODY, 14},
    {K_STORE_SEEN, 10}, {K_STORE_UNSEEN, 10}, {K_FETCH_FLAGS, 8},
    {K_APPEND, 6},      {K_STORE_DELETED, 6}, /* followed by EXPUNGE */
    {K_IDLE, 6},        {K_SELECT, 4},
};

static const struct {
    const char *name;
    enum kind kind;
} mix_names[] = {
    {"noop", K_NOOP},       {"headers", K_FETCH_HDR},     {"body", K_FETCH_BODY},
    {"seen", K_STORE_SEEN}, {"unseen", K_STORE_UNSEEN},   {"flags", K_FETCH_FLAGS},
    {"append", K_APPEND},   {"expunge", K_STORE_DELETED}, {"idle", K_IDLE},
    {"select", K_SELECT},
};

static void mix_from_env(void)
{
    const char *env = getenv("IMAP_BENCH_MIX");
    if (env == NULL || *env == '\0')
        return;
    for (size_t i = 0; i < sizeof(mix) / sizeof(mix[0]); i++)
        mix[i].weight = 0;
    char *copy = xstrdup(env), *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(tok, '=');
        unsigned w = eq != NULL ? (unsigned)atoi(eq + 1) : 1;
        if (eq != NULL)
            *eq = '\0';
        bool found = false;
        for (size_t n = 0; n < sizeof(mix_names) / sizeof(mix_names[0]); n++) {
            if (strcmp(tok, mix_names[n].name) != 0)
                continue;
            for (size_t i = 0; i < sizeof(mix) / sizeof(mix[0]); i++) {
                if (mix[i].kind == mix_names[n].kind)
                    mix[i].weight = w;
            }
            found = true;
        }
        if (!found) {
            fprintf(stderr, "imap-bench: IMAP_BENCH_MIX: unknown command %s\n", tok);
            exit(2);
        }
    }
    free(copy);
}

static enum kind pick(struct conn *c)
{
    unsigned total = 0;
    for (size_t i = 0; i < sizeof(mix) / sizeof(mix[0]); i++)
        total += mix[i].weight;
    unsigned r = rnd(&c->rng, total);
    for (size_t i = 0; i < sizeof(mix) / sizeof(mix[0]); i++) {
        if (r < mix[i].weight)
            return mix[i].kind;
        r -= mix[i].weight;
    }
    return K_NOOP;
}

static void load_send(struct conn *c, enum kind k)
{
    uint32_t base = c->exists < load_messages ? c->exists : load_messages;
    switch (k) {
    case K_SELECT:
        send_cmd(c, k, "SELECT INBOX");
        break;
    case K_FETCH_FLAGS:
        send_cmd(c, k, "UID FETCH 1:* (FLAGS)");
        c->expect_fetch = c->exists;
        break;
    case K_FETCH_HDR: {
        uint32_t n = base < 20 ? base : 20;
        uint32_t first = 1 + rnd(&c->rng, base - n + 1);
        send_cmd(c, k, "FETCH %u:%u (UID BODY.PEEK[HEADER.FIELDS (From Subject Date)])", first,
                 first + n - 1);
        c->expect_fetch = n;
        break;
    }
    case K_FETCH_BODY: {
        uint32_t uid = 1 + rnd(&c->rng, load_messages);
        send_cmd(c, k, "UID FETCH %u (BODY.PEEK[])", uid);
        c->expect_fetch = 1;
        c->expect_literal = (int64_t)msg_sizes[c->index * load_messages + uid - 1];
        break;
    }
    case K_STORE_SEEN:
    case K_STORE_UNSEEN:
        send_cmd(c, k, "UID STORE %u %cFLAGS (\\Seen)", 1 + rnd(&c->rng, load_messages),
                 k == K_STORE_SEEN ? '+' : '-');
        c->expect_fetch = 1;
        break;
    case K_APPEND: {
        /* a short sent-message copy, 0.3-3 KB */
        gen_message(c->user_index, 1000000 + rnd(&c->rng, 1000000), users[c->user_index].user,
                    SIZES_SMALL, &msg_buf);
        send_cmd(c, k, "APPEND INBOX (\\Seen) {%zu+}\r\n%.*s", msg_buf.len, (int)msg_buf.len,
                 msg_buf.data);
        break;
    }
    case K_STORE_DELETED: {
        struct buf set = {0};
        for (size_t i = 0; i < c->pending_n; i++)
            buf_printf(&set, "%s%u", i > 0 ? "," : "", c->pending[i]);
        send_cmd(c, k, "UID STORE %s +FLAGS.SILENT (\\Deleted)", set.data);
        c->expect_fetch = 0;
        buf_free(&set);
        c->force_expunge = true;
        break;
    }
    case K_EXPUNGE:
        send_cmd(c, k, "EXPUNGE");
        c->expect_expunge = (uint32_t)c->pending_n;
        c->force_expunge = false;
        c->pending_n = 0;
        break;
    case K_IDLE:
        send_cmd(c, k, "IDLE");
        break;
    case K_NOOP:
        send_cmd(c, k, "NOOP");
        break;
    case K_LOGOUT:
        send_cmd(c, k, "LOGOUT");
        break;
    default:
        break;
    }
}

static void load_ready(struct conn *c)
{
    if (c->step == 0) {
        c->step = 1;
        send_login(c);
        return;
    }
    if (c->step == 1) {
        c->step = 2;
        send_cmd(c, K_SELECT, "SELECT INBOX");
        return;
    }
    if (c->step == 2) {
        /* Not measured: leftovers of an interrupted run go, so every later
         * EXPUNGE removes exactly what this run marked. */
        c->step = 4;
        send_cmd(c, K_EXPUNGE, "EXPUNGE");
        return;
    }
    if (c->step == 3) {
        return; /* logged out */
    }
    if (!load_started)
        return;             /* waiting for the others */
    if (c->force_expunge) { /* also after the window: leave no \Deleted behind */
        load_send(c, K_EXPUNGE);
        return;
    }
    if (load_fixed > 0 && c->commands >= load_fixed && !load_stopping)
        return; /* done: waits for the others, then logs out */
    if (load_stopping) {
        c->step = 3;
        send_cmd(c, K_LOGOUT, "LOGOUT");
        return;
    }
    enum kind k = pick(c);
    if (k == K_STORE_DELETED && c->pending_n == 0)
        k = K_APPEND;
    if (k == K_APPEND && c->pending_n >= sizeof(c->pending) / sizeof(c->pending[0]))
        k = K_STORE_DELETED;
    load_send(c, k);
}

static void load_done(struct conn *c, bool ok, const char *line, size_t len)
{
    (void)line;
    (void)len;
    if (c->step == 2 && c->kind == K_SELECT && c->exists < load_messages) {
        char what[96];
        snprintf(what, sizeof(what), "INBOX has %u messages, expected at least %u", c->exists,
                 load_messages);
        conn_error(c, what, NULL, 0);
    }
    if (load_started && !load_stopping && c->kind != K_LOGOUT) {
        load_commands++;
        c->commands++;
    }
    if (c->kind == K_APPEND && ok) {
        if (c->append_uid == 0)
            conn_error(c, "APPEND without APPENDUID", line, len);
        else if (c->pending_n < sizeof(c->pending) / sizeof(c->pending[0]))
            c->pending[c->pending_n++] = c->append_uid;
    }
    if (c->kind == K_LOGOUT)
        conn_close(c);
}

static const struct mode load_mode = {load_ready, load_done};

static void print_stats(double elapsed)
{
    printf("%-26s %9s %9s %8s %8s %8s %6s\n", "command", "count", "per_s", "p50_ms", "p99_ms",
           "max_ms", "errors");
    size_t total = 0;
    for (int k = 0; k < K_COUNT; k++) {
        struct kind_stats *s = &stats[k];
        unsigned long err = s->no + s->bad + s->check;
        if (s->n == 0 && err == 0)
            continue;
        qsort(s->lat, s->n, sizeof(float), cmp_float);
        double p50 = s->n ? s->lat[s->n / 2] * 1e3 : 0;
        double p99 = s->n ? s->lat[(size_t)((double)s->n * 0.99)] * 1e3 : 0;
        double mx = s->n ? s->lat[s->n - 1] * 1e3 : 0;
        printf("%-26s %9zu %9.0f %8.3f %8.3f %8.3f %6lu\n", kind_names[k], s->n,
               (double)s->n / elapsed, p50, p99, mx, err);
        if (k != K_LOGIN && k != K_LOGOUT)
            total += s->n;
    }
    float *all = xmalloc((total + 1) * sizeof(float));
    size_t n = 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (k == K_LOGIN || k == K_LOGOUT)
            continue;
        memcpy(all + n, stats[k].lat, stats[k].n * sizeof(float));
        n += stats[k].n;
    }
    if (n > 0) {
        qsort(all, n, sizeof(float), cmp_float);
        printf("%-26s %9zu %9.0f %8.3f %8.3f %8.3f\n", "all (mix)", n, (double)n / elapsed,
               all[n / 2] * 1e3, all[(size_t)((double)n * 0.99)] * 1e3, all[n - 1] * 1e3);
    }
    free(all);
}

static int run_load(uint32_t messages, double seconds, size_t clients)
{
    load_messages = messages;
    mix_from_env();
    const char *fixed = getenv("IMAP_BENCH_COMMANDS");
    load_fixed = fixed != NULL ? strtoul(fixed, NULL, 10) : 0;
    conns_alloc(clients);
    mode = &load_mode;
    /* Sizes of every pre-filled message, for the BODY[] check. */
    msg_sizes = xcalloc(clients * messages, sizeof(size_t));
    for (size_t i = 0; i < clients; i++) {
        for (uint32_t m = 0; m < messages; m++) {
            gen_message(conns[i].user_index, m, users[conns[i].user_index].user, SIZES_MIXED,
                        &msg_buf);
            msg_sizes[i * messages + m] = msg_buf.len;
        }
    }
    measuring = true; /* LOGIN and the first SELECT are reported apart */
    double t0 = now_s();
    for (size_t i = 0; i < clients; i++)
        conn_start(&conns[i]);
    while (!load_started) {
        run_once(100);
        size_t ready = 0;
        for (size_t i = 0; i < clients; i++)
            ready += conns[i].step == 4 && conns[i].state == CS_READY;
        if (ready + count_state(CS_CLOSED) == clients)
            break;
        if (now_s() - t0 > 120) {
            fprintf(stderr, "imap-bench: clients not ready after 120 s\n");
            return 1;
        }
    }
    if (count_state(CS_CLOSED) > 0 || errors_total > 0) {
        fprintf(stderr, "imap-bench: %zu clients failed to log in and select\n",
                count_state(CS_CLOSED));
        return 1;
    }
    struct kind_stats login = stats[K_LOGIN];
    memset(&stats[K_LOGIN], 0, sizeof(stats[K_LOGIN]));
    free(stats[K_SELECT].lat);
    memset(&stats[K_SELECT], 0, sizeof(stats[K_SELECT]));
    free(stats[K_EXPUNGE].lat);
    memset(&stats[K_EXPUNGE], 0, sizeof(stats[K_EXPUNGE]));
    double login_secs = now_s() - t0;
    run_hook("IMAP_BENCH_HOOK_START");
    load_started = true;
    load_start = now_s();
    load_end = load_start + seconds;
    double cpu0 = cpu_seconds();
    if (load_fixed > 0) {
        /* SECONDS is only a limit here: the window ends with the last answer. */
        while (!load_all_finished() && now_s() < load_end)
            run_once(50);
        if (!load_all_finished())
            fprintf(stderr, "imap-bench: %lu commands per connection not done in %.0f s\n",
                    load_fixed, seconds);
        load_end = now_s();
    } else {
        while (now_s() < load_end)
            run_once(50);
    }
    double client_cpu = cpu_seconds() - cpu0;
    run_hook("IMAP_BENCH_HOOK_STOP");
    load_stopping = true;
    double stop = now_s();
    /* In-flight commands finish; then every client logs out. */
    while (count_state(CS_CLOSED) < clients && now_s() - stop < 30)
        run_once(100);
    double elapsed = load_end - load_start;
    measuring = false;
    size_t logged_out = count_state(CS_CLOSED);
    /* Commands that completed after the window closed are counted too
     * (one per client at most); the rate uses the window. */
    free(stats[K_LOGOUT].lat);
    memset(&stats[K_LOGOUT], 0, sizeof(stats[K_LOGOUT]));
    qsort(login.lat, login.n, sizeof(float), cmp_float);
    printf("clients=%zu seconds=%.2f commands=%lu rate=%.0f errors=%lu "
           "login_all_s=%.3f login_p50_ms=%.3f login_p99_ms=%.3f\n",
           clients, elapsed, load_commands, (double)load_commands / elapsed, errors_total,
           login_secs, login.n ? login.lat[login.n / 2] * 1e3 : 0,
           login.n ? login.lat[(size_t)((double)login.n * 0.99)] * 1e3 : 0);
    print_stats(elapsed);
    /* The generator shares the machine with petreld: what it costs is CPU
     * petreld did not get. */
    printf("client CPU %.1f s (%.0f %% of one core), %.1f us per command\n", client_cpu,
           100.0 * client_cpu / elapsed,
           load_commands > 0 ? client_cpu * 1e6 / (double)load_commands : 0.0);
    if (logged_out < clients)
        fprintf(stderr, "imap-bench: %zu clients did not finish LOGOUT\n", clients - logged_out);
    free(login.lat);
    return errors_total == 0 && logged_out == clients ? 0 : 1;
}

/* ---------- login cycles ---------- */

static size_t logins_next_user;

static void logins_ready(struct conn *c)
{
    if (c->step == 0) {
        c->step = 1;
        send_login(c);
    } else if (c->step == 1) {
        c->step = 2;
        send_cmd(c, K_LOGOUT, "LOGOUT");
    }
}

static void logins_done(struct conn *c, bool ok, const char *line, size_t len)
{
    (void)line;
    (void)len;
    if (!ok)
        conn_close(c); /* counted as an error by handle_line */
    else if (c->kind == K_LOGOUT)
        c->step = 3; /* the server closes first (no TIME_WAIT here): then done */
}

static const struct mode logins_mode = {logins_ready, logins_done};


static int run_logins(double seconds, size_t concurrency)
{
    raise_fd_limit(concurrency + 64);
    mode = &logins_mode;
    conns_alloc(concurrency);
    for (size_t i = 0; i < concurrency; i++) {
        conns[i].user_index = logins_next_user++ % user_count;
        conn_start(&conns[i]);
    }
    measuring = true;
    unsigned long done = 0, failed = 0;
    double start = now_s(), end = start + seconds;
    double cpu0 = cpu_seconds();
    bool stopping = false;
    for (;;) {
        run_once(100);
        double now = now_s();
        stopping = stopping || now >= end;
        size_t open = 0;
        for (size_t i = 0; i < conn_count; i++) {
            struct conn *c = &conns[i];
            if (c->state != CS_CLOSED) {
                open++;
                continue;
            }
            if (c->retired)
                continue; /* finished after the window: left closed */
            if (c->step == 3 && now <= end)
                done++;
            else if (c->step != 3)
                failed++;
            if (stopping)
                c->retired = true;
            else
                conn_restart(c, logins_next_user++ % user_count);
        }
        if (stopping && open == 0)
            break;
        if (stopping && now - end > 30) {
            fprintf(stderr, "imap-bench: %zu login cycles not finished 30 s after the window\n",
                    open);
            failed += open;
            break;
        }
    }
    double client_cpu = cpu_seconds() - cpu0;
    measuring = false;
    struct kind_stats *login = &stats[K_LOGIN];
    qsort(login->lat, login->n, sizeof(float), cmp_float);
    printf("logins=%lu seconds=%.2f rate=%.0f errors=%lu concurrency=%zu login_p50_ms=%.3f "
           "login_p99_ms=%.3f client_cpu_s=%.3f client_us_per_login=%.1f\n",
           done, seconds, (double)done / seconds, failed, concurrency,
           login->n ? login->lat[login->n / 2] * 1e3 : 0,
           login->n ? login->lat[(size_t)((double)login->n * 0.99)] * 1e3 : 0, client_cpu,
           done > 0 ? client_cpu * 1e6 / (double)done : 0.0);
    return failed == 0 && errors_total == 0 ? 0 : 1;
}

/* ---------- idle sessions ---------- */

#define IDLE_WINDOW 100 /* connections opening / commands outstanding at once */

static unsigned idle_phase; /* 1 greet, 2 LOGIN, 3 SELECT, 4 NOOP, 5 LOGOUT */

static void idle_ready(struct conn *c)
{
    if (c->step >= idle_phase)
        return;
    /* the window is enforced by the driver loop */
}

static void idle_done(struct conn *c, bool ok, const char *line, size_t len)
{
    (void)line;
    (void)len;
    if (!ok) {
        conn_close(c);
        return;
    }
    if (c->kind == K_LOGOUT)
        conn_close(c);
}

static const struct mode idle_mode = {idle_ready, idle_done};

static void idle_step(struct conn *c, unsigned phase)
{
    c->step = phase;
    switch (phase) {
    case 2:
        send_login(c);
        break;
    case 3:
        send_cmd(c, K_SELECT, "SELECT INBOX");
        break;
    case 4:
        send_cmd(c, K_NOOP, "NOOP");
        break;
    case 5:
        send_cmd(c, K_LOGOUT, "LOGOUT");
        break;
    default:
        break;
    }
}

/* Runs phase `phase` on every connection, IDLE_WINDOW at a time. */
static bool idle_run_phase(unsigned phase)
{
    idle_phase = phase;
    size_t next = 0;
    double t0 = now_s();
    for (;;) {
        size_t busy = 0, done = 0;
        for (size_t i = 0; i < conn_count; i++) {
            struct conn *c = &conns[i];
            if (c->step == phase && (c->state == CS_READY || (phase == 5 && c->state == CS_CLOSED)))
                done++;
            else if (c->step == phase)
                busy++;
            if (c->state == CS_CLOSED && phase != 5)
                return false;
        }
        if (done == conn_count)
            return true;
        while (busy < IDLE_WINDOW && next < conn_count) {
            struct conn *c = &conns[next++];
            if (phase == 1) {
                c->step = 1;
                conn_start(c);
            } else {
                idle_step(c, phase);
            }
            busy++;
        }
        run_once(100);
        if (now_s() - t0 > 300) {
            fprintf(stderr, "imap-bench: phase %u not done after 300 s\n", phase);
            return false;
        }
    }
}

static int run_idle(size_t sessions, long pid)
{
    raise_fd_limit(sessions + 64);
    long rss[6], anon[6];
    const char *label[6] = {"baseline", "connected",    "logged_in",
                            "selected", "noop_checked", "closed"};
    mode = &idle_mode;
    measuring = true;
    /* Warm-up: one full session (first login creates the auth connection,
     * storage objects, metric series) so it is not counted per session. */
    conns_alloc(1);
    for (unsigned p = 1; p <= 5; p++) {
        if (!idle_run_phase(p)) {
            fprintf(stderr, "imap-bench: warm-up session failed\n");
            return 1;
        }
    }
    free(conns);
    free(pfds);
    free(pfd_conn);
    for (int k = 0; k < K_COUNT; k++) {
        free(stats[k].lat);
        memset(&stats[k], 0, sizeof(stats[k]));
    }
    sleep_s(1.0);
    if (!read_rss(pid, &rss[0], &anon[0])) {
        fprintf(stderr, "imap-bench: cannot read /proc/%ld/status\n", pid);
        return 2;
    }
    conns_alloc(sessions);
    double t0 = now_s();
    for (unsigned p = 1; p <= 5; p++) {
        double ts = now_s();
        if (!idle_run_phase(p)) {
            fprintf(stderr, "imap-bench: phase %s failed (%zu sessions closed)\n", label[p],
                    count_state(CS_CLOSED));
            return 1;
        }
        if (p == 3) {
            sleep_s(2.0); /* let anything deferred settle */
            /* IMAP_BENCH_HOLD=SECONDS: keep the sessions open that much
             * longer, for measurements from outside (pmap, malloc_stats). */
            const char *hold = getenv("IMAP_BENCH_HOLD");
            if (hold != NULL && atof(hold) > 0) {
                printf("holding %zu selected sessions for %.0f s\n", sessions, atof(hold));
                fflush(stdout);
                sleep_s(atof(hold));
            }
        }
        if (p == 5)
            sleep_s(1.0);
        read_rss(pid, &rss[p], &anon[p]);
        printf("phase %-13s %6.2f s  VmRSS %8ld KiB  RssAnon %8ld KiB\n", label[p], now_s() - ts,
               rss[p], anon[p]);
        if (p == 1) /* the baseline row is printed after the first phase so the columns line up */
            printf("phase %-13s %6s    VmRSS %8ld KiB  RssAnon %8ld KiB\n", label[0], "", rss[0],
                   anon[0]);
    }
    double per = (double)(rss[3] - rss[0]) / (double)sessions;
    printf(
        "sessions=%zu seconds=%.1f errors=%lu rss_per_session_kib=%.1f "
        "anon_per_session_kib=%.1f unauth_per_session_kib=%.1f login_per_session_kib=%.1f "
        "select_per_session_kib=%.1f after_close_kib=%ld\n",
        sessions, now_s() - t0, errors_total, per, (double)(anon[3] - anon[0]) / (double)sessions,
        (double)(rss[1] - rss[0]) / (double)sessions, (double)(rss[2] - rss[1]) / (double)sessions,
        (double)(rss[3] - rss[2]) / (double)sessions, rss[5] - rss[0]);
    print_stats(now_s() - t0);
    return errors_total == 0 ? 0 : 1;
}

/* ---------- main ---------- */

static void usage(void)
{
    fprintf(stderr, "usage: imap-bench setup ADDR USERS_FILE MESSAGES mixed|small\n"
                    "       imap-bench load ADDR USERS_FILE MESSAGES SECONDS [CLIENTS]\n"
                    "       imap-bench logins ADDR USERS_FILE SECONDS [CONCURRENCY]\n"
                    "       imap-bench idle ADDR USERS_FILE SESSIONS PID\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 5)
        usage();
    const char *cmd = argv[1];
    server_addr = argv[2];
    struct petrel_error err;
    if (!net_addr_parse(server_addr, &server_na, &err)) {
        fprintf(stderr, "imap-bench: %s\n", err.message);
        return 2;
    }
    user_count = bench_users_load("imap-bench", argv[3], &users);
    int rc;
    if (strcmp(cmd, "setup") == 0 && argc == 6) {
        long messages = atol(argv[4]);
        if (messages < 1)
            usage();
        rc = run_setup((uint32_t)messages,
                       strcmp(argv[5], "small") == 0 ? SIZES_SMALL : SIZES_MIXED);
    } else if (strcmp(cmd, "load") == 0 && (argc == 6 || argc == 7)) {
        long messages = atol(argv[4]);
        double seconds = atof(argv[5]);
        long clients = argc == 7 ? atol(argv[6]) : (long)user_count;
        if (messages < 20 || seconds <= 0 || clients < 1 || (size_t)clients > user_count)
            usage();
        raise_fd_limit((size_t)clients + 64);
        rc = run_load((uint32_t)messages, seconds, (size_t)clients);
    } else if (strcmp(cmd, "logins") == 0 && (argc == 5 || argc == 6)) {
        double seconds = atof(argv[4]);
        long concurrency = argc == 6 ? atol(argv[5]) : 64;
        if (seconds <= 0 || concurrency < 1)
            usage();
        rc = run_logins(seconds, (size_t)concurrency);
    } else if (strcmp(cmd, "idle") == 0 && argc == 6) {
        long sessions = atol(argv[4]);
        long pid = atol(argv[5]);
        if (sessions < 1 || pid < 1)
            usage();
        rc = run_idle((size_t)sessions, pid);
    } else {
        usage();
    }
    buf_free(&msg_buf);
    return rc;
}
