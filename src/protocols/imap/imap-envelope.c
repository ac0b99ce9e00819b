/* IMAP ENVELOPE rendering (see imap-envelope.h). */
#include "protocols/imap/imap-envelope.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

void imap_envelope_append_nstring(struct buf *out, const char *s, size_t len)
{
    if (s == NULL) {
        buf_append_str(out, "NIL");
        return;
    }
    bool literal = false;
    for (size_t i = 0; i < len && !literal; i++) {
        unsigned char c = (unsigned char)s[i];
        literal = c == '\r' || c == '\n' || c >= 0x80;
    }
    if (literal)
        buf_printf(out, "{%zu}\r\n", len);
    else
        buf_append_char(out, '"');
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        /* NUL cannot travel in a non-binary string at all. */
        if (c == '\0')
            c = ' ';
        if (!literal && (c == '"' || c == '\\'))
            buf_append_char(out, '\\');
        buf_append_char(out, c);
    }
    if (!literal)
        buf_append_char(out, '"');
}

/* ---- RFC 5322 address lists ---- */

struct addr_parser {
    const char *s;
    size_t len;
    size_t i;
    struct buf comment; /* the last comment seen, unescaped */
    bool have_comment;
    struct buf list; /* rendered addresses */
    size_t count;
    bool as_text;       /* "name <mailbox@host>" for searching, not IMAP lists */
    bool in_group_text; /* as_text: inside "group:" awaiting its ";" */
};

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_atom_char(char c)
{
    return !is_blank(c) && strchr("()<>@,;:\\\".[]", c) == NULL;
}

static void skip_cfws(struct addr_parser *ap)
{
    while (ap->i < ap->len) {
        char c = ap->s[ap->i];
        if (is_blank(c)) {
            ap->i++;
            continue;
        }
        if (c != '(')
            return;
        buf_reset(&ap->comment);
        ap->have_comment = true;
        size_t depth = 0;
        while (ap->i < ap->len) {
            c = ap->s[ap->i++];
            if (c == '\\' && ap->i < ap->len) {
                buf_append_char(&ap->comment, ap->s[ap->i++]);
                continue;
            }
            if (c == '(' && depth++ == 0)
                continue;
            if (c == ')' && --depth == 0)
                break;
            buf_append_char(&ap->comment, c);
        }
    }
}

/* Reads an atom or a quoted string (unescaped) into `out`; false if none. */
static bool read_word(struct addr_parser *ap, struct buf *out)
{
    if (ap->i >= ap->len)
        return false;
    if (ap->s[ap->i] == '"') {
        for (ap->i++; ap->i < ap->len && ap->s[ap->i] != '"'; ap->i++) {
            if (ap->s[ap->i] == '\\' && ap->i + 1 < ap->len)
                ap->i++;
            buf_append_char(out, ap->s[ap->i]);
        }
        if (ap->i < ap->len)
            ap->i++;
        return true;
    }
    size_t start = ap->i;
    while (ap->i < ap->len && is_atom_char(ap->s[ap->i]))
        ap->i++;
    buf_append(out, ap->s + start, ap->i - start);
    return ap->i > start;
}

/* Reads words and dots: `phrase` gets them as a display name (one space
 * between words), `dotted` as a local part (no spaces). */
static void read_phrase(struct addr_parser *ap, struct buf *phrase, struct buf *dotted)
{
    struct buf word = {0};
    while (true) {
        skip_cfws(ap);
        if (ap->i >= ap->len)
            break;
        if (ap->s[ap->i] == '.') {
            buf_append_char(phrase, '.');
            buf_append_char(dotted, '.');
            ap->i++;
            continue;
        }
        buf_reset(&word);
        if (!read_word(ap, &word))
            break;
        if (word.len == 0)
            continue;
        if (phrase->len > 0)
            buf_append_char(phrase, ' ');
        buf_append(phrase, word.data, word.len);
        buf_append(dotted, word.data, word.len);
    }
    buf_free(&word);
}

static void read_domain(struct addr_parser *ap, struct buf *domain)
{
    while (true) {
        skip_cfws(ap);
        if (ap->i >= ap->len)
            return;
        char c = ap->s[ap->i];
        if (c == '.') {
            buf_append_char(domain, '.');
            ap->i++;
        } else if (c == '[') {
            size_t start = ap->i;
            while (ap->i < ap->len && ap->s[ap->i] != ']')
                ap->i++;
            if (ap->i < ap->len)
                ap->i++;
            buf_append(domain, ap->s + start, ap->i - start);
        } else if (!read_word(ap, domain)) {
            return;
        }
    }
}

/* A display name as Dovecot's message_address_write() puts it: as it is
 * when it is one RFC 5322 atom (encoded words are), otherwise quoted. */
