/* Load generator for the director (bench/director.sh).
 *
 *   director-bench ring ADDR SECONDS WINDOW USERS
 *       one login connection on the ring port: handshake, then LOOKUPs for
 *       users user0..user<USERS-1>@bench.example with up to WINDOW in
 *       flight (pipelined; 1 = one after another)
 *   director-bench http ADDR SECONDS CONNECTIONS USERS [TOKEN]
 *       CONNECTIONS keep-alive HTTP/1.1 connections to the admin API, each
 *       with one GET /api/director/map?user=... outstanding at a time
 *
 * Reports requests/s and latency percentiles measured per request. Every
 * answer must be a success (LOOKUP-OK / 200): anything else means the run
 * measures the wrong thing, and the exit status is 1. */
#include "core/buf.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "clients/ring/ring-protocol.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_WINDOW 65536
#define MAX_CONNECTIONS 1024
#define SLOTS 262144 /* send times by request id */
#define IN_SIZE (1 << 20)

struct latencies {
    double *v;
    size_t n, cap;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void record(struct latencies *l, double v)
{
    if (l->n == l->cap) {
        l->cap = l->cap == 0 ? 1 << 20 : l->cap * 2;
        l->v = xrealloc(l->v, l->cap * sizeof(double));
    }
    l->v[l->n++] = v;
}

static void report(const char *what, unsigned long ok, unsigned long failed, double elapsed,
                   struct latencies *l)
{
    qsort(l->v, l->n, sizeof(double), cmp_double);
    double p50 = l->n > 0 ? l->v[l->n / 2] * 1e3 : 0;
    double p99 = l->n > 0 ? l->v[(size_t)((double)l->n * 0.99)] * 1e3 : 0;
    double max = l->n > 0 ? l->v[l->n - 1] * 1e3 : 0;
    printf("%s requests=%lu ok=%lu failed=%lu seconds=%.2f rate=%.0f p50_ms=%.3f p99_ms=%.3f "
           "max_ms=%.3f\n",
           what, ok + failed, ok, failed, elapsed, (double)(ok + failed) / elapsed, p50, p99, max);
    free(l->v);
}

static int connect_to(const char *addr)
{
    struct net_addr na;
    struct petrel_error err;
    if (!net_addr_parse(addr, &na, &err)) {
        fprintf(stderr, "director-bench: %s\n", err.message);
        exit(2);
    }
    int fd = socket(na.ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&na.ss, na.len) != 0) {
        fprintf(stderr, "director-bench: cannot connect to %s: %s\n", addr, strerror(errno));
        exit(2);
    }
    return fd;
}

static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            perror("director-bench: write");
            exit(1);
        }
        data += w;
        len -= (size_t)w;
    }
}

/* ---------- ring ---------- */

/* Reads lines until DONE (the HOST handshake). */
static void ring_handshake(int fd, char *in, size_t *in_len)
{
    struct buf out = {0};
    ring_write_version(&out);
    ring_write_hello(&out, RING_KIND_LOGIN, "director-bench");
    write_all(fd, out.data, out.len);
    buf_free(&out);
    for (;;) {
        char *done = NULL;
        for (char *p = in; p < in + *in_len;) {
            char *nl = memchr(p, '\n', (size_t)(in + *in_len - p));
            if (nl == NULL)
                break;
            if (nl - p == 4 && memcmp(p, "DONE", 4) == 0) {
                done = nl + 1;
                break;
            }
            p = nl + 1;
        }
        if (done != NULL) {
            *in_len -= (size_t)(done - in);
            memmove(in, done, *in_len);
            return;
        }
        ssize_t r = read(fd, in + *in_len, IN_SIZE - *in_len);
        if (r <= 0) {
            fprintf(stderr, "director-bench: no handshake from the director\n");
            exit(1);
        }
        *in_len += (size_t)r;
    }
}

static int run_ring(const char *addr, double seconds, long window, long users)
{
    int fd = connect_to(addr);
    char *in = xmalloc(IN_SIZE);
    size_t in_len = 0;
    ring_handshake(fd, in, &in_len);
    double *sent_at = xcalloc(SLOTS, sizeof(double));
    struct latencies lat = {0};
    struct buf out = {0};
    long in_flight = 0;
    unsigned long next = 0, ok = 0, failed = 0;
    double start = now_s(), end = start + seconds;
    bool sending = true;
    while (sending || in_flight > 0) {
        if (sending && now_s() >= end)
            sending = false;
        if (!sending && in_flight == 0)
            break;
        if (sending && in_flight < window) {
            double t = now_s();
            while (in_flight < window) {
                buf_printf(&out, "LOOKUP\t%lu\tuser%lu@bench.example\n", next,
                           next % (unsigned long)users);
                sent_at[next % SLOTS] = t;
                next++;
                in_flight++;
            }
            write_all(fd, out.data, out.len);
            buf_reset(&out);
        }
        ssize_t r = read(fd, in + in_len, IN_SIZE - in_len);
        if (r <= 0) {
            fprintf(stderr, "director-bench: connection closed\n");
            return 1;
        }
        in_len += (size_t)r;
        double t = now_s();
        char *p = in;
        char *nl;
        while ((nl = memchr(p, '\n', in_len - (size_t)(p - in))) != NULL) {
            *nl = '\0';
            char *tab = strchr(p, '\t');
            unsigned long id = tab != NULL ? strtoul(tab + 1, NULL, 10) : 0;
            if (strncmp(p, "LOOKUP-OK\t", 10) == 0) {
                ok++;
            } else if (strncmp(p, "LOOKUP-FAIL\t", 12) == 0) {
                failed++;
            } else {
                p = nl + 1; /* a push: not an answer */
                continue;
            }
            record(&lat, t - sent_at[id % SLOTS]);
            in_flight--;
            p = nl + 1;
        }
        in_len -= (size_t)(p - in);
        memmove(in, p, in_len);
    }
    report("ring", ok, failed, now_s() - start, &lat);
    close(fd);
    buf_free(&out);
    free(in);
    free(sent_at);
    return failed == 0 ? 0 : 1;
}

