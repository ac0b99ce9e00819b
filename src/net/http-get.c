/* A minimal HTTP/1.1 GET client (http-get.h). */
#include "net/http-get.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/xalloc.h"
#include "net/endpoint.h"
#include "net/sockaddr.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct http_get {
    struct bufferevent *bev;
    struct event *timer; /* the deadline; also delivers an early failure */
    http_get_fn fn;
    void *ctx;
    size_t max_bytes;
    char error[128]; /* set: fail with it when the timer fires */
    struct buf req;
};

static void finish(struct http_get *get, int status, const char *body, size_t len,
                   const char *error)
{
    get->fn(status, body != NULL ? body : "", len, error, get->ctx);
    http_get_cancel(get);
}

/* Parses "HTTP/1.x NNN ...\r\n...\r\n\r\nbody" (Content-Length honoured). */
static void deliver(struct http_get *get)
{
    struct evbuffer *in = bufferevent_get_input(get->bev);
    size_t n = evbuffer_get_length(in);
    char *text = xmalloc(n + 1);
    evbuffer_remove(in, text, n);
    text[n] = '\0';
    int status = 0;
    char *head_end = strstr(text, "\r\n\r\n");
    if (n < 12 || strncmp(text, "HTTP/1.", 7) != 0 || head_end == NULL ||
        sscanf(text + 9, "%3d", &status) != 1 || status < 100 || status > 599) {
        free(text);
        finish(get, 0, NULL, 0, "not an HTTP answer");
        return;
    }
    char *body = head_end + 4;
    size_t len = n - (size_t)(body - text);
    *head_end = '\0';
    for (char *line = strstr(text, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "Content-Length:", 15) == 0) {
            unsigned long cl = strtoul(line + 17, NULL, 10);
            if (cl < len)
                len = cl;
        }
    }
    body[len] = '\0';
    finish(get, status, body, len, NULL);
    free(text);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    struct http_get *get = arg;
    if (evbuffer_get_length(bufferevent_get_input(bev)) > get->max_bytes)
        finish(get, 0, NULL, 0, "answer too large");
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct http_get *get = arg;
    if (what & BEV_EVENT_CONNECTED) {
        bufferevent_write(get->bev, get->req.data, get->req.len);
        return;
    }
    if (what & BEV_EVENT_EOF)
        deliver(get);
    else if (what & BEV_EVENT_ERROR)
        finish(get, 0, NULL, 0, "cannot connect");
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct http_get *get = arg;
    finish(get, 0, NULL, 0, get->error[0] != '\0' ? get->error : "timed out");
}

struct http_get *http_get_start(struct event_base *base, const char *addr,
                                                  const char *path, const char *token,
                                                  int64_t timeout_ms, size_t max_bytes,
                                                  http_get_fn fn, void *ctx)
{
    struct http_get *get = xcalloc(1, sizeof(*get));
    get->fn = fn;
    get->ctx = ctx;
    get->max_bytes = max_bytes;
    get->timer = evtimer_new(base, timer_cb, get);
    buf_printf(&get->req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", path, addr);
    if (token != NULL && token[0] != '\0')
        buf_printf(&get->req, "Authorization: Bearer %s\r\n", token);
    buf_append_str(&get->req, "\r\n");
    struct net_addr na;
    struct petrel_error err;
    struct timeval tv = clock_ms_to_timeval(timeout_ms);
    if (!net_addr_parse_numeric(addr, &na, &err)) {
        snprintf(get->error, sizeof(get->error), "bad address");
        tv.tv_sec = 0;
        tv.tv_usec = 0;
        evtimer_add(get->timer, &tv);
        return get;
    }
    get->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(get->bev, read_cb, NULL, event_cb, get);
    bufferevent_enable(get->bev, EV_READ | EV_WRITE);
    evtimer_add(get->timer, &tv);
    if (bufferevent_socket_connect(get->bev, (struct sockaddr *)&na.ss, (int)na.len) != 0) {
        bufferevent_free(get->bev);
        get->bev = NULL;
        snprintf(get->error, sizeof(get->error), "cannot connect");
        evtimer_del(get->timer);
        tv.tv_sec = 0;
        tv.tv_usec = 0;
        evtimer_add(get->timer, &tv);
    }
    return get;
}

void http_get_cancel(struct http_get *get)
{
    if (get == NULL)
        return;
    if (get->bev != NULL)
        bufferevent_free(get->bev);
    event_free(get->timer);
    buf_free(&get->req);
    free(get);
}
