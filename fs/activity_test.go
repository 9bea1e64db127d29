package fs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// recorder is an Activity that keeps the events.
type recorder struct {
	mu     sync.Mutex
	events []Event
	closes map[string]int // CloseWrite events by path
}

// closed waits until a CloseWrite event of path came (a guard against a
// hang, not a timing check).
func (r *recorder) closed(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.take(t)
		r.mu.Lock()
		n := r.closes[path]
		r.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CloseWrite event for %s", path)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *recorder) Record(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// take returns the events so far as "op path[ -> path2]" (with the
// attrs of a setattr) and forgets them. CloseWrite events come when
// the kernel gets round to the release, after close(2) returned: take
// leaves them out, and counts them in closes.
func (r *recorder) take(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.Class == CloseWrite {
			r.closes[e.Path]++
			continue
		}
		s := e.Op + " " + e.Path
		if e.Path2 != "" {
			s += " -> " + e.Path2
		}
		if e.Attrs != "" {
			s += " (" + e.Attrs + ")"
		}
		if e.Branch != "main" || e.Time.IsZero() || (e.Class != CloseWrite && e.Pid == 0) {
			t.Errorf("event %s: branch %q, time %v, pid %d: want main, a time and the caller", s, e.Branch, e.Time, e.Pid)
		}
		if want := eventClass(e.Op); e.Class != want {
			t.Errorf("event %s: class %d, want %d", s, e.Class, want)
		}
		out = append(out, s)
	}
	r.events = nil
	return out
}

func activityMount(t *testing.T, pt, reads bool) (*testMount, *recorder) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "old.txt"), "old")
	writeFile(t, filepath.Join(lower, "dir", "x"), "x")
	rec := &recorder{closes: map[string]int{}}
	m := mountForTest(t, lower, pt, func(o *Options) { o.Activity = rec; o.ActivityReads = reads })
	return m, rec
}

// writeString writes s to f and fails the test if it cannot.
func writeString(t *testing.T, f *os.File, s string) {
	t.Helper()
	if _, err := f.WriteString(s); err != nil {
		t.Fatalf("writing %q to %s: %v", s, f.Name(), err)
	}
}

