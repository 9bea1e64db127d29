package difftest

import (
	"math/rand"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Generator makes random ops. It picks paths from the names that exist
// in the reference tree at the time (with a bias toward names of the
// lower tree, where the overlay has the most to do) and new names.
type Generator struct {
	rng   *rand.Rand
	lower map[string]bool
	kinds []Kind
	// cur is the reference tree's current state: path -> d_type.
	cur   map[string]uint8
	paths []string // sorted keys of cur
}

// opWeights sets how often each kind is generated.
var opWeights = []struct {
	kind   Kind
	weight int
}{
	{OpOpen, 12}, {OpClose, 3}, {OpPwrite, 8}, {OpWrite, 4}, {OpPread, 5},
	{OpLseek, 2}, {OpFtruncate, 3}, {OpFstat, 3}, {OpFsync, 1},
	{OpWriteFile, 8}, {OpReadFile, 6}, {OpTruncate, 4}, {OpUnlink, 7},
	{OpMkdir, 6}, {OpRmdir, 4}, {OpRename, 12}, {OpSymlink, 4},
	{OpReadlink, 2}, {OpLink, 4}, {OpChmod, 4}, {OpChown, 2},
	{OpUtimens, 4}, {OpSetxattr, 4}, {OpGetxattr, 3}, {OpListxattr, 2},
	{OpRemovexattr, 3}, {OpMknod, 2}, {OpStat, 6}, {OpReaddir, 4},
}

// NewGenerator returns a generator for a run over tree.
func NewGenerator(rng *rand.Rand, tree *Tree) *Generator {
	g := &Generator{rng: rng, lower: map[string]bool{}}
	for _, p := range tree.Paths() {
		g.lower[p] = true
	}
	for _, w := range opWeights {
		for i := 0; i < w.weight; i++ {
			g.kinds = append(g.kinds, w.kind)
		}
	}
	return g
}

// ScanTree lists the tree at root as path -> d_type, without following
// symlinks; the root itself is "".
func ScanTree(root string) map[string]uint8 {
	out := map[string]uint8{"": unix.DT_DIR}
	var walk func(rel string)
	walk = func(rel string) {
		ents, err := readDir(join(root, rel))
		if err != nil {
			return
		}
		for _, d := range ents {
			p := joinRel(rel, d.Name)
			out[p] = d.Type
			if d.Type == unix.DT_DIR {
				walk(p)
			}
		}
	}
	walk("")
	return out
}

// Next returns a random op for the tree whose current state is cur
// (from ScanTree on the reference root).
func (g *Generator) Next(cur map[string]uint8) Op {
	g.cur = cur
	g.paths = g.paths[:0]
	for p := range cur {
		g.paths = append(g.paths, p)
	}
	sort.Strings(g.paths)
	r := g.rng
	op := Op{Kind: g.kinds[r.Intn(len(g.kinds))], Slot: r.Intn(NumSlots)}
	switch op.Kind {
	case OpOpen:
		op.Path = g.pathOf(unix.DT_REG, 0.6)
		op.Flags = []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR}[r.Intn(3)]
		for _, f := range []struct {
			bit int
			p   float64
		}{{unix.O_CREAT, 0.4}, {unix.O_TRUNC, 0.2}, {unix.O_APPEND, 0.2}, {unix.O_DIRECTORY, 0.04}, {unix.O_NOFOLLOW, 0.05}} {
			if r.Float64() < f.p {
				op.Flags |= f.bit
			}
		}
		if op.Flags&unix.O_CREAT != 0 && r.Intn(3) == 0 {
			op.Flags |= unix.O_EXCL
		}
		op.Mode = g.fileMode()
		if r.Intn(5) == 0 {
			op.Slot = -1
		}
	case OpPwrite, OpWriteFile:
		op.Off = g.offset()
		op.Len, op.Fill = g.length(), byte(r.Intn(256))
		if op.Kind == OpWriteFile {
			op.Path = g.pathOf(unix.DT_REG, 0.8)
		}
	case OpWrite:
		op.Len, op.Fill = g.length(), byte(r.Intn(256))
	case OpPread:
		op.Off = g.offset()
		op.Len = []int{1, 100, 4096, 100000}[r.Intn(4)]
	case OpLseek:
		op.Flags = []int{unix.SEEK_SET, unix.SEEK_CUR, unix.SEEK_END}[r.Intn(3)]
		op.Off = []int64{0, 10, 4096, -10, 1 << 20}[r.Intn(5)]
	case OpFtruncate, OpTruncate:
		op.Off = g.size()
		if op.Kind == OpTruncate {
			op.Path = g.pathOf(unix.DT_REG, 0.8)
		}
	case OpReadFile:
		op.Path = g.pathOf(unix.DT_REG, 0.7)
	case OpUnlink:
		op.Path = g.pathOf(unix.DT_REG, 0.6)
	case OpMkdir:
		op.Path = g.newOr(0.7)
		op.Mode = []uint32{0o755, 0o700, 0o777, 0o1777, 0o2775, 0o555}[r.Intn(6)]
	case OpRmdir:
		op.Path = g.pathOf(unix.DT_DIR, 0.8)
	case OpRename:
		op.Path = g.existing()
		if r.Intn(2) == 0 {
			op.Path2 = g.newPath()
		} else {
			op.Path2 = g.pathOf(cur[op.Path], 0.7)
		}
		switch x := r.Intn(10); {
		case x == 0:
			op.Flags = unix.RENAME_NOREPLACE
		case x <= 2:
			op.Flags = unix.RENAME_EXCHANGE
		}
	case OpSymlink:
		op.Path = g.newOr(0.85)
		switch r.Intn(10) {
		case 0:
			op.Target = "/nonexistent-agentfs-difftest/x"
		case 1:
			op.Target = "missing"
		case 2:
			op.Target = strings.Repeat("t", 1000)
		default:
			// At most four levels up: the roots sit deeper than that in
			// private directories, so that a link moved toward the root
			// can point above it only into a directory of its own.
			if strings.Count(op.Path, "/") <= 4 {
				op.Target = RelTarget(op.Path, g.existing())
			} else {
				op.Target = "missing"
			}
		}
	case OpReadlink:
		op.Path = g.pathOf(unix.DT_LNK, 0.8)
	case OpLink:
		op.Path = g.pathOf(unix.DT_REG, 0.8)
		op.Path2 = g.newOr(0.85)
	case OpChmod:
		op.Path = g.existingOrWeird()
		op.Mode = g.fileMode()
	case OpChown:
		op.Path = g.existingOrWeird()
		op.Uid = []int{0, UserID, UserID + 1}[r.Intn(3)]
		op.Gid = []int{0, UserID, UserID + 1}[r.Intn(3)]
	case OpUtimens:
		op.Path = g.existingOrWeird()
		op.Atime, op.Mtime = g.time(), g.time()
		if r.Intn(2) == 0 {
			op.Flags = unix.AT_SYMLINK_NOFOLLOW
		}
	case OpSetxattr:
		op.Path = g.existingOrWeird()
		op.Name = g.xattrName()
		op.Value = []string{"", "v", "value2", strings.Repeat("z", 1000)}[r.Intn(4)]
		op.Flags = []int{0, 0, unix.XATTR_CREATE, unix.XATTR_REPLACE}[r.Intn(4)]
	case OpGetxattr, OpRemovexattr:
		op.Path = g.existingOrWeird()
		op.Name = g.xattrName()
	case OpListxattr, OpStat:
		op.Path = g.existingOrWeird()
	case OpMknod:
		op.Path = g.newOr(0.85)
		op.Mode = unix.S_IFIFO | 0o644
		if r.Intn(5) == 0 {
			op.Mode = unix.S_IFSOCK | 0o755
		}
	case OpReaddir:
		op.Path = g.pathOf(unix.DT_DIR, 0.8)
	}
	if !isFdOp(op.Kind) {
		op.AsUser = r.Intn(7) == 0
	}
	return op
}

