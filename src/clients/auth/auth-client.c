/* The auth protocol's client on a libevent loop (auth-client.h,
 * docs/auth-protocol.md), on the line-protocol client core
 * (net/line-client.h), which owns the connection, the backoff and the
 * request tables.
 *
 * Connection: opened by the first request. Requests are written at once,
 * also while the connect is still under way, and matched to replies by id,
 * so replies may come in any order. A connect that fails or does not finish
 * within the timeout, a read or write error, an EOF while requests are out,
 * and a reply that breaks the protocol all take the connection down: every
 * request on it is answered with ERROR "auth service unavailable:
 * <reason>", and the next connect waits out a backoff (100 ms doubling to
 * 5 s, reset by the first reply on a new connection). Until then new
 * requests fail at once, so a dead auth service costs callers nothing. An
 * EOF while nothing is out is the server closing an idle connection: no
 * backoff, the next request reconnects.
 *
 * Deadlines: each request has its own timer. One that passes answers that
 * request with ERROR and leaves the connection up: the server may simply be
 * slow for this one (VERIFY failures are answered after a growing delay),
 * and its late reply is dropped like the reply to a cancelled request. A
 * SASL request waiting for the caller's answer to a challenge has no
 * deadline (the end user is typing; the core's HELD state); the timer
 * starts again with the answer. An ITERATE restarts its timer with every
 * ITEM, so the deadline bounds silence, not the size of the user list.
 * Cancelling a request that holds a challenge answers the challenge with
 * "*", so the service ends the exchange instead of keeping it (and a
 * request slot) until the connection closes.
 *
 * Callbacks never run inside the call that issued the request: failures
 * decided there (backoff, a request over the line limit, a closing client)
 * are queued and answered from the loop. A callback may cancel or issue
 * requests and may free the client: a request is taken out of every table
 * before its final callback runs, and the client is held around callbacks,
 * so a free inside one only finishes once the outermost callback
 * returned. */
#include "clients/auth/auth-client.h"

#include "core/buf.h"
#include "core/xalloc.h"
#include "net/line-client.h"
#include "clients/auth/auth-protocol.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REASON_MAX 400

enum req_kind {
    REQ_USER,
    REQ_VERIFY,
    REQ_SASL,
    REQ_ITERATE,
};

struct auth_client_request {
    struct line_request base; /* first: the core's id, state and deadline */
    struct auth_client *client;
    enum req_kind kind;
    auth_client_cb *cb;
    void *ctx;
    /* How a failure from the loop is answered: ERROR, or FAIL for a request
     * refused before it was sent. */
    enum auth_client_status fail_status;
    /* REQ_ITERATE */
    char **users;
    size_t user_count;
    size_t user_cap;
};

struct auth_client {
    struct line_client *lc;
};

static struct auth_client_request *request_of(struct line_request *base)
{
    return (struct auth_client_request *)base;
}

/* ---------- requests ---------- */

static struct auth_client_request *request_new(struct auth_client *c, enum req_kind kind,
                                               auth_client_cb *cb, void *ctx)
{
    struct auth_client_request *req = xcalloc(1, sizeof(*req));
    line_request_init(c->lc, &req->base);
    req->client = c;
    req->kind = kind;
    req->cb = cb;
    req->ctx = ctx;
    req->fail_status = AUTH_CLIENT_ERROR;
    return req;
}

static void request_free(struct auth_client_request *req)
{
    line_request_cleanup(&req->base);
    for (size_t i = 0; i < req->user_count; i++)
        free(req->users[i]);
    free(req->users);
    free(req);
}

/* Queues `req` to be answered with `status` and `error` from the loop,
 * never from inside the caller's current call. */
static void fail_later(struct auth_client *c, struct auth_client_request *req,
                       enum auth_client_status status, const char *error)
{
    req->fail_status = status;
    line_client_fail_later(c->lc, &req->base, error);
}

static void detach(struct auth_client *c, struct auth_client_request *req)
{
    line_client_detach(c->lc, &req->base);
}

/* ---------- callbacks ---------- */

/* Runs a callback with the client held. False when the client was freed
 * (or is being freed) meanwhile: the caller must not touch it again. */
static bool run_callback(struct auth_client *c, auth_client_cb *cb, void *ctx,
                         const struct auth_client_reply *reply)
{
    struct line_client *lc = c->lc;
    line_client_hold(lc);
    cb(reply, ctx);
    return line_client_drop(lc);
}

/* Gives a request, already out of every table, its final answer and frees
 * it. Returns what run_callback() returns. */
static bool finish(struct auth_client *c, struct auth_client_request *req,
                   const struct auth_client_reply *reply)
{
    bool usable = run_callback(c, req->cb, req->ctx, reply);
    request_free(req);
    return usable;
}

