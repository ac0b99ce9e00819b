/* POST /api/backend/who and /api/backend/who/count (document 1, "Who"):
 * active sessions, asked of the warden per request (docs/warden.md).
 *
 *   who        {service?, user?, group_by? = user|none}
 *              user: {total, groups: [{user, total, sessions: [Session]}]}
 *              none: {total, sessions: [Session]}
 *   who/count  {service?, user?, by? = ""|protocol|user}
 *              "":       {total, service, user}  (the filters echoed, "" = any)
 *              protocol: {total, by_protocol: {imap: n, pop3: n, submission: n, lmtp: n}}
 *              user:     {total, by_user: {<user>: n}}
 *
 * Session: {id, user, ip, service, connected_at (RFC 3339, UTC)}. Groups
 * are sorted by user, sessions by connected_at then id. Without a warden
 * (warden_service.listen empty) both answer 501; an unknown service,
 * group_by or by answers 400; a warden that cannot be reached or does not
 * answer in time, 502. */
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "core/xalloc.h"
#include "clients/warden/warden-client.h"
#include "clients/warden/warden-protocol.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum who_kind { WHO_LIST, WHO_COUNT };

/* A who request waiting for the warden. */
struct who_call {
    struct http_request *req;
    struct warden_client_request *wreq;
    enum who_kind kind;
    bool group_by_user;      /* who */
    enum warden_count_by by; /* who/count */
    char *service;           /* the filters, "" = any (echoed by count) */
    char *user;
};

static void call_free(struct who_call *call)
{
    free(call->service);
    free(call->user);
    free(call);
}

static void call_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct who_call *call = ctx;
    warden_client_cancel(call->wreq);
    call_free(call);
}

static json_t *session_json(const struct warden_session_info *s)
{
    char when[32] = "";
    time_t t = (time_t)s->connected_at;
    struct tm tm;
    if (gmtime_r(&t, &tm) != NULL)
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", s->id, "user", s->user, "ip", s->ip,
                     "service", s->service, "connected_at", when);
}

