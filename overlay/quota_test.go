package overlay

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// quotaEnv is newEnv with a view that has limits l.
func quotaEnv(t *testing.T, files map[string]string, l Limits) *env {
	t.Helper()
	e := newEnv(t, files)
	e.limits = l
	e.reopen()
	return e
}

func isQuota(err error) bool {
	var qe *QuotaError
	return errors.Is(err, unix.EDQUOT) && errors.As(err, &qe)
}

// create makes regular file p (its directory exists) and returns it open
// for writing.
func (e *env) create(p string) (*File, error) {
	e.t.Helper()
	dir, name := splitPath(p)
	n, f, _, err := e.view.Create(e.must(dir), name, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0644, Caller{})
	if err != nil {
		return nil, err
	}
	e.view.Forget(n, 1)
	return f, nil
}

func (e *env) usage() Usage {
	e.t.Helper()
	return e.view.Usage()
}

func TestQuotaFilesCreateKinds(t *testing.T) {
	e := quotaEnv(t, map[string]string{"lower.txt": "x"}, Limits{Files: 4})
	root := e.view.Root()
	f, err := e.create("a")
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	if _, _, err := e.view.Mkdir(root, "d", 0755, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(root, "s", "a", Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Mknod(root, "p", unix.S_IFIFO|0644, 0, Caller{}); err != nil {
		t.Fatal(err)
	}
	eq(t, "files at the limit", e.usage().Files, int64(4))
	// Exactly at the limit: every way of making one more object fails.
	if _, err := e.create("b"); !isQuota(err) {
		t.Errorf("create past the files limit: %v, want EDQUOT", err)
	}
	if _, _, err := e.view.Mkdir(root, "d2", 0755, Caller{}); !isQuota(err) {
		t.Errorf("mkdir past the files limit: %v, want EDQUOT", err)
	}
	if _, _, err := e.view.Symlink(root, "s2", "a", Caller{}); !isQuota(err) {
		t.Errorf("symlink past the files limit: %v, want EDQUOT", err)
	}
	if _, _, err := e.view.Mknod(root, "p2", unix.S_IFIFO|0644, 0, Caller{}); !isQuota(err) {
		t.Errorf("mknod past the files limit: %v, want EDQUOT", err)
	}
	if _, _, _, err := e.view.Tmpfile(root, unix.O_RDWR, 0644, Caller{}); !isQuota(err) {
		t.Errorf("O_TMPFILE past the files limit: %v, want EDQUOT", err)
	}
	// A copy-up makes an object: refused; the lower file is untouched.
	if _, err := e.view.Open(e.must("lower.txt"), unix.O_WRONLY); !isQuota(err) {
		t.Errorf("copy-up past the files limit: %v, want EDQUOT", err)
	}
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("lower.txt"), SetAttr{Mode: &mode}, nil); !isQuota(err) {
		t.Errorf("chmod (metacopy) past the files limit: %v, want EDQUOT", err)
	}
	// A hard link of an upper file makes no object.
	if _, err := e.view.Link(e.must("a"), root, "a2"); err != nil {
		t.Errorf("link of an upper file at the files limit: %v", err)
	}
	eq(t, "names after the refusals", strings.Join(e.names(""), " "), "a a2 d lower.txt p s")
	eq(t, "files after the refusals", e.usage().Files, int64(4))
	eq(t, "lower.txt", e.lowerContent("lower.txt"), "x")
	if p := problems(e.fsck(false)); len(p) != 0 {
		t.Errorf("fsck after EDQUOT: %v", p)
	}
	// A hard link keeps the object: deleting one name frees nothing;
	// deleting the last does.
	if err := e.view.Unlink(root, "a"); err != nil {
		t.Fatal(err)
	}
	eq(t, "files after unlinking one of two names", e.usage().Files, int64(4))
	if err := e.view.Unlink(root, "a2"); err != nil {
		t.Fatal(err)
	}
	eq(t, "files after unlinking the last name", e.usage().Files, int64(3))
	if _, err := e.view.Open(e.must("lower.txt"), unix.O_WRONLY); err != nil {
		t.Errorf("copy-up after a delete brought the usage under the limit: %v", err)
	}
	eq(t, "files after the copy-up", e.usage().Files, int64(4))
}

func TestQuotaFilesCountsDirectoriesCopiedUp(t *testing.T) {
	e := quotaEnv(t, map[string]string{"a/b/f": "x", "a/b/g": "y"}, Limits{Files: 1})
	// Creating in a/b copies up a and b: 3 objects with room for 1. The
	// operation fails whole: nothing is copied up.
	if _, err := e.create("a/b/new"); !isQuota(err) {
		t.Fatalf("create below two lower directories with room for 1: %v, want EDQUOT", err)
	}
	eq(t, "files", e.usage().Files, int64(0))
	if p := problems(e.fsck(false)); len(p) != 0 {
		t.Errorf("fsck after EDQUOT: %v", p)
	}
	eq(t, "names", strings.Join(e.names("a/b"), " "), "f g")
	// A delete is never refused, though it copies a and b up, past the
	// limit.
	if err := e.view.Unlink(e.must("a/b"), "f"); err != nil {
		t.Errorf("unlink of a lower file below two lower directories at the limit: %v", err)
	}
	eq(t, "files after the delete", e.usage().Files, int64(2))
	e.limits.Files = 3
	e.reopen()
	f, err := e.create("a/b/new")
	if err != nil {
		t.Fatalf("create with room for 1 more: %v", err)
	}
	release(t, f)
	eq(t, "files", e.usage().Files, int64(3))
	// Remounted, the usage is counted again from the entries.
	e.reopen()
	eq(t, "files after reopen", e.usage().Files, int64(3))
}

func TestQuotaBytesEdges(t *testing.T) {
	e := quotaEnv(t, nil, Limits{Bytes: 100})
	f, err := e.create("f")
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	writeAt(t, f, make([]byte, 100), 0) // exactly at the limit
	eq(t, "bytes at the limit", e.usage().Bytes, int64(100))
	if n, err := f.WriteAt([]byte{1}, 100); !isQuota(err) || n != 0 {
		t.Errorf("one byte over: %d written, %v; want 0, EDQUOT", n, err)
	}
	// Rewriting what is there grows nothing.
	writeAt(t, f, []byte("hello"), 10)
	if _, err := e.view.Setattr(f.n, SetAttr{Size: ptr(uint64(101))}, f); !isQuota(err) {
		t.Errorf("ftruncate one byte over: %v, want EDQUOT", err)
	}
	if err := f.Allocate(0, 0, 101); !isQuota(err) {
		t.Errorf("fallocate one byte over: %v, want EDQUOT", err)
	}
	if err := f.Allocate(unix.FALLOC_FL_KEEP_SIZE, 0, 4096); err != nil {
		t.Errorf("fallocate KEEP_SIZE: %v (the size stays)", err)
	}
	g, err := e.create("g")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := g.WriteAt([]byte("x"), 0); !isQuota(err) || n != 0 {
		t.Errorf("a write to a second file past the limit: %d, %v; want 0, EDQUOT", n, err)
	}
	// Shrinking frees: a short write fills up to the limit exactly.
	if _, err := e.view.Setattr(f.n, SetAttr{Size: ptr(uint64(60))}, f); err != nil {
		t.Fatal(err)
	}
	eq(t, "bytes after ftruncate to 60", e.usage().Bytes, int64(60))
	if n, err := g.WriteAt(make([]byte, 50), 0); err != nil || n != 40 {
		t.Errorf("a write of 50 with 40 left: %d, %v; want a short write of 40", n, err)
	}
	eq(t, "bytes after the short write", e.usage().Bytes, int64(100))
	release(t, g)
	// A write past the end leaves a hole: the apparent size counts.
	if err := e.view.Unlink(e.view.Root(), "g"); err != nil {
		t.Fatal(err)
	}
	eq(t, "bytes after unlink", e.usage().Bytes, int64(60))
	if n, err := f.WriteAt([]byte("y"), 99); err != nil || n != 1 {
		t.Errorf("a write at 99 (a hole before it): %d, %v", n, err)
	}
	eq(t, "bytes with a hole", e.usage().Bytes, int64(100))
	if p := problems(e.fsck(false)); len(p) != 0 {
		t.Errorf("fsck after EDQUOT: %v", p)
	}
	// The usage survives a remount.
	e.reopen()
	eq(t, "bytes after reopen", e.usage().Bytes, int64(100))
}

func ptr[T any](v T) *T { return &v }

func TestQuotaBytesCopyUp(t *testing.T) {
	big := strings.Repeat("b", 300)
	e := quotaEnv(t, map[string]string{"big": big, "small": "0123456789", "trunc": big}, Limits{Bytes: 200})
	if _, err := e.view.Open(e.must("big"), unix.O_WRONLY); !isQuota(err) {
		t.Errorf("copy-up of a 300-byte file with 200 allowed: %v, want EDQUOT", err)
	}
	eq(t, "bytes", e.usage().Bytes, int64(0))
	eq(t, "files", e.usage().Files, int64(0))
	eq(t, "big, read back", e.read("big"), big)
	f, err := e.view.Open(e.must("small"), unix.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "bytes after copying up 10", e.usage().Bytes, int64(10))
	release(t, f)
	// O_TRUNC copies nothing: a file bigger than the limit can be
	// rewritten.
	f, err = e.view.Open(e.must("trunc"), unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		t.Fatalf("O_TRUNC open of a file bigger than the limit: %v", err)
	}
	release(t, f)
	eq(t, "bytes after O_TRUNC", e.usage().Bytes, int64(10))
	// A metacopy holds no data.
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("big"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	eq(t, "bytes after chmod of big", e.usage().Bytes, int64(10))
	eq(t, "lower big", e.lowerContent("big"), big)
	if p := problems(e.fsck(false)); len(p) != 0 {
		t.Errorf("fsck after EDQUOT: %v", p)
	}
	e.reopen()
	eq(t, "bytes after reopen", e.usage().Bytes, int64(10))
	eq(t, "files after reopen", e.usage().Files, int64(3))
}

// TestQuotaManyWriters has writers race for the last bytes: together
// they write exactly the limit, each file holds what its writes said.
func TestQuotaManyWriters(t *testing.T) {
	const limit = 1<<20 + 123
	e := quotaEnv(t, nil, Limits{Bytes: limit})
	const writers = 8
	var wg sync.WaitGroup
	written := make([]int64, writers)
	files := make([]*File, writers)
	for i := range files {
		f, err := e.create(fmt.Sprintf("w%d", i))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	errs := make(chan error, writers)
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4000)
			for {
				n, err := f.WriteAt(buf, written[i])
				written[i] += int64(n)
				if err == nil && written[i] > limit {
					errs <- fmt.Errorf("%d bytes written, past the limit", written[i])
					return
				}
				if err != nil {
					if !isQuota(err) {
						errs <- err
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a writer failed with %v, want EDQUOT", err)
	}
	var total int64
	for i, f := range files {
		total += written[i]
		st, err := e.view.Getattr(f.n)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size != written[i] {
			t.Errorf("w%d: size %d, written %d", i, st.Size, written[i])
		}
		release(t, f)
	}
	eq(t, "written in all", total, int64(limit))
	eq(t, "bytes", e.usage().Bytes, int64(limit))
	e.reopen()
	eq(t, "bytes after reopen", e.usage().Bytes, int64(limit))
}

func TestQuotaReportedOnceUntilUsageGoesDown(t *testing.T) {
	e := quotaEnv(t, nil, Limits{Files: 1})
	f, err := e.create("a")
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	var reports []string
	for range 3 {
		_, err := e.create("b")
		if limit, ok := e.view.QuotaReport(err); ok {
			reports = append(reports, limit)
		}
	}
	eq(t, "reports of three refusals", strings.Join(reports, ","), "files")
	// A rename, and a thaw after a snapshot (the copy takes the place of
	// the object a snapshot shares), do not make the usage go down.
	if err := e.view.Rename(e.view.Root(), "a", e.view.Root(), "a2", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Snapshot("", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	e.write("a2", "thawed")
	_, err = e.create("b")
	if limit, ok := e.view.QuotaReport(err); ok {
		t.Errorf("a refusal after a rename and a thaw was reported again (%s)", limit)
	}
	if err := e.view.Unlink(e.view.Root(), "a2"); err != nil {
		t.Fatal(err)
	}
	f, err = e.create("a")
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	_, err = e.create("b")
	if limit, ok := e.view.QuotaReport(err); !ok || limit != "files" {
		t.Errorf("the first refusal after a delete: reported %v (%q), want a report", ok, limit)
	}
}

func TestQuotaOffCountsFilesAndBytesOnDemand(t *testing.T) {
	e := newEnv(t, map[string]string{"x": "12345"})
	e.write("x", "1234567")
	f, err := e.create("y")
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("abc"), 0)
	release(t, f)
	u := e.usage()
	eq(t, "files", u.Files, int64(2))
	eq(t, "bytes", u.Bytes, int64(10))
	eq(t, "counted", u.BytesCounted, false)
}

// TestQuotaSnapshotThawRestore: a snapshot shares the branch's files
// (they count once, for the branch); a write to a shared file thaws it
// (the copy replaces it: same count); a restore counts the branch again.
func TestQuotaSnapshotThawRestore(t *testing.T) {
	e := quotaEnv(t, nil, Limits{Files: 10, Bytes: 1000})
	f, err := e.create("a")
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, make([]byte, 300), 0)
	release(t, f)
	snap, err := e.view.Snapshot("", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	e.write("a", strings.Repeat("x", 500)) // thaws a, then O_TRUNC and 500 bytes
	f, err = e.create("b")
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, make([]byte, 400), 0)
	release(t, f)
	if u := e.usage(); u.Files != 2 || u.Bytes != 900 {
		t.Errorf("usage after the thaw and a new file: %+v, want 2 files, 900 bytes", u)
	}
	if _, err := e.view.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if u := e.usage(); u.Files != 1 || u.Bytes != 300 {
		t.Errorf("usage after restoring the snapshot: %+v, want 1 file, 300 bytes", u)
	}
}

// TestQuotaCopyFileRange: copy_file_range into a file is a write: short
// up to the limit, then EDQUOT.
func TestQuotaCopyFileRange(t *testing.T) {
	e := quotaEnv(t, map[string]string{"src": strings.Repeat("s", 500)}, Limits{Bytes: 300})
	src, err := e.view.Open(e.must("src"), unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, src)
	dst, err := e.create("dst")
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, dst)
	if n, err := src.CopyTo(0, dst, 0, 500); err != nil || n != 300 {
		t.Errorf("copy_file_range of 500 with 300 allowed: %d, %v; want a short copy of 300", n, err)
	}
	if n, err := src.CopyTo(300, dst, 300, 100); !isQuota(err) || n != 0 {
		t.Errorf("copy_file_range past the limit: %d, %v; want 0, EDQUOT", n, err)
	}
	eq(t, "bytes", e.usage().Bytes, int64(300))
}

// TestQuotaCountMatchesRecount: after writers, truncates, unlinks,
// renames, links and snapshots running at once, the running count is
// what a fresh count of the branch finds (a remount's).
func TestQuotaCountMatchesRecount(t *testing.T) {
	e := quotaEnv(t, map[string]string{"lower0": strings.Repeat("l", 3000), "lower1": "short"}, Limits{Files: 40, Bytes: 64 << 10})
	root := e.view.Root()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				name := fmt.Sprintf("f%d", (i*7+w)%12)
				n, _, err := e.view.Lookup(root, name)
				switch (i + w) % 7 {
				case 0, 1, 2:
					var f *File
					if err != nil {
						var nn *Node
						nn, f, _, err = e.view.Create(root, name, unix.O_CREAT|unix.O_RDWR, 0o644, Caller{})
						if err == nil {
							e.view.Forget(nn, 1)
						}
					} else {
						f, err = e.view.Open(n, unix.O_RDWR)
						e.view.Forget(n, 1)
					}
					if err != nil {
						continue
					}
					_, _ = f.WriteAt(make([]byte, 700*(i%5+1)), int64(300*(i%7)))
					if i%4 == 0 {
						_, _ = e.view.Setattr(f.n, SetAttr{Size: ptr(uint64(100 * (i % 9)))}, f)
					}
					_ = f.Release()
				case 3:
					if err == nil {
						e.view.Forget(n, 1)
					}
					_ = e.view.Unlink(root, name)
				case 4:
					if err == nil {
						e.view.Forget(n, 1)
					}
					_ = e.view.Rename(root, name, root, fmt.Sprintf("f%d", (i+5)%12), 0)
				case 5:
					if err == nil {
						_, _ = e.view.Link(n, root, fmt.Sprintf("l%d", i%6))
						e.view.Forget(n, 1)
					}
					if lo, _, err := e.view.Lookup(root, fmt.Sprintf("lower%d", i%2)); err == nil {
						if f, err := e.view.Open(lo, unix.O_WRONLY); err == nil {
							_ = f.Release()
						}
						e.view.Forget(lo, 1)
					}
				case 6:
					if err == nil {
						e.view.Forget(n, 1)
					}
					if i%20 == 6 {
						if _, err := e.view.Snapshot("", branch.KindManual); err != nil {
							t.Error(err)
						}
					}
					_ = e.view.Unlink(root, fmt.Sprintf("l%d", i%6))
				}
			}
		}()
	}
	wg.Wait()
	counted := e.usage()
	if counted.Bytes > 64<<10 || counted.Files > 40 {
		t.Errorf("usage %+v past the limits", counted)
	}
	e.reopen()
	if recount := e.usage(); recount != counted {
		t.Errorf("running count %+v, a fresh count %+v", counted, recount)
	}
	if p := problems(e.fsck(false)); len(p) != 0 {
		t.Errorf("fsck: %v", p)
	}
}
