package overlay

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The lower directory is written only by the apply*.go files (see
// "Who writes the lower directory" in doc.go). TestOnlyApplyWritesLower
// holds the rest of the package to that by reading its source: it
// parses the package's non-test files (go/parser, no type information)
// and reports every call outside the apply group that writes through
// the lower directory.
//
// What counts as the lower directory (a "lower" value):
//
//   - a selector .lowerFd (FS.lowerFd, the view's O_PATH descriptor;
//     checker.lowerFd in fsck) or .Lower (Config.Lower and
//     FsckOptions.Lower, the lower path);
//   - a local variable assigned a lower value, by name, anywhere in the
//     function (closures included): fd := unix.Dup(v.lowerFd);
//   - what is derived from a lower value by unix.Dup*, Open, Openat*,
//     os.Open*, os.NewFile, File.Fd, fmt.Sprint* (/proc/self/fd/N
//     paths), filepath.Join, path.Join, conversions, and by a function
//     of this package that returns its argument (procPath);
//   - the result of a function of this package that returns a lower
//     value (openLower, xattrLocLocked, LowerPath, Lower, New, ...).
//
// What counts as writing through it: the *at system calls that make,
// remove, rename, link, chown, chmod, set times or xattrs of a name in
// the directory (Unlinkat, Renameat, Renameat2, Mkdirat, Mknodat,
// Symlinkat, Linkat, Fchownat, Fchmodat, UtimesNanoAt, Futimesat),
// their path forms (Unlink, Rename, Lsetxattr, os.Remove, os.WriteFile,
// ...), the calls that change an open file (Fchmod, Fchown, Fsetxattr,
// Fremovexattr, Ftruncate, Fallocate, Pwrite, Write, CopyFileRange,
// Sendfile, the FICLONE ioctls; File.Write, WriteAt, WriteString,
// Truncate, Chmod, Chown, ReadFrom), Open and Openat whose flags carry
// O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND or O_TMPFILE (flags it
// cannot resolve to constants count as writing), every Openat2 (its
// flags are inside struct open_how), raw Syscall* of a writing system
// call number, and a function of this package that does any of these
// with a lower value or with its own argument (setxattrAt,
// removexattrAt): the functions are followed to a fixed point, flags
// and system call numbers passed down as arguments included (openLower
// writes when its caller's flags do). A function outside the group that
// writes is reported where it writes, not at its callers; a function of
// the group that writes is reported wherever it is called from outside.
//
// What it does not catch: a lower value kept in a struct field or map
// other than lowerFd and read back later (taint follows local names,
// return values and arguments, not fields, channels or globals), one
// passed through another package and back, a system call made by
// another package on the lower descriptor it was given (the fs package
// gets LowerPath for inotify), writes through a memory map, a raw
// Syscall whose number is not a constant, and a call from outside into
// a function of the group that it does not see writing (one that writes
// only through the directory fds the applier keeps in a.dirs). Nor who
// calls Apply: only workspace.Apply does, for `agentfs apply`. Functions
// are told apart by name only, so two methods of one name count as one.
// The places where only the logic shows that a lower value cannot
// reach the write are listed in lowerWriteExemptions, each with why.

// isApplyFile reports whether a file is of the apply group, the one
// writer of the lower directory.
func isApplyFile(name string) bool {
	base := filepath.Base(name)
	return strings.HasPrefix(base, "apply") && !strings.HasSuffix(base, "_test.go")
}

// lowerWriteExemptions are calls outside the apply group that the
// checker sees write through a lower value, where the code guarantees
// that the value is not the lower directory then: "file|function|callee".
var lowerWriteExemptions = map[string]string{
	"attr.go|setxattr|setxattrAt":       "changeMeta copies n's metadata up first: xattrLocLocked names the object",
	"attr.go|removexattr|removexattrAt": "changeMeta copies n's metadata up first: xattrLocLocked names the object",
}

func TestOnlyApplyWritesLower(t *testing.T) {
	fset := token.NewFileSet()
	var files []*ast.File
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	applyFiles := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if isApplyFile(name) {
			applyFiles++
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if applyFiles == 0 {
		t.Fatal("no apply*.go file: the group that writes the lower directory is gone or renamed")
	}
	used := map[string]bool{}
	hits := findLowerWrites(fset, files, lowerWriteExemptions, used)
	applyHits := 0
	for _, h := range hits {
		if isApplyFile(h.pos.Filename) {
			applyHits++
			continue
		}
		t.Errorf("%s: %s (in %s) writes through the lower directory (%s); only the apply*.go files may (see doc.go)", h.pos, h.callee, h.fn, h.why)
	}
	for k, why := range lowerWriteExemptions {
		if !used[k] {
			t.Errorf("exemption %q (%s) matches no call any more: remove it", k, why)
		}
	}
	// The apply group itself must still be seen writing: a checker that
	// finds nothing there has gone blind.
	if applyHits == 0 {
		t.Error("no write through the lower directory found in the apply*.go files: the checker no longer sees them")
	}
}

// TestLowerWritesChecker runs the checker on small sources, each with
// the lines where it must report a write ("// want") and nothing else.
// A source is x.go, and the files that a "// file: NAME" line begins.
func TestLowerWritesChecker(t *testing.T) {
	for _, src := range []string{
		// Direct and derived.
		`func (v *FS) f(p string) {
			unix.Unlinkat(v.lowerFd, p, 0) // want
			fd, _ := unix.Dup(v.lowerFd)
			unix.Mkdirat(fd, p, 0o755) // want
			unix.Fstatat(fd, p, nil, 0)
			unix.Renameat(3, "a", fd, "b") // want
			unix.Symlinkat("t", fd, p) // want
			unix.UtimesNanoAt(fd, p, nil, 0) // want
			os.Remove(filepath.Join(v.cfg.Lower, p)) // want
			unix.Lsetxattr(fmt.Sprintf("/proc/self/fd/%d/%s", v.lowerFd, p), "user.a", nil, 0) // want
		}`,
		// Open flags: constants, a parameter resolved at the call site,
		// a local assigned several values.
		`func (v *FS) openLow(p string, flags int) int {
			fd, _ := unix.Openat(v.lowerFd, p, flags|unix.O_NOATIME, 0)
			return fd
		}
		func (v *FS) g(p string, mode int) {
			v.openLow(p, mode)
		}
		func (v *FS) g2() {
			v.g("x", unix.O_RDONLY)
			v.g("x", unix.O_APPEND) // want
		}
		func (v *FS) g3(p string) {
			unix.Openat(v.lowerFd, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			unix.Openat(v.lowerFd, p, unix.O_WRONLY|unix.O_CREAT, 0o600) // want
			v.openLow(p, unix.O_RDONLY)
			v.openLow(p, unix.O_RDWR) // want
			f := unix.O_PATH
			if p == "" {
				f = unix.O_TRUNC
			}
			unix.Openat(v.lowerFd, p, f, 0) // want
			unix.Openat2(v.lowerFd, p, nil) // want
		}`,
		// An fd opened read-only still changes the file's metadata.
		`func (v *FS) h(p string) {
			fd, _ := unix.Openat(v.lowerFd, p, unix.O_RDONLY, 0)
			f := os.NewFile(uintptr(fd), p)
			unix.Fchmod(int(f.Fd()), 0o600) // want
			unix.Fsetxattr(fd, "user.a", nil, 0) // want
			f.Truncate(0) // want
			unix.Fstat(fd, nil)
		}`,
		// Through the package's own functions: one that returns a lower
		// value, one that writes through its argument, one that passes
		// the system call number down.
		`func (v *FS) lowerLoc(n *Node) (int, string) {
			if n.object != "" {
				return 3, n.object
			}
			return v.lowerFd, n.lower
		}
		func setAt(dirfd int, name string) error {
			return unix.Lsetxattr(procP(dirfd, name), "user.a", nil, 0)
		}
		func procP(dirfd int, name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name) }
		func rawAt(trap uintptr, dirfd int) { unix.Syscall(trap, uintptr(dirfd), 0, 0) }
		func (v *FS) k(n *Node) {
			d, name := v.lowerLoc(n)
			setAt(d, name) // want
			setAt(4, name)
			rawAt(unix.SYS_GETXATTRAT, d)
			rawAt(unix.SYS_REMOVEXATTRAT, d) // want
			unix.Syscall(unix.SYS_UNLINKAT, uintptr(v.lowerFd), 0, 0) // want
			o := v.objs.Loc(n.object)
			unix.Fchmodat(o.Dirfd, o.Name, 0o600, 0)
		}`,
		// Exempted: reported only through the exemption.
		`func (v *FS) Exempt(n *Node) {
			d, name := v.lowerLoc2(n)
			setAt2(d, name)
		}
		func (v *FS) lowerLoc2(n *Node) (int, string) { return v.lowerFd, n.lower }
		func setAt2(dirfd int, name string) { unix.Unlinkat(dirfd, name, 0) }`,
		// A function outside the group that writes is reported where it
		// writes, not at its callers; a writer of the group is reported
		// where it is called from outside.
		`func (v *FS) outside(p string) {
			unix.Unlinkat(v.lowerFd, p, 0) // want
		}
		func (v *FS) caller() {
			v.outside("x")
			v.removeIt("x") // want
		}
		// file: apply_x.go
		func (v *FS) removeIt(p string) {
			unix.Unlinkat(v.lowerFd, p, 0) // want
		}
		func (v *FS) applyCaller() {
			v.removeIt("x") // want
		}`,
	} {
		fset := token.NewFileSet()
		var files []*ast.File
		var want, got []string
		name, all := "x.go", src
		for src != "" {
			var next string
			if i := strings.Index(src, "\n\t\t// file: "); i >= 0 {
				next = src[i+len("\n\t\t// file: "):]
				src = src[:i]
			}
			src = "package overlay\nimport (\"fmt\"; \"os\"; \"path/filepath\"; \"golang.org/x/sys/unix\")\n" + src + "\n"
			f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			for i, line := range strings.Split(src, "\n") {
				if strings.HasSuffix(line, "// want") {
					want = append(want, fmt.Sprintf("%s:%d", name, i+1))
				}
			}
			name, src, _ = strings.Cut(next, "\n")
		}
		used := map[string]bool{}
		for _, h := range findLowerWrites(fset, files, map[string]string{"x.go|Exempt|setAt2": "test"}, used) {
			got = append(got, fmt.Sprintf("%s:%d", h.pos.Filename, h.pos.Line))
		}
		slices.Sort(got)
		got = slices.Compact(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("lines reported = %v, want %v in\n%s", got, want, all)
		}
		if strings.Contains(all, "Exempt(") && !used["x.go|Exempt|setAt2"] {
			t.Errorf("exemption not used in\n%s", all)
		}
	}
}

// lowerWrite is one call that writes through a lower value.
type lowerWrite struct {
	pos    token.Position
	fn     string // the function it is in
	callee string
	why    string
}

// modeKind says how a call's mode argument tells whether it writes.
type modeKind int

const (
	modeNone modeKind = iota
	modeOpen          // open flags
	modeTrap          // a system call number
)

// writeSink describes calls that write through some of their
// arguments.
type writeSink struct {
	always bool  // every call writes the lower directory (mode aside)
	args   []int // the arguments written through; -1 is the receiver
	all    bool  // any argument but the mode (raw system calls)
	mode   int   // index of the mode argument, or -1
	kind   modeKind
	// from is the file of the package function that the sink was
	// learned from ("" for another package's).
	from string
}

func sinkAt(args ...int) []writeSink { return []writeSink{{args: args, mode: -1}} }

// lowerWriteCalls are the calls of other packages that write through
// a directory fd, fd or path argument.
var lowerWriteCalls = map[string][]writeSink{
	"unix.Unlinkat": sinkAt(0), "unix.Renameat": sinkAt(0, 2), "unix.Renameat2": sinkAt(0, 2),
	"unix.Mkdirat": sinkAt(0), "unix.Mknodat": sinkAt(0), "unix.Mkfifoat": sinkAt(0),
	"unix.Symlinkat": sinkAt(1), "unix.Linkat": sinkAt(0, 2), "unix.Fchownat": sinkAt(0),
	"unix.Fchmodat": sinkAt(0), "unix.UtimesNanoAt": sinkAt(0), "unix.Futimesat": sinkAt(0),
	"unix.Openat2": sinkAt(0),
	"unix.Openat":  {{args: []int{0}, mode: 2, kind: modeOpen}},
	"unix.Open":    {{args: []int{0}, mode: 1, kind: modeOpen}},
	"os.OpenFile":  {{args: []int{0}, mode: 1, kind: modeOpen}},
	"unix.Creat":   sinkAt(0),

	"unix.Fchmod": sinkAt(0), "unix.Fchown": sinkAt(0), "unix.Fsetxattr": sinkAt(0),
	"unix.Fremovexattr": sinkAt(0), "unix.Ftruncate": sinkAt(0), "unix.Fallocate": sinkAt(0),
	"unix.Pwrite": sinkAt(0), "unix.Write": sinkAt(0), "unix.Pwritev": sinkAt(0),
	"unix.Writev": sinkAt(0), "unix.Futimes": sinkAt(0), "unix.CopyFileRange": sinkAt(2),
	"unix.Sendfile": sinkAt(0), "unix.IoctlFileClone": sinkAt(0), "unix.IoctlFileCloneRange": sinkAt(0),
	"unix.IoctlFileDedupeRange": sinkAt(0),

	"unix.Unlink": sinkAt(0), "unix.Rmdir": sinkAt(0), "unix.Mkdir": sinkAt(0), "unix.Mknod": sinkAt(0),
	"unix.Mkfifo": sinkAt(0), "unix.Rename": sinkAt(0, 1), "unix.Link": sinkAt(0, 1),
	"unix.Symlink": sinkAt(1), "unix.Chmod": sinkAt(0), "unix.Chown": sinkAt(0), "unix.Lchown": sinkAt(0),
	"unix.Truncate": sinkAt(0), "unix.Utimes": sinkAt(0), "unix.UtimesNano": sinkAt(0),
	"unix.Setxattr": sinkAt(0), "unix.Lsetxattr": sinkAt(0), "unix.Removexattr": sinkAt(0),
	"unix.Lremovexattr": sinkAt(0),

	"os.WriteFile": sinkAt(0), "os.Create": sinkAt(0), "os.Remove": sinkAt(0), "os.RemoveAll": sinkAt(0),
	"os.Mkdir": sinkAt(0), "os.MkdirAll": sinkAt(0), "os.MkdirTemp": sinkAt(0), "os.CreateTemp": sinkAt(0),
	"os.Chmod": sinkAt(0), "os.Chown": sinkAt(0), "os.Lchown": sinkAt(0), "os.Chtimes": sinkAt(0),
	"os.Truncate": sinkAt(0), "os.Rename": sinkAt(0, 1), "os.Link": sinkAt(0, 1), "os.Symlink": sinkAt(1),
	"os.CopyFS": sinkAt(0),

	"unix.Syscall":     {{all: true, mode: 0, kind: modeTrap}},
	"unix.Syscall6":    {{all: true, mode: 0, kind: modeTrap}},
	"unix.RawSyscall":  {{all: true, mode: 0, kind: modeTrap}},
	"unix.RawSyscall6": {{all: true, mode: 0, kind: modeTrap}},

	// Methods, on a lower receiver (an *os.File opened from it).
	".Write": sinkAt(-1), ".WriteAt": sinkAt(-1), ".WriteString": sinkAt(-1), ".Truncate": sinkAt(-1),
	".Chmod": sinkAt(-1), ".Chown": sinkAt(-1), ".ReadFrom": sinkAt(-1),
}

// lowerDeriving are the calls of other packages whose result is a
// lower value when an argument (or the receiver) is.
var lowerDeriving = map[string]bool{
	"unix.Dup": true, "unix.Dup2": true, "unix.Dup3": true, "unix.Open": true, "unix.Openat": true,
	"unix.Openat2": true, "os.Open": true, "os.OpenFile": true, "os.NewFile": true, ".Fd": true,
	"fmt.Sprintf": true, "fmt.Sprint": true, "filepath.Join": true, "path.Join": true,
	"int": true, "int32": true, "int64": true, "uint32": true, "uint64": true, "uintptr": true,
	"string": true,
}

// openWriteFlags are the open flags that make an open a write.
var openWriteFlags = map[string]bool{
	"O_WRONLY": true, "O_RDWR": true, "O_CREAT": true, "O_TRUNC": true, "O_APPEND": true, "O_TMPFILE": true,
}

// writeSyscalls are the system calls that write through their
// arguments (raw Syscall* with any other constant number read).
var writeSyscalls = map[string]bool{
	"SYS_UNLINKAT": true, "SYS_RENAMEAT": true, "SYS_RENAMEAT2": true, "SYS_MKDIRAT": true,
	"SYS_MKNODAT": true, "SYS_SYMLINKAT": true, "SYS_LINKAT": true, "SYS_FCHOWNAT": true,
	"SYS_FCHMODAT": true, "SYS_FCHMODAT2": true, "SYS_UTIMENSAT": true, "SYS_FUTIMESAT": true,
	"SYS_SETXATTRAT": true, "SYS_REMOVEXATTRAT": true, "SYS_OPENAT": true, "SYS_OPENAT2": true,
	"SYS_OPEN": true, "SYS_CREAT": true, "SYS_FCHMOD": true, "SYS_FCHOWN": true, "SYS_FSETXATTR": true,
	"SYS_FREMOVEXATTR": true, "SYS_FTRUNCATE": true, "SYS_FALLOCATE": true, "SYS_WRITE": true,
	"SYS_PWRITE64": true, "SYS_PWRITEV": true, "SYS_PWRITEV2": true, "SYS_WRITEV": true,
	"SYS_COPY_FILE_RANGE": true, "SYS_SENDFILE": true, "SYS_IOCTL": true, "SYS_UNLINK": true,
	"SYS_RMDIR": true, "SYS_MKDIR": true, "SYS_MKNOD": true, "SYS_RENAME": true, "SYS_LINK": true,
	"SYS_SYMLINK": true, "SYS_CHMOD": true, "SYS_CHOWN": true, "SYS_LCHOWN": true, "SYS_TRUNCATE": true,
	"SYS_SETXATTR": true, "SYS_LSETXATTR": true, "SYS_REMOVEXATTR": true, "SYS_LREMOVEXATTR": true,
}

// lowerFunc is one function of the package, as the checker knows it.
type lowerFunc struct {
	decl   *ast.FuncDecl
	file   string
	params []string
}

// lowerChecker follows lower values through the package's functions.
type lowerChecker struct {
	fset    *token.FileSet
	funcs   []*lowerFunc
	imports map[*ast.File]map[string]string // local name → path's last element
	consts  map[string]ast.Expr             // package-level constants

	// Learned, to a fixed point, by function name.
	returnsLower map[string]map[int]bool         // result i is a lower value
	returnsArg   map[string]map[int]map[int]bool // argument j flows to result i: [j][i]
	sinks        map[string][]writeSink          // writes like lowerWriteCalls
	changed      bool
}

// findLowerWrites returns the calls in files that write through a lower
// value. exempt names calls not to report ("file|function|callee");
// used records those met.
func findLowerWrites(fset *token.FileSet, files []*ast.File, exempt map[string]string, used map[string]bool) []lowerWrite {
	c := &lowerChecker{fset: fset, imports: map[*ast.File]map[string]string{}, consts: map[string]ast.Expr{},
		returnsLower: map[string]map[int]bool{}, returnsArg: map[string]map[int]map[int]bool{}, sinks: map[string][]writeSink{}}
	fileOf := map[*lowerFunc]*ast.File{}
	for _, f := range files {
		imps := map[string]string{}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			name := p[strings.LastIndex(p, "/")+1:]
			local := name
			if imp.Name != nil {
				local = imp.Name.Name
			}
			imps[local] = name
		}
		c.imports[f] = imps
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Body == nil {
					continue
				}
				lf := &lowerFunc{decl: d, file: filepath.Base(fset.Position(d.Pos()).Filename)}
				for _, fld := range d.Type.Params.List {
					if len(fld.Names) == 0 {
						lf.params = append(lf.params, "_")
					}
					for _, n := range fld.Names {
						lf.params = append(lf.params, n.Name)
					}
				}
				c.funcs = append(c.funcs, lf)
				fileOf[lf] = f
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							c.consts[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
	}
	// What is learned only grows, so this ends.
	var hits []lowerWrite
	for {
		c.changed = false
		hits = hits[:0]
		for _, lf := range c.funcs {
			f := fileOf[lf]
			for i, p := range lf.params {
				if p != "_" {
					c.run(f, lf, i, nil, nil)
				}
			}
			c.run(f, lf, -1, exempt, func(h lowerWrite) { hits = append(hits, h) })
		}
		if !c.changed {
			break
		}
	}
	return slices.DeleteFunc(hits, func(h lowerWrite) bool {
		k := filepath.Base(h.pos.Filename) + "|" + h.fn + "|" + h.callee
		used[k] = used[k] || exempt[k] != ""
		return exempt[k] != ""
	})
}

// flow is one analysis of one function: with param < 0, of the lower
// values (from lowerFd, Lower and the functions that return them);
// else of the values derived from that parameter.
type flow struct {
	c       *lowerChecker
	file    *ast.File
	fn      *lowerFunc
	param   int
	tainted map[string]bool
	assigns map[string][]ast.Expr // every value assigned to a local name
}

func (c *lowerChecker) run(f *ast.File, lf *lowerFunc, param int, exempt map[string]string, report func(lowerWrite)) {
	fl := &flow{c: c, file: f, fn: lf, param: param, tainted: map[string]bool{}, assigns: map[string][]ast.Expr{}}
	if param >= 0 {
		fl.tainted[lf.params[param]] = true
	}
	body := lf.decl.Body
	// Local names, by name, until nothing more is learned.
	for {
		more := false
		mark := func(lhs []ast.Expr, rhs []ast.Expr) {
			for i, l := range lhs {
				id, ok := l.(*ast.Ident)
				if !ok || id.Name == "_" {
					continue
				}
				lower := false
				if len(rhs) == len(lhs) {
					if !slices.Contains(fl.assigns[id.Name], rhs[i]) {
						fl.assigns[id.Name] = append(fl.assigns[id.Name], rhs[i])
					}
					lower = fl.isLower(rhs[i])
				} else if len(rhs) == 1 {
					if call, ok := rhs[0].(*ast.CallExpr); ok {
						lower = fl.resultLower(call, i)
					}
				}
				if lower && !fl.tainted[id.Name] {
					fl.tainted[id.Name] = true
					more = true
				}
			}
		}
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				mark(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				var lhs []ast.Expr
				for _, id := range n.Names {
					lhs = append(lhs, id)
				}
				mark(lhs, n.Values)
			case *ast.RangeStmt:
				e := n.Value // a slice's or map's element, a channel's value
				if e == nil {
					e = n.Key
				}
				if id, ok := e.(*ast.Ident); ok && fl.isLower(n.X) && !fl.tainted[id.Name] {
					fl.tainted[id.Name] = true
					more = true
				}
			}
			return true
		})
		if !more {
			break
		}
	}
	name := lf.decl.Name.Name
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			// A closure's returns are its own; its calls are the function's.
			ast.Inspect(n.Body, func(m ast.Node) bool {
				if call, ok := m.(*ast.CallExpr); ok {
					fl.checkCall(call, exempt, report)
				}
				return true
			})
			return false
		case *ast.ReturnStmt:
			var results []string // named results
			if lf.decl.Type.Results != nil {
				for _, fld := range lf.decl.Type.Results.List {
					if len(fld.Names) == 0 {
						results = append(results, "_")
					}
					for _, id := range fld.Names {
						results = append(results, id.Name)
					}
				}
			}
			for i := range results {
				var lower bool
				switch {
				case len(n.Results) == 0:
					lower = fl.tainted[results[i]]
				case len(n.Results) == len(results):
					lower = fl.isLower(n.Results[i])
				default:
					if call, ok := n.Results[0].(*ast.CallExpr); ok {
						lower = fl.resultLower(call, i)
					}
				}
				if lower && param < 0 {
					learn(c, c.returnsLower, name, i)
				}
				if lower && param >= 0 {
					if c.returnsArg[name] == nil {
						c.returnsArg[name] = map[int]map[int]bool{}
					}
					learn(c, c.returnsArg[name], param, i)
				}
			}
		case *ast.CallExpr:
			fl.checkCall(n, exempt, report)
		}
		return true
	})
}

