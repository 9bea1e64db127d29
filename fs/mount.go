package fs

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs/fuseuring"
	"github.com/agentfs/agentfs/overlay"
)

// Options configure a mount.
type Options struct {
	Mountpoint string
	// View is the overlay every process sees (branch main).
	View *overlay.FS
	// Control serves ioctls on the control file; nil disables it.
	Control ctl.Handler
	// Passthrough asks for FUSE passthrough; it is used only when the
	// kernel grants it (root, kernel >= 6.9).
	Passthrough bool
	// WritebackCache asks the kernel to hold writes in its page cache
	// and send them later, in large WRITEs (at close, fsync, or when
	// its writeback runs): for mounts without passthrough, where every
	// write(2) would otherwise be a request. The kernel does not grant
	// passthrough to a mount with a writeback cache, so ask for one or
	// the other. See "Writeback cache" in doc.go for what it changes.
	WritebackCache bool
	// WriteBackAll, where set, is what a control request that reads the
	// files (a snapshot, a diff, an export, an apply) runs first instead
	// of the server's own WriteBack: the daemon's, which writes back
	// every mount it serves, since the writes a branch mount holds are
	// as much the request's as this mount's (agentfs exec -b mounts a
	// branch of its own, and export or apply of that branch may come
	// through this mount).
	WriteBackAll func()
	// IOURing asks for FUSE over io_uring (fuseuring): requests are
	// answered on the CPU that made them. It is used only when the
	// kernel offers it (Linux >= 6.14 with the fuse module's
	// enable_uring on); otherwise requests come over /dev/fuse.
	IOURing bool
	// AbortConnection aborts the mount's FUSE connection (fusectl). It
	// is called, without stat'ing the mountpoint, in the one case where
	// the kernel would otherwise hold every request: it granted io_uring
	// and no queue can start, nor tell it to give up.
	AbortConnection func()
	// AllowOther lets other users in (allow_other + default_permissions);
	// set it when running as root.
	AllowOther bool
	// FsName is shown as the source in /proc/mounts (e.g. the lower dir).
	FsName string
	// MountFlags are kernel mount flags for the mount: nosuid, nodev,
	// noexec and their opposites (nosuid and nodev are the default).
	MountFlags []string
	Debug      bool
	Logger     *slog.Logger

	// Activity, when set, receives an event for every successful
	// mutating operation (see "Activity" in activity.go); with
	// ActivityReads also for lookups, opens for reading and listings.
	Activity      Activity
	ActivityReads bool
}

// maxRead bounds READ and WRITE requests (max_read, max_write): half of
// the default largest pipe (fs.pipe-max-size), so that a READ and its
// header fit a pipe and can be spliced.
const maxRead = 512 << 10

// readahead is the mount's readahead: how far the kernel reads ahead
// of a program reading a file sequentially, in READs of maxRead. Cold
// reads of a 1 GiB project file (agentfs-bench --only read-cold, 3 to
// 6 rounds of 5 runs, ratio to native) took 1.06–1.32× at 1 MiB, 0.96–
// 1.10× at 4 MiB, 0.95–1.07× at 8 MiB and 1.17–1.19× at 16 MiB (also
// with the disk's own readahead raised from 8 to 16 MiB).
const readahead = 8 << 20

// Mount mounts the view at o.Mountpoint and serves it until unmounted.
func Mount(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		opts:          o,
		log:           o.Logger,
		uid:           uint32(os.Geteuid()),
		nodes:         map[uint64]*inode{},
		files:         map[uint64]*handle{},
		negatives:     map[uint64]map[string]struct{}{},
	}
	s.views = newBinder(s, o.View)
	mo := &fuse.MountOptions{
		AllowOther:           o.AllowOther,
		Options:              append([]string{"default_permissions"}, o.MountFlags...),
		FsName:               o.FsName,
		Name:                 "agentfs",
		DirectMount:          os.Geteuid() == 0,
		MaxWrite:             maxRead, // go-fuse makes max_read the same
		MaxReadAhead:         readahead,
		MaxBackground:        64,
		EnableSymlinkCaching: true,
		// agentfs drops cached data itself where it changes it (and
		// the lower watcher where others do): without this, the
		// kernel refetches attributes before reads and listings.
		ExplicitDataCacheControl: true,
		ExtraCapabilities:        fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2,
		Debug:                    o.Debug,
		Logger:                   log.New(debugWriter{o.Logger}, "", 0),
	}
	if o.WritebackCache {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	if o.IOURing {
		if err := fuseuring.Probe(); err != nil {
			s.ringWhy = err.Error()
		} else {
			s.askRing = true
			mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
		}
	}
	// The watch exists before the first LOOKUP, which adds to it; it
	// only ever sends notifications about what was added.
	var err error
	if s.watch, err = startLowerWatch(s); err != nil {
		s.log.Warn("lower directory edits made from outside will show late", "err", err)
	}
	srv, err := s.newServer(o.Mountpoint, mo)
	if err != nil {
		s.watch.close()
		return nil, err
	}
	s.srv = srv
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount() // WaitMount's error says what failed; there may be nothing to unmount
		s.watch.close()
		return nil, err
	}
	s.setReadahead(o.Mountpoint, mo.MaxReadAhead)
	s.watch.add(o.View.Root().ID, o.View.Root())
	return s, nil
}

