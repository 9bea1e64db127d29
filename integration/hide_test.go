package integration

// Hidden project paths (--hide, [hide] of the configuration): the
// paths the patterns match do not exist in the view, by any route
// through the mount, for root and for another user; apply, export,
// diff and status honour them, on a mount and on an ended session.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
)

// secretMark is in every hidden file's contents and xattrs: no output
// of any route may contain it.
const secretMark = "LOWER-SECRET"

var hideArgs = []string{"--hide", ".env", "--hide", "*.pem", "--hide", "secrets/", "--hide", "/pub/config/prod.key"}

// hiddenPaths are the project paths hideArgs hide in hideLower (leak.txt
// by being a hard link of pub/.env).
var hiddenPaths = []string{"pub/.env", "pub/app/.env", "pub/secrets", "pub/secrets/token", "pub/certs/server.pem",
	"pub/leak.txt", "pub/config/prod.key"}

// hideLower makes a project with secrets among ordinary files, under
// pub/ where any user may write. Only root reaches the project itself
// (its parent directory is 0700): the mount is a user's only way in.
func hideLower(t *testing.T) string {
	t.Helper()
	all := harness.WithMode(0o777)
	dir := harness.NewLowerDir(t,
		harness.LowerDir("pub", all),
		harness.LowerFile("pub/.env", secretMark+" env", harness.WithXattr("user.note", secretMark+" xattr")),
		harness.LowerFile("pub/main.go", "package main"),
		harness.LowerDir("pub/app", all),
		harness.LowerFile("pub/app/.env", secretMark+" app env"),
		harness.LowerFile("pub/app/a.go", "package app"),
		harness.LowerDir("pub/secrets", all),
		harness.LowerFile("pub/secrets/token", secretMark+" token"),
		harness.LowerDir("pub/certs", all),
		harness.LowerFile("pub/certs/server.pem", secretMark+" pem"),
		harness.LowerFile("pub/certs/README", "certificates"),
		harness.LowerHardlink("pub/leak.txt", "pub/.env"),
		harness.LowerDir("pub/config", all),
		harness.LowerFile("pub/config/prod.key", secretMark+" prod key"),
		harness.LowerFile("pub/config/dev.conf", "dev"),
	)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	hideRoot = harness.Cred{Uid: 0, Gid: 0}
	hideUser = harness.Cred{Uid: userUID, Gid: userGID}
)

// noSecret fails the test when an output holds a hidden file's bytes.
func noSecret(t *testing.T, what string, res []harness.OpResult) {
	t.Helper()
	for _, r := range res {
		if strings.Contains(r.Out, secretMark) {
			t.Errorf("%s: %s %s gave a hidden file's contents: %q", what, r.Op, r.Errno, r.Out)
		}
	}
}

// wantErrno checks the errno of each result.
func wantErrno(t *testing.T, what string, ops []harness.Op, res []harness.OpResult, errno ...string) {
	t.Helper()
	for i, r := range res {
		if !slices.Contains(errno, r.Errno) {
			t.Errorf("%s: %s %s: %s, want %s", what, ops[i].Op, ops[i].Path, r, strings.Join(errno, " or "))
		}
	}
}

// runOps runs ops as c and checks that none reveals a secret.
func runOps(t *testing.T, c harness.Cred, what string, ops ...harness.Op) []harness.OpResult {
	t.Helper()
	res := harness.RunAs(t, c, ops...)
	noSecret(t, what, res)
	return res
}

