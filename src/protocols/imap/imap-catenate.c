/* CATENATE (see imap-catenate.h). */
#include "protocols/imap/imap-catenate.h"

#include "core/buf.h"
#include "core/fs-util.h"
#include "core/utf8.h"
#include "protocols/imap/imap-literal-spool.h"
#include "protocols/imap/imap-private.h"
#include "protocols/imap/imap-section.h"
#include "protocols/imap/imap-url.h"
#include "storage/mailbox-name.h"
#include "storage/message/message-parser.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Copies a spooled literal's bytes into `fd` at `at`. */
static bool copy_spool(int fd, uint64_t at, const struct imap_literal_spool *sp, uint64_t len)
{
    char chunk[64 * 1024];
    for (uint64_t off = 0; off < len;) {
        size_t want = len - off < sizeof(chunk) ? (size_t)(len - off) : sizeof(chunk);
        ssize_t r = pread(sp->fd, chunk, want, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || !fs_pwrite_all(fd, chunk, (size_t)r, at + off))
            return false;
        off += (uint64_t)r;
    }
    return true;
}

/* The bytes a URL names, as FETCH BODY[section]<partial> gives them.
 * `other` keeps the last folder opened that is not the selected one, for
 * the next parts: a CATENATE of many URLs into one folder opens it once,
 * not once a part (each open reads its index). */
static enum imap_catenate_result fetch_url(struct imap_session *s, const struct imap_url *u,
                                           struct mailbox **other, struct buf *out)
{
    if (u->absolute && u->user[0] != '\0' && strcasecmp(u->user, s->io.username) != 0)
        return IMAP_CATENATE_BADURL;
    struct petrel_error err;
    struct mailbox *box = NULL;
    bool selected;
    if (u->mailbox[0] == '\0') {
        /* ";UID=n...": relative to the selected mailbox's URL (RFC 5092
         * 7.1, as Dovecot resolves it). */
        if (s->box == NULL)
            return IMAP_CATENATE_BADURL;
        selected = true;
        box = s->box;
    } else {
        /* RFC 5092 (enc-mailbox): a URL's mailbox is UTF-8, percent-encoded, whatever
         * the session speaks; taken to the session's wire form here. */
        struct buf wire = {0};
        if (!utf8_valid(u->mailbox, strlen(u->mailbox)))
            return IMAP_CATENATE_BADURL;
        if (s->utf8_accept)
            buf_append_str(&wire, u->mailbox);
        else if (!mailbox_name_to_mutf7(u->mailbox, &wire)) {
            buf_free(&wire);
            return IMAP_CATENATE_BADURL;
        }
        struct imap_arg name = {.type = IMAP_ARG_QUOTED, .str = buf_cstr(&wire), .len = wire.len};
        const struct namespace_config *ns;
        char *folder;
        bool resolved = imap_resolve_folder(s, &name, &ns, &folder);
        buf_free(&wire);
        if (!resolved)
            return IMAP_CATENATE_REPLIED;
        selected = s->box != NULL && mailbox_is(s->box, ns, folder);
        if (selected) {
            box = s->box;
        } else if (*other != NULL && mailbox_is(*other, ns, folder)) {
            box = *other;
        } else {
            if (*other != NULL)
                mailbox_close(*other);
            box = *other = mailbox_open(s->user, ns, folder, &err);
        }
        free(folder);
    }
    if (box == NULL)
        return IMAP_CATENATE_BADURL;
    enum imap_catenate_result r = IMAP_CATENATE_BADURL;
    struct mailbox_info info;
    struct imap_section sec;
    if (mailbox_get_info(box, false, &info, &err) &&
        (u->uid_validity == 0 || u->uid_validity == info.uid_validity) &&
        imap_section_parse(u->section, strlen(u->section), &sec, &err)) {
        struct mailbox_message_data *m = mailbox_message_open(box, u->uid, &err);
        if (m != NULL) {
            struct message parsed;
            message_parse(m->data, m->size, NULL, &parsed);
            if (imap_section_fetch(&parsed, &sec, u->partial, u->partial_start,
                                   u->partial_len > 0 ? u->partial_len : UINT64_MAX, out, &err))
                r = IMAP_CATENATE_OK;
            message_free(&parsed);
            mailbox_message_release(m);
        }
    }
    return r;
}

enum imap_catenate_result imap_catenate_build(struct imap_session *s, const struct imap_arg *parts,
                                              int *fd, uint64_t *len, const char **text,
                                              const char **url)
{
    *fd = -1;
    *len = 0;
    if (parts->type != IMAP_ARG_LIST || parts->count == 0 || parts->count % 2 != 0) {
        *text = "CATENATE takes (TEXT literal / URL url ...).";
        return IMAP_CATENATE_BAD;
    }
    struct petrel_error err;
    int out = mail_user_spool_open(s->user, &err);
    if (out < 0) {
        *text = "[SERVERBUG] Cannot make a spool file; it has been logged.";
        return IMAP_CATENATE_NO;
    }
    uint64_t max = (uint64_t)s->ctx->cfg->max_literal_size;
    struct mailbox *other = NULL;
    enum imap_catenate_result r = IMAP_CATENATE_OK;
    for (size_t i = 0; r == IMAP_CATENATE_OK && i < parts->count; i += 2) {
        const struct imap_arg *kind = &parts->list[i], *v = &parts->list[i + 1];
        if (imap_arg_atom_equals(kind, "TEXT") && v->type == IMAP_ARG_LITERAL) {
            const struct imap_literal_spool *sp = v->spool;
            bool nul = sp != NULL ? sp->has_nul : memchr(v->str, '\0', v->len) != NULL;
            if (!v->literal8 && nul) {
                *text = "NUL bytes in a message need a literal8 (~{n}).";
                r = IMAP_CATENATE_NO;
            } else if (*len + v->len > max) {
                *text = "[TOOBIG] The message would be too large.";
                r = IMAP_CATENATE_NO;
            } else if (sp != NULL ? (sp->failed || !copy_spool(out, *len, sp, v->len))
                                  : !fs_pwrite_all(out, v->str, v->len, *len)) {
                *text = "[SERVERBUG] Cannot write the message; it has been logged.";
                r = IMAP_CATENATE_NO;
            }
            *len += v->len;
        } else if (imap_arg_atom_equals(kind, "URL") && v->type != IMAP_ARG_LIST &&
                   v->type != IMAP_ARG_NIL) {
            struct imap_url u;
            struct buf bytes = {0};
            *url = v->str;
            if (!imap_url_parse(v->str, v->len, &u))
                r = IMAP_CATENATE_BADURL;
            else
                r = fetch_url(s, &u, &other, &bytes);
            if (r == IMAP_CATENATE_OK && *len + bytes.len > max) {
                *text = "[TOOBIG] The message would be too large.";
                r = IMAP_CATENATE_NO;
            } else if (r == IMAP_CATENATE_OK && !fs_pwrite_all(out, bytes.data, bytes.len, *len)) {
                *text = "[SERVERBUG] Cannot write the message; it has been logged.";
                r = IMAP_CATENATE_NO;
            }
            *len += bytes.len;
            buf_free(&bytes);
        } else {
            *text = "CATENATE takes (TEXT literal / URL url ...).";
            r = IMAP_CATENATE_BAD;
        }
    }
    if (other != NULL)
        mailbox_close(other);
    if (r != IMAP_CATENATE_OK) {
        close(out);
        return r;
    }
    *fd = out;
    return r;
}
