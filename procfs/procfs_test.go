package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	line := "4242 (a (weird) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n"
	st, err := ParseStatComm([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "a (weird) name" || st.State != 'S' || st.Ppid != 17 || st.Start != 987654 {
		t.Errorf("ParseStatComm = %+v, want comm %q, state S, ppid 17, start 987654", st, "a (weird) name")
	}
	// The line may end at the start time.
	short := "1 (init) R 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55"
	if st, err := ParseStat([]byte(short)); err != nil || st.Start != 55 || st.State != 'R' {
		t.Errorf("ParseStat(%q) = %+v, %v; want start 55, state R", short, st, err)
	}
	for _, bad := range []string{"", "1 init S 0", "1 (x) S 0 1"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) succeeded, want an error", bad)
		}
	}
	b := []byte(line)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseStat(b) }); n != 0 {
		t.Errorf("ParseStat allocates %v times, want 0 (it runs on the FUSE path)", n)
	}
}

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.Ppid != os.Getppid() {
		t.Errorf("ppid = %d, want %d", st.Ppid, os.Getppid())
	}
	if st.Start == 0 || StartTime(os.Getpid()) != st.Start {
		t.Errorf("start = %d, StartTime = %d: want the same, not 0", st.Start, StartTime(os.Getpid()))
	}
	if Parent(os.Getpid()) != os.Getppid() {
		t.Errorf("Parent = %d, want %d", Parent(os.Getpid()), os.Getppid())
	}
}

func TestStatusAndFakeRoot(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "7")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tsh\nTgid:\t5\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 \nVmRSS:\t  1234 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := Root(root).Status(7, "Tgid", "Uid", "Groups", "VmRSS", "Missing")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"5", "1000\t1000\t1000\t1000", "4 24 27", "1234 kB", ""}
	if !slices.Equal(v, want) {
		t.Errorf("Status = %q, want %q", v, want)
	}
	ids, err := ParseIDs(v[2])
	if err != nil || !slices.Equal(ids, []uint32{4, 24, 27}) {
		t.Errorf("ParseIDs(%q) = %v, %v", v[2], ids, err)
	}
	if _, err := ParseIDs("4 x"); err == nil {
		t.Error("ParseIDs(\"4 x\") succeeded")
	}
	uid, err := Uid(os.Getpid())
	if err != nil || uid != uint32(os.Getuid()) {
		t.Errorf("Uid = %d, %v; want %d", uid, err, os.Getuid())
	}
	if _, err := Groups(os.Getpid()); err != nil {
		t.Errorf("Groups: %v", err)
	}
}

func TestCmdline(t *testing.T) {
	if got := SplitCmdline([]byte("ls\x00-l\x00a b\x00")); !slices.Equal(got, []string{"ls", "-l", "a b"}) {
		t.Errorf("SplitCmdline = %q", got)
	}
	if got := SplitCmdline(nil); got != nil {
		t.Errorf("SplitCmdline(nil) = %q, want nil", got)
	}
	args, err := Cmdline(os.Getpid())
	if err != nil || len(args) == 0 || args[0] != os.Args[0] {
		t.Errorf("Cmdline(self) = %q, %v; want it to start with %q", args, err, os.Args[0])
	}
	if CommandLine(-1) != "" {
		t.Error("CommandLine of no process is not empty")
	}
}

func TestMountinfo(t *testing.T) {
	line := `36 35 98:0 /root /mnt\040with\040space rw,noatime shared:1 master:2 - fuse.agentfs /home/a\134b rw`
	m, ok := ParseMountinfoLine(line)
	if !ok {
		t.Fatal("not parsed")
	}
	want := Mount{ID: 36, Parent: 35, Dev: "98:0", Root: "/root", Mountpoint: "/mnt with space", Options: "rw,noatime", FsType: "fuse.agentfs", Source: `/home/a\b`}
	if m != want {
		t.Errorf("ParseMountinfoLine = %+v, want %+v", m, want)
	}
	if _, ok := ParseMountinfoLine("36 35 98:0 /root /mnt rw"); ok {
		t.Error("a line without the separator parsed")
	}
	p := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(p, []byte("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:5 / /mnt rw - tmpfs tmpfs rw\n3 2 0:6 / /mnt rw - fuse.agentfs /p rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	top, ok, err := MountAt(p, "/mnt")
	if err != nil || !ok || top.FsType != "fuse.agentfs" {
		t.Errorf("MountAt(/mnt) = %+v, %v, %v; want the fuse.agentfs mount on top", top, ok, err)
	}
	if _, ok, _ := MountAt(p, "/none"); ok {
		t.Error("MountAt found a mount at /none")
	}
	if _, err := Mounts(MountinfoPath); err != nil {
		t.Errorf("reading this process's mount table: %v", err)
	}
}

func TestAliveAndWatch(t *testing.T) {
	if !Alive(os.Getpid()) || !SameProcess(os.Getpid(), StartTime(os.Getpid())) {
		t.Fatal("this process is not alive")
	}
	if SameProcess(os.Getpid(), StartTime(os.Getpid())+1) {
		t.Error("SameProcess accepts another start time")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := Watch(cmd.Process.Pid)
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the pidfd: %v", err)
		}
	}()
	if p.Wait(10 * time.Millisecond) {
		t.Fatal("Wait says sleep 30 exited at once")
	}
	if err := p.Signal(15); err != nil {
		t.Fatal(err)
	}
	// Killed but not reaped: a zombie is not alive.
	deadline := time.Now().Add(10 * time.Second)
	for Alive(cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if Alive(cmd.Process.Pid) {
		t.Error("a killed, unreaped process is still alive")
	}
	if !p.Wait(10 * time.Second) {
		t.Error("Wait did not see the exit")
	}
	if err := cmd.Wait(); err == nil {
		t.Error("sleep 30, killed, exited 0")
	}
	if Alive(0) || Alive(-1) {
		t.Error("pid 0 or -1 is alive")
	}
}

func TestIdentityMap(t *testing.T) {
	if !isIdentityMap("         0          0 4294967295\n") {
		t.Error("the initial namespace's map is not the identity")
	}
	if isIdentityMap("0 1000 1\n") {
		t.Error("a user namespace's map is the identity")
	}
	if _, err := MountNamespace(0); err != nil {
		t.Error(err)
	}
}
