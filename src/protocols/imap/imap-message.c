/* Messages read on demand for FETCH and SEARCH (imap-message.h). */
#include "protocols/imap/imap-message.h"

#include "core/log.h"
#include "protocols/imap/imap-private.h"

#include <string.h>

void imap_message_gone(struct imap_message *m, uint32_t uid, const char *log_id,
                       const struct petrel_error *err)
{
    m->gone = true;
    if (log_id != NULL && err->code != PETREL_ERR_NOT_FOUND)
        log_warn(IMAP_COMPONENT, "cannot read message", "session=%s uid=%u error=\"%s\"", log_id,
                 uid, err->message);
}

bool imap_message_open(struct imap_message *m, struct mailbox *box, uint32_t uid,
                       const char *log_id)
{
    if (m->data != NULL)
        return true;
    if (m->gone)
        return false;
    struct petrel_error err;
    m->data = mailbox_message_open(box, uid, &err);
    if (m->data == NULL) {
        imap_message_gone(m, uid, log_id, &err);
        return false;
    }
    return true;
}

bool imap_message_parse(struct imap_message *m, struct mailbox *box, uint32_t uid,
                        const char *log_id)
{
    if (m->have_parsed)
        return true;
    if (!imap_message_open(m, box, uid, log_id))
        return false;
    message_parse(m->data->data, m->data->size, NULL, &m->parsed);
    m->have_parsed = true;
    return true;
}

void imap_message_release(struct imap_message *m)
{
    if (m->have_parsed)
        message_free(&m->parsed);
    if (m->data != NULL)
        mailbox_message_release(m->data);
    memset(m, 0, sizeof(*m));
}