static void append_display_name(struct buf *o, const struct buf *name)
{
    bool quote = false;
    for (size_t i = 0; i < name->len && !quote; i++) {
        unsigned char c = (unsigned char)name->data[i];
        quote = c < 0x80 && !isalnum(c) && strchr("!#$%&'*+-/=?^_`{|}~", c) == NULL;
    }
    if (!quote) {
        buf_append(o, name->data, name->len);
        return;
    }
    buf_append_char(o, '"');
    for (size_t i = 0; i < name->len; i++) {
        if (name->data[i] == '"' || name->data[i] == '\\')
            buf_append_char(o, '\\');
        buf_append_char(o, name->data[i]);
    }
    buf_append_char(o, '"');
}

/* The text form of one parsed address (or group marker), as a search
 * compares it, the way Dovecot's message_address_write() renders it:
 * "name <mailbox@host>" (a comment standing in for a missing name),
 * "<mailbox@host>" without either, groups as "name: ...;"; comments inside
 * the address, quoting and folding gone. */
static void append_address_text(struct addr_parser *ap, const struct buf *name,
                                const struct buf *mailbox, const struct buf *host)
{
    struct buf *o = &ap->list;
    if (mailbox == NULL && host == NULL && name == NULL) {
        if (ap->in_group_text) /* the end of a group */
            buf_append_char(o, ';');
        ap->in_group_text = false;
        return;
    }
    if (o->len > 0 && o->data[o->len - 1] != ':')
        buf_append_str(o, ", ");
    if (host == NULL) { /* the start of a group: its name is the mailbox */
        buf_append(o, mailbox->data, mailbox->len);
        buf_append_char(o, ':');
        ap->in_group_text = true;
        return;
    }
    if (name != NULL && name->len > 0) {
        append_display_name(o, name);
        buf_append_char(o, ' ');
    }
    buf_append_char(o, '<');
    buf_append(o, mailbox->data, mailbox->len);
    buf_append_char(o, '@');
    buf_append(o, host->data, host->len);
    buf_append_char(o, '>');
}

/* A mailbox or host part: NIL when absent, `missing` when empty (as
 * Dovecot writes a group's or a broken address's parts). */
static void append_part(struct buf *o, const struct buf *part, const char *missing)
{
    if (part == NULL)
        buf_append_str(o, "NIL");
    else if (part->len == 0)
        buf_append_str(o, missing);
    else
        imap_envelope_append_nstring(o, part->data, part->len);
}

static void append_address(struct addr_parser *ap, const struct buf *name, const struct buf *route,
                           const struct buf *mailbox, const struct buf *host)
{
    if (ap->as_text) {
        append_address_text(ap, name, mailbox, host);
        ap->count++;
        return;
    }
    struct buf *o = &ap->list;
    buf_append_char(o, '(');
    imap_envelope_append_nstring(o, name != NULL && name->len > 0 ? name->data : NULL,
                                 name != NULL ? name->len : 0);
    buf_append_char(o, ' ');
    imap_envelope_append_nstring(o, route != NULL && route->len > 0 ? route->data : NULL,
                                 route != NULL ? route->len : 0);
    buf_append_char(o, ' ');
    append_part(o, mailbox, "\"MISSING_MAILBOX\"");
    buf_append_char(o, ' ');
    append_part(o, host, "\"MISSING_DOMAIN\"");
    buf_append_char(o, ')');
    ap->count++;
}

/* "<[@route,@route:]local@domain>" after the display name. */
static void parse_angle_addr(struct addr_parser *ap, const struct buf *name)
{
    struct buf route = {0}, local = {0}, phrase = {0}, domain = {0};
    ap->i++; /* '<' */
    skip_cfws(ap);
    if (ap->i < ap->len && ap->s[ap->i] == '@') {
        while (ap->i < ap->len && ap->s[ap->i] != ':' && ap->s[ap->i] != '>') {
            if (!is_blank(ap->s[ap->i]))
                buf_append_char(&route, ap->s[ap->i]);
            ap->i++;
        }
        if (ap->i < ap->len && ap->s[ap->i] == ':') {
            ap->i++;
        } else {
            /* "<@domain>": no route after all, only a domain. */
            if (route.len > 0)
                buf_append(&domain, route.data + 1, route.len - 1);
            buf_reset(&route);
        }
    }
    read_phrase(ap, &phrase, &local);
    if (ap->i < ap->len && ap->s[ap->i] == '@') {
        ap->i++;
        read_domain(ap, &domain);
    }
    skip_cfws(ap);
    if (ap->i < ap->len && ap->s[ap->i] == '>')
        ap->i++;
    append_address(ap, name, &route, &local, &domain);
    buf_free(&route);
    buf_free(&local);
    buf_free(&phrase);
    buf_free(&domain);
}

/* One mailbox, or a group when `in_group` is false; consumes at least one
 * byte unless at a ',' / ';' / the end. */
