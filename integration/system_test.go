package integration

// agentfs run --system: a scripted agent installs a .deb (built here
// with dpkg-deb), writes under /etc, /usr/local/bin, the home directory
// and /tmp, and edits the project, all in the session; the host stays
// byte for byte as it was (on every path the agent touched, and dpkg's
// database); diff -s lists every path; export -s gives the package's
// files; a restore to the pre-run snapshot while the agent runs takes
// the package away (dpkg inside agrees); apply -s takes only the path
// named. A second system session at the same time sees none of it. A
// normal user's system session (a user namespace), and its refusal
// where user namespaces are off.
//
// Nothing here walks / through the mount: diff reads the entries, and
// export is given the paths.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"golang.org/x/sys/unix"
)

// buildDeb builds a package named name with dpkg-deb: /usr/local/bin/NAME
// (a script that says hello) and /usr/share/NAME/data.
func buildDeb(t *testing.T, name string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	files := map[string]string{
		"DEBIAN/control":              fmt.Sprintf("Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: agentfs tests <t@example.com>\nDescription: a package of agentfs's tests\n", name),
		"usr/local/bin/" + name:       "#!/bin/sh\necho hello from " + name + "\n",
		"usr/share/" + name + "/data": "data of " + name + "\n",
	}
	for p, c := range files {
		full := filepath.Join(root, p)
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		must(t, os.WriteFile(full, []byte(c), 0o755))
	}
	deb := root + ".deb"
	if out, err := exec.Command("dpkg-deb", "--build", "--root-owner-group", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	return deb
}

// hostState records what the host has at paths (the hash of a file,
// "absent", or what else), to be compared later.
func hostState(t *testing.T, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		var st unix.Stat_t
		switch err := unix.Lstat(p, &st); {
		case err == unix.ENOENT:
			out[p] = "absent"
		case err != nil:
			out[p] = err.Error()
		case st.Mode&unix.S_IFMT == unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = fmt.Sprintf("file %o %d:%d %x", st.Mode, st.Uid, st.Gid, sha256.Sum256(b))
		default:
			out[p] = fmt.Sprintf("mode %o %d:%d", st.Mode, st.Uid, st.Gid)
		}
	}
	return out
}

// checkHost fails when a path of before has changed on the host.
func checkHost(t *testing.T, when string, before map[string]string) {
	t.Helper()
	var paths []string
	for p := range before {
		paths = append(paths, p)
	}
	now := hostState(t, paths)
	for p, was := range before {
		if now[p] != was {
			t.Errorf("%s: the host's %s changed: %s, was %s", when, p, now[p], was)
		}
	}
}

