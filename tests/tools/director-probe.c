/* A driver of clients/ring/director-client.h for the e2e tests (the login
 * proxy will be its real user): connects to the directors named on the
 * command line and runs commands read from stdin, one per line, printing one
 * line per answer and per push on stdout.
 *
 *   director-probe [--secret S] [--timeout-ms N] DIRECTOR...
 *   stdin:  lookup <user> [tag] | start <sid> <user> <backend-ip> <proto>
 *           | end <sid> | ready | sessions | quit
 *   stdout: lookup <user> ok <ip> <port> <outcome>
 *           lookup <user> fail <outcome|-> <error>
 *           start <sid> ok|refused     ready <n>     sessions <n>
 *           kicked <user>   moved <user> <ip> <port>   change <up|flush|down> <ip> <port>
 * Lookups answer asynchronously, so their lines come in answer order. */
#include "clients/ring/director-client.h"
#include "core/xalloc.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct probe {
    struct event_base *base;
    struct director_client *dc;
    struct bufferevent *in;
};

struct pending {
    char user[256];
};

static void looked_up(void *arg, const struct director_lookup_result *r)
{
    struct pending *p = arg;
    if (r->ok)
        printf("lookup %s ok %s %u %s\n", p->user, r->ip, r->port, ring_outcome_name(r->outcome));
    else
        printf("lookup %s fail %s %s\n", p->user,
               r->error != NULL && strncmp(r->error, "no director", 11) == 0
                   ? "-"
                   : ring_outcome_name(r->outcome),
               r->error != NULL ? r->error : "");
    fflush(stdout);
    free(p);
}

static void kicked(void *arg, const char *user)
{
    (void)arg;
    printf("kicked %s\n", user);
    fflush(stdout);
}

static void moved(void *arg, const char *user, const char *ip, unsigned port)
{
    (void)arg;
    printf("moved %s %s %u\n", user, ip, port);
    fflush(stdout);
}

static void changed(void *arg, enum ring_change change, const struct ring_host *host)
{
    (void)arg;
    printf("change %s %s %u\n", ring_change_name(change), host->ip, host->port);
    fflush(stdout);
}

static bool protocol_of(const char *name, enum ring_session_protocol *out)
{
    return name != NULL && ring_protocol_parse(name, out);
}

static void command(struct probe *pr, char *line)
{
    char *save = NULL;
    const char *verb = strtok_r(line, " ", &save);
    if (verb == NULL)
        return;
    if (strcmp(verb, "lookup") == 0) {
        const char *user = strtok_r(NULL, " ", &save);
        const char *tag = strtok_r(NULL, " ", &save);
        struct pending *p = xcalloc(1, sizeof(*p));
        snprintf(p->user, sizeof(p->user), "%s", user != NULL ? user : "");
        director_client_lookup(pr->dc, p->user, tag, looked_up, p);
    } else if (strcmp(verb, "start") == 0) {
        const char *sid = strtok_r(NULL, " ", &save);
        const char *user = strtok_r(NULL, " ", &save);
        const char *ip = strtok_r(NULL, " ", &save);
        enum ring_session_protocol proto;
        bool ok = sid != NULL && user != NULL && ip != NULL &&
                  protocol_of(strtok_r(NULL, " ", &save), &proto) &&
                  director_client_session_start(pr->dc, sid, user, ip, proto);
        printf("start %s %s\n", sid != NULL ? sid : "", ok ? "ok" : "refused");
    } else if (strcmp(verb, "end") == 0) {
        const char *sid = strtok_r(NULL, " ", &save);
        if (sid != NULL)
            director_client_session_end(pr->dc, sid);
        printf("end %s\n", sid != NULL ? sid : "");
    } else if (strcmp(verb, "ready") == 0) {
        printf("ready %zu\n", director_client_ready(pr->dc));
    } else if (strcmp(verb, "sessions") == 0) {
        printf("sessions %zu\n", director_client_sessions(pr->dc));
    } else if (strcmp(verb, "quit") == 0) {
        event_base_loopexit(pr->base, NULL);
    } else {
        printf("error unknown command %s\n", verb);
    }
    fflush(stdout);
}

static void input(struct bufferevent *bev, void *arg)
{
    struct probe *pr = arg;
    char *line;
    size_t len;
    while ((line = evbuffer_readln(bufferevent_get_input(bev), &len, EVBUFFER_EOL_LF)) != NULL) {
        command(pr, line);
        free(line);
    }
}

static void input_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct probe *pr = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        event_base_loopexit(pr->base, NULL);
}

int main(int argc, char **argv)
{
    const char *secret = NULL;
    int64_t timeout_ms = 2000;
    const char *dirs[17];
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--secret") == 0 && i + 1 < argc)
            secret = argv[++i];
        else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc)
            timeout_ms = strtoll(argv[++i], NULL, 10);
        else if (n < 16)
            dirs[n++] = argv[i];
    }
    dirs[n] = NULL;
    struct probe pr = {.base = event_base_new()};
    struct director_client_config cfg = {
        .addresses = dirs, .name = "probe", .secret = secret, .timeout_ms = timeout_ms};
    struct director_client_events ev = {
        .user_kicked = kicked, .user_moved = moved, .backend_change = changed};
    struct petrel_error err;
    pr.dc = director_client_new(pr.base, &cfg, &ev, &pr, &err);
    if (pr.dc == NULL) {
        fprintf(stderr, "director-probe: %s\n", err.message);
        return 2;
    }
    pr.in = bufferevent_socket_new(pr.base, STDIN_FILENO, 0);
    bufferevent_setcb(pr.in, input, NULL, input_event, &pr);
    bufferevent_enable(pr.in, EV_READ);
    event_base_dispatch(pr.base);
    director_client_free(pr.dc);
    bufferevent_free(pr.in);
    /* Let the line-clients' deferred releases run. */
    event_base_loop(pr.base, EVLOOP_NONBLOCK);
    event_base_free(pr.base);
    return 0;
}
