/* Names of the backend-login steps (mail-proxy-login.h). */
#include "protocols/common/mail-proxy-login.h"

const char *mail_proxy_login_step_name(enum mail_proxy_login_step step)
{
    switch (step) {
    case MAIL_PROXY_LOGIN_CONTINUE:
        return "continue";
    case MAIL_PROXY_LOGIN_OK:
        return "ok";
    case MAIL_PROXY_LOGIN_REJECTED:
        return "rejected";
    case MAIL_PROXY_LOGIN_TEMPFAIL:
        return "tempfail";
    case MAIL_PROXY_LOGIN_PROTOCOL:
        return "protocol";
    }
    return "unknown";
}
