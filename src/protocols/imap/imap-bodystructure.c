/* IMAP BODY / BODYSTRUCTURE rendering (see imap-bodystructure.h). */
#include "protocols/imap/imap-bodystructure.h"

#include "protocols/imap/imap-envelope.h"

#include <string.h>

static void append_string(struct buf *out, const char *s)
{
    imap_envelope_append_nstring(out, s, s != NULL ? strlen(s) : 0);
}

/* ("name" "value" ...) or NIL; `add_charset` appends the us-ascii default. */
static void append_params(struct buf *out, const struct message_param *params, size_t count,
                          bool add_charset)
{
    if (count == 0 && !add_charset) {
        buf_append_str(out, "NIL");
        return;
    }
    buf_append_char(out, '(');
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            buf_append_char(out, ' ');
        append_string(out, params[i].name);
        buf_append_char(out, ' ');
        append_string(out, params[i].value);
    }
    if (add_charset)
        buf_append_str(out, count > 0 ? " \"charset\" \"us-ascii\"" : "\"charset\" \"us-ascii\"");
    buf_append_char(out, ')');
}

static void append_disposition(struct buf *out, const struct message_part *part)
{
    if (part->disposition == NULL) {
        buf_append_str(out, "NIL");
        return;
    }
    buf_append_char(out, '(');
    append_string(out, part->disposition);
    buf_append_char(out, ' ');
    append_params(out, part->disposition_params, part->disposition_param_count, false);
    buf_append_char(out, ')');
}

static void append_language(struct buf *out, const struct message_part *part)
{
    if (part->language_count == 0) {
        buf_append_str(out, "NIL");
        return;
    }
    buf_append_char(out, '(');
    for (size_t i = 0; i < part->language_count; i++) {
        if (i > 0)
            buf_append_char(out, ' ');
        append_string(out, part->languages[i]);
    }
    buf_append_char(out, ')');
}

/* disposition, language, location: the tail both kinds of part share. */
static void append_common_extension(struct buf *out, const struct message_part *part)
{
    buf_append_char(out, ' ');
    append_disposition(out, part);
    buf_append_char(out, ' ');
    append_language(out, part);
    buf_append_char(out, ' ');
    append_string(out, part->location);
}

static void append_part(struct buf *out, const struct message *msg, size_t index, bool extended);

/* What Dovecot shows for a multipart it could not split: one empty part. */
static void append_empty_text_part(struct buf *out, bool extended)
{
    buf_append_str(out, "(\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 0 0");
    if (extended)
        buf_append_str(out, " NIL NIL NIL NIL");
    buf_append_char(out, ')');
}

static void append_multipart(struct buf *out, const struct message *msg, size_t index,
                             bool extended)
{
    const struct message_part *part = &msg->parts[index];
    buf_append_char(out, '(');
    if (part->kind != MESSAGE_PART_MULTIPART || part->first_child == MESSAGE_PART_NONE)
        append_empty_text_part(out, extended);
    for (size_t c = part->first_child;
         part->kind == MESSAGE_PART_MULTIPART && c != MESSAGE_PART_NONE;
         c = msg->parts[c].next_sibling)
        append_part(out, msg, c, extended);
    buf_append_char(out, ' ');
    append_string(out, part->subtype);
    if (extended) {
        buf_append_char(out, ' ');
        append_params(out, part->params, part->param_count, false);
        append_common_extension(out, part);
    }
    buf_append_char(out, ')');
}

static void append_single(struct buf *out, const struct message *msg, size_t index, bool extended)
{
    const struct message_part *part = &msg->parts[index];
    bool is_text = message_part_is(part, "text", NULL);
    bool add_charset =
        is_text && message_param_find(part->params, part->param_count, "charset") == NULL;
    buf_append_char(out, '(');
    append_string(out, part->type);
    buf_append_char(out, ' ');
    append_string(out, part->subtype);
    buf_append_char(out, ' ');
    append_params(out, part->params, part->param_count, add_charset);
    buf_append_char(out, ' ');
    append_string(out, part->id);
    buf_append_char(out, ' ');
    append_string(out, part->description);
    buf_append_char(out, ' ');
    append_string(out, part->encoding != NULL ? part->encoding : "7bit");
    buf_printf(out, " %zu", message_range_crlf_size(&part->body));
    if (part->kind == MESSAGE_PART_MESSAGE) {
        size_t inner = part->first_child;
        buf_append_char(out, ' ');
        imap_envelope_append(out, msg->data, &msg->parts[inner].header);
        buf_append_char(out, ' ');
        append_part(out, msg, inner, extended);
        buf_printf(out, " %zu", part->body.lines);
    } else if (is_text) {
        buf_printf(out, " %zu", part->body.lines);
    }
    if (extended) {
        buf_append_char(out, ' ');
        append_string(out, part->md5);
        append_common_extension(out, part);
    }
    buf_append_char(out, ')');
}

static void append_part(struct buf *out, const struct message *msg, size_t index, bool extended)
{
    if (message_part_is(&msg->parts[index], "multipart", NULL))
        append_multipart(out, msg, index, extended);
    else
        append_single(out, msg, index, extended);
}

void imap_bodystructure_append(struct buf *out, const struct message *msg, size_t part,
                               bool extended)
{
    if (part >= msg->part_count) {
        buf_append_str(out, "NIL");
        return;
    }
    append_part(out, msg, part, extended);
}
