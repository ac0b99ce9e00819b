/* Runs a login proxy's backend dialogue (imap-proxy-login.h or
 * pop3-proxy-login.h) against a real server for the e2e tests, blocking:
 *
 *   proxy-login-probe imap|pop3 HOST PORT USER PASSWORD [IP PORT SESSION TTL]
 *
 * prints "<step> <text>" (the dialogue's verdict), then on "ok" sends one
 * command through the logged-in connection (IMAP "P3 LOGOUT", POP3 "QUIT")
 * and prints the backend's first answer to it, proving the session is one
 * the proxy could relay. Exit 0 when the dialogue ended. */
#include "protocols/imap/imap-proxy-login.h"
#include "protocols/pop3/pop3-proxy-login.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int dial(const char *host, const char *port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* One CRLF line into line (without it); false at EOF. */
static bool read_line(FILE *in, char *line, size_t size, size_t *len)
{
    if (fgets(line, (int)size, in) == NULL)
        return false;
    *len = strlen(line);
    while (*len > 0 && (line[*len - 1] == '\n' || line[*len - 1] == '\r'))
        line[--*len] = '\0';
    return true;
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 10) {
        fprintf(stderr, "usage: proxy-login-probe imap|pop3 HOST PORT USER PASSWORD "
                        "[IP PORT SESSION TTL]\n");
        return 2;
    }
    bool is_imap = strcmp(argv[1], "imap") == 0;
    struct mail_proxy_login_params p = {.user = argv[4], .password = argv[5]};
    mail_forward_init(&p.client);
    if (argc == 10) {
        snprintf(p.client.ip, sizeof(p.client.ip), "%s", argv[6]);
        p.client.port = (unsigned)atoi(argv[7]);
        snprintf(p.client.session, sizeof(p.client.session), "%s", argv[8]);
        p.client.ttl = atoi(argv[9]);
    }
    int fd = dial(argv[2], argv[3]);
    if (fd < 0) {
        printf("dial-failed\n");
        return 1;
    }
    FILE *in = fdopen(dup(fd), "r");
    struct imap_proxy_login *ipl = is_imap ? imap_proxy_login_new(&p) : NULL;
    struct pop3_proxy_login *ppl = is_imap ? NULL : pop3_proxy_login_new(&p);
    char line[9000];
    size_t len;
    struct mail_proxy_login_result r = {.step = MAIL_PROXY_LOGIN_CONTINUE};
    while (r.step == MAIL_PROXY_LOGIN_CONTINUE && read_line(in, line, sizeof(line), &len)) {
        struct buf out = {0};
        if (is_imap)
            imap_proxy_login_line(ipl, line, len, &out, &r);
        else
            pop3_proxy_login_line(ppl, line, len, &out, &r);
        if (out.len > 0 && write(fd, out.data, out.len) != (ssize_t)out.len)
            r.step = MAIL_PROXY_LOGIN_PROTOCOL;
        buf_free(&out);
    }
    printf("%s %s\n", mail_proxy_login_step_name(r.step), r.text != NULL ? r.text : "(eof)");
    if (r.step == MAIL_PROXY_LOGIN_OK) {
        const char *cmd = is_imap ? "P3 LOGOUT\r\n" : "QUIT\r\n";
        if (write(fd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd) &&
            read_line(in, line, sizeof(line), &len))
            printf("after %s\n", line);
    }
    fflush(stdout);
    imap_proxy_login_free(ipl);
    pop3_proxy_login_free(ppl);
    fclose(in);
    close(fd);
    return 0;
}
