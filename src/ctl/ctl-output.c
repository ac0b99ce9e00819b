#include "ctl/ctl.h"

#include <stdio.h>
#include <string.h>

static void print_scalar(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        printf("%s", json_string_value(v));
        break;
    case JSON_INTEGER:
        printf("%lld", (long long)json_integer_value(v));
        break;
    case JSON_REAL:
        printf("%g", json_real_value(v));
        break;
    case JSON_TRUE:
        printf("true");
        break;
    case JSON_FALSE:
        printf("false");
        break;
    case JSON_NULL:
        printf("-");
        break;
    default:
        break;
    }
}

static bool is_scalar(const json_t *v)
{
    return !json_is_object(v) && !json_is_array(v);
}

void ctl_print_readable(const json_t *value, int indent)
{
    if (json_is_object(value)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)value, key, v)
        {
            printf("%*s%s:", indent, "", key);
            if (is_scalar(v)) {
                printf(" ");
                print_scalar(v);
                printf("\n");
            } else if ((json_is_array(v) && json_array_size(v) == 0) ||
                       (json_is_object(v) && json_object_size(v) == 0)) {
                printf(" %s\n", json_is_array(v) ? "(none)" : "{}");
            } else {
                printf("\n");
                ctl_print_readable(v, indent + 2);
            }
        }
        return;
    }
    if (json_is_array(value)) {
        size_t i;
        json_t *v;
        json_array_foreach(value, i, v)
        {
            if (is_scalar(v)) {
                printf("%*s- ", indent, "");
                print_scalar(v);
                printf("\n");
            } else {
                printf("%*s-\n", indent, "");
                ctl_print_readable(v, indent + 2);
            }
        }
        return;
    }
    printf("%*s", indent, "");
    print_scalar(value);
    printf("\n");
}

enum ctl_exit ctl_print_reply(const struct ctl_options *opts, const struct ctl_response *resp)
{
    json_error_t jerr;
    json_t *v = json_loadb(resp->body, resp->len, JSON_DECODE_ANY, &jerr);
    if (resp->status >= 400 || resp->status < 200) {
        const char *msg = NULL;
        if (v != NULL && json_is_object(v))
            msg = json_string_value(json_object_get(v, "error"));
        fprintf(stderr, "petrelctl: %ld: %s\n", resp->status,
                msg != NULL ? msg : (resp->len > 0 ? resp->body : "(no body)"));
        json_decref(v);
        return CTL_REFUSED;
    }
    if (opts->json || v == NULL) {
        fwrite(resp->body, 1, resp->len, stdout);
        if (resp->len == 0 || resp->body[resp->len - 1] != '\n')
            putchar('\n');
    } else {
        ctl_print_readable(v, 0);
    }
    json_decref(v);
    return CTL_OK;
}

enum ctl_exit ctl_backend_call(const struct ctl_options *opts, const char *method, const char *path,
                               const char *body)
{
    struct ctl_response resp;
    enum ctl_exit rc = ctl_http(&opts->backend, method, path, body, &resp);
    if (rc != CTL_OK)
        return rc;
    rc = ctl_print_reply(opts, &resp);
    ctl_response_free(&resp);
    return rc;
}

enum ctl_exit ctl_backend_post(const struct ctl_options *opts, const char *path, json_t *body)
{
    struct ctl_response resp;
    enum ctl_exit rc = ctl_post_json(&opts->backend, path, body, &resp);
    if (rc != CTL_OK)
        return rc;
    rc = ctl_print_reply(opts, &resp);
    ctl_response_free(&resp);
    return rc;
}
