package overlay

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/internal/testenv"
)

// fileSig is what a brute-force walk records of one path: besides what
// Diff compares (diffable), its modification time and which other paths
// are the same file (hard links).
type fileSig struct {
	typ            uint32
	mode, uid, gid uint32
	xattrs, data   string
	mtime          unix.Timespec
	link           string // the first path of the walk that is the same inode; "" for a file of one name, and for directories
}

// diffable is what Diff compares of a file: neither times nor link
// identity ("times alone are no change").
func (s fileSig) diffable() fileSig {
	s.mtime, s.link = unix.Timespec{}, ""
	return s
}

// joinLinks sets the link of every path of walk whose inode (inos, per
// path) other paths share: the first of them in byte order.
func joinLinks(walk map[string]fileSig, inos map[string]uint64) {
	first := map[uint64]string{}
	count := map[uint64]int{}
	for p, ino := range inos {
		count[ino]++
		if f, ok := first[ino]; !ok || p < f {
			first[ino] = p
		}
	}
	for p, ino := range inos {
		if count[ino] > 1 {
			s := walk[p]
			s.link = first[ino]
			walk[p] = s
		}
	}
}

// fullWalk reads every path of view v through its public API.
func fullWalk(t testing.TB, v *FS) map[string]fileSig {
	t.Helper()
	out := map[string]fileSig{}
	inos := map[string]uint64{}
	var walk func(n *Node, p string)
	walk = func(n *Node, p string) {
		st, err := v.Getattr(n)
		if err != nil {
			t.Fatalf("getattr %q: %v", p, err)
		}
		s := fileSig{typ: st.Mode & unix.S_IFMT, mode: st.Mode & 07777, uid: st.Uid, gid: st.Gid, mtime: st.Mtim}
		if s.typ != unix.S_IFDIR {
			inos[p] = st.Ino
		}
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
	joinLinks(out, inos)
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
		case sa.diffable() != sb.diffable():
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
			target := contents[rng.IntN(len(contents))]
			op = fmt.Sprintf("symlink %s %q", joinPath(dir, name), target)
			_, _, err = e.view.Symlink(node(dir), name, target, Caller{})
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
// tree, a snapshot taken half way, and the branch: the changes (what
// Diff compares: not times, nor which names are one file) and the
// inode numbers they report (one per file: names that are one file in
// the walk share it). The lower tree and the snapshot must not change
// as the branch goes on, times and hard links included.
// AGENTFS_OVERLAY_SEEDS adds seeds (see TestApplyRandom).
func TestDiffRandom(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for _, seed := range testenv.Seeds(t, seeds, overlaySeedsEnv) {
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
	lowerAtStart := fullWalk(t, e.lowerView().view)
	var log []string
	randomOps(e, rng, 15, &log)
	snap, err := e.view.Snapshot("half way", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	snapAtStart := fullWalk(t, e.snapView(snap).view)
	log = append(log, "snapshot")
	randomOps(e, rng, 15, &log)
	views := map[string]*FS{"lower": e.lowerView().view, "snapshot": e.snapView(snap).view, "branch": e.view}
	walks := map[string]map[string]fileSig{}
	for name, v := range views {
		walks[name] = fullWalk(t, v)
	}
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("seed %d: %s\noperations:\n%s", seed, fmt.Sprintf(format, a...), strings.Join(log, "\n"))
	}
	if !maps.Equal(walks["lower"], lowerAtStart) {
		fail("the lower tree changed:\n%s", sigDiff(lowerAtStart, walks["lower"]))
	}
	if !maps.Equal(walks["snapshot"], snapAtStart) {
		fail("the snapshot changed as the branch went on:\n%s", sigDiff(snapAtStart, walks["snapshot"]))
	}
	for _, pair := range [][2]string{{"lower", "branch"}, {"branch", "lower"}, {"snapshot", "branch"}, {"branch", "snapshot"}, {"lower", "snapshot"}} {
		want := bruteDiff(walks[pair[0]], walks[pair[1]])
		cs := diffOf(t, views[pair[0]], views[pair[1]])
		if got := summary(cs); got != want {
			fail("Diff %s → %s:\n%s\nbrute force:\n%s", pair[0], pair[1], got, want)
		}
		for _, d := range inoDiffs(cs, walks[pair[1]]) {
			fail("Diff %s → %s: %s", pair[0], pair[1], d)
		}
	}
}

// inoDiffs checks the inode numbers of the new sides of changes against
// a walk of the view they come from: paths that are one file there (the
// same link) have one number, other files others.
func inoDiffs(cs []Change, walk map[string]fileSig) []string {
	var out []string
	fileOf := map[uint64]string{} // st_ino → the file's first path
	inoOf := map[string]uint64{}  // the file's first path → st_ino
	for _, c := range cs {
		if c.New == nil || c.New.Type == "dir" {
			continue
		}
		file := c.Path
		if l := walk[c.Path].link; l != "" {
			file = l
		}
		if f, ok := fileOf[c.New.Ino]; ok && f != file {
			out = append(out, fmt.Sprintf("%q and %q report inode %d but are not one file", f, file, c.New.Ino))
		}
		if i, ok := inoOf[file]; ok && i != c.New.Ino {
			out = append(out, fmt.Sprintf("%q reports inode %d, another name of its file %d", c.Path, c.New.Ino, i))
		}
		fileOf[c.New.Ino], inoOf[file] = file, c.New.Ino
	}
	return out
}
