/* The LMTP commands (RFC 2033, RFC 5321): LHLO, MAIL, RCPT (userdb lookup
 * through the auth service), DATA (one reply per recipient once the
 * delivery threads are done), RSET, NOOP, QUIT, HELP, STARTTLS; VRFY and
 * EXPN are refused, HELO/EHLO/BDAT are not LMTP. */
#include "protocols/lmtp/lmtp-private.h"
#include "protocols/common/mail-forward.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "storage/namespace.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void count_rcpt(struct lmtp_session *s, const char *result)
{
    const char *values[] = {result};
    metric_add(metric_series_get(lmtp_server_context(s->server)->m.recipients, values), 1);
}

static const struct lmtp_server_ctx *ctx_of(const struct lmtp_session *s)
{
    return lmtp_server_context(s->server);
}

/* ---------- LHLO ---------- */

static void cmd_lhlo(struct lmtp_session *s, const struct lmtp_command *cmd)
{
    const struct lmtp_server_ctx *ctx = ctx_of(s);
    free(s->helo);
    s->helo = xstrndup(cmd->arg.ptr, cmd->arg.len);
    lmtp_session_reset_transaction(s);
    char size[48];
    snprintf(size, sizeof(size), "SIZE %lld", (long long)ctx->cfg->max_message_size);
    const char *lines[8];
    size_t n = 0;
    lines[n++] = ctx->hostname;
    lines[n++] = "PIPELINING";
    lines[n++] = "ENHANCEDSTATUSCODES";
    lines[n++] = "8BITMIME";
    lines[n++] = "SMTPUTF8";
    lines[n++] = size;
    if (ctx->tls != NULL && !s->tls)
        lines[n++] = "STARTTLS";
    if (s->trusted)
        lines[n++] = "XCLIENT ADDR PORT SESSION TTL";
    lmtp_reply_lines(s, 250, lines, n);
}

/* ---------- MAIL ---------- */

static void cmd_mail(struct lmtp_session *s, const struct lmtp_command *cmd)
{
    const struct lmtp_server_ctx *ctx = ctx_of(s);
    if (s->helo == NULL) {
        lmtp_reply_client_error(s, "503 5.5.1 Send LHLO first");
        return;
    }
    if (s->has_mail) {
        lmtp_reply_client_error(s, "503 5.5.1 Nested MAIL command");
        return;
    }
    struct lmtp_mail_params params;
    struct lmtp_reply_error e;
    if (!lmtp_mail_params_parse(cmd, &params, &e)) {
        lmtp_reply_client_error(s, "%d %s %s", e.code, e.enhanced, e.text);
        return;
    }
    if (cmd->path.utf8 && !params.smtputf8) {
        lmtp_reply(s, "553 5.6.7 Non-ASCII address needs SMTPUTF8");
        return;
    }
    if (params.has_size && params.size > (uint64_t)ctx->cfg->max_message_size) {
        lmtp_reply(s, "552 5.3.4 Message size exceeds fixed maximum message size (%lld)",
                   (long long)ctx->cfg->max_message_size);
        return;
    }
    struct buf sender = {0};
    lmtp_path_format(&cmd->path, &sender);
    s->sender = buf_steal(&sender);
    s->smtputf8 = params.smtputf8;
    s->body_8bit = params.body == LMTP_BODY_8BITMIME;
    s->has_mail = true;
    lmtp_reply(s, "250 2.1.0 Sender OK");
}

/* ---------- RCPT ---------- */

/* A copy of a NULL-terminated list of strings. */
static char **strv_dup(char *const *v)
{
    size_t n = 0;
    while (v != NULL && v[n] != NULL)
        n++;
    char **out = xcalloc(n + 1, sizeof(*out));
    for (size_t i = 0; i < n; i++)
        out[i] = xstrdup(v[i]);
    return out;
}

void lmtp_session_rcpt_add(struct lmtp_session *s, struct lmtp_recipient_name *name,
                           const char *username, size_t dup_of)
{
    s->rcpts = xgrow(s->rcpts, &s->rcpt_cap, s->rcpt_count + 1, sizeof(*s->rcpts));
    struct lmtp_rcpt *r = &s->rcpts[s->rcpt_count++];
    r->name = *name;
    memset(name, 0, sizeof(*name));
    r->username = xstrdup(username);
    r->dup_of = dup_of;
    r->quota_rule = NULL;
}

