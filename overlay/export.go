package overlay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
)

// # Export
//
// Export writes a view out as a plain directory tree, as `cp -a` of
// the mount would, without going through FUSE: directories, regular
// files (FICLONE where the target can share extents with the source,
// else copy_file_range over the data extents only, so holes stay
// holes), symlinks, fifos and sockets (mknod, as cp -a recreates
// them), and device nodes when running as root (skipped otherwise,
// with a note). Every file keeps its mode (setid bits included), its
// atime and mtime (nanoseconds), its user.* xattrs and POSIX ACLs,
// and, as root, its owner and its trusted.* xattrs and file
// capabilities. Names that are one inode in the view (same st_ino)
// are hard links in the export. Attributes are applied as copy-up
// applies them: owner, xattrs, mode, then times; a directory's after
// its contents, so a read-only directory can be filled and its mtime
// stays the view's.
//
// The control file's name, which is also the internal directory's, is
// never exported. Files are read with O_NOATIME: exporting changes no
// atime of a file in the view (reading a symlink's target may, as every
// readlink does under relatime). Nothing is written to the lower directory: a
// target inside it is refused. Refusing a target inside the mount
// (whose daemon would be writing to itself) is the caller's job.

// ExportOptions tune Export.
type ExportOptions struct {
	// Skipped, when set, is told about each file or attribute that was
	// not exported, and why (device nodes without root, xattrs the
	// target refuses).
	Skipped func(path, why string)
	// Progress, when set, is told after each file how many were
	// written so far, and the bytes of their data.
	Progress func(files, bytes int64)
	// Paths, when set, are the only paths exported (view paths, ""
	// for the root), each with what it holds, at the same path below
	// the target; the directories above them are made with the view's
	// attributes, and hold nothing else.
	Paths []string
	// IntoLower lets the target be inside the lower directory: a view
	// of the whole system (agentfs run --system) has every directory of
	// the host in its lower one. The lower directory the target is, as
	// the view shows it, is then left out of the export (it would
	// export itself).
	IntoLower bool
}

// Export writes view v out as a plain directory tree at to, which must
// not exist (its parent directories are made) or be an empty
// directory. On failure the partial tree is left in place.
func Export(v *FS, to string) error {
	return ExportWith(v, to, ExportOptions{})
}

// ExportWith is Export with options.
func ExportWith(v *FS, to string, o ExportOptions) error {
	// Nothing is made before the check: not even a parent directory
	// may appear in the lower tree.
	if err := v.refuseInsideLowerPath(existingAncestor(to), to); err != nil && !o.IntoLower {
		return err
	}
	rootfd, made, err := openExportTarget(to)
	if err != nil {
		return err
	}
	defer unix.Close(rootfd)
	if err := v.refuseInsideLower(rootfd, to); err != nil && !o.IntoLower {
		if made {
			// Undo the empty directory made above, as far as it goes:
			// the caller gets the refusal.
			_ = os.Remove(to)
		}
		return err
	}
	x := &exporter{v: v, o: o, rootfd: rootfd, asRoot: os.Geteuid() == 0, links: map[uint64]string{}}
	if o.IntoLower {
		var st unix.Stat_t
		if err := unix.Fstat(rootfd, &st); err != nil {
			return fmt.Errorf("export %s: %w", to, err)
		}
		x.target = &st
	}
	if len(o.Paths) > 0 {
		return x.paths(o.Paths)
	}
	root, st, err := v.lookupPath("")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := x.fill(root, rootfd, ""); err != nil {
		return err
	}
	if err := x.setAttrs(root, &st, rootfd, ".", ""); err != nil {
		return fmt.Errorf("export %s: %w", to, err)
	}
	return nil
}

