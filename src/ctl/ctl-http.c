#include "ctl/ctl.h"

#include "core/buf.h"
#include "core/xalloc.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct stream_state {
    struct buf pending;
    ctl_line_fn on_line;
    void *ctx;
    bool stop;
};

static size_t collect_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    buf_append((struct buf *)arg, data, size * nmemb);
    return size * nmemb;
}

static size_t stream_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    struct stream_state *st = arg;
    size_t n = size * nmemb;
    buf_append(&st->pending, data, n);
    size_t start = 0;
    for (size_t i = 0; i < st->pending.len && !st->stop; i++) {
        if (st->pending.data[i] != '\n')
            continue;
        if (!st->on_line(st->pending.data + start, i - start, st->ctx))
            st->stop = true;
        start = i + 1;
    }
    memmove(st->pending.data, st->pending.data + start, st->pending.len - start);
    st->pending.len -= start;
    st->pending.data[st->pending.len] = '\0';
    return st->stop ? 0 : n;
}

static CURL *prepare(const struct ctl_target *t, const char *method, const char *path,
                     const char *body, struct curl_slist **headers, char **url_out)
{
    CURL *curl = curl_easy_init();
    if (curl == NULL) {
        fprintf(stderr, "petrelctl: curl_easy_init failed\n");
        exit(CTL_UNREACHABLE);
    }
    size_t base_len = strlen(t->url);
    while (base_len > 0 && t->url[base_len - 1] == '/')
        base_len--;
    char *url = xasprintf("%.*s%s", (int)base_len, t->url, path);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 5L);
    if (t->timeout_secs > 0)
        curl_easy_setopt(curl, CURLOPT_TIMEOUT, t->timeout_secs);
    *headers = curl_slist_append(*headers, "Accept: application/json");
    *headers = curl_slist_append(*headers, "Expect:");
    if (t->token != NULL && *t->token != '\0') {
        char *auth = xasprintf("Authorization: Bearer %s", t->token);
        *headers = curl_slist_append(*headers, auth);
        free(auth);
    }
    if (body != NULL) {
        *headers = curl_slist_append(*headers, "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (t->cacert != NULL && *t->cacert != '\0')
        curl_easy_setopt(curl, CURLOPT_CAINFO, t->cacert);
    if (t->cert != NULL && *t->cert != '\0') {
        curl_easy_setopt(curl, CURLOPT_SSLCERT, t->cert);
        curl_easy_setopt(curl, CURLOPT_SSLKEY, t->key != NULL ? t->key : t->cert);
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, *headers);
    *url_out = url;
    return curl;
}

static enum ctl_exit perform(CURL *curl, const char *url, long *status)
{
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR) {
        fprintf(stderr, "petrelctl: cannot connect to %s: %s\n", url,
                errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc));
        return CTL_UNREACHABLE;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
    return CTL_OK;
}

enum ctl_exit ctl_http(const struct ctl_target *t, const char *method, const char *path,
                       const char *body, struct ctl_response *resp)
{
    struct curl_slist *headers = NULL;
    char *url = NULL;
    CURL *curl = prepare(t, method, path, body, &headers, &url);
    struct buf data = {0};
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect_cb);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &data);
    memset(resp, 0, sizeof(*resp));
    enum ctl_exit rc = perform(curl, url, &resp->status);
    if (rc == CTL_OK) {
        resp->len = data.len;
        resp->body = buf_steal(&data);
    } else {
        buf_free(&data); /* callers only free a response they got with CTL_OK */
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    free(url);
    return rc;
}

enum ctl_exit ctl_post_json(const struct ctl_target *t, const char *path, json_t *body,
                            struct ctl_response *resp)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    enum ctl_exit rc = ctl_http(t, "POST", path, text, resp);
    free(text);
    return rc;
}

enum ctl_exit ctl_http_stream(const struct ctl_target *t, const char *method, const char *path,
                              const char *body, ctl_line_fn on_line, void *ctx, long *status)
{
    struct curl_slist *headers = NULL;
    char *url = NULL;
    CURL *curl = prepare(t, method, path, body, &headers, &url);
    struct stream_state st = {.on_line = on_line, .ctx = ctx};
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, stream_cb);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &st);
    enum ctl_exit rc = perform(curl, url, status);
    if (rc == CTL_OK && st.pending.len > 0 && !st.stop)
        on_line(st.pending.data, st.pending.len, ctx);
    buf_free(&st.pending);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    free(url);
    return rc;
}

void ctl_response_free(struct ctl_response *resp)
{
    free(resp->body);
    resp->body = NULL;
}

char *ctl_escape(const char *s)
{
    struct buf out = {0};
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~')
            buf_append_char(&out, (char)*p);
        else
            buf_printf(&out, "%%%02X", *p);
    }
    return buf_steal(&out);
}
