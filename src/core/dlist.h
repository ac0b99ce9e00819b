/* Intrusive doubly linked lists kept as a head and a tail pointer: any
 * struct with `prev` and `next` members, in any struct with `head` and
 * `tail` members (as Dovecot's llist.h DLLIST2_*), or as a head pointer
 * alone (DLIST_UNLINK; Dovecot's DLLIST_*). Macros because C has no
 * generics; each evaluates its arguments more than once, so pass plain
 * lvalues. O(1) append and removal, no allocation. */
#ifndef PETREL_CORE_DLIST_H
#define PETREL_CORE_DLIST_H

#include <stddef.h>

/* Appends `item` at the tail of `list`. */
#define DLIST_APPEND(list, item)                                                                   \
    do {                                                                                           \
        (item)->next = NULL;                                                                       \
        (item)->prev = (list)->tail;                                                               \
        if ((list)->tail != NULL)                                                                  \
            (list)->tail->next = (item);                                                           \
        else                                                                                       \
            (list)->head = (item);                                                                 \
        (list)->tail = (item);                                                                     \
    } while (0)

/* Unlinks `item` from `list`. An item that is not linked (prev and next
 * NULL, and not the head) leaves the list as it is. */
#define DLIST_REMOVE(list, item)                                                                   \
    do {                                                                                           \
        if ((item)->prev != NULL)                                                                  \
            (item)->prev->next = (item)->next;                                                     \
        else if ((list)->head == (item))                                                           \
            (list)->head = (item)->next;                                                           \
        if ((item)->next != NULL)                                                                  \
            (item)->next->prev = (item)->prev;                                                     \
        else if ((list)->tail == (item))                                                           \
            (list)->tail = (item)->prev;                                                           \
        (item)->prev = (item)->next = NULL;                                                        \
    } while (0)

/* Unlinks `item` from a list kept as a head pointer alone (`head`, an
 * lvalue). The item's own prev and next are left as they were (a caller
 * walking the list may still step on). */
#define DLIST_UNLINK(head, item)                                                                   \
    do {                                                                                           \
        if ((item)->prev != NULL)                                                                  \
            (item)->prev->next = (item)->next;                                                     \
        else if ((head) == (item))                                                                 \
            (head) = (item)->next;                                                                 \
        if ((item)->next != NULL)                                                                  \
            (item)->next->prev = (item)->prev;                                                     \
    } while (0)

#endif
