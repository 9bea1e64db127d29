package overlay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// fileSig is what a brute-force walk records of one path.
type fileSig struct {
	typ            uint32
	mode, uid, gid uint32
	xattrs, data   string
}

// fullWalk reads every path of view v through its public API.
func fullWalk(t testing.TB, v *FS) map[string]fileSig {
	t.Helper()
	out := map[string]fileSig{}
	var walk func(n *Node, p string)
	walk = func(n *Node, p string) {
		st, err := v.Getattr(n)
		if err != nil {
			t.Fatalf("getattr %q: %v", p, err)
		}
		s := fileSig{typ: st.Mode & unix.S_IFMT, mode: st.Mode & 07777, uid: st.Uid, gid: st.Gid}
		s.xattrs = xattrString(func(b []byte) (int, error) { return v.Listxattr(n, b) },
			func(name string, b []byte) (int, error) { return v.Getxattr(n, name, b) })
		switch s.typ {
		case unix.S_IFREG:
			f, err := v.Open(n, unix.O_RDONLY)
			if err != nil {
				t.Fatalf("open %q: %v", p, err)
			}
			data := make([]byte, st.Size+1)
			k, _ := f.ReadAt(data, 0)
			release(t, f)
			s.data = string(data[:k])
		case unix.S_IFLNK:
			s.data, _ = v.Readlink(n)
		case unix.S_IFCHR, unix.S_IFBLK:
			s.data = fmt.Sprint(st.Rdev)
		case unix.S_IFDIR:
			ents, err := v.ReadDir(n)
			if err != nil {
				t.Fatalf("readdir %q: %v", p, err)
			}
			for _, de := range ents {
				if de.Name == "." || de.Name == ".." || p == "" && de.Name == internalDir {
					continue
				}
				c, _, err := v.Lookup(n, de.Name)
				if err != nil {
					t.Fatalf("lookup %q in %q: %v", de.Name, p, err)
				}
				walk(c, joinPath(p, de.Name))
				v.Forget(c, 1)
			}
		}
		out[p] = s
	}
	walk(v.Root(), "")
	return out
}

// xattrString lists xattrs (but security.selinux) as "k=v,k=v".
func xattrString(list func([]byte) (int, error), get func(string, []byte) (int, error)) string {
	buf := make([]byte, 4096)
	k, _ := list(buf)
	var xs []string
	for _, name := range strings.Split(string(buf[:k]), "\x00") {
		if name == "" || name == "security.selinux" {
			continue
		}
		v := make([]byte, 4096)
		vk, _ := get(name, v)
		xs = append(xs, name+"="+string(v[:vk]))
	}
	sort.Strings(xs)
	return strings.Join(xs, ",")
}

