/* Commands valid in every state: CAPABILITY, NOOP, LOGOUT, ID, ENABLE. */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "version.h"

#include <string.h>

void imap_capabilities(const struct imap_session *s, struct buf *out)
{
    const struct imap_server_ctx *ctx = s->ctx;
    if (ctx->proxy != NULL) {
        imap_proxy_capabilities(s, out);
        return;
    }
    /* Only what is implemented: clients take every word literally. */
    buf_append_str(out,
                   "IMAP4rev1 SASL-IR LITERAL+ ID ENABLE IDLE NAMESPACE CHILDREN UNSELECT "
                   "UIDPLUS MULTIAPPEND MOVE CONDSTORE ESEARCH BINARY LIST-EXTENDED LIST-STATUS "
                   "SPECIAL-USE CREATE-SPECIAL-USE UTF8=ACCEPT QRESYNC CATENATE SORT SORT=DISPLAY "
                   "ESORT THREAD=ORDEREDSUBJECT THREAD=REFERENCES SEARCHRES CONTEXT=SEARCH "
                   "CONTEXT=SORT");
    /* RFC 9208, after login as Dovecot's quota plugin announces it. */
    if (s->state != IMAP_STATE_NOT_AUTHENTICATED && ctx->cfg->imap_quota)
        buf_append_str(out, " QUOTA QUOTA=RES-STORAGE QUOTA=RES-MESSAGE");
    /* After login, as Dovecot's imap_acl plugin announces them. */
    if (s->user != NULL && mail_storage_config(mail_user_storage(s->user))->acl.enabled)
        buf_append_str(out, " ACL RIGHTS=texk LIST-MYRIGHTS");
    if (imap_metadata_enabled(s))
        buf_append_str(out, " METADATA METADATA-SERVER");
    if (s->state == IMAP_STATE_NOT_AUTHENTICATED) {
        if (!s->io.tls && ctx->tls != NULL)
            buf_append_str(out, " STARTTLS");
        if (s->secured)
            buf_append_str(out, " AUTH=PLAIN AUTH=LOGIN");
        else
            buf_append_str(out, " LOGINDISABLED");
    }
}

static void cmd_capability(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    struct buf caps = {0};
    imap_capabilities(s, &caps);
    imap_send(s, "* CAPABILITY %s", caps.data);
    buf_free(&caps);
    imap_reply_ok(s, "Capability completed.");
}

static void cmd_noop(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    imap_reply_ok(s, "NOOP completed.");
}

static void cmd_logout(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    mail_session_io_logout(&s->io);
    /* Nothing but the tagged OK may follow BYE (RFC 3501 7.1.5): the
     * folder goes first, so the reply carries no updates. */
    imap_selected_close(s);
    s->state = IMAP_STATE_LOGOUT;
    imap_send(s, "* BYE Logging out.");
    imap_reply_ok(s, "Logout completed.");
    imap_session_close_after_output(s);
}

/* RFC 2971: the client's parameters are logged (bounded), ours are sent. */
/* A login proxy in login_trusted_networks passes the client's real address
 * in ID before it logs in on the client's behalf (Dovecot's x-originating-*
 * fields). From anyone else, or after login, the fields are ignored as any
 * other ID field is: RFC 2971 makes ID informational. */
static void take_forwarded(struct imap_session *s, const struct imap_arg *list)
{
    struct mail_forward f;
    mail_forward_init(&f);
    for (size_t i = 0; i + 1 < list->count; i += 2) {
        const char *k = imap_arg_astring(&list->list[i]);
        const char *v = imap_arg_nstring(&list->list[i + 1]);
        const char *why = NULL;
        if (!mail_forward_id_field(&f, k, v, &why)) {
            char kq[128];
            log_warn(IMAP_COMPONENT, "forwarded field ignored", "session=%s field=%s reason=\"%s\"",
                     s->io.id, log_quote(kq, sizeof(kq), k != NULL ? k : ""), why);
        }
    }
    char was[80];
    snprintf(was, sizeof(was), "%s", s->io.peer);
    mail_session_io_forward(&s->io, &f);
    if (s->io.forwarded)
        log_debug(IMAP_COMPONENT, "client forwarded", "session=%s proxy=%s peer=%s", s->io.id, was,
                  s->io.peer);
}

