package activity

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProcCacheFollowsExecAndReuse(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 200, 200, "bash\x00", "1000")
	c := newProcCache(root)
	info := c.lookup(200)
	if info.pid != 200 || info.cmd != "bash" {
		t.Fatalf("lookup = %+v, want pid 200, bash", info)
	}
	// exec: same thread, same start time, new command line.
	fakeProc(t, root, 200, 200, "go\x00build\x00./...\x00", "1000")
	if got := c.lookup(200); got.cmd != "bash" {
		t.Errorf("lookup after exec = %q, want the cached bash (the writer rechecks)", got.cmd)
	}
	if got := c.recheck(200, info); got.cmd != "go build ./..." {
		t.Errorf("recheck after exec = %q, want go build ./...", got.cmd)
	}
	if got := c.lookup(200); got.cmd != "go build ./..." {
		t.Errorf("lookup after recheck = %q, want the new command", got.cmd)
	}
	// Exiting: an empty command line says nothing new.
	fakeProc(t, root, 200, 200, "", "1000")
	if got := c.recheck(200, c.lookup(200)); got.cmd != "go build ./..." {
		t.Errorf("recheck of an exiting process = %q, want what it was", got.cmd)
	}
	// Reuse: another process got the id; the entry keeps what it had.
	old := c.lookup(200)
	fakeProc(t, root, 200, 200, "sleep\x001\x00", "2000")
	if got := c.recheck(200, old); got.cmd != "go build ./..." {
		t.Errorf("recheck after reuse = %q, want the old command for the old entry", got.cmd)
	}
	if got := c.lookup(200); got.cmd != "sleep 1" {
		t.Errorf("lookup after reuse = %q, want the new process's command", got.cmd)
	}
	// Gone: nothing changes.
	if err := os.RemoveAll(filepath.Join(root, "200")); err != nil {
		t.Fatal(err)
	}
	if got := c.recheck(200, old); got.cmd != old.cmd {
		t.Errorf("recheck of a gone process = %q, want %q", got.cmd, old.cmd)
	}
	// A kernel thread has no command line: its name in brackets.
	fakeProc(t, root, 300, 300, "", "1")
	if got := c.lookup(300); got.cmd != "[worker) x]" {
		t.Errorf("lookup of a thread without command line = %q, want [worker) x]", got.cmd)
	}
}

func TestFormatCmdline(t *testing.T) {
	for in, want := range map[string]string{
		"ls\x00-la\x00":                     "ls -la",
		"sh\x00-c\x00it's\x00":              `sh -c 'it'\''s'`,
		"a\x00\x00b":                        "a '' b",
		"":                                  "",
		"/usr/bin/python3\x00x.py\x00--n=1": "/usr/bin/python3 x.py --n=1",
	} {
		if got := formatCmdline([]byte(in)); got != want {
			t.Errorf("formatCmdline(%q) = %q, want %q", in, got, want)
		}
	}
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'x'
	}
	if got := formatCmdline(long); len(got) > maxCommand+len("…") {
		t.Errorf("a 5000-byte command line is shown in %d bytes, want at most %d", len(got), maxCommand)
	}
}