static void rcpt_lookup_done(const struct auth_client_reply *reply, void *arg)
{
    struct lmtp_session *s = arg;
    s->auth_req = NULL;
    struct petrel_error err;
    char addr[300];
    log_quote(addr, sizeof(addr), s->pending.address);
    switch (reply->status) {
    case AUTH_CLIENT_OK:
        if (!user_name_valid(reply->user, USER_NAME_MAX, &err)) {
            /* The userdb has the name, but the storage cannot hold it. */
            log_warn(LMTP_COMPONENT, "recipient refused by storage",
                     "session=%s rcpt=%s error=\"%s\"", s->id, addr, err.message);
            lmtp_reply(s, "550 5.1.1 <%s> User doesn't exist here", s->pending.address);
            count_rcpt(s, "unknown");
            break;
        }
        lmtp_reply(s, "250 2.1.5 <%s> Recipient OK", s->pending.address);
        lmtp_session_rcpt_add(s, &s->pending, reply->user, SIZE_MAX);
        if (reply->userdb != NULL && ctx_of(s)->quota_rules)
            s->rcpts[s->rcpt_count - 1].quota_rule = strv_dup(reply->userdb->quota_rule);
        count_rcpt(s, "accepted");
        break;
    case AUTH_CLIENT_NOT_FOUND:
    case AUTH_CLIENT_FAIL:
        log_info(LMTP_COMPONENT, "unknown recipient", "session=%s rcpt=%s", s->id, addr);
        lmtp_reply(s, "550 5.1.1 <%s> User doesn't exist here", s->pending.address);
        count_rcpt(s, "unknown");
        break;
    default:
        log_warn(LMTP_COMPONENT, "recipient lookup failed", "session=%s rcpt=%s reason=\"%s\"",
                 s->id, addr, reply->reason != NULL ? reply->reason : "?");
        lmtp_reply(s, "451 4.3.0 <%s> Temporary user lookup failure", s->pending.address);
        count_rcpt(s, "tempfail");
        break;
    }
    lmtp_recipient_name_free(&s->pending);
    lmtp_session_resume(s);
}

static void cmd_rcpt(struct lmtp_session *s, const struct lmtp_command *cmd)
{
    const struct lmtp_server_ctx *ctx = ctx_of(s);
    if (!s->has_mail) {
        lmtp_reply_client_error(s, "503 5.5.1 Need MAIL command first");
        return;
    }
    if (cmd->param_count > 0) {
        lmtp_reply_client_error(s, "555 5.5.4 Unsupported parameter");
        count_rcpt(s, "rejected");
        return;
    }
    if (s->rcpt_count >= (size_t)ctx->cfg->max_recipients) {
        lmtp_reply(s, "452 4.5.3 Too many recipients");
        count_rcpt(s, "tempfail");
        return;
    }
    if (cmd->path.utf8 && !s->smtputf8) {
        lmtp_reply(s, "553 5.6.7 Non-ASCII address needs SMTPUTF8");
        count_rcpt(s, "rejected");
        return;
    }
    struct lmtp_recipient_name name;
    lmtp_recipient_name_make(&cmd->path, ctx->cfg->recipient_delimiter, ctx->cfg->username_format,
                             &name);
    /* The same address twice: one delivery, the same answer twice. */
    for (size_t i = 0; i < s->rcpt_count; i++) {
        if (strcmp(s->rcpts[i].name.address, name.address) == 0) {
            lmtp_reply(s, "250 2.1.5 <%s> Recipient OK", name.address);
            char *user = xstrdup(s->rcpts[i].username);
            lmtp_session_rcpt_add(s, &name, user,
                                  s->rcpts[i].dup_of != SIZE_MAX ? s->rcpts[i].dup_of : i);
            free(user);
            count_rcpt(s, "accepted");
            return;
        }
    }
    if (ctx->front != NULL) {
        lmtp_session_park(s);
        ctx->front->rcpt(ctx->front_arg, s, &name);
        return;
    }
    s->pending = name;
    lmtp_session_park(s);
    /* The callback never runs inside auth_client_user (auth-client.h). */
    s->auth_req = auth_client_user(ctx->auth, name.lookup, rcpt_lookup_done, s);
}

/* ---------- DATA ---------- */