// callee names a call: "unix.Openat" for another package's function,
// ".Name" for a method (of whatever type: without types it cannot
// tell), the bare name for a function of this package; and returns the
// receiver, if any.
func (fl *flow) callee(call *ast.CallExpr) (key string, recv ast.Expr) {
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		return fn.Name, nil
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			if p, ok := fl.c.imports[fl.file][x.Name]; ok {
				return p + "." + fn.Sel.Name, nil
			}
		}
		return "." + fn.Sel.Name, fn.X
	}
	return "", nil
}

// isLower reports whether e is (derived from) a lower value, or in a
// parameter's flow, from the parameter.
func (fl *flow) isLower(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return fl.tainted[e.Name]
	case *ast.SelectorExpr:
		return fl.param < 0 && (e.Sel.Name == "lowerFd" || e.Sel.Name == "Lower")
	case *ast.CallExpr:
		return fl.resultLower(e, 0)
	case *ast.ParenExpr, *ast.StarExpr, *ast.UnaryExpr, *ast.IndexExpr, *ast.SliceExpr, *ast.TypeAssertExpr:
		return fl.isLower(operand(e))
	case *ast.BinaryExpr:
		switch e.Op {
		case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ, token.LAND, token.LOR:
			return false
		}
		return fl.isLower(e.X) || fl.isLower(e.Y)
	case *ast.CompositeLit:
		for _, el := range e.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				el = kv.Value
			}
			if fl.isLower(el) {
				return true
			}
		}
	}
	return false
}

