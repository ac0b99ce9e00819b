/* The auth line protocol (docs/auth-protocol.md): one request or reply per
 * LF-terminated line, fields separated by TAB, each field escaped so it can
 * hold any byte but NUL: `\\` for backslash, `\t`, `\n`, `\r` (the framing
 * shared with the warden protocol: net/line-fields.h). Positional
 * fields come first, then `key=value` parameters. Requests carry a client
 * chosen id so a connection can pipeline; replies may come out of order.
 *
 *   VERIFY  <id> <user> <password> [service=] [ip=]
 *   AUTH    <id> <mech> [service=] [ip=] [resp=<base64>]   (SASL PLAIN, LOGIN)
 *   CONT    <id> <base64>                                  (SASL continuation)
 *   USER    <id> <user>
 *   ITERATE <id>
 * Replies:
 *   OK <id> <user> <userdb fields>   NOTFOUND <id>   CONT <id> <base64 challenge>
 *   FAIL <id> [user=] [reason=] [temp]   ITEM <id> <user>   DONE <id>
 * Userdb fields: uid= gid= home= mail_location= group=* quota_rule=*
 * allow_net=* extra=<key>=<value>* (`*` = may repeat). */
#ifndef PETREL_CLIENTS_AUTH_PROTOCOL_H
#define PETREL_CLIENTS_AUTH_PROTOCOL_H

#include "core/buf.h"
#include "core/error.h"
#include "clients/auth/userdb.h"

#include <stdbool.h>
#include <stddef.h>

#define AUTH_LINE_MAX 65536 /* bytes per line, escaped, without the LF */
#define AUTH_MAX_FIELDS 512
#define AUTH_ID_MAX 32

struct auth_line {
    size_t count;
    char *fields[AUTH_MAX_FIELDS]; /* unescaped, NUL-terminated, point into the line */
};

/* Splits one line (without its LF) in place and unescapes each field.
 * line[len] must be writable (the LF's place): it ends the last field.
 * False with a reason in err: too long, too many fields, a bad escape, an
 * escaped NUL, an empty line. */
bool auth_line_parse(char *line, size_t len, struct auth_line *out, struct petrel_error *err);

/* Appends `field` escaped; a TAB goes before it unless `out` is empty or
 * ends with LF. */
void auth_line_add(struct buf *out, const char *field);
/* Appends "key=value" as one escaped field. */
void auth_line_add_param(struct buf *out, const char *key, const char *value);
/* Ends the line (LF). */
void auth_line_end(struct buf *out);

/* The value of parameter `key` among fields[first..], or NULL. A field
 * without '=' matches a flag: "temp" gives "". */
const char *auth_line_param(const struct auth_line *line, size_t first, const char *key);

/* Request ids: 1..AUTH_ID_MAX bytes of [A-Za-z0-9_.-]. */
bool auth_id_valid(const char *id);

/* Userdb fields as parameters (no username, no password). */
void auth_line_add_userdb(struct buf *out, const struct userdb_entry *e);
/* Reads userdb parameters from fields[first..] into e; unknown keys are
 * ignored (forward compatibility). False with *error (allocated) for a bad
 * value. */
bool auth_line_read_userdb(const struct auth_line *line, size_t first, struct userdb_entry *e,
                           char **error);

#endif