static void parse_address(struct addr_parser *ap, bool in_group)
{
    struct buf phrase = {0}, dotted = {0}, domain = {0};
    ap->have_comment = false;
    size_t before = ap->i;
    read_phrase(ap, &phrase, &dotted);
    char c = ap->i < ap->len ? ap->s[ap->i] : '\0';
    if (c == '<') {
        parse_angle_addr(ap, &phrase);
    } else if (c == ':' && !in_group) {
        ap->i++;
        append_address(ap, NULL, NULL, &phrase, NULL);
        while (true) {
            skip_cfws(ap);
            if (ap->i >= ap->len)
                break;
            if (ap->s[ap->i] == ';') {
                ap->i++;
                break;
            }
            if (ap->s[ap->i] == ',') {
                ap->i++;
                continue;
            }
            parse_address(ap, true);
        }
        append_address(ap, NULL, NULL, NULL, NULL);
    } else if (c == '@') {
        ap->i++;
        read_domain(ap, &domain);
        skip_cfws(ap);
        append_address(ap, ap->have_comment ? &ap->comment : NULL, NULL, &dotted, &domain);
    } else if (dotted.len > 0) {
        append_address(ap, NULL, NULL, &dotted, &domain);
    }
    /* Stray characters (">", "\", "]", ":" inside a group) are skipped. */
    if (ap->i == before && ap->i < ap->len && ap->s[ap->i] != ',' &&
        (ap->s[ap->i] != ';' || !in_group))
        ap->i++;
    buf_free(&phrase);
    buf_free(&dotted);
    buf_free(&domain);
}

static void parse_address_list(struct addr_parser *ap);

void imap_envelope_append_addresses(struct buf *out, const char *value, size_t len)
{
    struct addr_parser ap = {.s = value, .len = len};
    parse_address_list(&ap);
    if (ap.count == 0) {
        buf_append_str(out, "NIL");
    } else {
        buf_append_char(out, '(');
        buf_append(out, ap.list.data, ap.list.len);
        buf_append_char(out, ')');
    }
    buf_free(&ap.comment);
    buf_free(&ap.list);
}

void imap_envelope_address_text(struct buf *out, const char *value, size_t len)
{
    struct addr_parser ap = {.s = value, .len = len, .as_text = true};
    parse_address_list(&ap);
    buf_append(out, ap.list.data, ap.list.len);
    buf_free(&ap.comment);
    buf_free(&ap.list);
}

/* Every address of the list into ap->list. */
static void parse_address_list(struct addr_parser *ap)
{
    while (ap->i < ap->len) {
        skip_cfws(ap);
        if (ap->i >= ap->len)
            break;
        if (ap->s[ap->i] == ',' || ap->s[ap->i] == ';') {
            ap->i++;
            continue;
        }
        parse_address(ap, false);
    }
}

/* ---- the envelope ---- */

enum envelope_field {
    ENV_DATE,
    ENV_SUBJECT,
    ENV_FROM,
    ENV_SENDER,
    ENV_REPLY_TO,
    ENV_TO,
    ENV_CC,
    ENV_BCC,
    ENV_IN_REPLY_TO,
    ENV_MESSAGE_ID,
    ENV_FIELD_COUNT,
};

static const char *const envelope_names[ENV_FIELD_COUNT] = {
    "Date", "Subject", "From", "Sender", "Reply-To", "To", "Cc", "Bcc", "In-Reply-To", "Message-ID",
};

void imap_envelope_append(struct buf *out, const char *data, const struct message_range *header)
{
    struct message_header_field found[ENV_FIELD_COUNT];
    bool have[ENV_FIELD_COUNT] = {false};
    struct message_header_field f;
    size_t pos = header->start;
    while (message_header_next(data, header, &pos, &f)) {
        for (size_t i = 0; i < ENV_FIELD_COUNT; i++) {
            if (!have[i] && message_header_is(data, &f, envelope_names[i])) {
                found[i] = f;
                have[i] = true;
                break;
            }
        }
    }
    struct buf values[ENV_FIELD_COUNT];
    memset(values, 0, sizeof(values));
    for (size_t i = 0; i < ENV_FIELD_COUNT; i++) {
        if (have[i])
            message_header_unfold(&values[i], data + found[i].value_start, found[i].value_len);
    }
    buf_append_char(out, '(');
    for (size_t i = 0; i < ENV_FIELD_COUNT; i++) {
        if (i > 0)
            buf_append_char(out, ' ');
        size_t field = i;
        bool is_address = i >= ENV_FROM && i <= ENV_BCC;
        if (is_address) {
            if (i == ENV_SENDER || i == ENV_REPLY_TO) {
                /* Absent or without an address: the From list stands in. */
                struct buf probe = {0};
                if (have[i])
                    imap_envelope_append_addresses(&probe, buf_cstr(&values[i]), values[i].len);
                bool empty = !have[i] || strcmp(buf_cstr(&probe), "NIL") == 0;
                buf_free(&probe);
                if (empty)
                    field = ENV_FROM;
            }
            if (have[field])
                imap_envelope_append_addresses(out, buf_cstr(&values[field]), values[field].len);
            else
                buf_append_str(out, "NIL");
        } else {
            imap_envelope_append_nstring(out, have[i] ? buf_cstr(&values[i]) : NULL, values[i].len);
        }
    }
    buf_append_char(out, ')');
    for (size_t i = 0; i < ENV_FIELD_COUNT; i++)
        buf_free(&values[i]);
}