// watchHidden watches the project's hidden files for any open or read
// (inotify): the daemon must never open one for a program.
func watchHidden(t *testing.T, lower string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	names := map[int]string{}
	for _, p := range hiddenPaths {
		wd, err := unix.InotifyAddWatch(fd, filepath.Join(lower, p), unix.IN_OPEN|unix.IN_ACCESS)
		if err != nil {
			t.Fatal(err)
		}
		names[wd] = p
	}
	return func() []string {
		var seen []string
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if n <= 0 || err != nil {
				return seen
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				seen = append(seen, names[int(ev.Wd)])
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// checkHiddenRoutes tries every route to the hidden files of the mount
// at dir (the mount itself, or a bind mount of a directory of it: base
// is the project path that dir shows) as c.
func checkHiddenRoutes(t *testing.T, c harness.Cred, dir, base string) {
	t.Helper()
	at := func(p string) string {
		return filepath.Join(dir, strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(base, "/")), "/"))
	}
	var ops []harness.Op
	for _, p := range hiddenPaths {
		if !strings.HasPrefix(p, base) {
			continue
		}
		ops = append(ops, harness.OpStat(at(p)), harness.OpRead(at(p)), harness.OpOpen(at(p), unix.O_RDONLY|unix.O_PATH),
			harness.OpGetxattr(at(p), "user.note"), harness.OpListxattr(at(p)),
			harness.OpLink(at(p), at(p)+".link"))
	}
	// .. tricks: through a sibling, through the directory itself, through
	// a hidden directory's parent.
	ops = append(ops, harness.OpRead(at("pub/app/../.env")), harness.OpRead(at("pub/certs/../app/.env")),
		harness.OpRead(at("pub/secrets/../.env")), harness.OpStat(at("pub/secrets/..")+"/secrets/token"),
		harness.OpRead(at("pub/config/../config/prod.key")))
	wantErrno(t, "hidden path as uid "+strconv.Itoa(int(c.Uid)), ops, runOps(t, c, "hidden routes", ops...), "ENOENT")

	// Listings show none of them; the visible files read as ever.
	list := []harness.Op{harness.OpNames(at("pub")), harness.OpNames(at("pub/app")), harness.OpNames(at("pub/certs")),
		harness.OpNames(at("pub/config")), harness.OpRead(at("pub/main.go")), harness.OpListxattr(at("pub"))}
	res := runOps(t, c, "listings", list...)
	for i, w := range []string{"app\ncerts\nconfig\nmain.go", "a.go", "README", "dev.conf", "package main"} {
		if res[i].Errno != "ok" || res[i].Out != w {
			t.Errorf("as uid %d: %s %s = %s, want ok %q", c.Uid, list[i].Op, list[i].Path, res[i], w)
		}
	}
}

// TestHideRoutes: the hidden paths of a mount are unreachable by every
// route through it, as root and as another user, and the daemon never
// opens a hidden file.
func TestHideRoutes(t *testing.T) {
	testenv.RequireRoot(t, "running the routes as root and as another user, and bind-mounting a directory of the mount,")
	lower := hideLower(t)
	m := harness.NewMount(t, harness.WithExistingLower(lower), harness.WithArgs(hideArgs...))
	opened := watchHidden(t, lower)
	pid := strconv.Itoa(m.Status.Pid)

	for _, c := range []harness.Cred{hideRoot, hideUser} {
		uid := "uid " + strconv.Itoa(int(c.Uid))
		checkHiddenRoutes(t, c, m.Dir, "")

		// Open by handle: the kernel offers only the nodes it holds, and
		// a hidden file never is one. Root may open by handle (its own
		// file first), a user may not.
		scan := harness.OpHandleScan(m.Path("pub/main.go"), m.Dir, 200)
		res := runOps(t, c, "open by handle as "+uid, scan)
		switch {
		case c.Uid == 0 && (res[0].Errno != "ok" || !strings.HasPrefix(res[0].Out, "package main") || !strings.Contains(res[0].Out, "package app")):
			t.Errorf("open by handle as root: %s, want its own file first and the other files the kernel holds (the route works)", res[0])
		case c.Uid != 0 && res[0].Errno != "EPERM":
			t.Errorf("open by handle as a user: %s, want EPERM (CAP_DAC_READ_SEARCH)", res[0])
		}

		// The daemon's descriptors: none is a hidden file (root reads
		// their links), and a user opens none, nor any path through one.
		ents, err := os.ReadDir("/proc/" + pid + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		var ops []harness.Op
		for _, e := range ents {
			fdp := "/proc/" + pid + "/fd/" + e.Name()
			// Never read a descriptor: one is /dev/fuse, which would take
			// the kernel's requests.
			ops = append(ops, harness.OpReadlink(fdp))
			if c.Uid != 0 {
				ops = append(ops, harness.OpOpen(fdp, unix.O_RDONLY|unix.O_NONBLOCK))
				for _, p := range hiddenPaths {
					ops = append(ops, harness.OpRead(fdp+"/"+p))
				}
			}
		}
		res = runOps(t, c, "the daemon's descriptors as "+uid, ops...)
		for i, r := range res {
			if ops[i].Op == "readlink" && r.Errno == "ok" {
				for _, p := range hiddenPaths {
					if r.Out == filepath.Join(lower, p) || strings.HasPrefix(r.Out, filepath.Join(lower, "pub/secrets")+"/") {
						t.Errorf("the daemon holds hidden %s open: %s -> %s", p, ops[i].Path, r.Out)
					}
				}
			}
			if c.Uid != 0 && r.Errno == "ok" {
				t.Errorf("as a user, %s %s: %s, want it refused (the daemon is root's)", ops[i].Op, ops[i].Path, r)
			}
		}

		// Renaming a parent directory keeps its hidden files hidden.
		ren := runOps(t, c, "rename", harness.OpRename(m.Path("pub/config"), m.Path("pub/cfg")),
			harness.OpStat(m.Path("pub/cfg/prod.key")), harness.OpNames(m.Path("pub/cfg")),
			harness.OpRename(m.Path("pub/cfg"), m.Path("pub/config")))
		if ren[0].Errno != "ok" || ren[1].Errno != "ENOENT" || ren[2].Out != "dev.conf" || ren[3].Errno != "ok" {
			t.Errorf("as %s: rename config, stat cfg/prod.key, list cfg, rename back: %v; want ok, ENOENT, dev.conf, ok", uid, ren)
		}

		// A program's own file at a hidden path is an ordinary file.
		own := runOps(t, c, "own file", harness.OpWrite(m.Path("pub/.env"), unix.O_CREAT|unix.O_EXCL, "mine"),
			harness.OpRead(m.Path("pub/.env")), harness.OpUnlink(m.Path("pub/.env")), harness.OpStat(m.Path("pub/.env")))
		if own[0].Errno != "ok" || own[1].Out != "mine" || own[2].Errno != "ok" || own[3].Errno != "ENOENT" {
			t.Errorf("as %s: create, read, remove its own pub/.env: %v; want ok, mine, ok, ENOENT", uid, own)
		}
	}

	// A bind mount of a directory of the mount shows no more.
	bind := harness.NewMountpoint(t)
	if err := unix.Mount(m.Path("pub"), bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting pub of the mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })
	for _, c := range []harness.Cred{hideRoot, hideUser} {
		checkHiddenRoutes(t, c, bind, "pub/")
	}

	if got := opened(); len(got) > 0 {
		t.Errorf("hidden files were opened or read in the project while programs used the mount: %v", got)
	}

	// The project changing under the mount: a new hidden file, and a
	// new hard link of a hidden one, made from outside.
	harness.WriteFile(t, filepath.Join(lower, "pub/new.pem"), secretMark+" new pem")
	if err := os.Link(filepath.Join(lower, "pub/secrets/token"), filepath.Join(lower, "pub/token.txt")); err != nil {
		t.Fatal(err)
	}
	m.AcceptLower() // reads every file of the project
	opened()
	for _, c := range []harness.Cred{hideRoot, hideUser} {
		ops := []harness.Op{harness.OpStat(m.Path("pub/new.pem")), harness.OpRead(m.Path("pub/new.pem")),
			harness.OpStat(m.Path("pub/token.txt")), harness.OpRead(m.Path("pub/token.txt"))}
		wantErrno(t, "changed project", ops, runOps(t, c, "changed project", ops...), "ENOENT")
		res := runOps(t, c, "changed project", harness.OpNames(m.Path("pub")))
		if res[0].Out != "app\ncerts\nconfig\nmain.go" {
			t.Errorf("pub after the project changed = %q, want the visible names only", res[0].Out)
		}
	}
	if got := opened(); len(got) > 0 {
		t.Errorf("hidden files were opened or read in the project while programs used the mount: %v", got)
	}

	// Branches and snapshots show them no more than the mount.
	if r := harness.Run(t, "snapshot", "create", "-C", m.Dir, "-m", "s"); r.Code != 0 {
		t.Fatalf("snapshot create:\n%s", r)
	}
	if r := harness.Run(t, "branch", "create", "-C", m.Dir, "b"); r.Code != 0 {
		t.Fatalf("branch create:\n%s", r)
	}
	for _, ref := range []string{"b", "main", "lower"} {
		to := filepath.Join(t.TempDir(), "x")
		if r := harness.Run(t, "export", "-C", m.Dir, ref, "--to", to); r.Code != 0 {
			t.Fatalf("export %s:\n%s", ref, r)
		}
		checkExportHides(t, to)
	}
	r := harness.RunCmd(t, execIn(m, "b", m.Dir, "cat", m.Path("pub/.env")), nil)
	if r.Code == 0 || strings.Contains(r.Output(), secretMark) {
		t.Errorf("cat pub/.env in branch b: %s, want it to fail (no such file)", r)
	}
}

// checkExportHides checks an exported tree: no hidden file but the
// branch's own ones (own), no secret.
func checkExportHides(t *testing.T, to string, own ...string) {
	t.Helper()
	err := filepath.Walk(to, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(to, p)
		for _, h := range hiddenPaths {
			if rel == h && !slices.Contains(own, rel) {
				t.Errorf("export %s holds hidden %s", to, rel)
			}
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), secretMark) {
				t.Errorf("export %s: %s holds a hidden file's contents", to, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hideStatus is the part of agentfs status --json about hiding.
type hideStatus struct {
	Hide []struct {
		Pattern string `json:"pattern"`
		From    string `json:"from"`
	} `json:"hide"`
}

// statusHide returns the hide patterns agentfs status --json lists, as
// "pattern from" lines.
func statusHide(t *testing.T, args ...string) []string {
	t.Helper()
	r := harness.Run(t, append([]string{"status", "--json"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("status:\n%s", r)
	}
	var st hideStatus
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	var out []string
	for _, p := range st.Hide {
		out = append(out, p.Pattern+" "+p.From)
	}
	return out
}

// TestHideApplyExportDiffStatus: status lists the patterns, diff marks
// the branch's own files at hidden paths, apply never changes a hidden
// project file and writes an own file at a hidden path only with
// --force, export omits the hidden project files.
func TestHideApplyExportDiffStatus(t *testing.T) {
	lower := hideLower(t)
	m := harness.NewMount(t, harness.WithExistingLower(lower), harness.WithArgs(hideArgs...))
	if got, want := statusHide(t, "-C", m.Dir), []string{".env flag", "*.pem flag", "secrets/ flag", "/pub/config/prod.key flag"}; !slices.Equal(got, want) {
		t.Errorf("status hide = %q, want %q", got, want)
	}
	if r := harness.Run(t, "status", "-C", m.Dir); !strings.Contains(r.Stdout, "hide:") || !strings.Contains(r.Stdout, "*.pem (--hide)") {
		t.Errorf("status does not list the hide patterns:\n%s", r)
	}
	harness.WriteFile(t, m.Path("pub/.env"), "mine")      // over the hidden project file
	harness.WriteFile(t, m.Path("pub/own.pem"), "my pem") // a hidden path, nothing in the project
	harness.WriteFile(t, m.Path("pub/main.go"), "package main // changed")
	if err := os.RemoveAll(m.Path("pub/app")); err != nil { // app/.env is hidden in it
		t.Fatal(err)
	}

	d := harness.Run(t, "diff", "-C", m.Dir)
	wantLines(t, "diff", d.Stdout, "A  pub/.env  (a hidden path: agentfs apply --force writes it)",
		"A  pub/own.pem  (a hidden path: agentfs apply --force writes it)", "M  pub/main.go", "D  pub/app/")
	dj := harness.Run(t, "diff", "-C", m.Dir, "--json")
	if !strings.Contains(dj.Stdout, `"hidden": true`) && !strings.Contains(dj.Stdout, `"hidden":true`) {
		t.Errorf("diff --json marks no change hidden:\n%s", dj)
	}

	r := harness.Run(t, "apply", "-C", m.Dir)
	if r.Code == 0 || !strings.Contains(r.Stderr, "at hidden paths") {
		t.Errorf("apply with changes at hidden paths: exit %d, want 1 naming them:\n%s", r.Code, r)
	}
	wantLines(t, "apply", r.Stdout, "hidden paths, not applied (agentfs status lists the hide patterns):")
	for _, p := range []string{"pub/.env", "pub/app/.env"} {
		if b, err := os.ReadFile(filepath.Join(lower, p)); err != nil || !strings.HasPrefix(string(b), secretMark) {
			t.Errorf("project %s after apply: %q, %v; want the hidden file unchanged", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(lower, "pub/own.pem")); !os.IsNotExist(err) {
		t.Errorf("project pub/own.pem after apply without --force: %v, want none", err)
	}
	if b, _ := os.ReadFile(filepath.Join(lower, "pub/main.go")); string(b) != "package main // changed" {
		t.Errorf("project pub/main.go after apply = %q, want the change applied", b)
	}
	r = harness.Run(t, "apply", "-C", m.Dir, "--force")
	if r.Code == 0 {
		t.Errorf("apply --force over a hidden project file: exit 0, want 1:\n%s", r)
	}
	if b, err := os.ReadFile(filepath.Join(lower, "pub/own.pem")); err != nil || string(b) != "my pem" {
		t.Errorf("project pub/own.pem after apply --force: %q, %v; want the branch's own file", b, err)
	}
	for _, p := range []string{"pub/.env", "pub/app/.env", "pub/leak.txt"} {
		if b, err := os.ReadFile(filepath.Join(lower, p)); err != nil || !strings.HasPrefix(string(b), secretMark) {
			t.Errorf("project %s after apply --force: %q, %v; want the hidden file unchanged", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(lower, "pub/app/a.go")); !os.IsNotExist(err) {
		t.Errorf("project pub/app/a.go after apply: %v, want it removed (its directory stays for the hidden .env)", err)
	}
	m.AcceptLower()

	to := filepath.Join(t.TempDir(), "x")
	if r := harness.Run(t, "export", "-C", m.Dir, "main", "--to", to); r.Code != 0 {
		t.Fatalf("export:\n%s", r)
	}
	checkExportHides(t, to, "pub/.env")
	if b, err := os.ReadFile(filepath.Join(to, "pub/.env")); err != nil || string(b) != "mine" {
		t.Errorf("exported pub/.env = %q, %v; want the branch's own file", b, err)
	}
}

// TestHideConfig: [hide] of the user's and the project's configuration
// files add up with --hide, and a project's "!" does not take back what
// the user's file hides.
func TestHideConfig(t *testing.T) {
	cfg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfg, "agentfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(cfg, "agentfs", "config"), "[hide]\npattern = .env\n")
	t.Setenv("XDG_CONFIG_HOME", cfg)
	lower := hideLower(t)
	harness.WriteFile(t, filepath.Join(lower, ".agentfs.conf"), "[hide]\npattern = !.env\npattern = !pub/.env\npattern = *.key\n")
	m := harness.NewMount(t, harness.WithExistingLower(lower), harness.WithArgs("--hide", "secrets/"))
	want := []string{".env user", "!.env project", "!pub/.env project", "*.key project", "secrets/ flag"}
	if got := statusHide(t, "-C", m.Dir); !slices.Equal(got, want) {
		t.Errorf("status hide = %q, want %q", got, want)
	}
	ops := []harness.Op{harness.OpRead(m.Path("pub/.env")), harness.OpRead(m.Path("pub/app/.env")),
		harness.OpRead(m.Path("pub/config/prod.key")), harness.OpRead(m.Path("pub/secrets/token"))}
	wantErrno(t, "configured hiding", ops, runOps(t, hideRoot, "configured hiding", ops...), "ENOENT")
	if b, err := os.ReadFile(m.Path("pub/certs/server.pem")); err != nil || !strings.HasPrefix(string(b), secretMark) {
		t.Errorf("pub/certs/server.pem (no pattern hides it here) = %q, %v; want it shown", b, err)
	}
	// A bad pattern is refused before anything is mounted.
	mp := harness.NewMountpoint(t)
	if r := harness.Run(t, "mount", "--lower", lower, "--hide", "[abc", mp); r.Code == 0 || !strings.Contains(r.Stderr, "--hide") {
		t.Errorf("mount --hide [abc: exit %d, want a usage error naming --hide:\n%s", r.Code, r)
	}
	// So are patterns that would hide nothing: a "." segment, and the
	// project's own absolute path in front (the error says what to
	// write).
	for pattern, want := range map[string]string{"./pub/.env": "relative to the project's root", filepath.Join(lower, "pub/.env"): `"/pub/.env"`} {
		r := harness.Run(t, "mount", "--lower", lower, "--hide", pattern, mp)
		if r.Code == 0 {
			harness.Run(t, "unmount", mp)
		}
		if r.Code == 0 || !strings.Contains(r.Stderr, "--hide") || !strings.Contains(r.Stderr, want) {
			t.Errorf("mount --hide %s: exit %d, want a usage error naming --hide and %s:\n%s", pattern, r.Code, want, r)
		}
	}
}

// TestHideSession: agentfs run --hide: the agent does not see the
// hidden files and may make its own; the session's store keeps the
// patterns, so that status, diff, export and apply of the ended
// session honour them.
func TestHideSession(t *testing.T) {
	e := newRunEnv(t)
	harness.WriteFile(t, filepath.Join(e.project, ".env"), secretMark+" env")
	if err := os.MkdirAll(filepath.Join(e.project, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(e.project, "secrets/token"), secretMark+" token")
	e.before = harness.SnapshotTree(e.project)
	agent := e.script("agent.sh", `set -e
test ! -e .env
test ! -e secrets
ls -a | grep -qv -e '^.env$' -e '^secrets$'
echo mine > .env
mkdir secrets && echo own > secrets/own.txt
cat .env
`)
	rec := filepath.Join(t.TempDir(), "rec")
	r := e.agentfs("run", "--hide", ".env", "--hide", "secrets/", "--record", rec, "--", agent)
	if r.Code != 0 || !strings.Contains(r.Stdout, "mine") || strings.Contains(r.Output(), secretMark) {
		t.Fatalf("agentfs run --hide: exit %d, want 0 with the agent's own .env:\n%s", r.Code, r)
	}
	// The record names no hidden path (the manifest lists every path
	// the record holds a blob of).
	manifest, err := os.ReadFile(filepath.Join(rec, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/.env", "/secrets", secretMark} {
		if strings.Contains(string(manifest), p) {
			t.Errorf("the record's manifest names %q:\n%s", p, manifest)
		}
	}
	id := sessionIDOf(t, r)
	st := e.agentfs("status", "-s", id, "--json")
	if !strings.Contains(st.Stdout, `"pattern": ".env"`) || !strings.Contains(st.Stdout, `"pattern": "secrets/"`) {
		t.Errorf("status -s of the ended session lacks the hide patterns:\n%s", st)
	}
	d := e.agentfs("diff", "-s", id)
	wantLines(t, "diff -s", d.Stdout, "A  .env  (a hidden path: agentfs apply --force writes it)")
	to := filepath.Join(t.TempDir(), "x")
	if x := e.agentfs("export", "-s", id, "main", "--to", to); x.Code != 0 {
		t.Fatalf("export -s:\n%s", x)
	}
	checkExportHides(t, to)
	y := filepath.Join(t.TempDir(), "y")
	if x := e.agentfs("export", "-s", id, "lower", "--to", y); x.Code != 0 {
		t.Fatalf("export -s lower:\n%s", x)
	}
	checkExportHides(t, y)
	a := e.agentfs("apply", "-s", id, "--force")
	if a.Code == 0 || !strings.Contains(a.Stdout, "apply never changes it") {
		t.Errorf("apply -s --force over hidden project files: exit %d, want 1 saying it never changes them:\n%s", a.Code, a)
	}
	e.checkProject() // nothing of the project changed
}

// TestHideSessionNonRoot: agentfs run --hide as user nobody (through a
// user namespace, with /dev/fuse usable by all in a private mount
// namespace of this test). The agent runs as the daemon's own user, yet
// in a user namespace of its own, nested in the daemon's: it may list
// /proc but follow no process's links there (fd, cwd, root) outside its
// namespace, so neither the daemon's descriptor of the project nor the
// working directory of agentfs run (the project itself) leads it to a
// hidden file.
func TestHideSessionNonRoot(t *testing.T) {
	harness.RequireFUSE(t)
	testenv.RequireRoot(t, "running agentfs as nobody with /dev/fuse bound in a private mount namespace")
	for _, tool := range []string{"setpriv", "unshare", "mknod"} {
		requireTool(t, tool)
	}
	const nobody = 65534
	usernsOK := exec.Command("setpriv", "--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups",
		"unshare", "--user", "--map-root-user", "--mount", "true").Run() == nil
	if !usernsOK {
		testenv.Skip(t, testenv.UserNamespaces, "agentfs run as nobody needs a user namespace")
	}
	project, state, scripts := harness.NewMountpoint(t), harness.NewMountpoint(t), harness.NewMountpoint(t)
	harness.WriteFile(t, filepath.Join(project, ".env"), secretMark+" env")
	harness.WriteFile(t, filepath.Join(project, "a.txt"), "hello\n")
	if err := os.MkdirAll(filepath.Join(project, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(project, "secrets/token"), secretMark+" token")
	for _, p := range []string{project, ".env", "a.txt", "secrets", "secrets/token", state} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(project, p)
		}
		if err := os.Lchown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	before := harness.SnapshotTree(project)
	bin := filepath.Join(scripts, "agentfs")
	copyAgentfs(t, bin)
	// Every process's descriptors, working directory and root: each
	// followed to a hidden file, by its project path.
	agent := filepath.Join(scripts, "agent.sh")
	harness.WriteFile(t, agent, `#!/bin/sh
seen=0
for p in /proc/[0-9]*; do
  case "$(cat $p/comm 2>/dev/null)" in agentfs|agentfs-core) seen=$((seen+1));; esac
  for fd in $p/fd/*; do
    for h in .env secrets/token; do cat "$fd/$h" 2>/dev/null; cat "$fd/`+strings.TrimPrefix(project, "/")+`/$h" 2>/dev/null; done
  done
  for h in .env secrets/token; do cat "$p/cwd/$h" "$p/root`+project+`/$h" 2>/dev/null; done
done
echo "AGENT saw $seen agentfs processes"
cat .env secrets/token 2>/dev/null
ls -a
exit 0
`)
	if err := os.Chmod(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	fdev := harness.NewMountpoint(t)
	asNobody := fmt.Sprintf("setpriv --reuid %d --regid %d --clear-groups env HOME=%s XDG_STATE_HOME=%s", nobody, nobody, state, state)
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`set -e
unshare --mount --propagation private sh -c 'mount -t tmpfs -o mode=755 agentfs-test %s && mknod -m 666 %s/fuse c 10 229 && mount --bind %s/fuse /dev/fuse && exec %s %s run --hide .env --hide secrets/ -- %s'`,
		fdev, fdev, fdev, asNobody, bin, agent))
	cmd.Dir = project // agent run's own working directory: the project itself
	r := harness.RunCmd(t, cmd, []string{"run as nobody --hide"})
	if r.Code != 0 || !strings.Contains(r.Stdout, "AGENT saw") || strings.Contains(r.Stdout, "AGENT saw 0 ") {
		t.Fatalf("agentfs run --hide as nobody: exit %d, want 0 with the agent's probe of the agentfs processes:\n%s", r.Code, r)
	}
	if strings.Contains(r.Output(), secretMark) {
		t.Errorf("the agent read a hidden file through /proc:\n%s", r)
	}
	if strings.Contains(r.Stdout, "\n.env\n") || strings.Contains(r.Stdout, "\nsecrets\n") {
		t.Errorf("the agent's ls -a lists a hidden file:\n%s", r.Stdout)
	}
	harness.AssertUnchanged(t, before, harness.SnapshotTree(project))
}
