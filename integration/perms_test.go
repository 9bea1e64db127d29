package integration

// Checklist items 8, 16 and 17 (docs/semantics.md): other users. The
// same operations run as another user on a plain directory (the kernel's
// answer) and on agentfs over the same tree, and must give the same
// errnos, contents, owners and modes.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

const (
	userUID = 1000
	userGID = 1000
)

// permEntries is a tree with files and directories of several owners
// and modes.
func permEntries() []harness.Entry {
	u := harness.WithOwner(userUID, userGID)
	return []harness.Entry{
		harness.LowerFile("ro", "ro", u, harness.WithMode(0o444)),
		harness.LowerFile("wo", "wo", u, harness.WithMode(0o200)),
		harness.LowerFile("mine", "mine", u, harness.WithMode(0o600)),
		harness.LowerFile("rootonly", "secret", harness.WithMode(0o600)),
		harness.LowerFile("rootro", "pub", harness.WithMode(0o644)),
		harness.LowerFile("rootrw", "rw", harness.WithMode(0o666)),
		harness.LowerFile("grp", "g", harness.WithOwner(0, userGID), harness.WithMode(0o660)),
		harness.LowerFile("setuid", "su", u, harness.WithMode(0o4755)),
		harness.LowerFile("setgid", "sg", u, harness.WithMode(0o2755)),
		// Root's, writable by the user's group: the user's write,
		// truncate and O_TRUNC clear setuid and setgid.
		harness.LowerFile("grpsetid", "gs", harness.WithOwner(0, userGID), harness.WithMode(0o6775)),
		harness.LowerFile("grpsetid2", "gs", harness.WithOwner(0, userGID), harness.WithMode(0o6775)),
		harness.LowerFile("grpsetid3", "gs", harness.WithOwner(0, userGID), harness.WithMode(0o6775)),
		// Setgid without group execute, of a group the user is not in:
		// the user's write clears it.
		harness.LowerFile("othersetgid", "os", harness.WithOwner(0, 4242), harness.WithMode(0o2666)),
		harness.LowerDir("rodir", u, harness.WithMode(0o555)),
		harness.LowerFile("rodir/f", "f", u, harness.WithMode(0o644)),
		harness.LowerDir("rootdir", harness.WithMode(0o755)),
		harness.LowerFile("rootdir/f", "w", harness.WithMode(0o666)),
		harness.LowerDir("closed", harness.WithMode(0o700)),
		harness.LowerFile("closed/f", "c"),
		harness.LowerDir("sticky", harness.WithMode(0o1777)),
		harness.LowerFile("sticky/other", "o", harness.WithOwner(2000, 2000), harness.WithMode(0o666)),
		harness.LowerFile("sticky/mine", "m", u, harness.WithMode(0o644)),
		harness.LowerDir("shared", harness.WithMode(0o777)),
		harness.LowerDir("sg", harness.WithOwner(0, 4242), harness.WithMode(0o2777)),
	}
}

