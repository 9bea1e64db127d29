package main

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// A workload is one row of the table. Only run is timed; prepare and
// finish run just before and after it, outside the timed region.
type workload struct {
	name  string              // for --only
	title func(*bench) string // for the table
	// fresh: the workload changes the tree, so every run gets a new
	// view (a new mount; for native, a copy of nativeCopy's paths).
	fresh      bool
	nativeCopy func(*tree) []string
	// needsRoot: skipped (with a note) when not run as root.
	needsRoot bool
	prepare   func(ctx context.Context, r *runEnv) error
	// warm reads what run reads, after a fresh view's page cache drop.
	warm func(r *runEnv) error
	// fill names a file (relative to the tree) whose pages the shared
	// views read into the page cache together before the warm-up, a
	// chunk of each in turn (fillTogether): no view's copy is cached
	// from worse memory than another's.
	fill string
	// run does the timed work and returns a short description of what
	// it saw ("11478 files"), compared across filesystems.
	run    func(ctx context.Context, r *runEnv) (string, error)
	finish func(r *runEnv) error
	// binding: also run on agentfs-bound (the binding overhead).
	binding bool
}

// runEnv is what one run of a workload works on.
type runEnv struct {
	b          *bench
	filesystem string // fsNative, fsAgentfs, ...
	root       string // the tree's root in this filesystem's view
	seq        int    // counts the runs of the workload, over all filesystems
}

func (r *runEnv) path(rel string) string { return filepath.Join(r.root, rel) }

// source is where rel's bytes are stored: the lower tree for an overlay,
// the view itself for native.
func (r *runEnv) source(rel string) string {
	if r.filesystem == fsNative {
		return r.path(rel)
	}
	return filepath.Join(r.b.tree.lower(), rel)
}

// grepString is what the grep workload looks for.
const grepString = "EINVAL"

// copyUpWorkload's time is also reported on its own (the table
// of targets wants it in seconds).
const copyUpWorkload = "copy-up"

// ioChunk is the buffer size of the sequential reads and writes.
const ioChunk = 1 << 20

// Scratch names that the workloads create in a view.
const (
	smallDir  = "bench-small"
	writeFile = "bench-write.bin"
	untarDir  = "bench-untar"
)