static void cmd_data(struct lmtp_session *s)
{
    if (!s->has_mail) {
        lmtp_reply_client_error(s, "503 5.5.1 Need MAIL command first");
        return;
    }
    if (s->rcpt_count == 0) {
        lmtp_reply_client_error(s, "503 5.5.1 No valid recipients");
        return;
    }
    lmtp_spool_free(&s->message);
    lmtp_data_init(&s->data, &s->message.mem, (uint64_t)ctx_of(s)->cfg->max_message_size);
    s->in_data = true;
    lmtp_reply(s, "354 OK, end data with <CR><LF>.<CR><LF>");
}

/* "Sat, 21 Nov 2026 10:00:00 +0000" */
static void rfc5322_date(char *out, size_t size)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    long off = tm.tm_gmtoff / 60;
    char sign = off < 0 ? '-' : '+';
    if (off < 0)
        off = -off;
    snprintf(out, size, "%s, %02d %s %04d %02d:%02d:%02d %c%02ld%02ld", days[tm.tm_wday % 7],
             tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
             tm.tm_sec, sign, off / 60, off % 60);
}

static struct lmtp_delivery *delivery_new(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = ctx_of(s);
    struct lmtp_delivery *d = xcalloc(1, sizeof(*d));
    /* All of it in the spool file (settled at the end), or all in memory. */
    d->fd = s->message.fd;
    s->message.fd = -1;
    d->len = d->fd >= 0 ? (size_t)s->message.filed : s->message.mem.len;
    d->data = d->fd >= 0 ? NULL : buf_steal(&s->message.mem);
    d->return_path = xstrdup(s->sender);
    if (ctx->cfg->add_received_header) {
        char date[64];
        rfc5322_date(date, sizeof(date));
        d->date = xstrdup(date);
        /* The LHLO name is the client's word: keep it printable. */
        struct buf helo = {0};
        for (const char *p = s->helo; *p != '\0' && helo.len < 255; p++)
            buf_append_char(&helo, (*p > ' ' && *p < 0x7f && *p != '(' && *p != ')') ? *p : '_');
        d->received_head =
            xasprintf("Received: from %s (%s)\r\n\tby %s (Petrel) with %s id %s", helo.data,
                      s->peer_ip, ctx->hostname, s->tls ? "LMTPS" : "LMTP", s->id);
        buf_free(&helo);
    }
    /* Duplicates are delivered once: only first occurrences go. */
    d->rcpts = xcalloc(s->rcpt_count, sizeof(*d->rcpts));
    d->quota_rules = ctx->quota_rules;
    for (size_t i = 0; i < s->rcpt_count; i++) {
        struct lmtp_rcpt *r = &s->rcpts[i];
        if (r->dup_of != SIZE_MAX)
            continue;
        struct lmtp_delivery_rcpt *dr = &d->rcpts[d->rcpt_count++];
        dr->address = xstrdup(r->name.address);
        dr->username = xstrdup(r->username);
        dr->quota_rule = r->quota_rule; /* the transaction ends with the delivery */
        r->quota_rule = NULL;
        dr->detail = r->name.detail != NULL ? xstrdup(r->name.detail) : NULL;
    }
    return d;
}

/* The reply for each RCPT in order, from the results of the delivered
 * (first) occurrences. */
