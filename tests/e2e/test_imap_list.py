"""IMAP LIST beyond RFC 3501: LIST-EXTENDED (RFC 5258: selection options
SUBSCRIBED, REMOTE, RECURSIVEMATCH, SPECIAL-USE; return options SUBSCRIBED,
CHILDREN, SPECIAL-USE; several patterns; \\NonExistent, \\Subscribed,
CHILDINFO), LIST-STATUS (RFC 5819) and SPECIAL-USE / CREATE-SPECIAL-USE
(RFC 6154) over the real storage, with the exact lines the server sends.
Set-up goes through imaplib; the commands under test through a raw socket
so that the order of LIST and STATUS lines is seen as sent."""

import socket

import pytest

from test_imap_session import addr, imap_overrides, login


class Raw:
    """A logged-in connection that returns every untagged line of a command
    and its tagged completion (tag removed)."""

    def __init__(self, d, user="alice", password="wonderland"):
        self.sock = socket.create_connection(addr(d), timeout=5)
        self.f = self.sock.makefile("rb")
        assert self.f.readline().startswith(b"* OK")
        self.n = 0
        _, done = self.cmd(f"LOGIN {user} {password}")
        assert done.startswith("OK"), done

    def cmd(self, text):
        self.n += 1
        tag = f"t{self.n}"
        self.sock.sendall(f"{tag} {text}\r\n".encode())
        lines = []
        while True:
            line = self.f.readline()
            assert line.endswith(b"\r\n"), line
            line = line[:-2].decode()
            if line.startswith(tag + " "):
                return lines, line[len(tag) + 1:]
            lines.append(line)

    def ok(self, text):
        lines, done = self.cmd(text)
        assert done.startswith("OK"), (text, done)
        return lines

    def close(self):
        self.sock.close()


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


@pytest.fixture
def tree(imapd):
    """alice's folders: INBOX (one unseen message), Archive/2026/Q1 (no
    Archive, no Archive/2026), Drafts and Sent (configured special use),
    Lists, Work, Work/Reports. Subscribed: INBOX, Lists, Work/Reports and
    Gone (which does not exist)."""
    m = login(imapd)
    for name in ["Work", "Work/Reports", "Archive/2026/Q1", "Sent", "Drafts", "Lists"]:
        assert m.create(name)[0] == "OK", name
    for name in ["INBOX", "Lists", "Work/Reports", "Gone"]:
        assert m.subscribe(name)[0] == "OK", name
    assert m.append("INBOX", None, None, b"Subject: hi\r\n\r\nhello\r\n")[0] == "OK"
    m.logout()
    c = Raw(imapd)
    yield c
    c.close()


# ---------- the capabilities a client sees ----------

def test_client_sees_list_extensions_advertised(imapd):
    c = Raw(imapd)
    lines = c.ok("CAPABILITY")
    words = lines[0].split()
    for cap in ("LIST-EXTENDED", "LIST-STATUS", "SPECIAL-USE", "CREATE-SPECIAL-USE", "CHILDREN"):
        assert cap in words, cap
    c.close()


# ---------- RFC 3501 LIST stays as it was (plus special-use attributes) ----------

def test_basic_list_shows_tree_children_and_special_use(tree):
    assert tree.ok('LIST "" "*"') == [
        '* LIST (\\HasNoChildren) "/" "INBOX"',
        '* LIST (\\Noselect \\HasChildren) "/" "Archive"',
        '* LIST (\\Noselect \\HasChildren) "/" "Archive/2026"',
        '* LIST (\\HasNoChildren) "/" "Archive/2026/Q1"',
        '* LIST (\\HasNoChildren \\Drafts) "/" "Drafts"',
        '* LIST (\\HasNoChildren) "/" "Lists"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent"',
        '* LIST (\\HasChildren) "/" "Work"',
        '* LIST (\\HasNoChildren) "/" "Work/Reports"',
    ]


def test_basic_list_percent_shows_missing_parent_as_noselect(tree):
    assert tree.ok('LIST "" "%"') == [
        '* LIST (\\HasNoChildren) "/" "INBOX"',
        '* LIST (\\Noselect \\HasChildren) "/" "Archive"',
        '* LIST (\\HasNoChildren \\Drafts) "/" "Drafts"',
        '* LIST (\\HasNoChildren) "/" "Lists"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent"',
        '* LIST (\\HasChildren) "/" "Work"',
    ]
    assert tree.ok('LIST "" "Archive/%"') == ['* LIST (\\Noselect \\HasChildren) "/" "Archive/2026"']
    assert tree.ok('LIST "" ""') == ['* LIST (\\Noselect) "/" ""']