// permOps are the operations a user tries, on the tree rooted at root.
func permOps(root string) []harness.Op {
	p := func(rel string) string { return root + "/" + rel }
	return []harness.Op{
		// Checklist 8: copy-up of files the user may write.
		harness.OpWrite(p("ro"), unix.O_TRUNC, "RO"), // EACCES: 0444, even for the owner
		harness.OpChmod(p("ro"), 0o644),
		harness.OpWrite(p("ro"), unix.O_TRUNC, "RO"),
		harness.OpRead(p("ro")),
		harness.OpStat(p("ro")),
		harness.OpWrite(p("wo"), unix.O_APPEND, "+"), // write-only: copy-up must read what the user cannot
		harness.OpRead(p("wo")),
		harness.OpStat(p("wo")),
		harness.OpWrite(p("mine"), unix.O_APPEND, "+"),
		harness.OpRead(p("mine")),
		harness.OpWrite(p("rodir/f"), unix.O_APPEND, "+"), // a writable file in a read-only dir
		harness.OpRead(p("rodir/f")),
		harness.OpStat(p("rodir/f")),
		harness.OpCreate(p("rodir/new"), 0o644),
		harness.OpUnlink(p("rodir/f")),
		harness.OpChmod(p("rodir"), 0o755),
		harness.OpCreate(p("rodir/new"), 0o644),
		harness.OpStat(p("rodir/new")),
		harness.OpWrite(p("setuid"), unix.O_APPEND, "+"), // the kernel clears setuid on a write by the owner
		harness.OpStat(p("setuid")),
		harness.OpWrite(p("setgid"), unix.O_APPEND, "+"),
		harness.OpStat(p("setgid")),
		harness.OpTruncate(p("setuid"), 1),
		harness.OpStat(p("setuid")),
		harness.OpWrite(p("grpsetid"), unix.O_APPEND, "+"),
		harness.OpStat(p("grpsetid")),
		harness.OpWrite(p("grpsetid"), unix.O_APPEND, "+"), // again: the file is copied up now
		harness.OpStat(p("grpsetid")),
		harness.OpTruncate(p("grpsetid2"), 1),
		harness.OpStat(p("grpsetid2")),
		harness.OpWrite(p("grpsetid3"), unix.O_TRUNC, "t"),
		harness.OpStat(p("grpsetid3")),
		harness.OpWrite(p("othersetgid"), unix.O_APPEND, "+"),
		harness.OpStat(p("othersetgid")),

		// Checklist 17: permission checks.
		harness.OpRead(p("rootonly")),
		harness.OpWrite(p("rootonly"), 0, "x"),
		harness.OpAccess(p("rootonly"), unix.R_OK),
		harness.OpRead(p("rootro")),
		harness.OpWrite(p("rootro"), 0, "x"),
		harness.OpAccess(p("rootro"), unix.W_OK),
		harness.OpWrite(p("rootrw"), unix.O_APPEND, "+"),
		harness.OpRead(p("grp")),
		harness.OpWrite(p("grp"), unix.O_APPEND, "+"),
		harness.OpWrite(p("rootdir/f"), unix.O_APPEND, "+"),
		harness.OpCreate(p("rootdir/x"), 0o644),
		harness.OpUnlink(p("rootdir/f")),
		harness.OpRename(p("rootdir/f"), p("shared/f")),
		harness.OpMkdir(p("rootdir/d"), 0o755),
		harness.OpStat(p("closed/f")),
		harness.OpList(p("closed")),
		harness.OpRead(p("closed/f")),
		harness.OpUnlink(p("sticky/other")),
		harness.OpRename(p("sticky/other"), p("sticky/x")),
		harness.OpWrite(p("sticky/other"), unix.O_APPEND, "+"),
		harness.OpUnlink(p("sticky/mine")),
		harness.OpCreate(p("sticky/new"), 0o644),
		harness.OpChown(p("mine"), userUID, userGID),
		harness.OpChown(p("mine"), 0, -1),
		harness.OpChown(p("mine"), -1, 4242),
		harness.OpChmod(p("rootro"), 0o666),
		harness.OpUtimesNow(p("rootrw")),   // writable by all: allowed
		harness.OpUtimes(p("rootrw"), 100), // explicit times: owner only
		harness.OpUtimes(p("mine"), 100),
		harness.OpSetxattr(p("rootro"), "user.x", "1"),
		harness.OpSetxattr(p("mine"), "user.x", "1"),
		harness.OpSetxattr(p("mine"), "trusted.x", "1"),
		harness.OpLink(p("rootonly"), p("shared/hl")), // protected_hardlinks
		harness.OpLink(p("mine"), p("shared/hl2")),
		harness.OpStat(p("mine")),
		harness.OpList(p("shared")),

		// Checklist 16: new objects get the caller's uid/gid and the
		// umask once.
		harness.OpUmask(0o022),
		harness.OpCreate(p("shared/n022"), 0o666),
		harness.OpStat(p("shared/n022")),
		harness.OpMkdir(p("shared/d022"), 0o777),
		harness.OpStat(p("shared/d022")),
		harness.OpUmask(0),
		harness.OpCreate(p("shared/n000"), 0o666),
		harness.OpStat(p("shared/n000")),
		harness.OpMkdir(p("shared/d000"), 0o777),
		harness.OpStat(p("shared/d000")),
		harness.OpMkfifo(p("shared/fifo000"), 0o666),
		harness.OpStat(p("shared/fifo000")),
		harness.OpUmask(0o077),
		harness.OpCreate(p("shared/n077"), 0o666),
		harness.OpStat(p("shared/n077")),
		harness.OpMkdir(p("shared/d077"), 0o777),
		harness.OpStat(p("shared/d077")),
		harness.OpSymlink("target", p("shared/sym")),
		harness.OpStat(p("shared/sym")),
		harness.OpUmask(0o022),
		// Setgid directory inheritance; the caller is not in group 4242.
		harness.OpCreate(p("sg/f"), 0o644),
		harness.OpStat(p("sg/f")),
		harness.OpMkdir(p("sg/d"), 0o755),
		harness.OpStat(p("sg/d")),
		harness.OpCreate(p("sg/d/deeper"), 0o644),
		harness.OpStat(p("sg/d/deeper")),
		harness.OpCreate(p("sg/setgid"), 0o2755), // S_ISGID dropped: not a member of the group
		harness.OpStat(p("sg/setgid")),
	}
}