static void reply_per_recipient(struct lmtp_session *s, const struct lmtp_delivery *d)
{
    size_t k = 0;
    const struct lmtp_delivery_rcpt **result =
        xcalloc(s->rcpt_count, sizeof(const struct lmtp_delivery_rcpt *));
    for (size_t i = 0; i < s->rcpt_count; i++) {
        const struct lmtp_rcpt *r = &s->rcpts[i];
        result[i] = r->dup_of == SIZE_MAX ? &d->rcpts[k++] : result[r->dup_of];
        const struct lmtp_delivery_rcpt *dr = result[i];
        if (dr->ok)
            lmtp_reply(s, "250 2.0.0 <%s> %s Saved", r->name.address, s->id);
        else if (dr->err.code == PETREL_ERR_UNAVAILABLE)
            lmtp_reply(s, "451 4.3.2 <%s> Service shutting down, try again later", r->name.address);
        else if (dr->err.code == PETREL_ERR_OVER_QUOTA && dr->err.permanent)
            /* A quota refusal retrying cannot cure (one message above
             * quota_mail_size, a folder at its message cap): docs/spec 3
             * "LMTP 552", RFC 3463 5.2.2 mailbox full, in the module's words. */
            lmtp_reply(s, "552 5.2.2 <%s> %s", r->name.address, dr->err.message);
        else if (dr->err.code == PETREL_ERR_OVER_QUOTA)
            /* A storage module's refusal: over quota is temporary (the
             * user may make room; docs/spec 3 "LMTP delivery over quota:
             * 452"), RFC 3463 4.2.2 mailbox full, in the module's words. */
            lmtp_reply(s, "452 4.2.2 <%s> %s", r->name.address, dr->err.message);
        else if (dr->err.code == PETREL_ERR_LIMIT)
            /* A storage limit this message cannot fit (RFC 3463 5.3.4);
             * trying again will not help. */
            lmtp_reply(s, "552 5.3.4 <%s> Message exceeds a storage limit", r->name.address);
        else if (lmtp_delivery_permanent(&dr->err))
            /* A storage module's refusal (an ACL), not a file system's. */
            lmtp_reply(s, "550 5.7.1 <%s> Delivery not authorized", r->name.address);
        else
            lmtp_reply(s, "451 4.3.0 <%s> Temporary failure, message not stored", r->name.address);
    }
    free(result);
}

void lmtp_command_data_done(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = ctx_of(s);
    if (s->data.too_big) {
        log_info(LMTP_COMPONENT, "message too big", "session=%s size=%llu max=%lld", s->id,
                 (unsigned long long)s->data.size, (long long)ctx->cfg->max_message_size);
        const char *values[] = {"permfail"};
        for (size_t i = 0; i < s->rcpt_count; i++) {
            lmtp_reply(s, "552 5.3.4 <%s> Message too big", s->rcpts[i].name.address);
            metric_add(metric_series_get(ctx->m.deliveries, values), 1);
        }
        lmtp_session_reset_transaction(s);
        if (s->stopping)
            lmtp_session_shutdown(s);
        return;
    }
    if (s->message.failed) {
        log_error(LMTP_COMPONENT, "message not spooled", "session=%s error=\"%s\"", s->id,
                  s->message.err.message);
        for (size_t i = 0; i < s->rcpt_count; i++)
            lmtp_reply(s, "451 4.3.0 <%s> Temporary failure, message not stored",
                       s->rcpts[i].name.address);
        lmtp_session_reset_transaction(s);
        if (s->stopping)
            lmtp_session_shutdown(s);
        return;
    }
    if (ctx->front != NULL) {
        lmtp_session_park(s);
        ctx->front->data(ctx->front_arg, s);
        return;
    }
    struct lmtp_delivery *d = delivery_new(s);
    lmtp_session_park(s);
    if (!lmtp_server_submit(s->server, s, d)) {
        log_warn(LMTP_COMPONENT, "delivery queue full", "session=%s", s->id);
        for (size_t i = 0; i < s->rcpt_count; i++)
            lmtp_reply(s, "451 4.3.2 <%s> Server busy, try again later", s->rcpts[i].name.address);
        lmtp_delivery_free(d);
        lmtp_session_reset_transaction(s);
        lmtp_session_unpark(s); /* we are inside process_input */
    }
}

void lmtp_session_delivered(struct lmtp_session *s, struct lmtp_delivery *d)
{
    reply_per_recipient(s, d);
    lmtp_session_transaction_done(s);
}

void lmtp_session_transaction_done(struct lmtp_session *s)
{
    lmtp_session_reset_transaction(s);
    lmtp_session_resume(s);
}

/* ---------- the rest ---------- */

static void cmd_starttls(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = ctx_of(s);
    if (ctx->tls == NULL) {
        lmtp_reply_client_error(s, "502 5.5.1 STARTTLS not available");
        return;
    }
    if (s->tls) {
        lmtp_reply_client_error(s, "503 5.5.1 TLS already active");
        return;
    }
    if (s->has_mail) {
        lmtp_reply_client_error(s, "503 5.5.1 STARTTLS not allowed inside a transaction");
        return;
    }
    lmtp_reply(s, "220 2.0.0 Ready to start TLS");
    /* RFC 3207 4.2: the client starts over with LHLO. */
    free(s->helo);
    s->helo = NULL;
    if (!lmtp_session_starttls(s)) {
        log_warn(LMTP_COMPONENT, "STARTTLS failed", "session=%s", s->id);
        lmtp_session_close_after_output(s);
    }
}