/* ---------- http ---------- */

struct http_conn {
    int fd;
    char *in;
    size_t in_len;
    double sent_at;
    bool waiting;
};

static void http_send(struct http_conn *c, const char *token, unsigned long n, long users)
{
    char req[512];
    int len = snprintf(req, sizeof(req),
                       "GET /api/director/map?user=user%lu%%40bench.example HTTP/1.1\r\n"
                       "Host: bench\r\n%s%s%s\r\n",
                       n % (unsigned long)users, token != NULL ? "Authorization: Bearer " : "",
                       token != NULL ? token : "", token != NULL ? "\r\n" : "");
    c->sent_at = now_s();
    c->waiting = true;
    write_all(c->fd, req, (size_t)len);
}

/* Length of one complete response at the start of c->in (0: incomplete);
 * *status gets its status code. */
static size_t http_complete(const struct http_conn *c, int *status)
{
    const char *end = NULL;
    for (size_t i = 0; i + 3 < c->in_len; i++) {
        if (memcmp(c->in + i, "\r\n\r\n", 4) == 0) {
            end = c->in + i + 4;
            break;
        }
    }
    if (end == NULL)
        return 0;
    *status = atoi(c->in + 9);
    size_t body = 0;
    for (const char *p = c->in; p < end; p++) {
        if (strncasecmp(p, "\r\ncontent-length:", 17) == 0) {
            body = strtoul(p + 17, NULL, 10);
            break;
        }
    }
    size_t total = (size_t)(end - c->in) + body;
    return c->in_len >= total ? total : 0;
}

static int run_http(const char *addr, double seconds, long conns, long users, const char *token)
{
    struct http_conn *c = xcalloc((size_t)conns, sizeof(*c));
    struct pollfd *pfd = xcalloc((size_t)conns, sizeof(*pfd));
    for (long i = 0; i < conns; i++) {
        c[i].fd = connect_to(addr);
        c[i].in = xmalloc(IN_SIZE);
        pfd[i].fd = c[i].fd;
        pfd[i].events = POLLIN;
    }
    struct latencies lat = {0};
    unsigned long next = 0, ok = 0, failed = 0;
    double start = now_s(), end = start + seconds;
    long waiting = 0;
    for (long i = 0; i < conns; i++, waiting++)
        http_send(&c[i], token, next++, users);
    while (waiting > 0) {
        if (poll(pfd, (nfds_t)conns, 1000) < 0 && errno != EINTR) {
            perror("director-bench: poll");
            return 1;
        }
        bool sending = now_s() < end;
        for (long i = 0; i < conns; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(c[i].fd, c[i].in + c[i].in_len, IN_SIZE - c[i].in_len);
            if (r <= 0) {
                fprintf(stderr, "director-bench: HTTP connection closed\n");
                return 1;
            }
            c[i].in_len += (size_t)r;
            int status = 0;
            size_t len = http_complete(&c[i], &status);
            if (len == 0)
                continue;
            record(&lat, now_s() - c[i].sent_at);
            if (status == 200)
                ok++;
            else
                failed++;
            c[i].in_len -= len;
            memmove(c[i].in, c[i].in + len, c[i].in_len);
            c[i].waiting = false;
            waiting--;
            if (sending) {
                http_send(&c[i], token, next++, users);
                waiting++;
            }
        }
    }
    report("http", ok, failed, now_s() - start, &lat);
    for (long i = 0; i < conns; i++) {
        close(c[i].fd);
        free(c[i].in);
    }
    free(c);
    free(pfd);
    return failed == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "ring") == 0) {
        double seconds = atof(argv[3]);
        long window = atol(argv[4]), users = atol(argv[5]);
        if (seconds <= 0 || window < 1 || window > MAX_WINDOW || users < 1) {
            fprintf(stderr, "director-bench: bad SECONDS, WINDOW or USERS\n");
            return 2;
        }
        return run_ring(argv[2], seconds, window, users);
    }
    if (argc >= 6 && strcmp(argv[1], "http") == 0) {
        double seconds = atof(argv[3]);
        long conns = atol(argv[4]), users = atol(argv[5]);
        if (seconds <= 0 || conns < 1 || conns > MAX_CONNECTIONS || users < 1) {
            fprintf(stderr, "director-bench: bad SECONDS, CONNECTIONS or USERS\n");
            return 2;
        }
        return run_http(argv[2], seconds, conns, users, argc > 6 ? argv[6] : NULL);
    }
    fprintf(stderr, "usage: director-bench ring ADDR SECONDS WINDOW USERS\n"
                    "       director-bench http ADDR SECONDS CONNECTIONS USERS [TOKEN]\n");
    return 2;
}