var workloads = []*workload{
	{
		name:    "git-status",
		binding: true,
		title:   fixedTitle("git status"),
		run: func(ctx context.Context, r *runEnv) (string, error) {
			n, err := r.countLines(ctx, srcDir, "git", "status", "--porcelain")
			return fmt.Sprintf("%d changed", n), err
		},
	},
	{
		name:  "find",
		title: fixedTitle("find -type f"),
		run: func(ctx context.Context, r *runEnv) (string, error) {
			n, err := r.countLines(ctx, srcDir, "find", ".", "-type", "f")
			return fmt.Sprintf("%d files", n), err
		},
	},
	{
		name:  "grep",
		title: fixedTitle("grep -r " + grepString),
		run: func(ctx context.Context, r *runEnv) (string, error) {
			n, err := r.countLines(ctx, srcDir, "grep", "-r", "-F", grepString, ".")
			var exit *exec.ExitError
			if errors.As(err, &exit) && exit.ExitCode() == 1 { // no match
				err = nil
			}
			return fmt.Sprintf("%d lines", n), err
		},
	},
	{
		name: "small-files",
		title: func(b *bench) string {
			return fmt.Sprintf("%s small files: create, stat, read, unlink", thousands(b.cfg.smallFiles))
		},
		fresh:      true,
		nativeCopy: noCopy,
		prepare:    func(_ context.Context, r *runEnv) error { return os.Mkdir(r.path(smallDir), 0o755) },
		run:        churnSmallFiles,
		binding:    true,
	},
	{
		name:    "lstat-root",
		binding: true,
		title: func(b *bench) string {
			return fmt.Sprintf("lstat %s files by paths through the root", thousands(b.tree.TreeFiles))
		},
		run: lstatThroughRoot,
	},
	{
		name:  "read-warm",
		title: func(b *bench) string { return "read " + humanBytes(b.cfg.bigSize) + " (cache-warm)" },
		fill:  bigFile,
		run:   readBigFile,
	},
	{
		name:      "read-cold",
		title:     func(b *bench) string { return "read " + humanBytes(b.cfg.bigSize) + " (cold: caches dropped)" },
		needsRoot: true,
		prepare:   func(context.Context, *runEnv) error { return dropCaches(dropAllCaches) },
		run:       readBigFile,
	},
	{
		name:   "write-fsync",
		title:  func(b *bench) string { return "write " + humanBytes(b.cfg.bigSize) + " + fsync (new file)" },
		run:    writeNewFile,
		finish: func(r *runEnv) error { return os.Remove(r.path(writeFile)) },
	},
	{
		name:   "write-small",
		title:  func(*bench) string { return "write 64 MiB in 4 KiB writes (new file)" },
		run:    writeSmall,
		finish: func(r *runEnv) error { return os.Remove(r.path(writeFile)) },
	},
	{
		name: copyUpWorkload,
		title: func(b *bench) string {
			return "copy-up: first 1-byte write to a " + humanBytes(b.cfg.bigSize) + " file"
		},
		fresh:      true,
		nativeCopy: func(*tree) []string { return []string{bigFile} },
		warm:       func(r *runEnv) error { return readAll(r.source(bigFile)) },
		run:        firstWrite,
		finish:     checkFirstWrite,
	},
	{
		name: "rm-rf",
		title: func(b *bench) string {
			return fmt.Sprintf("rm -rf %s (%s files)", b.tree.RmSubtree, thousands(b.tree.RmFiles))
		},
		fresh:      true,
		nativeCopy: func(t *tree) []string { return []string{t.RmSubtree} },
		warm:       func(r *runEnv) error { return statAll(r.source(r.b.tree.RmSubtree)) },
		run: func(ctx context.Context, r *runEnv) (string, error) {
			_, err := r.countLines(ctx, "", "rm", "-rf", r.b.tree.RmSubtree)
			if err != nil {
				return "", err
			}
			if _, err := os.Lstat(r.path(r.b.tree.RmSubtree)); !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("%s is still there after rm -rf (lstat: %v)", r.b.tree.RmSubtree, err)
			}
			return "removed", nil
		},
	},
	{
		name:       "untar",
		title:      func(b *bench) string { return fmt.Sprintf("untar src (%s files)", thousands(b.tree.TreeFiles)) },
		fresh:      true,
		nativeCopy: noCopy,
		prepare:    func(_ context.Context, r *runEnv) error { return os.Mkdir(r.path(untarDir), 0o755) },
		warm:       func(r *runEnv) error { return readAll(r.b.tree.tarPath()) },
		run: func(ctx context.Context, r *runEnv) (string, error) {
			_, err := r.countLines(ctx, untarDir, "tar", "-xf", r.b.tree.tarPath())
			return "", err
		},
	},
	{
		name:    "go-vet",
		title:   fixedTitle("go vet ./... (small module)"),
		prepare: freshGoCache,
		run: func(ctx context.Context, r *runEnv) (string, error) {
			_, err := r.countLines(ctx, vetModDir, "go", "vet", "./...")
			return "", err
		},
	},
	{
		// A shell loop that starts a program each time round, working
		// in the tree: on agentfs, every exec, fork and exit is traced
		// (agentfs-untraced shows the same without the trace). A fresh
		// view for each run, though nothing is changed, so that no other
		// mount is up during a run: the trace's programs run in every
		// exec, fork and exit of the machine while a traced mount is up,
		// and would otherwise be charged to agentfs-untraced too.
		name: spawnWorkload,
		title: func(b *bench) string {
			return fmt.Sprintf("spawn /bin/true %s times (sh loop)", thousands(b.cfg.spawns))
		},
		fresh:      true,
		nativeCopy: noCopy,
		warm:       func(r *runEnv) error { return exec.Command("/bin/sh", "-c", "/bin/true").Run() },
		run:        spawnTrue,
	},
}

// spawnWorkload is the workload whose programs the exec trace records.
const spawnWorkload = "spawn"

// spawnScript runs /bin/true $1 times, a program and not the shell's
// builtin, and prints how many times it did.
const spawnScript = `i=0; while [ "$i" -lt "$1" ]; do /bin/true || exit 1; i=$((i+1)); done; echo "$i"`

// spawnTrue runs spawnScript with /bin/sh in the view's root.
func spawnTrue(ctx context.Context, r *runEnv) (string, error) {
	out, err := output(ctx, r.root, r.env(), "/bin/sh", "-c", spawnScript, "sh", strconv.Itoa(r.b.cfg.spawns))
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || n != r.b.cfg.spawns {
		return "", fmt.Errorf("the loop says it ran /bin/true %q times, want %d", strings.TrimSpace(out), r.b.cfg.spawns)
	}
	return fmt.Sprintf("%d programs", n), nil
}

func fixedTitle(s string) func(*bench) string { return func(*bench) string { return s } }

func noCopy(*tree) []string { return nil }

func workloadName(w *workload) string { return w.name }

func workloadNames() []string { return rowNames(workloads, workloadName) }

func findWorkload(name string) *workload { return findRow(workloads, workloadName, name) }

// rowNames lists the names of a table's rows (for --only), in order.
func rowNames[T any](rows []*T, name func(*T) string) []string {
	var names []string
	for _, r := range rows {
		names = append(names, name(r))
	}
	return names
}

// findRow returns the row named want, or nil.
func findRow[T any](rows []*T, name func(*T) string, want string) *T {
	for _, r := range rows {
		if name(r) == want {
			return r
		}
	}
	return nil
}

// countLines runs a command in the view's directory rel and counts the
// lines of its output.
func (r *runEnv) countLines(ctx context.Context, rel string, name string, args ...string) (int, error) {
	var lines lineCounter
	err := runCommand(ctx, r.path(rel), r.env(), &lines, name, args...)
	return lines.n, err
}