// operand is the value an expression of one operand reads.
func operand(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return e.X
	case *ast.StarExpr:
		return e.X
	case *ast.UnaryExpr:
		return e.X
	case *ast.IndexExpr:
		return e.X
	case *ast.SliceExpr:
		return e.X
	case *ast.TypeAssertExpr:
		return e.X
	}
	return nil
}

// resultLower reports whether result i of call is a lower value.
func (fl *flow) resultLower(call *ast.CallExpr, i int) bool {
	key, recv := fl.callee(call)
	if !strings.Contains(key, ".") || strings.HasPrefix(key, ".") {
		local := strings.TrimPrefix(key, ".")
		if fl.param < 0 && fl.c.returnsLower[local][i] {
			return true
		}
		for j, results := range fl.c.returnsArg[local] {
			if results[i] && j < len(call.Args) && fl.isLower(call.Args[j]) {
				return true
			}
		}
	}
	if lowerDeriving[key] && i == 0 {
		if recv != nil && fl.isLower(recv) {
			return true
		}
		for _, a := range call.Args {
			if fl.isLower(a) {
				return true
			}
		}
	}
	return false
}

// learn adds i to m[k], noting a change.
func learn[K comparable](c *lowerChecker, m map[K]map[int]bool, k K, i int) {
	if m[k] == nil {
		m[k] = map[int]bool{}
	}
	if !m[k][i] {
		m[k][i] = true
		c.changed = true
	}
}