def test_lsub_is_unchanged(tree):
    assert tree.ok('LSUB "" "%"') == [
        '* LSUB (\\NonExistent) "/" "Gone"',
        '* LSUB () "/" "INBOX"',
        '* LSUB () "/" "Lists"',
        '* LSUB (\\Noselect) "/" "Work"',
    ]
    _, done = tree.cmd('LSUB () "" "*"')
    assert done.startswith("BAD"), done


# ---------- LIST-EXTENDED ----------

def test_extended_list_without_options_reports_nonexistent_parents(tree):
    expected = [
        '* LIST () "/" "INBOX"',
        '* LIST (\\NonExistent) "/" "Archive"',
        '* LIST (\\Drafts) "/" "Drafts"',
        '* LIST () "/" "Lists"',
        '* LIST (\\Sent) "/" "Sent"',
        '* LIST () "/" "Work"',
    ]
    assert tree.ok('LIST () "" "%"') == expected
    # REMOTE: there are no remote folders, so nothing changes.
    assert tree.ok('LIST (REMOTE) "" "%"') == expected
    assert tree.ok('LIST "" "%" RETURN ()') == expected
    assert tree.ok('LIST () "" ""') == ['* LIST (\\Noselect) "/" ""']


def test_return_children(tree):
    assert tree.ok('LIST () "" "%" RETURN (CHILDREN)') == [
        '* LIST (\\HasNoChildren) "/" "INBOX"',
        '* LIST (\\NonExistent \\HasChildren) "/" "Archive"',
        '* LIST (\\HasNoChildren \\Drafts) "/" "Drafts"',
        '* LIST (\\HasNoChildren) "/" "Lists"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent"',
        '* LIST (\\HasChildren) "/" "Work"',
    ]


def test_select_subscribed_lists_subscriptions_even_missing_ones(tree):
    assert tree.ok('LIST (SUBSCRIBED) "" "*"') == [
        '* LIST (\\NonExistent \\Subscribed) "/" "Gone"',
        '* LIST (\\Subscribed) "/" "INBOX"',
        '* LIST (\\Subscribed) "/" "Lists"',
        '* LIST (\\Subscribed) "/" "Work/Reports"',
    ]
    # Without RECURSIVEMATCH the parent of a subscribed child is not shown.
    assert tree.ok('LIST (SUBSCRIBED) "" "%"') == [
        '* LIST (\\NonExistent \\Subscribed) "/" "Gone"',
        '* LIST (\\Subscribed) "/" "INBOX"',
        '* LIST (\\Subscribed) "/" "Lists"',
    ]
    assert tree.ok('LIST (SUBSCRIBED) "" "%" RETURN (CHILDREN)') == [
        '* LIST (\\NonExistent \\Subscribed \\HasNoChildren) "/" "Gone"',
        '* LIST (\\Subscribed \\HasNoChildren) "/" "INBOX"',
        '* LIST (\\Subscribed \\HasNoChildren) "/" "Lists"',
    ]


def test_return_subscribed_marks_subscribed_folders(tree):
    assert tree.ok('LIST "" "*" RETURN (SUBSCRIBED)') == [
        '* LIST (\\Subscribed) "/" "INBOX"',
        '* LIST (\\NonExistent) "/" "Archive"',
        '* LIST (\\NonExistent) "/" "Archive/2026"',
        '* LIST () "/" "Archive/2026/Q1"',
        '* LIST (\\Drafts) "/" "Drafts"',
        '* LIST (\\Subscribed) "/" "Lists"',
        '* LIST (\\Sent) "/" "Sent"',
        '* LIST () "/" "Work"',
        '* LIST (\\Subscribed) "/" "Work/Reports"',
    ]


