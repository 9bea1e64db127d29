package difftest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// RootDir creates the nested directories in which a root's directory
// or mount point sits, and returns the root's path (not created).
// Symlink targets climb at most four levels; nesting every root five
// levels deep in its own directory keeps a link that was moved toward
// the root from reaching anything but a private, identically shaped
// directory.
func RootDir(dir string) (string, error) {
	nest := filepath.Join(dir, "x1", "x2", "x3", "x4", "x5")
	if err := os.MkdirAll(nest, 0o755); err != nil {
		return "", err
	}
	return filepath.Join(nest, "root"), nil
}

// PlainSpec is the reference: a plain directory on the filesystem of
// the work directory.
func PlainSpec() RootSpec {
	return RootSpec{
		Name: "plain",
		Make: func(dir string, tree *Tree) (*Root, error) {
			root, err := RootDir(dir)
			if err != nil {
				return nil, err
			}
			if err := os.Mkdir(root, 0o755); err != nil {
				return nil, err
			}
			if err := tree.Materialize(root); err != nil {
				return nil, err
			}
			return &Root{Dir: root, Close: func() error { return nil }}, nil
		},
	}
}

// OverlayProfile holds the differences of the kernel's overlayfs from a
// plain directory that the table in doc.go lists.
var OverlayProfile = &Profile{Name: "overlayfs", Allow: map[string]bool{
	AllowRenameDirEXDEV:    true,
	AllowDirNlinkOne:       true,
	AllowDinoHardlink:      true,
	AllowFifoMtime:         true,
	AllowUnlinkedNlink:     true,
	AllowFailedRenameMtime: true,
}}

// OverlayOptions are the overlayfs mount options besides the
// directories: index=on keeps hard links whole across copy-up, as a
// plain directory does (without it copy-up splits them).
const OverlayOptions = "index=on"

// OverlaySpec is the kernel's overlayfs over a copy of the tree, with
// an empty upper directory (needs root).
func OverlaySpec(witness bool) RootSpec {
	return RootSpec{
		Name:    "overlayfs",
		Profile: OverlayProfile,
		Witness: witness,
		Make: func(dir string, tree *Tree) (*Root, error) {
			lower, upper, work := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
			for _, d := range []string{lower, upper, work} {
				if err := os.Mkdir(d, 0o755); err != nil {
					return nil, err
				}
			}
			if err := tree.Materialize(lower); err != nil {
				return nil, err
			}
			if err := tree.MaterializeRoot(upper); err != nil {
				return nil, err
			}
			mnt, err := RootDir(dir)
			if err != nil {
				return nil, err
			}
			if err := os.Mkdir(mnt, 0o755); err != nil {
				return nil, err
			}
			opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", lower, upper, work, OverlayOptions)
			if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
				return nil, fmt.Errorf("mount -t overlay -o %s %s: %w", opts, mnt, err)
			}
			return &Root{Dir: mnt, Close: func() error {
				if err := unix.Unmount(mnt, 0); err != nil {
					return fmt.Errorf("umount %s: %w", mnt, err)
				}
				return nil
			}}, nil
		},
	}
}

// AbortFUSE aborts the FUSE connection of the mount at mnt (through
// /sys/fs/fuse/connections), which fails every pending request with
// ECONNABORTED and every later one with ENOTCONN: the way out of a hung daemon. It finds the
// connection in /proc/self/mountinfo, as stat(2) on a hung mount would
// hang too.
func AbortFUSE(mnt string) error {
	m, ok, err := procfs.MountAt(procfs.MountinfoPath, mnt)
	if err != nil {
		return err
	}
	if _, minor, found := strings.Cut(m.Dev, ":"); ok && found {
		return os.WriteFile(filepath.Join("/sys/fs/fuse/connections", minor, "abort"), []byte("1"), 0o200)
	}
	return fmt.Errorf("abort FUSE connection: %s is not mounted", mnt)
}
