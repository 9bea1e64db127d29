package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestExitCodesAndHelp(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		code    int
		wantOut string // in stdout
		wantErr string // in stderr
	}{
		{nil, exitUsage, "", "Usage:"},
		{[]string{"--help"}, exitOK, "Commands:", ""},
		{[]string{"-h"}, exitOK, "Exit codes:", ""},
		{[]string{"help"}, exitOK, "Commands:", ""},
		{[]string{"help", "mount"}, exitOK, "--lower", ""},
		{[]string{"mount", "--help"}, exitOK, "Examples:", ""},
		{[]string{"unmount", "-h"}, exitOK, "Example:", ""},
		{[]string{"help", "bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"--bogus"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"mount", "--bogus", "x"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"status", "-Z"}, exitUsage, "", "-Z"},
		{[]string{"mount", "--lower"}, exitUsage, "", "--lower"},
		{[]string{"mount", "--lower", "/x"}, exitUsage, "", "mount takes one MOUNTPOINT"},
		{[]string{"unmount"}, exitUsage, "", "unmount takes one MOUNTPOINT"},
		{[]string{"status", "extra"}, exitUsage, "", "status takes no arguments"},
		{[]string{"version"}, exitOK, "agentfs " + version, ""},
		{[]string{"--version"}, exitOK, "agentfs " + version, ""},
		{[]string{"version", "x"}, exitUsage, "", "version takes no arguments"},
		{[]string{"snapshot"}, exitUsage, "", "which one? create, delete, list"},
		{[]string{"snapshot", "--help"}, exitOK, "snapshot create", ""},
		{[]string{"snapshot", "bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"snapshot", "create", "--help"}, exitOK, "Usage: agentfs snapshot create", ""},
		{[]string{"help", "snapshot", "create"}, exitOK, "-m, --message LABEL", ""},
		{[]string{"snapshot", "create", "x"}, exitUsage, "", "snapshot create takes no arguments"},
		{[]string{"snapshot", "delete"}, exitUsage, "", "snapshot delete takes one snapshot ID"},
		{[]string{"branch", "create"}, exitUsage, "", "branch create takes one branch NAME"},
		{[]string{"branch", "switch", "a", "b"}, exitUsage, "", "branch switch takes one branch NAME"},
		{[]string{"tag", "x"}, exitUsage, "", "tag takes a NAME and a snapshot ID"},
		{[]string{"tag", "--delete"}, exitUsage, "", "tag --delete takes one tag NAME"},
		{[]string{"restore"}, exitUsage, "", "restore takes one snapshot ID"},
	} {
		code, out, errOut := runArgs(tc.args...)
		if code != tc.code {
			t.Errorf("agentfs %q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errOut)
		}
		if !strings.Contains(out, tc.wantOut) {
			t.Errorf("agentfs %q: stdout %q, want it to contain %q", tc.args, out, tc.wantOut)
		}
		if !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("agentfs %q: stderr %q, want it to contain %q", tc.args, errOut, tc.wantErr)
		}
	}
}

// Every command's help says what it does, shows an example and lists the
// exit codes.
func TestCommandHelp(t *testing.T) {
	for name := range commands {
		code, out, _ := runArgs("help", name)
		if code != exitOK {
			t.Errorf("help %s: exit %d", name, code)
		}
		for _, want := range []string{"Usage: agentfs " + name, "Example", "Exit codes:", "2  usage error"} {
			if !strings.Contains(out, want) {
				t.Errorf("help %s does not contain %q:\n%s", name, want, out)
			}
		}
	}
}

func TestErrorExit(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runArgs("mount", "--lower", filepath.Join(dir, "nope"), dir)
	if code != exitError {
		t.Errorf("mount of a missing lower: exit %d, want %d", code, exitError)
	}
	if want := "agentfs mount: the lower directory " + filepath.Join(dir, "nope") + " does not exist"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want it to contain %q", errOut, want)
	}
	code, _, errOut = runArgs("status", "-C", dir)
	if code != exitError || !strings.Contains(errOut, "not inside an agentfs mount (use -C DIR)") {
		t.Errorf("status outside a mount: exit %d, stderr %q; want exit 1, 'not inside an agentfs mount (use -C DIR)'", code, errOut)
	}
	for _, args := range [][]string{{"snapshot", "create"}, {"snapshot", "list"}, {"branch", "list"}, {"restore", "1a2b"}, {"tag"}} {
		code, _, errOut = runArgs(append(args, "-C", dir)...)
		if code != exitError || !strings.Contains(errOut, "not inside an agentfs mount (use -C DIR)") {
			t.Errorf("%s outside a mount: exit %d, stderr %q; want exit 1, 'not inside an agentfs mount (use -C DIR)'", args, code, errOut)
		}
	}
	code, _, errOut = runArgs("unmount", dir)
	if code != exitError || !strings.Contains(errOut, "is not mounted") {
		t.Errorf("unmount of a plain directory: exit %d, stderr %q; want exit 1, 'is not mounted'", code, errOut)
	}
}

func TestRegistry(t *testing.T) {
	t.Setenv("AGENTFS_RUNTIME_DIR", filepath.Join(t.TempDir(), "run"))
	e := registryEntry{Mountpoint: "/mnt/my ws", Pid: 4242, Store: "/s", Ephemeral: true, Lower: "/p", Backstore: "hostfs"}
	if err := writeRegistry(e); err != nil {
		t.Fatal(err)
	}
	got, ok := readRegistry(e.Mountpoint)
	if !ok || got != e {
		t.Errorf("readRegistry = %+v, %v; want %+v", got, ok, e)
	}
	if _, ok := readRegistry("/mnt/my"); ok {
		t.Errorf("readRegistry(/mnt/my) found an entry")
	}
	removeRegistry(e.Mountpoint, 1) // not its pid: kept
	if _, ok := readRegistry(e.Mountpoint); !ok {
		t.Errorf("entry removed by another pid")
	}
	removeRegistry(e.Mountpoint, e.Pid)
	if _, ok := readRegistry(e.Mountpoint); ok {
		t.Errorf("entry still there after removeRegistry")
	}
}

func TestCleanupAfterDeadDaemon(t *testing.T) {
	t.Setenv("AGENTFS_RUNTIME_DIR", filepath.Join(t.TempDir(), "run"))
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(t.TempDir(), "stores"))
	store, err := makePrivateStore()
	if err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	var stderr bytes.Buffer
	for _, tc := range []struct {
		store    string
		pid      int
		wantGone bool
	}{
		{foreign, 0, false},         // not a private store: never deleted
		{store, os.Getpid(), false}, // daemon alive: left alone
		{store, 0, true},            // dead: deleted
	} {
		e := registryEntry{Mountpoint: "/mnt/x", Pid: tc.pid, Store: tc.store, Ephemeral: true}
		cleanupAfter(&stderr, e)
		_, err := os.Stat(tc.store)
		if gone := os.IsNotExist(err); gone != tc.wantGone {
			t.Errorf("cleanupAfter(store %s, pid %d): gone = %v, want %v", tc.store, tc.pid, gone, tc.wantGone)
		}
	}
	if !strings.Contains(stderr.String(), "not removing "+foreign) {
		t.Errorf("stderr %q does not explain why %s was kept", stderr.String(), foreign)
	}
}

func TestPrivateStoreAvoidsLower(t *testing.T) {
	root := t.TempDir()
	lower := filepath.Join(root, "home")
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(lower, ".cache", "agentfs"))
	_, err := makePrivateStore(lower, filepath.Join(root, "mnt"))
	if err == nil || !strings.Contains(err.Error(), "pass --store DIR outside them") {
		t.Errorf("makePrivateStore with the only base inside the lower: error = %v, want a refusal", err)
	}
	if _, err := os.Stat(lower); !os.IsNotExist(err) {
		t.Errorf("makePrivateStore created something inside the lower: %v", err)
	}
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(root, "stores"))
	store, err := makePrivateStore(lower, filepath.Join(root, "mnt"))
	if err != nil {
		t.Fatalf("makePrivateStore: %v", err)
	}
	if !isPrivateStore(store) {
		t.Errorf("isPrivateStore(%s) = false, want true", store)
	}
	if st, err := os.Stat(store); err != nil {
		t.Error(err)
	} else if got := st.Mode().Perm(); got != 0700 {
		t.Errorf("private store mode = %o, want 700", got)
	}
	// On ext4 the stores' directory spreads them over block groups
	// (backstore.SpreadChildren): it carries FS_TOPDIR_FL (lsattr's T).
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err == nil && sfs.Type == unix.EXT4_SUPER_MAGIC {
		fd, err := unix.Open(filepath.Join(root, "stores"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		const topdir = 0x00020000
		if flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS); err != nil || flags&topdir == 0 {
			t.Errorf("flags of the private stores' directory on ext4: %#x (%v), want FS_TOPDIR_FL", flags, err)
		}
	}
}

func TestInsideAny(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lower := filepath.Join(root, "lower")
	if err := os.Mkdir(lower, 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lower, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		lower:                                   true,
		filepath.Join(lower, "a", "b"):          true,
		filepath.Join(root, "link", "new", "x"): true, // through a symlink, not existing yet
		filepath.Join(root, "lowerx"):           false,
		root:                                    false,
	} {
		if got := insideAny(p, []string{lower}); got != want {
			t.Errorf("insideAny(%s, [%s]) = %v, want %v", p, lower, got, want)
		}
	}
}
