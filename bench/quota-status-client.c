/* A pipelined Postfix policy client for bench/quota-status.py --client c:
 * the Python client spends as much CPU per request as quota-status does,
 * so on a busy machine it, not the service, set the pace.
 *
 *   quota-status-client <port> <seconds> <window> <users>
 *
 * One connection to 127.0.0.1:<port>; keeps <window> requests in flight
 * (recipients u0..u<users-1>@example.org, size=1000, the attributes Postfix
 * sends at RCPT) for <seconds>, then waits for the answers still due.
 * Prints "requests=N seconds=S dunno=N other=N client_cpu=S". */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: quota-status-client <port> <seconds> <window> <users>\n");
        return 2;
    }
    int port = atoi(argv[1]);
    double seconds = atof(argv[2]);
    long window = atol(argv[3]);
    int users = atoi(argv[4]);
    char **reqs = calloc((size_t)users, sizeof(*reqs));
    size_t *lens = calloc((size_t)users, sizeof(*lens));
    for (int i = 0; i < users; i++) {
        char buf[1024];
        int n = snprintf(buf, sizeof(buf),
                         "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"
                         "helo_name=client.example\nqueue_id=\nsender=sender@example.net\n"
                         "recipient=u%d@example.org\nrecipient_count=0\n"
                         "client_address=192.0.2.10\nclient_name=client.example\n"
                         "reverse_client_name=client.example\ninstance=1a2b.3c4d.5e6f.0\n"
                         "size=1000\n\n",
                         i);
        reqs[i] = strdup(buf);
        lens[i] = (size_t)n;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        return 1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    long sent = 0, done = 0, dunno = 0, other = 0;
    static char in[1 << 20];
    char *out = malloc((size_t)window * 1024);
    int nl = 0;           /* newlines seen at the end of the previous read */
    int dunno_state = -1; /* position matching "action=DUNNO" at an answer's start */
    static const char dunno_text[] = "action=DUNNO\n";
    double start = now(CLOCK_MONOTONIC), end = start + seconds,
           cpu0 = now(CLOCK_PROCESS_CPUTIME_ID);
    for (;;) {
        double t = now(CLOCK_MONOTONIC);
        if (t < end && sent - done < window) {
            size_t len = 0;
            for (long k = sent - done; k < window; k++, sent++) {
                int u = (int)(sent % users);
                memcpy(out + len, reqs[u], lens[u]);
                len += lens[u];
            }
            for (size_t off = 0; off < len;) {
                ssize_t w = write(fd, out + off, len - off);
                if (w <= 0) {
                    perror("write");
                    return 1;
                }
                off += (size_t)w;
            }
        }
        if (done == sent && t >= end)
            break;
        ssize_t r = read(fd, in, sizeof(in));
        if (r <= 0) {
            fprintf(stderr, "connection closed after %ld answers\n", done);
            return 1;
        }
        for (ssize_t i = 0; i < r; i++) {
            char c = in[i];
            if (dunno_state < 0)
                dunno_state = 0;
            if (dunno_state >= 0 && dunno_state < (int)sizeof(dunno_text) - 1)
                dunno_state = c == dunno_text[dunno_state] ? dunno_state + 1 : 1000;
            if (c == '\n' && ++nl == 2) {
                done++;
                if (dunno_state == (int)sizeof(dunno_text) - 1)
                    dunno++;
                else
                    other++;
                nl = 0;
                dunno_state = -1;
            } else if (c != '\n') {
                nl = 0;
            }
        }
    }
    double elapsed = now(CLOCK_MONOTONIC) - start;
    printf("requests=%ld seconds=%.3f dunno=%ld other=%ld client_cpu=%.3f\n", done, elapsed, dunno,
           other, now(CLOCK_PROCESS_CPUTIME_ID) - cpu0);
    close(fd);
    return 0;
}