// TestPermissionsLikeTheKernel runs permOps as uid 1000 on a plain
// directory and on agentfs (as root: allow_other with the kernel's
// checks) and compares every result.
func TestPermissionsLikeTheKernel(t *testing.T) {
	native := harness.NewMountpoint(t)
	harness.BuildLower(t, native, permEntries())
	m := harness.NewMount(t, harness.WithLower(permEntries()...))
	c := harness.Cred{Uid: userUID, Gid: userGID}
	want := harness.RunAs(t, c, permOps(native)...)
	got := harness.RunAs(t, c, permOps(m.Dir)...)
	ops := permOps("")
	for i := range ops {
		if got[i] != want[i] {
			t.Errorf("%s %s%s: agentfs %s, the kernel (plain dir) %s", ops[i].Op, strings.TrimPrefix(ops[i].Path, "/"),
				opArg(ops[i]), got[i], want[i])
		}
	}
	// What the cleanup checks anyway, said plainly: nothing of the above
	// reached the lower tree.
}

// TestSupplementaryGroupsLikeTheKernel checks group permission and
// setgid inheritance for a caller whose group is a supplementary one.
func TestSupplementaryGroupsLikeTheKernel(t *testing.T) {
	entries := []harness.Entry{
		harness.LowerDir("sg", harness.WithOwner(0, 4242), harness.WithMode(0o2770)),
		harness.LowerFile("sg/grp", "g", harness.WithOwner(0, 4242), harness.WithMode(0o640)),
		harness.LowerFile("other", "o", harness.WithOwner(0, 4243), harness.WithMode(0o640)),
	}
	ops := func(root string) []harness.Op {
		p := func(rel string) string { return root + "/" + rel }
		return []harness.Op{
			harness.OpRead(p("sg/grp")),
			harness.OpRead(p("other")),
			harness.OpCreate(p("sg/f"), 0o2755), // a member: keeps S_ISGID
			harness.OpStat(p("sg/f")),
			harness.OpMkdir(p("sg/d"), 0o755),
			harness.OpStat(p("sg/d")),
			harness.OpChown(p("sg/f"), -1, 4242),
			harness.OpChown(p("sg/f"), -1, 4243),
		}
	}
	native := harness.NewMountpoint(t)
	harness.BuildLower(t, native, entries)
	m := harness.NewMount(t, harness.WithLower(entries...))
	c := harness.Cred{Uid: userUID, Gid: userGID, Groups: []uint32{4242}}
	want := harness.RunAs(t, c, ops(native)...)
	got := harness.RunAs(t, c, ops(m.Dir)...)
	for i, op := range ops("") {
		if got[i] != want[i] {
			t.Errorf("%s %s%s: agentfs %s, the kernel (plain dir) %s", op.Op, strings.TrimPrefix(op.Path, "/"), opArg(op), got[i], want[i])
		}
	}
}

// opArg describes the arguments of op beyond its path, for messages.
func opArg(op harness.Op) string {
	switch op.Op {
	case "write":
		return fmt.Sprintf(" (flags %#x)", op.Flags)
	case "chmod", "create", "mkdir", "mkfifo", "umask":
		return fmt.Sprintf(" %o", op.Mode)
	case "chown":
		return fmt.Sprintf(" %d:%d", op.Uid, op.Gid)
	case "rename", "link", "symlink":
		return " " + op.Path2
	case "setxattr":
		return " " + op.Path2
	}
	return ""
}
