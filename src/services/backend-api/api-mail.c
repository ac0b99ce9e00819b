/* POST /api/backend/mail/append — a Petrel addition beyond the
 * specification: bulk import for migrations, tests and benchmarks.
 * Request: user, folder, namespace, message (base64), optional flags (array
 * of IMAP flag names and keywords) and internal_date (seconds since the
 * epoch). Reply: {"uid": N}. The route accepts bodies up to 96 MiB (the
 * API's 1 MiB limit would refuse ordinary mail with attachments).
 * With the quota enforcing, the user's quota_rule fields are asked from
 * the userdb first (as quota/show does) and handed to the storage's quota,
 * which checks the save as it checks IMAP's and LMTP's; over quota is 507. */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/base64.h"
#include "core/json-util.h"
#include "core/xalloc.h"
#include "clients/auth/auth-client.h"
#include "storage/quota/quota-module.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define APPEND_MAX_FLAGS 64
#define APPEND_MAX_DATE 253402300799LL /* 9999-12-31T23:59:59Z, the last IMAP date */

static bool decode_flags(const json_t *arr, uint32_t *flags, const char **keywords,
                         struct petrel_error *err)
{
    static const struct {
        const char *name;
        uint32_t bit;
    } names[] = {
        {"\\Seen", MAIL_FLAG_SEEN},       {"\\Answered", MAIL_FLAG_ANSWERED},
        {"\\Flagged", MAIL_FLAG_FLAGGED}, {"\\Deleted", MAIL_FLAG_DELETED},
        {"\\Draft", MAIL_FLAG_DRAFT},
    };
    size_t nkw = 0;
    *flags = 0;
    if (json_array_size(arr) > APPEND_MAX_FLAGS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "more than %d flags", APPEND_MAX_FLAGS);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = json_string_value(v);
        if (s == NULL)
            return petrel_error_set(err, PETREL_ERR_INVALID, "flags must be strings");
        bool known = false;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (strcasecmp(s, names[k].name) == 0) {
                *flags |= names[k].bit;
                known = true;
            }
        }
        if (known)
            continue;
        if (s[0] == '\\')
            return petrel_error_set(err, PETREL_ERR_INVALID, "unknown system flag '%s'", s);
        if (!mail_keyword_valid(s))
            return petrel_error_set(err, PETREL_ERR_INVALID, "invalid keyword '%s'", s);
        keywords[nkw++] = s;
    }
    keywords[nkw] = NULL;
    return true;
}

/* A request between its checks and its save: kept while the userdb is
 * asked for the user's quota rules. */
struct append_call {
    struct http_request *req;
    struct storage_request sr; /* holds the body the keywords point into */
    struct auth_client_request *areq;
    struct buf message;
    uint32_t flags;
    const char *keywords[APPEND_MAX_FLAGS + 1];
    int64_t internal_date;
};

static void append_call_free(struct append_call *call)
{
    mail_user_unref(call->sr.user);
    buf_free(&call->message);
    storage_request_end(&call->sr);
    free(call);
}

/* Saves the message; `rule_fields`: the user's quota_rule fields (NULL:
 * the quota does not enforce rules). */
static void append_save(struct append_call *call, char *const *rule_fields, bool rules_known)
{
    struct http_request *req = call->req;
    if (rules_known)
        quota_user_set(call->sr.user, rule_fields); /* the storage's quota checks the save */
    struct mailbox *box = storage_request_open(req, &call->sr);
    if (box == NULL)
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    uint32_t uid = 0;
    if (!mailbox_append(box, call->message.data, call->message.len, call->flags, call->keywords,
                        call->internal_date, &uid, &err))
        http_reply_petrel_error(req, &err); /* over quota: 507 */
    else
        http_reply_json(req, 200, json_pack("{s:I}", "uid", (json_int_t)uid));
    mailbox_close(box);
}

static void append_call_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct append_call *call = ctx;
    auth_client_cancel(call->areq);
    append_call_free(call);
}

static void append_userdb_done(const struct auth_client_reply *r, void *ctx)
{
    struct append_call *call = ctx;
    http_request_set_cancel(call->req, NULL, NULL);
    call->areq = NULL;
    if (r->status == AUTH_CLIENT_NOT_FOUND)
        http_reply_error(call->req, 404, "user not found: %s", mail_user_name(call->sr.user));
    else if (r->status != AUTH_CLIENT_OK || r->userdb == NULL)
        /* Without the rules the save cannot be checked as IMAP and LMTP
         * check it: refused rather than let through unlimited. */
        http_reply_error(call->req, 502, "auth service: %s",
                         r->reason != NULL ? r->reason : "userdb lookup failed");
    else
        append_save(call, r->userdb->quota_rule, true);
    append_call_free(call);
}

static void handle_append(struct http_request *req, void *ctx)
{
    struct storage_api *api = ctx;
    struct append_call *call = xcalloc(1, sizeof(*call));
    call->req = req;
    if (!storage_request_begin(api, req, STORAGE_FOLDER_REQUIRED, &call->sr)) {
        free(call);
        return;
    }
    mail_user_ref(call->sr.user); /* kept across the userdb lookup */
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *b64 = NULL;
    json_t *flags_json = NULL;
    json_t *body = call->sr.body;
    bool ok = json_get_string(body, "message", true, &b64, &err) &&
              json_get_array(body, "flags", false, &flags_json, &err) &&
              json_get_int(body, "internal_date", false, &call->internal_date, &err);
    if (ok && flags_json != NULL)
        ok = decode_flags(flags_json, &call->flags, call->keywords, &err);
    if (ok && (call->internal_date < 0 || call->internal_date > APPEND_MAX_DATE))
        ok = petrel_error_set(&err, PETREL_ERR_INVALID,
                              "internal_date must be from 0 to %lld (9999-12-31)",
                              (long long)APPEND_MAX_DATE);
    if (ok && !base64_decode_append(&call->message, b64, strlen(b64)))
        ok = petrel_error_set(&err, PETREL_ERR_INVALID, "message is not valid base64");
    if (ok && call->message.len == 0)
        ok = petrel_error_set(&err, PETREL_ERR_INVALID, "message is empty");
    if (!ok) {
        http_reply_error(req, 400, "%s", err.message);
    } else if (!quota_user_enforced(call->sr.user)) {
        append_save(call, NULL, false);
    } else if (api->auth == NULL) {
        /* The user's limits are the userdb's quota_rule (as for quota/show). */
        http_reply_error(req, 503, "quota needs the auth service (backend_api.auth_master_addr)");
    } else {
        /* The user's quota_rule, as IMAP gets it at login and LMTP with
         * each recipient; the callback never runs inside auth_client_user. */
        http_request_set_cancel(req, append_call_cancel, call);
        call->areq =
            auth_client_user(api->auth, mail_user_name(call->sr.user), append_userdb_done, call);
        return;
    }
    append_call_free(call);
}

void backend_api_register_mail(struct http_server *http, struct storage_api *api)
{
    /* A 64 MiB message is about 86 MiB in base64 within its JSON body. */
    http_server_route(http, HTTP_POST, "/api/backend/mail/append", HTTP_ROUTE_LARGE_BODY,
                      handle_append, api);
}
