package integration

// Quotas (agentfs mount and run --max-files, --max-bytes, [limits] in
// the configuration): the operation that would cross a limit fails with
// EDQUOT, nothing written before is lost, the store stays consistent,
// the activity log says it once, status shows the usage.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/integration/harness"
)

// quotaStatus is the quota part of agentfs status --json.
type quotaStatus struct {
	BranchFiles int64 `json:"branch_files"`
	BranchBytes int64 `json:"branch_bytes"`
	MaxFiles    int64 `json:"max_files"`
	MaxBytes    int64 `json:"max_bytes"`
}

func quotaOf(t *testing.T, dir string) quotaStatus {
	t.Helper()
	var q quotaStatus
	statusJSON(t, dir, &q)
	return q
}

func wantEDQUOT(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("%s: %v, want EDQUOT (disk quota exceeded)", what, err)
	}
}

// quotaEvents returns the log's quota entries, once the log has the
// entry of a later change: a chmod of marker, a file the branch holds
// already (the log is written in batches; a chmod takes no new object).
func quotaEvents(t *testing.T, m *harness.Mount, marker string) []logEntry {
	t.Helper()
	if err := os.Chmod(m.Path(marker), 0o640); err != nil {
		t.Fatal(err)
	}
	var quota []logEntry
	if !harness.WaitFor(func() bool {
		quota = nil
		done := false
		for _, e := range readLog(t, m.Dir) {
			switch {
			case e.Op == "quota":
				quota = append(quota, e)
			case e.Op == "setattr" && e.Path == marker:
				done = true
			}
		}
		return done
	}) {
		t.Fatalf("the chmod of %s is not in the activity log", marker)
	}
	return quota
}

