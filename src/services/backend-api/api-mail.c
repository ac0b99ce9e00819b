/* POST /api/backend/mail/append — a Petrel addition beyond the
 * specification: bulk import for migrations, tests and benchmarks.
 * Request: user, folder, namespace, message (base64), optional flags (array
 * of IMAP flag names and keywords) and internal_date (seconds since the
 * epoch). Reply: {"uid": N}. The route accepts bodies up to 96 MiB (the
 * API's 1 MiB limit would refuse ordinary mail with attachments). */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/base64.h"
#include "core/json-util.h"
#include "core/xalloc.h"

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

static void handle_append(struct http_request *req, void *ctx)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_REQUIRED, &sr))
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *b64 = NULL;
    json_t *flags_json = NULL;
    int64_t internal_date = 0;
    uint32_t flags = 0;
    const char *keywords[APPEND_MAX_FLAGS + 1] = {NULL};
    struct buf message = {0};
    bool ok = json_get_string(sr.body, "message", true, &b64, &err) &&
              json_get_array(sr.body, "flags", false, &flags_json, &err) &&
              json_get_int(sr.body, "internal_date", false, &internal_date, &err);
    if (ok && flags_json != NULL)
        ok = decode_flags(flags_json, &flags, keywords, &err);
    if (ok && (internal_date < 0 || internal_date > APPEND_MAX_DATE))
        ok = petrel_error_set(&err, PETREL_ERR_INVALID,
                              "internal_date must be from 0 to %lld (9999-12-31)",
                              (long long)APPEND_MAX_DATE);
    if (ok && !base64_decode_append(&message, b64, strlen(b64)))
        ok = petrel_error_set(&err, PETREL_ERR_INVALID, "message is not valid base64");
    if (ok && message.len == 0)
        ok = petrel_error_set(&err, PETREL_ERR_INVALID, "message is empty");
    if (!ok) {
        http_reply_error(req, 400, "%s", err.message);
    } else {
        struct mailbox *box = storage_request_open(req, &sr);
        if (box != NULL) {
            uint32_t uid = 0;
            if (!mailbox_append(box, message.data, message.len, flags, keywords, internal_date,
                                &uid, &err))
                http_reply_petrel_error(req, &err);
            else
                http_reply_json(req, 200, json_pack("{s:I}", "uid", (json_int_t)uid));
            mailbox_close(box);
        }
    }
    buf_free(&message);
    storage_request_end(&sr);
}

void backend_api_register_mail(struct http_server *http, struct storage_api *api)
{
    /* A 64 MiB message is about 86 MiB in base64 within its JSON body. */
    http_server_route(http, HTTP_POST, "/api/backend/mail/append", HTTP_ROUTE_LARGE_BODY,
                      handle_append, api);
}
