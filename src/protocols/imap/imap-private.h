/* Internals shared by the IMAP server's files: the session, the command
 * table and the response writers. One session per client connection; a
 * session runs one command at a time (a command that waits for the auth
 * service parks the session, and pipelined input waits in the buffer). */
#ifndef PETREL_PROTOCOLS_IMAP_PRIVATE_H
#define PETREL_PROTOCOLS_IMAP_PRIVATE_H

#include "core/buf.h"
#include "core/metrics.h"
#include "protocols/common/mail-proxy.h"
#include "protocols/common/mail-session-io.h"
#include "protocols/imap/imap-config.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-seqset.h"
#include "clients/auth/auth-client.h"
#include "clients/auth/auth-sasl.h"
#include "clients/warden/warden-client.h"
#include "storage/mail-storage.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#define IMAP_COMPONENT "imap"

enum imap_state {
    IMAP_STATE_NOT_AUTHENTICATED,
    IMAP_STATE_AUTHENTICATED,
    IMAP_STATE_SELECTED,
    IMAP_STATE_LOGOUT,
};

struct imap_server_ctx;

struct imap_session {
    const struct imap_server_ctx *ctx; /* the loop's (a worker's, or the server's own) */
    struct mail_session_io io;         /* the connection: bev, tls, closing, peer, id, username */
    struct imap_parser *parser;
    enum imap_state state;
    bool secured; /* TLS or loopback: plaintext authentication allowed */
    bool busy;    /* a command is waiting for something (auth service) */
    struct timespec started;
    /* the command being run */
    char tag[64];
    char *literal_refusal; /* the parser's IMAP_PARSE_ERR_REFUSED text; made when needed */
    char command[32];
    struct timespec command_started;
    /* authentication in progress */
    struct auth_client_request *auth_req;
    bool auth_sasl; /* AUTHENTICATE (continuation lines come from the client) */
    bool sasl_waiting_client;
    size_t auth_failures;
    /* authenticated (the name is io.username; the warden registration,
     * with imap.warden_addr, is io's too) */
    struct mail_user *user;
    bool utf8_accept; /* ENABLE UTF8=ACCEPT */
    bool condstore;   /* ENABLE CONDSTORE (or a CONDSTORE-using command) */
    bool qresync;     /* ENABLE QRESYNC: expunges are reported as VANISHED */
    /* selected */
    struct mailbox *box;
    struct mailbox_view *view;
    struct mailbox_watch *watch;
    bool readonly; /* EXAMINE */
    bool idling;   /* IDLE: waiting for DONE */
    /* Keyword slots the view had a name for at the last FLAGS response
     * (imap_selected_send_flags): the view's names change only where a
     * FLAGS response follows (SELECT, a sync or STORE that adopted names),
     * so this is the view's mask without asking it 32 times per sync. */
    uint32_t keyword_names;
    /* a FETCH produced message by message as the output drains
     * (imap-cmd-message.c); the session is busy meanwhile */
    struct imap_fetch_state *fetch;
    /* \Recent (imap-cmd-select.c): the UID ranges of the selected folder
     * that are recent for this session, and the count last reported. */
    struct imap_recent_range *recent;
    size_t recent_count;
    size_t recent_cap;
    uint32_t recent_reported;
    /* SEARCHRES (RFC 5182): the UIDs a RETURN (SAVE) kept, "$" */
    struct imap_seqset searchres;
    /* CONTEXT=SEARCH/SORT (RFC 5267, imap-context.c): the live results of
     * SEARCH/SORT RETURN (UPDATE), and the UIDs whose flags this session
     * changed itself since they were last evaluated (any order; emptied
     * before the tagged reply of the command that changed them) */
    struct imap_context **contexts;
    size_t context_count;
    uint32_t *context_dirty;
    size_t context_dirty_count, context_dirty_cap;
    /* GETMETADATA/SETMETADATA waiting for the dict (imap-cmd-metadata.c) */
    struct imap_metadata_call *metadata_call;
    /* LIST waiting for the sharing registry (imap-cmd-mailbox.c) */
    struct imap_list_wait *list_wait;
    /* proxy mode (imap-proxy.c): the login in progress or relayed */
    struct imap_proxy_session *proxy;
};

struct imap_recent_range {
    uint32_t lo, hi; /* UIDs lo .. hi-1 */
};