func TestQuotaBytes(t *testing.T) {
	const limit = 1 << 20
	big := strings.Repeat("B", 2<<20)
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("big", big), harness.LowerFile("small", "0123456789")),
		harness.WithArgs("--max-bytes", "1M"))
	q := quotaOf(t, m.Dir)
	if q.MaxBytes != limit || q.MaxFiles != 0 {
		t.Fatalf("status: max_bytes %d, max_files %d; want %d and 0", q.MaxBytes, q.MaxFiles, limit)
	}
	// Exactly at the limit.
	data := bytes.Repeat([]byte("abcdefgh"), limit/8)
	if err := os.WriteFile(m.Path("a"), data, 0o644); err != nil {
		t.Fatalf("writing exactly the limit: %v", err)
	}
	f, err := os.OpenFile(m.Path("a"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write([]byte("x"))
	wantEDQUOT(t, "one byte over", err)
	_, err = f.Write([]byte("y"))
	wantEDQUOT(t, "one more byte over", err)
	wantEDQUOT(t, "ftruncate one byte over", f.Truncate(limit+1))
	wantEDQUOT(t, "fallocate one byte over", unix.Fallocate(int(f.Fd()), 0, 0, limit+1))
	if err := f.Close(); err != nil {
		t.Errorf("close after EDQUOT: %v", err)
	}
	wantEDQUOT(t, "truncate of another file", os.Truncate(m.Path("small"), 20))
	_, err = os.OpenFile(m.Path("big"), os.O_WRONLY, 0)
	wantEDQUOT(t, "copy-up of a 2 MiB lower file", err)
	err = os.WriteFile(m.Path("b"), []byte("z"), 0o644)
	wantEDQUOT(t, "a write to a new file", err)
	// Nothing written is lost; the refused file is the lower one still.
	if got, err := os.ReadFile(m.Path("a")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("a after EDQUOT: %d bytes, %v; want its %d bytes intact", len(got), err, len(data))
	}
	if got := harness.ReadFile(t, m.Path("big")); got != big {
		t.Errorf("big after the refused copy-up: %d bytes, want the lower file's %d", len(got), len(big))
	}
	q = quotaOf(t, m.Dir)
	if q.BranchBytes != limit {
		t.Errorf("status: branch_bytes %d, want %d", q.BranchBytes, limit)
	}
	// One record for all the refusals above.
	ev := quotaEvents(t, m, "a")
	if len(ev) != 1 || ev[0].Attrs != "bytes" || ev[0].Path != "a" {
		t.Errorf("quota entries in the log: %+v, want one, bytes, on a", ev)
	}
	checkFsckClean(t, m.Dir)
	// Deleting brings the usage back under the limit.
	if err := os.Remove(m.Path("a")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path("b"), []byte("after the delete"), 0o644); err != nil {
		t.Errorf("a write after the delete: %v", err)
	}
	if q := quotaOf(t, m.Dir); q.BranchBytes != int64(len("after the delete")) {
		t.Errorf("status after the delete: branch_bytes %d, want %d", q.BranchBytes, len("after the delete"))
	}
}

// TestQuotaShortWrite: a write that would cross the limit writes what
// fits, as on a file system with quotas; the next fails.
func TestQuotaShortWrite(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--max-bytes", "4K"))
	f, err := os.Create(m.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	n, err := unix.Write(int(f.Fd()), make([]byte, 3000))
	if n != 4096-3000 || err != nil {
		t.Errorf("a write of 3000 with 1096 left: %d, %v; want a short write of 1096", n, err)
	}
	n, err = unix.Write(int(f.Fd()), []byte("x"))
	if n > 0 || !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("the write after: %d, %v; want EDQUOT", n, err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 4096 {
		t.Errorf("size: %v, %v; want 4096", st, err)
	}
}

func TestQuotaFiles(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("lower.txt", "lower"), harness.LowerFile("ldir/x", "x")),
		harness.WithArgs("--max-files", "5"))
	steps := []struct {
		what string
		do   func() error
	}{
		{"create", func() error { return os.WriteFile(m.Path("f"), []byte("f"), 0o644) }},
		{"mkdir", func() error { return os.Mkdir(m.Path("d"), 0o755) }},
		{"symlink", func() error { return os.Symlink("f", m.Path("s")) }},
		{"mknod (fifo)", func() error { return unix.Mkfifo(m.Path("p"), 0o644) }},
		{"copy-up of a lower file", func() error { return os.WriteFile(m.Path("lower.txt"), []byte("changed"), 0o644) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s within the limit: %v", s.what, err)
		}
	}
	if q := quotaOf(t, m.Dir); q.BranchFiles != 5 || q.MaxFiles != 5 {
		t.Errorf("status at the limit: %+v, want 5 files of 5", q)
	}
	if r := mustC(t, m.Dir, "status"); !strings.Contains(r.Stdout, "5 files of 5 allowed") {
		t.Errorf("agentfs status does not say '5 files of 5 allowed':\n%s", r.Stdout)
	}
	wantEDQUOT(t, "create", os.WriteFile(m.Path("g"), nil, 0o644))
	wantEDQUOT(t, "mkdir", os.Mkdir(m.Path("d2"), 0o755))
	wantEDQUOT(t, "symlink", os.Symlink("f", m.Path("s2")))
	wantEDQUOT(t, "mkfifo", unix.Mkfifo(m.Path("p2"), 0o644))
	wantEDQUOT(t, "create in a lower directory (copies it up)", os.WriteFile(m.Path("ldir/new"), nil, 0o644))
	wantEDQUOT(t, "chmod of a lower directory (copies it up)", os.Chmod(m.Path("ldir"), 0o700))
	// A hard link of an upper file takes no new object.
	if err := os.Link(m.Path("f"), m.Path("f2")); err != nil {
		t.Errorf("link at the limit: %v", err)
	}
	if got := harness.ReadFile(t, m.Path("lower.txt")); got != "changed" {
		t.Errorf("lower.txt = %q, want changed", got)
	}
	if ev := quotaEvents(t, m, "f"); len(ev) != 1 || ev[0].Attrs != "files" {
		t.Errorf("quota entries in the log: %+v, want one, files", ev)
	}
	checkFsckClean(t, m.Dir)
	if err := os.Remove(m.Path("p")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.Path("d2"), 0o755); err != nil {
		t.Errorf("mkdir after a delete: %v", err)
	}
	if q := quotaOf(t, m.Dir); q.BranchFiles != 5 {
		t.Errorf("status: %d files, want 5", q.BranchFiles)
	}
	// A delete is never refused, even one that copies a directory up
	// past the limit.
	if err := os.Remove(m.Path("ldir/x")); err != nil {
		t.Errorf("rm of a project file in a project directory at the limit: %v", err)
	}
	if q := quotaOf(t, m.Dir); q.BranchFiles != 6 {
		t.Errorf("status after the delete: %d files, want 6 (ldir copied up)", q.BranchFiles)
	}
	checkFsckClean(t, m.Dir)
}

// TestQuotaManyWriters: writers racing for the last bytes write the
// limit exactly between them, and each file holds what it was told.
func TestQuotaManyWriters(t *testing.T) {
	const limit = 8 << 20
	m := harness.NewMount(t, harness.WithArgs("--max-bytes", "8M"))
	const writers = 8
	written := make([]int64, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(m.Path(fmt.Sprintf("w%d", i)))
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			buf := bytes.Repeat([]byte{byte('a' + i)}, 48<<10)
			for {
				n, err := f.Write(buf)
				written[i] += int64(n)
				if err == nil && written[i] > limit {
					// Never fill the disk when the limit does not hold.
					t.Errorf("writer %d: %d bytes written, past the limit %d", i, written[i], limit)
					return
				}
				if err != nil {
					if !errors.Is(err, syscall.EDQUOT) {
						t.Errorf("writer %d: %v, want EDQUOT", i, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for i := range writers {
		got, err := os.ReadFile(m.Path(fmt.Sprintf("w%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != written[i] || !bytes.Equal(got, bytes.Repeat([]byte{byte('a' + i)}, len(got))) {
			t.Errorf("w%d: %d bytes read back, %d written", i, len(got), written[i])
		}
		total += written[i]
	}
	if total != limit {
		t.Errorf("written in all: %d, want the limit %d", total, limit)
	}
	if q := quotaOf(t, m.Dir); q.BranchBytes != limit {
		t.Errorf("status: branch_bytes %d, want %d", q.BranchBytes, limit)
	}
	checkFsckClean(t, m.Dir)
}

// TestQuotaSurvivesRemount: a kept store mounted again counts what its
// branch holds.
func TestQuotaSurvivesRemount(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithArgs("--max-bytes", "64K", "--max-files", "3"))
	if err := os.WriteFile(m.Path("a"), make([]byte, 40<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	m.Unmount()
	m.Mount()
	if q := quotaOf(t, m.Dir); q.BranchFiles != 2 || q.BranchBytes != 40<<10 {
		t.Errorf("status after remount: %+v, want 2 files and %d bytes", q, 40<<10)
	}
	err := os.WriteFile(m.Path("d/b"), make([]byte, 30<<10), 0o644)
	wantEDQUOT(t, "30K more with 24K left after remount", err)
	wantEDQUOT(t, "a fourth file after remount", os.WriteFile(m.Path("c"), nil, 0o644))
}

func TestQuotaBadInput(t *testing.T) {
	harness.RequireFUSE(t)
	lower := harness.NewLowerDir(t, harness.LowerFile("a", "a"))
	mp := harness.NewMountpoint(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-bytes", "12Q"}, "--max-bytes 12Q: not a size"},
		{[]string{"--max-bytes", "150%"}, "--max-bytes 150%: not a share"},
		{[]string{"--max-bytes", "-5"}, "--max-bytes -5: not a size"},
		{[]string{"--max-files", "many"}, "--max-files many: not a count"},
		{[]string{"--max-files", "-1"}, "--max-files -1: not a count"},
		{[]string{"--max-bytes", "1G", "--writeback-cache"}, "--writeback-cache cannot keep a byte limit"},
	} {
		r := harness.Run(t, append(append([]string{"mount", "--lower", lower}, tc.args...), mp)...)
		if r.Code != 2 || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("mount %v: want exit 2 and %q:\n%s", tc.args, tc.want, r)
		}
	}
	conf := harness.NewLowerDir(t, harness.LowerFile(".agentfs.conf", "[limits]\nmax-bytes = off\n"))
	r := harness.Run(t, "mount", "--lower", conf, mp)
	if r.Code == 0 || !strings.Contains(r.Stderr, ".agentfs.conf:2: max-bytes in [limits] is not the project's to set") {
		t.Errorf("mount with max-bytes = off in the project's file: want a refusal naming file and line:\n%s", r)
	}
}

// TestQuotaConfigAndRunDefaults: the configuration's limits apply to a
// mount; agentfs run has limits unless told otherwise.
func TestQuotaConfigAndRunDefaults(t *testing.T) {
	cfg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfg, "agentfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(cfg, "agentfs", "config"), "[limits]\nmax-files = 7\nmax-bytes = 2M\n")
	t.Setenv("XDG_CONFIG_HOME", cfg)
	m := harness.NewMount(t)
	if q := quotaOf(t, m.Dir); q.MaxFiles != 7 || q.MaxBytes != 2<<20 {
		t.Errorf("status of a mount with [limits] in the user's file: %+v, want 7 files and 2 MiB", q)
	}
	if err := os.Unsetenv("XDG_CONFIG_HOME"); err != nil {
		t.Fatal(err)
	}
	e := newRunEnv(t)
	r := e.agentfs("run", "--", harness.Bin(), "status", "--json")
	if r.Code != 0 {
		t.Fatalf("agentfs run: %s", r)
	}
	var q quotaStatus
	if err := json.Unmarshal([]byte(r.Stdout), &q); err != nil {
		t.Fatalf("status in the session: %v\n%s", err, r)
	}
	if q.MaxFiles != 300000 || q.MaxBytes <= 0 {
		t.Errorf("agentfs run's limits: %+v, want 300000 files and a byte limit", q)
	}
	r = e.agentfs("run", "--max-files", "5", "--", "sh", "-c", "touch f1 f2 f3 f4 f5 f6 2>&1; ls f* | wc -l")
	if !strings.Contains(r.Stdout, "Disk quota exceeded") {
		t.Errorf("agentfs run --max-files 5, touching 6 files: want 'Disk quota exceeded':\n%s", r)
	}
	// A runaway writer stops at the limit (8M asked: bounded, should the
	// limit not hold).
	r = e.agentfs("run", "--max-bytes", "1M", "--", "sh", "-c", "head -c 8M /dev/zero > big; echo exit=$?; stat -c size=%s big")
	if !strings.Contains(r.Output(), "Disk quota exceeded") || !strings.Contains(r.Stdout, "exit=1") || !strings.Contains(r.Stdout, "size=1048576") {
		t.Errorf("agentfs run --max-bytes 1M, writing 8M: want EDQUOT and a 1M file:\n%s", r)
	}
}

// TestQuotaWriterBesideReaders: a file opened for writing while
// read-only opens of it are passed through (direct I/O beside them)
// keeps the limit, and the readers see what it wrote; a shared mapping
// of a file opened for writing alone writes through.
func TestQuotaWriterBesideReaders(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--max-bytes", "8K"))
	if err := os.WriteFile(m.Path("r"), []byte("start"), 0o644); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(m.Path("r"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	w, err := os.OpenFile(m.Path("r"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var total int
	for {
		n, err := w.Write(bytes.Repeat([]byte("w"), 1000))
		total += n
		if err != nil {
			wantEDQUOT(t, "the write past 8K beside a reader", err)
			break
		}
		if total > 8192 {
			t.Fatalf("%d bytes written past the limit beside a passthrough reader", total)
		}
	}
	if total != 8192-len("start") {
		t.Errorf("written beside the reader: %d, want %d", total, 8192-len("start"))
	}
	got := make([]byte, 9000)
	n, err := reader.ReadAt(got, 0)
	if n != 8192 || string(got[:5]) != "start" || got[8191] != 'w' {
		t.Errorf("the reader reads %d bytes (%v), want the 8192 written", n, err)
	}

	if err := os.Remove(m.Path("r")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(m.Path("mapped"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("a shared writable mapping under a byte limit: %v", err)
	}
	copy(mem, "mapped")
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		t.Error(err)
	}
	if err := unix.Munmap(mem); err != nil {
		t.Error(err)
	}
	if got := harness.ReadFile(t, m.Path("mapped")); !strings.HasPrefix(got, "mapped") {
		t.Errorf("mapped file reads %q, want what the mapping wrote", got[:16])
	}
}
