/* petrelctl auth test|user|hash. `test` and `user` ask the auth service
 * directly, in its line protocol (docs/auth-protocol.md), over one blocking
 * connection per command: the operator's view of what a login or a mail
 * delivery would get. `auth test` checks a password (VERIFY) and shows the
 * userdb fields that come with a success, `auth user` looks a user up
 * (USER). `auth hash` needs no service: it makes a stored password.
 *
 * Exit codes are petrelctl's: 0 ok; 1 refused (wrong password, unknown
 * user, a permanent FAIL); 2 usage; 3 the service could not be reached or
 * could not answer now (connection, timeout, a FAIL marked `temp`). */
#include "ctl/ctl.h"

#include "core/buf.h"
#include "core/json-util.h"
#include "net/sockaddr.h"
#include "clients/auth/auth-protocol.h"
#include "clients/auth/password-scheme.h"
#include "clients/auth/userdb.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <termios.h>
#include <unistd.h>

#define DEFAULT_AUTH_ADDR "127.0.0.1:10200"
#define DEFAULT_SERVICE "petrelctl"
/* Understood by Dovecot as well, for passwd-files shared during a migration. */
#define DEFAULT_HASH_SCHEME PASSWORD_SCHEME_SHA512_CRYPT
/* One command, one request: any id will do. */
#define REQUEST_ID "1"

struct auth_args {
    const char *addr;
    const char *service;
    const char *ip;
    const char *scheme;
    bool password_stdin;
    bool json;
};

static void auth_usage(void)
{
    fprintf(stderr,
            "usage: petrelctl auth <command> [options]\n"
            "  test <user> [--password-stdin] [--service S] [--ip IP]\n"
            "                          check a password (asked on the terminal, or one line\n"
            "                          from stdin with --password-stdin); print the userdb\n"
            "  user <user>             print the user's userdb fields\n"
            "  hash [--scheme S] [--password-stdin]\n"
            "                          print a stored password \"{SCHEME}hash\" (schemes:\n"
            "                          SHA512-CRYPT (default), BLF-CRYPT, CRYPT (yescrypt),\n"
            "                          ARGON2ID, PLAIN)\n"
            "options: --auth-addr ADDR (env PETREL_AUTH_ADDR, default " DEFAULT_AUTH_ADDR
            "; host:port or unix:/path), --json\n"
            "exit codes: 0 ok, 1 refused or not found, 2 usage, 3 auth service unreachable or\n"
            "temporarily failing\n");
}

/* Parses options anywhere after the command word; leaves positionals in argv. */
static int parse_args(int argc, char **argv, struct auth_args *a)
{
    const struct ctl_option options[] = {
        {"auth-addr", .text = &a->addr},
        {"service", .text = &a->service},
        {"ip", .text = &a->ip},
        {"scheme", .text = &a->scheme},
        {"password-stdin", .flag = &a->password_stdin},
        {"json", .flag = &a->json},
    };
    return ctl_parse_options(argc, argv, options, sizeof(options) / sizeof(options[0]));
}

/* ---------- reading the password ---------- */

static struct termios saved_termios;

/* A signal while echo is off must not leave the terminal silent. */
static void restore_terminal_and_die(int sig)
{
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Reads one line from stdin without its line end; NULL at EOF or on error. */
static char *read_line(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return line;
}

static char *read_password_from_terminal(const char *prompt)
{
    if (tcgetattr(STDIN_FILENO, &saved_termios) != 0) {
        fprintf(stderr, "petrelctl: cannot read the terminal settings: %s\n", strerror(errno));
        return NULL;
    }
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    struct sigaction sa, old[4];
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = restore_terminal_and_die;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < 4; i++)
        sigaction(signals[i], &sa, &old[i]);
    struct termios quiet = saved_termios;
    quiet.c_lflag &= ~(tcflag_t)ECHO;
    quiet.c_lflag |= ECHONL;
    fputs(prompt, stderr);
    fflush(stderr);
    char *password = NULL;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) != 0)
        fprintf(stderr, "\npetrelctl: cannot turn the terminal's echo off: %s\n", strerror(errno));
    else
        password = read_line();
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
    for (size_t i = 0; i < 4; i++)
        sigaction(signals[i], &old[i], NULL);
    return password;
}

static void free_password(char *password)
{
    if (password != NULL) {
        explicit_bzero(password, strlen(password));
        free(password);
    }
}

/* ---------- the connection ---------- */

struct auth_conn {
    int fd;
    const char *addr;
    long timeout_secs;
    struct buf in; /* received bytes not handled yet */
};

