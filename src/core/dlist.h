/* Intrusive doubly linked lists kept as a head and a tail pointer: any
 * struct with `prev` and `next` members, in any struct with `head` and
 * `tail` members (as Dovecot's llist.h DLLIST2_*), or as a head pointer
 * alone (DLIST_UNLINK; Dovecot's DLLIST_*). Macros because C has no
 * generics; each evaluates its arguments more than once, so pass plain
 * lvalues. O(1) append and removal, no allocation. */
#ifndef PETREL_CORE_DLIST_H
#define PETREL_CORE_DLIST_H

#include <stddef.h>

/* The same operations for an item whose links have other names (an item
 * on several lists at once: `lru_prev`/`lru_next`, ...) and a list whose
 * ends are any two lvalues: `prev` and `next` name the item's members,
 * `head` and `tail` the list's ends. */

/* Appends `item` after `tail`. */
#define DLIST_APPEND_AT(head, tail, item, prev, next)                                              \
    do {                                                                                           \
        (item)->next = NULL;                                                                       \
        (item)->prev = (tail);                                                                     \
        if ((tail) != NULL)                                                                        \
            (tail)->next = (item);                                                                 \
        else                                                                                       \
            (head) = (item);                                                                       \
        (tail) = (item);                                                                           \
    } while (0)

/* Puts `item` first in a list kept as a head pointer alone. */
#define DLIST_PUSH_AT(head, item, prev, next)                                                      \
    do {                                                                                           \
        (item)->prev = NULL;                                                                       \
        (item)->next = (head);                                                                     \
        if ((head) != NULL)                                                                        \
            (head)->prev = (item);                                                                 \
        (head) = (item);                                                                           \
    } while (0)

/* Unlinks `item` from a list kept as a head pointer alone; as DLIST_UNLINK. */
#define DLIST_UNLINK_AT(head, item, prev, next)                                                    \
    do {                                                                                           \
        if ((item)->prev != NULL)                                                                  \
            (item)->prev->next = (item)->next;                                                     \
        else if ((head) == (item))                                                                 \
            (head) = (item)->next;                                                                 \
        if ((item)->next != NULL)                                                                  \
            (item)->next->prev = (item)->prev;                                                     \
    } while (0)

/* Unlinks `item`; as DLIST_REMOVE. */
#define DLIST_REMOVE_AT(head, tail, item, prev, next)                                              \
    do {                                                                                           \
        if ((item)->next == NULL && (tail) == (item))                                              \
            (tail) = (item)->prev;                                                                 \
        DLIST_UNLINK_AT(head, item, prev, next);                                                   \
        (item)->prev = (item)->next = NULL;                                                        \
    } while (0)

/* Appends `item` at the tail of `list`. */
#define DLIST_APPEND(list, item) DLIST_APPEND_AT((list)->head, (list)->tail, item, prev, next)

/* Unlinks `item` from `list`. An item that is not linked (prev and next
 * NULL, and not the head) leaves the list as it is. */
#define DLIST_REMOVE(list, item) DLIST_REMOVE_AT((list)->head, (list)->tail, item, prev, next)

/* Unlinks `item` from a list kept as a head pointer alone (`head`, an
 * lvalue). The item's own prev and next are left as they were (a caller
 * walking the list may still step on). */
#define DLIST_UNLINK(head, item) DLIST_UNLINK_AT(head, item, prev, next)

#endif
