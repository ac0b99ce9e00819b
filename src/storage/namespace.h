/* Mail namespaces and the `mail:` configuration section.
 *
 *   mail:
 *     home: ./var/mail/%u              # user home template (%u user, %n local part, %d domain)
 *     fsync: always|optimized|never    # mail_fsync
 *     special_use: {Drafts: "\\Drafts", Sent: "\\Sent", Trash: "\\Trash", ...}
 *     namespaces:
 *       - name: inbox
 *         type: personal|shared|public
 *         prefix: ""                   # "" for the personal namespace, "Public/" ...
 *         separator: "/"
 *         location: maildir:%h/Maildir # %h the user's home, %u, %n, %d
 *         subscriptions: true
 *         index_private: "%h/pvt"      # INDEXPVT: a reader's private \Seen (shared/public)
 *     acl:                             # RFC 4314 ACLs (storage/acl/acl-module.h)
 *       enabled: false
 *       cache_secs: 1                  # how stale a handle's rights may get
 *       allow_anyone: false            # IMAP SETACL to anyone/authenticated
 *       sharing_map: ""                # dict of the owner-discovery registry
 *
 * A namespace is addressed by its slug, derived from the prefix and never
 * from the type: the namespace with an empty prefix is `personal`; "Public/"
 * is `public` (lower-cased, separators and non-alphanumerics dropped).
 *
 * A shared namespace whose prefix ends in an owner level, "shared/%u/"
 * (Dovecot's type=shared prefix=shared/%%u/), is a template: "shared/bob/X"
 * is folder X of owner bob, its location expanded with bob's name and home
 * (storage/shared-namespace.h makes one instance per owner). Its slug comes
 * from the prefix before the variable ("shared"). */
#ifndef PETREL_STORAGE_NAMESPACE_H
#define PETREL_STORAGE_NAMESPACE_H

#include "core/buf.h"
#include "core/error.h"
#include "core/user-name.h"
#include "core/yaml-doc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum namespace_type { NAMESPACE_PERSONAL, NAMESPACE_SHARED, NAMESPACE_PUBLIC };

struct namespace_config {
    char *name;
    enum namespace_type type;
    char *prefix;
    char separator;
    char *location; /* "maildir:<path template>" */
    bool subscriptions;
    char *slug;
    /* A per-owner template ("shared/%u/"): the prefix's fixed head is its
     * first owner_at bytes ("shared/"). Nothing is stored at a template
     * itself: its instances (owner set) are what folders belong to. */
    bool per_owner;
    size_t owner_at;
    /* An instance of a template (storage/shared-namespace.h): the owner,
     * the template it was made from; NULL for a configured namespace. */
    char *owner;
    const struct namespace_config *tmpl;
    /* INDEXPVT (shared and public namespaces): a template (%u %n %d the
     * reader, %h the reader's home) of the directory under which each
     * reader keeps their private \Seen; NULL: \Seen is the folder's. */
    char *private_index;
};

struct special_use_default {
    char *folder;
    char *attr; /* "\Drafts" ... */
};

/* mail.acl (docs/acl.md). */
struct mail_acl_config {
    bool enabled;
    bool allow_anyone; /* SETACL may grant to "anyone"/"authenticated" (Dovecot's acl_anyone) */
    int64_t cache_ms;  /* a handle re-checks its ACL file at most this often */
    char *sharing_map; /* the dict of `dicts:` holding the sharing registry (NULL: none) */
};

struct mail_config {
    char *home;
    int fsync; /* enum fileindex_fsync */
    struct namespace_config *namespaces;
    size_t namespace_count;
    struct special_use_default *special_use;
    size_t special_use_count;
    struct mail_acl_config acl;
    /* METADATA (docs/metadata.md): the dict of `dicts:` that holds the
     * entries (NULL: no METADATA), the longest value and the most entries
     * one folder (or the server) holds for one user, both scopes counted. */
    char *attribute_dict;
    int64_t metadata_max_value_bytes;
    int64_t metadata_max_entries;
    bool metadata_private; /* /private entries allowed (else [METADATA NOPRIVATE]) */
    char *metadata_server_admin; /* the server's /shared/admin (NULL: an ordinary entry) */
};

/* Reads the `mail:` section (NULL = defaults: home ./var/mail/%u, one
 * personal namespace maildir:%h/Maildir, the five RFC 6154 defaults). */
bool mail_config_read(const char *file, const struct ynode *section, struct mail_config *out,
                      struct petrel_error *err);
void mail_config_free(struct mail_config *cfg);

/* The two ways to find a namespace, and the only ones: by the slug that
 * addresses it (the API, the storage's own "personal"), or by the prefix
 * that a full folder name starts with (IMAP names): the longest prefix
 * that matches wins, so the empty one catches the rest. NULL when none. */
const struct namespace_config *namespace_by_slug(const struct mail_config *cfg, const char *slug);
/* *rest (may be NULL) points into `full_name` after the prefix. */
const struct namespace_config *namespace_by_prefix(const struct mail_config *cfg,
                                                   const char *full_name, const char **rest);
const char *namespace_type_name(enum namespace_type type);
/* The fixed part of the prefix (a template's head "shared/"; else all). */
size_t namespace_prefix_head(const struct namespace_config *ns);
/* Whether the namespace has an INBOX: the personal one, and an owner's
 * instance of a shared template (the owner's INBOX, as Dovecot's
 * shared/bob/INBOX). */
bool namespace_has_inbox(const struct namespace_config *ns);
/* Derives the slug of a prefix ("" -> "personal"). */
void namespace_slug(const char *prefix, struct buf *out);

/* Expands %u, %n, %d, %h and %% in `template` (%h needs `home`). */
bool mail_template_expand(const char *template, const char *user, const char *home, struct buf *out,
                          struct petrel_error *err);

#endif