static bool finish_error(struct auth_client *c, struct auth_client_request *req,
                         enum auth_client_status status, const char *reason)
{
    struct auth_client_reply reply = {.status = status, .reason = reason, .temporary = true};
    if (status == AUTH_CLIENT_FAIL)
        reply.temporary = false; /* a refused request: trying again will not help */
    return finish(c, req, &reply);
}

/* The core failed a request: its deadline passed, its connection broke, a
 * queued failure came due, or the client is closing (always ERROR). */
static bool request_failed(void *owner, struct line_request *base, const char *reason)
{
    struct auth_client *c = owner;
    struct auth_client_request *req = request_of(base);
    enum auth_client_status status =
        line_client_closing(c->lc) ? AUTH_CLIENT_ERROR : req->fail_status;
    return finish_error(c, req, status, reason);
}

/* ---------- replies ---------- */

static bool parse_request_id(const char *text, uint64_t *out)
{
    if (*text < '1' || *text > '9' || strlen(text) > 19)
        return false;
    uint64_t v = 0;
    for (const char *p = text; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* OK <id> <user> <userdb fields> for USER, VERIFY and AUTH. */
static bool reply_ok(struct auth_client *c, struct auth_client_request *req,
                     const struct auth_line *line)
{
    detach(c, req);
    struct userdb_entry *e = userdb_entry_new(line->fields[2]);
    char *error = NULL;
    bool usable;
    if (!auth_line_read_userdb(line, 3, e, &error)) {
        char reason[REASON_MAX];
        snprintf(reason, sizeof(reason), "bad userdb field in the auth service's reply: %.300s",
                 error);
        usable = finish_error(c, req, AUTH_CLIENT_ERROR, reason);
    } else {
        struct auth_client_reply reply = {
            .status = AUTH_CLIENT_OK, .user = line->fields[2], .userdb = e};
        usable = finish(c, req, &reply);
    }
    free(error);
    userdb_entry_free(e);
    return usable;
}

/* FAIL <id> [user=] [reason=] [temp] */
static bool reply_fail(struct auth_client *c, struct auth_client_request *req,
                       const struct auth_line *line)
{
    detach(c, req);
    struct auth_client_reply reply = {
        .status = AUTH_CLIENT_FAIL,
        .user = auth_line_param(line, 2, "user"),
        .reason = auth_line_param(line, 2, "reason"),
        .temporary = auth_line_param(line, 2, "temp") != NULL,
    };
    if (req->kind == REQ_USER || req->kind == REQ_ITERATE) {
        /* Lookups have no "refused": a FAIL is the service failing. */
        reply.status = AUTH_CLIENT_ERROR;
        reply.temporary = true;
        if (reply.reason == NULL || reply.reason[0] == '\0')
            reply.reason = "the auth service failed the lookup";
    }
    return finish(c, req, &reply);
}

static bool reply_not_found(struct auth_client *c, struct auth_client_request *req)
{
    detach(c, req);
    struct auth_client_reply reply = {.status = AUTH_CLIENT_NOT_FOUND};
    if (req->kind != REQ_USER) {
        reply.status = AUTH_CLIENT_FAIL; /* VERIFY / AUTH of an unknown user */
        reply.reason = "unknown user";
    }
    return finish(c, req, &reply);
}

static bool reply_challenge(struct auth_client *c, struct auth_client_request *req,
                            const char *challenge)
{
    line_request_hold(&req->base);
    struct auth_client_reply reply = {.status = AUTH_CLIENT_CONTINUE, .challenge = challenge};
    /* The request stays live: the callback may answer, cancel, or neither. */
    return run_callback(c, req->cb, req->ctx, &reply);
}

static bool reply_done(struct auth_client *c, struct auth_client_request *req)
{
    detach(c, req);
    if (req->user_count > 1)
        qsort(req->users, req->user_count, sizeof(char *), compare_names);
    struct auth_client_reply reply = {
        .status = AUTH_CLIENT_OK, .users = req->users, .user_count = req->user_count};
    return finish(c, req, &reply);
}

/* Handles one reply line. False when the connection went down or the
 * client went away: stop reading. */
static bool handle_line(void *owner, char *text, size_t len)
{
    struct auth_client *c = owner;
    struct line_client *lc = c->lc;
    if (len == 0) {
        line_client_protocol_error(lc, "empty reply line");
        return false;
    }
    struct auth_line line;
    struct petrel_error err;
    if (!auth_line_parse(text, len, &line, &err)) {
        line_client_protocol_error(lc, "unreadable reply: %s", err.message);
        return false;
    }
    const char *verb = line.fields[0];
    bool known = strcmp(verb, "OK") == 0 || strcmp(verb, "FAIL") == 0 ||
                 strcmp(verb, "NOTFOUND") == 0 || strcmp(verb, "CONT") == 0 ||
                 strcmp(verb, "ITEM") == 0 || strcmp(verb, "DONE") == 0;
    if (!known) {
        line_client_protocol_error(lc, "unknown reply '%.40s'", verb);
        return false;
    }
    if (line.count < 2) {
        line_client_protocol_error(lc, "%s reply without an id", verb);
        return false;
    }
    const char *id_text = line.fields[1];
    if (strcmp(verb, "FAIL") == 0 && strcmp(id_text, "-") == 0) {
        const char *reason = auth_line_param(&line, 2, "reason");
        line_client_protocol_error(lc, "the auth service refused our input: %.200s",
                                   reason != NULL ? reason : "no reason given");
        return false;
    }
    if (!auth_id_valid(id_text)) {
        line_client_protocol_error(lc, "%s reply with an invalid id", verb);
        return false;
    }
    line_client_mark_up(lc); /* the first reply on a connection proves the service works */
    uint64_t id;
    struct line_request *found = NULL;
    if (parse_request_id(id_text, &id))
        found = line_client_find(lc, id);
    if (found == NULL)
        return true; /* cancelled, or its deadline passed: the reply is dropped */
    struct auth_client_request *req = request_of(found);

    bool lookup = req->kind == REQ_USER || req->kind == REQ_VERIFY || req->kind == REQ_SASL;
    if (strcmp(verb, "OK") == 0 && lookup && line.count >= 3)
        return reply_ok(c, req, &line);
    if (strcmp(verb, "FAIL") == 0)
        return reply_fail(c, req, &line);
    if (strcmp(verb, "NOTFOUND") == 0 && req->kind != REQ_ITERATE)
        return reply_not_found(c, req);
    if (strcmp(verb, "CONT") == 0 && req->kind == REQ_SASL &&
        line_request_state(found) == LINE_REQUEST_WAITING && line.count >= 3)
        return reply_challenge(c, req, line.fields[2]);
    if (strcmp(verb, "ITEM") == 0 && req->kind == REQ_ITERATE && line.count >= 3) {
        req->users = xgrow(req->users, &req->user_cap, req->user_count + 1, sizeof(char *));
        req->users[req->user_count++] = xstrdup(line.fields[2]);
        line_request_touch(found); /* progress: the deadline starts again */
        return true;
    }
    if (strcmp(verb, "DONE") == 0 && req->kind == REQ_ITERATE)
        return reply_done(c, req);
    line_client_protocol_error(lc, "unexpected %s reply (%zu fields) to request %s", verb,
                               line.count, id_text);
    return false;
}

/* ---------- sending ---------- */

/* Sends the request line in `out` (which is wiped: it may hold a password)
 * or queues the request's failure. */
static void submit(struct auth_client *c, struct auth_client_request *req, struct buf *out,
                   enum auth_client_status too_long_status)
{
    if (!line_client_closing(c->lc) && out->len - 1 > AUTH_LINE_MAX) {
        char msg[REASON_MAX];
        snprintf(msg, sizeof(msg), "request longer than the auth protocol's %d-byte line limit",
                 AUTH_LINE_MAX);
        fail_later(c, req, too_long_status, msg);
    } else {
        line_client_submit(c->lc, &req->base, out->data, out->len);
    }
    if (out->data != NULL)
        explicit_bzero(out->data, out->cap);
    buf_free(out);
}

/* Reserves room for a request line whose fields total `bytes` before
 * escaping (which at most doubles them), so that a buffer holding a
 * password never grows: the old block would be freed without a wipe. */
static void reserve_line(struct buf *out, size_t bytes)
{
    buf_reserve(out, 2 * bytes + 128);
}

static size_t len_or_0(const char *s)
{
    return s != NULL ? strlen(s) : 0;
}

static void add_id(struct buf *out, uint64_t id)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, id);
    auth_line_add(out, text);
}