static int conn_open(struct auth_conn *conn, const char *addr, long timeout_secs)
{
    conn->fd = -1;
    conn->addr = addr;
    conn->timeout_secs = timeout_secs;
    memset(&conn->in, 0, sizeof(conn->in));
    struct net_addr na;
    struct petrel_error err;
    if (!net_addr_parse(addr, &na, &err)) {
        fprintf(stderr, "petrelctl: --auth-addr: %s\n", err.message);
        return CTL_USAGE;
    }
    conn->fd = socket(na.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (conn->fd < 0) {
        fprintf(stderr, "petrelctl: cannot create a socket: %s\n", strerror(errno));
        return CTL_UNREACHABLE;
    }
    /* On Linux the send timeout bounds connect() as well. */
    struct timeval tv = {.tv_sec = timeout_secs};
    setsockopt(conn->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(conn->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int r;
    do {
        r = connect(conn->fd, (struct sockaddr *)&na.ss, na.len);
    } while (r != 0 && errno == EINTR);
    if (r != 0) {
        fprintf(stderr, "petrelctl: cannot connect to the auth service at %s: %s\n", addr,
                errno == EINPROGRESS || errno == EAGAIN ? "timed out" : strerror(errno));
        return CTL_UNREACHABLE;
    }
    return CTL_OK;
}

static void conn_close(struct auth_conn *conn)
{
    if (conn->fd >= 0)
        close(conn->fd);
    conn->fd = -1;
    buf_free(&conn->in);
}

static int conn_send(struct auth_conn *conn, const struct buf *line)
{
    if (line->len - 1 > AUTH_LINE_MAX) {
        fprintf(stderr, "petrelctl: request longer than the auth protocol's %d-byte limit\n",
                AUTH_LINE_MAX);
        return CTL_USAGE;
    }
    size_t off = 0;
    while (off < line->len) {
        ssize_t n = send(conn->fd, line->data + off, line->len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "petrelctl: cannot send to the auth service at %s: %s\n", conn->addr,
                    n < 0 && errno != EAGAIN ? strerror(errno) : "timed out");
            return CTL_UNREACHABLE;
        }
        off += (size_t)n;
    }
    return CTL_OK;
}

/* Receives the next line into *line (a fresh allocation without its LF,
 * with room for the parser's terminator); *len is its length. */
static int conn_receive(struct auth_conn *conn, char **line, size_t *len)
{
    for (;;) {
        char *lf = conn->in.len > 0 ? memchr(conn->in.data, '\n', conn->in.len) : NULL;
        if (lf != NULL) {
            *len = (size_t)(lf - conn->in.data);
            *line = malloc(*len + 1);
            if (*line == NULL) {
                fprintf(stderr, "petrelctl: out of memory\n");
                return CTL_UNREACHABLE;
            }
            memcpy(*line, conn->in.data, *len + 1);
            size_t rest = conn->in.len - *len - 1;
            memmove(conn->in.data, lf + 1, rest);
            conn->in.len = rest;
            return CTL_OK;
        }
        if (conn->in.len > AUTH_LINE_MAX) {
            fprintf(stderr, "petrelctl: reply line longer than %d bytes\n", AUTH_LINE_MAX);
            return CTL_UNREACHABLE;
        }
        buf_reserve(&conn->in, 16384);
        ssize_t n = recv(conn->fd, conn->in.data + conn->in.len, 16384, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                fprintf(stderr, "petrelctl: no reply from the auth service at %s within %ld s\n",
                        conn->addr, conn->timeout_secs);
            else
                fprintf(stderr, "petrelctl: cannot read from the auth service at %s: %s\n",
                        conn->addr, strerror(errno));
            return CTL_UNREACHABLE;
        }
        if (n == 0) {
            fprintf(stderr, "petrelctl: the auth service at %s closed the connection\n",
                    conn->addr);
            return CTL_UNREACHABLE;
        }
        conn->in.len += (size_t)n;
    }
}

/* Sends `request` and waits for the reply to REQUEST_ID; *text holds the
 * parsed line's storage (free it after using `reply`). */
static int exchange(struct auth_conn *conn, const struct buf *request, struct auth_line *reply,
                    char **text)
{
    int rc = conn_send(conn, request);
    if (rc != CTL_OK)
        return rc;
    for (;;) {
        size_t len;
        rc = conn_receive(conn, text, &len);
        if (rc != CTL_OK)
            return rc;
        struct petrel_error err;
        if (!auth_line_parse(*text, len, reply, &err)) {
            fprintf(stderr, "petrelctl: unreadable reply from the auth service: %s\n", err.message);
            free(*text);
            return CTL_REFUSED;
        }
        if (reply->count >= 2 && strcmp(reply->fields[1], REQUEST_ID) == 0)
            return CTL_OK;
        if (reply->count >= 2 && strcmp(reply->fields[0], "FAIL") == 0 &&
            strcmp(reply->fields[1], "-") == 0) {
            const char *reason = auth_line_param(reply, 2, "reason");
            fprintf(stderr, "petrelctl: the auth service refused the request: %s\n",
                    reason != NULL ? reason : "no reason given");
            free(*text);
            return CTL_REFUSED;
        }
        free(*text); /* not ours: the service never sends one, but it costs nothing */
    }
}

/* ---------- output ---------- */

/* A JSON string for any bytes (invalid UTF-8 becomes U+FFFD). */
static json_t *json_text(const char *s)
{
    struct buf b = {0};
    json_append_string(&b, s, strlen(s));
    json_t *v = json_loadb(b.data, b.len, JSON_DECODE_ANY, NULL);
    buf_free(&b);
    return v != NULL ? v : json_string("");
}

/* Prints the OK reply's user and userdb fields (fields[3..]). */
static int print_userdb(const struct auth_args *a, const struct auth_line *reply,
                        const char *heading, bool authenticated)
{
    const char *user = reply->count >= 3 ? reply->fields[2] : "";
    struct userdb_entry *e = userdb_entry_new(user);
    char *error = NULL;
    if (!auth_line_read_userdb(reply, 3, e, &error)) {
        fprintf(stderr, "petrelctl: bad userdb field in the auth service's reply: %s\n", error);
        free(error);
        userdb_entry_free(e);
        return CTL_REFUSED;
    }
    json_t *block = userdb_entry_to_json(e);
    if (a->json) {
        json_t *out = json_object();
        if (authenticated)
            json_object_set_new(out, "authenticated", json_true());
        json_object_set_new(out, "username", json_text(user));
        json_object_set(out, "userdb", block);
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text != NULL ? text : "{}");
        free(text);
        json_decref(out);
    } else {
        json_t *name = json_text(user);
        printf("%s: %s\n", heading, json_string_value(name));
        json_decref(name);
        ctl_print_readable(block, 0);
    }
    json_decref(block);
    userdb_entry_free(e);
    return CTL_OK;
}

/* FAIL <id> [user=] [reason=] [temp]: says why; 3 for `temp`, else 1. */
static int print_fail(const struct auth_line *reply, const char *user, const char *fallback)
{
    const char *reason = auth_line_param(reply, 2, "reason");
    bool temp = auth_line_param(reply, 2, "temp") != NULL;
    fprintf(stderr, "petrelctl: %s: %s%s\n", user,
            reason != NULL && reason[0] != '\0' ? reason : fallback,
            temp ? " (try again later)" : "");
    return temp ? CTL_UNREACHABLE : CTL_REFUSED;
}

/* ---------- commands ---------- */

/* How a command words the outcomes of its request about `user`. */
struct auth_wording {
    const char *heading;   /* over the userdb fields of an OK */
    bool authenticated;    /* "authenticated": true in the JSON of an OK */
    const char *not_found; /* NOTFOUND */
    const char *failed;    /* a FAIL without a reason */
};

/* auth test (VERIFY) and auth user (USER) */
static const struct auth_wording verify_wording = {"authenticated", true, "unknown user",
                                                   "authentication failed"};
static const struct auth_wording lookup_wording = {"user", false, "no such user", "lookup failed"};

/* Sends `request` (wiped and freed here: it may hold a password) over a
 * fresh connection and prints the answer about `user`. Returns the exit
 * code. */
static int ask(const struct ctl_options *opts, const struct auth_args *a, struct buf *request,
               const char *user, const struct auth_wording *w)
{
    struct auth_conn conn;
    int rc = conn_open(&conn, a->addr, opts->backend.timeout_secs);
    struct auth_line reply;
    char *text = NULL;
    if (rc == CTL_OK)
        rc = exchange(&conn, request, &reply, &text);
    explicit_bzero(request->data, request->cap);
    buf_free(request);
    conn_close(&conn);
    if (rc != CTL_OK)
        return rc;
    const char *verb = reply.fields[0];
    if (strcmp(verb, "OK") == 0)
        rc = print_userdb(a, &reply, w->heading, w->authenticated);
    else if (strcmp(verb, "FAIL") == 0)
        rc = print_fail(&reply, user, w->failed);
    else if (strcmp(verb, "NOTFOUND") == 0) {
        fprintf(stderr, "petrelctl: %s: %s\n", user, w->not_found);
        rc = CTL_REFUSED;
    } else {
        fprintf(stderr, "petrelctl: unexpected reply '%s' from the auth service\n", verb);
        rc = CTL_REFUSED;
    }
    free(text);
    return rc;
}

static int cmd_test(const struct ctl_options *opts, const struct auth_args *a, char **pos, int n)
{
    if (n != 1 || a->scheme != NULL) {
        auth_usage();
        return CTL_USAGE;
    }
    const char *user = pos[0];
    char *password;
    if (a->password_stdin) {
        password = read_line();
        if (password == NULL) {
            fprintf(stderr, "petrelctl: --password-stdin: no line on stdin\n");
            return CTL_USAGE;
        }
    } else if (isatty(STDIN_FILENO)) {
        password = read_password_from_terminal("Password: ");
        if (password == NULL)
            return CTL_USAGE;
    } else {
        fprintf(stderr, "petrelctl: stdin is not a terminal: pass the password with "
                        "--password-stdin\n");
        return CTL_USAGE;
    }

    struct buf request = {0};
    auth_line_add(&request, "VERIFY");
    auth_line_add(&request, REQUEST_ID);
    auth_line_add(&request, user);
    auth_line_add(&request, password);
    auth_line_add_param(&request, "service", a->service != NULL ? a->service : DEFAULT_SERVICE);
    if (a->ip != NULL)
        auth_line_add_param(&request, "ip", a->ip);
    auth_line_end(&request);
    free_password(password);

    return ask(opts, a, &request, user, &verify_wording);
}

static int cmd_user(const struct ctl_options *opts, const struct auth_args *a, char **pos, int n)
{
    if (n != 1 || a->password_stdin || a->service != NULL || a->ip != NULL || a->scheme != NULL) {
        auth_usage();
        return CTL_USAGE;
    }
    const char *user = pos[0];
    struct buf request = {0};
    auth_line_add(&request, "USER");
    auth_line_add(&request, REQUEST_ID);
    auth_line_add(&request, user);
    auth_line_end(&request);

    return ask(opts, a, &request, user, &lookup_wording);
}

/* Asks twice on a terminal (a typo would otherwise become the password). */
static char *read_new_password(bool from_stdin)
{
    if (from_stdin) {
        char *password = read_line();
        if (password == NULL)
            fprintf(stderr, "petrelctl: --password-stdin: no line on stdin\n");
        return password;
    }
    if (!isatty(STDIN_FILENO)) {
        fprintf(stderr, "petrelctl: stdin is not a terminal: pass the password with "
                        "--password-stdin\n");
        return NULL;
    }
    char *first = read_password_from_terminal("New password: ");
    if (first == NULL)
        return NULL;
    char *again = read_password_from_terminal("Retype new password: ");
    bool same = again != NULL && strcmp(first, again) == 0;
    free_password(again);
    if (!same) {
        fprintf(stderr, "petrelctl: the passwords do not match\n");
        free_password(first);
        return NULL;
    }
    return first;
}

static int cmd_hash(const struct auth_args *a, int n)
{
    if (n != 0 || a->service != NULL || a->ip != NULL) {
        auth_usage();
        return CTL_USAGE;
    }
    enum password_scheme scheme = DEFAULT_HASH_SCHEME;
    if (a->scheme != NULL) {
        scheme = password_scheme_parse(a->scheme);
        if (scheme == PASSWORD_SCHEME_UNKNOWN) {
            fprintf(stderr, "petrelctl: unknown password scheme '%s'\n", a->scheme);
            return CTL_USAGE;
        }
    }
    char *password = read_new_password(a->password_stdin);
    if (password == NULL)
        return CTL_USAGE;
    struct petrel_error err;
    char *stored = password_hash(scheme, password, &err);
    free_password(password);
    if (stored == NULL) {
        fprintf(stderr, "petrelctl: cannot hash the password: %s\n", err.message);
        return CTL_REFUSED;
    }
    if (a->json) {
        json_t *out =
            json_pack("{s:s, s:s}", "scheme", password_scheme_name(scheme), "password", stored);
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text != NULL ? text : "{}");
        free(text);
        json_decref(out);
    } else {
        puts(stored);
    }
    free_password(stored);
    return CTL_OK;
}

int ctl_auth_main(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc < 1) {
        auth_usage();
        return CTL_USAGE;
    }
    struct auth_args a;
    memset(&a, 0, sizeof(a));
    const char *env = getenv("PETREL_AUTH_ADDR");
    a.addr = env != NULL && env[0] != '\0' ? env : DEFAULT_AUTH_ADDR;
    a.json = opts->json;
    const char *command = argv[0];
    int first = parse_args(argc, argv, &a);
    if (first < 0) {
        auth_usage();
        return CTL_USAGE;
    }
    char **pos = argv + first;
    int n = argc - first;
    if (strcmp(command, "test") == 0)
        return cmd_test(opts, &a, pos, n);
    if (strcmp(command, "user") == 0)
        return cmd_user(opts, &a, pos, n);
    if (strcmp(command, "hash") == 0)
        return cmd_hash(&a, n);
    fprintf(stderr, "petrelctl: unknown auth command '%s'\n", command);
    auth_usage();
    return CTL_USAGE;
}