// bruteDiff derives the changes from two full walks.
func bruteDiff(a, b map[string]fileSig) string {
	var paths []string
	for p := range a {
		paths = append(paths, p)
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.SortFunc(paths, comparePaths)
	var out strings.Builder
	for _, p := range paths {
		sa, oka := a[p]
		sb, okb := b[p]
		kind := ""
		switch {
		case !oka:
			kind = "created"
		case !okb:
			kind = "deleted"
		case sa.typ != sb.typ:
			kind = "type-changed"
		case sa.data != sb.data:
			kind = "modified"
		case sa.mode != sb.mode || sa.uid != sb.uid || sa.gid != sb.gid || sa.xattrs != sb.xattrs:
			kind = "mode-changed"
		default:
			continue
		}
		fmt.Fprintf(&out, "%s %s\n", kind, p)
	}
	return out.String()
}

// randomTree fills a lower directory: files, directories, hard links
// and a symlink.
func randomTree(t *testing.T, rng *rand.Rand) map[string]string {
	files := map[string]string{}
	contents := []string{"", "a", "hello", "bytes\x00"}
	for _, d := range []string{"d0", "d0/s", "d1", "d1/s/t", "d2"} {
		files[d+"/"] = ""
		for i := range rng.IntN(4) {
			files[fmt.Sprintf("%s/f%d", d, i)] = contents[rng.IntN(len(contents))]
		}
	}
	files["top"] = "top"
	return files
}

// randomOps applies n random operations to e's view, logging them.
func randomOps(e *env, rng *rand.Rand, n int, log *[]string) {
	names := []string{"a", "b", "f0", "f1", "s", "t", "new"}
	contents := []string{"", "a", "hello", "bytes\x00", "longer content"}
	for range n {
		tree := fullWalk(e.t, e.view)
		var all, dirs, files []string
		for p, s := range tree {
			all = append(all, p)
			switch s.typ {
			case unix.S_IFDIR:
				dirs = append(dirs, p)
			case unix.S_IFREG:
				files = append(files, p)
			}
		}
		sort.Strings(all)
		sort.Strings(dirs)
		sort.Strings(files)
		pick := func(l []string) string {
			if len(l) == 0 {
				return ""
			}
			return l[rng.IntN(len(l))]
		}
		node := func(p string) *Node {
			n, err := e.walk(p)
			if err != nil {
				e.t.Fatalf("walk %q: %v (ops: %v)", p, err, *log)
			}
			return n
		}
		dir, name := pick(dirs), names[rng.IntN(len(names))]
		var op string
		var err error
		switch k := rng.IntN(11); {
		case k == 0 && len(files) > 0:
			f, c := pick(files), contents[rng.IntN(len(contents))]
			op = fmt.Sprintf("write %s %q", f, c)
			e.write(f, c)
		case k == 1:
			op = "create " + joinPath(dir, name)
			_, _, _, err = e.view.Create(node(dir), name, unix.O_RDWR|unix.O_EXCL, 0644, Caller{})
		case k == 2:
			op = "mkdir " + joinPath(dir, name)
			_, _, err = e.view.Mkdir(node(dir), name, 0755, Caller{})
		case k == 3:
			p := pick(all)
			if p == "" {
				continue
			}
			d, nm := splitPath(p)
			op = "remove " + p
			if tree[p].typ == unix.S_IFDIR {
				err = e.view.Rmdir(node(d), nm)
			} else {
				err = e.view.Unlink(node(d), nm)
			}
		case k == 4:
			p := pick(all)
			if p == "" {
				continue
			}
			d, nm := splitPath(p)
			op = fmt.Sprintf("rename %s %s", p, joinPath(dir, name))
			err = e.view.Rename(node(d), nm, node(dir), name, 0)
		case k == 5:
			p := pick(all)
			mode := []uint32{0600, 0644, 0755}[rng.IntN(3)]
			op = fmt.Sprintf("chmod %o %s", mode, p)
			_, err = e.view.Setattr(node(p), SetAttr{Mode: &mode}, nil)
		case k == 6 && len(files) > 0:
			f := pick(files)
			op = fmt.Sprintf("link %s %s", f, joinPath(dir, name))
			_, err = e.view.Link(node(f), node(dir), name)
		case k == 7:
			op = "symlink " + joinPath(dir, name)
			_, _, err = e.view.Symlink(node(dir), name, contents[rng.IntN(len(contents))], Caller{})
		case k == 8:
			p := pick(all)
			v := contents[rng.IntN(len(contents))]
			op = fmt.Sprintf("setxattr %s %q", p, v)
			err = e.view.Setxattr(node(p), "user.k", []byte(v), 0)
		case k == 9:
			p := pick(dirs)
			if p == "" {
				continue
			}
			op = "rm -r " + p
			err = removeAll(e, p)
		case k == 10 && len(files) > 0:
			f := pick(files)
			uid := uint32(rng.IntN(2))
			op = fmt.Sprintf("chown %d %s", uid, f)
			_, err = e.view.Setattr(node(f), SetAttr{Uid: &uid}, nil)
		default:
			continue
		}
		if err != nil {
			op += fmt.Sprintf(" (%v)", err)
		}
		*log = append(*log, op)
	}
}

// removeAll removes p and everything below it through the view.
func removeAll(e *env, p string) error {
	n, err := e.walk(p)
	if err != nil {
		return err
	}
	if n.IsDir() {
		for _, name := range e.names(p) {
			if err := removeAll(e, joinPath(p, name)); err != nil {
				return err
			}
		}
	}
	d, name := splitPath(p)
	dn, err := e.walk(d)
	if err != nil {
		return err
	}
	if n.IsDir() {
		return e.view.Rmdir(dn, name)
	}
	return e.view.Unlink(dn, name)
}

// TestDiffRandom compares Diff with a brute-force comparison of full
// walks, over random trees and random operations, between the lower
// tree, a snapshot taken half way, and the branch.
func TestDiffRandom(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { diffRandomly(t, seed) })
	}
}

// diffRandomly runs one seed of TestDiffRandom.
func diffRandomly(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	e := newEnv(t, randomTree(t, rng))
	for _, l := range [][2]string{{"d0/f0", "d1/s/t/hl"}, {"d2/f0", "d2/hl"}, {"top", "d0/s/top"}} {
		// Where f0 exists: randomTree makes 0 to 3 files a directory.
		if err := os.Link(filepath.Join(e.lower, l[0]), filepath.Join(e.lower, l[1])); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	var log []string
	randomOps(e, rng, 15, &log)
	snap, err := e.view.Snapshot("half way", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	log = append(log, "snapshot")
	randomOps(e, rng, 15, &log)
	views := map[string]*FS{"lower": e.lowerView().view, "snapshot": e.snapView(snap).view, "branch": e.view}
	walks := map[string]map[string]fileSig{}
	for name, v := range views {
		walks[name] = fullWalk(t, v)
	}
	for _, pair := range [][2]string{{"lower", "branch"}, {"branch", "lower"}, {"snapshot", "branch"}, {"branch", "snapshot"}, {"lower", "snapshot"}} {
		want := bruteDiff(walks[pair[0]], walks[pair[1]])
		got := summary(diffOf(t, views[pair[0]], views[pair[1]]))
		if got != want {
			t.Fatalf("seed %d: Diff %s → %s:\n%s\nbrute force:\n%s\noperations:\n%s", seed, pair[0], pair[1], got, want, strings.Join(log, "\n"))
		}
	}
}