def test_recursivematch_reveals_parents_of_subscribed_children(tree):
    tree.ok("SUBSCRIBE Archive/2026/Q1")
    assert tree.ok('LIST (SUBSCRIBED RECURSIVEMATCH) "" "%"') == [
        '* LIST (\\NonExistent) "/" "Archive" ("CHILDINFO" ("SUBSCRIBED"))',
        '* LIST (\\NonExistent \\Subscribed) "/" "Gone"',
        '* LIST (\\Subscribed) "/" "INBOX"',
        '* LIST (\\Subscribed) "/" "Lists"',
        '* LIST () "/" "Work" ("CHILDINFO" ("SUBSCRIBED"))',
    ]
    # A subscribed parent keeps \Subscribed and gains CHILDINFO.
    tree.ok("SUBSCRIBE Work")
    assert tree.ok('LIST (RECURSIVEMATCH SUBSCRIBED) "" "W%" RETURN (CHILDREN)') == [
        '* LIST (\\Subscribed \\HasChildren) "/" "Work" ("CHILDINFO" ("SUBSCRIBED"))',
    ]
    # The child matches the pattern itself: no CHILDINFO needed.
    assert tree.ok('LIST (SUBSCRIBED RECURSIVEMATCH) "" "W*"') == [
        '* LIST (\\Subscribed) "/" "Work"',
        '* LIST (\\Subscribed) "/" "Work/Reports"',
    ]


def test_several_patterns_list_each_folder_once(tree):
    assert tree.ok('LIST "" ("INBOX" "Work/*")') == [
        '* LIST () "/" "INBOX"',
        '* LIST () "/" "Work/Reports"',
    ]
    assert tree.ok('LIST "" ("Work" "W*" "inbox") RETURN (CHILDREN)') == [
        '* LIST (\\HasNoChildren) "/" "INBOX"',
        '* LIST (\\HasChildren) "/" "Work"',
        '* LIST (\\HasNoChildren) "/" "Work/Reports"',
    ]
    assert tree.ok('LIST (SUBSCRIBED) "" ("Lists" "Gone" "Nothing*")') == [
        '* LIST (\\NonExistent \\Subscribed) "/" "Gone"',
        '* LIST (\\Subscribed) "/" "Lists"',
    ]
    # The reference applies to every pattern.
    assert tree.ok('LIST "Work/" ("Rep*" "Nope")') == ['* LIST () "/" "Work/Reports"']


def test_malformed_extended_list_is_bad_and_session_goes_on(tree):
    for cmd in ['LIST (RECURSIVEMATCH) "" "*"',
                'LIST (REMOTE RECURSIVEMATCH) "" "*"',
                'LIST (SPECIAL-USE RECURSIVEMATCH) "" "*"',
                'LIST (BOGUS) "" "*"',
                'LIST "" "*" RETURN (BOGUS)',
                'LIST "" "*" RETURN',
                'LIST "" "*" BOGUS ()',
                'LIST "" "*" RETURN (STATUS)',
                'LIST "" "*" RETURN (STATUS ())',
                'LIST "" "*" RETURN (STATUS (BOGUS))',
                'LIST "" "*" RETURN (STATUS (DELETED))',
                'LIST "" ()',
                'LIST "" (("*"))',
                'LIST () "*"',
                'LIST ("") "*"']:
        lines, done = tree.cmd(cmd)
        assert lines == [] and done.startswith("BAD"), (cmd, lines, done)
    assert tree.ok("NOOP") == []


# ---------- LIST-STATUS ----------

def test_list_status_follows_each_selectable_folder(tree):
    assert tree.ok('LIST "" "%" RETURN (STATUS (MESSAGES UNSEEN))') == [
        '* LIST () "/" "INBOX"',
        '* STATUS "INBOX" (MESSAGES 1 UNSEEN 1)',
        '* LIST (\\NonExistent) "/" "Archive"',
        '* LIST (\\Drafts) "/" "Drafts"',
        '* STATUS "Drafts" (MESSAGES 0 UNSEEN 0)',
        '* LIST () "/" "Lists"',
        '* STATUS "Lists" (MESSAGES 0 UNSEEN 0)',
        '* LIST (\\Sent) "/" "Sent"',
        '* STATUS "Sent" (MESSAGES 0 UNSEEN 0)',
        '* LIST () "/" "Work"',
        '* STATUS "Work" (MESSAGES 0 UNSEEN 0)',
    ]