/* ---------- public ---------- */

static void client_release(void *owner)
{
    free(owner);
}

static const struct line_client_ops client_ops = {
    .line = handle_line,
    .fail = request_failed,
    .release = client_release,
};

struct auth_client *auth_client_new(struct event_base *base, const char *addr, int64_t timeout_ms,
                                    struct petrel_error *err)
{
    const struct line_client_config cfg = {
        .protocol = "auth",
        .peer = "auth service",
        .address = addr,
        .timeout_ms = timeout_ms,
        .max_line = AUTH_LINE_MAX,
    };
    struct auth_client *c = xcalloc(1, sizeof(*c));
    c->lc = line_client_new(base, &cfg, &client_ops, c, err);
    if (c->lc == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

/* The client's memory goes in client_release(), once no callback runs. */
void auth_client_free(struct auth_client *c)
{
    if (c != NULL)
        line_client_free(c->lc);
}

const char *auth_client_address(const struct auth_client *c)
{
    return line_client_address(c->lc);
}

size_t auth_client_pending(const struct auth_client *c)
{
    return line_client_pending(c->lc);
}

struct auth_client_request *auth_client_user(struct auth_client *c, const char *username,
                                             auth_client_cb *cb, void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_USER, cb, ctx);
    struct buf out = {0};
    auth_line_add(&out, "USER");
    add_id(&out, req->base.id);
    auth_line_add(&out, username != NULL ? username : "");
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_ERROR);
    return req;
}

