/* quota-status: the policy service (quota-status-service.h). One state per
 * connection: the request being read and the FIFO of complete requests,
 * each waiting for its userdb lookup or answered; answers leave in request
 * order as the head of the FIFO completes. */
#include "services/quota-status/quota-status-service.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/line-server.h"
#include "clients/auth/auth-client.h"
#include "services/quota-status/policy-recipient.h"
#include "services/quota-status/policy-request.h"
#include "storage/quota/quota-limits.h"
#include "storage/quota/quota-rule.h"
#include "storage/quota/quota-usage.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "quota-status"
/* Folder aggregates remembered between requests (about 200 bytes each). */
#define USAGE_CACHE_FOLDERS 65536

enum result { R_OK, R_OVERQUOTA, R_TOOLARGE, R_NOUSER, R_ERROR, R_COUNT };
static const char *const result_names[R_COUNT] = {"ok", "overquota", "toolarge", "nouser", "error"};

struct quota_status_service {
    const struct quota_config *cfg;
    struct mail_storage *storage;
    struct auth_client *auth;
    struct fileindex_usage_cache *usage_cache; /* folders read on earlier requests */
    struct line_server_config server_cfg;
    struct line_server *server;
    size_t in_flight;
    struct metric_series *requests[R_COUNT];
    struct metric_series *connections;
    struct metric_series *connections_total;
};

struct qs_pending {
    struct qs_conn *conn;
    struct auth_client_request *areq;
    struct policy_recipient rcpt;
    uint64_t size;
    const char *answer; /* borrowed from the configuration, or a literal */
    struct qs_pending *next;
};

struct qs_conn {
    struct quota_status_service *svc;
    struct line_conn *lc;
    struct policy_request req;
    struct qs_pending *head;
    struct qs_pending *tail;
    size_t pending;
};

static void pending_free(struct qs_pending *p)
{
    if (p->areq != NULL) {
        auth_client_cancel(p->areq);
        p->conn->svc->in_flight--;
    }
    policy_recipient_free(&p->rcpt);
    free(p);
}

/* Sends the answers at the head of the FIFO that are ready. */
static void flush(struct qs_conn *c)
{
    struct buf out = {0};
    while (c->head != NULL && c->head->answer != NULL) {
        struct qs_pending *p = c->head;
        buf_append(&out, "action=", 7);
        buf_append(&out, p->answer, strlen(p->answer));
        buf_append(&out, "\n\n", 2);
        c->head = p->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->pending--;
        pending_free(p);
    }
    if (out.len > 0)
        line_conn_write(c->lc, out.data, out.len);
    buf_free(&out);
}

static void answer(struct qs_pending *p, enum result r)
{
    const struct quota_config *cfg = p->conn->svc->cfg;
    switch (r) {
    case R_OK:
    case R_ERROR:
        p->answer = r == R_OK ? cfg->status_success : "DUNNO";
        break;
    case R_OVERQUOTA:
        p->answer = cfg->status_overquota;
        break;
    case R_TOOLARGE:
        p->answer = cfg->status_toolarge[0] != '\0' ? cfg->status_toolarge : cfg->status_overquota;
        break;
    case R_NOUSER:
        p->answer = cfg->status_nouser[0] != '\0' ? cfg->status_nouser : "DUNNO";
        break;
    case R_COUNT:
        break;
    }
    metric_add(p->conn->svc->requests[r], 1);
}