struct imap_server_metrics {
    struct metric_series *sessions_unauth;
    struct metric_series *sessions_auth;
    struct metric_series *connections_total;
    struct metric_family *command_seconds;
    struct metric_series *bytes_in;
    struct metric_series *bytes_out;
    struct metric_family *logins;
};

/* What a loop gives its sessions: the server's own loop, or one per worker
 * thread (imap-worker.c). Everything but the shared parts (cfg, listeners,
 * tls, limits, metrics) belongs to the loop's thread. */
struct imap_server_ctx {
    const struct imap_config *cfg;
    struct event_base *base;
    struct mail_listeners *listeners;  /* listeners, shared counts (any thread) */
    struct mail_session_set *sessions; /* this loop's sessions */
    struct mail_storage *storage;
    struct auth_client *auth;
    struct warden_client *warden; /* NULL without imap.warden_addr */
    SSL_CTX *tls;                 /* the listeners' (NULL: no STARTTLS) */
    struct imap_parser_limits limits;
    struct mailbox_watch_hub *watches; /* one inotify instance for every IDLE */
    struct imap_server_metrics m;
    /* Proxy mode (a login proxy's front, imap-proxy.c): no storage; after
     * the password check the session is routed to its backend. */
    struct mail_proxy_front *proxy;
};

/* ---------- proxy mode (imap-proxy.c) ---------- */

/* What a proxy-mode session keeps. */
struct imap_proxy_session;
/* A proxy-mode session starts (`tls`: implicit TLS, handshake pending). */
void imap_proxy_session_start(struct imap_session *s, bool tls);
/* STARTTLS: the handshake starts now. */
void imap_proxy_starttls(struct imap_session *s);
/* The greeting's and CAPABILITY's list before login in proxy mode. */
void imap_proxy_capabilities(const struct imap_session *s, struct buf *out);
/* LOGIN: checks the password (with retries), then the backend. */
void imap_proxy_cmd_login(struct imap_session *s, const char *user, const char *password);
/* AUTHENTICATE: the SASL exchange runs here (the password is needed for
 * the backend), then as LOGIN. `initial` NULL: none. */
void imap_proxy_cmd_authenticate(struct imap_session *s, const char *mech, const char *initial);
void imap_proxy_cmd_authenticate_continue(struct imap_session *s, const char *line, size_t len);
/* A command before login that is garbage (unknown, not allowed, bad
 * syntax): counts preamble_error once per connection. */
void imap_proxy_bad_command(struct imap_session *s);
/* The TLS handshake of the connection finished. */
void imap_proxy_tls_ready(struct imap_session *s);
/* True (and the relay told to end with a BYE) when the session is relayed. */
bool imap_proxy_shutdown(struct imap_session *s, const char *reason);
/* At the session's free: the proxied session's end, tls_error. */
void imap_proxy_session_free(struct imap_session *s);

/* ---------- session (imap-session.c) ---------- */

/* Starts a session on an accepted connection (TLS already layered when
 * `tls`): greeting, then commands. */
void imap_session_start(const struct imap_server_ctx *ctx, struct bufferevent *bev, bool tls,
                        const struct sockaddr *peer);
/* Ends the session now (the server is going away, the client was idle too
 * long, a line too long): "* BYE <reason>" (unless that would land inside
 * a literal or a METADATA response) then close. */
void imap_session_shutdown(struct imap_session *s, const char *reason);
void imap_session_free(struct imap_session *s);
/* STARTTLS: layers TLS over the connection after "OK Begin TLS" is queued;
 * input pipelined after STARTTLS is discarded. */
bool imap_session_starttls(struct imap_session *s);

