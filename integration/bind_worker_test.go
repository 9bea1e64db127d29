package integration

// The worker of the binding isolation test (bind_test.go): the test
// binary, started through agentfs exec -b BRANCH with isolationEnv set,
// writes and reads the same paths as the workers of other branches, at
// the same time, and reports every time it sees anything but its own
// branch's data, attributes or listing.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// isolationEnv names the worker's branch; isolationRootEnv the mount
// root; isolationItersEnv the number of iterations.
const (
	isolationEnv      = "AGENTFS_IT_ISOLATION"
	isolationRootEnv  = "AGENTFS_IT_ISOLATION_ROOT"
	isolationItersEnv = "AGENTFS_IT_ISOLATION_ITERS"
)

func isIsolationWorker() bool { return os.Getenv(isolationEnv) != "" }

// runIsolationWorker is the worker's main: it prints "ok ITERATIONS" and
// exits 0, or prints the mismatches and exits 1.
func runIsolationWorker() int {
	me, root := os.Getenv(isolationEnv), os.Getenv(isolationRootEnv)
	iters, _ := strconv.Atoi(os.Getenv(isolationItersEnv))
	var bad []string
	fail := func(format string, a ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, a...))
		}
	}
	at := func(p string) string { return filepath.Join(root, p) }
	// Each branch has a marker only it lists; the others' must not show.
	marker := "only-" + me
	for _, p := range []string{"dir/" + marker, "top-" + me} {
		if err := os.WriteFile(at(p), []byte(me), 0o644); err != nil {
			fail("creating %s: %v", p, err)
		}
	}
	rootDir, err := os.Open(root)
	if err != nil {
		fmt.Println("MISMATCH", me+": open the root:", err)
		return 1
	}
	defer rootDir.Close()
	checkTop := func(i int, what string, names []string) {
		for _, n := range names {
			if len(n) > 4 && n[:4] == "top-" && n != "top-"+me {
				fail("iteration %d: %s shows %s, another branch's (listing %v)", i, what, n, names)
			}
		}
		if !slices.Contains(names, "top-"+me) {
			fail("iteration %d: %s lacks top-%s (listing %v)", i, what, me, names)
		}
	}
	for i := range iters {
		want := fmt.Sprintf("%s %d\n", me, i)
		// Through the root: the walk's first step depends on the caller.
		if err := os.WriteFile(at("shared.txt"), []byte(want), 0o644); err != nil {
			fail("write shared.txt: %v", err)
			continue
		}
		if got, err := os.ReadFile(at("shared.txt")); err != nil || string(got) != want {
			fail("iteration %d: shared.txt = %q, %v; want %q", i, got, err, want)
		}
		var st unix.Stat_t
		if err := unix.Stat(at("shared.txt"), &st); err != nil || st.Size != int64(len(want)) {
			fail("iteration %d: stat shared.txt: size %d, %v; want %d", i, st.Size, err, len(want))
		}
		// Below the root (branch-qualified nodes, cached).
		if err := os.WriteFile(at("dir/a"), []byte(want), 0o644); err != nil {
			fail("write dir/a: %v", err)
		}
		if got, err := os.ReadFile(at("dir/a")); err != nil || string(got) != want {
			fail("iteration %d: dir/a = %q, %v; want %q", i, got, err, want)
		}
		// Rename at the same paths in every branch.
		if err := os.WriteFile(at("dir/r1"), []byte(want), 0o644); err != nil {
			fail("write dir/r1: %v", err)
		}
		if err := os.Rename(at("dir/r1"), at("dir/r2")); err != nil {
			fail("iteration %d: rename dir/r1 dir/r2: %v", i, err)
		}
		if got, err := os.ReadFile(at("dir/r2")); err != nil || string(got) != want {
			fail("iteration %d: dir/r2 after rename = %q, %v; want %q", i, got, err, want)
		}
		if err := os.Remove(at("dir/r2")); err != nil {
			fail("iteration %d: remove dir/r2: %v", i, err)
		}
		if i%20 == 0 {
			names, err := os.ReadDir(at("dir"))
			if err != nil {
				fail("ls dir: %v", err)
			}
			var got []string
			for _, e := range names {
				got = append(got, e.Name())
			}
			for _, n := range got {
				if len(n) > 5 && n[:5] == "only-" && n != marker {
					fail("iteration %d: ls dir shows %s, another branch's file (listing %v)", i, n, got)
				}
			}
			if !slices.Contains(got, marker) {
				fail("iteration %d: ls dir lacks %s (listing %v)", i, marker, got)
			}
		}
		if i%5 == 0 {
			// The root's listing depends on the caller: listed afresh,
			// and again through a descriptor held open since the start
			// and rewound (the kernel must not serve it from a cache
			// another branch filled).
			top, err := os.ReadDir(root)
			if err != nil {
				fail("ls root: %v", err)
			}
			var names []string
			for _, e := range top {
				names = append(names, e.Name())
			}
			checkTop(i, "ls of the root", names)
			if _, err := rootDir.Seek(0, 0); err != nil {
				fail("rewind the root: %v", err)
			}
			names, err = rootDir.Readdirnames(-1)
			if err != nil {
				fail("ls the root again: %v", err)
			}
			checkTop(i, "the root rewound", names)
		}
		if i%50 == 0 {
			if err := checkMmap(at("shared.txt"), want); err != nil {
				fail("iteration %d: mmap shared.txt: %v", i, err)
			}
			if got, err := os.ReadFile(at("dir/" + marker)); err != nil || string(got) != me {
				fail("iteration %d: %s = %q, %v", i, marker, got, err)
			}
		}
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Println("MISMATCH", me+":", b)
		}
		return 1
	}
	fmt.Println("ok", iters)
	return 0
}

// checkMmap maps file p and compares its bytes with want.
func checkMmap(p, want string) (err error) {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, len(want), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := unix.Munmap(b); uerr != nil && err == nil {
			err = fmt.Errorf("munmap of %s: %v", p, uerr)
		}
	}()
	if !bytes.Equal(b, []byte(want)) {
		return fmt.Errorf("mapped %q, want %q", b, want)
	}
	return nil
}