// existing picks an existing name other than the root, preferring
// names of the lower tree.
func (g *Generator) existing() string {
	if g.rng.Float64() < 0.6 {
		var lower []string
		for _, p := range g.paths {
			if g.lower[p] {
				lower = append(lower, p)
			}
		}
		if len(lower) > 0 {
			return lower[g.rng.Intn(len(lower))]
		}
	}
	if len(g.paths) <= 1 {
		return g.newPath()
	}
	return g.paths[1+g.rng.Intn(len(g.paths)-1)] // paths[0] is the root ""
}

// pathOf picks, with probability p, an existing name of type dtype, and
// otherwise any path.
func (g *Generator) pathOf(dtype uint8, p float64) string {
	if g.rng.Float64() < p {
		var lower, all []string
		for _, q := range g.paths {
			if q != "" && g.cur[q] == dtype {
				all = append(all, q)
				if g.lower[q] {
					lower = append(lower, q)
				}
			}
		}
		if len(lower) > 0 && g.rng.Intn(2) == 0 {
			return lower[g.rng.Intn(len(lower))]
		}
		if len(all) > 0 {
			return all[g.rng.Intn(len(all))]
		}
	}
	return g.anyPath()
}

// anyPath is an existing name, a new one or an odd one.
func (g *Generator) anyPath() string {
	switch x := g.rng.Float64(); {
	case x < 0.7:
		return g.existing()
	case x < 0.93:
		return g.newPath()
	default:
		return g.weirdPath()
	}
}

