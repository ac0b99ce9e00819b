/* The login proxy front's per-connection state (mail-proxy-front-session.h). */
#include "protocols/common/mail-proxy-front-session.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/tls-conn.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

void mail_proxy_front_session_wipe(char **secret)
{
    if (*secret == NULL)
        return;
    OPENSSL_cleanse(*secret, strlen(*secret));
    free(*secret);
    *secret = NULL;
}

void mail_proxy_front_session_tls_ready(struct mail_proxy_front_session *fs,
                                        const struct login_metrics *lm)
{
    if (fs->tls_done || fs->tls_started_us == 0)
        return;
    fs->tls_done = true;
    login_metrics_phase(lm, LOGIN_PHASE_TLS_HANDSHAKE, fs->tls_started_us);
}

bool mail_proxy_front_session_bad_command(struct mail_proxy_front_session *fs,
                                          const struct login_metrics *lm, const char *component,
                                          const struct mail_session_io *io, unsigned max)
{
    if (!fs->preamble_counted) {
        fs->preamble_counted = true;
        login_metrics_result(lm, LOGIN_RESULT_PREAMBLE_ERROR);
        log_info(component, "invalid command before login", "session=%s peer=%s", io->id, io->peer);
    }
    return ++fs->bad_commands >= max && !io->closing;
}

void mail_proxy_front_session_login(struct mail_proxy_front_session *fs,
                                    struct mail_proxy_front *front, struct auth_client *auth,
                                    const char *user, const char *password, const char *ip,
                                    mail_proxy_auth_fn *done, void *arg)
{
    free(fs->login_name);
    fs->login_name = xstrdup(user);
    mail_proxy_front_session_wipe(&fs->password);
    fs->password = xstrdup(password);
    fs->auth = mail_proxy_auth_start(front, auth, user, password, ip, done, arg);
}

enum mail_proxy_front_auth mail_proxy_front_session_auth_done(
    struct mail_proxy_front_session *fs, const struct auth_client_reply *r,
    struct mail_proxy_front *front, struct mail_session_io *io, struct warden_client *warden,
    const struct mail_proxy_callbacks *cb, void *arg)
{
    fs->auth = NULL;
    if (io->closing) {
        mail_proxy_front_session_wipe(&fs->password);
        return MAIL_PROXY_FRONT_AUTH_CLOSING;
    }
    if (r->status == AUTH_CLIENT_OK && r->user != NULL) {
        const struct mail_proxy_request req = {
            .io = io,
            .warden = warden,
            .login_name = fs->login_name,
            .user = r->user,
            .password = fs->password,
            .tag = mail_proxy_director_tag(r->userdb),
        };
        fs->proxy = mail_proxy_start(front, &req, cb, arg);
        mail_proxy_front_session_wipe(&fs->password);
        return MAIL_PROXY_FRONT_AUTH_STARTED;
    }
    mail_proxy_front_session_wipe(&fs->password);
    if (r->status == AUTH_CLIENT_ERROR || r->temporary)
        return MAIL_PROXY_FRONT_AUTH_TEMPFAIL;
    return MAIL_PROXY_FRONT_AUTH_FAILED;
}

void mail_proxy_front_session_sasl_begin(struct mail_proxy_front_session *fs, const char *mech)
{
    sasl_exchange_init(&fs->sasl, sasl_mech_parse(mech));
    fs->sasl_running = true;
}

static void sasl_end(struct mail_proxy_front_session *fs)
{
    if (fs->sasl_running)
        sasl_exchange_free(&fs->sasl);
    fs->sasl_running = false;
}

enum mail_proxy_front_sasl mail_proxy_front_session_sasl_step(struct mail_proxy_front_session *fs,
                                                              const char *response,
                                                              struct buf *challenge, char **user,
                                                              char **password)
{
    switch (sasl_exchange_step(&fs->sasl, response, challenge)) {
    case SASL_STEP_CHALLENGE:
        return MAIL_PROXY_FRONT_SASL_CHALLENGE;
    case SASL_STEP_DONE:
        *user = xstrdup(fs->sasl.username);
        *password = xstrdup(fs->sasl.password);
        sasl_end(fs);
        return MAIL_PROXY_FRONT_SASL_DONE;
    case SASL_STEP_FAILED:
    default: {
        /* Undecodable base64 is the client's syntax (as Dovecot's login
         * processes answer it); a decoded response without a valid name
         * and password (RFC 4959's empty "=" for PLAIN, a foreign authzid)
         * is a failed login, as a backend and Dovecot answer it. */
        bool syntax = sasl_response_syntax_error(&fs->sasl);
        sasl_end(fs);
        return syntax ? MAIL_PROXY_FRONT_SASL_SYNTAX : MAIL_PROXY_FRONT_SASL_FAILED;
    }
    }
}

bool mail_proxy_front_session_sasl_continue(struct mail_proxy_front_session *fs, const char *line,
                                            size_t len)
{
    if ((len == 1 && line[0] == '*') || strlen(line) != len || !fs->sasl_running) {
        sasl_end(fs);
        return false;
    }
    return true;
}

void mail_proxy_front_session_relay(struct mail_proxy_front_session *fs, struct mail_session_io *io,
                                    const char *component)
{
    char uq[300];
    log_info(component, "proxied", "session=%s user=%s peer=%s tls=%s", io->id,
             log_quote(uq, sizeof(uq), io->username != NULL ? io->username : ""), io->peer,
             io->tls ? "yes" : "no");
    mail_session_io_clear_deadline(io);
    fs->result_counted = true;
    mail_proxy_relay(fs->proxy);
}

bool mail_proxy_front_session_shutdown(struct mail_proxy_front_session *fs, const char *farewell)
{
    if (fs == NULL || !mail_proxy_relaying(fs->proxy))
        return false;
    mail_proxy_stop(fs->proxy, farewell);
    return true;
}

void mail_proxy_front_session_release(struct mail_proxy_front_session *fs,
                                      const struct mail_session_io *io,
                                      const struct login_metrics *lm)
{
    /* A TLS connection that never finished its handshake (implicit TLS
     * or after STARTTLS): tls_error. */
    if (fs->tls_started_us != 0 && !fs->tls_done && !fs->result_counted && !io->relayed &&
        io->bev != NULL && !tls_conn_established(io->bev))
        login_metrics_result(lm, LOGIN_RESULT_TLS_ERROR);
    mail_proxy_auth_cancel(fs->auth);
    fs->auth = NULL;
    mail_proxy_free(fs->proxy);
    fs->proxy = NULL;
    sasl_end(fs);
    mail_proxy_front_session_wipe(&fs->password);
    free(fs->login_name);
    fs->login_name = NULL;
}