def test_list_status_with_subscribed_skips_missing_and_childinfo_only(tree):
    assert tree.ok('LIST (SUBSCRIBED RECURSIVEMATCH) "" "%" '
                   'RETURN (CHILDREN STATUS (UIDNEXT MESSAGES))') == [
        '* LIST (\\NonExistent \\Subscribed \\HasNoChildren) "/" "Gone"',
        '* LIST (\\Subscribed \\HasNoChildren) "/" "INBOX"',
        '* STATUS "INBOX" (UIDNEXT 2 MESSAGES 1)',
        '* LIST (\\Subscribed \\HasNoChildren) "/" "Lists"',
        '* STATUS "Lists" (UIDNEXT 1 MESSAGES 0)',
        '* LIST (\\HasChildren) "/" "Work" ("CHILDINFO" ("SUBSCRIBED"))',
    ]


def test_list_status_matches_the_status_command(tree):
    items = "MESSAGES RECENT UIDNEXT UIDVALIDITY UNSEEN HIGHESTMODSEQ SIZE"
    status = tree.ok(f"STATUS INBOX ({items})")
    lines = tree.ok(f'LIST "" "INBOX" RETURN (STATUS ({items}))')
    assert lines == ['* LIST () "/" "INBOX"', status[0]]
    assert status[0].startswith('* STATUS "INBOX" (MESSAGES 1 RECENT 1 UIDNEXT 2 UIDVALIDITY ')


# ---------- SPECIAL-USE ----------

def test_select_special_use_lists_only_special_folders(tree):
    assert tree.ok('LIST (SPECIAL-USE) "" "*"') == [
        '* LIST (\\Drafts) "/" "Drafts"',
        '* LIST (\\Sent) "/" "Sent"',
    ]
    assert tree.ok('LIST (SPECIAL-USE) "" "*" RETURN (SPECIAL-USE CHILDREN)') == [
        '* LIST (\\HasNoChildren \\Drafts) "/" "Drafts"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent"',
    ]
    assert tree.ok('LIST (SPECIAL-USE SUBSCRIBED) "" "*"') == []
    tree.ok("SUBSCRIBE Sent")
    assert tree.ok('LIST (SUBSCRIBED SPECIAL-USE) "" "*"') == [
        '* LIST (\\Subscribed \\Sent) "/" "Sent"',
    ]
    assert tree.ok('LIST "" "S*" RETURN (SPECIAL-USE)') == ['* LIST (\\Sent) "/" "Sent"']


def test_create_with_use_sets_an_override(tree, tmp_path):
    assert tree.ok("CREATE Outbox (USE (\\sent))") == []
    assert tree.ok("CREATE Spam (USE (\\Junk))") == []
    assert tree.ok("CREATE Plain (USE ())") == []
    assert tree.ok('LIST "" "*" RETURN (SPECIAL-USE)') == [
        '* LIST () "/" "INBOX"',
        '* LIST (\\NonExistent) "/" "Archive"',
        '* LIST (\\NonExistent) "/" "Archive/2026"',
        '* LIST () "/" "Archive/2026/Q1"',
        '* LIST (\\Drafts) "/" "Drafts"',
        '* LIST () "/" "Lists"',
        '* LIST (\\Sent) "/" "Outbox"',
        '* LIST () "/" "Plain"',
        '* LIST (\\Sent) "/" "Sent"',
        '* LIST (\\Junk) "/" "Spam"',
        '* LIST () "/" "Work"',
        '* LIST () "/" "Work/Reports"',
    ]
    overrides = tmp_path / "mail" / "alice" / "Maildir" / "petrel-special-use"
    assert sorted(overrides.read_text().splitlines()) == ["Outbox\t\\Sent", "Spam\t\\Junk"]


def test_create_with_unusable_use_is_refused_and_creates_nothing(tree):
    for cmd, code in [("CREATE Bad (USE (\\Bogus))", "NO [USEATTR]"),
                      ("CREATE Bad (USE (\\Sent \\Trash))", "NO [USEATTR]"),
                      ("CREATE Bad (USE (Sent))", "NO [USEATTR]"),
                      ("CREATE Bad (USE (\\Noselect))", "NO [USEATTR]"),
                      ("CREATE Bad (FROB (\\Sent))", "BAD"),
                      ("CREATE Bad (USE)", "BAD"),
                      ("CREATE Bad (USE \\Sent)", "BAD"),
                      ("CREATE Bad \\Sent", "BAD")]:
        lines, done = tree.cmd(cmd)
        assert lines == [] and done.startswith(code), (cmd, done)
    assert tree.ok('LIST "" "Bad"') == []
    _, done = tree.cmd("CREATE Sent (USE (\\Sent))")
    assert done.startswith("NO [ALREADYEXISTS]"), done
    _, done = tree.cmd("CREATE INBOX (USE (\\Sent))")
    assert done.startswith("NO [ALREADYEXISTS]"), done


