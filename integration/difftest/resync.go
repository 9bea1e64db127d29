package difftest

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// emulateRename performs a rename that the reference did and a root
// refused with EXDEV (overlayfs without redirect_dir) the way mv(1)
// does, so that the root can go on being compared. Directories are
// re-created with their mode, owner, xattrs and times; everything else
// moves with link and unlink, which keeps hard links intact.
//
// Both parents are resolved first: a path may lead through a symlink
// that the move itself carries away ("d2" -> "d2/l1/n0", l1 a symlink
// in d2), and the emulation goes on using the destination after that.
func emulateRename(root string, op *Op) error {
	src, err := resolveParent(join(root, op.Path))
	if err != nil {
		return err
	}
	dst, err := resolveParent(join(root, op.Path2))
	if err != nil {
		return err
	}
	if op.Flags&unix.RENAME_EXCHANGE != 0 {
		// The temporary name goes next to src: that directory's mtime
		// changes with the exchange anyway.
		tmp := path.Join(path.Dir(src), ".difftest-exchange")
		if err := move(src, tmp); err != nil {
			return err
		}
		if err := move(dst, src); err != nil {
			return err
		}
		return move(tmp, dst)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.Rmdir(dst)
		} else {
			err = unix.Unlink(dst)
		}
		if err != nil {
			return fmt.Errorf("emulate rename: remove %s: %w", dst, err)
		}
	}
	return move(src, dst)
}

// resolveParent returns p with the symlinks of its directory resolved
// and its last element kept as it is.
func resolveParent(p string) (string, error) {
	p = path.Clean(p) // "n3/" names n3
	dir, err := filepath.EvalSymlinks(path.Dir(p))
	if err != nil {
		return "", fmt.Errorf("emulate rename: %w", err)
	}
	return path.Join(dir, path.Base(p)), nil
}

// rename is unix.Rename; tests replace it to take the EXDEV path on a
// plain directory.
var rename = unix.Rename

// move renames src to dst, falling back to re-creating directories and
// linking everything else when the filesystem refuses with EXDEV.
func move(src, dst string) error {
	err := rename(src, dst)
	if err != unix.EXDEV {
		if err != nil {
			return fmt.Errorf("emulate rename: %s -> %s: %w", src, dst, err)
		}
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Link(src, dst); err != nil {
			return fmt.Errorf("emulate rename: link %s -> %s: %w", src, dst, err)
		}
		return unix.Unlink(src)
	}
	if err := unix.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	ents, err := readDir(src)
	if err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	for _, d := range ents {
		if err := move(src+"/"+d.Name, dst+"/"+d.Name); err != nil {
			return err
		}
	}
	names, err := listxattr(src)
	if err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	for _, name := range names {
		v, err := getxattr(src, name)
		if err == nil {
			err = unix.Lsetxattr(dst, name, []byte(v), 0)
		}
		if err != nil {
			return fmt.Errorf("emulate rename: xattr %s of %s: %w", name, src, err)
		}
	}
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	if err := unix.Chmod(dst, st.Mode&07777); err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	if err := unix.Rmdir(src); err != nil {
		return fmt.Errorf("emulate rename: %w", err)
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// restoreParentMtimes gives the parents of a failed rename's two paths
// on root the reference's mtime where the reference's is explicit and
// root's is not (overlayfs touches the source's parent when renaming
// an opaque directory fails with ENOTEMPTY). It returns the parents it
// changed.
func restoreParentMtimes(ref, root string, op *Op) string {
	var fixed []string
	for _, p := range []string{path.Dir(op.Path), path.Dir(op.Path2)} {
		if p == "." {
			p = ""
		}
		var rst, gst unix.Stat_t
		if unix.Lstat(join(ref, p), &rst) != nil || unix.Lstat(join(root, p), &gst) != nil {
			continue
		}
		if isExplicit(rst.Mtim.Nano()) && !isExplicit(gst.Mtim.Nano()) {
			ts := []unix.Timespec{gst.Atim, rst.Mtim}
			if unix.UtimesNanoAt(unix.AT_FDCWD, join(root, p), ts, unix.AT_SYMLINK_NOFOLLOW) == nil {
				fixed = append(fixed, fmt.Sprintf("%q", p))
			}
		}
	}
	return strings.Join(fixed, " and ")
}