/* The verdict for a user the userdb knows. */
static enum result check_user(struct qs_pending *p, const struct auth_client_reply *reply)
{
    struct quota_status_service *svc = p->conn->svc;
    struct petrel_error err;
    petrel_error_clear(&err);
    struct quota_rules rules;
    quota_rules_init(&rules);
    enum result r = R_ERROR;
    struct mail_user *user = NULL;
    if (!quota_rules_add_list(&rules, reply->userdb->quota_rule, &err))
        goto out;
    struct quota_limits limits;
    /* The folder a delivery would go to: the detail's when it exists. */
    const char *mailbox = "INBOX";
    user = mail_user_get(svc->storage, reply->user, &err);
    if (user == NULL)
        goto out;
    if (p->rcpt.detail != NULL) {
        const struct namespace_config *ns = mail_user_namespace(user, "personal", &err);
        if (ns != NULL && mail_folder_exists(user, ns, p->rcpt.detail))
            mailbox = p->rcpt.detail;
    }
    if (quota_rules_mailbox_ignored(&rules, mailbox)) {
        r = R_OK;
        goto out;
    }
    quota_limits_compute(svc->cfg, &rules, mailbox, QUOTA_POINT_DELIVERY, &limits);
    if (limits.storage == 0 && limits.messages == 0 && (svc->cfg->mail_size == 0 || p->size == 0)) {
        r = R_OK; /* unlimited: no need to read anything */
        goto out;
    }
    struct quota_usage usage = {0, 0};
    if ((limits.storage != 0 || limits.messages != 0) &&
        !quota_usage_get(user, &rules, svc->usage_cache, &usage, &err))
        goto out;
    switch (quota_check(svc->cfg, &limits, &usage, p->size, 1)) {
    case QUOTA_OK:
        r = R_OK;
        break;
    case QUOTA_OVER_STORAGE:
    case QUOTA_OVER_MESSAGES:
        r = R_OVERQUOTA;
        break;
    case QUOTA_TOO_LARGE:
        r = R_TOOLARGE;
        break;
    }
    log_debug(COMPONENT, "checked",
              "user=%s mailbox=%s used=%llu/%llu limit=%llu/%llu size=%llu "
              "result=%s",
              reply->user, mailbox, (unsigned long long)usage.storage,
              (unsigned long long)usage.messages, (unsigned long long)limits.storage,
              (unsigned long long)limits.messages, (unsigned long long)p->size, result_names[r]);
out:
    if (r == R_ERROR)
        log_warn(COMPONENT, "cannot check the quota, answering DUNNO", "user=%s error=\"%s\"",
                 reply->user, err.message);
    quota_rules_free(&rules);
    return r;
}

static void lookup_done(const struct auth_client_reply *reply, void *ctx)
{
    struct qs_pending *p = ctx;
    p->areq = NULL;
    p->conn->svc->in_flight--;
    switch (reply->status) {
    case AUTH_CLIENT_OK:
        answer(p, reply->userdb != NULL && reply->user != NULL ? check_user(p, reply) : R_ERROR);
        break;
    case AUTH_CLIENT_NOT_FOUND:
        answer(p, R_NOUSER);
        break;
    default:
        log_warn(COMPONENT, "userdb lookup failed, answering DUNNO", "user=%s reason=\"%s\"",
                 p->rcpt.lookup, reply->reason != NULL ? reply->reason : "");
        answer(p, R_ERROR);
        break;
    }
    flush(p->conn);
}

static void request_done(struct qs_conn *c)
{
    struct quota_status_service *svc = c->svc;
    if (c->pending >= (size_t)svc->cfg->status.max_pipelined) {
        log_warn(COMPONENT, "too many requests ahead of their answers, closing", "peer=%s max=%lld",
                 line_conn_peer(c->lc), (long long)svc->cfg->status.max_pipelined);
        line_conn_close(c->lc);
        return;
    }
    struct qs_pending *p = xcalloc(1, sizeof(*p));
    p->conn = c;
    p->size = c->req.size;
    if (c->tail != NULL)
        c->tail->next = p;
    else
        c->head = p;
    c->tail = p;
    c->pending++;
    if (c->req.recipient == NULL ||
        !policy_recipient_parse(c->req.recipient, svc->cfg->status.recipient_delimiter,
                                svc->cfg->status.username_format, &p->rcpt)) {
        answer(p, R_OK); /* nothing to check (no recipient at this stage) */
        flush(c);
        return;
    }
    svc->in_flight++;
    p->areq = auth_client_user(svc->auth, p->rcpt.lookup, lookup_done, p);
}

static void *conn_open(void *ctx, struct line_conn *lc)
{
    struct qs_conn *c = xcalloc(1, sizeof(*c));
    c->svc = ctx;
    c->lc = lc;
    policy_request_init(&c->req);
    return c;
}

static void conn_line(void *state, char *line, size_t len)
{
    struct qs_conn *c = state;
    if (line_conn_closing(c->lc))
        return;
    struct petrel_error err;
    switch (policy_request_line(&c->req, line, len, (size_t)c->svc->cfg->status.max_request_bytes,
                                &err)) {
    case POLICY_MORE:
        return;
    case POLICY_DONE:
        request_done(c);
        policy_request_reset(&c->req);
        return;
    case POLICY_ERROR:
        log_info(COMPONENT, "bad policy request, closing", "peer=%s error=\"%s\"",
                 line_conn_peer(c->lc), err.message);
        line_conn_close(c->lc);
        return;
    }
}