func (r *runEnv) env() []string { return withEnv(r.b.env, "GOCACHE="+r.goCache()) }

// goCache is the GOCACHE of the go vet runs: a fresh copy, for every run,
// of a cache that holds the standard library's results only. Each run
// then compiles and vets the module's packages from the view, as after
// an edit, without rebuilding the toolchain's own packages (that would
// measure the compiler on GOROOT, not the filesystem). The copies are
// removed after the workload's last run, not between runs (see
// bench.measure on deleting many files).
func (r *runEnv) goCache() string {
	return filepath.Join(r.b.scratchDir(), "gocache-"+strconv.Itoa(r.seq))
}

func freshGoCache(ctx context.Context, r *runEnv) error {
	return runQuiet(ctx, "", r.b.env, "cp", "-a", r.b.tree.gocacheSeed(), r.goCache())
}

// readAll reads a file into the page cache.
func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

// statAll stats everything below dir, which brings its directories and
// inodes into the cache.
func statAll(dir string) error {
	return filepath.WalkDir(dir, func(path string, d iofs.DirEntry, err error) error {
		if err == nil {
			_, err = d.Info()
		}
		return err
	})
}

// lstatThroughRoot lstats every file of src by its path from the view's
// root, as git status in a repository at the root of a mount does.
func lstatThroughRoot(ctx context.Context, r *runEnv) (string, error) {
	paths, err := r.b.tree.srcFiles()
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	for _, p := range paths {
		if err := unix.Lstat(filepath.Join(r.root, p), &st); err != nil {
			return "", fmt.Errorf("lstat %s: %w", p, err)
		}
	}
	return fmt.Sprintf("%d files", len(paths)), ctx.Err()
}

// churnSmallFiles creates N small files, stats them, reads them and
// unlinks them, each phase over all files in turn.
func churnSmallFiles(ctx context.Context, r *runEnv) (string, error) {
	n := r.b.cfg.smallFiles
	content := make([]byte, 1024)
	for i := range content {
		content[i] = byte('a' + i%26)
	}
	name := func(i int) string { return filepath.Join(r.path(smallDir), "f"+strconv.Itoa(i)) }
	phases := []func(string) error{
		func(p string) error { return os.WriteFile(p, content, 0o644) },
		func(p string) error {
			st, err := os.Stat(p)
			if err == nil && st.Size() != int64(len(content)) {
				err = fmt.Errorf("%s: size %d, want %d", p, st.Size(), len(content))
			}
			return err
		},
		func(p string) error {
			data, err := os.ReadFile(p)
			if err == nil && len(data) != len(content) {
				err = fmt.Errorf("%s: read %d bytes, want %d", p, len(data), len(content))
			}
			return err
		},
		os.Remove,
	}
	for _, phase := range phases {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		for i := 0; i < n; i++ {
			if err := phase(name(i)); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("%d files", n), nil
}

// readBigFile reads the big file sequentially.
func readBigFile(ctx context.Context, r *runEnv) (string, error) {
	f, err := os.Open(r.path(bigFile))
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := r.b.ioBuffer()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			break
		} else if err != nil {
			return "", err
		}
	}
	if total != r.b.tree.BigSize {
		return "", fmt.Errorf("read %d bytes of %s, want %d", total, bigFile, r.b.tree.BigSize)
	}
	return humanBytes(total), nil
}

// writeNewFile writes a new file as large as the big file, and fsyncs it.
func writeNewFile(ctx context.Context, r *runEnv) (string, error) {
	f, err := os.OpenFile(r.path(writeFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	buf := r.b.ioBuffer()
	for written := int64(0); written < r.b.cfg.bigSize; written += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			f.Close()
			return "", err
		}
		if _, err := f.Write(buf[:min(int64(len(buf)), r.b.cfg.bigSize-written)]); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	return "", f.Close()
}

// writeSmall writes a new 64 MiB file in 4 KiB write(2) calls, as
// programs that write through small buffers do (no fsync: the cost of
// each call is what it measures).
func writeSmall(ctx context.Context, r *runEnv) (string, error) {
	const size, chunk = 64 << 20, 4 << 10
	f, err := os.OpenFile(r.path(writeFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	buf := r.b.ioBuffer()[:chunk]
	for written := 0; written < size; written += chunk {
		if written%(1<<20) == 0 {
			if err := ctx.Err(); err != nil {
				f.Close()
				return "", err
			}
		}
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return "", err
		}
	}
	return "", f.Close()
}

// firstWrite opens the big file for writing, writes one byte at offset
// 0 and closes it: on an overlay, the whole file is copied up.
func firstWrite(_ context.Context, r *runEnv) (string, error) {
	return "", writeByte(r.path(bigFile), 'x')
}

// checkFirstWrite checks that the file kept its size and holds the byte.
func checkFirstWrite(r *runEnv) error {
	if err := checkByte(r.path(bigFile), 'x', r.b.tree.BigSize); err != nil {
		return fmt.Errorf("after the write: %w", err)
	}
	return nil
}

// thousands formats 5000 as 5,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