def test_special_use_follows_rename_and_goes_with_delete(tree):
    tree.ok("CREATE Box (USE (\\Archive))")
    tree.ok("CREATE Box/Kid (USE (\\Trash))")
    tree.ok("RENAME Box Crate")
    assert tree.ok('LIST "" "Crate*" RETURN (CHILDREN)') == [
        '* LIST (\\HasChildren \\Archive) "/" "Crate"',
        '* LIST (\\HasNoChildren \\Trash) "/" "Crate/Kid"',
    ]
    tree.ok("DELETE Crate")
    tree.ok("CREATE Crate")
    assert tree.ok('LIST "" "Crate*"') == [
        '* LIST (\\HasChildren) "/" "Crate"',
        '* LIST (\\HasNoChildren \\Trash) "/" "Crate/Kid"',
    ]


def test_configured_defaults_and_overrides(petreld, tmp_path):
    cfg = imap_overrides(tmp_path)
    cfg["mail"]["special_use"] = {"Sent Items": "\\Sent", "Bin": "\\Trash"}
    d = petreld(cfg)
    c = Raw(d)
    for name in ['"Sent Items"', "Sent", "Bin"]:
        c.ok(f"CREATE {name}")
    assert c.ok('LIST (SPECIAL-USE) "" "*"') == [
        '* LIST (\\Trash) "/" "Bin"',
        '* LIST (\\Sent) "/" "Sent Items"',
    ]
    # The override wins over the configured default for the same folder.
    (tmp_path / "mail" / "alice" / "Maildir" / "petrel-special-use").write_text(
        "Bin\t\n" "Sent\t\\Sent\n")
    assert c.ok('LIST "" "*"') == [
        '* LIST (\\HasNoChildren) "/" "INBOX"',
        '* LIST (\\HasNoChildren) "/" "Bin"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent Items"',
    ]
    c.close()


def test_special_use_belongs_to_the_personal_namespace(petreld, tmp_path):
    cfg = imap_overrides(tmp_path)
    cfg["mail"]["namespaces"] = [
        {"name": "inbox", "type": "personal", "prefix": "", "separator": "/",
         "location": "maildir:%h/Maildir", "subscriptions": True},
        {"name": "public", "type": "public", "prefix": "Public/", "separator": "/",
         "location": f"maildir:{tmp_path}/public", "subscriptions": True},
    ]
    d = petreld(cfg)
    c = Raw(d)
    c.ok("CREATE Public/Sent")
    _, done = c.cmd("CREATE Public/Trash (USE (\\Trash))")
    assert done.startswith("NO [USEATTR]"), done
    c.ok("CREATE Sent")
    c.ok("SUBSCRIBE Public/Sent")
    assert c.ok('LIST "" "*"') == [
        '* LIST (\\HasNoChildren) "/" "INBOX"',
        '* LIST (\\HasNoChildren \\Sent) "/" "Sent"',
        '* LIST (\\HasNoChildren) "/" "Public/Sent"',
    ]
    assert c.ok('LIST (SUBSCRIBED) "" ("Public/*" "INBOX") RETURN (STATUS (MESSAGES))') == [
        '* LIST (\\Subscribed) "/" "Public/Sent"',
        '* STATUS "Public/Sent" (MESSAGES 0)',
    ]
    c.close()


def test_wildcard_heavy_pattern_is_cheap(petreld, tmp_path):
    """Matching is linear in pattern x name: a hostile pattern cannot make
    LIST take exponential time."""
    import time as _time
    from test_imap_session import imap_overrides, login as _login
    d = petreld(imap_overrides(tmp_path))
    m = _login(d)
    m.create("a" * 200)
    t0 = _time.monotonic()
    typ, data = m.list('""', '"' + "*%" * 200 + 'x"')
    assert typ == "OK" and data == [None]
    assert _time.monotonic() - t0 < 2.0
    m.logout()