static void conn_bad_input(void *state, const char *reason)
{
    struct qs_conn *c = state;
    log_info(COMPONENT, "bad policy request, closing", "peer=%s error=\"%s\"",
             line_conn_peer(c->lc), reason);
    line_conn_close(c->lc);
}

static void conn_close(void *state)
{
    struct qs_conn *c = state;
    while (c->head != NULL) {
        struct qs_pending *p = c->head;
        c->head = p->next;
        pending_free(p);
    }
    policy_request_reset(&c->req);
    free(c);
}

static const struct line_server_ops server_ops = {
    .open = conn_open,
    .line = conn_line,
    .bad_input = conn_bad_input,
    .close = conn_close,
};

static void metrics_init(struct quota_status_service *svc, struct metrics_registry *reg)
{
    static const char *const labels[] = {"result", NULL};
    struct metric_family *req =
        metrics_counter(reg, "petrel_quota_status_requests_total",
                        "Policy requests answered by quota-status, by result.", labels);
    for (int r = 0; r < R_COUNT; r++) {
        const char *values[] = {result_names[r]};
        svc->requests[r] = metric_series_get(req, values);
    }
    line_server_metrics(reg, "quota_status", "quota-status", &svc->connections,
                        &svc->connections_total);
}

struct quota_status_service *quota_status_service_start(const struct service_env *env,
                                                        const struct quota_config *cfg,
                                                        struct mail_storage *storage,
                                                        struct petrel_error *err)
{
    struct quota_status_service *svc = xcalloc(1, sizeof(*svc));
    svc->cfg = cfg;
    svc->storage = storage;
    metrics_init(svc, env->metrics);
    svc->usage_cache = quota_usage_cache_new(USAGE_CACHE_FOLDERS);
    const struct quota_status_config *s = &cfg->status;
    svc->auth = auth_client_new(env->base, s->auth_addr, s->auth_timeout_ms, err);
    if (svc->auth == NULL)
        goto fail;
    svc->server_cfg = (struct line_server_config){
        .component = COMPONENT,
        .section = "quota.quota_status",
        .allowed_nets = (const char *const *)s->allowed_nets,
        .socket_mode = s->socket_mode,
        .max_connections = s->max_connections,
        .max_connections_per_ip = s->max_connections_per_ip,
        .max_line = (size_t)s->max_line_length,
        .handshake_timeout_ms = s->handshake_timeout_ms,
        .idle_timeout_ms = s->idle_timeout_ms,
        .drain_on_close = true,
        .connections = svc->connections,
        .connections_total = svc->connections_total,
    };
    svc->server = line_server_new(env->base, &svc->server_cfg, &server_ops, svc, err);
    if (svc->server == NULL || !line_server_listen(svc->server, s->listen, env->readiness, err))
        goto fail;
    if (line_server_listener_count(svc->server) == 0) {
        petrel_error_set(err, PETREL_ERR_INVALID,
                         "quota.quota_status.listen: no address configured");
        goto fail;
    }
    log_info(COMPONENT, "listening", "address=%s listeners=%zu auth=%s",
             line_server_address(svc->server), line_server_listener_count(svc->server),
             auth_client_address(svc->auth));
    return svc;
fail:
    quota_status_service_free(svc);
    return NULL;
}

const char *quota_status_service_address(const struct quota_status_service *s)
{
    const struct quota_status_service *svc = s;
    return svc->server != NULL ? line_server_address(svc->server) : "";
}

void quota_status_service_stop_accepting(struct quota_status_service *s)
{
    struct quota_status_service *svc = s;
    if (svc->server != NULL)
        line_server_stop_accepting(svc->server);
}

size_t quota_status_service_in_flight(const struct quota_status_service *s)
{
    return s->in_flight;
}

void quota_status_service_free(struct quota_status_service *s)
{
    struct quota_status_service *svc = s;
    if (svc == NULL)
        return;
    line_server_free(svc->server); /* every connection: their lookups cancelled */
    auth_client_free(svc->auth);
    quota_usage_cache_free(svc->usage_cache);
    free(svc);
}
