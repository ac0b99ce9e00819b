/* Load generator for the auth service (bench/auth.sh): one connection,
 * VERIFY requests for a set of users with their passwords, up to `window`
 * requests in flight (1 = strictly one after another). Reports requests/s
 * and latency percentiles measured per request.
 *
 *   auth-bench ADDR SECONDS WINDOW USERS_FILE
 *
 * USERS_FILE holds "user<TAB>password" lines. Every reply must be OK: a
 * FAIL means the benchmark is measuring the wrong thing and it exits 1. */
#include "bench-users.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "clients/auth/auth-protocol.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WINDOW 4096
#define SLOTS 65536 /* send times by id; far more than can be in flight */


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


static int connect_to(const char *addr)
{
    struct net_addr na;
    struct petrel_error err;
    if (!net_addr_parse(addr, &na, &err)) {
        fprintf(stderr, "auth-bench: %s\n", err.message);
        exit(2);
    }
    int fd = socket(na.ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&na.ss, na.len) != 0) {
        fprintf(stderr, "auth-bench: cannot connect to %s: %s\n", addr, strerror(errno));
        exit(2);
    }
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: auth-bench ADDR SECONDS WINDOW USERS_FILE\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    long window = atol(argv[3]);
    if (window < 1 || window > MAX_WINDOW || seconds <= 0) {
        fprintf(stderr, "auth-bench: bad SECONDS or WINDOW\n");
        return 2;
    }
    struct bench_credential *users = NULL;
    size_t user_count = bench_users_load("auth-bench", argv[4], &users);
    int fd = connect_to(argv[1]);

    double *sent_at = xcalloc(SLOTS, sizeof(double));
    size_t lat_cap = 1 << 20, lat_n = 0;
    double *latencies = xmalloc(lat_cap * sizeof(double));
    struct buf out = {0};
    char *in = xmalloc(1 << 20);
    size_t in_len = 0;
    long in_flight = 0;
    unsigned long next = 0, ok = 0, failed = 0;
    double start = now_s(), end = start + seconds;
    bool sending = true;

    while (sending || in_flight > 0) {
        if (sending && now_s() >= end)
            sending = false;
        while (sending && in_flight < window) {
            const struct bench_credential *c = &users[next % user_count];
            char id[32];
            snprintf(id, sizeof(id), "%lu", next);
            auth_line_add(&out, "VERIFY");
            auth_line_add(&out, id);
            auth_line_add(&out, c->user);
            auth_line_add(&out, c->password);
            auth_line_add_param(&out, "service", "bench");
            auth_line_end(&out);
            sent_at[next % SLOTS] = now_s();
            next++;
            in_flight++;
        }
        if (out.len > 0) {
            ssize_t w = write(fd, out.data, out.len);
            if (w < 0) {
                perror("write");
                return 1;
            }
            memmove(out.data, out.data + w, out.len - (size_t)w);
            out.len -= (size_t)w;
        }
        if (in_flight == 0)
            break; /* time is up and every reply is in */
        ssize_t r = read(fd, in + in_len, (1 << 20) - in_len);
        if (r <= 0) {
            fprintf(stderr, "auth-bench: connection closed\n");
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
            if (strncmp(p, "OK\t", 3) == 0)
                ok++;
            else
                failed++;
            if (lat_n == lat_cap) {
                lat_cap *= 2;
                latencies = xrealloc(latencies, lat_cap * sizeof(double));
            }
            latencies[lat_n++] = t - sent_at[id % SLOTS];
            in_flight--;
            p = nl + 1;
        }
        in_len -= (size_t)(p - in);
        memmove(in, p, in_len);
    }
    double elapsed = now_s() - start;
    qsort(latencies, lat_n, sizeof(double), cmp_double);
    double p50 = latencies[lat_n / 2] * 1e3;
    double p99 = latencies[(size_t)((double)lat_n * 0.99)] * 1e3;
    printf("requests=%lu ok=%lu failed=%lu seconds=%.2f rate=%.0f p50_ms=%.3f p99_ms=%.3f\n",
           ok + failed, ok, failed, elapsed, (double)(ok + failed) / elapsed, p50, p99);
    close(fd);
    buf_free(&out);
    free(in);
    free(latencies);
    free(sent_at);
    bench_users_free(users, user_count);
    return failed == 0 ? 0 : 1;
}