// modeOf tells whether a mode argument makes a call write: "write",
// "read", "param" (it is parameter i of the function), or "unknown".
func (fl *flow) modeOf(e ast.Expr, kind modeKind) (string, int) {
	write, unknown := false, false
	param := -1
	seen := map[string]bool{}
	var walk func(e ast.Expr)
	leaf := func(name string, qualified bool) {
		switch {
		case kind == modeOpen && openWriteFlags[name], kind == modeTrap && writeSyscalls[name]:
			write = true
		case qualified, kind == modeOpen && strings.HasPrefix(name, "O_"), kind == modeTrap && strings.HasPrefix(name, "SYS_"):
		case fl.c.consts[name] != nil:
			if !seen[name] {
				seen[name] = true
				walk(fl.c.consts[name])
			}
		case slices.Contains(fl.fn.params, name):
			if i := slices.Index(fl.fn.params, name); param < 0 || param == i {
				param = i
			} else {
				unknown = true
			}
		case len(fl.assigns[name]) > 0:
			if !seen[name] {
				seen[name] = true
				for _, a := range fl.assigns[name] {
					walk(a)
				}
			}
		default:
			unknown = true
		}
	}
	walk = func(e ast.Expr) {
		switch e := e.(type) {
		case *ast.BasicLit:
		case *ast.Ident:
			leaf(e.Name, false)
		case *ast.SelectorExpr:
			leaf(e.Sel.Name, true)
		case *ast.ParenExpr:
			walk(e.X)
		case *ast.UnaryExpr:
			walk(e.X)
		case *ast.BinaryExpr:
			walk(e.X)
			walk(e.Y)
		case *ast.CallExpr: // a conversion
			if len(e.Args) == 1 && lowerDeriving[exprName(e.Fun)] {
				walk(e.Args[0])
			} else {
				unknown = true
			}
		default:
			unknown = true
		}
	}
	walk(e)
	switch {
	case write:
		return "write", -1
	case unknown:
		return "unknown", -1
	case param >= 0:
		return "param", param
	}
	return "read", -1
}