static void cmd_id(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 1 ||
        (cmd->args[0].type != IMAP_ARG_LIST && cmd->args[0].type != IMAP_ARG_NIL)) {
        imap_reply_bad(s, "ID needs a parameter list or NIL.");
        return;
    }
    const struct imap_arg *list = &cmd->args[0];
    if (list->type == IMAP_ARG_LIST && (list->count % 2 != 0 || list->count > 60)) {
        imap_reply_bad(s, "ID takes at most 30 field/value pairs.");
        return;
    }
    if (list->type == IMAP_ARG_LIST && s->io.trusted && s->state == IMAP_STATE_NOT_AUTHENTICATED)
        take_forwarded(s, list);
    if (list->type == IMAP_ARG_LIST && log_enabled(LOG_DEBUG, IMAP_COMPONENT)) {
        for (size_t i = 0; i + 1 < list->count; i += 2) {
            const char *k = imap_arg_astring(&list->list[i]);
            const char *v = imap_arg_nstring(&list->list[i + 1]);
            char kq[128], vq[256];
            log_debug(IMAP_COMPONENT, "client id", "session=%s field=%s value=%s", s->io.id,
                      log_quote(kq, sizeof(kq), k != NULL ? k : ""),
                      log_quote(vq, sizeof(vq), v != NULL ? v : "NIL"));
        }
    }
    imap_send(s, "* ID (\"name\" \"Petrel\" \"version\" \"%s\")", PETREL_VERSION);
    imap_reply_ok(s, "ID completed.");
}

/* RFC 5161. CONDSTORE is the one extension offered that changes what the
 * server sends (MODSEQ in unsolicited FETCH responses). */
static void cmd_enable(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count == 0) {
        imap_reply_bad(s, "ENABLE needs capability names.");
        return;
    }
    bool condstore = false, utf8 = false, qresync = false;
    for (size_t i = 0; i < cmd->arg_count; i++) {
        if (cmd->args[i].type != IMAP_ARG_ATOM) {
            imap_reply_bad(s, "ENABLE takes atoms.");
            return;
        }
        condstore = condstore || imap_arg_atom_equals(&cmd->args[i], "CONDSTORE");
        utf8 = utf8 || imap_arg_atom_equals(&cmd->args[i], "UTF8=ACCEPT");
        qresync = qresync || imap_arg_atom_equals(&cmd->args[i], "QRESYNC");
    }
    /* RFC 6855 3: names already sent in modified UTF-7 would be read
     * differently by a client that switches with a folder selected. */
    if (utf8 && !s->utf8_accept && s->state == IMAP_STATE_SELECTED) {
        imap_reply_bad(s, "ENABLE UTF8=ACCEPT before SELECT.");
        return;
    }
    /* RFC 7162 3.2.3: QRESYNC implies CONDSTORE. */
    bool newly = (condstore || qresync) && !s->condstore;
    bool newly_qresync = qresync && !s->qresync;
    bool newly_utf8 = utf8 && !s->utf8_accept;
    s->utf8_accept = s->utf8_accept || utf8;
    s->qresync = s->qresync || qresync;
    imap_send(s, "* ENABLED%s%s%s", newly && condstore ? " CONDSTORE" : "",
              newly_qresync ? " QRESYNC" : "", newly_utf8 ? " UTF8=ACCEPT" : "");
    if (newly)
        imap_condstore_enable(s);
    imap_reply_ok(s, "Enabled.");
}

const struct imap_command_def imap_commands_any[] = {
    {"CAPABILITY", IMAP_ANY_STATE, cmd_capability},
    {"NOOP", IMAP_ANY_STATE, cmd_noop},
    {"LOGOUT", IMAP_ANY_STATE, cmd_logout},
    {"ID", IMAP_ANY_STATE, cmd_id},
    {"ENABLE", IMAP_AUTHED, cmd_enable},
    {NULL, 0, NULL},
};