// TestRunSystem is the whole-system session of an agent that installs a
// package (see the file's comment).
func TestRunSystem(t *testing.T) {
	testenv.RequireRoot(t, "agentfs run --system as root (dpkg -i needs root)")
	e := newRunEnv(t)
	requireTool(t, "dpkg")
	requireTool(t, "dpkg-deb")
	tag := fmt.Sprintf("agentfs-test-%d", time.Now().UnixNano()%1_000_000_000)
	deb := buildDeb(t, tag)
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	rel := func(p string) string { return strings.TrimPrefix(p, "/") }
	etc, bin, extra := "/etc/"+tag, "/usr/local/bin/"+tag, "/usr/local/bin/"+tag+"-extra"
	share, dot, tmp := "/usr/share/"+tag, filepath.Join(home, "."+tag), "/tmp/"+tag
	after, second, fromExec := "/etc/"+tag+"-after", "/etc/"+tag+"-second", "/etc/"+tag+"-exec"
	host := hostState(t, []string{etc, bin, extra, share, dot, tmp, after, second, fromExec,
		"/var/lib/dpkg/status", "/var/lib/dpkg/info/" + tag + ".list", "/var/log/dpkg.log"})
	for _, p := range []string{etc, bin, extra, share, dot, tmp, after, second, fromExec} {
		if host[p] != "absent" {
			t.Fatalf("%s exists on the host before the test: %s", p, host[p])
		}
	}
	// The agent waits for the test through /dev/shm: live in the
	// session, where /tmp is the session's own.
	ready, goOn := "/dev/shm/"+tag+"-ready", "/dev/shm/"+tag+"-go"
	t.Cleanup(func() {
		for _, p := range []string{ready, goOn} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Error(err)
			}
		}
	})
	agent := e.script("system-agent.sh", fmt.Sprintf(`set -e
dpkg -i %[1]s >/dev/null
echo "AGENT ran: $(%[2]s)"
echo "AGENT dpkg: $(dpkg-query -W -f='${Status}' %[2]s)"
echo etc > %[3]s
echo extra > %[4]s
echo home > %[5]s
echo tmp > %[6]s
echo more >> a.txt
echo "AGENT reads: $(cat %[3]s %[4]s %[5]s %[6]s | tr '\n' ' ')"
test -r /proc/self/status && test -c /dev/null && test -d /run && echo "AGENT kernel filesystems live"
test -e %[7]s/agentfs/sessions || echo "AGENT sessions hidden"
touch %[8]s
while [ ! -e %[9]s ]; do sleep 0.05; done
# After the restore to the pre-run snapshot.
cd %[10]s
if dpkg-query -W %[2]s >/dev/null 2>&1; then echo "AGENT after: installed"; else echo "AGENT after: not installed"; fi
for f in %[3]s %[11]s %[4]s %[5]s %[6]s %[3]s-exec; do
	if [ -e "$f" ]; then echo "AGENT after: $f is there"; fi
done
if [ -e %[12]s ]; then echo "AGENT sees the second session's file"; fi
echo "AGENT after: a.txt=$(cat a.txt)"
echo again >> a.txt
echo after > %[13]s
`, deb, tag, etc, extra, dot, tmp, e.state, ready, goOn, e.project, bin, second, after))
	run := exec.Command(harness.Bin(), "run", "--system", "--", agent)
	run.Dir, run.Env = e.project, e.env()
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	must(t, run.Start())
	var runErr error
	runDone := make(chan struct{})
	go func() { runErr = run.Wait(); close(runDone) }()
	t.Cleanup(func() {
		if err := os.WriteFile(goOn, nil, 0o644); err != nil {
			t.Error(err)
		}
		select {
		case <-runDone:
		case <-time.After(60 * time.Second):
			_ = run.Process.Kill() // it may have ended just now
		}
	})
	if !harness.WaitFor(func() bool { _, err := os.Stat(ready); return err == nil }) {
		t.Fatalf("the agent did not get to its first stop:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	// Outside, while it runs: nothing changed.
	checkHost(t, "while the session runs", host)
	if out, err := exec.Command("dpkg-query", "-W", tag).CombinedOutput(); err == nil {
		t.Errorf("dpkg on the host knows the package the session installed:\n%s", out)
	}
	e.checkProject()
	var s runSessionInfo
	var kind string
	for _, l := range e.sessionsRaw() {
		s, kind = l.runSessionInfo, l.Kind
	}
	if kind != "system" || s.State != "running" || s.Project != "/" {
		t.Errorf("sessions: kind %q, state %q, project %q; want system, running, /", kind, s.State, s.Project)
	}
	if l := e.agentfs("sessions"); !strings.Contains(l.Stdout, "system") {
		t.Errorf("sessions does not say the kind:\n%s", l)
	}
	d := e.agentfs("diff", "-s", s.ID)
	wantLines(t, "diff -s of the running session", d.Stdout,
		"A  "+rel(etc), "A  "+rel(bin), "A  "+rel(extra), "A  "+rel(share)+"/", "A  "+rel(share)+"/data",
		"A  "+rel(dot), "A  "+rel(tmp), "M  var/lib/dpkg/status", "M  "+rel(e.project)+"/a.txt")
	// Export gives the package's files.
	exp := filepath.Join(t.TempDir(), "export")
	if x := e.agentfs("export", "-s", s.ID, "main", "--to", exp, bin, share, "/var/lib/dpkg/status"); x.Code != 0 {
		t.Fatalf("export -s of the session's system:\n%s", x)
	}
	if b, err := os.ReadFile(filepath.Join(exp, bin)); err != nil || string(b) != "#!/bin/sh\necho hello from "+tag+"\n" {
		t.Errorf("the export's %s: %q, %v", bin, b, err)
	}
	if b, err := os.ReadFile(filepath.Join(exp, share, "data")); err != nil || string(b) != "data of "+tag+"\n" {
		t.Errorf("the export's %s/data: %q, %v", share, b, err)
	}
	if b, err := os.ReadFile(filepath.Join(exp, "var/lib/dpkg/status")); err != nil || !strings.Contains(string(b), "Package: "+tag+"\n") {
		t.Errorf("the export's dpkg status has no package %s (%v)", tag, err)
	}
	if _, err := os.Stat(filepath.Join(exp, "etc")); !os.IsNotExist(err) {
		t.Errorf("the export holds etc, which was not asked: %v", err)
	}

	// agentfs exec -s runs a command in the session's system, as its
	// own command runs (and the agent's /proc, /dev, ... stay: the
	// binding drops the names of the root the kernel cached).
	if x := e.agentfs("exec", "-s", s.ID, "-b", "main", "--", "sh", "-c", "cat "+etc+" && echo exec > "+fromExec+" && test -c /dev/null && pwd"); x.Code != 0 || x.Stdout != "etc\n"+e.project+"\n" {
		t.Errorf("exec -s in the system session:\n%s", x)
	}
	checkHost(t, "after exec -s", host)

	// A second system session at the same time: its own system.
	r2 := e.agentfs("run", "--system", "--", "sh", "-c",
		fmt.Sprintf("test ! -e %s && ! dpkg-query -W %s >/dev/null 2>&1 && echo second > %s && cat %s", etc, tag, second, second))
	if r2.Code != 0 || r2.Stdout != "second\n" {
		t.Fatalf("a second system session while the first runs:\n%s", r2)
	}
	if d2 := e.agentfs("diff", "-s", sessionIDOf(t, r2)); d2.Stdout != "A  "+rel(second)+"\n" {
		t.Errorf("the second session's diff:\n%s", d2)
	}
	checkHost(t, "after the second session", host)

	// A restore to the pre-run snapshot while the agent runs: the
	// package is gone, and dpkg inside says so.
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 {
		t.Fatalf("restore -s %s %s:\n%s", s.ID, s.PreRun, r)
	}
	must(t, os.WriteFile(goOn, nil, 0o644))
	select {
	case <-runDone:
		if runErr != nil {
			t.Fatalf("agentfs run --system: %v\nstdout:\n%s\nstderr:\n%s", runErr, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not end:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	out := stdout.String()
	wantLines(t, "the agent's output", out,
		"AGENT ran: hello from "+tag, "AGENT dpkg: install ok installed", "AGENT reads: etc extra home tmp",
		"AGENT kernel filesystems live", "AGENT sessions hidden",
		"AGENT after: not installed", "AGENT after: a.txt=hello")
	for _, bad := range []string{"is there", "AGENT sees the second", "AGENT after: installed"} {
		if strings.Contains(out, bad) {
			t.Errorf("the agent's output says %q:\n%s", bad, out)
		}
	}
	checkHost(t, "after the session", host)
	e.checkProject()
	if d := e.agentfs("diff", "-s", s.ID); d.Stdout != "A  "+rel(after)+"\nM  "+rel(e.project)+"/a.txt\n" {
		t.Errorf("diff -s after the restore and the agent's end:\n%s", d)
	}

	// apply takes only the paths named, and needs them.
	assertRefused(t, e.agentfs("apply", "-s", s.ID), refusal{1, "apply writes only the paths named"}, "")
	checkHost(t, "after apply without paths", host)
	if a := e.agentfs("apply", "-s", s.ID, e.project); a.Code != 0 {
		t.Fatalf("apply -s %s %s:\n%s", s.ID, e.project, a)
	}
	if b, err := os.ReadFile(filepath.Join(e.project, "a.txt")); err != nil || string(b) != "hello\nagain\n" {
		t.Errorf("the project's a.txt after apply: %q, %v", b, err)
	}
	checkHost(t, "after apply of the project", host)
	if d := e.agentfs("diff", "-s", s.ID); d.Stdout != "A  "+rel(after)+"\n" {
		t.Errorf("diff -s after apply of the project:\n%s", d)
	}
	// The project changed by the apply alone: a.txt.
	must(t, os.WriteFile(filepath.Join(e.project, "a.txt"), []byte("hello\n"), 0o644))
	must(t, os.Chtimes(filepath.Join(e.project, "a.txt"), time.Now(), time.Now()))
	e.before = harness.SnapshotTree(e.project)
}

// sessionsRaw is agentfs sessions --json with each session's kind.
func (e *runEnv) sessionsRaw() []struct {
	runSessionInfo
	Kind string `json:"kind"`
} {
	e.t.Helper()
	r := e.agentfs("sessions", "--json")
	var out struct {
		Sessions []struct {
			runSessionInfo
			Kind string `json:"kind"`
		} `json:"sessions"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &out) != nil {
		e.t.Fatalf("agentfs sessions --json:\n%s", r)
	}
	return out.Sessions
}

// TestRunSystemNonRoot: a normal user's system session runs in a user
// namespace: what it writes in its home lands in the session, /etc
// stays the host's (the user cannot write it); where user namespaces
// are off, agentfs run --system says so.
func TestRunSystemNonRoot(t *testing.T) {
	harness.RequireFUSE(t)
	for _, tool := range []string{"setpriv", "unshare", "mknod"} {
		requireTool(t, tool)
	}
	testenv.RequireRoot(t, "the test makes /dev/fuse usable by all in a namespace of its own")
	const nobody = 65534
	state := harness.NewMountpoint(t)
	must(t, os.Lchown(state, nobody, nobody))
	scripts := harness.NewMountpoint(t)
	bin := filepath.Join(scripts, "agentfs")
	copyAgentfs(t, bin)
	// A FUSE device node usable by all, bound over /dev/fuse in the
	// namespaces of the runs below only.
	fuse := filepath.Join(scripts, "fuse")
	must(t, unix.Mknod(fuse, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 229))))
	must(t, os.Chmod(fuse, 0o666))
	dot := filepath.Join(state, ".agentfs-test-home")
	etc := fmt.Sprintf("/etc/agentfs-test-%d", time.Now().UnixNano()%1_000_000_000)
	host := hostState(t, []string{dot, etc})
	asNobody := fmt.Sprintf("setpriv --reuid %d --regid %d --clear-groups env HOME=%s XDG_STATE_HOME=%s %s", nobody, nobody, state, state, bin)
	agent := fmt.Sprintf(`echo "AGENT uid=$(id -u)"; echo home > %s; echo "AGENT home=$(cat %s)"; if echo x > %s 2>/dev/null; then echo "AGENT wrote /etc"; else echo "AGENT /etc refused"; fi`, dot, dot, etc)
	usernsOK := exec.Command("setpriv", "--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups",
		"unshare", "--user", "--map-root-user", "--mount", "true").Run() == nil

	// 1. Where nobody may make user namespaces: a system session.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount --bind %s /dev/fuse && cd %s && exec %s run --system -- sh -c '%s'", fuse, state, asNobody, agent))
	r := harness.RunCmd(t, cmd, []string{"run --system as nobody"})
	if !usernsOK {
		testenv.Reduced(t, testenv.UserNamespaces, "nobody may not make a user namespace here: only the refusal is checked")
		assertRefused(t, r, refusal{1, "needs a user namespace"}, "")
	} else {
		if r.Code != 0 {
			t.Fatalf("agentfs run --system as nobody:\n%s", r)
		}
		wantLines(t, "the agent's output", r.Stdout, "AGENT uid=65534", "AGENT home=home", "AGENT /etc refused")
		id := sessionIDOf(t, r)
		l := harness.RunCmd(t, exec.Command("sh", "-c", asNobody+" sessions --json"), []string{"sessions --json"})
		if !strings.Contains(l.Stdout, `"kind": "system"`) || !strings.Contains(l.Stdout, `"user_namespace": true`) {
			t.Errorf("sessions --json as nobody does not say system and user namespace:\n%s", l)
		}
		d := harness.RunCmd(t, exec.Command("sh", "-c", asNobody+" diff -s "+id), []string{"diff -s"})
		wantLines(t, "diff -s of nobody's system session", d.Stdout, "A  "+strings.TrimPrefix(dot, "/"))
	}
	checkHost(t, "after nobody's system session", host)

	// 2. Where user namespaces are off (user.max_user_namespaces=0 in a
	// user namespace of this test's, which maps root and nobody): the
	// refusal says so, and names the setting.
	cmd = exec.Command("sh", "-c", fmt.Sprintf(`set -e
echo 0 > /proc/sys/user/max_user_namespaces
mount --bind %s /dev/fuse
cd %s
exec %s run --system -- sh -c '%s'`, fuse, state, asNobody, agent))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: nobody, HostID: nobody, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: nobody, HostID: nobody, Size: 1}},
		GidMappingsEnableSetgroups: true,
	}
	r = harness.RunCmd(t, cmd, []string{"run --system as nobody, user namespaces off"})
	assertRefused(t, r, refusal{1, "needs a user namespace"}, "")
	if !strings.Contains(r.Output(), "user.max_user_namespaces=0") || strings.Contains(r.Output(), "no space left on device") {
		t.Errorf("the refusal does not name the setting that forbids user namespaces, or blames the disk:\n%s", r)
	}
	if strings.Contains(r.Stdout, "AGENT") {
		t.Errorf("the agent ran:\n%s", r)
	}
	checkHost(t, "after the refusal", host)
}

// TestRunSystemSupervise: a rewind of a supervised system session stops
// the agent, restores the system (the file it wrote under /etc is gone)
// and starts it again in the session's view, with the kernel's
// filesystems live.
func TestRunSystemSupervise(t *testing.T) {
	testenv.RequireRoot(t, "agentfs run --system --supervise writes /etc in the session")
	e := newRunEnv(t)
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		testenv.Skip(t, testenv.DevShmTmpfs, "no /dev/shm: %v", err)
	}
	// What the agent reports goes through /dev/shm, live in the session.
	out, err := os.MkdirTemp("/dev/shm", "agentfs-test-")
	must(t, err)
	t.Cleanup(func() {
		if err := os.RemoveAll(out); err != nil {
			t.Error(err)
		}
	})
	etc := "/etc/" + filepath.Base(out)
	host := hostState(t, []string{etc})
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
if [ -e %s ]; then seen=yes; else seen=no; fi
echo "start ${AGENTFS_RELAUNCH:-0} etc=$seen" >> $out/starts
echo written > %s
while [ ! -e $out/quit ]; do sleep 0.05; done
exit 7
`, out, etc, etc))
	run, output := startRun(t, e, "--system", "--supervise", "--stop-grace", "2s", "--", agent)
	s := rewindSupervised(t, e, out, output)
	if got := lines(filepath.Join(out, "starts")); got[0] != "start 0 etc=no" || got[1] != "start 1 etc=no" {
		t.Errorf("the agent's starts: %q; want it to find no %s either time", got, etc)
	}
	must(t, os.WriteFile(filepath.Join(out, "quit"), nil, 0o644))
	if code := waitCode(t, run); code != 7 {
		t.Errorf("agentfs run --system --supervise exited %d, want the agent's 7\n%s", code, output)
	}
	checkHost(t, "after the supervised system session", host)
	if d := e.agentfs("diff", "-s", s.ID); d.Stdout != "A  "+strings.TrimPrefix(etc, "/")+"\n" {
		t.Errorf("diff -s of the supervised system session:\n%s", d)
	}
}

// TestRunSystemRecord: run --system --record writes the record of the
// system session (its target on the host, outside the mount): the file
// the command wrote under /etc is in it, absent before and there after.
func TestRunSystemRecord(t *testing.T) {
	testenv.RequireRoot(t, "agentfs run --system writes /etc in the session")
	e := newRunEnv(t)
	etc := fmt.Sprintf("/etc/agentfs-test-%d", time.Now().UnixNano()%1_000_000_000)
	host := hostState(t, []string{etc})
	dir := filepath.Join(t.TempDir(), "record")
	r := e.agentfs("run", "--system", "--record", dir, "--", "sh", "-c", "echo recorded > "+etc)
	if r.Code != 0 || !strings.Contains(r.Stderr, "the record of session") {
		t.Fatalf("agentfs run --system --record:\n%s", r)
	}
	checkHost(t, "after the recorded system session", host)
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	must(t, err)
	var m struct {
		Files []struct {
			Path   string `json:"path"`
			Before struct {
				Exists bool `json:"exists"`
			} `json:"before"`
			After struct {
				Exists bool `json:"exists"`
			} `json:"after"`
		} `json:"files"`
	}
	must(t, json.Unmarshal(b, &m))
	found := false
	for _, f := range m.Files {
		if f.Path == etc {
			found = true
			if f.Before.Exists || !f.After.Exists {
				t.Errorf("the record of %s: before exists %v, after exists %v; want false, true", etc, f.Before.Exists, f.After.Exists)
			}
		}
	}
	if !found {
		t.Errorf("the record has no %s:\n%s", etc, b)
	}
}

// TestRunSystemBranches: inside a system session, agentfs exec -b runs
// a command in another branch of the session's system (its own root, the
// kernel's filesystems live), and agentfs tournament runs candidates in
// branches and picks the one that passes; the session's own view and
// the host see none of the branches' files.
func TestRunSystemBranches(t *testing.T) {
	testenv.RequireRoot(t, "branch mounts (agentfs exec -b) need root")
	e := newRunEnv(t)
	tag := fmt.Sprintf("agentfs-test-%d", time.Now().UnixNano()%1_000_000_000)
	main, inBranch, win, lose := "/etc/"+tag+"-main", "/etc/"+tag+"-branch", "/etc/"+tag+"-win", "/etc/"+tag+"-lose"
	host := hostState(t, []string{main, inBranch, win, lose})
	bin := harness.Bin()
	agent := e.script("branches.sh", fmt.Sprintf(`set -e
echo main > %[2]s
%[1]s branch create b2 >/dev/null
%[1]s exec -b b2 -- sh -c 'echo "BRANCH sees $(cat %[2]s)"; echo branch > %[3]s; test -c /dev/null && test -r /proc/self/status && echo "BRANCH kernel filesystems live"'
if [ -e %[3]s ]; then echo "MAIN sees the branch's file"; fi
test -c /dev/null && echo "MAIN kernel filesystems live"
snap=$(%[1]s snapshot create -m base | tail -n 1)
%[1]s tournament --from "$snap" --test 'test -e %[4]s' -- 'echo no > %[5]s' 'echo yes > %[4]s' > /dev/null
echo "TOURNAMENT winner $(%[1]s tag | grep -c winner)"
if [ -e %[4]s ] || [ -e %[5]s ]; then echo "MAIN sees a candidate's file"; fi
`, bin, main, inBranch, win, lose))
	r := e.agentfs("run", "--system", "--", agent)
	if r.Code != 0 {
		t.Fatalf("agentfs run --system with branches inside:\n%s", r)
	}
	wantLines(t, "the agent's output", r.Stdout, "BRANCH sees main", "BRANCH kernel filesystems live",
		"MAIN kernel filesystems live", "TOURNAMENT winner 1")
	if strings.Contains(r.Stdout, "MAIN sees") {
		t.Errorf("the session's view shows a branch's files:\n%s", r.Stdout)
	}
	id := sessionIDOf(t, r)
	if d := e.agentfs("diff", "-s", id, "lower", "b2"); !strings.Contains(d.Stdout, "A  "+strings.TrimPrefix(inBranch, "/")+"\n") {
		t.Errorf("diff -s lower b2 does not list the branch's file:\n%s", d)
	}
	checkHost(t, "after the system session's branches", host)
}

// TestRunSystemOtherFilesystems: a filesystem mounted under / (here a
// tmpfs in the test's directory) is seen through the view, its files'
// inode numbers mapped so that they cannot collide with the root
// filesystem's (at or above 1<<62), the same in stat and in listings
// (d_ino), and what the command writes there lands in the session.
func TestRunSystemOtherFilesystems(t *testing.T) {
	testenv.RequireRoot(t, "mounting a tmpfs")
	e := newRunEnv(t)
	mnt := filepath.Join(t.TempDir(), "other")
	must(t, os.Mkdir(mnt, 0o755))
	must(t, unix.Mount("agentfs-test", mnt, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	harness.WriteFile(t, filepath.Join(mnt, "f"), "on tmpfs\n")
	host := hostState(t, []string{filepath.Join(mnt, "f"), filepath.Join(mnt, "new")})
	r := e.agentfs("run", "--system", "--", "sh", "-c", fmt.Sprintf(
		`cat %[1]s/f; echo "INO $(stat -c %%i %[1]s/f) $(ls -i %[1]s | awk '$2 == "f" {print $1}')"; echo new > %[1]s/new`, mnt))
	if r.Code != 0 {
		t.Fatalf("agentfs run --system:\n%s", r)
	}
	wantLines(t, "the command's output", r.Stdout, "on tmpfs")
	var st, dino uint64
	if _, err := fmt.Sscanf(r.Stdout[strings.Index(r.Stdout, "INO "):], "INO %d %d", &st, &dino); err != nil {
		t.Fatalf("the command's output: %v\n%s", err, r.Stdout)
	}
	if st < 1<<62 || st >= 1<<63 || dino != st {
		t.Errorf("a file of the tmpfs shows st_ino %#x and d_ino %#x; want one number from 1<<62 on, below 1<<63", st, dino)
	}
	checkHost(t, "after the session", host)
	if d := e.agentfs("diff", "-s", sessionIDOf(t, r)); d.Stdout != "A  "+strings.TrimPrefix(mnt, "/")+"/new\n" {
		t.Errorf("diff -s:\n%s", d)
	}
}
