package contenthash

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # The user's cache of project file hashes
//
// Each `agentfs run` makes a store of its own, whose hash keys start
// empty: without more, every run would read and hash the whole project
// again (about 2 s a GB here, which the run's end waits for). So a
// project file's hash is also kept in a file of the user's
// (UserLowerCachePath), shared by every store of the user: a hash the
// store does not have is taken from it while the file at that device
// and inode has the size, mtime and ctime recorded, the same rule as
// the store's (and only hashes recorded under the racy window's rule
// are ever in it). verify never uses it: it reads everything.
//
// The file is "agentfs-lower-hashes-1\n" and records of 72 bytes: dev,
// ino, size (uint64), mtime, ctime (int64 Unix ns), SHA-256. It is
// replaced whole (a temporary file and a rename) when hashes are
// added, so that a reader never sees half of it; two stores adding at
// once may lose the other's additions, which are then computed again.
// It is used only when it is a regular file of this user's that no
// one else may write; past lowerCacheMax records it starts again.

const (
	lowerCacheMagic  = "agentfs-lower-hashes-1\n"
	lowerCacheRecord = 72
	lowerCacheMax    = 1 << 20 // 72 MiB of records
)

// LowerCache is the user's cache of project file hashes (see above).
type LowerCache struct {
	path string

	mu     sync.Mutex
	loaded bool
	m      map[[2]uint64]branch.LowerHash
}

// OpenLowerCache returns the cache kept at path; it is read when first
// needed.
func OpenLowerCache(path string) *LowerCache {
	return &LowerCache{path: path}
}

// UserLowerCachePath is where the user's cache is kept:
// ${XDG_STATE_HOME:-~/.local/state}/agentfs/project-hashes ("" when
// neither is set).
func UserLowerCachePath() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home := os.Getenv("HOME")
		if home == "" {
			return ""
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "agentfs", "project-hashes")
}

// readLowerCache reads the records of the cache file at path; a file
// that is missing, not the user's, writable by others or not a cache
// gives none.
func readLowerCache(path string) (map[[2]uint64]branch.LowerHash, error) {
	m := map[[2]uint64]branch.LowerHash{}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return m, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return m, fmt.Errorf("%s is not a file of yours that only you may write: not used", path)
	}
	if st.Size > int64(len(lowerCacheMagic))+int64(lowerCacheMax+1)*lowerCacheRecord {
		return m, fmt.Errorf("%s is larger than a cache of project file hashes can be: not used", path)
	}
	b := make([]byte, st.Size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) < len(lowerCacheMagic) || string(b[:len(lowerCacheMagic)]) != lowerCacheMagic {
		return m, fmt.Errorf("%s is not a cache of project file hashes: not used", path)
	}
	b = b[len(lowerCacheMagic):]
	for ; len(b) >= lowerCacheRecord; b = b[lowerCacheRecord:] {
		var lh branch.LowerHash
		lh.Dev = binary.BigEndian.Uint64(b[0:])
		lh.Ino = binary.BigEndian.Uint64(b[8:])
		lh.Size = int64(binary.BigEndian.Uint64(b[16:]))
		lh.Mtime = int64(binary.BigEndian.Uint64(b[24:]))
		lh.Ctime = int64(binary.BigEndian.Uint64(b[32:]))
		copy(lh.Sum[:], b[40:72])
		m[[2]uint64{lh.Dev, lh.Ino}] = lh
	}
	return m, nil
}

// load reads the file once. c.mu is held.
func (c *LowerCache) load() error {
	if c.loaded {
		return nil
	}
	c.loaded = true
	var err error
	c.m, err = readLowerCache(c.path)
	return err
}

// get returns the hash kept for the project file at (dev, ino).
func (c *LowerCache) get(dev, ino uint64) (branch.LowerHash, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.load()
	lh, ok := c.m[[2]uint64{dev, ino}]
	return lh, ok, err
}

// add keeps hs, with what the file holds now.
func (c *LowerCache) add(hs []branch.LowerHash) error {
	if len(hs) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.load()
	changed := false
	for _, lh := range hs {
		if c.m[[2]uint64{lh.Dev, lh.Ino}] != lh {
			changed = true
			break
		}
	}
	if !changed {
		return nil // all taken from here
	}
	// What other stores added since it was read.
	if m, err := readLowerCache(c.path); err == nil {
		for k, lh := range m {
			if _, ok := c.m[k]; !ok {
				c.m[k] = lh
			}
		}
	}
	if len(c.m)+len(hs) > lowerCacheMax {
		c.m = map[[2]uint64]branch.LowerHash{}
	}
	for _, lh := range hs {
		c.m[[2]uint64{lh.Dev, lh.Ino}] = lh
	}
	b := make([]byte, 0, len(lowerCacheMagic)+len(c.m)*lowerCacheRecord)
	b = append(b, lowerCacheMagic...)
	for _, lh := range c.m {
		b = binary.BigEndian.AppendUint64(b, lh.Dev)
		b = binary.BigEndian.AppendUint64(b, lh.Ino)
		b = binary.BigEndian.AppendUint64(b, uint64(lh.Size))
		b = binary.BigEndian.AppendUint64(b, uint64(lh.Mtime))
		b = binary.BigEndian.AppendUint64(b, uint64(lh.Ctime))
		b = append(b, lh.Sum[:]...)
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".project-hashes-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
