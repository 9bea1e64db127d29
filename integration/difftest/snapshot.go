package difftest

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// Node is what a Snapshot records of one name.
type Node struct {
	Stat    StatInfo
	Ino     uint64
	Content string // regular files
	Target  string // symlinks
	Xattrs  map[string]string
	DType   uint8  // as the parent's readdir reported it
	DIno    uint64 // as the parent's readdir reported it
}

// Snapshot is the state of a whole tree, by path relative to its root
// ("" is the root).
type Snapshot struct {
	Nodes map[string]*Node
	// Problems are inconsistencies within the tree itself: a readdir
	// entry whose d_type disagrees with lstat, a name listed
	// twice, a listed name that lstat cannot find.
	Problems []string
}

// TakeSnapshot walks the tree at root without following symlinks.
func TakeSnapshot(root string) (*Snapshot, error) {
	s := &Snapshot{Nodes: map[string]*Node{}}
	n, err := snapNode(root, "")
	if err != nil {
		return nil, err
	}
	s.Nodes[""] = n
	if err := s.walk(root, ""); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Snapshot) walk(root, dir string) error {
	ents, err := readDir(join(root, dir))
	if err != nil {
		return fmt.Errorf("readdir %q: %w", dir, err)
	}
	seen := map[string]bool{}
	for _, d := range ents {
		rel := joinRel(dir, d.Name)
		if seen[d.Name] {
			s.Problems = append(s.Problems, fmt.Sprintf("readdir %q lists %q twice", dir, d.Name))
			continue
		}
		seen[d.Name] = true
		n, err := snapNode(root, rel)
		if err != nil {
			s.Problems = append(s.Problems, fmt.Sprintf("readdir %q lists %q but %v", dir, d.Name, err))
			continue
		}
		n.DType, n.DIno = d.Type, d.Ino
		if d.Type != dtypeOf(n.Stat.Mode) {
			s.Problems = append(s.Problems, fmt.Sprintf("%q: d_type %s, lstat says %s", rel, dtypeString(d.Type), modeString(n.Stat.Mode)))
		}
		s.Nodes[rel] = n
		if n.Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := s.walk(root, rel); err != nil {
				s.Problems = append(s.Problems, err.Error())
			}
		}
	}
	return nil
}

func join(root, rel string) string {
	if rel == "" {
		return root
	}
	return root + "/" + rel
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func snapNode(root, rel string) (*Node, error) {
	p := join(root, rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, fmt.Errorf("lstat: %w", err)
	}
	n := &Node{Stat: *statInfo(&st), Ino: st.Ino, Xattrs: map[string]string{}}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fd, err := unix.Open(p, unix.O_RDONLY|openExtra, 0)
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		data, err := readAll(fd)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		n.Content = string(data)
	case unix.S_IFLNK:
		t, err := readlink(p)
		if err != nil {
			return nil, fmt.Errorf("readlink: %w", err)
		}
		n.Target = t
	}
	names, err := listxattr(p)
	if err != nil {
		return nil, fmt.Errorf("listxattr: %w", err)
	}
	for _, name := range names {
		v, err := getxattr(p, name)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s: %w", name, err)
		}
		n.Xattrs[name] = v
	}
	return n, nil
}

// linkGroups maps each non-directory path to the sorted list of all
// paths that share its inode in the snapshot.
func (s *Snapshot) linkGroups() map[string]string {
	byIno := map[uint64][]string{}
	for p, n := range s.Nodes {
		if n.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
			byIno[n.Ino] = append(byIno[n.Ino], p)
		}
	}
	out := map[string]string{}
	for _, ps := range byIno {
		sort.Strings(ps)
		g := fmt.Sprint(ps)
		for _, p := range ps {
			out[p] = g
		}
	}
	return out
}