// newServer mounts and returns go-fuse's server. go-fuse's direct mount
// (as root) opens /dev/fuse without O_CLOEXEC, so a process the daemon
// started meanwhile (the hashing process, as nobody, starts in the
// background) would inherit the connection: it could read the kernel's
// requests and answer them, and would keep the mount alive after the
// daemon dies. The direct mount is therefore made with fork held off
// (syscall.ForkLock, as Go does for its own descriptors) until the
// descriptor is marked close-on-exec; it is strict there, since the
// fallback to fusermount forks. If it fails, the mount goes through
// fusermount (whose descriptor go-fuse marks itself).
func (s *Server) newServer(mnt string, mo *fuse.MountOptions) (*fuse.Server, error) {
	if mo.DirectMount {
		strict := *mo
		strict.DirectMountStrict = true
		syscall.ForkLock.RLock()
		srv, err := fuse.NewServer(s, mnt, &strict)
		if err == nil {
			if cerr := closeOnExec(srv); cerr != nil {
				// Only a go-fuse whose layout changed gets here
				// (TestFuseDescriptorCloseOnExec fails then).
				s.log.Error("the /dev/fuse descriptor stays open across exec: processes the daemon starts inherit it", "err", cerr)
			}
		}
		syscall.ForkLock.RUnlock()
		if err == nil {
			return srv, nil
		}
		s.log.Debug("direct mount failed; mounting through fusermount", "err", err)
		// Not again directly: outside the lock, its descriptor would
		// be open across exec.
		viaFusermount := *mo
		viaFusermount.DirectMount = false
		return fuse.NewServer(s, mnt, &viaFusermount)
	}
	return fuse.NewServer(s, mnt, mo)
}

// startQueues starts the io_uring queues; tests replace it to make
// queues fail.
var startQueues = fuseuring.Start

// startRing moves the connection to io_uring queues. Until every queue
// is registered the kernel keeps using /dev/fuse, and if one cannot be,
// it goes on doing so: the mount works either way, only slower.
func (s *Server) startRing(maxWrite int) {
	dev, err := fuseDevFd(s.srv)
	if err != nil {
		s.log.Warn("requests stay on /dev/fuse", "err", err)
		s.ringWhy = err.Error()
		return
	}
	s.rel = newReleaser(func(in *fuse.ReleaseIn) { s.Release(nil, in) }, lingerFor(runtime.NumCPU()))
	r, err := startQueues(dev, maxWrite, ringHandler{s}) // takes dev
	if err != nil {
		s.rel.close() // the queues are gone: no RELEASE comes this way
	}
	if errors.Is(err, fuseuring.ErrStuck) {
		s.log.Error("aborting the FUSE connection", "err", err)
		s.ringWhy = err.Error()
		if s.opts.AbortConnection != nil {
			s.opts.AbortConnection()
		}
		return
	}
	if err != nil {
		s.log.Warn("requests stay on /dev/fuse", "err", err)
		s.ringWhy = err.Error()
		return
	}
	s.ring = r
	// Each queue's thread waits for requests in io_uring_enter, a
	// system call that keeps its P until the runtime's monitor takes
	// it back, which can take milliseconds. Without a P for each of
	// them, the goroutines a request wakes (badger's writer, the pool)
	// would wait for that.
	// (Queues of CPUs that are possible but not online wait without
	// ever being woken; they need none.) The releaser keeps a P while
	// it lingers: one more.
	extra := min(r.Queues(), runtime.NumCPU())
	if s.rel.linger > 0 {
		extra++
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + extra)
}

// Transport says how requests reach the daemon: "io_uring (N queues)"
// or "/dev/fuse".
func (s *Server) Transport() string {
	switch {
	case s.ring != nil:
		return fmt.Sprintf("io_uring (%d queues)", s.ring.Queues())
	case s.ringWhy != "":
		return "/dev/fuse (io_uring: " + s.ringWhy + ")"
	case s.opts.IOURing:
		return "/dev/fuse (the kernel offers no io_uring)"
	}
	return "/dev/fuse"
}

// setReadahead raises the readahead of the mount's backing device to
// bytes. The kernel caps a FUSE mount's readahead at the default of
// 128 KiB whatever INIT asks for, so a cold sequential read of a
// project file would reach agentfs as 128 KiB requests, each waiting
// for the lower disk in turn. The device is the mount's own (it goes
// with it); only root may write the knob, and without it reads stay
// correct, only slower.
func (s *Server) setReadahead(mountpoint string, bytes int) {
	// Only a FUSE mount's own device (an anonymous one, major 0): never
	// the disk below a mountpoint that is not (or no longer) ours.
	const fuseMagic = 0x65735546
	var fst unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Statfs(mountpoint, &fst); err != nil || fst.Type != fuseMagic {
		s.log.Debug("readahead left at the default: not a FUSE mount", "err", err)
		return
	}
	if err := unix.Stat(mountpoint, &st); err != nil || unix.Major(st.Dev) != 0 {
		s.log.Debug("readahead left at the default", "err", err)
		return
	}
	knob := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(knob, []byte(strconv.Itoa(bytes>>10)), 0); err != nil {
		s.log.Debug("readahead left at the default", "err", err)
	}
}

type debugWriter struct{ l *slog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(p))
	return len(p), nil
}

// Wait returns when the file system is unmounted.
func (s *Server) Wait() {
	s.srv.Wait()
	if s.ring != nil {
		s.ring.Wait()
		s.rel.close()
	}
	s.watch.close()
	s.views.close()
}

// Aside has fn run by the releaser, off the CPU of the program whose
// request a queue thread answers, as RELEASEs are: it returns the
// function that asks for a run of fn (which never blocks), or nil where
// requests come over /dev/fuse, with no releaser. For
// branch.Store.HandOffWith. Call it once, after Mount.
func (s *Server) Aside(fn func()) func() {
	if s.ring == nil || s.rel == nil {
		return nil
	}
	s.rel.setSide(fn)
	return s.rel.kickSide
}

// Unmount unmounts the file system.
func (s *Server) Unmount() error { return s.srv.Unmount() }