/* ---------- XCLIENT ---------- */

/* Postfix's XCLIENT (www.postfix.org/XCLIENT_README.html), as Dovecot's LMTP
 * proxy sends it: a login proxy in login_trusted_networks passes on the
 * real client's address, which then goes into logs and the Received
 * header. The reply is a new greeting and the client starts over with
 * LHLO, as after STARTTLS. */
static void cmd_xclient(struct lmtp_session *s, const struct lmtp_command *cmd)
{
    if (!s->trusted) {
        lmtp_reply_client_error(s, "550 5.7.0 XCLIENT is allowed only from login_trusted_networks");
        return;
    }
    if (s->has_mail) {
        lmtp_reply_client_error(s, "503 5.5.1 XCLIENT not allowed inside a transaction");
        return;
    }
    struct mail_forward f;
    mail_forward_init(&f);
    const char *why = NULL;
    if (!mail_forward_xclient(&f, MAIL_FORWARD_XTEXT, cmd->arg.ptr, cmd->arg.len, &why)) {
        lmtp_reply_client_error(s, "501 5.5.4 Invalid XCLIENT: %s", why);
        return;
    }
    char was[80];
    snprintf(was, sizeof(was), "%s", s->peer);
    if (f.ip[0] != '\0') {
        snprintf(s->peer_ip, sizeof(s->peer_ip), "%s", f.ip);
        s->peer_port = f.port;
        mail_forward_format_peer(&f, s->peer, sizeof(s->peer));
    }
    if (f.session[0] != '\0')
        snprintf(s->id, sizeof(s->id), "%s", f.session);
    if (f.ttl >= 0)
        s->forwarded_ttl = f.ttl;
    log_debug(LMTP_COMPONENT, "client forwarded", "session=%s proxy=%s peer=%s", s->id, was,
              s->peer);
    free(s->helo);
    s->helo = NULL;
    lmtp_reply(s, "220 %s Petrel LMTP ready", ctx_of(s)->hostname);
}

void lmtp_command_run(struct lmtp_session *s, char *line, size_t len)
{
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    if (!lmtp_parse_command(line, len, &cmd, &e)) {
        if (cmd.verb == LMTP_VERB_RCPT)
            count_rcpt(s, "rejected");
        lmtp_reply_client_error(s, "%d %s %s", e.code, e.enhanced, e.text);
        return;
    }
    switch (cmd.verb) {
    case LMTP_VERB_LHLO:
        cmd_lhlo(s, &cmd);
        break;
    case LMTP_VERB_HELO:
    case LMTP_VERB_EHLO:
        lmtp_reply_client_error(s, "500 5.5.1 This is LMTP: use LHLO");
        break;
    case LMTP_VERB_MAIL:
        cmd_mail(s, &cmd);
        break;
    case LMTP_VERB_RCPT:
        cmd_rcpt(s, &cmd);
        break;
    case LMTP_VERB_DATA:
        cmd_data(s);
        break;
    case LMTP_VERB_BDAT:
        lmtp_reply_client_error(s, "502 5.5.1 BDAT not supported (no CHUNKING)");
        break;
    case LMTP_VERB_RSET:
        lmtp_session_reset_transaction(s);
        lmtp_reply(s, "250 2.0.0 OK");
        break;
    case LMTP_VERB_NOOP:
        lmtp_reply(s, "250 2.0.0 OK");
        break;
    case LMTP_VERB_QUIT:
        lmtp_reply(s, "221 2.0.0 %s Bye", ctx_of(s)->hostname);
        lmtp_session_close_after_output(s);
        break;
    case LMTP_VERB_VRFY:
    case LMTP_VERB_EXPN:
        lmtp_reply(s, "502 5.5.1 %s is disabled", cmd.verb == LMTP_VERB_VRFY ? "VRFY" : "EXPN");
        break;
    case LMTP_VERB_HELP:
        lmtp_reply(s, "214 2.0.0 LHLO MAIL RCPT DATA RSET NOOP QUIT STARTTLS (RFC 2033)");
        break;
    case LMTP_VERB_STARTTLS:
        cmd_starttls(s);
        break;
    case LMTP_VERB_XCLIENT:
        cmd_xclient(s, &cmd);
        break;
    case LMTP_VERB_UNKNOWN:
        break;
    }
}