func TestActivityEvents(t *testing.T) {
	for _, pt := range []bool{true, false} {
		t.Run(map[bool]string{true: "passthrough", false: "pagecache"}[pt], func(t *testing.T) {
			m, rec := activityMount(t, pt, false)
			p := func(name string) string { return filepath.Join(m.mnt, name) }
			check := func(what string, want ...string) {
				t.Helper()
				if got := rec.take(t); !slices.Equal(got, want) {
					t.Errorf("%s: events %q, want %q", what, got, want)
				}
			}
			if _, err := os.ReadFile(p("old.txt")); err != nil {
				t.Fatal(err)
			}
			if _, err := os.ReadDir(p("dir")); err != nil {
				t.Fatal(err)
			}
			check("reads without ActivityReads")

			f, err := os.Create(p("new.txt"))
			if err != nil {
				t.Fatal(err)
			}
			writeString(t, f, "one")
			writeString(t, f, "two") // writes of a new file are part of its create
			f.Close()
			check("create and write", "create new.txt")
			rec.closed(t, "new.txt")

			f, err = os.OpenFile(p("old.txt"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			writeString(t, f, "a")
			writeString(t, f, "b") // once per open file
			f.Close()
			check("append twice", "write old.txt")

			f, err = os.OpenFile(p("old.txt"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			var want []string // no write through the daemon
			if m.srv.Passthrough() {
				want = []string{"write old.txt"} // the kernel writes directly: logged at open
			}
			check("open for writing, no write", want...)

			if err := os.WriteFile(p("old.txt"), []byte("new"), 0644); err != nil { // O_TRUNC
				t.Fatal(err)
			}
			check("truncating open", "truncate old.txt")

			steps := []struct {
				do   func() error
				want string
			}{
				{func() error { return os.Rename(p("new.txt"), p("dir/moved.txt")) }, "rename new.txt -> dir/moved.txt"},
				{func() error {
					return unix.Renameat2(unix.AT_FDCWD, p("dir/moved.txt"), unix.AT_FDCWD, p("dir/x"), unix.RENAME_EXCHANGE)
				}, "rename dir/moved.txt -> dir/x (exchange)"},
				{func() error {
					return unix.Renameat2(unix.AT_FDCWD, p("dir/moved.txt"), unix.AT_FDCWD, p("dir/x"), unix.RENAME_EXCHANGE)
				}, "rename dir/moved.txt -> dir/x (exchange)"},
				{func() error { return os.Chmod(p("dir/moved.txt"), 0600) }, "setattr dir/moved.txt (mode)"},
				{func() error { return os.Truncate(p("dir/moved.txt"), 1) }, "setattr dir/moved.txt (size)"},
				{func() error { return os.Chtimes(p("dir/moved.txt"), time.Unix(1, 0), time.Unix(2, 0)) }, "setattr dir/moved.txt (atime,mtime)"},
				{func() error { return os.Mkdir(p("sub"), 0755) }, "mkdir sub"},
				{func() error { return os.Symlink("old.txt", p("sub/link")) }, "symlink sub/link"},
				{func() error { return os.Link(p("old.txt"), p("sub/hard")) }, "link old.txt -> sub/hard"},
				{func() error { return unix.Mknod(p("sub/fifo"), unix.S_IFIFO|0644, 0) }, "mknod sub/fifo"},
				{func() error { return unix.Setxattr(p("old.txt"), "user.k", []byte("v"), 0) }, "setxattr old.txt"},
				{func() error { return unix.Removexattr(p("old.txt"), "user.k") }, "removexattr old.txt"},
				{func() error { return os.Remove(p("sub/fifo")) }, "unlink sub/fifo"},
				{func() error { return os.RemoveAll(p("sub")) }, ""},
				{func() error { return os.Remove(p("dir/x")) }, "unlink dir/x"},
				{func() error { return os.Chmod(m.mnt, 0755) }, "setattr . (mode)"},
			}
			for _, s := range steps {
				if err := s.do(); err != nil {
					t.Fatalf("%s: %v", s.want, err)
				}
				got := rec.take(t)
				if s.want == "" {
					continue
				}
				if !slices.Equal(got, []string{s.want}) {
					t.Errorf("events %q, want [%s]", got, s.want)
				}
			}
			// Failed operations are not events.
			for _, f := range []struct {
				what string
				err  error
				want error
			}{
				{"remove missing", os.Remove(p("missing")), unix.ENOENT},
				{"mkdir dir", os.Mkdir(p("dir"), 0755), unix.EEXIST},
				{"rename missing other", os.Rename(p("missing"), p("other")), unix.ENOENT},
			} {
				if !errors.Is(f.err, f.want) {
					t.Errorf("%s: %v, want %v", f.what, f.err, f.want)
				}
			}
			check("failed operations")
		})
	}
}

func TestActivityCopyFileRange(t *testing.T) {
	m, rec := activityMount(t, false, false)
	src, err := os.Open(filepath.Join(m.mnt, "old.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(m.mnt, "dir", "x"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec.take(t)
	for range 2 {
		if _, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	dst.Close()
	if got, want := rec.take(t), []string{"copy_file_range old.txt -> dir/x"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q (once per destination file)", got, want)
	}
}

func TestActivityReads(t *testing.T) {
	m, rec := activityMount(t, false, true)
	if _, err := os.ReadFile(filepath.Join(m.mnt, "dir", "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(filepath.Join(m.mnt, "dir")); err != nil {
		t.Fatal(err)
	}
	// A file opened for reading and writing is read (an agent's
	// database, a file edited in place), whether or not it is written.
	f, err := os.OpenFile(filepath.Join(m.mnt, "old.txt"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// A lookup that finds nothing is an existence check too.
	if _, err := os.Stat(filepath.Join(m.mnt, "nothing.txt")); !os.IsNotExist(err) {
		t.Fatalf("stat nothing.txt: %v", err)
	}
	got := strings.Join(rec.take(t), "|")
	for _, want := range []string{"lookup dir", "lookup dir/x", "open dir/x", "readdir dir", "open old.txt", "lookup nothing.txt"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %s: no %q", got, want)
		}
	}
}