/* Responses. `text` lines must not contain CR or LF. */
void imap_send(struct imap_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void imap_send_raw(struct imap_session *s, const void *data, size_t len);
/* Tagged completion of the current command; the session goes on with the
 * next command (also after an asynchronous wait). */
void imap_reply_ok(struct imap_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void imap_reply_no(struct imap_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void imap_reply_bad(struct imap_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* True when the client has not taken enough of what was sent: the caller
 * (a command producing a long answer) stops, and the session waits for the
 * output to drain (the inactivity timeout then counts on the output) and
 * calls imap_fetch_continue() or reads the next command. */
bool imap_session_output_full(struct imap_session *s);
void imap_session_wait_output(struct imap_session *s);
/* Closes after the output has drained ("* BYE" already sent by the caller). */
void imap_session_close_after_output(struct imap_session *s);
/* The CAPABILITY list for the session's state (without the "CAPABILITY" word). */
void imap_capabilities(const struct imap_session *s, struct buf *out);
/* Marks the session authenticated as `username` (canonical form). False
 * with a NO sent when the user cannot be served (storage refuses the name,
 * too many sessions). `groups`: the userdb's (ACLs), may be NULL. */
bool imap_session_login(struct imap_session *s, const char *username, const char *const *groups);
/* Writes `text` as an IMAP string (quoted when safe, else a literal). */
void imap_append_string(struct buf *out, const char *text, size_t len);
/* The same for a session that enabled UTF8=ACCEPT: valid UTF-8 goes in a
 * quoted string too (RFC 6855 3), anything else as imap_append_string. */
void imap_append_utf8_string(struct buf *out, const char *text, size_t len);

/* ---------- commands ---------- */

typedef void imap_command_fn(struct imap_session *s, const struct imap_command *cmd);

struct imap_command_def {
    const char *name;
    unsigned states; /* bit per enum imap_state allowed */
    imap_command_fn *run;
};

#define IMAP_IN(state) (1u << (state))
#define IMAP_ANY_STATE                                                                             \
    (IMAP_IN(IMAP_STATE_NOT_AUTHENTICATED) | IMAP_IN(IMAP_STATE_AUTHENTICATED) |                   \
     IMAP_IN(IMAP_STATE_SELECTED))
#define IMAP_AUTHED (IMAP_IN(IMAP_STATE_AUTHENTICATED) | IMAP_IN(IMAP_STATE_SELECTED))

/* Command tables, one per file; NULL-name terminated. */
extern const struct imap_command_def imap_commands_any[];     /* imap-cmd-any.c */
extern const struct imap_command_def imap_commands_login[];   /* imap-cmd-login.c */
extern const struct imap_command_def imap_commands_mailbox[]; /* imap-cmd-mailbox.c */
extern const struct imap_command_def imap_commands_select[];  /* imap-cmd-select.c */
extern const struct imap_command_def imap_commands_message[]; /* imap-cmd-message.c */
extern const struct imap_command_def imap_commands_search[];  /* imap-cmd-search.c */
extern const struct imap_command_def imap_commands_acl[];     /* imap-cmd-acl.c */
/* Forgets a LIST waiting for the sharing registry (the session is being
 * freed): its answer, when it comes, is dropped. */
void imap_list_abort(struct imap_session *s);
/* A FETCH waiting for the output (s->fetch): produces the next messages,
 * and ends the command with its tagged reply once all are out. */
void imap_fetch_continue(struct imap_session *s);
/* Drops a waiting FETCH (session closing or freed); true when it stopped
 * inside a literal, where nothing else may be sent (the connection must
 * close without a BYE). */
bool imap_fetch_abort(struct imap_session *s);
extern const struct imap_command_def imap_commands_sort[];    /* imap-cmd-sort.c */
extern const struct imap_command_def imap_commands_metadata[]; /* imap-cmd-metadata.c */
/* Whether METADATA is configured (the capabilities say so). */
bool imap_metadata_enabled(const struct imap_session *s);
/* Forgets a GETMETADATA/SETMETADATA waiting for the dict or the output
 * (the session is being freed): its answer, when it comes, is dropped. */
void imap_metadata_abort(struct imap_session *s);
/* Stops a GETMETADATA whose response is partly out (the session is
 * closing: a BYE would land inside the untagged response); true when it
 * did, and the connection must close without a BYE. */
bool imap_metadata_cut(struct imap_session *s);
/* A GETMETADATA paused for the output (s->metadata_call): produces the
 * next entries, ends with the tagged reply; false when none waits. */
bool imap_metadata_continue(struct imap_session *s);
/* UID SEARCH (imap-cmd-search.c), called by the UID dispatcher. */
void imap_uid_search(struct imap_session *s, const struct imap_arg *args, size_t argc);
/* UID SORT and UID THREAD (imap-cmd-sort.c), called by the UID dispatcher. */
void imap_uid_sort(struct imap_session *s, const struct imap_arg *args, size_t argc);
void imap_uid_thread(struct imap_session *s, const struct imap_arg *args, size_t argc);

struct imap_search_program;
/* Parses SEARCH criteria (also SORT's and THREAD's) against the selected
 * folder into `prog`; false with NO [BADCHARSET] or BAD sent (and $
 * emptied when a SAVE is answered NO, RFC 5182 2.1). */
bool imap_search_parse_selected(struct imap_session *s, const struct imap_arg *args, size_t argc,
                                struct imap_search_program *prog);
/* The sequence numbers of the selected folder's messages that match
 * `prog`, ascending (imap-cmd-search.c); *count of them. NULL when none. */
uint32_t *imap_search_run(struct imap_session *s, const struct imap_search_program *prog,
                          size_t *count);

/* ---------- SEARCHRES, RFC 5182 (imap-searchres.c) ---------- */

/* Forgets the saved result: at SELECT, EXAMINE, CLOSE and a failed save. */
void imap_searchres_clear(struct imap_session *s);
/* Saves the result of a SEARCH/SORT with RETURN (... SAVE): `uids` in the
 * command's result order; with only MIN and/or MAX among the options the
 * first and/or last of them, otherwise all (RFC 5182 2.1). */
void imap_searchres_save(struct imap_session *s, unsigned return_options, const uint32_t *uids,
                         size_t count);
/* Whether "$" holds `uid`. Expunged messages leave "$" by themselves: it
 * is only ever matched against messages still in the view. */
bool imap_searchres_contains(const struct imap_session *s, uint32_t uid);
/* Whether a RETURN option list at the start of `args` asks for SAVE (so a
 * failing command can still clear "$"). */
bool imap_searchres_requested(const struct imap_arg *args, size_t argc);

/* ---------- CONTEXT=SEARCH and CONTEXT=SORT, RFC 5267 (imap-context.c) ---------- */

/* Live contexts a session may hold (Dovecot's limit too; RFC 5267 4.3.1
 * asks for at least one), and the result entries (UIDs) all of them may
 * hold when one more is created: beyond either, the search is answered
 * and "* NO [NOUPDATE tag]" says no updates will follow. A context's
 * result grows afterwards only with the folder. */
#define IMAP_CONTEXT_MAX 10
#define IMAP_CONTEXT_MAX_ENTRIES (1u << 20)

struct imap_search_program;
struct imap_sort_program;
extern const struct imap_command_def imap_commands_context[]; /* CANCELUPDATE */
extern const struct imap_command_def imap_commands_quota[];   /* imap-cmd-quota.c: RFC 9208 */
/* Whether a live context was created by a command tagged `tag` (a second
 * UPDATE under the same tag is answered BAD, RFC 5267 4.3). */
bool imap_context_tag_in_use(const struct imap_session *s, const char *tag);
/* Turns the sequence sets and "$" of `prog` into the UIDs they name now
 * (right after evaluating it, before a SAVE replaces "$"): a live context
 * keeps following those messages. Evaluates the same at this moment. */
void imap_context_pin(struct imap_session *s, struct imap_search_program *prog);
/* Keeps the result of the running command (tagged s->tag) live: takes
 * `prog` (pinned; emptied here), `sort` NULL for SEARCH, `uids` the result
 * in result order. Over the limits, sends "* NO [NOUPDATE ...]" and frees
 * `prog` instead. */
void imap_context_start(struct imap_session *s, bool uid_mode, struct imap_search_program *prog,
                        const struct imap_sort_program *sort, const uint32_t *uids, size_t count);
/* Drops every context (the folder is closed). */
void imap_context_free_all(struct imap_session *s);
/* The session's own STORE/FETCH changed these messages' flags in the view
 * (no sync will report them): evaluated at the next flush or sync. */
void imap_context_note_flags(struct imap_session *s, const struct mailbox_flags_result *res,
                             size_t count);
/* During a sync, before the EXPUNGE/VANISHED lines: REMOVEFROM for the
 * expunged members (`uids` ascending), numbered as before the expunges. */
void imap_context_expunged(struct imap_session *s, const uint32_t *uids, size_t count);
/* During a sync, after EXISTS and FETCH: evaluates new messages, changed
 * ones, the session's own changes and holders of `newly_named` keyword
 * slots, and sends ADDTO/REMOVEFROM. */
void imap_context_changed(struct imap_session *s, const struct mailbox_view_changes *ch,
                          uint32_t newly_named);
/* Before the tagged reply of a command that may not sync (FETCH, STORE,
 * SEARCH...): the session's own flag changes only, which renumber nothing. */
void imap_context_flush(struct imap_session *s);
/* Whether message `seq` of the view matches `prog` (imap-cmd-search.c).
 * *unreadable: the program needed the message's text and its file is gone
 * (expunged by another process since the view's last sync): the answer
 * means nothing. */
bool imap_search_match(struct imap_session *s, const struct imap_search_program *prog, uint32_t seq,
                       bool *unreadable);
/* The sort facts of message `uid` of the view (imap-cmd-sort.c); `seq`
 * and `number` are set to the UID (UID order is sequence order).
 * `header`: the sort program reads header fields. False (with empty
 * facts, to be freed all the same) when the message is not in the view or
 * its file is gone. */
struct imap_sort_facts;
bool imap_sort_facts_read(struct imap_session *s, uint32_t uid, bool header,
                          struct imap_sort_facts *f);

/* ---------- the selected folder (imap-cmd-select.c) ---------- */

/* Brings the view up to date and sends what changed: EXPUNGE (only when
 * `allow_expunge`; otherwise nothing is synced), EXISTS, FLAGS, FETCH
 * (FLAGS). Closes the folder when UIDVALIDITY changed. */
void imap_selected_sync(struct imap_session *s);
/* A CONDSTORE-enabling command (RFC 7162 3.1): the first one while a
 * folder is selected sends "* OK [HIGHESTMODSEQ n]" before its own
 * responses, as SELECT would have. */
void imap_condstore_enable(struct imap_session *s);
/* QRESYNC (RFC 7162 3.2.5, 3.2.6): "* VANISHED (EARLIER) uids" for the
 * UIDs of `known` (ascending ranges, NULL: every UID below UIDNEXT) that
 * are below UIDNEXT and no longer in the view. Petrel keeps no history of
 * expunges, so this names every missing UID, also ones expunged before the
 * client's mod-sequence: RFC 7162 lets a client ignore UIDs it does not
 * know. Nothing is sent when none is missing. */
void imap_send_vanished_earlier(struct imap_session *s, const struct imap_seqset *known);
/* Leaves the selected state (CLOSE/UNSELECT/SELECT of another/logout). */
void imap_selected_close(struct imap_session *s);
/* For a command that would change the folder: true, with
 * "NO [READ-ONLY]" sent, when it was opened with EXAMINE. */
bool imap_selected_readonly_refused(struct imap_session *s);
/* "* FLAGS (...)" and "* OK [PERMANENTFLAGS (...)]" for the selected
 * folder: at SELECT, and again before any response that uses a keyword
 * the session has not been told of (RFC 3501 7.2.6). */
void imap_selected_send_flags(struct imap_session *s);
/* "(\Seen \Flagged $Junk)" for a view entry, with \Recent when the
 * message is recent for this session. */
void imap_append_flags(struct buf *out, const struct imap_session *s, uint32_t uid,
                       uint32_t flags, uint32_t keywords);
/* Whether message `uid` of the selected folder is \Recent for this
 * session (RFC 3501 2.3.2: exactly one read-write session gets each new
 * message as recent; EXAMINE shows the folder's recent messages without
 * taking them). */
bool imap_recent_has(const struct imap_session *s, uint32_t uid);
/* The IDLE line "DONE" (or anything else) while idling. */
void imap_idle_line(struct imap_session *s, const char *line, size_t len);
/* Maps a storage error to a tagged NO with the right response code. */
void imap_reply_storage_error(struct imap_session *s, const struct petrel_error *err);
/* Resolves a mailbox argument to namespace + folder name (imap-cmd-mailbox.c);
 * replies itself and returns false when the name is unusable. *name is
 * allocated. */
bool imap_resolve_folder(struct imap_session *s, const struct imap_arg *arg,
                         const struct namespace_config **ns, char **name);
/* As imap_resolve_folder for a wire name (NUL-terminated, `len` bytes),
 * replying nothing: false when the name is unusable. */
bool imap_folder_from_wire(const struct imap_session *s, const char *wire, size_t len,
                           const struct namespace_config **ns, char **name);

/* SASL continuation from the client during AUTHENTICATE (imap-cmd-login.c). */
void imap_authenticate_continue(struct imap_session *s, const char *line, size_t len);

#endif