static int compare_time(const void *a, const void *b)
{
    const struct warden_session_info *x = *(const struct warden_session_info *const *)a;
    const struct warden_session_info *y = *(const struct warden_session_info *const *)b;
    if (x->connected_at != y->connected_at)
        return x->connected_at < y->connected_at ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* The warden sends sessions sorted by user, then connected_at, then id. */
static json_t *list_reply(const struct who_call *call, const struct warden_client_reply *r)
{
    if (!call->group_by_user) {
        const struct warden_session_info **sorted = xcalloc(r->session_count + 1, sizeof(*sorted));
        for (size_t i = 0; i < r->session_count; i++)
            sorted[i] = &r->sessions[i];
        qsort(sorted, r->session_count, sizeof(*sorted), compare_time);
        json_t *sessions = json_array();
        for (size_t i = 0; i < r->session_count; i++)
            json_array_append_new(sessions, session_json(sorted[i]));
        free(sorted);
        return json_pack("{s:I, s:o}", "total", (json_int_t)r->session_count, "sessions", sessions);
    }
    json_t *groups = json_array();
    json_t *group = NULL;
    json_t *sessions = NULL;
    const char *current = NULL;
    for (size_t i = 0; i < r->session_count; i++) {
        const struct warden_session_info *s = &r->sessions[i];
        if (current == NULL || strcmp(current, s->user) != 0) {
            if (group != NULL)
                json_object_set_new(group, "total",
                                    json_integer((json_int_t)json_array_size(sessions)));
            sessions = json_array();
            group = json_pack("{s:s, s:i, s:o}", "user", s->user, "total", 0, "sessions", sessions);
            json_array_append_new(groups, group);
            current = s->user;
        }
        json_array_append_new(sessions, session_json(s));
    }
    if (group != NULL)
        json_object_set_new(group, "total", json_integer((json_int_t)json_array_size(sessions)));
    return json_pack("{s:I, s:o}", "total", (json_int_t)r->session_count, "groups", groups);
}

static json_t *count_reply(const struct who_call *call, const struct warden_client_reply *r)
{
    if (call->by == WARDEN_BY_NONE)
        return json_pack("{s:I, s:s, s:s}", "total", (json_int_t)r->total, "service", call->service,
                         "user", call->user);
    json_t *groups = json_object();
    if (call->by == WARDEN_BY_PROTOCOL) {
        /* Every service the filter allows, those without sessions at 0. */
        for (size_t i = 0; warden_services[i] != NULL; i++) {
            if (call->service[0] == '\0' || strcmp(call->service, warden_services[i]) == 0)
                json_object_set_new(groups, warden_services[i], json_integer(0));
        }
    }
    for (size_t i = 0; i < r->item_count; i++)
        json_object_set_new(groups, r->items[i].key, json_integer((json_int_t)r->items[i].count));
    return json_pack("{s:I, s:o}", "total", (json_int_t)r->total,
                     call->by == WARDEN_BY_PROTOCOL ? "by_protocol" : "by_user", groups);
}

static void warden_answered(const struct warden_client_reply *r, void *ctx)
{
    struct who_call *call = ctx;
    struct http_request *req = call->req;
    http_request_set_cancel(req, NULL, NULL);
    if (r->status != WARDEN_CLIENT_OK) {
        http_reply_error(req, 502, "warden: %s", r->error != NULL ? r->error : "request failed");
    } else {
        http_reply_json(req, 200,
                        call->kind == WHO_LIST ? list_reply(call, r) : count_reply(call, r));
    }
    call_free(call);
}

/* Decodes the filters shared by both endpoints; replies 400 itself. */
static bool read_filters(struct http_request *req, const json_t *body, const char **service,
                         const char **user)
{
    struct petrel_error err;
    *service = "";
    *user = "";
    if (!json_get_string(body, "service", false, service, &err) ||
        !json_get_string(body, "user", false, user, &err)) {
        http_reply_petrel_error(req, &err);
        return false;
    }
    if ((*service)[0] != '\0' && !warden_service_valid(*service)) {
        http_reply_error(req, 400, "unknown service '%.64s' (imap, pop3, submission, lmtp)",
                         *service);
        return false;
    }
    if ((*user)[0] != '\0' && !warden_user_valid(*user)) {
        http_reply_error(req, 400, "invalid user (1-%d bytes, no control characters)",
                         WARDEN_USER_MAX);
        return false;
    }
    return true;
}

static void start(struct http_request *req, struct warden_client *warden, struct who_call *call)
{
    call->req = req;
    http_request_set_cancel(req, call_cancel, call);
    /* The callback never runs inside the call that issues the request
     * (warden-client.h), so the handle can be stored afterwards. */
    if (call->kind == WHO_LIST) {
        call->wreq = warden_client_list(warden, call->service, call->user, warden_answered, call);
    } else {
        static const char *const by_names[] = {"", "protocol", "user"};
        call->wreq = warden_client_count(warden, by_names[call->by], call->service, call->user,
                                         warden_answered, call);
    }
}

static bool warden_configured(struct http_request *req, void *ctx)
{
    if (ctx != NULL)
        return true;
    http_reply_error(req, 501, "who needs the session registry (warden_service.listen is empty)");
    return false;
}

/* The request's body, once the warden is there and its filters and the
 * optional string `key` (into *value, which keeps its default when absent)
 * are read; NULL when answered already. The caller decrefs the body, which
 * the strings point into. */
static json_t *read_request(struct http_request *req, void *ctx, const char *key,
                            const char **value, const char **service, const char **user)
{
    if (!warden_configured(req, ctx))
        return NULL;
    json_t *body = http_request_json(req);
    if (body == NULL)
        return NULL;
    struct petrel_error err;
    if (!read_filters(req, body, service, user)) {
        json_decref(body);
        return NULL;
    }
    if (!json_get_string(body, key, false, value, &err)) {
        http_reply_petrel_error(req, &err);
        json_decref(body);
        return NULL;
    }
    return body;
}

static struct who_call *call_new(enum who_kind kind, const char *service, const char *user,
                                 bool group_by_user, enum warden_count_by by)
{
    struct who_call *call = xcalloc(1, sizeof(*call));
    call->kind = kind;
    call->service = xstrdup(service);
    call->user = xstrdup(user);
    call->group_by_user = group_by_user;
    call->by = by;
    return call;
}

static void handle_who(struct http_request *req, void *ctx)
{
    const char *service, *user, *group_by = "user";
    json_t *body = read_request(req, ctx, "group_by", &group_by, &service, &user);
    if (body == NULL)
        return;
    bool by_user = group_by[0] == '\0' || strcmp(group_by, "user") == 0;
    if (by_user || strcmp(group_by, "none") == 0)
        start(req, ctx, call_new(WHO_LIST, service, user, by_user, WARDEN_BY_NONE));
    else
        http_reply_error(req, 400, "group_by must be user or none");
    json_decref(body);
}

static void handle_count(struct http_request *req, void *ctx)
{
    const char *service, *user, *by = "";
    json_t *body = read_request(req, ctx, "by", &by, &service, &user);
    if (body == NULL)
        return;
    if (by[0] == '\0')
        start(req, ctx, call_new(WHO_COUNT, service, user, false, WARDEN_BY_NONE));
    else if (strcmp(by, "protocol") == 0)
        start(req, ctx, call_new(WHO_COUNT, service, user, false, WARDEN_BY_PROTOCOL));
    else if (strcmp(by, "user") == 0)
        start(req, ctx, call_new(WHO_COUNT, service, user, false, WARDEN_BY_USER));
    else
        http_reply_error(req, 400, "by must be empty, protocol or user");
    json_decref(body);
}

void backend_api_register_who(struct http_server *http, struct warden_client *warden)
{
    http_server_route(http, HTTP_POST, "/api/backend/who", 0, handle_who, warden);
    http_server_route(http, HTTP_POST, "/api/backend/who/count", 0, handle_count, warden);
}