struct auth_client_request *auth_client_verify(struct auth_client *c, const char *username,
                                               const char *password, const char *service,
                                               const char *ip, auth_client_cb *cb, void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_VERIFY, cb, ctx);
    struct buf out = {0};
    reserve_line(&out, len_or_0(username) + len_or_0(password) + len_or_0(service) + len_or_0(ip));
    auth_line_add(&out, "VERIFY");
    add_id(&out, req->base.id);
    auth_line_add(&out, username != NULL ? username : "");
    auth_line_add(&out, password != NULL ? password : "");
    if (service != NULL)
        auth_line_add_param(&out, "service", service);
    if (ip != NULL)
        auth_line_add_param(&out, "ip", ip);
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_FAIL);
    return req;
}

struct auth_client_request *auth_client_sasl_begin(struct auth_client *c, const char *mech,
                                                   const char *service, const char *ip,
                                                   const char *initial_response, auth_client_cb *cb,
                                                   void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_SASL, cb, ctx);
    struct buf out = {0};
    reserve_line(&out,
                 len_or_0(mech) + len_or_0(service) + len_or_0(ip) + len_or_0(initial_response));
    auth_line_add(&out, "AUTH");
    add_id(&out, req->base.id);
    auth_line_add(&out, mech != NULL ? mech : "");
    if (service != NULL)
        auth_line_add_param(&out, "service", service);
    if (ip != NULL)
        auth_line_add_param(&out, "ip", ip);
    if (initial_response != NULL)
        auth_line_add_param(&out, "resp", initial_response);
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_FAIL);
    return req;
}

static void abort_exchange(struct auth_client *c, const struct auth_client_request *req);

void auth_client_sasl_continue(struct auth_client_request *req, const char *response_b64)
{
    /* Anything but a request holding a challenge is already answered or
     * about to be (its connection broke, or the client is being freed):
     * nothing to send. */
    if (req == NULL || line_request_state(&req->base) != LINE_REQUEST_HELD ||
        !line_client_is_open(req->client->lc))
        return;
    struct auth_client *c = req->client;
    struct buf out = {0};
    reserve_line(&out, len_or_0(response_b64));
    auth_line_add(&out, "CONT");
    add_id(&out, req->base.id);
    auth_line_add(&out, response_b64 != NULL ? response_b64 : "");
    auth_line_end(&out);
    if (out.len - 1 > AUTH_LINE_MAX) {
        abort_exchange(c, req); /* or the service keeps the exchange and its slot */
        fail_later(c, req, AUTH_CLIENT_FAIL, "SASL response longer than the line limit");
    } else {
        line_request_touch(&req->base);
        line_client_write(c->lc, out.data, out.len);
    }
    explicit_bzero(out.data, out.cap);
    buf_free(&out);
}

/* A connection closed by auth_client_free() took the exchange with it:
 * nothing is written then. */
static void abort_exchange(struct auth_client *c, const struct auth_client_request *req)
{
    struct buf out = {0};
    auth_line_add(&out, "CONT");
    add_id(&out, req->base.id);
    auth_line_add(&out, "*");
    auth_line_end(&out);
    line_client_write(c->lc, out.data, out.len);
    buf_free(&out);
}

struct auth_client_request *auth_client_iterate(struct auth_client *c, auth_client_cb *cb,
                                                void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_ITERATE, cb, ctx);
    struct buf out = {0};
    auth_line_add(&out, "ITERATE");
    add_id(&out, req->base.id);
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_ERROR);
    return req;
}

void auth_client_cancel(struct auth_client_request *req)
{
    if (req == NULL)
        return;
    struct auth_client *c = req->client;
    /* The service holds a challenged exchange (and one of the connection's
     * request slots) until it gets an answer: "*" ends it, as in IMAP
     * AUTHENTICATE. Its FAIL comes back for an id nobody waits for. */
    if (line_request_state(&req->base) == LINE_REQUEST_HELD)
        abort_exchange(c, req);
    /* Not while inside its own final callback: freed when that returns. */
    if (line_client_cancel(c->lc, &req->base))
        request_free(req);
}