func (g *Generator) newOr(p float64) string {
	if g.rng.Float64() < p {
		return g.newPath()
	}
	return g.anyPath()
}

func (g *Generator) existingOrWeird() string {
	switch g.rng.Intn(20) {
	case 0:
		return "" // the root
	case 1:
		return g.weirdPath()
	}
	return g.existing()
}

// newPath is a new name in an existing directory (it may exist
// already: names are drawn from a small set so that they collide).
func (g *Generator) newPath() string {
	var dirs []string
	for _, p := range g.paths {
		if g.cur[p] == unix.DT_DIR {
			dirs = append(dirs, p)
		}
	}
	dir := dirs[g.rng.Intn(len(dirs))]
	var name string
	switch x := g.rng.Intn(40); {
	case x == 0:
		name = strings.Repeat("N", 255)
	case x == 1:
		name = strings.Repeat("N", 256) // ENAMETOOLONG
	case x < 8:
		// a name the lower tree uses elsewhere
		lp := g.existing()
		name = path.Base(lp)
	default:
		name = []string{"n0", "n1", "n2", "n3", "n4", "n5"}[g.rng.Intn(6)]
	}
	return joinRel(dir, name)
}

// weirdPath is a path through a file, a symlink or a missing directory,
// or with a trailing slash.
func (g *Generator) weirdPath() string {
	p := g.existing()
	switch g.rng.Intn(4) {
	case 0:
		return p + "/n0" // ENOTDIR through a file, or into a directory or symlink
	case 1:
		return "missing/n0"
	case 2:
		return p + "/"
	default:
		return p + "/."
	}
}

func (g *Generator) fileMode() uint32 {
	return []uint32{0o644, 0o644, 0o600, 0o755, 0o444, 0o000, 0o4755, 0o2755, 0o1777, 0o666}[g.rng.Intn(10)]
}

func (g *Generator) offset() int64 {
	switch g.rng.Intn(6) {
	case 0, 1:
		return 0
	case 2:
		return int64(g.rng.Intn(5000))
	case 3:
		return 4096
	case 4:
		return 65536 + int64(g.rng.Intn(10))
	}
	return 1<<20 + int64(g.rng.Intn(4096))
}

func (g *Generator) length() int {
	return []int{0, 1, 7, 100, 4095, 4096, 4097, 10000, 70000}[g.rng.Intn(9)]
}

func (g *Generator) size() int64 {
	return []int64{0, 0, 1, 100, 4096, 5000, 70000, 1 << 20}[g.rng.Intn(8)]
}

func (g *Generator) time() int64 {
	switch g.rng.Intn(8) {
	case 0, 1:
		return TimeNow
	case 2:
		return TimeOmit
	}
	return explicitTime(g.rng)
}

func (g *Generator) xattrName() string {
	switch x := g.rng.Intn(20); {
	case x == 0:
		return "trusted.difftest"
	case x == 1:
		return "user." + strings.Repeat("x", 250)
	case x == 2:
		return "user.dir"
	case x < 8:
		return "user.b"
	}
	return "user.a"
}
