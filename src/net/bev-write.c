/* Writes that skip the write event when they can (bev-write.h). */
#include "net/bev-write.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <sys/socket.h>

bool net_bev_plain_socket(struct bufferevent *bev)
{
    return bufferevent_getfd(bev) >= 0 && bufferevent_get_underlying(bev) == NULL &&
           bufferevent_openssl_get_ssl(bev) == NULL;
}

void net_bev_write(struct bufferevent *bev, const void *data, size_t len)
{
    size_t sent = 0;
    if (len > 0 && evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
        net_bev_plain_socket(bev)) {
        /* MSG_DONTWAIT: never blocks, so never interrupted. A socket still
         * connecting answers EAGAIN, and everything is queued. */
        ssize_t n = send(bufferevent_getfd(bev), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        sent = n > 0 ? (size_t)n : 0;
    }
    if (sent < len)
        bufferevent_write(bev, (const char *)data + sent, len - sent);
}
