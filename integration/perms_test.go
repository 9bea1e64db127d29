package integration

// Checklist items 8, 16 and 17 (DESIGN.md): other users. The same
// operations run as another user on a plain directory (the kernel's
// answer) and on agentfs over the same tree, and must give the same
// errnos, contents, owners and modes.

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	userUID = 1000
	userGID = 1000
)

// permEntries is a tree with files and directories of several owners
// and modes.
func permEntries() []lowerEntry {
	u := withOwner(userUID, userGID)
	return []lowerEntry{
		lowerFile("ro", "ro", u, withMode(0o444)),
		lowerFile("wo", "wo", u, withMode(0o200)),
		lowerFile("mine", "mine", u, withMode(0o600)),
		lowerFile("rootonly", "secret", withMode(0o600)),
		lowerFile("rootro", "pub", withMode(0o644)),
		lowerFile("rootrw", "rw", withMode(0o666)),
		lowerFile("grp", "g", withOwner(0, userGID), withMode(0o660)),
		lowerFile("setuid", "su", u, withMode(0o4755)),
		lowerFile("setgid", "sg", u, withMode(0o2755)),
		// Root's, writable by the user's group: the user's write,
		// truncate and O_TRUNC clear setuid and setgid.
		lowerFile("grpsetid", "gs", withOwner(0, userGID), withMode(0o6775)),
		lowerFile("grpsetid2", "gs", withOwner(0, userGID), withMode(0o6775)),
		lowerFile("grpsetid3", "gs", withOwner(0, userGID), withMode(0o6775)),
		// Setgid without group execute, of a group the user is not in:
		// the user's write clears it.
		lowerFile("othersetgid", "os", withOwner(0, 4242), withMode(0o2666)),
		lowerDir("rodir", u, withMode(0o555)),
		lowerFile("rodir/f", "f", u, withMode(0o644)),
		lowerDir("rootdir", withMode(0o755)),
		lowerFile("rootdir/f", "w", withMode(0o666)),
		lowerDir("closed", withMode(0o700)),
		lowerFile("closed/f", "c"),
		lowerDir("sticky", withMode(0o1777)),
		lowerFile("sticky/other", "o", withOwner(2000, 2000), withMode(0o666)),
		lowerFile("sticky/mine", "m", u, withMode(0o644)),
		lowerDir("shared", withMode(0o777)),
		lowerDir("sg", withOwner(0, 4242), withMode(0o2777)),
	}
}