func exprName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// checkCall reports call when it writes through a lower value (param <
// 0), and records what the function learns from it: that it writes
// the lower directory, or through its parameter.
func (fl *flow) checkCall(call *ast.CallExpr, exempt map[string]string, report func(lowerWrite)) {
	key, recv := fl.callee(call)
	var sinks []writeSink
	if strings.Contains(key, ".") {
		sinks = append(sinks, lowerWriteCalls[key]...)
	}
	if !strings.Contains(key, ".") || strings.HasPrefix(key, ".") {
		sinks = append(sinks, fl.c.sinks[strings.TrimPrefix(key, ".")]...)
	}
	arg := func(i int) ast.Expr {
		if i < 0 {
			return recv
		}
		if i < len(call.Args) {
			return call.Args[i]
		}
		return nil
	}
	for _, s := range sinks {
		through := s.always && fl.param < 0
		for _, i := range s.args {
			if a := arg(i); a != nil && fl.isLower(a) {
				through = true
			}
		}
		if s.all {
			for i, a := range call.Args {
				if i != s.mode && fl.isLower(a) {
					through = true
				}
			}
		}
		if !through {
			continue
		}
		why := "a call that writes"
		learned := writeSink{mode: -1}
		if s.mode >= 0 {
			m := arg(s.mode)
			if m == nil {
				continue
			}
			mode, p := fl.modeOf(m, s.kind)
			switch mode {
			case "read":
				continue
			case "param":
				learned.mode, learned.kind = p, s.kind
				why = "with the caller's " + fl.fn.params[p]
			case "unknown":
				why = "with open flags or a system call number it cannot resolve"
			case "write":
				why = "with open flags or a system call number that write"
			}
		}
		name := fl.fn.decl.Name.Name
		learned.from = fl.fn.file
		if fl.param < 0 {
			h := lowerWrite{pos: fl.c.fset.Position(call.Pos()), fn: name, callee: strings.TrimPrefix(key, "."), why: why}
			// A call of a function that writes by itself is reported
			// where that function writes, unless it is of the apply
			// group: reaching the group from outside is a write too.
			direct := !s.always || s.mode >= 0 || s.from == "" || isApplyFile(s.from)
			if learned.mode < 0 && direct && report != nil {
				report(h)
			}
			if exempt[fl.fn.file+"|"+name+"|"+h.callee] != "" {
				continue
			}
			learned.always = true
		} else {
			learned.args = []int{fl.param}
		}
		if !slices.ContainsFunc(fl.c.sinks[name], func(o writeSink) bool {
			return o.always == learned.always && slices.Equal(o.args, learned.args) && o.mode == learned.mode &&
				o.kind == learned.kind && o.from == learned.from
		}) {
			fl.c.sinks[name] = append(fl.c.sinks[name], learned)
			fl.c.changed = true
		}
	}
}