// openExportTarget makes (or opens, when it is an empty directory) the
// export's root and returns an fd of it, and whether it made it.
func openExportTarget(to string) (fd int, made bool, err error) {
	if err := os.MkdirAll(filepath.Dir(to), 0755); err != nil {
		return -1, false, fmt.Errorf("export: %w", err)
	}
	err = unix.Mkdir(to, 0700)
	made = err == nil
	if err != nil && err != unix.EEXIST {
		return -1, false, fmt.Errorf("export: %s: %w", to, err)
	}
	fd, err = unix.Open(to, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP {
		return -1, false, fmt.Errorf("export: %s exists and is not a directory: choose a path that does not exist, or an empty directory", to)
	}
	if err != nil {
		return -1, false, fmt.Errorf("export: %s: %w", to, err)
	}
	if !made {
		f := os.NewFile(uintptr(fd), to)
		names, err := f.Readdirnames(1)
		if len(names) > 0 || err != nil && err != io.EOF {
			f.Close()
			if err == nil || err == io.EOF {
				return -1, false, fmt.Errorf("export: %s is not empty: choose a path that does not exist, or empty the directory first", to)
			}
			return -1, false, fmt.Errorf("export: %s: %w", to, err)
		}
		// Readdirnames keeps the fd; hand over a fresh one.
		fd, err = unix.Dup(fd)
		f.Close()
		if err != nil {
			return -1, false, fmt.Errorf("export: %s: %w", to, err)
		}
	}
	return fd, made, nil
}

// existingAncestor returns the longest prefix of path p that exists.
func existingAncestor(p string) string {
	p = filepath.Clean(p)
	for {
		if _, err := os.Lstat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}

// refuseInsideLowerPath is refuseInsideLower for an existing path p
// (symlinks followed); a path that is no directory passes.
func (v *FS) refuseInsideLowerPath(p, to string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // not a directory: making the target fails and says so
	}
	defer unix.Close(fd)
	return v.refuseInsideLower(fd, to)
}

// refuseInsideLower fails when directory fd (the export target to) is
// the view's lower directory or inside it: nothing may write there.
func (v *FS) refuseInsideLower(fd int, to string) error {
	var lower unix.Stat_t
	if err := unix.Fstat(v.lowerFd, &lower); err != nil {
		return fmt.Errorf("export: lower directory %s: %w", v.cfg.Lower, err)
	}
	cur, err := unix.Dup(fd)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for {
		var st, up unix.Stat_t
		err := unix.Fstat(cur, &st)
		if err == nil && st.Dev == lower.Dev && st.Ino == lower.Ino {
			unix.Close(cur)
			return fmt.Errorf("export: %s is inside the lower directory %s, which agentfs never writes to: choose a path outside it", to, v.cfg.Lower)
		}
		parent, perr := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil || perr != nil {
			return fmt.Errorf("export: %s: %w", to, errors.Join(err, perr))
		}
		if err := unix.Fstat(parent, &up); err != nil || up.Dev == st.Dev && up.Ino == st.Ino {
			unix.Close(parent)
			return err // the root directory
		}
		cur = parent
	}
}

// exporter is one run of Export.
type exporter struct {
	v      *FS
	o      ExportOptions
	rootfd int
	asRoot bool
	// links maps the st_ino of a file with more than one name to the
	// path (relative to rootfd) it was first exported at.
	links map[uint64]string
	// files and bytes count what was written, for o.Progress.
	files, bytes int64
	// target is the export's root, when it may be in the lower
	// directory (ExportOptions.IntoLower): the export leaves it out.
	target *unix.Stat_t
}

func (x *exporter) skip(p, why string) {
	if x.o.Skipped != nil {
		x.o.Skipped(p, why)
	}
}

// fill exports the contents of directory n (at p) into dirfd.
func (x *exporter) fill(n *Node, dirfd int, p string) error {
	names, err := x.v.childNames(n)
	if err != nil {
		return fmt.Errorf("export %s: %w", p, err)
	}
	for _, name := range names {
		c, st, err := x.v.lookupChild(n, name)
		cp := joinPath(p, name)
		if err != nil {
			return fmt.Errorf("export %s: %w", cp, err)
		}
		if c == nil {
			continue // removed meanwhile
		}
		err = x.file(c, &st, dirfd, name, cp)
		x.v.release(c)
		if err != nil {
			return fmt.Errorf("export %s: %w", cp, err)
		}
		if x.o.Progress != nil {
			x.files++
			if st.Mode&unix.S_IFMT == unix.S_IFREG {
				x.bytes += st.Size
			}
			x.o.Progress(x.files, x.bytes)
		}
	}
	return nil
}

// file exports node n (attributes st) as name in dirfd, at path p.
func (x *exporter) file(n *Node, st *unix.Stat_t, dirfd int, name, p string) error {
	if n.mode != unix.S_IFDIR && st.Nlink > 1 {
		if first, ok := x.links[st.Ino]; ok {
			return unix.Linkat(x.rootfd, first, dirfd, name, 0)
		}
	}
	var err error
	switch n.mode {
	case unix.S_IFDIR:
		if x.isTarget(n) {
			x.skip(p, "the export's own target")
			return nil
		}
		return x.dir(n, st, dirfd, name, p)
	case unix.S_IFREG:
		err = x.regular(n, st, dirfd, name)
	case unix.S_IFLNK:
		var target string
		if target, err = x.v.Readlink(n); err == nil {
			err = unix.Symlinkat(target, dirfd, name)
		}
	case unix.S_IFCHR, unix.S_IFBLK:
		if !x.asRoot {
			x.skip(p, "device node: only root can make one")
			return nil
		}
		err = unix.Mknodat(dirfd, name, n.mode|0600, int(st.Rdev))
	default: // fifos, sockets
		err = unix.Mknodat(dirfd, name, n.mode|0600, 0)
	}
	if err == nil {
		err = x.setAttrs(n, st, dirfd, name, p)
	}
	if err == nil && n.mode != unix.S_IFDIR && st.Nlink > 1 {
		x.links[st.Ino] = p
	}
	return err
}

// dir exports directory n and its contents.
func (x *exporter) dir(n *Node, st *unix.Stat_t, dirfd int, name, p string) error {
	if err := unix.Mkdirat(dirfd, name, 0700); err != nil {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := x.fill(n, fd, p); err != nil {
		return err
	}
	return x.setAttrs(n, st, dirfd, name, p)
}

// regular exports the data of regular file n.
func (x *exporter) regular(n *Node, st *unix.Stat_t, dirfd int, name string) error {
	src, err := x.v.openData(n)
	if err != nil {
		return err
	}
	defer src.Close()
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(fd), name)
	defer dst.Close()
	return backstore.CopyFileData(dst, src, st.Size)
}

// setAttrs gives name in dirfd (just made by the export) the owner (as
// root), xattrs, mode and times of n, in that order.
func (x *exporter) setAttrs(n *Node, st *unix.Stat_t, dirfd int, name, p string) error {
	if x.asRoot {
		if err := unix.Fchownat(dirfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	xattrs, err := x.v.xattrs(n)
	if err != nil {
		return fmt.Errorf("xattrs: %w", err)
	}
	for k, val := range xattrs {
		if !x.exportsXattr(k) {
			continue
		}
		path := fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name)
		if err := unix.Lsetxattr(path, k, []byte(val), 0); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				x.skip(p, fmt.Sprintf("xattr %s: %v", k, err))
				continue
			}
			return fmt.Errorf("xattr %s: %w", k, err)
		}
	}
	if n.mode != unix.S_IFLNK {
		// Made by the export, not a symlink: following is safe.
		if err := unix.Fchmodat(dirfd, name, st.Mode&07777, 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}

// exportsXattr says which xattrs an export keeps (see keptXattr).
func (x *exporter) exportsXattr(name string) bool { return keptXattr(name, x.asRoot) }

// keptXattr says which xattrs Export and Apply write out: user.* and
// POSIX ACLs always; trusted.* and file capabilities as root.
func keptXattr(name string, asRoot bool) bool {
	switch {
	case strings.HasPrefix(name, "user."),
		name == "system.posix_acl_access", name == "system.posix_acl_default":
		return true
	case strings.HasPrefix(name, "trusted."), name == "security.capability":
		return asRoot
	}
	return false
}

// isTarget reports whether directory n shows the export's own target
// (its lower directory is the target).
func (x *exporter) isTarget(n *Node) bool {
	if x.target == nil {
		return false
	}
	lower, ok := x.v.LowerDir(n)
	if !ok {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(x.v.lowerFd, lower, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Dev == x.target.Dev && st.Ino == x.target.Ino
}

// paths exports the view paths ps (ExportOptions.Paths), each below
// the directories above it, which get the view's attributes once
// filled.
func (x *exporter) paths(ps []string) error {
	var clean []string
	for _, p := range ps {
		c := strings.TrimPrefix(path.Clean("/"+p), "/")
		if isBelow(c, internalDir) && c != "" {
			return fmt.Errorf("export: %q: the control file is not exported", p)
		}
		clean = append(clean, c)
	}
	slices.Sort(clean)
	type made struct {
		dirfd      int
		name, path string
	}
	var dirs []made // the directories made above the paths, parents first
	defer func() {
		for _, d := range dirs {
			if d.dirfd != x.rootfd {
				unix.Close(d.dirfd)
			}
		}
	}()
	fds := map[string]int{"": x.rootfd}
	var done []string
	for _, p := range clean {
		if slices.ContainsFunc(done, func(d string) bool { return d == "" || p == d || isBelow(p, d) }) {
			continue // inside one exported whole
		}
		done = append(done, p)
		if p == "" {
			root, st, err := x.v.lookupPath("")
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if err := x.fill(root, x.rootfd, ""); err != nil {
				return err
			}
			if err := x.setAttrs(root, &st, x.rootfd, ".", ""); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			continue
		}
		names := pathNames(p)
		at := ""
		for i, name := range names {
			q := joinPath(at, name)
			n, st, err := x.v.lookupPath(q)
			if err == nil && n == nil {
				err = fmt.Errorf("%s does not exist in %s", q, "the view")
			}
			if err != nil {
				return fmt.Errorf("export %s: %w", q, err)
			}
			if i == len(names)-1 {
				err = x.file(n, &st, fds[at], name, q)
				x.v.release(n)
				if err != nil {
					return fmt.Errorf("export %s: %w", q, err)
				}
				break
			}
			x.v.release(n)
			if _, ok := fds[q]; !ok {
				if n.mode != unix.S_IFDIR {
					return fmt.Errorf("export %s: %s is not a directory", p, q)
				}
				if err := unix.Mkdirat(fds[at], name, 0o700); err != nil {
					return fmt.Errorf("export %s: %w", q, err)
				}
				fd, err := unix.Openat(fds[at], name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("export %s: %w", q, err)
				}
				fds[q] = fd
				dirs = append(dirs, made{dirfd: fds[at], name: name, path: q})
			}
			at = q
		}
	}
	// The directories above, deepest first (a read-only one is filled
	// before it gets its mode), then the root.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		n, st, err := x.v.lookupPath(d.path)
		if err == nil && n == nil {
			err = unix.ENOENT // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("export %s: %w", d.path, err)
		}
		err = x.setAttrs(n, &st, d.dirfd, d.name, d.path)
		x.v.release(n)
		if err != nil {
			return fmt.Errorf("export %s: %w", d.path, err)
		}
	}
	if !slices.Contains(done, "") {
		root, st, err := x.v.lookupPath("")
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		if err := x.setAttrs(root, &st, x.rootfd, ".", ""); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	return nil
}