// permOps are the operations a user tries, on the tree rooted at root.
func permOps(root string) []helperOp {
	p := func(rel string) string { return root + "/" + rel }
	return []helperOp{
		// Checklist 8: copy-up of files the user may write.
		opWrite(p("ro"), unix.O_TRUNC, "RO"), // EACCES: 0444, even for the owner
		opChmod(p("ro"), 0o644),
		opWrite(p("ro"), unix.O_TRUNC, "RO"),
		opRead(p("ro")),
		opStat(p("ro")),
		opWrite(p("wo"), unix.O_APPEND, "+"), // write-only: copy-up must read what the user cannot
		opRead(p("wo")),
		opStat(p("wo")),
		opWrite(p("mine"), unix.O_APPEND, "+"),
		opRead(p("mine")),
		opWrite(p("rodir/f"), unix.O_APPEND, "+"), // a writable file in a read-only dir
		opRead(p("rodir/f")),
		opStat(p("rodir/f")),
		opCreate(p("rodir/new"), 0o644),
		opUnlink(p("rodir/f")),
		opChmod(p("rodir"), 0o755),
		opCreate(p("rodir/new"), 0o644),
		opStat(p("rodir/new")),
		opWrite(p("setuid"), unix.O_APPEND, "+"), // the kernel clears setuid on a write by the owner
		opStat(p("setuid")),
		opWrite(p("setgid"), unix.O_APPEND, "+"),
		opStat(p("setgid")),
		opTruncate(p("setuid"), 1),
		opStat(p("setuid")),
		opWrite(p("grpsetid"), unix.O_APPEND, "+"),
		opStat(p("grpsetid")),
		opWrite(p("grpsetid"), unix.O_APPEND, "+"), // again: the file is copied up now
		opStat(p("grpsetid")),
		opTruncate(p("grpsetid2"), 1),
		opStat(p("grpsetid2")),
		opWrite(p("grpsetid3"), unix.O_TRUNC, "t"),
		opStat(p("grpsetid3")),
		opWrite(p("othersetgid"), unix.O_APPEND, "+"),
		opStat(p("othersetgid")),

		// Checklist 17: permission checks.
		opRead(p("rootonly")),
		opWrite(p("rootonly"), 0, "x"),
		opAccess(p("rootonly"), unix.R_OK),
		opRead(p("rootro")),
		opWrite(p("rootro"), 0, "x"),
		opAccess(p("rootro"), unix.W_OK),
		opWrite(p("rootrw"), unix.O_APPEND, "+"),
		opRead(p("grp")),
		opWrite(p("grp"), unix.O_APPEND, "+"),
		opWrite(p("rootdir/f"), unix.O_APPEND, "+"),
		opCreate(p("rootdir/x"), 0o644),
		opUnlink(p("rootdir/f")),
		opRename(p("rootdir/f"), p("shared/f")),
		opMkdir(p("rootdir/d"), 0o755),
		opStat(p("closed/f")),
		opList(p("closed")),
		opRead(p("closed/f")),
		opUnlink(p("sticky/other")),
		opRename(p("sticky/other"), p("sticky/x")),
		opWrite(p("sticky/other"), unix.O_APPEND, "+"),
		opUnlink(p("sticky/mine")),
		opCreate(p("sticky/new"), 0o644),
		opChown(p("mine"), userUID, userGID),
		opChown(p("mine"), 0, -1),
		opChown(p("mine"), -1, 4242),
		opChmod(p("rootro"), 0o666),
		opUtimesNow(p("rootrw")),   // writable by all: allowed
		opUtimes(p("rootrw"), 100), // explicit times: owner only
		opUtimes(p("mine"), 100),
		opSetxattr(p("rootro"), "user.x", "1"),
		opSetxattr(p("mine"), "user.x", "1"),
		opSetxattr(p("mine"), "trusted.x", "1"),
		opLink(p("rootonly"), p("shared/hl")), // protected_hardlinks
		opLink(p("mine"), p("shared/hl2")),
		opStat(p("mine")),
		opList(p("shared")),

		// Checklist 16: new objects get the caller's uid/gid and the
		// umask once.
		opUmask(0o022),
		opCreate(p("shared/n022"), 0o666),
		opStat(p("shared/n022")),
		opMkdir(p("shared/d022"), 0o777),
		opStat(p("shared/d022")),
		opUmask(0),
		opCreate(p("shared/n000"), 0o666),
		opStat(p("shared/n000")),
		opMkdir(p("shared/d000"), 0o777),
		opStat(p("shared/d000")),
		opMkfifo(p("shared/fifo000"), 0o666),
		opStat(p("shared/fifo000")),
		opUmask(0o077),
		opCreate(p("shared/n077"), 0o666),
		opStat(p("shared/n077")),
		opMkdir(p("shared/d077"), 0o777),
		opStat(p("shared/d077")),
		opSymlink("target", p("shared/sym")),
		opStat(p("shared/sym")),
		opUmask(0o022),
		// Setgid directory inheritance; the caller is not in group 4242.
		opCreate(p("sg/f"), 0o644),
		opStat(p("sg/f")),
		opMkdir(p("sg/d"), 0o755),
		opStat(p("sg/d")),
		opCreate(p("sg/d/deeper"), 0o644),
		opStat(p("sg/d/deeper")),
		opCreate(p("sg/setgid"), 0o2755), // S_ISGID dropped: not a member of the group
		opStat(p("sg/setgid")),
	}
}

// TestPermissionsLikeTheKernel runs permOps as uid 1000 on a plain
// directory and on agentfs (as root: allow_other with the kernel's
// checks) and compares every result.
func TestPermissionsLikeTheKernel(t *testing.T) {
	native := newMountpoint(t)
	buildLower(t, native, permEntries())
	m := newMount(t, withLower(permEntries()...))
	c := cred{uid: userUID, gid: userGID}
	want := runAs(t, c, permOps(native)...)
	got := runAs(t, c, permOps(m.dir)...)
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
	entries := []lowerEntry{
		lowerDir("sg", withOwner(0, 4242), withMode(0o2770)),
		lowerFile("sg/grp", "g", withOwner(0, 4242), withMode(0o640)),
		lowerFile("other", "o", withOwner(0, 4243), withMode(0o640)),
	}
	ops := func(root string) []helperOp {
		p := func(rel string) string { return root + "/" + rel }
		return []helperOp{
			opRead(p("sg/grp")),
			opRead(p("other")),
			opCreate(p("sg/f"), 0o2755), // a member: keeps S_ISGID
			opStat(p("sg/f")),
			opMkdir(p("sg/d"), 0o755),
			opStat(p("sg/d")),
			opChown(p("sg/f"), -1, 4242),
			opChown(p("sg/f"), -1, 4243),
		}
	}
	native := newMountpoint(t)
	buildLower(t, native, entries)
	m := newMount(t, withLower(entries...))
	c := cred{uid: userUID, gid: userGID, groups: []uint32{4242}}
	want := runAs(t, c, ops(native)...)
	got := runAs(t, c, ops(m.dir)...)
	for i, op := range ops("") {
		if got[i] != want[i] {
			t.Errorf("%s %s%s: agentfs %s, the kernel (plain dir) %s", op.Op, strings.TrimPrefix(op.Path, "/"), opArg(op), got[i], want[i])
		}
	}
}

// opArg describes the arguments of op beyond its path, for messages.
func opArg(op helperOp) string {
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
